"""What the simulated handlers do, and the ledger every message's life is checked against.

Each simulated message is a `Batch` of real messages (one, at scale 1): ones that arrived
together (traffic.Group). Its handler runs them in *waves* of `width`, side by side (the
replica's real concurrency is `width` times its simulated one: sizing.worker_config),
each wave for one job's duration (lognormal around the mean), slowed by the downstream
past its knee (`Downstream`); waves run one after another. At scale k = width x depth a
replica clears what it would of real messages, members of one wave finish together (as
`width` real jobs of the same length would), and only a depth above 1 makes members wait
for the waves before theirs (sizing.choose_scale says when).

A batch is never more than its real messages would be:
- on SIGTERM (`job.stopping`) its handler finishes the wave it runs, then gives the rest
  back as a new simulated message: the worker would have received none of them;
- when its replica is killed (SIGKILL) the wave it ran is cut off, and redone later:
  duplicate runs; the waves not yet started are visible again at once, as they would have
  been; a wave prefetched and never started waits out its visibility timeout, as it would;
- a batch finished whose delete never reached SQS before the kill is redelivered and its
  last wave redone: the real workers' unsent deletes.

The ledger counts every member: sent, completed (first completions), dead-lettered,
outstanding, the runs started, duplicate runs by what caused them, and the runs cut off by
SIGKILL (handlers running, or finished with their delete not yet sent, when it came). What
SQS counts is not what is outstanding: a message whose job ended is still in flight until
its delete lands (the worker's batching and the call's round trip: with 10 ms jobs, more
messages than its handlers run), and members waiting behind their batch's earlier waves
would not be waiting at all (`observed`).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from ...base import clock
from ...handlers.job import Job
from ...handlers.router import Router
from .traffic import Group

SLICE = 1.0  # seconds of work a handler does between looks at SIGTERM and the downstream
# What stopped a replica, and so what caused a run it cut off to be redone.
CAUSES = ("scale-in", "deploy", "crash", "deadline", "spot", "lease", "timeout")


class BadReleaseError(Exception):
    """What a bad release's handler raises on every job (the simulator's `bad-release` event)."""


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
    wave: int = 0  # members in the wave running now
    cut: str | None = None  # a SIGKILL cut off the wave at `done` (why): its next run repeats it
    cut_members: int = 0
    rerun: str | None = None  # done, but its delete never reached SQS before a SIGKILL (why)
    rerun_members: int = 0  # the last wave, run again on its redelivery
    behind: int = 0  # members waiting, while it runs, for the waves before theirs
    undeleted: int = 0  # finished, its delete not yet landed: the members SQS counts meanwhile

    def arrival(self, member: int) -> float:
        return self.first + (self.last - self.first) * member / max(1, self.count - 1)


class Ledger:
    def __init__(
        self,
        durations: Durations,
        downstream: Downstream | None = None,
        seed: int = 0,
        width: int = 1,
        delete_wait: float = 0.0,
        ahead: int = 0,
    ) -> None:
        """`width`: real messages a simulated handler call runs side by side (a wave).
        `delete_wait`: how long a real delete waits for its batch, where the simulated
        worker's do not (sizing.worker_config): its members are counted that much
        longer after their delete lands. `ahead`: real messages a real replica holds ahead
        of its slots at most (its prefetch target when they are all busy)."""
        self.durations = durations
        self.width = width
        self.delete_wait = delete_wait
        self.ahead = ahead
        self.downstream = downstream or Downstream(None)
        self.batches: dict[int, Batch] = {}
        self.sent = 0
        self.completed = 0
        self.dead_lettered = 0
        self.runs = 0  # member runs started, redone ones included
        self.failed = 0  # member runs a bad release's handler failed (each one a retry, or a dead letter)
        self.duplicates: dict[str, int] = {}
        self.cut: dict[str, int] = {}
        self.calls = 0  # handler calls in flight across the fleet (the downstream's load)
        self.peak_calls = 0
        # Members of running batches waiting for the waves before theirs. Real messages
        # would not wait so: any free worker would have taken them. Readers of the counts
        # are shown the queue without them (see `observed`).
        self.behind = 0
        self.undeleted = 0  # members of finished batches whose delete has not landed
        self.waits = Histogram()  # per message: from arrival to the start of the run that completed it
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
        batch = self.batches.pop(int(body), None)
        if batch is None:
            return
        self._behind(batch, 0)
        if not batch.undeleted:
            return
        if self.delete_wait > 0:
            asyncio.get_running_loop().call_later(self.delete_wait, self._landed, batch.undeleted)
        else:
            self._landed(batch.undeleted)

    def _landed(self, members: int) -> None:
        self.undeleted -= members

    def held(self, body: str, held: bool) -> None:
        """A replica's receive took a simulated message (`held`), or it is visible again.
        Held and not yet running, it stands for what a real replica holds ahead of its
        slots (`ahead`, a wave at least); its other members wait behind, as a running
        one's do: real ones would not all be waiting in one replica's hand."""
        batch = self.batches.get(int(body))
        if batch is not None and batch.runner is None:
            beyond = batch.count - batch.done - max(self.width, self.ahead)
            self._behind(batch, max(0, beyond) if held else 0)

    def dead_lettered_(self, body: str) -> None:
        batch = self.batches.pop(int(body), None)
        if batch is not None:
            self.dead_lettered += batch.count - batch.done
            self.undeleted -= batch.undeleted
            self._behind(batch, 0)

    # -- what observers read -----------------------------------------------------------------

    def members(self, bodies: list[str]) -> int:
        """Real messages not yet completed of these simulated ones."""
        batches = (self.batches.get(int(body)) for body in bodies)
        return sum(b.count - b.done for b in batches if b is not None)

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
    def observed(self) -> int:
        """Outstanding as SQS would count it: less the members a simulated message keeps
        waiting behind its own earlier waves (none at a depth of 1), plus those whose job
        ended and whose delete has not landed (a batch's members while its delete is out,
        as long as each wave's would have been)."""
        return self.outstanding - self.behind + self.undeleted

    def _behind(self, batch: Batch, members: int) -> None:
        self.behind += members - batch.behind
        batch.behind = members

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

    def _duplicate(self, cause: str, members: int) -> None:
        self.duplicates[cause] = self.duplicates.get(cause, 0) + members

    async def run(self, job: Job[str], replica: Replica) -> None:
        batch = self.batches.get(int(job.body))
        if batch is None:
            return
        if replica.failing:  # a bad release: its handler raises at once, the engine retries
            self.failed += batch.count - batch.done
            raise BadReleaseError(f"replica {replica.number} runs a release that fails every job")
        if batch.runner is not None and batch.runner != replica.number:
            self._duplicate("lease", batch.wave)  # its lease ran out while another replica ran it
        if batch.rerun is not None:
            self._duplicate(batch.rerun, batch.rerun_members)
            members, batch.rerun = batch.rerun_members, None
            self.runs += members
            self.calls += members
            try:
                await asyncio.sleep(self.durations.total(self._rng, 1) * self.downstream.factor(self.calls))
            finally:
                self.calls -= members
            return
        batch.runner = replica.number
        try:
            while batch.done < batch.count:
                if not await self._wave(batch, replica):
                    return  # cut off by a SIGKILL, or redone elsewhere: the ledger counted it
                if job.stopping and batch.done < batch.count:
                    self.split(batch, batch.done)  # SIGTERM: the rest goes back, never started
                    return
            if not batch.undeleted:  # its delete is the worker's to send now
                # All its members, for as long as its one delete takes: a real worker's
                # deletes, one a wave, would have been in flight as long for each wave.
                batch.undeleted = batch.count
                self.undeleted += batch.undeleted
        except asyncio.CancelledError:
            # The job timeout (or its lease's loss) cancelled it: the wave it ran is redone.
            if batch.runner == replica.number and not replica.killed and batch.done < batch.count:
                batch.cut, batch.cut_members = "timeout", batch.wave
            raise
        finally:
            if batch.runner == replica.number:
                batch.runner = None
                self._behind(batch, 0)

    async def _wave(self, batch: Batch, replica: Replica) -> bool:
        """Run the next `width` members side by side; False if the run was cut off."""
        members = min(self.width, batch.count - batch.done)
        if batch.cut is not None:
            self._duplicate(batch.cut, min(members, batch.cut_members))
            batch.cut = None
        batch.wave = members
        self._behind(batch, batch.count - batch.done - members)
        self.runs += members
        began = clock.now()
        seconds = self.durations.total(self._rng, 1)
        self.calls += members
        self.peak_calls = max(self.peak_calls, self.calls)
        try:
            elapsed = 0.0
            while elapsed < seconds:
                step = min(SLICE, seconds - elapsed)
                await asyncio.sleep(step * self.downstream.factor(self.calls))
                if replica.killed or batch.runner != replica.number:
                    return False
                elapsed += step
        finally:
            self.calls -= members
            batch.wave = 0
        # Waits: from arrival to the start of the run that completed it.
        first, last = batch.arrival(batch.done), batch.arrival(batch.done + members - 1)
        self.waits.add_range(began - first, began - last, members)
        self.completed += members
        batch.done += members
        return True

    def _last_wave(self, batch: Batch) -> int:
        return batch.count % self.width or min(self.width, batch.count)

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
            if batch.done >= batch.count:  # finished, its delete never sent: its last wave again
                last = self._last_wave(batch)
                self.cut[cause] = self.cut.get(cause, 0) + last
                batch.rerun, batch.rerun_members = cause, last
                continue
            if batch.runner == replica.number and batch.wave:
                self.cut[cause] = self.cut.get(cause, 0) + batch.wave
                batch.cut, batch.cut_members = cause, batch.wave
            batch.runner = None
            self._behind(batch, 0)
            # What it had not started: one wave waits out its lease with the dead replica,
            # the rest was never received.
            if batch.count - batch.done > self.width:
                self.split(batch, batch.done + self.width)


class Replica:
    """What the ledger needs to know of a replica: its number, whether it was killed, and
    whether it runs a bad release."""

    _numbers = itertools.count(1)

    def __init__(self, *, failing: bool = False) -> None:
        self.number = next(Replica._numbers)
        self.killed = False
        self.failing = failing  # its version's handler fails every job (a bad release)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0-1) of `values` by the nearest-rank method (0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
