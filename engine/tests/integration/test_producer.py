"""The producer against LocalStack, as a generated README's "Sending from your code" shows it:
on a FIFO queue without content-based deduplication (what `bootstrap` creates), sends with
no deduplication id work; the queue's own deduplication is left to it where it has one; and
the queue's own MaximumMessageSize, not SQS's largest, bounds what is sent whole."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import boto3
import pytest
from pydantic import BaseModel

from sqs_worker_engine.ops.producer import Message, Producer, SyncProducer, open_producer

from ..support import REGION, Sqs


class Task(BaseModel):
    task_id: str
    work_ms: int = 0


def fifo_queue(sqs: Sqs, **attributes: str) -> str:
    name = f"p-{uuid.uuid4().hex[:12]}.fifo"
    url = str(sqs.client.create_queue(QueueName=name, Attributes={"FifoQueue": "true", **attributes})["QueueUrl"])
    sqs.track(url)
    return name


def bodies(sqs: Sqs, name: str) -> list[dict[str, Any]]:
    """Every message of the queue, each deleted as it comes (a FIFO group gives out its next
    only once the one before is gone)."""
    url = sqs.client.get_queue_url(QueueName=name)["QueueUrl"]
    found: list[dict[str, Any]] = []
    empty = 0
    while empty < 2:
        messages = sqs.client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
            "Messages", []
        )
        empty = 0 if messages else empty + 1
        for m in messages:
            found.append(json.loads(m["Body"]))
            sqs.client.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    return found


def test_the_readmes_fifo_example_sends_without_deduplication_ids(sqs: Sqs, localstack_endpoint: str) -> None:
    name = fifo_queue(sqs)  # FifoQueue alone: SQS refuses a send without MessageDeduplicationId
    attributes = sqs.attributes(sqs.client.get_queue_url(QueueName=name)["QueueUrl"])
    assert attributes.get("ContentBasedDeduplication", "false") == "false"
    todays_tasks = [Task(task_id=f"t-{i}") for i in range(3, 15)]

    async def send_tasks() -> None:
        async with open_producer(name, model=Task, region=REGION, endpoint_url=localstack_endpoint) as tasks:
            await tasks.send(Task(task_id="t-1"), group_id="customer-7", attributes={"tenant": "acme"})
            result = await tasks.send_batch([Message(t, group_id=t.task_id) for t in todays_tasks])
            assert result.ok, result.failed
            # The same payload twice is two messages, as on a standard queue.
            await tasks.send(Task(task_id="t-1"), group_id="customer-7")
            # An id of the owner's own deduplicates as SQS does.
            for _ in range(2):
                await tasks.send(Task(task_id="t-once"), group_id="customer-7", dedup_id="order-77")

    asyncio.run(send_tasks())
    with SyncProducer.open(name, model=Task, region=REGION, endpoint_url=localstack_endpoint) as tasks:
        tasks.send({"task_id": "t-2"}, group_id="customer-7")
    sent = sorted(b["task_id"] for b in bodies(sqs, name))
    assert sent == sorted(["t-1", "t-1", "t-once", "t-2"] + [t.task_id for t in todays_tasks])


def test_a_queue_with_content_based_deduplication_keeps_it(sqs: Sqs, localstack_endpoint: str) -> None:
    name = fifo_queue(sqs, ContentBasedDeduplication="true")
    with SyncProducer.open(name, region=REGION, endpoint_url=localstack_endpoint) as producer:
        for _ in range(3):
            producer.send({"task_id": "same"}, group_id="g")
    assert bodies(sqs, name) == [{"task_id": "same"}], "the producer's own ids would have made three"


def test_the_queues_own_maximum_message_size_bounds_what_is_sent_whole(sqs: Sqs, localstack_endpoint: str) -> None:
    name = f"p-{uuid.uuid4().hex[:12]}"
    url = sqs.client.create_queue(QueueName=name, Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    sqs.track(url)
    s3: Any = boto3.client("s3", endpoint_url=localstack_endpoint, region_name=REGION)
    bucket = f"p-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    big = {"task_id": "big", "pad": "p" * 2000}

    async def send() -> None:
        producer: Producer[Any]
        async with open_producer(name, region=REGION, endpoint_url=localstack_endpoint) as producer:
            with pytest.raises(ValueError, match=r"2\d\d\d bytes, over the queue's limit of 1024 bytes"):
                await producer.send(big)
            await producer.send({"task_id": "small"})
        # With a bucket, what the queue cannot take goes through S3, under the default threshold.
        async with open_producer(name, region=REGION, endpoint_url=localstack_endpoint, bucket=bucket) as producer:
            await producer.send(big)

    try:
        asyncio.run(send())
        received = sqs.receive_all(url)
        assert json.loads(received[0]["Body"]) == {"task_id": "small"}
        assert len(received) == 2 and "s3BucketName" in received[1]["Body"], received
    finally:
        for item in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=item["Key"])
        s3.delete_bucket(Bucket=bucket)
