"""Operator tasks that are not the worker loop: creating queues (more in `dlq_tools`)."""

from __future__ import annotations

import json

from botocore.exceptions import ClientError

from ..settings import WorkerConfig
from .sqs import SQSClient, create_client

RETENTION_SECONDS = 14 * 24 * 3600  # the DLQ keeps messages as long as SQS allows


def dlq_name(queue: str) -> str:
    base = queue.removesuffix(".fifo")
    return f"{base}-dlq.fifo" if queue.endswith(".fifo") else f"{base}-dlq"


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
    return report
