"""One run: a shape of traffic against the bake's fleet on one platform, under the
platform's autoscaler or the oracle, on virtual time; its figures.

The pieces, each a module: load/traffic (arrivals), sqs/queue (SQS), sqs/counts (what
readers of SQS's counts see), load/work (the handlers and the ledger), autoscalers/platform
(pods, rollouts, kills), autoscalers/keda and hpa (Kubernetes), autoscalers/targettracking
(ECS), autoscalers/oracle, releases (a bad release and ECS's deployment alarms); sizing.py
sizes the run. This module wires them, samples the truth once a simulated second, plays the
platform's events (rollouts, crashes, Spot interruptions, a bad release and its rollback)
and turns what happened into figures (`figures`).

Before the shape starts the fleet stands at its minimum with every pod ready; after it
ends the traffic stops and the fleet works on until nothing is left (at most
`drain_limit`), so that every message is seen to end. Replica-minutes, ages and scale
events are counted over the shape's own time.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..base import clock
from ..doubles.vtime import run as run_on_virtual_time
from . import releases
from .autoscalers import keda, oracle, targettracking
from .autoscalers.deployfiles import Deployment, EcsService, ScaledJob
from .autoscalers.platform import JobPods, ReplicaSet, World, ecs_batch
from .load.traffic import Group, arrivals, events
from .load.work import CAUSES, Downstream, Durations, Ledger, percentile
from .sizing import (
    Run,
    capacity,
    choose_scale,
    delete_wait,
    fleet_shape,
    group_span,
    held_ahead,
    inflight_limit,
    job_seconds,
    start_seconds,
    worker_config,
)
from .sqs import cost
from .sqs.counts import Counts, Truth
from .sqs.queue import FleetQueue

Progress = Callable[[float, str], None]


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
    draining: int = 0  # replicas told to stop, still draining (among `pods`, not `desired`)
    running: int = 0  # jobs running (real messages in their handlers)


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
        self.release: dict[str, Any] = {}  # a bad release's course (`_bad_release`)
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
            desired = self.fleet.desired if self.fleet is not None else self.jobs.active() if self.jobs else 0
            self.counts.record(
                Truth(
                    now,
                    ledger.observed - held,
                    held,
                    age,
                    ready,
                    ledger.sent,
                    ledger.completed,
                    failed=ledger.failed,
                    dead_letters=ledger.dead_lettered,
                    desired=desired,
                )
            )
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
                    draining=world.draining(),
                    running=ledger.calls,
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
        for event in events(self.run.shape, self.run.options.seed):
            delay = self.t0 + event.at - clock.now()
            if delay > 0:
                await asyncio.sleep(delay)
            ready = [p for p in self.world.pods if p.ready]
            if event.kind == "deploy" and self.fleet is not None:
                self.tasks.append(asyncio.ensure_future(self.fleet.rollout()))
            elif event.kind == "bad-release" and self.fleet is not None:
                self.tasks.append(asyncio.ensure_future(self._bad_release()))
            elif event.kind == "crash" and ready:
                self.world.crash(self.rng.choice(ready))
            elif event.kind == "spot" and ready:
                self.world.interrupt(self.rng.choice(ready))
                if self.fleet is not None:
                    self.fleet.reconcile()  # the platform replaces it at once: it no longer counts

    async def _bad_release(self) -> None:
        """A rollout to a release whose handler fails every job; on ECS, watched by the
        deployment alarms the stack names, rolled back when one is in ALARM during it or
        its bake time (releases.py). Kubernetes rolls nothing back by itself."""
        assert self.fleet is not None
        fleet, alarms, began = self.fleet, self.run.options.deployment_alarms, clock.now()
        previous = fleet.version
        rollout = asyncio.ensure_future(fleet.rollout(failing=True))
        self.tasks.append(rollout)
        self.release = {"at_minutes": round((began - self.t0) / 60, 1), "rolled_back": False}
        if self.run.platform != "ecs" or alarms is None or not alarms.rollback or not alarms.alarms:
            return
        await asyncio.sleep(random.Random(f"{self.run.options.seed}:deployment-alarms").uniform(0.0, 60.0))
        completed: float | None = None
        while True:
            now = clock.now()
            if completed is None and rollout.done():
                completed = now
            published, delay = self.counts.published, self.run.options.cloudwatch_delay
            alarmed = [
                a.name for a in alarms.alarms if releases.in_alarm(a, releases.periods_of(a, published, now, delay))
            ]
            since = None if completed is None else now - completed
            if releases.rollback_due(
                alarmed=bool(alarmed), deploying=completed is None, since_completed=since, bake=alarms.bake_seconds
            ):
                break
            if since is not None and since > alarms.bake_seconds:
                return  # the deployment completed and baked: no rollback
            await asyncio.sleep(60.0)
        rollout.cancel()
        await asyncio.gather(rollout, return_exceptions=True)
        self.release.update(alarm=alarmed[0], rollback_began_minutes=round((now - began) / 60, 1))
        await fleet.rollout(to=previous)
        self.release.update(rolled_back=True, rolled_back_minutes=round((clock.now() - began) / 60, 1))


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
        **_alive_and_running(sim, within, series),
        "jobs_failed": ledger.failed,
        "spot_interruptions": sum(1 for p in (*world.ended, *world.pods) if p.cause == "spot"),
        "overlimit_receives": queue.calls.overlimit_receives,
        **_requests_and_cost(sim, replica_seconds),
        "receipt_handle_misuses": queue.misuses,
        "downstream_peak_calls": ledger.peak_calls,
        "worker_errors": world.worker_errors[:10],
    }
    if sim.release:
        result["release"] = {**sim.release, "jobs_failed": ledger.failed, "dead_lettered": ledger.dead_lettered}
    if jobs is not None:
        idle = sum(1 for p in world.ended if not p.killed and p.ran_jobs == 0)
        result["jobs"] = {
            "created": jobs.created,
            "idle": idle,
            "per_message": round(jobs.created / messages, 3) if messages else 0.0,
        }
    result["series"] = series
    return result


def _alive_and_running(sim: Simulation, within: list[Sample], series: list[Sample]) -> dict[str, Any]:
    """Replicas counted alive, draining ones included: at the peak, how many the autoscaler
    wanted and how many were draining (a rollout's, a scale-in's, a Spot interruption's).
    What the fleet's concurrency budget counts, jobs running, beside what SQS counts in flight."""
    busiest = max(within, key=lambda s: s.pods, default=None)
    peak = max(series, key=lambda s: s.inflight, default=None)
    return {
        "peak_replicas_desired_draining": [busiest.desired, busiest.draining] if busiest else [0, 0],
        "peak_desired": max((s.desired for s in within), default=0),
        "peak_draining": max((s.draining for s in within), default=0),
        "concurrency_budget": sim.maximum * sim.per_replica,
        "running_at_inflight_peak": peak.running if peak is not None else 0,
        "running_peak": max((s.running for s in series), default=0),
    }


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
    name = "ecs"
    if spec.target is not None:
        name += "-target-tracking" + ("-no-scale-in" if spec.scale_in_disabled else "")
    name += "+step" * len(spec.steps_out)  # one for each scale-out step policy
    return name + ("+step-in" if spec.step_in is not None else "")
