"""Opt-in idempotency (Powertools, DynamoDB from moto's server): a task delivered three
times has its side effect recorded once."""

from __future__ import annotations

import uuid
from typing import Any

import boto3
from sqs_worker_engine.testing import run_handler

from {{ cookiecutter.package_name }}.handlers import QUEUE, Task, record_completion, router
from {{ cookiecutter.package_name }}.idempotency import IdempotencySettings


def completion_records(endpoint: str) -> list[dict[str, Any]]:
    table = IdempotencySettings().table
    client = boto3.client("dynamodb", endpoint_url=endpoint, region_name="{{ cookiecutter.aws_region }}")
    return [i for i in client.scan(TableName=table)["Items"] if "record_completion" in i["id"]["S"]]


def test_the_side_effect_runs_once_per_task_however_often_it_is_delivered(dynamodb: str) -> None:
    before = completion_records(dynamodb)
    task = Task(task_id=f"t-{uuid.uuid4().hex}")
    for receive_count in (1, 2, 3):  # a redelivery after a crash, a duplicate from the producer
        assert run_handler(router, QUEUE, task, receive_count=receive_count).outcome == "success"
    assert record_completion(task=task) == {"task_id": task.task_id}, "a repeat returns the recorded result"
    new = [r for r in completion_records(dynamodb) if r not in before]
    assert len(new) == 1, "one record per key, in the configured table"
    assert new[0]["status"]["S"] == "COMPLETED"
    assert "in_progress_expiration" in new[0], "a crash mid-call blocks retries only until the job timeout"
