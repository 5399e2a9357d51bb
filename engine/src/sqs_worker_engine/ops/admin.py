"""Operator tasks that are not the worker loop: creating queues, looking into the DLQ."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from ..base.limits import MAX_RETENTION_SECONDS as RETENTION_SECONDS  # the DLQ keeps messages as long as SQS allows
from ..base.limits import dlq_name
from ..base.sqs import SQSClient, create_client, describe_queue
from ..formats.dlq import receive_whole
from ..formats.offload import PayloadStore
from ..process.settings import WorkerConfig


async def ensure_queue(client: SQSClient, name: str, attributes: dict[str, str]) -> str:
    """CreateQueue, or bring an existing queue's attributes in line (idempotent)."""
    try:
        return (await client.create_queue(QueueName=name, Attributes=attributes))["QueueUrl"]  # type: ignore[arg-type]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("QueueAlreadyExists", "QueueNameExists"):
            raise
    url = (await client.get_queue_url(QueueName=name))["QueueUrl"]
    mutable = {k: v for k, v in attributes.items() if k not in ("FifoQueue",)}
    await client.set_queue_attributes(QueueUrl=url, Attributes=mutable)  # type: ignore[arg-type]
    return url


async def queue_arn(client: SQSClient, url: str) -> str:
    attrs = await client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return attrs["Attributes"]["QueueArn"]


async def bootstrap_queues(config: WorkerConfig, max_receive_count: int) -> list[str]:
    s = config.settings
    report = []
    async with create_client(s.aws_region, s.aws_endpoint_url, 4) as client:
        for q in config.queues:
            common = {"SqsManagedSseEnabled": "true"}
            if q.fifo:
                common["FifoQueue"] = "true"
            dlq = dlq_name(q.name)
            dlq_url = await ensure_queue(client, dlq, {**common, "MessageRetentionPeriod": str(RETENTION_SECONDS)})
            dlq_arn = await queue_arn(client, dlq_url)
            url = await ensure_queue(
                client,
                q.name,
                {
                    **common,
                    "VisibilityTimeout": str(q.visibility_timeout_seconds),
                    "ReceiveMessageWaitTimeSeconds": "20",
                    "RedrivePolicy": json.dumps(
                        {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)}
                    ),
                },
            )
            arn = await queue_arn(client, url)
            allow = json.dumps({"redrivePermission": "byQueue", "sourceQueueArns": [arn]})
            await client.set_queue_attributes(QueueUrl=dlq_url, Attributes={"RedriveAllowPolicy": allow})
            report.append(f"queue {q.name}: {url} (DLQ {dlq} after {max_receive_count} receives)")
    if s.large_payload_bucket:
        report.append(await ensure_bucket(s.aws_region, s.aws_endpoint_url, s.large_payload_bucket))
    return report


async def ensure_bucket(region: str, endpoint_url: str | None, bucket: str) -> str:
    """The large-payload bucket (WORKER_LARGE_PAYLOAD_BUCKET), for LocalStack and first
    steps; in AWS, deploy/aws/queues.yaml creates it with its lifecycle rule (idempotent)."""
    store = PayloadStore(region, endpoint_url)
    try:
        s3 = await store.client()
        try:
            await s3.head_bucket(Bucket=bucket)
            return f"bucket {bucket}: exists"
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
                raise
        try:
            args: dict[str, Any] = {"Bucket": bucket}
            if region != "us-east-1":  # S3 refuses a constraint naming its default region
                args["CreateBucketConfiguration"] = {"LocationConstraint": region}
            await s3.create_bucket(**args)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise
            return f"bucket {bucket}: exists"
        return f"bucket {bucket}: created"
    finally:
        await store.close()


async def resolve_dlq(client: SQSClient, queue: str) -> tuple[str, str, str, str, bool]:
    """(source url, source arn, dlq url, dlq arn, fifo) from the queue's RedrivePolicy."""
    info = await describe_queue(client, queue)
    if info.dlq_url is None:
        raise LookupError(f"queue {queue!r} has no RedrivePolicy, so no dead-letter queue")
    return info.url, info.arn, info.dlq_url, await queue_arn(client, info.dlq_url), info.fifo


async def peek(client: SQSClient, dlq_url: str, count: int) -> list[dict[str, Any]]:
    """Look at up to `count` DLQ messages without taking them (visibility 0)."""
    seen: dict[str, dict[str, Any]] = {}
    for _ in range(max(3, count // 5)):
        messages = await receive_whole(client, dlq_url, hold=0, count=min(10, count))
        for message in messages:
            seen.setdefault(message["MessageId"], dict(message))
        if len(seen) >= count or not messages:
            break
    return list(seen.values())[:count]


async def find(client: SQSClient, dlq_url: str, ids: set[str], hold: int = 60) -> list[dict[str, Any]]:
    """The DLQ messages with these ids, received and hidden for `hold` seconds for the
    caller to delete or copy. The others received on the way stay hidden while the search
    goes on (so that it moves forward), then are handed back at once. The search ends when
    every id is found, or when two receives in a row bring nothing not seen yet."""
    found: dict[str, dict[str, Any]] = {}
    passed: dict[str, str] = {}  # message id -> receipt handle, of the messages not asked for
    idle = 0
    try:
        while len(found) < len(ids) and idle < 2:
            new = False
            for message in await receive_whole(client, dlq_url, hold):
                message_id = message["MessageId"]
                if message_id in ids:
                    new = new or message_id not in found
                    found[message_id] = dict(message)
                else:
                    new = new or message_id not in passed
                    passed[message_id] = message["ReceiptHandle"]
            idle = 0 if new else idle + 1
    finally:
        handles = list(passed.values())
        for start in range(0, len(handles), 10):
            await client.change_message_visibility_batch(
                QueueUrl=dlq_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 0}
                    for i, h in enumerate(handles[start : start + 10])
                ],
            )
    return list(found.values())
