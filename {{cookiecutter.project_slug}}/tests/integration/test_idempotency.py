"""Opt-in idempotency (Powertools, DynamoDB from moto's server): a message delivered twice
has its side effect done once."""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer
from pydantic import BaseModel

from {{ cookiecutter.package_name }}.runtime import Job, Router
from {{ cookiecutter.package_name }}.settings import load_settings

from ..support import PACKAGE, REGION, Sqs, env_for, free_port, running_worker, wait_for


@pytest.fixture(scope="module")
def dynamodb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    previous = os.environ.get("AWS_ENDPOINT_URL_DYNAMODB")
    os.environ["AWS_ENDPOINT_URL_DYNAMODB"] = endpoint  # DynamoDB to moto; SQS stays on LocalStack
    table = os.environ.setdefault("IDEMPOTENCY_TABLE", load_settings({}).settings.idempotency_table)
    boto3.client("dynamodb", endpoint_url=endpoint, region_name=REGION).create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    yield endpoint
    server.stop()
    if previous is None:
        os.environ.pop("AWS_ENDPOINT_URL_DYNAMODB", None)


class Charge(BaseModel):
    charge_id: str
    cents: int


def test_duplicate_deliveries_do_the_side_effect_once(
    sqs: Sqs, localstack_endpoint: str, health_file: str, dynamodb: str
) -> None:
    # Imported once the DynamoDB endpoint is set: the persistence layer makes its client then.
    once = importlib.import_module(f"{PACKAGE}.idempotency").once
    charged: list[str] = []

    @once(key="charge_id")
    def charge(task: Charge) -> dict[str, Any]:
        charged.append(task.charge_id)
        return {"charged": task.cents}

    results: list[dict[str, Any]] = []
    queue = sqs.create()
    router = Router()

    @router.handler(queue.name, payload=Charge)
    async def handle(job: Job[Charge]) -> None:
        results.append(await asyncio.to_thread(charge, task=job.payload))

    # The same charge three times (a producer retry, a redelivery), and another one.
    sqs.send(queue, [{"charge_id": "c-1", "cents": 500}] * 3 + [{"charge_id": "c-2", "cents": 7}])

    async def scenario() -> None:
        async with running_worker(env_for(localstack_endpoint, queue.name, health_file, WORKER_CONCURRENCY=1), router):
            await wait_for(lambda: len(results) == 4, 60)

    asyncio.run(scenario())
    assert sorted(charged) == ["c-1", "c-2"]
    assert sorted(r["charged"] for r in results) == [7, 500, 500, 500]


def test_the_example_handler_records_each_task_once(dynamodb: str) -> None:
    handlers = importlib.import_module(f"{PACKAGE}.handlers")
    task, record_completion = handlers.Task, handlers.record_completion
    first = record_completion(task=task(task_id="t-1"))
    again = record_completion(task=task(task_id="t-1"))
    assert first == again == {"task_id": "t-1"}
    items = boto3.client("dynamodb", endpoint_url=dynamodb, region_name=REGION).scan(
        TableName=os.environ["IDEMPOTENCY_TABLE"]
    )["Items"]
    records = [i for i in items if "record_completion" in i["id"]["S"]]
    assert len(records) == 1, "one record per key, in the configured table"
    assert records[0]["status"]["S"] == "COMPLETED"
    assert "in_progress_expiration" in records[0], "a crash mid-call blocks retries only until the job timeout"
