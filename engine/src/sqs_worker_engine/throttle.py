"""What may start, and when: a queue's rate limit and its pause on downstream trouble.

Pure decisions on the loop's clock (times are passed in), owned by the queue's pool, asked
by its pollers before each receive, so that the worker never receives what it may not
start: a message received and given back unrun still counts toward maxReceiveCount.

Rate limit (WORKER_RATE_LIMIT, WORKER_QUEUE_<KEY>_RATE_LIMIT, e.g. "50/s", "3000/min"): a
token bucket per queue and process. A poller takes a token per message it asks for, and
gives back the tokens of messages the receive did not bring. The bucket holds at most one
second of tokens (at least one), so a worker idle for an hour does not start an hour's
worth at once. A fleet-wide limit is the per-process limit times the number of processes:
divide the partner's limit by the replica cap (KEDA maxReplicaCount, ECS MaxCapacity).

Pause (a handler raises `DownstreamUnavailable(seconds)`): the queue stops receiving for
that long (a circuit breaker), the message is given back with that delay and is not
dead-lettered for it, however often it comes back. Then one message is let through (half
open): if it succeeds receiving resumes, if it raises again the pause starts over.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*$")
_PER = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600}


def parse_rate(text: str) -> float:
    """Messages per second from "50/s", "3000/min", "0.5/s"; ValueError naming the form."""
    match = _RATE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a rate: write it as N/s, N/min or N/h (e.g. 50/s)")
    per_second = float(match.group(1)) / _PER[match.group(2)]
    if per_second <= 0:
        raise ValueError(f"{text!r}: a rate limit must be above 0")
    return per_second


class TokenBucket:
    def __init__(self, rate: float, now: float, burst: float | None = None) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate if burst is None else burst)
        self.tokens = self.capacity
        self.updated = now

    def _refill(self, now: float) -> None:
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = max(self.updated, now)

    def take(self, most: int, now: float) -> int:
        """Up to `most` whole tokens, as many as there are (0 when empty)."""
        self._refill(now)
        granted = min(most, math.floor(self.tokens))
        self.tokens -= granted
        return granted

    def give_back(self, n: int) -> None:
        """Tokens of messages a receive did not bring: they were never started."""
        self.tokens = min(self.capacity, self.tokens + n)

    def wait(self, now: float) -> float:
        """Seconds until the next whole token."""
        self._refill(now)
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate


@dataclass
class Breaker:
    """Closed (receive freely), open until `until` (receive nothing), or half open (one
    probe out: receive nothing more until it ends).

    A probe that meets the same trouble pauses again for twice as long (up to `cap`): over
    an outage of a minute, with 5 s asked for, the probes go out after 5, 15 and 35 s, not
    twelve times, and each is a receive that counts toward its message's maxReceiveCount.
    A message that met the trouble is given back for the whole pause and as long again as
    it asked (the pool does that), so the next probe is another message."""

    cap: float = 300.0  # the longest pause (WORKER_RETRY_MAX_SECONDS)
    until: float = 0.0  # loop time the pause ends; 0 when closed
    since: float = 0.0  # loop time the pause (or its latest round) began
    streak: int = 0  # pauses in a row without an answer in between
    probing: bool = False

    @property
    def paused(self) -> bool:
        return self.until > 0

    def wait(self, now: float) -> float:
        """Seconds a poller must wait before it may ask for anything."""
        return max(0.0, self.until - now) if self.until else 0.0

    def allowed(self, most: int, now: float) -> int:
        """How many messages a poller may ask for now: all, none (paused, or a probe is out),
        or one (the probe of a pause that has run its time)."""
        if not self.until:
            return most
        if now < self.until or self.probing:
            return 0
        self.probing = True
        return 1

    def probe_unused(self) -> None:
        """The probe's receive brought nothing: the next receive may probe."""
        self.probing = False

    def trouble(self, now: float, seconds: float, received: float) -> bool:
        """A handler said the downstream is unavailable for `seconds`, for a message received
        at `received`. True when this started a pause. A job already running when the pause
        began only keeps the pause going; the probe's trouble starts a longer one."""
        if self.until and received < self.since:
            self.until = max(self.until, now + seconds)
            return False
        started = not self.until
        self.streak = 1 if started else self.streak + 1
        self.since = now
        self.until = now + min(self.cap, seconds * 2 ** (self.streak - 1))
        self.probing = False
        return started

    def answered(self, received: float, handled: bool) -> bool:
        """A job whose message was received at `received` ended without DownstreamUnavailable:
        `handled` (it ran to an answer: success or an ordinary failure) or not (released,
        lease lost). Only a message received after the pause began says anything about the
        downstream now: handled, it ends the pause; unhandled, the next receive may probe.
        True when this ended a pause."""
        if not self.until or received < self.since:
            return False
        self.probing = False
        if not handled:
            return False
        self.until = 0.0
        self.streak = 0
        return True
