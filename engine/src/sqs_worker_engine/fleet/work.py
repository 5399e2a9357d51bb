"""What the simulated handlers do, and the ledger every message's life is checked against.

Each simulated message is a `Batch` of real messages (one, at scale 1): the ones that
arrived together (traffic.Group). A handler runs its members one after another, each for
a job's duration (lognormal around the mean), slowed by the downstream past its knee
(`Downstream`): so a replica clears what it would clear of real messages, and the fleet's
replica count, its backlog and the autoscaler's view follow the real ones.

A batch is never more than the real messages would be:
- on SIGTERM (`job.stopping`) its handler finishes the member it runs, then gives the
  rest back as a new simulated message: the worker would have received none of them;
- when its replica is killed (SIGKILL) the member it ran is cut off, and redone later:
  a duplicate run; the members not yet started are visible again at once, as they would
  have been; one prefetched and never started waits out its visibility timeout, as it
  would have;
- a batch finished whose delete never reached SQS before the kill is redelivered, and its
  last member redone: the real worker's unsent delete.

The ledger counts every member: sent, completed (first completions), dead-lettered,
outstanding, the runs started, duplicate runs by what caused them, and the runs cut off by
SIGKILL (handlers running, or finished with their delete not yet sent, when it came).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from .. import clock
from ..job import Job
from ..router import Router
from .traffic import Group

SLICE = 1.0  # seconds of work a handler does between looks at SIGTERM and the downstream
# What stopped a replica, and so what caused a run it cut off to be redone.
CAUSES = ("scale-in", "deploy", "crash", "deadline", "lease", "timeout")


@dataclass(frozen=True)
class Durations:
    """Job durations: lognormal with this mean and shape (sigma 0.5: a coefficient of
    variation of about 0.53), none past `longest` (the simulated jobs fit their timeout: a
    job that does not is retried by any worker, whatever the fleet does)."""

    mean: float
    sigma: float = 0.5
    longest: float = math.inf

    def total(self, rng: random.Random, n: int) -> float:
        """The time n jobs take one after another: a lognormal with their sum's mean and
        variance (one draw, not n)."""
        mean = n * self.mean
        variance = n * self.mean**2 * (math.exp(self.sigma**2) - 1)
        s2 = math.log(1 + variance / mean**2)
        return min(n * self.longest, rng.lognormvariate(math.log(mean) - s2 / 2, math.sqrt(s2)))


@dataclass(frozen=True)
class Downstream:
    """What the handlers call: each call takes its time while at most `capacity` calls are
    in flight across the fleet, and (calls / capacity)^2 times as long beyond (calls
    queue inside it). None: no knee."""

    capacity: int | None

    def factor(self, calls: int) -> float:
        if self.capacity is None or calls <= self.capacity:
            return 1.0
        return (calls / self.capacity) ** 2


class Histogram:
    """Counts of durations in buckets 1% wide (from 1 ms), for quantiles of millions of
    waits in little memory."""

    FLOOR = 0.001
    RATIO = 1.01

    def __init__(self) -> None:
        self.counts: dict[int, float] = {}
        self.total = 0.0
        self.max = 0.0

    def _bucket(self, seconds: float) -> int:
        return 0 if seconds <= self.FLOOR else 1 + int(math.log(seconds / self.FLOOR, self.RATIO))

    def _edge(self, bucket: int) -> float:
        return 0.0 if bucket == 0 else self.FLOOR * self.RATIO ** (bucket - 1)

    def add_range(self, low: float, high: float, count: int) -> None:
        """`count` values spread evenly from `low` to `high`."""
        low, high = max(0.0, min(low, high)), max(0.0, low, high)
        self.total += count
        self.max = max(self.max, high)
        first, last = self._bucket(low), self._bucket(high)
        if first == last:
            self.counts[first] = self.counts.get(first, 0.0) + count
            return
        width = high - low
        for b in range(first, last + 1):
            lo, hi = max(low, self._edge(b)), min(high, self._edge(b + 1))
            if hi > lo:
                self.counts[b] = self.counts.get(b, 0.0) + count * (hi - lo) / width

    def quantile(self, q: float) -> float:
        if not self.total:
            return 0.0
        wanted, seen = q * self.total, 0.0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen >= wanted:
                return min(self.max, self._edge(b + 1))
        return self.max


@dataclass(slots=True, eq=False)
class Batch:
    id: int
    count: int  # real messages it stands for
    first: float  # when the first arrived
    last: float  # when the last arrived (the rest evenly between)
    done: int = 0  # members completed
    runner: int | None = None  # the replica running it now
    run_from: int = 0  # the member the current run began at
    run_start: float = 0.0
    run_total: float = 0.0  # seconds the current run's members take, before the downstream's slowing
    cut: str | None = None  # a SIGKILL cut off the member at `done` (why): its next run is a duplicate
    rerun_last: str | None = None  # done, but its delete never reached SQS before a SIGKILL (why)

    def arrival(self, member: int) -> float:
        return self.first + (self.last - self.first) * member / max(1, self.count - 1)


class Ledger:
    def __init__(self, durations: Durations, downstream: Downstream | None = None, seed: int = 0) -> None:
        self.durations = durations
        self.downstream = downstream or Downstream(None)
        self.batches: dict[int, Batch] = {}
        self.sent = 0
        self.completed = 0
        self.dead_lettered = 0
        self.runs = 0  # member runs started, redone ones included
        self.duplicates: dict[str, int] = {}
        self.cut: dict[str, int] = {}
        self.calls = 0  # handler calls in flight across the fleet (the downstream's load)
        self.peak_calls = 0
        self.waits = Histogram()  # arrival to first start, per message
        self.simulated = 0  # simulated messages sent (splits included)
        self._oldest: list[tuple[float, int]] = []
        self._ids = itertools.count(1)
        self._rng = random.Random(seed)
        self.put: Callable[[str], str] | None = None  # sends a simulated message (the queue's `put`)

    # -- what the traffic and the queue tell it --------------------------------------------

    def send(self, group: Group) -> str:
        self.sent += group.count
        return self._add(Batch(next(self._ids), group.count, group.first, group.last))

    def _add(self, batch: Batch) -> str:
        self.batches[batch.id] = batch
        self.simulated += 1
        heapq.heappush(self._oldest, (batch.first, batch.id))
        return str(batch.id)

    def deleted(self, body: str) -> None:
        self.batches.pop(int(body), None)

    def dead_lettered_(self, body: str) -> None:
        batch = self.batches.pop(int(body), None)
        if batch is not None:
            self.dead_lettered += batch.count - batch.done

    # -- what observers read -----------------------------------------------------------------

    @property
    def outstanding(self) -> int:
        """Real messages sent and neither completed nor dead-lettered."""
        return self.sent - self.completed - self.dead_lettered

    def oldest_arrival(self) -> float | None:
        """When the oldest message not yet completed arrived (groups never overlap in time,
        so the group that arrived first holds it)."""
        heap = self._oldest
        while heap:
            first, number = heap[0]
            batch = self.batches.get(number)
            if batch is not None and batch.first == first and batch.done < batch.count:
                return batch.arrival(batch.done)
            heapq.heappop(heap)
        return None

    @property
    def duplicate_runs(self) -> int:
        return sum(self.duplicates.values())

    @property
    def cut_off(self) -> int:
        return sum(self.cut.values())

    # -- the handler ---------------------------------------------------------------------------

    def router(self, queue: str, replica: Replica) -> Router:
        router = Router()

        @router.handler(queue, payload=str)
        async def simulated(job: Job[str]) -> None:
            await self.run(job, replica)

        return router

    def _duplicate(self, cause: str) -> None:
        self.duplicates[cause] = self.duplicates.get(cause, 0) + 1
        self.runs += 1

    async def run(self, job: Job[str], replica: Replica) -> None:
        batch = self.batches.get(int(job.body))
        if batch is None:
            return
        if batch.runner is not None and batch.runner != replica.number:
            self._duplicate("lease")  # its lease ran out while another replica ran it
        if batch.rerun_last is not None:
            self._duplicate(batch.rerun_last)
            batch.rerun_last = None
            await self._work(self.durations.total(self._rng, 1), replica)
            return
        if batch.done >= batch.count:
            return
        if batch.cut is not None:
            self._duplicate(batch.cut)
            batch.cut = None
        n = batch.count - batch.done
        self.runs += n
        batch.runner, batch.run_from, batch.run_start = replica.number, batch.done, clock.now()
        batch.run_total = self.durations.total(self._rng, n)
        self.calls += 1
        self.peak_calls = max(self.peak_calls, self.calls)
        try:
            elapsed = 0.0
            while elapsed < batch.run_total:
                step = min(SLICE, batch.run_total - elapsed)
                await asyncio.sleep(step * self.downstream.factor(self.calls))
                if replica.killed or batch.runner != replica.number:
                    return  # cut off by a SIGKILL, or redone elsewhere: the ledger counted it
                elapsed += step
                progress = elapsed / batch.run_total * n
                if job.stopping and elapsed < batch.run_total:
                    # SIGTERM: finish the member it runs, give the rest back untouched.
                    rest = math.ceil(progress - 1e-9) - progress
                    if rest > 0:
                        await asyncio.sleep(rest * batch.run_total / n * self.downstream.factor(self.calls))
                        if replica.killed or batch.runner != replica.number:
                            return
                    self._complete(batch, batch.run_from + math.ceil(progress - 1e-9))
                    if batch.done < batch.count:
                        self.split(batch, batch.done)
                    return
                self._complete(batch, batch.run_from + int(progress + 1e-9))
            self._complete(batch, batch.count)
        except asyncio.CancelledError:
            # The job timeout (or its lease's loss) cancelled it: the member it ran is redone.
            if batch.runner == replica.number and not replica.killed and batch.done < batch.count:
                batch.cut = "timeout"
            raise
        finally:
            self.calls -= 1
            if batch.runner == replica.number:
                batch.runner = None

    async def _work(self, seconds: float, replica: Replica) -> None:
        self.calls += 1
        try:
            await asyncio.sleep(seconds * self.downstream.factor(self.calls))
        finally:
            self.calls -= 1

    def _complete(self, batch: Batch, upto: int) -> None:
        upto = min(upto, batch.count)
        if upto <= batch.done:
            return
        # Waits: each member started when the ones before it in this run were done.
        per = batch.run_total / max(1, batch.count - batch.run_from)
        start = batch.run_start + (batch.done - batch.run_from) * per
        end = batch.run_start + (upto - 1 - batch.run_from) * per
        self.waits.add_range(start - batch.arrival(batch.done), end - batch.arrival(upto - 1), upto - batch.done)
        self.completed += upto - batch.done
        batch.done = upto

    def split(self, batch: Batch, at: int) -> None:
        """Members `at`.. of `batch` become a simulated message of their own, visible now."""
        assert self.put is not None
        rest = Batch(next(self._ids), batch.count - at, batch.arrival(at), batch.last)
        batch.last = batch.arrival(at - 1) if at > 0 else batch.first
        batch.count = at
        self.put(self._add(rest))

    # -- what the platform tells it --------------------------------------------------------------

    def killed(self, replica: Replica, held: list[str], cause: str) -> None:
        """`replica` was SIGKILLed (for `cause`) holding the simulated messages `held`."""
        for body in held:
            batch = self.batches.get(int(body))
            if batch is None:
                continue
            if batch.done >= batch.count:  # finished, its delete never sent
                self.cut[cause] = self.cut.get(cause, 0) + 1
                batch.rerun_last = cause
                continue
            if batch.runner == replica.number:
                batch.runner = None
                self.cut[cause] = self.cut.get(cause, 0) + 1
                batch.cut = cause
            # What it had not started: the first waits out its lease with the dead replica,
            # the rest was never received.
            if batch.count - batch.done > 1:
                self.split(batch, batch.done + 1)


class Replica:
    """What the ledger needs to know of a replica: its number and whether it was killed."""

    _numbers = itertools.count(1)

    def __init__(self) -> None:
        self.number = next(Replica._numbers)
        self.killed = False


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0-1) of `values` by the nearest-rank method (0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
