"""Dead-lettering a message the worker knows cannot succeed, with the reason attached, and
reading such a copy back: who wrote what, and the message as it was before.

Whose attributes are these? A producer can set any attribute, `x-error-*` included, and a
message SQS itself dead-lettered (maxReceiveCount: a crash, a lost lease) reaches the DLQ
with them untouched. Two rules keep the worker's record unforgeable without a key:
- On a copy the worker sends, the reserved names (`ERROR_ATTRIBUTES`) are always the
  worker's: a producer attribute that bears one is moved aside into the context's
  `attributes`, with every other original that found no room, and restored by `redrive`.
- SQS marks what it moves itself with the system attribute `DeadLetterQueueSourceArn`,
  which no sender can set; the worker sends its copies with SendMessage, so they never
  carry it. A DLQ message with it is SQS's: every attribute on it is the producer's.
So only a principal allowed to SendMessage to the DLQ itself (the worker's role) can write
what `dlq peek` shows as the worker's reason.

A message the worker dead-lettered comes back as it was first sent, whichever route moves
it: `redrive --copy` unfolds the record on the way back; SQS's move task brings the copy
back as it is, and the worker unfolds it for the handler (`original_attributes`, which
`job.message_attributes` is). A producer can forge a record as well as the worker can
write one, so unfolding must give it nothing it could not set directly: a record is read
only where what it unfolds is what SQS lets a message carry (at most 10 attributes, names
and types SQS takes), and the worker's own reading of a message (its trace parent, a
payload pointer's size attribute) is of the attributes it carries, never of a record.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import time
from collections.abc import Mapping
from typing import Any

from ..base.sqs import SqsApi
from .offload import SIZE_ATTRIBUTES

# SQS allows 10 message attributes; three are ours, originals keep the rest (a large
# payload's size attribute first, then the trace context, then in their order).
TRACE_ATTRIBUTES = ("traceparent", "tracestate")
ERROR_ATTRIBUTES = ("x-error-type", "x-error-message", "x-error-context")
MAX_ATTRIBUTES = 10
MAX_ERROR_MESSAGE = 1024
WRITER = "sqs-worker-engine"  # the context's `written_by`: a copy in this layout
# SQS's rules for a message attribute (SendMessage API reference): a name of 1-256 of
# A-Z a-z 0-9 _ - ., not starting or ending with ".", no "..", not "AWS." or "Amazon."
# in any case; a type of String, Number or Binary, with a custom label after a "."
ATTRIBUTE_NAME = re.compile(r"(?!\.)(?!.*\.\.)(?!.*\.$)(?!(?i:aws|amazon)\.)[A-Za-z0-9_.-]{1,256}")
ATTRIBUTE_TYPE = re.compile(r"(String|Number|Binary)(\.[\x21-\x7e]+)?")
MAX_ATTRIBUTE_TYPE = 256
MOVED_BY_SQS = "DeadLetterQueueSourceArn"  # set by SQS alone, on messages it dead-letters


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
    failing job's trace and span ids) goes into the error context. So does its
    MessageGroupId: the order of a FIFO queue's group, the tenant of a fair queue's."""
    original, previous = _unwrap(dict(message.get("MessageAttributes") or {}))
    # An offloaded payload's size attribute goes first: without it the pointer in the body
    # is not recognised, and the redriven message could not be read.
    ordered = sorted(
        ((k, v) for k, v in original.items() if k not in ERROR_ATTRIBUTES),
        key=lambda item: (item[0] not in SIZE_ATTRIBUTES, item[0] not in TRACE_ATTRIBUTES),
    )
    keep = dict(ordered[: MAX_ATTRIBUTES - len(ERROR_ATTRIBUTES)])
    aside = {k: encode_attribute(v) for k, v in original.items() if k not in keep}
    attrs = message.get("Attributes") or {}
    context: dict[str, Any] = {
        "written_by": WRITER,
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
    if previous:
        context["previous_error"] = previous
    if aside:
        context["attributes"] = aside
    keep["x-error-type"] = {"DataType": "String", "StringValue": type(error).__name__}
    keep["x-error-message"] = {
        "DataType": "String",
        "StringValue": (str(error) or type(error).__name__)[:MAX_ERROR_MESSAGE],
    }
    keep["x-error-context"] = {"DataType": "String", "StringValue": json.dumps(context, default=str)}
    request: dict[str, Any] = {"QueueUrl": dlq_url, "MessageBody": message["Body"], "MessageAttributes": keep}
    request.update(system_arguments(message, fifo, "dead-letter"))
    return request


def system_arguments(message: dict[str, Any], fifo: bool, default_group: str) -> dict[str, Any]:
    """What a copy of a received `message` needs besides its body and attributes:
    `AWSTraceHeader`, its MessageGroupId (on a FIFO queue, `default_group` if it had none;
    on a standard one, the fair-queue tenant when it had one), a FIFO deduplication id."""
    attrs = message.get("Attributes") or {}
    arguments: dict[str, Any] = {}
    xray = attrs.get("AWSTraceHeader")
    if xray:  # a system attribute: it counts against neither the size nor the attribute quota
        arguments["MessageSystemAttributes"] = {"AWSTraceHeader": {"DataType": "String", "StringValue": str(xray)}}
    group = attrs.get("MessageGroupId")
    if fifo:
        arguments["MessageGroupId"] = group or default_group
        arguments["MessageDeduplicationId"] = str(message["MessageId"])[:128]
    elif group:
        arguments["MessageGroupId"] = group
    return arguments


def original_attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """A received message's `MessageAttributes` as they were before the worker
    dead-lettered it: the worker's record taken off, what it moved aside put back. Any
    other message's as they are. Given the attributes alone, not the message: unfolding
    them needs nothing else. Not a trust decision: whatever comes back, a producer could
    have set."""
    copied = dict(attributes or {})
    if "x-error-context" not in copied:
        return copied  # no record of the worker's to unfold (most messages): nothing to parse
    return _unwrap(copied)[0]


def worker_record(message: dict[str, Any]) -> dict[str, Any] | None:
    """The worker's record on a DLQ message (error type, message and the parsed context),
    or None when the worker did not write one: SQS moved the message itself, or what bears
    the reserved names is not in the worker's layout (a producer's, an operator's)."""
    if MOVED_BY_SQS in (message.get("Attributes") or {}):
        return None
    attributes = message.get("MessageAttributes") or {}
    context = _context(attributes)
    if context is None:
        return None
    record: dict[str, Any] = {"x-error-context": context}
    for name in ("x-error-type", "x-error-message"):
        if name in attributes:
            record[name] = str(attributes[name].get("StringValue", ""))
    return record


def _context(attributes: dict[str, Any]) -> dict[str, Any] | None:
    """The parsed `x-error-context` if it is one the worker writes, else None."""
    raw = (attributes.get("x-error-context") or {}).get("StringValue")
    if not isinstance(raw, str):
        return None
    try:
        context = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(context, dict):
        return None
    if "written_by" not in context and {"source_queue", "worker_id"} <= set(context):
        # Written by engine 0.3, which kept what found no room as text under another key.
        legacy = context.get("overflow_attributes", {})
        if isinstance(legacy, dict):
            context["attributes"] = {k: {"DataType": "String", "StringValue": v} for k, v in legacy.items()}
            context["written_by"] = WRITER
    if context.get("written_by") != WRITER:
        return None
    moved = context.get("attributes", {})
    if not isinstance(moved, dict) or not all(decode_attribute(v) is not None for v in moved.values()):
        return None
    # What it unfolds must be what a message can carry: a record folding more is no worker's.
    originals = {name for name in attributes if name not in ERROR_ATTRIBUTES} | set(moved)
    if len(originals) > MAX_ATTRIBUTES or not all(ATTRIBUTE_NAME.fullmatch(name) for name in moved):
        return None
    return context


def _unwrap(attributes: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(the attributes before a worker dead-lettered them, that earlier error) for a
    message that carries the worker's record (a DLQ copy, or one SQS's move task brought
    back as it was); (the attributes unchanged, {}) for any other."""
    context = _context(attributes)
    if context is None:
        return attributes, {}
    previous = {
        name.removeprefix("x-error-"): str(attributes[name].get("StringValue", ""))
        for name in ("x-error-type", "x-error-message")
        if name in attributes
    }
    restored = {k: v for k, v in attributes.items() if k not in ERROR_ATTRIBUTES}
    for name, value in context.get("attributes", {}).items():
        restored.setdefault(name, decode_attribute(value))
    return restored, previous


def encode_attribute(value: dict[str, Any]) -> dict[str, str]:
    """A message attribute as JSON can hold it: its type kept, a binary value in base64."""
    data_type = str(value.get("DataType", "String"))
    if "BinaryValue" in value:
        raw = value["BinaryValue"]
        return {"DataType": data_type, "BinaryValue": base64.b64encode(bytes(raw)).decode()}
    return {"DataType": data_type, "StringValue": str(value.get("StringValue", ""))}


def decode_attribute(value: Any) -> dict[str, Any] | None:
    """`encode_attribute`'s inverse, or None for anything it did not write (or SQS would
    not take: a type that is none of SQS's)."""
    if not isinstance(value, dict) or not isinstance(value.get("DataType"), str):
        return None
    if len(value["DataType"]) > MAX_ATTRIBUTE_TYPE or not ATTRIBUTE_TYPE.fullmatch(value["DataType"]):
        return None
    if isinstance(value.get("StringValue"), str) and value["StringValue"]:
        return {"DataType": value["DataType"], "StringValue": value["StringValue"]}
    if isinstance(value.get("BinaryValue"), str):
        try:
            raw = base64.b64decode(value["BinaryValue"], validate=True)
        except (binascii.Error, ValueError):
            return None
        return {"DataType": value["DataType"], "BinaryValue": raw} if raw else None
    return None


def fit_to_size(request: dict[str, Any], max_size: int) -> dict[str, Any] | None:
    """The request, trimmed to fit the DLQ's MaximumMessageSize (SQS counts the body and
    every attribute's name, type and value), or None if even the bare message does not.

    The body and the original attributes are never touched: they are the message, and so
    are those the context holds (`attributes`). What gives way is ours, in this order: the
    context's account of the failure (down to the marker that makes it the worker's), the
    error message, the error type, then the marker. A context holding original attributes
    never goes: better no copy (the message stays in its queue until SQS moves it, whole)
    than a copy without them."""
    attributes = dict(request.get("MessageAttributes") or {})
    body_size = len(str(request["MessageBody"]).encode())

    def size() -> int:
        return body_size + attributes_size(attributes)

    context = _context(attributes)
    if size() > max_size and context is not None:
        for keys in (("written_by", "source_queue", "message_id", "receive_count", "attributes"), ("written_by",)):
            if size() > max_size:
                smaller = {k: v for k, v in context.items() if k in keys or k == "attributes"}
                attributes["x-error-context"] = {"DataType": "String", "StringValue": json.dumps(smaller, default=str)}
    if size() > max_size and "x-error-message" in attributes:
        text = str(attributes["x-error-message"]["StringValue"])
        room = len(text.encode()) - (size() - max_size)
        if room >= 16:
            attributes["x-error-message"] = {"DataType": "String", "StringValue": _truncate(text, room)}
        else:
            del attributes["x-error-message"]
    if size() > max_size:
        attributes.pop("x-error-type", None)
    if size() > max_size and not (context or {}).get("attributes"):
        attributes.pop("x-error-context", None)
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


async def receive_whole(client: SqsApi, dlq_url: str, hold: int, count: int = 10) -> list[dict[str, Any]]:
    """Up to `count` DLQ messages as the operator tools read them: every attribute, hidden
    for `hold` seconds (0: left visible), waiting up to a second for them."""
    resp = await client.receive_message(
        QueueUrl=dlq_url,
        MaxNumberOfMessages=count,
        VisibilityTimeout=hold,
        WaitTimeSeconds=1,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["All"],
    )
    return list(resp.get("Messages", []))
