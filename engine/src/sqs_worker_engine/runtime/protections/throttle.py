"""What may start, and when: a queue's rate limit and its pause on downstream trouble.

Pure decisions on the loop's clock (times are passed in), asked by the queue's admission
(admission.py) before each receive and each start, so that the worker never receives what
it may not start: a message received and given back unrun still counts toward maxReceiveCount.

Rate limit (WORKER_RATE_LIMIT, WORKER_QUEUE_<KEY>_RATE_LIMIT, e.g. "50/s", "3000/min"):
per queue and process (StartWindow), starts are spaced evenly, 1/rate apart (a little more:
SPACING_MARGIN), and no window of 1 s (1/rate s below 1/s) holds more starts than the
rate, with the same margin. A start counts where its handler is called (until then, from
the moment it is let go), so what a partner counting a rolling second sees is what it
allows however long a start's way to its handler takes (a busy loop, an S3 read): starts
that went out 20 at a time at each second's boundary put 22 in some rolling second.
WORKER_RATE_BURST=N (per queue WORKER_QUEUE_<KEY>_RATE_BURST) lets up to N go together
(at most the rate's count), for a partner that counts fixed windows and takes bursts.
Pollers keep at most a window's worth of starts waiting (the rate's count, less the
messages already waiting to start): what will start within a second, not more. A fleet-wide limit is the per-process limit times the number of processes:
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


# Starts are spaced, and windows counted, this much wider than the rate asks: a start
# reaches its handler a moment after admission lets it go, and not always the same moment;
# 2.5% (25 ms in a second) of slack keeps any rolling second within the rate.
SPACING_MARGIN = 0.025
CATCH_UP = 0.05  # of the window: how late a start may be and the grid still hold (50 ms in a second)


class StartWindow:
    """Starts spaced `interval` apart on a grid (the rate's window, 1 s or 1/rate, widened
    by SPACING_MARGIN and shared out), unless `burst` > 1 lets that many go together; and
    never more than `count` in any window of `span` (the widened window), counted as starts
    are made: so a start that reaches its handler up to the margin late, where the one
    `count` before it did not, still keeps every rolling window of `seconds` within the rate. The
    grid is a GCRA (the virtual scheduling of a leaky bucket): each start moves the next
    one's time, `next_at`, an interval on; a start a little late (up to half an interval,
    or CATCH_UP of the window) keeps the grid, so a busy loop does not slow the rate down,
    and after an idle spell the grid starts again from the next start. Times are the loop's, passed in."""

    def __init__(self, per_second: float, burst: int = 1) -> None:
        self.per_second = per_second
        self.count, self.seconds = window_of(per_second)
        self.span = self.seconds * (1 + SPACING_MARGIN)  # the window counted, margin and all
        self.interval = self.span / self.count
        self.burst = max(1, min(burst, self.count))
        self._tolerance = (self.burst - 1) * self.interval
        # A start this late still keeps the grid (the next ones catch up, never before their
        # own grid time, so no window sees more): a busy loop's lateness, not an idle spell.
        self._catch_up = max(self.interval / 2, CATCH_UP * self.seconds)
        self._next_at = -math.inf  # when the next start is due on the grid
        self._starts: deque[float] = deque()  # when each start in the window reached its handler
        # Starts let go whose handler is not called yet: counted as starting now until it is.
        # A start reaches its handler a loop turn or an S3 read after admission lets it go,
        # and on a busy machine one start's way takes far longer than the next one's: counted
        # where the handler is called, no rolling window of calls holds more than the rate.
        self._pending = 0

    def _expire(self, now: float) -> None:
        while self._starts and self._starts[0] <= now - self.span:
            self._starts.popleft()

    def room(self, now: float) -> int:
        """Starts the window has room for now."""
        self._expire(now)
        return self.count - len(self._starts) - self._pending

    def may_start(self, now: float) -> bool:
        return self.room(now) > 0 and now >= self._next_at - self._tolerance

    def record(self, now: float) -> None:
        """A start let go and its handler called at once."""
        self.grant(now)
        self.began(now)

    def began(self, now: float) -> None:
        """A start let go earlier reached its handler `now`."""
        self._pending -= 1
        self._expire(now)
        self._starts.append(now)

    def dropped(self) -> None:
        """A start let go never reached its handler (it could not run, or its lease went)."""
        self._pending -= 1

    def grant(self, now: float) -> None:
        """A start is let go now; `began` or `dropped` follows."""
        self._pending += 1
        late = now - self._next_at
        on_grid = 0 <= late <= self._catch_up
        self._next_at = (self._next_at if on_grid else max(now, self._next_at)) + self.interval

    def wait(self, now: float) -> float:
        """Seconds until a start may go (0 if one may now; infinite while only starts on
        their way to a handler fill the window: `began` or `dropped` moves it, not time)."""
        if self.may_start(now):
            return 0.0
        paced = self._next_at - self._tolerance - now
        windowed = 0.0
        if self.room(now) <= 0:
            windowed = self._starts[0] + self.span - now if self._starts else math.inf
        return max(0.0, paced, windowed)


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
