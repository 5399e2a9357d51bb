"""Opt-in idempotency (Powertools, DynamoDB from moto's server): a message delivered three
times has its side effect recorded once.

The handler and its side effect are this file's own, not handlers.py's: replacing the
example handler with yours leaves this test as it is (and `make upgrade` keeps it in step
with idempotency.py)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import boto3
from pydantic import BaseModel
from sqs_worker_engine import Job, Router
from sqs_worker_engine.testing import run_handler

from {{ cookiecutter.package_name }}.idempotency import IdempotencySettings, once

router = Router()
QUEUE = "idempotency-check"
SENT: list[str] = []


class Receipt(BaseModel):
    receipt_id: str


@once(key="receipt_id")
def send_receipt(task: Receipt) -> dict[str, str]:
    """Stands for the side effect that must not repeat (a charge, an email)."""
    SENT.append(task.receipt_id)
    return {"receipt_id": task.receipt_id}


@router.handler(QUEUE, payload=Receipt)
async def handle_receipt(job: Job[Receipt]) -> None:
    await asyncio.to_thread(send_receipt, task=job.payload)


def receipt_records(endpoint: str) -> list[dict[str, Any]]:
    table = IdempotencySettings().table
    client = boto3.client("dynamodb", endpoint_url=endpoint, region_name="{{ cookiecutter.aws_region }}")
    return [i for i in client.scan(TableName=table)["Items"] if "send_receipt" in i["id"]["S"]]


def test_the_side_effect_runs_once_per_key_however_often_it_is_delivered(dynamodb: str) -> None:
    before = receipt_records(dynamodb)
    receipt = Receipt(receipt_id=f"r-{uuid.uuid4().hex}")
    for receive_count in (1, 2, 3):  # a redelivery after a crash, a duplicate from the producer
        assert run_handler(router, QUEUE, receipt, receive_count=receive_count).outcome == "success"
    assert SENT.count(receipt.receipt_id) == 1, "the side effect ran once"
    assert send_receipt(task=receipt) == {"receipt_id": receipt.receipt_id}, "a repeat returns the recorded result"
    new = [r for r in receipt_records(dynamodb) if r not in before]
    assert len(new) == 1, "one record per key, in the configured table"
    assert new[0]["status"]["S"] == "COMPLETED"
    assert "in_progress_expiration" in new[0], "a crash mid-call blocks retries only until the job timeout"
