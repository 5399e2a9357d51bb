"""Traffic: the standard shapes a fleet is simulated under, and the arrivals they make.

A shape's rate is a fraction of the fleet's *capacity* (max replicas x concurrency / mean
job seconds: what the whole fleet clears at most), so the same shapes load any bake the
same way; `Drip` and the million-an-hour day are absolute. Arrivals are Poisson with the
shape's rate, drawn from a seeded generator: the fleet and its oracle see the same ones.

Each simulated message may stand for `k` real ones (the run's scale, see `Batch` in
work.py): arrivals are grouped in order, k at a time, and a group is sent once its last
member has arrived, or once its first has waited `span` seconds (at most MAX_SPAN: a
quiet spell does not hold messages back). Arrivals are drawn STEP seconds at a time but
sent at their own moments: sent at the step's end, a quarter-second's arrivals came as one
burst, which 10 ms jobs saw as a standing queue (and the counts, read on whole seconds
like the steps' ends, as a backlog).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

HOUR = 3600.0
DAY = 24 * HOUR
STEP = 0.25  # seconds of arrivals drawn at a time
MAX_SPAN = 1.0  # the longest a group's first member waits for the rest before it is sent


@dataclass(frozen=True)
class Steady:
    level: float

    def rate(self, t: float) -> float:
        return self.level


@dataclass(frozen=True)
class Diurnal:
    """A day: lowest at `trough_hour`, highest twelve hours later, a cosine between."""

    low: float
    high: float
    trough_hour: float = 4.0

    def rate(self, t: float) -> float:
        phase = 2 * math.pi * (t / DAY - self.trough_hour / 24)
        return self.low + (self.high - self.low) * (1 - math.cos(phase)) / 2


@dataclass(frozen=True)
class Bursts:
    """`base`, with `level` for `length` seconds every `every` seconds (the first at `first`)."""

    base: float
    level: float
    every: float
    length: float
    first: float

    def rate(self, t: float) -> float:
        if t < self.first:
            return self.base
        return self.level if (t - self.first) % self.every < self.length else self.base


@dataclass(frozen=True)
class Spike:
    """`base`, then `factor` x `base` from `at` for `length` seconds."""

    base: float
    factor: float
    at: float
    length: float

    def rate(self, t: float) -> float:
        return self.base * self.factor if self.at <= t < self.at + self.length else self.base


Profile = Steady | Diurnal | Bursts | Spike


@dataclass(frozen=True)
class Event:
    """Something the platform does at `at` seconds: `deploy` (a rolling update of every
    replica), `crash` (one replica killed at once, as by the OOM killer or a lost node),
    `spot` (a Spot interruption: one replica gets SIGTERM with the two-minute warning and is
    replaced) or `bad-release` (a rolling update to a release whose handler fails every job)."""

    at: float
    kind: str


@dataclass(frozen=True)
class Shape:
    name: str
    title: str
    seconds: float
    profile: Profile
    absolute: bool = False  # the profile is in messages per second, not a share of capacity
    events: tuple[Event, ...] = ()
    job_seconds: float | None = None  # the mean job this shape assumes, if not the run's
    targets: tuple[str, ...] = field(default=())  # which of the targets it measures
    interruptions_per_hour: float = 0.0  # Spot interruptions, at seed-drawn moments (`interruptions`)

    def rate(self, t: float, capacity: float) -> float:
        """Messages per second at `t`."""
        rate = self.profile.rate(t)
        return rate if self.absolute else rate * capacity

    def mean_rate(self, capacity: float, step: float = 60.0) -> float:
        n = max(1, int(self.seconds / step))
        return sum(self.rate((i + 0.5) * self.seconds / n, capacity) for i in range(n)) / n


def interruptions(shape: Shape, seed: int) -> tuple[Event, ...]:
    """The shape's Spot interruptions: `interruptions_per_hour` x its hours of them (rounded),
    each at a moment drawn from the seed within the shape's middle 90% (so each one's
    replacement and drain are seen within it). A fixed count rather than a Poisson one: two
    seeds differ in when the interruptions come, not in how many."""
    count = round(shape.interruptions_per_hour * shape.seconds / HOUR)
    rng = random.Random(f"{seed}:spot")
    return tuple(Event(round(rng.uniform(0.05, 0.95) * shape.seconds, 1), "spot") for _ in range(count))


def events(shape: Shape, seed: int) -> list[Event]:
    """Everything the platform does in the shape, in time order."""
    return sorted((*shape.events, *interruptions(shape, seed)), key=lambda e: e.at)


MILLION_AN_HOUR = 1_000_000 / HOUR
SPOT_PER_HOUR = 4.0  # the spot shape's interruptions: a stress far above Fargate Spot's usual rate

SHAPES: dict[str, Shape] = {
    shape.name: shape
    for shape in (
        Shape(
            "steady",
            "Steady at half the fleet's capacity, with a rolling deploy and one crash",
            HOUR,
            Steady(0.5),
            events=(Event(20 * 60, "deploy"), Event(40 * 60, "crash")),
        ),
        Shape(
            "diurnal",
            "A day: 5% of capacity at 04:00, 80% at 16:00, a deploy at 14:00",
            DAY,
            Diurnal(0.05, 0.8),
            events=(Event(14 * HOUR, "deploy"),),
            targets=("no-thrash", "replica-minutes"),
        ),
        Shape(
            "bursts",
            "A bursty queue: 10% of capacity, 60% for 5 minutes every 20 minutes",
            2 * HOUR,
            Bursts(0.1, 0.6, 20 * 60, 5 * 60, 10 * 60),
        ),
        Shape(
            "spike",
            "A 10x spike: 15% of capacity, then 10x that (150%) for 10 minutes",
            HOUR + 30 * 60,
            Spike(0.15, 10.0, 20 * 60, 10 * 60),
            targets=("spike-age",),
        ),
        Shape(
            "spike-within",
            "A 10x spike the fleet can absorb: 5% of capacity, then 50% for 10 minutes",
            HOUR,
            Spike(0.05, 10.0, 20 * 60, 10 * 60),
        ),
        Shape(
            "spot",
            f"Steady at half the fleet's capacity on Spot capacity, {SPOT_PER_HOUR:g} interruptions an hour "
            "(two-minute warning, replaced), at moments drawn from the seed",
            HOUR,
            Steady(0.5),
            interruptions_per_hour=SPOT_PER_HOUR,
            targets=("spot",),
        ),
        Shape(
            "bad-release",
            "Steady at half the fleet's capacity; at 20 minutes a release whose handler fails every job rolls out",
            HOUR,
            Steady(0.5),
            events=(Event(20 * 60, "bad-release"),),
            targets=("bad-release",),
        ),
        Shape("drip", "A slow drip: one message a minute for two hours", 2 * HOUR, Steady(1 / 60), absolute=True),
        # The steady shape with short jobs: a busy replica holds more beyond its slots the
        # shorter its jobs (its prefetch, and deletes on their way), and SQS counts all of it.
        *(
            Shape(
                f"steady-{label.replace(' ', '')}",
                f"Steady at half the fleet's capacity, {label} jobs, with a rolling deploy and one crash",
                HOUR,
                Steady(0.5),
                events=(Event(20 * 60, "deploy"), Event(40 * 60, "crash")),
                job_seconds=seconds,
                targets=("replica-minutes",) if target else (),
            )
            for label, seconds, target in (("10 ms", 0.01, True), ("100 ms", 0.1, False), ("1 s", 1.0, True))
        ),
        Shape(
            "day-1m",
            "A day at a million messages an hour (diurnal, 0.5-1.5M/h), 0.1 s jobs",
            DAY,
            Diurnal(0.5 * MILLION_AN_HOUR, 1.5 * MILLION_AN_HOUR),
            absolute=True,
            events=(Event(14 * HOUR, "deploy"), Event(18 * HOUR, "crash")),
            job_seconds=0.1,
            targets=("day-runtime",),
        ),
    )
}
# What `make simulate` runs by default: everything but the heavy million-an-hour day.
STANDARD = ("steady", "diurnal", "bursts", "spike", "spike-within", "drip", "steady-10ms", "steady-100ms", "steady-1s")


@dataclass(frozen=True, slots=True)
class Group:
    """Arrived messages sent as one simulated message: `count` of them, the first at `first`,
    the last at `last` (the rest evenly between)."""

    count: int
    first: float
    last: float


def poisson(rng: random.Random, mean: float) -> int:
    """A Poisson draw: exact (Knuth) for small means, the normal approximation above 30."""
    if mean <= 0:
        return 0
    if mean > 30:
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, k, p = math.exp(-mean), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


def arrivals(
    shape: Shape, capacity: float, k: int, seed: int, span: float = MAX_SPAN
) -> Iterator[tuple[float, list[Group]]]:
    """(time, groups to send then), in time order over the shape: a full group when its
    last member arrives, one its span closed at the end of the step; every group has at
    most `k` messages, and no message waits for the rest of its group more than `span`
    seconds (plus a step)."""
    rng = random.Random(seed)
    pending, first, last = 0, 0.0, 0.0
    steps = math.ceil(shape.seconds / STEP)
    for step in range(steps):
        t = step * STEP
        end = min(shape.seconds, t + STEP)
        n = poisson(rng, shape.rate(t + STEP / 2, capacity) * (end - t))
        if n:
            spacing = (end - t) / n
            taken = 0
            while taken < n:
                if pending == 0:
                    first = t + (taken + 0.5) * spacing
                more = min(k - pending, n - taken)
                pending += more
                taken += more
                last = t + (taken - 0.5) * spacing
                if pending == k:
                    yield last, [Group(k, first, last)]
                    pending = 0
        if pending and end - first >= span:
            yield end, [Group(pending, first, last)]
            pending = 0
    if pending:
        yield shape.seconds, [Group(pending, first, last)]
