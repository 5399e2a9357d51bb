"""Dead-lettering a message the worker knows cannot succeed, with the reason attached."""

from __future__ import annotations

import base64
import json
import math
import time
from typing import Any

from .offload import SIZE_ATTRIBUTES
from .sqs import SqsApi

# SQS allows 10 message attributes; three are ours, originals keep the rest (a large
# payload's size attribute first, then the trace context, then in their order).
TRACE_ATTRIBUTES = ("traceparent", "tracestate")
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
    why: str = "",
    trace: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The SendMessage arguments that move `message` to the DLQ with its error recorded.

    The trace context travels with it: the producer's `traceparent`/`tracestate` attributes
    and `AWSTraceHeader`, so a redriven message continues the same trace; `trace` (the
    failing job's trace and span ids) goes into the error context."""
    original: dict[str, Any] = dict(message.get("MessageAttributes") or {})
    for name in ERROR_ATTRIBUTES:
        original.pop(name, None)  # a redriven message failing again: record the new error
    # An offloaded payload's size attribute goes first: without it the pointer in the body
    # is not recognised, and the redriven message could not be read.
    ordered = sorted(
        original.items(), key=lambda item: (item[0] not in SIZE_ATTRIBUTES, item[0] not in TRACE_ATTRIBUTES)
    )
    keep = dict(ordered[: MAX_ATTRIBUTES - len(ERROR_ATTRIBUTES)])
    overflow = {k: _attr_value(v) for k, v in original.items() if k not in keep}
    attrs = message.get("Attributes") or {}
    context: dict[str, Any] = {
        "source_queue": source_queue,
        "message_id": message.get("MessageId"),
        "receive_count": int(attrs.get("ApproximateReceiveCount", "1")),
        "failed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "worker_id": worker_id,
    }
    if why:
        context["why"] = why[:MAX_ERROR_MESSAGE]
    if trace:
        context["trace"] = trace
    if overflow:
        context["overflow_attributes"] = overflow
    keep["x-error-type"] = {"DataType": "String", "StringValue": type(error).__name__}
    keep["x-error-message"] = {
        "DataType": "String",
        "StringValue": (str(error) or type(error).__name__)[:MAX_ERROR_MESSAGE],
    }
    keep["x-error-context"] = {"DataType": "String", "StringValue": json.dumps(context, default=str)}
    request: dict[str, Any] = {"QueueUrl": dlq_url, "MessageBody": message["Body"], "MessageAttributes": keep}
    xray = attrs.get("AWSTraceHeader")
    if xray:  # a system attribute: it counts against neither the size nor the attribute quota
        request["MessageSystemAttributes"] = {"AWSTraceHeader": {"DataType": "String", "StringValue": str(xray)}}
    if fifo:
        request["MessageGroupId"] = attrs.get("MessageGroupId", "dead-letter")
        request["MessageDeduplicationId"] = str(message["MessageId"])[:128]
    return request


def fit_to_size(request: dict[str, Any], max_size: int) -> dict[str, Any] | None:
    """The request, trimmed to fit the DLQ's MaximumMessageSize (SQS counts the body and
    every attribute's name, type and value), or None if even the bare message does not.

    The body and the original attributes are never touched: they are the message. What
    gives way is ours, in this order: the context, then the error message; the error
    type stays (it is short and says the most)."""
    attributes = dict(request.get("MessageAttributes") or {})
    body_size = len(str(request["MessageBody"]).encode())

    def size() -> int:
        return body_size + attributes_size(attributes)

    if size() > max_size and "x-error-context" in attributes:
        del attributes["x-error-context"]
    if size() > max_size and "x-error-message" in attributes:
        text = str(attributes["x-error-message"]["StringValue"])
        room = len(text.encode()) - (size() - max_size)
        if room >= 16:
            attributes["x-error-message"] = {"DataType": "String", "StringValue": _truncate(text, room)}
        else:
            del attributes["x-error-message"]
    if size() > max_size:
        attributes.pop("x-error-type", None)
    if size() > max_size:
        return None
    return {**request, "MessageAttributes": attributes}


def _truncate(text: str, limit: int) -> str:
    """`text` cut to at most `limit` bytes of UTF-8, marked as cut."""
    marker = "..."
    cut = text.encode()[: max(0, limit - len(marker))].decode(errors="ignore")
    return cut + marker


async def send_to_dlq(client: SqsApi, request: dict[str, Any]) -> str:
    resp = await client.send_message(**request)
    return str(resp["MessageId"])


def _attr_value(value: dict[str, Any]) -> str:
    if "StringValue" in value:
        return str(value["StringValue"])
    if "BinaryValue" in value:
        raw = value["BinaryValue"]
        return base64.b64encode(raw if isinstance(raw, bytes) else bytes(raw)).decode()
    return ""


def attributes_size(attributes: dict[str, Any]) -> int:
    """What message attributes add to a message's size, as SQS counts it: each name, type
    and value."""
    total = 0
    for name, value in attributes.items():
        total += len(name.encode()) + len(str(value.get("DataType", "")).encode())
        if "StringValue" in value:
            total += len(str(value["StringValue"]).encode())
        elif "BinaryValue" in value:
            raw = value["BinaryValue"]
            total += len(raw) if isinstance(raw, bytes | bytearray) else math.ceil(len(str(raw)) * 3 / 4)
    return total
