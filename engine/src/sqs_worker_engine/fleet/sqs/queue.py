"""One standard SQS queue (and its DLQ) for a whole simulated fleet, at fleet scale.

The engine's `memory.MemorySQS` is faithful in every corner a single worker meets (FIFO
groups, size limits, injected faults) and scans every message on every receive: right for
a test's few dozen messages, hours for a fleet's millions. This model keeps what a fleet's
figures depend on, each in O(log n) per call:

- visibility: a received message is hidden for its visibility timeout, then visible again;
  `ChangeMessageVisibilityBatch` counts from the call;
- receive counts go up on every receive, give-backs included; past `maxReceiveCount` the
  next receive moves the message to the DLQ;
- every receive issues a new receipt handle; a delete with an older handle of a message
  still there deletes it (as SQS and LocalStack do), and is recorded in `misuses`;
- a long poll waits up to its WaitTimeSeconds and answers as soon as a message is visible;
  one new message wakes one poll, not all of them; a poll its caller abandoned still takes
  messages on the server side;
- the in-flight quota (about 120,000 on a standard queue): past it a long poll answers
  nothing, silently, as SQS does (`overlimit_receives` counts them);
- every call takes `latency` seconds (SQS in-region answers in about 20 ms).

Counts (`ApproximateNumberOfMessages*`) are not this model's: GetQueueAttributes answers
what `counts` says, the lagging view every reader of SQS's counts gets (counts.py).
Time is the running loop's (`clock.now`), so the fleet plays on virtual time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...base import clock
from ...base.limits import DLQ_SUFFIX, MAX_RECEIVE_BATCH

# SQS's in-flight quota on a standard queue (received and neither deleted nor visible again).
STANDARD_INFLIGHT_LIMIT = 120_000
ACCOUNT = "000000000000"
REGION = "us-east-1"

CountsReader = Callable[[], Mapping[str, int]]


def client_error(code: str, message: str, operation: str) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


@dataclass(eq=False, slots=True)
class Message:
    id: str
    body: str
    sent_at: float
    visible_at: float
    receive_count: int = 0
    handle: str = ""
    first_received: float = 0.0
    holder: int | None = None  # the connection whose receive holds it now (None: visible)


@dataclass(slots=True)
class Calls:
    """Requests by operation, as SQS bills them, and receives by what they brought."""

    by_operation: dict[str, int] = field(default_factory=dict)
    empty_receives: int = 0
    overlimit_receives: int = 0

    def count(self, operation: str) -> None:
        self.by_operation[operation] = self.by_operation.get(operation, 0) + 1

    @property
    def total(self) -> int:
        return sum(self.by_operation.values())


class FleetQueue:
    """A standard queue named `name` with its DLQ `<name>-dlq`, answering the calls a running
    worker makes (`sqs.SqsApi`). Hand each worker a `Connection` (below), not this object,
    so that a killed replica can be cut off."""

    def __init__(
        self,
        name: str,
        *,
        visibility: int,
        max_receive_count: int,
        counts: CountsReader | None = None,
        latency: float = 0.02,
        inflight_limit: int = STANDARD_INFLIGHT_LIMIT,
        on_deleted: Callable[[str], None] | None = None,
        on_dead_letter: Callable[[str], None] | None = None,
        on_held: Callable[[str, bool], None] | None = None,
    ) -> None:
        """`on_deleted(body)` and `on_dead_letter(body)`: told when a message is deleted, and
        when SQS moves one to the DLQ; `on_held(body, held)`, when a receive takes one (True)
        and when it is visible again (False): the simulator's ledger keeps count."""
        self.name = name
        self.dlq_name = name + DLQ_SUFFIX
        self.url = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}"
        self.dlq_url = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{self.dlq_name}"
        self.arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"
        self.dlq_arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{self.dlq_name}"
        self.visibility = visibility
        self.max_receive_count = max_receive_count
        self.latency = latency
        self.inflight_limit = inflight_limit
        self.counts = counts
        self.on_deleted = on_deleted
        self.on_dead_letter = on_dead_letter
        self.on_held = on_held
        self.calls = Calls()
        self.messages: dict[str, Message] = {}
        self.dead_letters: list[Message] = []  # moved to the DLQ by SQS or sent there
        self.misuses = 0  # deletes and visibility changes made with a handle not the newest
        self.peak_inflight = 0
        self._ready: deque[Message] = deque()  # visible, oldest first (entries may be stale)
        self._hidden: list[tuple[float, int, Message, str]] = []  # (visible at, seq, message, handle)
        self._inflight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._servers: set[asyncio.Task[list[dict[str, Any]]]] = set()
        self._ids = itertools.count(1)

    # -- the simulator's side (not SQS calls) -------------------------------------------

    def put(self, body: str, *, visible_in: float = 0.0) -> str:
        """A producer's SendMessage, without its latency (the traffic is the simulator's)."""
        now = clock.now()
        seq = next(self._ids)
        message = Message(f"m-{seq:08d}", body, now, now + visible_in)
        self.messages[message.id] = message
        if visible_in > 0:
            heapq.heappush(self._hidden, (message.visible_at, seq, message, ""))
        else:
            self._ready.append(message)
            self._wake()
        return message.id

    @property
    def inflight(self) -> int:
        """Messages received and neither deleted nor visible again (what SQS's quota counts)."""
        self._expire(clock.now())
        return self._inflight

    @property
    def visible(self) -> int:
        """Messages that a receive would take now."""
        self._expire(clock.now())
        return len(self.messages) - self._inflight

    def visible_bodies(self) -> list[str]:
        """The bodies of the messages that a receive would take now."""
        self._expire(clock.now())
        return [m.body for m in self.messages.values() if m.holder is None]

    def held_by(self, connection: int) -> list[Message]:
        """The messages one connection's receives hold now."""
        self._expire(clock.now())
        return [m for m in self.messages.values() if m.holder == connection]

    async def settle(self) -> None:
        """Let abandoned server-side polls finish (end of a run)."""
        while self._servers:
            await asyncio.gather(*self._servers, return_exceptions=True)

    # -- the SQS API, as a connection calls it --------------------------------------------

    async def get_queue_url(self, QueueName: str, **_: Any) -> dict[str, Any]:  # noqa: N803
        self.calls.count("GetQueueUrl")
        await self._wait()
        if QueueName == self.name:
            return {"QueueUrl": self.url}
        if QueueName == self.dlq_name:
            return {"QueueUrl": self.dlq_url}
        raise client_error(
            "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.", "GetQueueUrl"
        )

    async def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str], **_: Any) -> dict[str, Any]:  # noqa: N803
        self.calls.count("GetQueueAttributes")
        await self._wait()
        if QueueUrl == self.dlq_url:
            attrs: dict[str, str] = {"QueueArn": self.dlq_arn, "MaximumMessageSize": "1048576"}
        else:
            attrs = {
                "QueueArn": self.arn,
                "VisibilityTimeout": str(self.visibility),
                "MaximumMessageSize": "1048576",
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": self.dlq_arn, "maxReceiveCount": self.max_receive_count}
                ),
            }
            if self.counts is not None:
                attrs.update({k: str(v) for k, v in self.counts().items()})
        wanted = set(AttributeNames)
        return {"Attributes": attrs if "All" in wanted else {k: v for k, v in attrs.items() if k in wanted}}

    async def receive_message(
        self,
        connection: int,
        QueueUrl: str,  # noqa: N803
        MaxNumberOfMessages: int = 1,  # noqa: N803
        WaitTimeSeconds: int = 0,  # noqa: N803
        VisibilityTimeout: int | None = None,  # noqa: N803
        **_: Any,
    ) -> dict[str, Any]:
        self.calls.count("ReceiveMessage")
        if QueueUrl != self.url:
            raise client_error("AWS.SimpleQueueService.NonExistentQueue", "not simulated", "ReceiveMessage")
        if not 1 <= MaxNumberOfMessages <= MAX_RECEIVE_BATCH:
            raise client_error("InvalidParameterValue", "MaxNumberOfMessages must be 1-10", "ReceiveMessage")
        visibility = self.visibility if VisibilityTimeout is None else VisibilityTimeout
        # Once sent, a request is served whether or not its caller still waits for it.
        server = asyncio.ensure_future(self._serve(connection, MaxNumberOfMessages, WaitTimeSeconds, visibility))
        self._servers.add(server)
        server.add_done_callback(self._servers.discard)
        messages = await asyncio.shield(server)
        if not messages:
            self.calls.empty_receives += 1
        return {"Messages": messages} if messages else {}

    async def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:  # noqa: N803
        self.calls.count("DeleteMessageBatch")
        self._check_batch(Entries, "DeleteMessageBatch")
        await self._wait()
        successful, failed = [], []
        for entry in Entries:
            message = self._by_handle(str(entry["ReceiptHandle"]))
            if message is None:
                failed.append(
                    {"Id": entry["Id"], "Code": "ReceiptHandleIsInvalid", "SenderFault": True, "Message": "gone"}
                )
                continue
            if message.holder is not None:
                self._inflight -= 1
            del self.messages[message.id]
            message.holder = None
            if self.on_deleted is not None:
                self.on_deleted(message.body)
            successful.append({"Id": entry["Id"]})
        return {"Successful": successful, "Failed": failed}

    async def change_message_visibility_batch(
        self,
        QueueUrl: str,  # noqa: N803
        Entries: list[dict[str, Any]],  # noqa: N803
        **_: Any,
    ) -> dict[str, Any]:
        self.calls.count("ChangeMessageVisibilityBatch")
        self._check_batch(Entries, "ChangeMessageVisibilityBatch")
        await self._wait()
        now = clock.now()
        self._expire(now)
        successful, failed = [], []
        for entry in Entries:
            message = self._by_handle(str(entry["ReceiptHandle"]))
            if message is None or message.holder is None:
                failed.append(
                    {"Id": entry["Id"], "Code": "MessageNotInflight", "SenderFault": True, "Message": "not in flight"}
                )
                continue
            seconds = int(entry["VisibilityTimeout"])
            message.visible_at = now + seconds
            if seconds == 0:
                self._make_visible(message)
            else:
                heapq.heappush(self._hidden, (message.visible_at, next(self._ids), message, message.handle))
            successful.append({"Id": entry["Id"]})
        self._wake()
        return {"Successful": successful, "Failed": failed}

    async def send_message(self, QueueUrl: str, MessageBody: str, **_: Any) -> dict[str, Any]:  # noqa: N803
        """The worker sends to the DLQ (a message it dead-letters itself); the simulator's
        own traffic uses `put`."""
        self.calls.count("SendMessage")
        await self._wait()
        if QueueUrl == self.dlq_url:
            seq = next(self._ids)
            self.dead_letters.append(Message(f"d-{seq:08d}", MessageBody, clock.now(), clock.now()))
            if self.on_dead_letter is not None:
                self.on_dead_letter(MessageBody)
            return {"MessageId": f"d-{seq:08d}"}
        return {"MessageId": self.put(MessageBody)}

    # -- inside SQS -------------------------------------------------------------------------

    async def _wait(self) -> None:
        if self.latency > 0:
            await asyncio.sleep(self.latency)

    @staticmethod
    def _check_batch(entries: list[dict[str, Any]], operation: str) -> None:
        if not 1 <= len(entries) <= MAX_RECEIVE_BATCH:
            raise client_error("AWS.SimpleQueueService.TooManyEntriesInBatchRequest", "1-10 entries", operation)

    def _by_handle(self, handle: str) -> Message | None:
        message = self.messages.get(handle.partition(":")[0])
        if message is not None and message.handle != handle:
            self.misuses += 1  # SQS acts on it all the same
        return message

    def _make_visible(self, message: Message) -> None:
        """Given back, or its visibility ran out: at the head of the line, since it is older
        than what arrived meanwhile (SQS's order is best effort; oldest first is its aim)."""
        if message.holder is not None:
            message.holder = None
            self._inflight -= 1
            if self.on_held is not None:
                self.on_held(message.body, False)
        self._ready.appendleft(message)

    def _expire(self, now: float) -> None:
        """Messages whose visibility ran out are visible again (lazily, when someone looks)."""
        hidden = self._hidden
        woke = False
        while hidden and hidden[0][0] <= now:
            visible_at, _, message, handle = heapq.heappop(hidden)
            if message.handle == handle and message.visible_at == visible_at and message.id in self.messages:
                self._make_visible(message)
                woke = True
        if woke:
            self._wake()

    def _next_expiry(self) -> float | None:
        hidden = self._hidden
        while hidden:
            visible_at, _, message, handle = hidden[0]
            if message.handle == handle and message.visible_at == visible_at and message.id in self.messages:
                return visible_at
            heapq.heappop(hidden)
        return None

    def _wake(self) -> None:
        """One waiting poll per 10 visible messages: a new message wakes one poll, not all."""
        visible = len(self._ready)
        while self._waiters and visible > 0:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                visible -= MAX_RECEIVE_BATCH

    async def _serve(self, connection: int, most: int, wait: int, visibility: int) -> list[dict[str, Any]]:
        await self._wait()
        loop = asyncio.get_running_loop()
        deadline = clock.now() + wait
        while True:
            now = clock.now()
            taken = self._take(connection, most, visibility, now)
            if taken or now >= deadline:
                return taken
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            expiry = self._next_expiry()
            wake = deadline if expiry is None else min(deadline, expiry)
            timer = loop.call_at(wake, _resolve, waiter)
            try:
                await waiter
            finally:
                timer.cancel()

    def _take(self, connection: int, most: int, visibility: int, now: float) -> list[dict[str, Any]]:
        self._expire(now)
        if self._inflight >= self.inflight_limit:
            self.calls.overlimit_receives += 1
            return []  # SQS's quota: a long poll answers nothing, and says nothing
        taken: list[dict[str, Any]] = []
        ready = self._ready
        while ready and len(taken) < most and self._inflight < self.inflight_limit:
            message = ready.popleft()
            if message.holder is not None or message.id not in self.messages or message.visible_at > now:
                continue  # a stale entry: deleted, or received again since it was queued here
            if message.receive_count >= self.max_receive_count:
                del self.messages[message.id]
                self.dead_letters.append(message)
                if self.on_dead_letter is not None:
                    self.on_dead_letter(message.body)
                continue
            message.receive_count += 1
            message.handle = f"{message.id}:{message.receive_count}"
            message.visible_at = now + visibility
            message.holder = connection
            if not message.first_received:
                message.first_received = now
            self._inflight += 1
            heapq.heappush(self._hidden, (message.visible_at, next(self._ids), message, message.handle))
            if self.on_held is not None:
                self.on_held(message.body, True)
            taken.append(
                {
                    "MessageId": message.id,
                    "ReceiptHandle": message.handle,
                    "Body": message.body,
                    "Attributes": {
                        "ApproximateReceiveCount": str(message.receive_count),
                        "SentTimestamp": str(int(message.sent_at * 1000)),
                        "ApproximateFirstReceiveTimestamp": str(int(message.first_received * 1000)),
                    },
                }
            )
        self.peak_inflight = max(self.peak_inflight, self._inflight)
        return taken


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class SeveredError(Exception):
    """The connection of a replica the platform killed: nothing it sends reaches SQS."""


class Connection:
    """One replica's view of the queue (`sqs.SqsApi`): its requests reach the queue until
    the replica is killed (`sever`); from then on every call fails at once, as a dead
    process's would never be sent. Requests already at SQS are served all the same."""

    _numbers = itertools.count(1)

    def __init__(self, queue: FleetQueue) -> None:
        self.queue = queue
        self.number = next(Connection._numbers)
        self.severed = False

    def sever(self) -> None:
        self.severed = True

    def _check(self) -> None:
        if self.severed:
            raise SeveredError("the replica was killed")

    async def get_queue_url(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return await self.queue.get_queue_url(*args, **kwargs)

    async def get_queue_attributes(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return await self.queue.get_queue_attributes(*args, **kwargs)

    async def receive_message(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return await self.queue.receive_message(self.number, *args, **kwargs)

    async def delete_message_batch(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return await self.queue.delete_message_batch(*args, **kwargs)

    async def change_message_visibility_batch(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return await self.queue.change_message_visibility_batch(*args, **kwargs)

    async def send_message(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return await self.queue.send_message(*args, **kwargs)
