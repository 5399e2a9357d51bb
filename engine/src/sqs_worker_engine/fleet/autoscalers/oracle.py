"""The oracle: the same fleet under an autoscaler that knows the traffic to come.

It has the same replica bounds, the same pods (start latency, drains, kills) and the same
engine; it differs only in knowing. Every sync (15 s) it asks for the replicas that the
busiest rate of the next start latency plus a sync needs, at 90% of their handlers, plus
what clears the messages already waiting within a minute, read true (no lag), and scales
in as soon as they are not needed. For a ScaledJob it starts one Job per message, a
start latency before the message arrives (and one per message already waiting that no
Job is on its way for). The figures of each shape are given as ratios to its run.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ...base import clock
from ..load.traffic import Group
from .hpa import SYNC_SECONDS
from .platform import JobPods, ReplicaSet

UTILIZATION = 0.9  # of the handlers, at the rate to come
CLEAR_SECONDS = 60.0  # a backlog is cleared within this, on top of the rate
LOOK = 5.0  # seconds between the rates it samples ahead


@dataclass(frozen=True)
class Oracle:
    rate: Callable[[float], float]  # messages per second at a time of the run
    job_seconds: float
    concurrency: int
    start_seconds: float  # the longest a pod takes to start
    minimum: int
    maximum: int

    def desired(self, now: float, waiting: int) -> int:
        """Replicas for the rate from now to a start latency and a sync ahead, and for
        `waiting` messages (visible, true) to be cleared within CLEAR_SECONDS."""
        horizon = self.start_seconds + SYNC_SECONDS
        steps = max(1, int(horizon / LOOK))
        peak = max(self.rate(now + i * horizon / steps) for i in range(steps + 1))
        busy = peak * self.job_seconds / UTILIZATION + waiting * self.job_seconds / CLEAR_SECONDS
        return min(self.maximum, max(self.minimum, math.ceil(busy / self.concurrency - 1e-9)))


async def scale(
    oracle: Oracle,
    fleet: ReplicaSet,
    waiting: Callable[[], int],
    on_decision: Callable[[int], None],
    since: float,
) -> None:
    while True:
        desired = oracle.desired(clock.now() - since, waiting())
        fleet.scale_to(desired)
        on_decision(desired)
        await asyncio.sleep(SYNC_SECONDS)


async def start_jobs(
    ahead: Iterator[tuple[float, list[Group]]],
    jobs: JobPods,
    start_seconds: float,
    maximum: int,
    waiting: Callable[[], int],
    idle: Callable[[], int],
    since: float,
) -> None:
    """One Job per message to come, `start_seconds` before it arrives; one per message
    waiting beyond the Jobs still to take one."""
    upcoming = next(ahead, None)
    while True:
        now = clock.now() - since
        due = 0
        while upcoming is not None and upcoming[0] <= now + start_seconds:
            due += sum(g.count for g in upcoming[1])
            upcoming = next(ahead, None)
        behind = max(0, waiting() - idle() - due)
        jobs.create(min(maximum - jobs.active(), due + behind))
        await asyncio.sleep(1.0)
