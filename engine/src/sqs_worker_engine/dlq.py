"""Dead-lettering a message the worker knows cannot succeed, with the reason attached."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

from .sqs import SQSClient

# SQS allows 10 message attributes; three are ours, originals keep the rest.
ERROR_ATTRIBUTES = ("x-error-type", "x-error-message", "x-error-context")
MAX_ATTRIBUTES = 10
MAX_ERROR_MESSAGE = 1024


def dead_letter_request(
    message: dict[str, Any],
    dlq_url: str,
    source_queue: str,
    error: BaseException,
    worker_id: str,
    fifo: bool,
) -> dict[str, Any]:
    """The SendMessage arguments that move `message` to the DLQ with its error recorded."""
    original: dict[str, Any] = dict(message.get("MessageAttributes") or {})
    for name in ERROR_ATTRIBUTES:
        original.pop(name, None)  # a redriven message failing again: record the new error
    keep = dict(list(original.items())[: MAX_ATTRIBUTES - len(ERROR_ATTRIBUTES)])
    overflow = {k: _attr_value(v) for k, v in original.items() if k not in keep}
    attrs = message.get("Attributes") or {}
    context: dict[str, Any] = {
        "source_queue": source_queue,
        "message_id": message.get("MessageId"),
        "receive_count": int(attrs.get("ApproximateReceiveCount", "1")),
        "failed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "worker_id": worker_id,
    }
    if overflow:
        context["overflow_attributes"] = overflow
    keep["x-error-type"] = {"DataType": "String", "StringValue": type(error).__name__}
    keep["x-error-message"] = {
        "DataType": "String",
        "StringValue": (str(error) or type(error).__name__)[:MAX_ERROR_MESSAGE],
    }
    keep["x-error-context"] = {"DataType": "String", "StringValue": json.dumps(context, default=str)}
    request: dict[str, Any] = {"QueueUrl": dlq_url, "MessageBody": message["Body"], "MessageAttributes": keep}
    if fifo:
        request["MessageGroupId"] = attrs.get("MessageGroupId", "dead-letter")
        request["MessageDeduplicationId"] = str(message["MessageId"])[:128]
    return request


async def send_to_dlq(client: SQSClient, request: dict[str, Any]) -> str:
    resp = await client.send_message(**request)
    return str(resp["MessageId"])


def _attr_value(value: dict[str, Any]) -> str:
    if "StringValue" in value:
        return str(value["StringValue"])
    if "BinaryValue" in value:
        raw = value["BinaryValue"]
        return base64.b64encode(raw if isinstance(raw, bytes) else bytes(raw)).decode()
    return ""
