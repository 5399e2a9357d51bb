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

from .. import clock
from ..settings import ServiceDefaults, WorkerConfig, load_settings
from ..vtime import run as run_on_virtual_time
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

Progress = Callable[[float, str], None]


@dataclass(frozen=True)
class Options:
    job_seconds: float | None = None  # mean job duration (lognormal; None: see `job_seconds`)
    start_seconds: float | None = None  # pod/task start latency (default: the platform's, above)
    scale: int | None = None  # real messages per simulated one (None: chosen, see `choose_scale`)
    seed: int = 1
    count_lag: float = 60.0  # SQS's approximate counts lag up to this
    cloudwatch_delay: float = 60.0  # a CloudWatch datapoint is published this long after its minute
    sqs_latency: float = 0.02  # each SQS request's round trip
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


# The standard shapes' mean job. A fleet's replicas follow its load (rate x job time), so
# shorter jobs at the same load give the same fleet with more messages, which cost the
# simulator CPU and nothing else: 5 s keeps a simulated day near half a million messages,
# run one for one (see choose_scale).
DEFAULT_JOB_SECONDS = 5.0


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
    """1 unless the shape has more than the budget of simulated messages; then first a
    width (a divisor of the concurrency: no message waits for another), then a depth,
    never so deep that a simulated message's run outlasts `max_batch_seconds` (a depth
    makes members wait for the waves before theirs; a long run would need heartbeats a
    real job does not). A ScaledJob's pod takes one message: always 1."""
    spec = run.spec()
    if isinstance(spec, ScaledJob):
        return Scale()
    concurrency = spec.worker.concurrency
    if run.options.scale is not None:
        wanted = run.options.scale
    else:
        expected = run.shape.mean_rate(capacity(run)) * run.shape.seconds
        wanted = math.ceil(expected / run.options.budget)
    width = max(d for d in range(1, concurrency + 1) if concurrency % d == 0 and d <= max(1, wanted))
    depth = math.ceil(wanted / width)
    if run.options.scale is None:
        depth = min(depth, max(1, math.floor(run.options.max_batch_seconds / job_seconds(run))))
    return Scale(width, max(1, depth))


def group_span(run: Run, scale: Scale) -> float:
    """How long a group's first message waits for the rest: long enough to fill the group
    at the shape's mean rate, at most half the waves' time, never past MAX_SPAN."""
    return min(MAX_SPAN, max(0.05, 0.5 * scale.depth * job_seconds(run)))


def worker_config(worker: WorkerSpec, queue: str, width: int = 1) -> WorkerConfig:
    """The simulated worker's configuration: the deploy file's worker settings, its
    concurrency and prefetch divided by `width` (each simulated call runs `width` jobs)."""
    env = {
        k: v
        for k, v in worker.env.items()
        if k.startswith("WORKER_") and k not in NOT_SIMULATED and not k.startswith("WORKER_LARGE_PAYLOAD_")
    }
    env.update(WORKER_QUEUES=queue, WORKER_METRICS_PORT="0", AWS_REGION="us-east-1")
    if width > 1:
        concurrency = worker.concurrency
        # The engine's default prefetch bound: the concurrency, at least 50 (engine README, "Prefetch").
        prefetch = int(worker.env.get("WORKER_PREFETCH", max(concurrency, 50)))
        env.update(WORKER_CONCURRENCY=str(concurrency // width), WORKER_PREFETCH=str(math.ceil(prefetch / width)))
    return load_settings(env, ServiceDefaults(name="fleet-simulation"))


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
    result = run_on_virtual_time(_play(run, progress))
    result["wall_seconds"] = round(time.perf_counter() - wall, 1)
    result["cpu_seconds"] = round(time.process_time() - cpu, 1)
    return result


async def _play(run: Run, progress: Progress | None) -> dict[str, Any]:
    shape, options, spec = run.shape, run.options, run.spec()
    worker = spec.worker
    per_replica, minimum, maximum = fleet_shape(spec)
    seconds_per_job = job_seconds(run)
    fleet_capacity = capacity(run)
    scale = choose_scale(run)
    start = start_seconds(run)
    rng = random.Random(options.seed)
    queue_name = worker.queue.removesuffix(".fifo")
    longest = 0.9 * worker.number("WORKER_JOB_TIMEOUT_MS", 60_000) / 1000
    ledger = Ledger(
        Durations(seconds_per_job, longest=longest),
        Downstream(options.downstream or maximum * per_replica),
        seed=options.seed,
        width=scale.width,
    )
    counts = Counts(lag=options.count_lag, delay=options.cloudwatch_delay, seed=options.seed)
    queue = FleetQueue(
        queue_name,
        visibility=int(worker.number("WORKER_VISIBILITY_TIMEOUT_SECONDS", 30)),
        max_receive_count=int(worker.number("WORKER_MAX_RECEIVE_COUNT", 5)),
        counts=counts.sqs_attributes,
        latency=options.sqs_latency,
        inflight_limit=inflight_limit(run),
        on_deleted=ledger.deleted,
        on_dead_letter=ledger.dead_lettered_,
    )
    ledger.put = queue.put
    world = World(
        queue,
        ledger,
        worker_config(worker, queue_name, scale.width),
        start_seconds=start,
        grace=worker.grace,
        seed=options.seed,
    )
    readers = keda.Readers(queue, counts)

    def inflight() -> int:
        """Real messages in flight: a simulated one in flight holds a wave of `width`."""
        return min(ledger.outstanding, queue.inflight * scale.width)

    def visible() -> int:
        return ledger.outstanding - inflight()

    # The fleet at its minimum, every pod ready, before the shape begins.
    fleet: ReplicaSet | None = None
    jobs: JobPods | None = None
    if isinstance(spec, ScaledJob):
        jobs = JobPods(world, deadline=spec.deadline)
    else:
        unavailable = spec.max_unavailable if isinstance(spec, Deployment) else _ecs_unavailable(spec)
        fleet = ReplicaSet(world, minimum=minimum, max_unavailable=unavailable)
        fleet.reconcile()
        while fleet.ready() < minimum:  # noqa: ASYNC110 - virtual time: looking costs nothing
            await asyncio.sleep(1.0)
    t0 = clock.now()
    decisions: list[tuple[float, int]] = []

    def decided(desired: int) -> None:
        if not decisions or decisions[-1][1] != desired:
            decisions.append((clock.now() - t0, desired))

    def rate(t: float) -> float:
        return shape.rate(t, fleet_capacity) if 0 <= t < shape.seconds else 0.0

    tasks: list[asyncio.Task[Any]] = []
    if fleet is not None:
        if run.oracle:
            the_oracle = oracle.Oracle(rate, seconds_per_job, per_replica, start * 1.2, minimum, maximum)
            tasks.append(asyncio.ensure_future(oracle.scale(the_oracle, fleet, visible, decided, t0)))
        elif isinstance(spec, Deployment):
            tasks.append(asyncio.ensure_future(keda.scale_object(spec.scaling, readers, fleet, decided)))
        else:
            assert isinstance(spec, EcsService)
            tasks.append(asyncio.ensure_future(targettracking.track(spec, readers, fleet, decided)))
    else:
        assert jobs is not None
        assert isinstance(spec, ScaledJob)
        if run.oracle:

            def idle() -> int:
                return sum(1 for p in world.alive() if p.worker is None or not p.worker.active_job_count)

            ahead = arrivals(shape, fleet_capacity, scale.k, options.seed, group_span(run, scale))
            tasks.append(
                asyncio.ensure_future(oracle.start_jobs(ahead, jobs, start * 1.2, spec.maximum, visible, idle, t0))
            )
        else:
            tasks.append(asyncio.ensure_future(keda.scale_jobs(spec, readers, jobs)))

    series: list[Sample] = []

    async def sample() -> None:
        next_report = 0.0
        while True:
            now = clock.now()
            held = inflight()
            oldest = ledger.oldest_arrival()
            ready = sum(1 for p in world.pods if p.ready)
            counts.record(
                Truth(
                    now,
                    ledger.outstanding - held,
                    held,
                    max(0.0, now - oldest) if oldest is not None else 0.0,
                    ready,
                )
            )
            series.append(
                Sample(
                    now - t0,
                    fleet.desired if fleet is not None else jobs.active() if jobs is not None else 0,
                    len(world.alive()),
                    ready,
                    ledger.outstanding - held,
                    held,
                    max(0.0, now - oldest) if oldest is not None else 0.0,
                    ledger.completed,
                    queue.calls.total,
                )
            )
            if progress is not None and now - t0 >= next_report:
                next_report += 600.0
                done = min(1.0, (now - t0) / shape.seconds)
                progress(done, f"{ledger.completed:,} of {ledger.sent:,} messages done, {len(world.alive())} replicas")
            await asyncio.sleep(1.0)

    async def traffic() -> None:
        for at, groups in arrivals(shape, fleet_capacity, scale.k, options.seed, group_span(run, scale)):
            delay = t0 + at - clock.now()
            if delay > 0:
                await asyncio.sleep(delay)
            for group in groups:  # arrival times on the loop's clock, as everything else
                queue.put(ledger.send(Group(group.count, t0 + group.first, t0 + group.last)))

    async def events() -> None:
        for event in sorted(shape.events, key=lambda e: e.at):
            delay = t0 + event.at - clock.now()
            if delay > 0:
                await asyncio.sleep(delay)
            if event.kind == "deploy" and fleet is not None:
                tasks.append(asyncio.ensure_future(fleet.rollout()))
            elif event.kind == "crash":
                ready = [p for p in world.pods if p.ready]
                if ready:
                    world.crash(rng.choice(ready))

    tasks += [asyncio.ensure_future(sample()), asyncio.ensure_future(events())]
    await traffic()
    remaining = t0 + shape.seconds - clock.now()
    if remaining > 0:
        await asyncio.sleep(remaining)
    end = clock.now()
    while ledger.outstanding > 0 and clock.now() < end + options.drain_limit:  # noqa: ASYNC110 - virtual time
        await asyncio.sleep(5.0)
    drained = clock.now() - end
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await world.close()
    await queue.settle()
    if progress is not None:
        progress(1.0, f"{ledger.completed:,} of {ledger.sent:,} messages done")

    return figures(
        run=run,
        scale=scale,
        start=start,
        ledger=ledger,
        queue=queue,
        world=world,
        readers=readers,
        series=series,
        decisions=decisions,
        jobs=jobs,
        drained=drained,
        capacity_rate=fleet_capacity,
    )


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


def figures(
    *,
    run: Run,
    scale: Scale,
    start: float,
    ledger: Ledger,
    queue: FleetQueue,
    world: World,
    readers: keda.Readers,
    series: list[Sample],
    decisions: list[tuple[float, int]],
    jobs: JobPods | None,
    drained: float,
    capacity_rate: float,
) -> dict[str, Any]:
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
    requests = dict(sorted(queue.calls.by_operation.items()))
    total_requests = sum(requests.values())
    # At a scale k > 1 each simulated receive and delete stood for up to k real ones:
    # counted as k (the real worker's requests at low rates, an upper bound at saturation).
    message_driven = (
        requests.get("ReceiveMessage", 0) - queue.calls.empty_receives + requests.get("DeleteMessageBatch", 0)
    )
    estimated = total_requests + (scale.k - 1) * message_driven
    messages = ledger.sent
    money = cost.costs(
        requests=estimated,
        metric_reads=readers.metric_reads,
        replica_seconds=replica_seconds,
        cpu=spec.worker.cpu,
        memory_gib=spec.worker.memory_gib,
        messages=messages,
        fifo=spec.worker.fifo,
    )
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
        "start_seconds": start,
        "capacity_per_second": round(capacity_rate, 2),
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
        "sqs_requests_simulated": total_requests,
        "sqs_requests": estimated,
        "sqs_requests_by_operation": requests,
        "empty_receives": queue.calls.empty_receives,
        "metric_reads": readers.metric_reads,
        "requests_per_message": round(estimated / messages, 3) if messages else 0.0,
        "cost": money,
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


def _autoscaler(spec: Deployment | ScaledJob | EcsService) -> str:
    if isinstance(spec, Deployment):
        return "keda-hpa"
    if isinstance(spec, ScaledJob):
        return f"keda-scaledjob-{spec.strategy}"
    return "ecs-target-tracking"
