"""What to do with a message once its handler has ended: pure decisions, table-tested.

`plan()` turns an outcome (see outcomes.classify) and what is known about the delivery
and its queue into one Settlement. The pool carries it out; nothing else decides.

Attempts. SQS's ApproximateReceiveCount is not an attempt count: every receive raises it,
also one whose message was given back unrun (a shutdown, a FIFO group held back). The
worker counts attempts as that receive count plus the retries it ran in place (FIFO, see
below), and stops retrying once the attempts reach the queue's maxReceiveCount: it then
dead-letters the message itself, with the last error attached, rather than leaving it to
SQS's redrive, which moves it without a reason.

Retry schedule (defaults WORKER_RETRY_BASE_SECONDS=10, WORKER_RETRY_MAX_SECONDS=300):
attempt n waits between half and all of min(max, base * 2**(n-1)) seconds ("equal
jitter"): about 5-10 s, 10-20 s, 20-40 s, 40-80 s for the four retries of a queue with
maxReceiveCount 5 (the whole budget: 75-150 s); a queue with maxReceiveCount 10 reaches
the 300 s cap at the sixth retry and spends 22-45 minutes in all. A handler that knows
better raises `RetryLater(seconds)`.

FIFO. A message's group-mates received with it wait behind it. When it fails and may be
retried, it is retried *in place*: the worker keeps every lease of the group, waits the
retry delay, and runs it again. Giving it back instead would give its group-mates back
too (they must not overtake it), and each give-back is a receive that counts toward
their own maxReceiveCount: a group with one bad message went to the DLQ whole, unrun.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ...base.backoff import backoff_delay
from ...base.limits import MAX_VISIBILITY_SECONDS
from ...handlers.outcomes import Outcome


@dataclass(frozen=True)
class Delete:
    """Done: delete the message."""


@dataclass(frozen=True)
class DeadLetter:
    """Send a copy to the DLQ with `why` attached, then delete it."""

    why: str


@dataclass(frozen=True)
class RetryAfter:
    """Make the message visible again after `seconds` (SQS redelivers it)."""

    seconds: int


@dataclass(frozen=True)
class RetryInPlace:
    """FIFO, group-mates waiting: keep the leases, run it again after `seconds`."""

    seconds: int


@dataclass(frozen=True)
class Release:
    """Visible again at once, unrun or cut off (shutdown)."""


@dataclass(frozen=True)
class Untouched:
    """The lease is lost: never use the handle again; SQS redelivers after the deadline."""


Settlement = Delete | DeadLetter | RetryAfter | RetryInPlace | Release | Untouched


@dataclass(frozen=True)
class RetryPolicy:
    base: float
    cap: float


@dataclass(frozen=True, slots=True)  # one a message: no instance dict
class Facts:
    """What `plan` needs to know about one delivery and its queue."""

    attempt: int  # receive count plus retries run in place
    max_receive: int | None  # the queue's maxReceiveCount, None without a RedrivePolicy
    has_dlq: bool
    mates_waiting: bool  # FIFO: later messages of its group are held behind it
    requested_delay: float | None = None  # RetryLater(seconds)


def retry_delay(attempt: int, policy: RetryPolicy, requested: float | None = None, rand: float | None = None) -> int:
    """Seconds before attempt `attempt` + 1: what the handler asked for, else the backoff
    (see the module docstring); never past SQS's 12-hour visibility limit."""
    if requested is not None:
        seconds = requested
    else:
        seconds = backoff_delay(attempt, policy.base, policy.cap, random.random() if rand is None else rand)  # noqa: S311
    return max(0, min(MAX_VISIBILITY_SECONDS, round(seconds)))


def exhausted(facts: Facts) -> bool:
    return facts.max_receive is not None and facts.attempt >= facts.max_receive


def plan(outcome: Outcome, facts: Facts, policy: RetryPolicy, why: str = "", rand: float | None = None) -> Settlement:
    """The settlement for a handler that ended with `outcome`."""
    if outcome in ("success", "dropped"):
        return Delete()
    if outcome == "lease_lost":
        return Untouched()
    if outcome == "released":
        return Release()
    if outcome == "dead_letter" and facts.has_dlq:
        return DeadLetter(why)
    # retry, timeout, deferred, or a dead-letter without a DLQ to send to. Deferred is the
    # downstream's trouble, not the message's: never dead-lettered, however many attempts.
    if outcome != "deferred" and exhausted(facts) and facts.has_dlq:
        return DeadLetter(f"gave up after {facts.attempt} attempts: {why}")
    delay = retry_delay(facts.attempt, policy, facts.requested_delay, rand)
    return RetryInPlace(delay) if facts.mates_waiting else RetryAfter(delay)


def group_goes_on(settlement: Settlement) -> bool:
    """FIFO: whether the next message of the group may run after this one. Only when this
    one is gone for good; anything else holds the rest back (released behind it)."""
    return isinstance(settlement, Delete | DeadLetter)
