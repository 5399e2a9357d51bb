"""The backlog sampler: each queue's depth for the dashboards and the oldest message's age
(metrics.QUEUE_MESSAGES, metrics.OLDEST_MESSAGE), one GetQueueAttributes per queue per
interval, and SQS's reachability for the health check.

What a pool received since the last sample (how many, and the oldest age seen) is kept
by its `Received`: the pool notes each receive, the sampler takes the figures and starts
them again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..base.sqs import SqsApi
from ..base.telemetry import metrics
from ..base.telemetry.health import Health

NAMES = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"]
STATES = dict(zip(NAMES, ("visible", "in_flight", "delayed"), strict=True))


@dataclass
class Received:
    """What a pool received since the last sample (written by its methods only)."""

    count: int = 0  # messages: lets the sampler skip an idle queue
    oldest_age: float = 0.0  # the greatest age at receive

    def note(self, count: int, oldest_age: float) -> None:
        self.count += count
        self.oldest_age = max(self.oldest_age, oldest_age)

    def take_count(self) -> int:
        """Messages received since the count was last taken; it starts again from nothing."""
        count, self.count = self.count, 0
        return count

    def take_oldest(self) -> float:
        """The greatest age seen since it was last taken; it starts again from nothing."""
        oldest, self.oldest_age = self.oldest_age, 0.0
        return oldest


class Sampled(Protocol):
    """What the sampler reads of a pool."""

    @property
    def name(self) -> str: ...

    @property
    def url(self) -> str: ...

    @property
    def received(self) -> Received: ...

    @property
    def active(self) -> int: ...

    @property
    def deferred(self) -> list[object]: ...


class BacklogSampler:
    def __init__(self, pools: Sequence[Sampled], client: Callable[[], SqsApi], health: Health, interval: float) -> None:
        self.pools = pools
        self.client = client  # the control client, known once the worker has started
        self.health = health
        self.interval = interval
        self.oldest: dict[str, float] = {}  # queue -> the oldest message's age, as last shown
        self.quiet: set[str] = set()  # queues the last sample found empty

    async def run(self) -> None:
        while True:
            for pool in self.pools:
                await self.sample(pool)
            await asyncio.sleep(self.interval)

    async def sample(self, pool: Sampled) -> None:
        # An idle queue (nothing received, nothing running, nothing there last time) is not
        # asked again: its polls would see new messages first, and an idle worker should
        # cost no more than its long polls (SQS bills per request).
        idle = not pool.received.count and not pool.active and not pool.deferred
        if idle and self.oldest.get(pool.name) == 0.0 and pool.name in self.quiet:
            return
        pool.received.take_count()
        try:
            resp = await self.client().get_queue_attributes(QueueUrl=pool.url, AttributeNames=NAMES)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.health.sqs_result(False)
            return
        self.health.sqs_result(True)
        attrs: dict[str, str] = {str(k): v for k, v in resp.get("Attributes", {}).items()}
        for name, state in STATES.items():
            metrics.QUEUE_MESSAGES.labels(pool.name, state).set(int(attrs.get(name, "0")))
        if all(int(attrs.get(name, "0")) == 0 for name in NAMES):
            self.quiet.add(pool.name)
        else:
            self.quiet.discard(pool.name)
        oldest_age = pool.received.take_oldest()
        if oldest_age:
            self.oldest[pool.name] = oldest_age
        elif int(attrs.get("ApproximateNumberOfMessages", "0")) == 0:
            self.oldest[pool.name] = 0.0
        else:  # a backlog, but nothing received: it is ageing
            self.oldest[pool.name] = self.oldest.get(pool.name, 0.0) + self.interval
        metrics.OLDEST_MESSAGE.labels(pool.name).set(self.oldest[pool.name])
