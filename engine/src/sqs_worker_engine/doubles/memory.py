"""An in-memory SQS, faithful where a worker's correctness depends on it.

It answers the calls a running worker makes (`sqs.SqsApi`) the way SQS does, including
the parts that bite:

- visibility: a received message is hidden for its visibility timeout, then visible again;
  `ChangeMessageVisibility` counts from the call and cannot pass 12 h from the first receive;
- receive counts go up on *every* receive, also of a message that was given back;
- after `maxReceiveCount` receives, the next receive moves the message to the DLQ instead;
- every receive issues a new receipt handle, and an old handle still "succeeds" (a delete
  with it removes the message another consumer is working on), as LocalStack and SQS do;
  only once the message is gone do calls with its handles fail;
- FIFO: per group in order, and a group with a message in flight (or hidden by a retry
  delay) gives out nothing until that message is deleted or visible again; a receive sent
  again with its ReceiveRequestAttemptId within 5 minutes gets the first one's messages
  (those still in flight), however many it asks for, their visibility started again;
- a long poll that its caller abandoned still takes messages on the server side;
- `MaximumMessageSize` counts the body and the message attributes;
- `fail()` and `slow()` make calls fail with an SQS error code, or take long, before or
  after SQS acted on them.

It also keeps the record a test checks invariants against: `misuses` lists every call
made with a receipt handle that was no longer the message's newest or whose visibility had
run out when the call was made. Time is the running event loop's (`clock.now`), so a test
on a loop with virtual time plays hours in milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import itertools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import botocore.session
from botocore.exceptions import ClientError, EndpointConnectionError, ParamValidationError
from botocore.model import ServiceModel
from botocore.validate import ParamValidator

from ..base import clock
from ..base.limits import DLQ_SUFFIX, FIFO_SUFFIX, MAX_RECEIVE_BATCH, MAX_VISIBILITY_SECONDS, RECEIVE_ATTEMPT_SECONDS
from ..formats.dlq import attributes_size

DEDUP_WINDOW = 300.0  # seconds a FIFO queue remembers a MessageDeduplicationId
DEFAULT_MAX_SIZE = 262_144


def sqs_error(code: str, message: str, operation: str) -> ClientError:
    """The exception botocore raises for an SQS error response."""
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


@functools.cache
def _sqs_model() -> ServiceModel:
    return botocore.session.get_session().get_service_model("sqs")


Method = TypeVar("Method", bound=Callable[..., Awaitable[Any]])


def checked(operation: str) -> Callable[[Method], Method]:
    """Check a call's parameters against botocore's model of SQS first, as a client does by
    default: the worker's own clients skip that check (sqs.create_client), so the requests
    it builds are held to the model here, in every test that runs it on this double."""

    def wrap(method: Method) -> Method:
        @functools.wraps(method)
        async def call(self: Any, **params: Any) -> Any:
            shape = _sqs_model().operation_model(operation).input_shape
            assert shape is not None  # every operation the double serves takes parameters
            report = ParamValidator().validate(params, shape)
            if report.has_errors():
                raise ParamValidationError(report=report.generate_report())
            return await method(self, **params)

        return cast(Method, call)

    return wrap


@dataclass
class Fault:
    """What happens to calls of one operation: `before` seconds until SQS acts, `after`
    seconds until the caller hears back, and `error` (an SQS error code) instead of an
    answer, for the next `times` calls (None: every call)."""

    before: float = 0.0
    after: float = 0.0
    error: str | None = None
    times: int | None = None
    lost: bool = False  # SQS acts, but its answer never reaches the caller (a dropped connection)


@dataclass(eq=False)
class _Message:
    id: str
    body: str
    message_attributes: dict[str, Any]
    sent_at: float
    seq: int
    group: str | None
    dedup_id: str | None
    visible_at: float
    receive_count: int = 0
    handle: str | None = None
    first_received: float | None = None

    def describe(self) -> dict[str, Any]:
        """The message as ReceiveMessage returns it."""
        attributes = {
            "ApproximateReceiveCount": str(self.receive_count),
            "SentTimestamp": str(int(self.sent_at * 1000)),
            "ApproximateFirstReceiveTimestamp": str(int((self.first_received or 0) * 1000)),
        }
        if self.group is not None:
            attributes["MessageGroupId"] = self.group
            attributes["SequenceNumber"] = str(self.seq)
        if self.dedup_id is not None:
            attributes["MessageDeduplicationId"] = self.dedup_id
        described: dict[str, Any] = {
            "MessageId": self.id,
            "ReceiptHandle": self.handle,
            "Body": self.body,
            "Attributes": attributes,
        }
        if self.message_attributes:
            described["MessageAttributes"] = dict(self.message_attributes)
        return described


@dataclass(eq=False)
class _Queue:
    name: str
    url: str
    arn: str
    attributes: dict[str, str]
    messages: dict[str, _Message] = field(default_factory=dict)  # in send order
    dedup: dict[str, tuple[str, float]] = field(default_factory=dict)
    changed: asyncio.Event | None = None

    @property
    def fifo(self) -> bool:
        return self.name.endswith(FIFO_SUFFIX)

    @property
    def visibility(self) -> int:
        return int(self.attributes.get("VisibilityTimeout", "30"))

    @property
    def max_size(self) -> int:
        return int(self.attributes.get("MaximumMessageSize", str(DEFAULT_MAX_SIZE)))

    def redrive(self) -> tuple[str, int] | None:
        policy = self.attributes.get("RedrivePolicy")
        if not policy:
            return None
        parsed = json.loads(policy)
        return str(parsed["deadLetterTargetArn"]), int(parsed["maxReceiveCount"])

    def notify(self) -> None:
        if self.changed is not None:
            self.changed.set()
        self.changed = None


@dataclass(frozen=True)
class Misuse:
    """A call made with a receipt handle that was not safe to use."""

    operation: str
    message_id: str
    why: str
    at: float


class _Receipts:
    """The receipt handles handed out, and what a call with one does: the calls that used
    one unsafely (`misuses`), the deletes and visibility changes it names."""

    def __init__(self) -> None:
        self.handles: dict[str, tuple[_Queue, str]] = {}
        self.misuses: list[Misuse] = []
        self.refused: dict[str, str] = {}  # message id -> error code for its visibility changes

    def issue(self, queue: _Queue, message: _Message, serial: int) -> None:
        message.handle = f"{message.id}:{message.receive_count}:{serial}"
        self.handles[message.handle] = (queue, message.id)

    def check(self, operation: str, queue: _Queue, handle: str, at: float) -> None:
        known = self.handles.get(handle)
        if known is None:
            return
        message = queue.messages.get(known[1])
        if message is None:
            return  # gone: the call fails, which is harmless
        if message.handle != handle:
            self.misuses.append(Misuse(operation, message.id, "the message was received again since", at))
        elif message.visible_at <= at:
            self.misuses.append(Misuse(operation, message.id, "its visibility timeout had run out", at))

    def message_for(self, queue: _Queue, handle: str) -> _Message | None:
        known = self.handles.get(handle)
        return None if known is None else queue.messages.get(known[1])

    def delete(self, queue: _Queue, entry: dict[str, Any]) -> dict[str, Any] | None:
        message = self.message_for(queue, str(entry["ReceiptHandle"]))
        if message is None:
            return {"Code": "ReceiptHandleIsInvalid", "Message": "The receipt handle is not valid."}
        del queue.messages[message.id]  # an old handle deletes it too: that is SQS
        queue.notify()
        return None

    def change_visibility(self, queue: _Queue, entry: dict[str, Any]) -> dict[str, Any] | None:
        message = self.message_for(queue, str(entry["ReceiptHandle"]))
        now = clock.now()
        if message is None:
            return {"Code": "ReceiptHandleIsInvalid", "Message": "The receipt handle is not valid."}
        if message.id in self.refused:
            return {"Code": self.refused[message.id], "Message": "injected", "SenderFault": False}
        if message.visible_at <= now:
            return {"Code": "MessageNotInflight", "Message": "The message is not in flight."}
        seconds = int(entry["VisibilityTimeout"])
        first = message.first_received if message.first_received is not None else now
        if not 0 <= seconds <= MAX_VISIBILITY_SECONDS or now + seconds - first > MAX_VISIBILITY_SECONDS:
            return {"Code": "InvalidParameterValue", "Message": "Total VisibilityTimeout exceeds 12 hours."}
        message.visible_at = now + seconds
        queue.notify()
        return None


class MemorySQS:
    """An SQS account in memory. Create queues with `create_queue`, then hand it to the
    worker as its client (`Worker(config, router, client=MemorySQS())`)."""

    def __init__(self, region: str = "us-east-1", account: str = "000000000000") -> None:
        self.region = region
        self.account = account
        self.queues: dict[str, _Queue] = {}
        self.faults: dict[str, Fault] = {}
        self._handles = _Receipts()
        self.misuses = self._handles.misuses  # the record a test checks
        self.calls: dict[str, int] = {}
        self.receipts: dict[str, int] = {}  # body -> how many times any queue handed it out
        self._ids = itertools.count(1)
        self._servers: set[asyncio.Task[Any]] = set()
        # FIFO ReceiveRequestAttemptId -> (until when it is remembered, what that receive gave)
        self._attempts: dict[tuple[str, str], tuple[float, list[dict[str, Any]]]] = {}

    # -- set-up and inspection (not SQS calls) ---------------------------------

    def create_queue(self, name: str, **attributes: str) -> str:
        url = f"https://sqs.{self.region}.amazonaws.com/{self.account}/{name}"
        arn = f"arn:aws:sqs:{self.region}:{self.account}:{name}"
        attrs = {"VisibilityTimeout": "30", "MaximumMessageSize": str(DEFAULT_MAX_SIZE), **attributes}
        self.queues[name] = _Queue(name, url, arn, attrs)
        return url

    def create_queue_with_dlq(self, name: str, max_receive_count: int, **attributes: str) -> str:
        """A queue and its DLQ (`<name>-dlq`), joined by a RedrivePolicy."""
        base = name.removesuffix(FIFO_SUFFIX)
        dlq = f"{base}{DLQ_SUFFIX}{FIFO_SUFFIX if name.endswith(FIFO_SUFFIX) else ''}"
        self.create_queue(dlq)
        policy = {"deadLetterTargetArn": self.queues[dlq].arn, "maxReceiveCount": max_receive_count}
        return self.create_queue(name, RedrivePolicy=json.dumps(policy), **attributes)

    def fail(self, operation: str, code: str, times: int | None = None) -> None:
        self.faults[operation] = Fault(error=code, times=times)

    def slow(self, operation: str, before: float = 0.0, after: float = 0.0, times: int | None = None) -> None:
        self.faults[operation] = Fault(before=before, after=after, times=times)

    def heal(self) -> None:
        self.faults.clear()

    def refuse_extensions(self, message_id: str | None, code: str | None) -> None:
        """Make every visibility change of one message fail with `code` (an entry failure
        that is SQS's fault, not the caller's); None, None: accept them again."""
        if message_id is None or code is None:
            self._handles.refused.clear()
        else:
            self._handles.refused[message_id] = code

    def message_id(self, name: str, body: str) -> str:
        return next(m.id for m in self.queues[name].messages.values() if m.body == body)

    def bodies(self, name: str) -> list[str]:
        """Every message still in the queue, in order (visible or not)."""
        return [m.body for m in self.queues[name].messages.values()]

    def visible(self, name: str) -> list[str]:
        now = clock.now()
        return [m.body for m in self.queues[name].messages.values() if m.visible_at <= now]

    def receive_counts(self, name: str) -> dict[str, int]:
        return {m.body: m.receive_count for m in self.queues[name].messages.values()}

    def message_attributes(self, name: str) -> list[dict[str, Any]]:
        return [m.message_attributes for m in self.queues[name].messages.values()]

    def put(self, name: str, body: str, group: str | None = None, attributes: dict[str, Any] | None = None) -> str:
        """Send without the call's latency or faults (test set-up)."""
        return self._send(self.queues[name], body, attributes or {}, 0, group, None)

    async def settle(self) -> None:
        """Let abandoned server-side polls finish (end of a test)."""
        while self._servers:
            await asyncio.gather(*self._servers, return_exceptions=True)

    # -- the SQS API -----------------------------------------------------------

    @checked("GetQueueUrl")
    async def get_queue_url(self, *, QueueName: str, QueueOwnerAWSAccountId: str | None = None) -> dict[str, Any]:  # noqa: N803
        await self._before("GetQueueUrl")
        queue = self.queues.get(QueueName)
        if queue is None or QueueOwnerAWSAccountId not in (None, self.account):
            raise sqs_error(
                "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.", "GetQueueUrl"
            )
        return {"QueueUrl": queue.url}

    @checked("GetQueueAttributes")
    async def get_queue_attributes(self, *, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:  # noqa: N803
        queue = self._queue(QueueUrl, "GetQueueAttributes")
        await self._before("GetQueueAttributes")
        now = clock.now()
        messages = list(queue.messages.values())
        attrs = {
            **queue.attributes,
            "QueueArn": queue.arn,
            "ApproximateNumberOfMessages": str(sum(1 for m in messages if m.visible_at <= now)),
            "ApproximateNumberOfMessagesNotVisible": str(sum(1 for m in messages if m.visible_at > now)),
            "ApproximateNumberOfMessagesDelayed": "0",
        }
        if queue.fifo:
            attrs["FifoQueue"] = "true"
        wanted = set(AttributeNames)
        return {"Attributes": attrs if "All" in wanted else {k: v for k, v in attrs.items() if k in wanted}}

    @checked("ReceiveMessage")
    async def receive_message(
        self,
        *,
        QueueUrl: str,  # noqa: N803
        MaxNumberOfMessages: int = 1,  # noqa: N803
        WaitTimeSeconds: int = 0,  # noqa: N803
        VisibilityTimeout: int | None = None,  # noqa: N803
        ReceiveRequestAttemptId: str | None = None,  # noqa: N803
        **_: Any,
    ) -> dict[str, Any]:
        queue = self._queue(QueueUrl, "ReceiveMessage")
        if not 1 <= MaxNumberOfMessages <= MAX_RECEIVE_BATCH:
            raise sqs_error("InvalidParameterValue", "MaxNumberOfMessages must be 1-10", "ReceiveMessage")
        fault = self._fault("ReceiveMessage")
        visibility = queue.visibility if VisibilityTimeout is None else VisibilityTimeout
        attempt = (queue.name, ReceiveRequestAttemptId) if queue.fifo and ReceiveRequestAttemptId else None
        again = self._attempts.get(attempt) if attempt is not None else None
        if again is not None and again[0] > clock.now():
            await asyncio.sleep(fault.before)
            self._raise(fault, "ReceiveMessage")
            messages = self._again(queue, again[1], visibility)
            await asyncio.sleep(fault.after)
            if fault.lost:
                raise EndpointConnectionError(endpoint_url=queue.url)
            return {"Messages": messages} if messages else {}
        # Once sent, a request reaches SQS and is served whether or not its caller still
        # waits: an abandoned long poll takes messages all the same.
        server = asyncio.ensure_future(
            self._serve_receive(queue, fault, MaxNumberOfMessages, WaitTimeSeconds, visibility)
        )
        self._servers.add(server)
        server.add_done_callback(self._served)
        messages = await asyncio.shield(server)
        if attempt is not None:
            self._attempts[attempt] = (clock.now() + RECEIVE_ATTEMPT_SECONDS, messages)
        await asyncio.sleep(fault.after)
        if fault.lost:
            raise EndpointConnectionError(endpoint_url=queue.url)
        return {"Messages": messages} if messages else {}

    @checked("DeleteMessageBatch")
    async def delete_message_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        return await self._batch("DeleteMessageBatch", QueueUrl, Entries, self._handles.delete)

    @checked("ChangeMessageVisibilityBatch")
    async def change_message_visibility_batch(self, *, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        return await self._batch("ChangeMessageVisibilityBatch", QueueUrl, Entries, self._handles.change_visibility)

    @checked("SendMessage")
    async def send_message(
        self,
        *,
        QueueUrl: str,  # noqa: N803
        MessageBody: str,  # noqa: N803
        MessageAttributes: dict[str, Any] | None = None,  # noqa: N803
        DelaySeconds: int = 0,  # noqa: N803
        MessageGroupId: str | None = None,  # noqa: N803
        MessageDeduplicationId: str | None = None,  # noqa: N803
    ) -> dict[str, Any]:
        queue = self._queue(QueueUrl, "SendMessage")
        fault = self._fault("SendMessage")
        await asyncio.sleep(fault.before)
        self._raise(fault, "SendMessage")
        size = len(MessageBody.encode()) + attributes_size(MessageAttributes or {})
        if size > queue.max_size:
            raise sqs_error(
                "InvalidParameterValue",
                f"One or more parameters are invalid. Reason: Message must be shorter than {queue.max_size} bytes.",
                "SendMessage",
            )
        if queue.fifo and not MessageGroupId:
            raise sqs_error("MissingParameter", "The request must contain the parameter MessageGroupId.", "SendMessage")
        message_id = self._send(
            queue, MessageBody, MessageAttributes or {}, DelaySeconds, MessageGroupId, MessageDeduplicationId
        )
        await asyncio.sleep(fault.after)
        return {"MessageId": message_id}

    # -- inside SQS --------------------------------------------------------------

    def _served(self, server: asyncio.Task[Any]) -> None:
        # A caller that gave up never reads its poll's outcome; read it here so an injected
        # fault on an abandoned poll is not reported as an exception nobody retrieved.
        self._servers.discard(server)
        if not server.cancelled():
            server.exception()

    def _queue(self, url: str, operation: str) -> _Queue:
        self.calls[operation] = self.calls.get(operation, 0) + 1
        for queue in self.queues.values():
            if queue.url == url:
                return queue
        raise sqs_error("AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.", operation)

    def _fault(self, operation: str) -> Fault:
        fault = self.faults.get(operation)
        if fault is None:
            return Fault()
        if fault.times is not None:
            fault.times -= 1
            if fault.times <= 0:
                del self.faults[operation]
        return fault

    async def _before(self, operation: str) -> None:
        fault = self._fault(operation)
        await asyncio.sleep(fault.before)
        self._raise(fault, operation)

    @staticmethod
    def _raise(fault: Fault, operation: str) -> None:
        if fault.error is not None:
            raise sqs_error(fault.error, f"injected {fault.error}", operation)

    def _send(
        self,
        queue: _Queue,
        body: str,
        attributes: dict[str, Any],
        delay: int,
        group: str | None,
        dedup_id: str | None,
    ) -> str:
        now = clock.now()
        if queue.fifo:
            dedup_id = dedup_id or hashlib.sha256(body.encode()).hexdigest()
            seen = queue.dedup.get(dedup_id)
            if seen is not None and now - seen[1] < DEDUP_WINDOW:
                return seen[0]
        seq = next(self._ids)
        message_id = f"m-{seq:06d}"
        if dedup_id is not None:
            queue.dedup[dedup_id] = (message_id, now)
        queue.messages[message_id] = _Message(
            message_id, body, dict(attributes), now, seq, group, dedup_id, visible_at=now + delay
        )
        queue.notify()
        return message_id

    async def _serve_receive(
        self, queue: _Queue, fault: Fault, most: int, wait: int, visibility: int
    ) -> list[dict[str, Any]]:
        await asyncio.sleep(fault.before)
        self._raise(fault, "ReceiveMessage")
        deadline = clock.now() + wait
        while True:
            taken = self._take(queue, most, visibility)
            now = clock.now()
            if taken or now >= deadline:
                return taken
            upcoming = [m.visible_at for m in queue.messages.values() if m.visible_at > now]
            wake = min([deadline, *upcoming])
            if queue.changed is None:
                queue.changed = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(queue.changed.wait(), max(0.0, wake - now))

    def _again(self, queue: _Queue, given: list[dict[str, Any]], visibility: int) -> list[dict[str, Any]]:
        """A FIFO receive sent again with its attempt id, within its 5 minutes: the first
        one's messages with their receipt handles, however many it asks for (those still
        in flight with those handles), their visibility timeout started again (SQS's rule)."""
        now = clock.now()
        messages = []
        for described in given:
            message = self._handles.message_for(queue, described["ReceiptHandle"])
            if message is not None and message.handle == described["ReceiptHandle"] and message.visible_at > now:
                message.visible_at = now + visibility
                messages.append(described)
        return messages

    def _take(self, queue: _Queue, most: int, visibility: int) -> list[dict[str, Any]]:
        now = clock.now()
        redrive = queue.redrive()
        taken: list[dict[str, Any]] = []
        blocked: set[str | None] = set()  # FIFO groups whose earliest message is hidden
        dead: list[_Message] = []  # moved to the DLQ once the walk is over (it edits the dict)
        # The walk stops at `most`: copying the whole queue each receive made a deep backlog
        # cost every receive its length.
        for message in queue.messages.values():
            if len(taken) >= most:
                break
            if queue.fifo and message.group in blocked:
                continue
            if message.visible_at > now:
                if queue.fifo:
                    blocked.add(message.group)
                continue
            if redrive is not None and message.receive_count >= redrive[1]:
                dead.append(message)
                continue
            message.receive_count += 1
            self.receipts[message.body] = self.receipts.get(message.body, 0) + 1
            self._handles.issue(queue, message, next(self._ids))
            message.visible_at = now + visibility
            if message.first_received is None:
                message.first_received = now
            taken.append(message.describe())
        if redrive is not None:
            for message in dead:
                self._move_to_dlq(queue, message, redrive[0])
        return taken

    def _move_to_dlq(self, queue: _Queue, message: _Message, dlq_arn: str) -> None:
        del queue.messages[message.id]
        dlq = next(q for q in self.queues.values() if q.arn == dlq_arn)
        message.visible_at = clock.now()
        message.handle = None
        dlq.messages[message.id] = message
        dlq.notify()

    async def _batch(
        self,
        operation: str,
        url: str,
        entries: list[dict[str, Any]],
        apply: Callable[[_Queue, dict[str, Any]], dict[str, Any] | None],
    ) -> dict[str, Any]:
        queue = self._queue(url, operation)
        if not 1 <= len(entries) <= MAX_RECEIVE_BATCH:
            raise sqs_error("AWS.SimpleQueueService.TooManyEntriesInBatchRequest", "1-10 entries", operation)
        fault = self._fault(operation)
        sent = clock.now()
        for entry in entries:  # judged when the call is made, not when it arrives
            self._handles.check(operation, queue, str(entry["ReceiptHandle"]), sent)
        await asyncio.sleep(fault.before)
        self._raise(fault, operation)
        successful, failed = [], []
        for entry in entries:
            problem = apply(queue, entry)
            if problem is None:
                successful.append({"Id": entry["Id"]})
            else:
                failed.append({"Id": entry["Id"], "SenderFault": problem.pop("SenderFault", True), **problem})
        await asyncio.sleep(fault.after)
        return {"Successful": successful, "Failed": failed}
