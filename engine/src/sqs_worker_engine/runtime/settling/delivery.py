"""The lease book: the one owner of every in-flight delivery's state.

A delivery is one receive of one message: its receipt handle is good until a deadline
that only the lease keeper's confirmed extensions move. The book is the only code that
changes a delivery's state, and `may_use` is the only answer to "may this receipt handle
still be used": the keeper asks it before extending, the acker before every delete or
visibility change, the pool before a DLQ send. Trusting the local deadline matters:
SQS (and LocalStack) accept a stale handle silently, and a delete with it removes the
message another consumer is working on.

    received --start--> running --decided--> settling --confirmed--> settled | released
        |                  |                      |
        +------------------+----------------------+--> lost (deadline passed, SQS refused,
                                                          or settling gave up): never used again
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from ...base.limits import MAX_VISIBILITY_SECONDS
from ...base.telemetry import metrics

log = logging.getLogger("sqs_worker_engine.delivery")
SettleAction = Literal["delete", "visibility"]


class State(Enum):
    RECEIVED = "received"  # held, not started (waiting for its task or its FIFO turn)
    RUNNING = "running"  # its handler runs, or a FIFO head waits to run again
    SETTLING = "settling"  # the outcome is decided; a call with the handle is queued or out
    SETTLED = "settled"  # deleted (also after a DLQ copy) or its retry delay is set
    RELEASED = "released"  # visible again at once, confirmed
    LOST = "lost"  # the handle must never be used again

    # Members are singletons compared by identity: hash them by identity too. Enum's own
    # __hash__ is a Python-level call (the name's hash), and the sets of these are asked
    # a dozen times a message: 110 ns a lookup, against 34.
    __hash__ = object.__hash__


LEGAL: dict[State, frozenset[State]] = {
    State.RECEIVED: frozenset({State.RUNNING, State.SETTLING, State.LOST}),
    State.RUNNING: frozenset({State.SETTLING, State.LOST}),
    State.SETTLING: frozenset({State.SETTLED, State.RELEASED, State.LOST}),
    State.SETTLED: frozenset(),
    State.RELEASED: frozenset(),
    State.LOST: frozenset(),
}
HELD = frozenset({State.RECEIVED, State.RUNNING, State.SETTLING})


class IllegalTransitionError(RuntimeError):
    """A bug in the engine: a delivery was moved along an edge its life does not have."""


def lease_timing(visibility: int, fraction: float) -> tuple[float, float]:
    """(safety, tick): the margin before the deadline at which a handle is no longer
    trusted, and how often the keeper looks for leases due an extension."""
    return max(0.2, min(2.0, visibility * 0.1)), max(0.05, min(1.0, visibility * fraction / 4))


def extension_seconds(visibility: int, received_at: float, now: float) -> int:
    """How long to extend: the visibility timeout, but never past SQS's 12-hour cap
    (counted from our conservative receive time, minus a second of margin)."""
    return max(0, min(visibility, int(MAX_VISIBILITY_SECONDS - (now - received_at)) - 1))


@dataclass(eq=False, slots=True)  # one a message: no instance dict
class Delivery:
    message: dict[str, Any]
    message_id: str  # its MessageId, asked several times a message: read once (LeaseBook.receive)
    received_at: float  # loop time SQS handed the message out, at the earliest
    deadline: float  # loop time SQS makes the message visible again, unless extended
    state: State = State.RECEIVED
    action: SettleAction | None = None  # while settling: what the queued call does
    extension: asyncio.Task[None] | None = field(default=None, repr=False)  # the keeper's call in flight
    extensions: int = 0
    # Told what happens to the lease ("lease extended", "lease lost"): the job's span, when
    # tracing. Set and called by the book only (observe); it never decides anything.
    observer: Callable[[str, dict[str, Any]], None] | None = field(default=None, repr=False)
    _lost: asyncio.Future[None] | None = field(default=None, repr=False)
    # While its job waits for its work: ends that wait (set by pool.Run.watch; called by the
    # book when the lease is lost, and by the shutdown cut). A call, not a future: a future
    # a job showed in profiles.
    wake: Callable[[], None] | None = field(default=None, repr=False)

    def lost(self) -> asyncio.Future[None]:
        """Done once the lease is lost: a future, not an event, so that a job can wait on it
        beside its work without a task of its own (one per job shows in profiles)."""
        if self._lost is None:
            self._lost = asyncio.get_running_loop().create_future()
            if self.state is State.LOST:
                self._lost.set_result(None)
        return self._lost

    @property
    def receipt_handle(self) -> str:
        return str(self.message["ReceiptHandle"])

    @property
    def receive_count(self) -> int:
        return int(self.message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))

    def age(self, now_wall: float) -> float | None:
        """Seconds since SQS says the message was sent (wall clock), None if it did not say."""
        sent_ms = self.message.get("Attributes", {}).get("SentTimestamp")
        return None if sent_ms is None else max(0.0, now_wall - int(sent_ms) / 1000)

    @property
    def group(self) -> str | None:
        group = self.message.get("Attributes", {}).get("MessageGroupId")
        return None if group is None else str(group)


def due_for_extension(delivery: Delivery, now: float, visibility: int, fraction: float) -> bool:
    """Whether the keeper should extend this lease now. Never one whose visibility change
    is queued: an extension landing after it would overwrite a retry delay or a release.
    A delete, though, is kept covered until SQS confirms it."""
    if delivery.state not in HELD or delivery.action == "visibility":
        return False
    if delivery.extension is not None and not delivery.extension.done():
        return False  # one call at a time per lease
    return now >= delivery.deadline - visibility * (1 - fraction)


class LeaseBook:
    """Every delivery one queue's pool holds, from receive until settled, released or lost."""

    def __init__(self, queue: str, visibility: int, fraction: float) -> None:
        self.queue = queue
        self.visibility = visibility
        self.fraction = fraction
        self.safety, self.tick = lease_timing(visibility, fraction)
        self._held: dict[int, Delivery] = {}

    def __len__(self) -> int:
        return len(self._held)

    def __iter__(self) -> Iterator[Delivery]:
        return iter(list(self._held.values()))

    def receive(self, message: dict[str, Any], received_at: float) -> Delivery:
        delivery = Delivery(message, str(message["MessageId"]), received_at, received_at + self.visibility)
        self._held[id(delivery)] = delivery
        return delivery

    def running(self, message_id: str) -> bool:
        """A delivery of this message runs now: its lease is held (a batch job that waited
        for company may still run)."""
        return any(d.state is State.RUNNING and d.message_id == message_id for d in self._held.values())

    def may_use(self, delivery: Delivery, now: float) -> bool:
        """Safe to use the receipt handle: held, and comfortably before the deadline."""
        return delivery.state in HELD and delivery.deadline - now > self.safety

    def start(self, delivery: Delivery) -> None:
        self._move(delivery, State.RUNNING)

    def settling(self, delivery: Delivery, action: SettleAction, now: float) -> bool:
        """Claim the handle for one settling call; False (and lost) if it is too late."""
        if delivery.state is State.SETTLING:
            delivery.action = action
            return self.may_use(delivery, now) or self._lose_now(delivery, "deadline passed before settling")
        if not self.may_use(delivery, now):
            return self._lose_now(delivery, "deadline passed before settling")
        self._move(delivery, State.SETTLING)
        delivery.action = action
        return True

    def confirmed(self, delivery: Delivery, released: bool) -> None:
        """SQS confirmed the settling call: the message is gone, delayed, or visible again."""
        if delivery.state is State.SETTLING:
            self._move(delivery, State.RELEASED if released else State.SETTLED)
            self._held.pop(id(delivery), None)

    def extended(self, delivery: Delivery, sent: float, seconds: int) -> None:
        """SQS confirmed an extension sent at `sent`: the deadline counts from then."""
        if delivery.state in HELD and delivery.action != "visibility":
            delivery.deadline = max(delivery.deadline, sent + seconds)
            delivery.extensions += 1
            metrics.LEASE_EXTENSIONS.labels(self.queue).inc()
            if delivery.observer is not None:
                delivery.observer("lease extended", {"visibility_seconds": seconds, "extensions": delivery.extensions})

    def expired(self, now: float) -> list[Delivery]:
        """Lose every lease whose deadline (less the safety margin) has come."""
        gone = [d for d in self._held.values() if d.deadline - now <= self.safety]
        for delivery in gone:
            self.lose(delivery, "deadline passed without a confirmed extension")
        return gone

    def due(self, now: float) -> list[Delivery]:
        return [d for d in self._held.values() if due_for_extension(d, now, self.visibility, self.fraction)]

    def observe(self, delivery: Delivery, observer: Callable[[str, dict[str, Any]], None] | None) -> None:
        """Who is told what happens to its lease from now on (None: nobody)."""
        delivery.observer = observer

    def lose(self, delivery: Delivery, why: str) -> None:
        """Never use this handle again (the message comes back when its visibility ends)."""
        if delivery.state not in HELD:
            return
        self._move(delivery, State.LOST)
        self._held.pop(id(delivery), None)
        metrics.LEASES_LOST.labels(self.queue).inc()
        log.warning("lease lost: %s", why, extra={"queue": self.queue, "message_id": delivery.message_id})
        if delivery.observer is not None:
            delivery.observer("lease lost", {"reason": why})
        if delivery._lost is not None and not delivery._lost.done():
            delivery._lost.set_result(None)
        if delivery.wake is not None:
            delivery.wake()

    def _lose_now(self, delivery: Delivery, why: str) -> bool:
        self.lose(delivery, why)
        return False

    @staticmethod
    def _move(delivery: Delivery, to: State) -> None:
        if to not in LEGAL[delivery.state]:
            raise IllegalTransitionError(f"delivery {delivery.message_id}: {delivery.state.value} -> {to.value}")
        delivery.state = to
