"""Sending messages: a typed async producer, and a sync wrapper for code that is not async.

    async with open_producer("orders", model=Order, bucket="orders-payloads") as orders:
        await orders.send(Order(id="o-1"), group_id="customer-7")
        result = await orders.send_batch([Message(o) for o in todays_orders])
        for failure in result.failed: ...

    with SyncProducer.open("orders", model=Order) as orders:
        orders.send(Order(id="o-1"))

- The payload is serialised as the consumer reads it: a pydantic model as its JSON, a str
  as is, anything else as JSON. With `model`, a payload that is not one is validated into
  one first, so a bad message fails here, naming the field, not in the consumer's DLQ.
- `send_batch` sends 10 to a call, within SQS's request size; entries SQS failed for a
  reason of its own (SenderFault false: throttling, an internal error) are sent again, up
  to `attempts` times; the rest, and whatever still fails, come back in `failed`, each with
  its index in the input and SQS's code. It never raises for an SQS error.
- FIFO queues need `group_id`. Without a `dedup_id`, a FIFO message gets one of its own (a
  random one, made once per message, so a resend of it is deduplicated and two sends of one
  payload are two messages), unless the queue deduplicates by content
  (ContentBasedDeduplication): SQS refuses a FIFO send with neither. Pass `dedup_id` (a
  business key) to deduplicate your own retries. On a standard queue `group_id` sets the
  tenant of a fair queue.
- `open_producer` reads the queue's MaximumMessageSize and ContentBasedDeduplication once
  (GetQueueAttributes; SQS's defaults, 1 MiB and none, where the caller may not read them).
- A message over `threshold` bytes (body and attributes), or over the queue's limit, goes to
  S3 when `bucket` is set, in the SQS extended client's format (see offload.py), which every
  extended client and this worker read; without a bucket, a message over the queue's limit
  is refused before sending.
- Tracing (tracing.py): a `send <queue>` PRODUCER span around each call, its context on
  every message (`traceparent`/`tracestate` while the attribute budget allows, and
  `AWSTraceHeader`). `inject(message_attributes, system_attributes)` is called after, for
  each message, before its size is counted: a hook for context of your own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from botocore.exceptions import ClientError
from opentelemetry.trace import SpanKind
from pydantic import BaseModel, ValidationError

from ..base.backoff import backoff_delay
from ..base.limits import MAX_MESSAGE_BYTES, MAX_RECEIVE_BATCH
from ..base.sqs import create_client, error_code
from ..base.telemetry import tracing
from ..formats.dlq import attributes_size
from ..formats.offload import DEFAULT_THRESHOLD, SIZE_ATTRIBUTE, SIZE_ATTRIBUTES, PayloadStore, pointer_body
from ..formats.payload import validation_problems

log = logging.getLogger("sqs_worker_engine.producer")
P = TypeVar("P")
T = TypeVar("T")
MAX_ATTRIBUTES = 10
MAX_DELAY_SECONDS = 900
Injector = Callable[[dict[str, Any], dict[str, Any]], None]


class SendError(Exception):
    """A message could not be sent (after retries); `code` is SQS's, when it said one."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Message(Generic[P]):
    """One message for `send_batch`."""

    payload: P
    group_id: str | None = None
    dedup_id: str | None = None
    delay: int = 0
    attributes: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Failure:
    index: int  # the message's position in what was given to send_batch
    code: str
    message: str
    sender_fault: bool


@dataclass
class BatchResult:
    message_ids: dict[int, str] = field(default_factory=dict)  # index -> SQS MessageId
    failed: list[Failure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


def attribute_value(name: str, value: Any) -> dict[str, Any]:
    """A message attribute in SQS's shape, from a plain value or one already in it."""
    if isinstance(value, Mapping) and "DataType" in value:
        return dict(value)
    if isinstance(value, bool):
        return {"DataType": "String", "StringValue": str(value).lower()}
    if isinstance(value, int | float):
        return {"DataType": "Number", "StringValue": str(value)}
    if isinstance(value, bytes | bytearray):
        return {"DataType": "Binary", "BinaryValue": bytes(value)}
    if isinstance(value, str):
        if not value:
            raise ValueError(f"message attribute {name!r} is empty; SQS refuses empty values")
        return {"DataType": "String", "StringValue": value}
    raise TypeError(f"message attribute {name!r}: {type(value).__name__} is not str, int, float, bytes or bool")


class Producer(Generic[P]):
    def __init__(
        self,
        client: Any,
        queue_url: str,
        *,
        model: type[P] | None = None,
        payloads: PayloadStore | None = None,
        bucket: str | None = None,
        threshold: int = DEFAULT_THRESHOLD,
        inject: Injector | None = None,
        attempts: int = 3,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        content_based_deduplication: bool = False,
    ) -> None:
        if bucket is not None and payloads is None:
            raise ValueError("a bucket for large payloads needs a PayloadStore")
        self.client = client
        self.queue_url = queue_url
        self.fifo = queue_url.endswith(".fifo")
        # The queue's own (QueueFacts): what SQS takes whole, and whether it deduplicates by content.
        self.max_message_bytes = max_message_bytes
        self.content_based_deduplication = content_based_deduplication
        self.model = model
        self.payloads = payloads
        self.bucket = bucket
        self.threshold = threshold
        self.inject = inject
        self.attempts = attempts

    async def send(
        self,
        payload: P | Any,
        *,
        group_id: str | None = None,
        dedup_id: str | None = None,
        delay: int = 0,
        attributes: Mapping[str, Any] | None = None,
    ) -> str:
        """Send one message; returns its MessageId, or raises SendError."""
        with self._span(1):
            return await self._send(Message(payload, group_id, dedup_id, delay, attributes))

    async def _send(self, message: Message[Any]) -> str:
        entry, offload = await self._entry("0", message)
        if offload:
            await self._offload(entry)
        entry.pop("Id")
        try:
            resp = await self.client.send_message(QueueUrl=self.queue_url, **entry)
        except Exception as exc:
            raise SendError(f"SendMessage failed: {exc}", error_code(exc)) from exc
        return str(resp["MessageId"])

    async def send_batch(self, messages: Iterable[Message[Any]]) -> BatchResult:
        """Send many, 10 to a call; see the module docstring for what is retried."""
        messages = list(messages)
        with self._span(len(messages)):
            return await self._send_all(messages)

    def _span(self, count: int) -> AbstractContextManager[Any]:
        """A PRODUCER span `send <queue>` around the call: its context goes on each message."""
        if not tracing.enabled():
            return nullcontext()
        attributes: dict[str, Any] = {
            "messaging.system": "aws_sqs",
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.destination.name": self.queue_url.rsplit("/", 1)[-1],
        }
        if count != 1:
            attributes["messaging.batch.message_count"] = count
        return tracing.tracer().start_as_current_span(
            f"send {attributes['messaging.destination.name']}", kind=SpanKind.PRODUCER, attributes=attributes
        )

    async def _send_all(self, messages: list[Message[Any]]) -> BatchResult:
        result = BatchResult()
        pending: dict[int, dict[str, Any]] = {}
        large: list[dict[str, Any]] = []
        for index, message in enumerate(messages):
            pending[index], offload = await self._entry(str(index), message)
            if offload:
                large.append(pending[index])
        for entry in large:  # only now: a message refused above leaves nothing behind in S3
            await self._offload(entry)
        attempt = 0
        while pending:
            attempt += 1
            retry: dict[int, dict[str, Any]] = {}
            for batch in _batches(pending):
                await self._send_batch(batch, result, retry, last=attempt >= self.attempts)
            pending = retry
            if pending:
                await asyncio.sleep(backoff_delay(attempt, 0.2, 2.0))
        result.failed.sort(key=lambda f: f.index)
        return result

    async def _send_batch(
        self, batch: dict[int, dict[str, Any]], result: BatchResult, retry: dict[int, dict[str, Any]], last: bool
    ) -> None:
        try:
            resp = await self.client.send_message_batch(QueueUrl=self.queue_url, Entries=list(batch.values()))
        except Exception as exc:  # the SDK already retried the call
            for index in batch:
                result.failed.append(Failure(index, error_code(exc), str(exc), sender_fault=_sender_fault(exc)))
            return
        for ok in resp.get("Successful", []):
            result.message_ids[int(ok["Id"])] = str(ok["MessageId"])
        for failed in resp.get("Failed", []):
            index = int(failed["Id"])
            if failed.get("SenderFault") or last:
                code, text = str(failed.get("Code", "")), str(failed.get("Message", ""))
                result.failed.append(Failure(index, code, text, bool(failed.get("SenderFault"))))
            else:
                retry[index] = batch[index]

    async def _entry(self, entry_id: str, message: Message[Any]) -> tuple[dict[str, Any], bool]:
        """The SendMessageBatch entry for `message`, checked and serialised, and whether its
        body is to go to S3 (done once every message of the call has passed its checks)."""
        # Everything SQS would refuse is refused first, before anything is put in S3.
        if self.fifo:
            if not message.group_id:
                raise ValueError("a FIFO queue needs a group_id (MessageGroupId) for every message")
            if message.delay:
                raise ValueError("FIFO queues take no per-message delay; set the queue's DelaySeconds instead")
        if not 0 <= message.delay <= MAX_DELAY_SECONDS:
            raise ValueError(f"delay must be within 0..{MAX_DELAY_SECONDS} seconds, got {message.delay}")
        body = self._serialise(message.payload)
        if not body:
            raise ValueError("the message body is empty; SQS refuses empty messages")
        attributes = {name: attribute_value(name, value) for name, value in (message.attributes or {}).items()}
        reserved = [name for name in attributes if name in SIZE_ATTRIBUTES]
        if reserved:
            raise ValueError(f"message attribute {reserved[0]!r} is reserved for large payloads")
        system: dict[str, Any] = {}
        tracing.inject(attributes, system)  # the current span's context, when there is one
        if self.inject is not None:
            self.inject(attributes, system)
        if len(attributes) > MAX_ATTRIBUTES:
            raise ValueError(f"{len(attributes)} message attributes; SQS allows {MAX_ATTRIBUTES}")
        size = len(body.encode()) + attributes_size(attributes)
        offload = size > min(self.threshold, self.max_message_bytes) and self.bucket is not None
        if offload and len(attributes) >= MAX_ATTRIBUTES:
            raise ValueError(f"an offloaded message may carry {MAX_ATTRIBUTES - 1} attributes, not {len(attributes)}")
        if not offload and size > self.max_message_bytes:
            raise ValueError(
                f"the message is {size} bytes, over the queue's limit of {self.max_message_bytes} bytes "
                "(its MaximumMessageSize); set a bucket for large payloads (WORKER_LARGE_PAYLOAD_BUCKET) "
                "to send it through S3"
            )
        entry: dict[str, Any] = {"Id": entry_id, "MessageBody": body}
        if attributes:
            entry["MessageAttributes"] = attributes
        if system:
            entry["MessageSystemAttributes"] = system
        if message.group_id:
            entry["MessageGroupId"] = message.group_id
        if message.dedup_id:
            entry["MessageDeduplicationId"] = message.dedup_id
        elif self.fifo and not self.content_based_deduplication:
            # Made here, once: every resend of this entry carries it, and SQS drops the duplicate.
            entry["MessageDeduplicationId"] = uuid.uuid4().hex
        if message.delay:
            entry["DelaySeconds"] = message.delay
        return entry, offload

    async def _offload(self, entry: dict[str, Any]) -> None:
        """Put the entry's body in S3 and send the pointer in its place."""
        assert self.payloads is not None
        assert self.bucket is not None
        pointer = await self.payloads.put(self.bucket, entry["MessageBody"])
        entry["MessageBody"] = pointer_body(pointer)
        attributes = entry.setdefault("MessageAttributes", {})
        attributes[SIZE_ATTRIBUTE] = {"DataType": "Number", "StringValue": str(pointer.size)}

    def _serialise(self, payload: Any) -> str:
        model = self.model
        if isinstance(model, type) and issubclass(model, BaseModel) and not isinstance(payload, model):
            try:
                payload = model.model_validate(payload)
            except ValidationError as exc:
                raise ValueError(f"payload does not match {model.__name__}: {validation_problems(exc)}") from None
        if isinstance(payload, BaseModel):
            return payload.model_dump_json()
        if isinstance(payload, str):
            return payload
        return json.dumps(payload)


def _sender_fault(exc: BaseException) -> bool:
    """A refusal of the request itself (HTTP 4xx): sending it again cannot help."""
    if isinstance(exc, ClientError):
        return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 500)) < 500
    return False


@dataclass(frozen=True)
class QueueFacts:
    """What a producer needs to know of its queue, read once."""

    max_message_bytes: int = MAX_MESSAGE_BYTES
    content_based_deduplication: bool = False


async def queue_facts(client: Any, queue_url: str) -> QueueFacts:
    """The queue's MaximumMessageSize and ContentBasedDeduplication (one GetQueueAttributes);
    SQS's defaults where the caller may not read them (a role with SendMessage alone)."""
    try:
        response = await client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])
    except ClientError as exc:
        log.warning(
            "cannot read %s's attributes (%s): sending as though its MaximumMessageSize were %d "
            "and it did not deduplicate by content",
            queue_url.rsplit("/", 1)[-1],
            error_code(exc),
            MAX_MESSAGE_BYTES,
        )
        return QueueFacts()
    attributes = response.get("Attributes", {})
    size = str(attributes.get("MaximumMessageSize", ""))
    return QueueFacts(
        int(size) if size.isdigit() else MAX_MESSAGE_BYTES,
        str(attributes.get("ContentBasedDeduplication", "false")).lower() == "true",
    )


def _batches(entries: dict[int, dict[str, Any]]) -> Iterator[dict[int, dict[str, Any]]]:
    """At most 10 entries and MAX_MESSAGE_BYTES to a request."""
    batch: dict[int, dict[str, Any]] = {}
    size = 0
    for index, entry in entries.items():
        entry_size = len(str(entry["MessageBody"]).encode()) + attributes_size(entry.get("MessageAttributes") or {})
        if batch and (len(batch) == MAX_RECEIVE_BATCH or size + entry_size > MAX_MESSAGE_BYTES):
            yield batch
            batch, size = {}, 0
        batch[index] = entry
        size += entry_size
    if batch:
        yield batch


@asynccontextmanager
async def open_producer(
    queue: str,
    *,
    region: str | None = None,
    endpoint_url: str | None = None,
    model: type[P] | None = None,
    bucket: str | None = None,
    threshold: int = DEFAULT_THRESHOLD,
    inject: Injector | None = None,
    queue_url: str | None = None,
) -> AsyncIterator[Producer[P]]:
    """A Producer for the queue named `queue`, with its own clients (closed on exit), knowing
    the queue's own size limit and deduplication (`queue_facts`). Region and endpoint default
    to the worker's settings (AWS_REGION, AWS_ENDPOINT_URL)."""
    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    if endpoint_url is None:
        endpoint_url = os.environ.get("AWS_ENDPOINT_URL")
    payloads = PayloadStore(region, endpoint_url or None)
    try:
        async with create_client(region, endpoint_url or None, MAX_RECEIVE_BATCH) as client:
            url = queue_url or (await client.get_queue_url(QueueName=queue))["QueueUrl"]
            facts = await queue_facts(client, url)
            yield Producer(
                client,
                url,
                model=model,
                payloads=payloads,
                bucket=bucket,
                threshold=threshold,
                inject=inject,
                max_message_bytes=facts.max_message_bytes,
                content_based_deduplication=facts.content_based_deduplication,
            )
    finally:
        await payloads.close()


class SyncProducer(Generic[P]):
    """The producer for code that is not async: its own event loop, on a thread of its own."""

    def __init__(self, queue: str, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"producer-{queue}", daemon=True)
        self._thread.start()
        self._context = open_producer(queue, **options)
        try:
            self._producer: Producer[P] = self._run(self._context.__aenter__())
        except BaseException:
            self._stop_loop()
            raise

    @classmethod
    @contextmanager
    def open(cls, queue: str, **options: Any) -> Iterator[SyncProducer[Any]]:
        """`open_producer`'s options; closed on exit."""
        producer: SyncProducer[Any] = cls(queue, **options)
        try:
            yield producer
        finally:
            producer.close()

    def send(self, payload: P | Any, **options: Any) -> str:
        return self._run(self._producer.send(payload, **options))

    def send_batch(self, messages: Sequence[Message[Any]]) -> BatchResult:
        return self._run(self._producer.send_batch(messages))

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._run(self._context.__aexit__(None, None, None))
        finally:
            self._stop_loop()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
