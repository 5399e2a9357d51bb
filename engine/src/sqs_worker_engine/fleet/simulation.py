"""One run: a shape of traffic against the bake's fleet on one platform, under the
platform's autoscaler or the oracle, on virtual time; its figures.

The pieces, each a module: traffic (arrivals), queue (SQS), counts (what readers of SQS's
counts see), work (the handlers and the ledger), platform (pods, rollouts, kills), keda
and hpa (Kubernetes), targettracking (ECS), oracle. This module wires them, samples the
truth once a simulated second, and turns what happened into figures (`figures`).

Before the shape starts the fleet stands at its minimum with every pod ready; after it
ends the traffic stops and the fleet works on until nothing is left (at most
`drain_limit`), so that every message is seen to end. Replica-minutes, ages and scale
events are counted over the shape's own time.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..base import clock
from ..base.limits import (
    MAX_RECEIVE_BATCH,
    SCALING_JOB_SECONDS,
    SQS_ROUND_TRIP_SECONDS,
    default_prefetch,
    prefetch_target,
)
from ..doubles.vtime import run as run_on_virtual_time
from ..process.settings import ServiceDefaults, WorkerConfig, load_settings
from . import cost, keda, oracle, targettracking
from .counts import Counts, Truth
from .deployfiles import Bake, Deployment, EcsService, ScaledJob
from .deployfiles import Worker as WorkerSpec
from .platform import JobPods, ReplicaSet, World, ecs_batch
from .queue import STANDARD_INFLIGHT_LIMIT, FleetQueue
from .traffic import MAX_SPAN, Group, Shape, arrivals
from .work import CAUSES, Downstream, Durations, Ledger, percentile

# Typical time from "create" to a worker receiving (scheduling, image pull from a warm
# cache, the interpreter, the first receive): a pod on a node with room, a Fargate task.
START_SECONDS = {"kubernetes": 30.0, "ecs": 60.0}
FIFO_INFLIGHT_LIMIT = 20_000
# Settings the simulated workers do not take from the deploy files: where the queue and
# handlers are, the metrics server, the progress file, S3 for large payloads.
NOT_SIMULATED = ("WORKER_QUEUES", "WORKER_HANDLERS", "WORKER_METRICS_HOST", "WORKER_METRICS_PORT", "WORKER_HEALTH_FILE")
ACK_FLUSH_MS = 100  # WORKER_ACK_FLUSH_MS's default: the longest a delete waits for a batch of 10

Progress = Callable[[float, str], None]


@dataclass(frozen=True)
class Options:
    job_seconds: float | None = None  # mean job duration (lognormal; None: see `job_seconds`)
    start_seconds: float | None = None  # pod/task start latency (default: the platform's, above)
    scale: int | None = None  # real messages per simulated one (None: chosen, see `choose_scale`)
    seed: int = 1
    count_lag: float = 60.0  # SQS's approximate counts lag up to this
    cloudwatch_delay: float = 60.0  # a CloudWatch datapoint is published this long after its minute
    sqs_latency: float = SQS_ROUND_TRIP_SECONDS  # each SQS request's round trip
    downstream: int | None = None  # calls in flight the downstream takes (None: the fleet's handler budget)
    drain_limit: float = 3 * 3600.0  # after the shape, how long the fleet may take to finish
    budget: int = 600_000  # simulated messages a run aims at when choosing its scale
    max_batch_seconds: float = 10.0  # the longest a simulated message's run may be (below heartbeats)
    inflight_limit: int | None = None  # SQS's in-flight quota (None: 120,000 standard, 20,000 FIFO)


@dataclass(frozen=True)
class Run:
    shape: Shape
    platform: str  # kubernetes or ecs
    bake: Bake
    options: Options = field(default_factory=Options)
    oracle: bool = False

    def spec(self) -> Deployment | ScaledJob | EcsService:
        spec = self.bake.kubernetes if self.platform == "kubernetes" else self.bake.ecs
        if spec is None:
            raise ValueError(f"the bake does not deploy to {self.platform}")
        return spec


def fleet_shape(spec: Deployment | ScaledJob | EcsService) -> tuple[int, int, int]:
    """(handlers per replica, min replicas, max replicas)."""
    if isinstance(spec, ScaledJob):
        return 1, spec.minimum, spec.maximum
    if isinstance(spec, Deployment):
        return spec.worker.concurrency, max(1, spec.scaling.minimum), spec.scaling.maximum
    return spec.worker.concurrency, spec.minimum, spec.maximum


def capacity(run: Run) -> float:
    """Messages per second the fleet clears at most: max replicas x handlers / job seconds
    (a ScaledJob's pod also starts for each job)."""
    spec = run.spec()
    per_replica, _, maximum = fleet_shape(spec)
    seconds = job_seconds(run)
    if isinstance(spec, ScaledJob):
        seconds += start_seconds(run)
    return maximum * per_replica / seconds


# The standard shapes' mean job: the one the generated scaling targets are sized for. A
# fleet's replicas follow its load (rate x job time), so shorter jobs at the same load give
# the same fleet with more messages, which cost the simulator CPU; but a busy replica of
# them holds more beyond its slots, which SQS counts (the steady-10ms, -100ms and -1s
# shapes). 5 s keeps a simulated day near half a million messages, run one for one (see
# choose_scale).
DEFAULT_JOB_SECONDS = SCALING_JOB_SECONDS
# A scaled run's simulated message lasts at least this many SQS round trips: with 10 ms jobs
# 8 side by side in one wave (20 ms against a 20 ms round trip), the simulated replicas ran
# at three quarters of their slots; in three waves or more, at 97% to 100%.
SCALED_RUN_TRIPS = 2.0


def job_seconds(run: Run) -> float:
    """The mean job: the shape's, else the run's, else DEFAULT_JOB_SECONDS (a quarter of
    the job timeout for a ScaledJob, whose jobs are long)."""
    if run.shape.job_seconds is not None:
        return run.shape.job_seconds
    if run.options.job_seconds is not None:
        return run.options.job_seconds
    spec = run.spec()
    if isinstance(spec, ScaledJob):
        return spec.worker.number("WORKER_JOB_TIMEOUT_MS", 60_000) / 1000 / 4
    return DEFAULT_JOB_SECONDS


def inflight_limit(run: Run) -> int:
    if run.options.inflight_limit is not None:
        return run.options.inflight_limit
    return FIFO_INFLIGHT_LIMIT if run.spec().worker.fifo else STANDARD_INFLIGHT_LIMIT


def start_seconds(run: Run) -> float:
    return run.options.start_seconds or START_SECONDS[run.platform]


@dataclass(frozen=True)
class Scale:
    """How many real messages a simulated one stands for: `width` run side by side (the
    simulated worker's concurrency is the real one / width), in `depth` waves one after
    another. k = width x depth."""

    width: int = 1
    depth: int = 1

    @property
    def k(self) -> int:
        return self.width * self.depth


def choose_scale(run: Run) -> Scale:
    """1 unless the shape has more than the budget of simulated messages; then a width (a
    divisor of the concurrency: no message waits for another) no wider than the quietest
    moment of the shape fills within a group's span (a wave less than full would hold a
    simulated slot that stands for `width` real ones), then a depth, never so deep that a
    simulated message's run outlasts `max_batch_seconds` (a depth makes members wait for
    the waves before theirs; a long run would need heartbeats a real job does not), nor so
    shallow that it is shorter than SCALED_RUN_TRIPS round trips of SQS's.
    `--scale K` is taken as given. A ScaledJob's pod takes one message: always 1."""
    spec = run.spec()
    if isinstance(spec, ScaledJob):
        return Scale()
    concurrency = spec.worker.concurrency
    if run.options.scale is not None:
        wanted = run.options.scale
        width = max(d for d in range(1, concurrency + 1) if concurrency % d == 0 and d <= wanted)
        return Scale(width, math.ceil(wanted / width))
    expected = run.shape.mean_rate(capacity(run)) * run.shape.seconds
    wanted = math.ceil(expected / run.options.budget)
    if wanted <= 1:
        return Scale()
    job = job_seconds(run)
    deepest = max(1, math.floor(run.options.max_batch_seconds / job))
    # A scaled worker holds a message or two ahead of its slots (worker_config): for them
    # to keep its slots busy, a simulated message's run must outlast SQS's round trips.
    shallowest = min(deepest, math.ceil(SCALED_RUN_TRIPS * run.options.sqs_latency / job))
    quietest = min(run.shape.rate(t, capacity(run)) for t in _moments(run.shape.seconds))
    for width in sorted((d for d in range(1, concurrency + 1) if concurrency % d == 0 and d <= wanted), reverse=True):
        scale = Scale(width, min(deepest, max(shallowest, math.ceil(wanted / width))))
        if width == 1 or quietest * group_span(run, scale) >= width:
            return scale
    return Scale()


def _moments(seconds: float, step: float = 60.0) -> list[float]:
    return [i * step for i in range(max(1, int(seconds / step)))]


def group_span(run: Run, scale: Scale) -> float:
    """How long a group's first message waits for the rest: half the waves' time, at least
    50 ms, never past MAX_SPAN."""
    return min(MAX_SPAN, max(0.05, 0.5 * scale.depth * job_seconds(run)))


def worker_config(
    worker: WorkerSpec,
    queue: str,
    scale: Scale | None = None,
    job: float = DEFAULT_JOB_SECONDS,
    round_trip: float = SQS_ROUND_TRIP_SECONDS,
) -> WorkerConfig:
    """The simulated worker's configuration: the deploy file's worker settings, its
    concurrency divided by the scale's width (each simulated call runs `width` jobs side by
    side), and what it holds beyond its slots as many real messages as the real worker's.

    At a scale k > 1 the simulated worker's own prefetch sizing would hold k times too
    many: a receive's 10 it adds (prefetch.py) are 10 simulated messages, 10k real ones. So
    its cap is what the real worker holds ahead of its slots when they are all busy (the
    engine's `prefetch_target` for the real concurrency, `job` seconds and SQS's
    `round_trip`), in simulated messages, at least one. Its deletes go at once: a batch of
    10 simulated ones would wait for 10k real jobs, and the ledger counts a real batch's
    wait instead (`delete_wait`). What SQS counts in flight, what the autoscalers read, is
    then about the real worker's (docs/scaling.md gives the figures side by side)."""
    env = {
        k: v
        for k, v in worker.env.items()
        if k.startswith("WORKER_") and k not in NOT_SIMULATED and not k.startswith("WORKER_LARGE_PAYLOAD_")
    }
    env.update(WORKER_QUEUES=queue, WORKER_METRICS_PORT="0", AWS_REGION="us-east-1")
    if scale is not None and scale.k > 1:
        ahead = held_ahead(worker, job, round_trip)
        env.update(
            WORKER_CONCURRENCY=str(worker.concurrency // scale.width),
            WORKER_PREFETCH=str(max(1, round(ahead / scale.k)) if ahead > 0 else 0),
            WORKER_ACK_FLUSH_MS="1",  # at once: the ledger counts the real batch's wait (delete_wait)
        )
    return load_settings(env, ServiceDefaults(name="fleet-simulation"))


def held_ahead(worker: WorkerSpec, job: float, round_trip: float = SQS_ROUND_TRIP_SECONDS) -> int:
    """Real messages the real worker holds ahead of its slots when they are all busy: the
    engine's prefetch target for its concurrency, cap (WORKER_PREFETCH), `job` seconds and
    SQS's `round_trip`."""
    concurrency = worker.concurrency
    cap = int(worker.env.get("WORKER_PREFETCH", default_prefetch(concurrency)))
    return prefetch_target(concurrency, cap, round_trip, job)


def delete_wait(worker: WorkerSpec, scale: Scale, job: float) -> float:
    """How long a real delete waits for its batch of 10 on a busy replica, on average:
    half the time ten jobs take to end at full speed, within half the flush interval. A
    simulated batch holds 10k real deletes, and the simulated worker sends its deletes at
    once (worker_config): the ledger counts its members this much longer. 0 at scale 1,
    where the worker batches as it does in life."""
    if scale.k <= 1:
        return 0.0
    flush = worker.number("WORKER_ACK_FLUSH_MS", ACK_FLUSH_MS) / 1000
    return min(flush, MAX_RECEIVE_BATCH * job / worker.concurrency) / 2


@dataclass
class Sample:
    t: float
    desired: int
    pods: int
    ready: int
    visible: int
    inflight: int
    oldest_age: float
    completed: int
    requests: int


def simulate(run: Run, progress: Progress | None = None) -> dict[str, Any]:
    """Play `run` on virtual time; its figures (and `series`, one sample a second)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = run_on_virtual_time(Simulation(run, progress).play())
    result["wall_seconds"] = round(time.perf_counter() - wall, 1)
    result["cpu_seconds"] = round(time.process_time() - cpu, 1)
    return result


class Simulation:
    """One run's pieces, wired: the queue and its ledger, the counts readers see, the pods,
    the autoscaler (or the oracle), the traffic, the platform's events and the sampler."""

    def __init__(self, run: Run, progress: Progress | None) -> None:
        self.run, self.progress = run, progress
        self.spec = spec = run.spec()
        worker, options = spec.worker, run.options
        self.per_replica, self.minimum, self.maximum = fleet_shape(spec)
        self.capacity = capacity(run)
        self.scale = choose_scale(run)
        self.start = start_seconds(run)
        self.rng = random.Random(options.seed)
        name = worker.queue.removesuffix(".fifo")
        longest = 0.9 * worker.number("WORKER_JOB_TIMEOUT_MS", 60_000) / 1000
        self.ledger = ledger = Ledger(
            Durations(job_seconds(run), longest=longest),
            Downstream(options.downstream or self.maximum * self.per_replica),
            seed=options.seed,
            width=self.scale.width,
            delete_wait=delete_wait(worker, self.scale, job_seconds(run)),
            ahead=held_ahead(worker, job_seconds(run), options.sqs_latency),
        )
        self.counts = Counts(lag=options.count_lag, delay=options.cloudwatch_delay, seed=options.seed)
        self.queue = FleetQueue(
            name,
            visibility=int(worker.number("WORKER_VISIBILITY_TIMEOUT_SECONDS", 30)),
            max_receive_count=int(worker.number("WORKER_MAX_RECEIVE_COUNT", 5)),
            counts=self.counts.sqs_attributes,
            latency=options.sqs_latency,
            inflight_limit=inflight_limit(run),
            on_deleted=ledger.deleted,
            on_dead_letter=ledger.dead_lettered_,
            on_held=ledger.held,
        )
        ledger.put = self.queue.put
        self.world = World(
            self.queue,
            ledger,
            worker_config(worker, name, self.scale, job_seconds(run), options.sqs_latency),
            start_seconds=self.start,
            grace=worker.grace,
            seed=options.seed,
        )
        self.readers = keda.Readers(self.queue, self.counts)
        self.fleet: ReplicaSet | None = None
        self.jobs: JobPods | None = None
        self.series: list[Sample] = []
        self.decisions: list[tuple[float, int]] = []
        self.tasks: list[asyncio.Task[Any]] = []
        self.t0 = 0.0

    def visible(self) -> int:
        """Real messages visible: the members of the simulated messages visible."""
        if self.scale.k == 1:
            return min(self.ledger.observed, self.queue.visible)
        return min(self.ledger.observed, self.ledger.members(self.queue.visible_bodies()))

    def inflight(self) -> int:
        """Real messages in flight, as SQS counts them: received (prefetched, running) and
        not yet deleted (ended, their delete not landed)."""
        return self.ledger.observed - self.visible()

    def rate(self, t: float) -> float:
        return self.run.shape.rate(t, self.capacity) if 0 <= t < self.run.shape.seconds else 0.0

    def decided(self, desired: int) -> None:
        if not self.decisions or self.decisions[-1][1] != desired:
            self.decisions.append((clock.now() - self.t0, desired))

    async def play(self) -> dict[str, Any]:
        shape, options = self.run.shape, self.run.options
        await self._stand_up()
        # The traffic changes at any second of CloudWatch's minute (clock time's multiples of
        # 60 s), not at the second the fleet happened to be ready: a spike that begins late in
        # a minute is seen by that minute's datapoint only as far as it began before SQS's read.
        await asyncio.sleep(random.Random(f"{options.seed}:phase").uniform(0.0, 60.0))
        self.t0 = clock.now()
        self.tasks += [
            asyncio.ensure_future(self._autoscaler()),
            asyncio.ensure_future(self._sample()),
            asyncio.ensure_future(self._events()),
        ]
        await self._traffic()
        remaining = self.t0 + shape.seconds - clock.now()
        if remaining > 0:
            await asyncio.sleep(remaining)
        end = clock.now()
        while self.ledger.outstanding > 0 and clock.now() < end + options.drain_limit:  # noqa: ASYNC110 - virtual time
            await asyncio.sleep(5.0)
        drained = clock.now() - end
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.world.close()
        await self.queue.settle()
        if self.progress is not None:
            self.progress(1.0, f"{self.ledger.completed:,} of {self.ledger.sent:,} messages done")
        return figures(self, drained)

    async def _stand_up(self) -> None:
        """The fleet at its minimum, every pod ready, before the shape begins."""
        spec = self.spec
        if isinstance(spec, ScaledJob):
            self.jobs = JobPods(self.world, deadline=spec.deadline)
            return
        unavailable = spec.max_unavailable if isinstance(spec, Deployment) else _ecs_unavailable(spec)
        self.fleet = ReplicaSet(self.world, minimum=self.minimum, max_unavailable=unavailable)
        self.fleet.reconcile()
        while self.fleet.ready() < self.minimum:  # noqa: ASYNC110 - virtual time: looking costs nothing
            await asyncio.sleep(1.0)

    async def _autoscaler(self) -> None:
        run, spec = self.run, self.spec
        if self.fleet is not None:
            if run.oracle:
                the = oracle.Oracle(
                    self.rate, job_seconds(run), self.per_replica, self.start * 1.2, self.minimum, self.maximum
                )
                await oracle.scale(the, self.fleet, self.visible, self.decided, self.t0)
            elif isinstance(spec, Deployment):
                await keda.scale_object(spec.scaling, self.readers, self.fleet, self.decided)
            else:
                assert isinstance(spec, EcsService)
                # CloudWatch evaluates an alarm once a minute at a second of its own, whatever
                # second of the minute the traffic changes at: not at the shape's start.
                phase = random.Random(f"{run.options.seed}:alarms").uniform(0.0, 60.0)
                await targettracking.track(spec, self.readers, self.fleet, self.decided, phase)
            return
        assert self.jobs is not None
        assert isinstance(spec, ScaledJob)
        if not run.oracle:
            await keda.scale_jobs(spec, self.readers, self.jobs)
            return

        def idle() -> int:  # Jobs whose pod has no job yet
            return sum(1 for p in self.world.alive() if p.worker is None or not p.worker.active_job_count)

        ahead = arrivals(run.shape, self.capacity, self.scale.k, run.options.seed, group_span(run, self.scale))
        await oracle.start_jobs(ahead, self.jobs, self.start * 1.2, spec.maximum, self.visible, idle, self.t0)

    async def _sample(self) -> None:
        """The truth once a simulated second: recorded for the readers of SQS's counts (which
        lag it) and for the figures."""
        next_report, shape, ledger, world = 0.0, self.run.shape, self.ledger, self.world
        while True:
            now = clock.now()
            held = self.inflight()
            oldest = ledger.oldest_arrival()
            age = max(0.0, now - oldest) if oldest is not None else 0.0
            ready = sum(1 for p in world.pods if p.ready)
            self.counts.record(Truth(now, ledger.observed - held, held, age, ready, ledger.sent, ledger.completed))
            desired = self.fleet.desired if self.fleet is not None else self.jobs.active() if self.jobs else 0
            self.series.append(
                Sample(
                    now - self.t0,
                    desired,
                    len(world.alive()),
                    ready,
                    ledger.observed - held,
                    held,
                    age,
                    ledger.completed,
                    self.queue.calls.total,
                )
            )
            if self.progress is not None and now - self.t0 >= next_report:
                next_report += 600.0
                done = min(1.0, (now - self.t0) / shape.seconds)
                self.progress(
                    done, f"{ledger.completed:,} of {ledger.sent:,} messages done, {len(world.alive())} replicas"
                )
            await asyncio.sleep(1.0)

    async def _traffic(self) -> None:
        run, t0 = self.run, self.t0
        for at, groups in arrivals(
            run.shape, self.capacity, self.scale.k, run.options.seed, group_span(run, self.scale)
        ):
            delay = t0 + at - clock.now()
            if delay > 0:
                await asyncio.sleep(delay)
            for group in groups:  # arrival times on the loop's clock, as everything else
                self.queue.put(self.ledger.send(Group(group.count, t0 + group.first, t0 + group.last)))

    async def _events(self) -> None:
        for event in sorted(self.run.shape.events, key=lambda e: e.at):
            delay = self.t0 + event.at - clock.now()
            if delay > 0:
                await asyncio.sleep(delay)
            if event.kind == "deploy" and self.fleet is not None:
                self.tasks.append(asyncio.ensure_future(self.fleet.rollout()))
            elif event.kind == "crash":
                ready = [p for p in self.world.pods if p.ready]
                if ready:
                    self.world.crash(self.rng.choice(ready))


def _ecs_unavailable(spec: EcsService) -> Callable[[int], int]:
    return lambda tasks: ecs_batch(tasks, spec.min_healthy_percent)


def thrash(decisions: list[tuple[float, int]], window: float) -> int:
    """Scale-outs that came within `window` seconds of a scale-in."""
    count, last_in = 0, None
    previous = decisions[0][1] if decisions else 0
    for at, desired in decisions[1:]:
        if desired < previous:
            last_in = at
        elif desired > previous and last_in is not None and at - last_in < window:
            count += 1
        previous = desired
    return count


def figures(sim: Simulation, drained: float) -> dict[str, Any]:
    """What happened, as the report's figures (and the series, for the plots)."""
    run, scale, ledger, queue, world = sim.run, sim.scale, sim.ledger, sim.queue, sim.world
    series, decisions, jobs = sim.series, sim.decisions, sim.jobs
    spec = run.spec()
    shape = run.shape
    within = [s for s in series if 0 <= s.t < shape.seconds]
    ages = [s.oldest_age for s in within]
    in_queue = sum(b.count - b.done for b in ledger.batches.values())
    lost = ledger.sent - ledger.completed - ledger.dead_lettered - in_queue
    replica_seconds = float(sum(s.pods for s in within))
    ups = sum(1 for (_, a), (_, b) in itertools.pairwise(decisions) if b > a)
    downs = sum(1 for (_, a), (_, b) in itertools.pairwise(decisions) if b < a)
    window = float(spec.scaling.scale_down.stabilization) if isinstance(spec, Deployment) else 300.0
    messages = ledger.sent
    inflight_peak = max((s.inflight for s in series), default=0)
    limit = inflight_limit(run)
    result: dict[str, Any] = {
        "title": shape.title,
        "platform": run.platform,
        "autoscaler": "oracle" if run.oracle else _autoscaler(spec),
        "seconds": shape.seconds,
        "scale": scale.k,
        "scale_width": scale.width,
        "scale_depth": scale.depth,
        "job_seconds": job_seconds(run),
        "start_seconds": sim.start,
        "capacity_per_second": round(sim.capacity, 2),
        "messages": messages,
        "simulated_messages": ledger.simulated,
        "messages_lost": lost,
        "dead_lettered": ledger.dead_lettered,
        "unfinished": in_queue,
        "drain_seconds": round(drained, 1),
        "duplicate_runs": ledger.duplicate_runs,
        "duplicates_by_cause": {c: ledger.duplicates.get(c, 0) for c in CAUSES if ledger.duplicates.get(c)},
        "cut_off_by_sigkill": ledger.cut_off,
        "cut_off_by_cause": {c: ledger.cut.get(c, 0) for c in CAUSES if ledger.cut.get(c)},
        "p50_oldest_age_seconds": round(percentile(ages, 0.5), 2),
        "p99_oldest_age_seconds": round(percentile(ages, 0.99), 2),
        "max_oldest_age_seconds": round(max(ages, default=0.0), 2),
        "p50_wait_seconds": round(ledger.waits.quantile(0.5), 3),
        "p99_wait_seconds": round(ledger.waits.quantile(0.99), 3),
        "max_wait_seconds": round(ledger.waits.max, 3),
        "scale_events": {"out": ups, "in": downs},
        "thrash": thrash(decisions, window),
        "thrash_window_seconds": window,
        "replica_minutes": round(replica_seconds / 60, 1),
        "peak_replicas": max((s.pods for s in within), default=0),
        "mean_replicas": round(replica_seconds / max(1.0, shape.seconds), 2),
        "inflight_peak": inflight_peak,
        "inflight_peak_share_of_limit": round(inflight_peak / limit, 5),
        "overlimit_receives": queue.calls.overlimit_receives,
        **_requests_and_cost(sim, replica_seconds),
        "receipt_handle_misuses": queue.misuses,
        "downstream_peak_calls": ledger.peak_calls,
        "worker_errors": world.worker_errors[:10],
    }
    if jobs is not None:
        idle = sum(1 for p in world.ended if not p.killed and p.ran_jobs == 0)
        result["jobs"] = {
            "created": jobs.created,
            "idle": idle,
            "per_message": round(jobs.created / messages, 3) if messages else 0.0,
        }
    result["series"] = series
    return result


def _requests_and_cost(sim: Simulation, replica_seconds: float) -> dict[str, Any]:
    """The run's SQS requests (real ones, estimated from the simulated) and what it cost."""
    queue, spec, messages = sim.queue, sim.run.spec(), sim.ledger.sent
    requests = dict(sorted(queue.calls.by_operation.items()))
    total_requests = sum(requests.values())
    # At a scale k > 1 each simulated receive and delete stood for up to k real ones:
    # counted as k (the real worker's requests at low rates, an upper bound at saturation).
    message_driven = (
        requests.get("ReceiveMessage", 0) - queue.calls.empty_receives + requests.get("DeleteMessageBatch", 0)
    )
    estimated = total_requests + (sim.scale.k - 1) * message_driven
    money = cost.costs(
        requests=estimated,
        metric_reads=sim.readers.metric_reads,
        replica_seconds=replica_seconds,
        cpu=spec.worker.cpu,
        memory_gib=spec.worker.memory_gib,
        messages=messages,
        fifo=spec.worker.fifo,
    )
    return {
        "sqs_requests_simulated": total_requests,
        "sqs_requests": estimated,
        "sqs_requests_by_operation": requests,
        "empty_receives": queue.calls.empty_receives,
        "metric_reads": sim.readers.metric_reads,
        "requests_per_message": round(estimated / messages, 3) if messages else 0.0,
        "cost": money,
    }


def _autoscaler(spec: Deployment | ScaledJob | EcsService) -> str:
    if isinstance(spec, Deployment):
        return "keda-hpa"
    if isinstance(spec, ScaledJob):
        return f"keda-scaledjob-{spec.strategy}"
    return (
        "ecs-target-tracking"
        + ("-no-scale-in" if spec.scale_in_disabled else "")
        + "+step" * len(spec.steps_out)  # one for each scale-out step policy
        + ("+step-in" if spec.step_in is not None else "")
    )
