"""How far ahead of its handler slots a pool receives (WORKER_PREFETCH), by Little's law.

A pool receives only for free places (slots.py). Without prefetch, a slot freed by a job
that ended waits a whole receive round trip for its next job: at SQS's in-region latency
(about 20 ms) a 10 ms handler would run at a third of its concurrency. With prefetch, a
pool keeps in hand as many messages as start during one round trip at full speed:

    concurrency x receive round trip / job time, plus one receive's 10

(the 10: a receive then asks for a whole batch while that many still wait), measured as it runs (running averages of the receives that came back with all they asked
for, which did not wait in a long poll, and of job durations), and never more than the
cap, WORKER_PREFETCH (0, the default, turns it off).

A prefetched message is a delivery like any other: leased and heartbeated, counted in
flight and against the held bound, started in the order it was received (FIFO: a group's
order and hold-back are unchanged, a group's next message waits for the one before it),
and released at once on SIGTERM. On SIGKILL it waits out its visibility timeout like the
running ones: at most WORKER_PREFETCH more messages than without prefetch.
"""

from __future__ import annotations

import math

from .limits import MAX_RECEIVE_BATCH

SMOOTHING = 0.2  # weight of the latest figure in each running average


def prefetch_target(concurrency: int, cap: int, receive_seconds: float | None, job_seconds: float | None) -> int:
    """Messages to hold beyond the concurrency: those that start during one receive round
    trip when every slot is busy, plus a receive's 10, so that the next receive can ask
    for a whole batch while that many still wait (slots.Slots.reserve); 0 until both have
    been measured."""
    if cap <= 0 or receive_seconds is None or job_seconds is None:
        return 0
    return min(cap, math.ceil(concurrency * receive_seconds / max(job_seconds, 1e-4)) + MAX_RECEIVE_BATCH)


class Pace:
    """The running averages `prefetch_target` needs."""

    def __init__(self) -> None:
        self.receive_seconds: float | None = None
        self.job_seconds: float | None = None

    def received(self, seconds: float) -> None:
        """A receive that brought all it asked for took `seconds`, request to response."""
        self.receive_seconds = _average(self.receive_seconds, seconds)

    def ran(self, seconds: float) -> None:
        self.job_seconds = _average(self.job_seconds, seconds)


def _average(current: float | None, latest: float) -> float:
    return latest if current is None else current + SMOOTHING * (latest - current)
