"""The SQS client and what the worker needs to know about each queue."""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

if TYPE_CHECKING:
    from types_aiobotocore_sqs import SQSClient as SQSClient
else:
    SQSClient = Any

# Codes that mean "this receipt handle no longer names a message you hold": AWS says
# ReceiptHandleIsInvalid / MessageNotInflight, LocalStack InvalidParameterValue.
GONE_CODES = frozenset(
    {
        "ReceiptHandleIsInvalid",
        "MessageNotInflight",
        "AWS.SimpleQueueService.MessageNotInflight",
        "InvalidParameterValue",
        "InvalidParameterValueException",
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueDoesNotExist",
    }
)
NOT_FOUND_CODES = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})


def create_client(
    region: str,
    endpoint_url: str | None,
    max_connections: int,
    read_timeout: float = 40.0,
) -> AbstractAsyncContextManager[SQSClient]:
    """One client per process. The pool is sized by the caller: every long poll holds a
    connection for up to 20 s, and heartbeats and deletes must never queue behind them."""
    config = AioConfig(
        max_pool_connections=max_connections,
        connect_timeout=5,
        read_timeout=read_timeout,
        retries={"mode": "standard", "total_max_attempts": 3},
        tcp_keepalive=True,
    )
    return get_session().create_client("sqs", region_name=region, endpoint_url=endpoint_url, config=config)


@dataclass(frozen=True)
class QueueInfo:
    name: str
    url: str
    arn: str
    fifo: bool
    visibility_timeout: int
    max_receive_count: int | None
    dlq_url: str | None


async def describe_queue(client: SQSClient, name: str, url: str | None = None) -> QueueInfo:
    """Resolve a queue and its DLQ (from the RedrivePolicy)."""
    if url is None:
        url = (await client.get_queue_url(QueueName=name))["QueueUrl"]
    attrs = (await client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"]))["Attributes"]
    max_receive: int | None = None
    dlq_url: str | None = None
    policy = attrs.get("RedrivePolicy")
    if policy:
        redrive = json.loads(policy)
        max_receive = int(redrive["maxReceiveCount"])
        # arn:<partition>:sqs:<region>:<account>:<name>. The DLQ lives in the queue owner's
        # account, which need not be the worker's (a queue shared through its policy).
        *_, account, dlq_name = str(redrive["deadLetterTargetArn"]).split(":")
        dlq_url = (await client.get_queue_url(QueueName=dlq_name, QueueOwnerAWSAccountId=account))["QueueUrl"]
    return QueueInfo(
        name=name,
        url=url,
        arn=attrs.get("QueueArn", ""),
        fifo=attrs.get("FifoQueue", "false") == "true",
        visibility_timeout=int(attrs.get("VisibilityTimeout", "30")),
        max_receive_count=max_receive,
        dlq_url=dlq_url,
    )


def error_code(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", "ClientError"))
    if isinstance(exc, BotoCoreError):
        return type(exc).__name__
    return type(exc).__name__


def entry_gone(entry: Mapping[str, Any]) -> bool:
    """A failed batch entry whose message we no longer hold (retrying cannot help)."""
    return str(entry.get("Code", "")) in GONE_CODES
