"""What may start, and when: a queue's rate limit and its pause on downstream trouble.

Pure decisions on the loop's clock (times are passed in), asked by the queue's admission
(admission.py) before each receive and each start, so that the worker never receives what
it may not start: a message received and given back unrun still counts toward maxReceiveCount.

Rate limit (WORKER_RATE_LIMIT, WORKER_QUEUE_<KEY>_RATE_LIMIT, e.g. "50/s", "3000/min"): a
window of starts per queue and process (StartWindow): no window of one second holds more
starts than the rate (below 1/s: one start per 1/rate seconds). Pollers ask for no more
than the window has room for, less the messages already waiting to start. A fleet-wide limit is the per-process limit times the number of processes:
divide the partner's limit by the replica cap (KEDA maxReplicaCount, ECS MaxCapacity).

Pause (a handler raises `DownstreamUnavailable(seconds)`): the queue stops receiving for
that long (a circuit breaker), the message is given back with that delay and is not
dead-lettered for it, however often it comes back. Then one message is let through (half
open): if it succeeds receiving resumes, if it raises again the pause starts over.
"""

from __future__ import annotations

import math
import re
from collections import deque
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


class StartWindow:
    """At most `count` starts in any window of `seconds`: "50/s" is 50 in every second,
    "10/min" one in every 6 s. A token bucket lets a full bucket's worth through on top of
    its rate (22 starts in the first second of a 20/s limit, measured), which a partner
    counting per second answers with 429s; a window never does, from a cold start or
    after an idle spell alike. Times are the loop's, passed in."""

    def __init__(self, per_second: float) -> None:
        self.per_second = per_second
        self.count, self.seconds = window_of(per_second)
        self._starts: deque[float] = deque()

    def _expire(self, now: float) -> None:
        while self._starts and self._starts[0] <= now - self.seconds:
            self._starts.popleft()

    def room(self, now: float) -> int:
        """Starts allowed now."""
        self._expire(now)
        return self.count - len(self._starts)

    def record(self, now: float) -> None:
        self._expire(now)
        self._starts.append(now)

    def wait(self, now: float) -> float:
        """Seconds until the window has room again (0 if it has)."""
        if self.room(now) > 0:
            return 0.0
        return self._starts[0] + self.seconds - now


def window_of(per_second: float) -> tuple[int, float]:
    """(count, seconds) for a rate: whole starts per second at 1/s and above (rounded down,
    never over), one per 1/rate seconds below it."""
    if per_second >= 1:
        return math.floor(per_second), 1.0
    return 1, 1 / per_second


@dataclass
class Breaker:
    """Closed (start freely), open until `until` (start and receive nothing), or past
    `until` (half open: admission lets one probe start, and nothing more until it ends).

    A probe that meets the same trouble pauses again for twice as long (up to `cap`): over
    an outage of a minute, with 5 s asked for, the probes go out after 5, 15 and 35 s, not
    twelve times, and each is a receive that counts toward its message's maxReceiveCount.
    A message that met the trouble is given back for the whole pause and as long again as
    it asked (the pool does that), so the next probe is another message."""

    cap: float = 300.0  # the longest pause (WORKER_RETRY_MAX_SECONDS)
    until: float = 0.0  # loop time the pause ends; 0 when closed
    since: float = 0.0  # loop time the pause (or its latest round) began
    streak: int = 0  # pauses in a row without an answer in between

    @property
    def paused(self) -> bool:
        return self.until > 0

    def trouble(self, now: float, seconds: float, started: float) -> bool:
        """A handler said the downstream is unavailable for `seconds`, in a job started at
        `started`. True when this started a pause. A job already running when the pause
        began only keeps the pause going; the probe's trouble starts a longer one."""
        if self.until and started < self.since:
            self.until = max(self.until, now + seconds)
            return False
        began = not self.until
        self.streak = 1 if began else self.streak + 1
        self.since = now
        self.until = now + min(self.cap, seconds * 2 ** (self.streak - 1))
        return began

    def answered(self, started: float, handled: bool) -> bool:
        """A job started at `started` ended without DownstreamUnavailable: `handled` (it ran
        to an answer: success or an ordinary failure) or not (released, lease lost). Only a
        job started after the pause began says anything about the downstream now: handled,
        it ends the pause. True when this ended a pause."""
        if not self.until or started < self.since:
            return False
        if not handled:
            return False
        self.until = 0.0
        self.streak = 0
        return True
