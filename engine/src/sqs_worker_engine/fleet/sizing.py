"""A run, and how it is sized: what runs (`Run`: a shape of traffic, a platform, the bake,
its `Options`), the fleet the bake sets (handlers per replica, replica bounds, `capacity`),
the mean job and the start latency, how many real messages a simulated one stands for
(`Scale`, `choose_scale`), and the simulated worker's configuration: what it holds ahead of
its slots and how long its deletes wait, as many real messages as the real worker's
(`worker_config`, `held_ahead`, `delete_wait`).

simulation.py plays a run so sized; cli.py sizes the standard shapes' runs with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..base.limits import (
    MAX_RECEIVE_BATCH,
    SCALING_JOB_SECONDS,
    SQS_ROUND_TRIP_SECONDS,
    default_prefetch,
    prefetch_target,
)
from ..process.settings import ServiceDefaults, WorkerConfig, load_settings
from .autoscalers.deployfiles import Bake, Deployment, EcsService, ScaledJob
from .autoscalers.deployfiles import Worker as WorkerSpec
from .load.traffic import MAX_SPAN, Shape
from .releases import DeploymentAlarms
from .sqs.queue import STANDARD_INFLIGHT_LIMIT

# Typical time from "create" to a worker receiving (scheduling, image pull from a warm
# cache, the interpreter, the first receive): a pod on a node with room, a Fargate task.
START_SECONDS = {"kubernetes": 30.0, "ecs": 60.0}
FIFO_INFLIGHT_LIMIT = 20_000
# Settings the simulated workers do not take from the deploy files: where the queue and
# handlers are, the metrics server, the progress file, S3 for large payloads.
NOT_SIMULATED = ("WORKER_QUEUES", "WORKER_HANDLERS", "WORKER_METRICS_HOST", "WORKER_METRICS_PORT", "WORKER_HEALTH_FILE")
ACK_FLUSH_MS = 100  # WORKER_ACK_FLUSH_MS's default: the longest a delete waits for a batch of 10


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
    # ECS's deployment alarms, as deploy/ecs/service.yaml names them (releases.read; None: none
    # watched): a bad release on ECS is rolled back when one is in ALARM.
    deployment_alarms: DeploymentAlarms | None = None


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


# Where a run's mean job came from (`job_source`), as the report names it: the service
# states no job time of its own, so unless the shape has its own the figure is the owner's
# flag or the simulator's assumption.
JOB_SOURCES = {
    "shape": "the shape's own",
    "flag": "--job-seconds",
    "default": "the simulator's default (--job-seconds not given)",
    "job-timeout": "a quarter of the job timeout, the simulator's default for a ScaledJob (--job-seconds not given)",
}


def job_source(run: Run) -> str:
    """Which of JOB_SOURCES `job_seconds(run)` came from."""
    if run.shape.job_seconds is not None:
        return "shape"
    if run.options.job_seconds is not None:
        return "flag"
    return "job-timeout" if isinstance(run.spec(), ScaledJob) else "default"


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
