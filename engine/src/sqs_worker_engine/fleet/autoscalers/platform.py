"""The platform: pods (or ECS tasks) that start late, drain on SIGTERM and die on SIGKILL,
each running the real `Worker` on the shared virtual loop.

A `Pod` is created, becomes ready after its start latency (scheduling, image pull, the
interpreter: `start_seconds`, jittered by +-20%), then runs a Worker whose SQS client is
its own `Connection` to the fleet's queue. SIGTERM (`terminate`) is what Kubernetes and
ECS send on scale-in, on a rollout and at a Job's deadline: the worker drains; if it has
not exited when the grace period (terminationGracePeriodSeconds, stopTimeout) runs out,
SIGKILL. A kill (`kill`, also a crash) severs the connection, so nothing the dead process
would have sent reaches SQS; what it held waits out its visibility timeout, and the
ledger learns what was cut off (work.Ledger.killed).

`ReplicaSet` is a Deployment's pods or an ECS service's tasks: `desired` of them, scaled
in newest first, replaced on a rollout a batch at a time (maxUnavailable with maxSurge 0;
ECS's minimumHealthyPercent within maximumPercent 100). `JobPods` is a ScaledJob's: one
pod per Job, gone when its worker exits by itself (WORKER_MAX_JOBS, the idle exit) or at
the Job's activeDeadlineSeconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from ...base import clock
from ...base.limits import SPOT_WARNING_SECONDS
from ...process.settings import WorkerConfig
from ...process.worker import Worker
from ..load.work import Ledger, Replica
from ..sqs.queue import Connection, FleetQueue

log = logging.getLogger("sqs_worker_engine.fleet.platform")
JITTER = 0.2


@dataclass(eq=False)
class Pod:
    replica: Replica
    connection: Connection
    version: int
    created: float
    ready_at: float | None = None
    term_at: float | None = None  # when SIGTERM came
    cause: str | None = None  # why: scale-in, deploy, crash, deadline, spot
    grace: float | None = None  # SIGTERM to SIGKILL, when not the world's (a Spot interruption's)
    ended: float | None = None
    killed: bool = False
    worker: Worker | None = None
    ran_jobs: int = 0  # jobs it started (a ScaledJob pod that found none ran 0)
    term: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None  # its life (below)
    run: asyncio.Task[None] | None = None  # its worker's run

    @property
    def alive(self) -> bool:
        return self.ended is None

    @property
    def ready(self) -> bool:
        return self.ready_at is not None and self.alive and self.term_at is None


class World:
    """What every pod shares: the queue, the ledger, the worker's configuration, the start
    latency and grace period, and the record of every pod that lived."""

    def __init__(
        self,
        queue: FleetQueue,
        ledger: Ledger,
        config: WorkerConfig,
        *,
        start_seconds: float,
        grace: float,
        seed: int = 0,
    ) -> None:
        self.queue = queue
        self.ledger = ledger
        self.config = config
        self.start_seconds = start_seconds
        self.grace = grace
        self.pods: list[Pod] = []
        self.ended: list[Pod] = []
        self.worker_errors: list[str] = []
        self._rng = random.Random(seed)
        self._zombies: set[asyncio.Task[None]] = set()
        self._timers: list[asyncio.TimerHandle] = []  # Job deadlines
        self.on_end: Callable[[Pod], None] | None = None
        self.failing: set[int] = set()  # versions whose handler fails every job (a bad release)

    def launch(self, version: int = 1) -> Pod:
        pod = Pod(Replica(failing=version in self.failing), Connection(self.queue), version, clock.now())
        self.pods.append(pod)
        pod.task = asyncio.ensure_future(self._life(pod))
        return pod

    def alive(self) -> list[Pod]:
        return [p for p in self.pods if p.alive]

    def later(self, seconds: float, callback: Callable[..., object], *args: object) -> None:
        """Call `callback(*args)` in `seconds` (cancelled when the run closes)."""
        self._timers.append(asyncio.get_running_loop().call_later(seconds, callback, *args))

    async def _life(self, pod: Pod) -> None:
        try:
            latency = self.start_seconds * self._rng.uniform(1 - JITTER, 1 + JITTER)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pod.term.wait(), latency)
            if pod.term.is_set():
                return  # stopped before it started: it held nothing
            pod.ready_at = clock.now()
            worker = Worker(self.config, self.ledger.router(self.queue.name, pod.replica), client=pod.connection)
            # One process per pod in life; here hundreds share one: no progress file each.
            worker.health.health_file = None
            pod.worker = worker
            run = pod.run = asyncio.ensure_future(worker.run())
            term = asyncio.ensure_future(pod.term.wait())
            await asyncio.wait({run, term}, return_when=asyncio.FIRST_COMPLETED)
            term.cancel()
            if not run.done():
                worker.stop("SIGTERM")
                grace = self.grace if pod.grace is None else pod.grace
                left = (pod.term_at or clock.now()) + grace - clock.now()
                done, _ = await asyncio.wait({run}, timeout=max(0.0, left))
                if not done:
                    self.kill(pod, pod.cause or "scale-in")
                    return
            if not pod.killed and run.exception() is not None:
                self.worker_errors.append(f"pod {pod.replica.number}: {run.exception()!r}")
        finally:
            if pod.worker is not None and pod.worker.completion is not None:
                pod.ran_jobs = pod.worker.completion.started
            pod.ended = pod.ended or clock.now()
            self.pods.remove(pod)
            self.ended.append(pod)
            if self.on_end is not None:
                self.on_end(pod)

    def terminate(self, pod: Pod, cause: str, grace: float | None = None) -> None:
        """SIGTERM: drain, then SIGKILL if the grace period (or `grace`) runs out first."""
        if pod.term_at is not None or not pod.alive:
            return
        pod.term_at, pod.cause, pod.grace = clock.now(), cause, grace
        pod.term.set()

    def interrupt(self, pod: Pod) -> None:
        """A Spot interruption: SIGTERM with the two-minute warning, SIGKILL at the earlier
        of the grace period and the warning's end, when the capacity is taken back."""
        self.terminate(pod, "spot", grace=spot_grace(self.grace))

    def draining(self) -> int:
        """Replicas told to stop and not yet gone (they still hold and run jobs)."""
        return sum(1 for p in self.pods if p.alive and p.term_at is not None)

    def kill(self, pod: Pod, cause: str) -> None:
        """SIGKILL: nothing more it sends reaches SQS; what it held waits out its lease."""
        if pod.killed or not pod.alive:
            return
        pod.killed = True
        pod.cause = pod.cause or cause
        held = [m.body for m in self.queue.held_by(pod.connection.number)]
        self.ledger.killed(pod.replica, held, pod.cause)
        pod.replica.killed = True
        pod.connection.sever()
        pod.ended = clock.now()
        if pod.worker is not None:
            pod.worker.stop("SIGKILL")  # the process is gone: let its coroutines unwind, unheard
        if pod.run is not None and not pod.run.done():
            self._zombies.add(pod.run)
            pod.run.add_done_callback(self._zombies.discard)

    def crash(self, pod: Pod) -> None:
        """Killed without warning (the OOM killer, a lost node)."""
        self.kill(pod, "crash")
        if pod.task is not None and not pod.task.done():
            pod.task.cancel()

    async def close(self) -> None:
        """End of the run: every pod stops (not counted: the run is over), none replaces it."""
        self.on_end = None
        for pod in list(self.pods):
            if pod.worker is not None:
                pod.worker.stop("end of the simulation")
            pod.term.set()
        for timer in self._timers:
            timer.cancel()
        tasks = [p.task for p in self.pods if p.task is not None]
        await asyncio.gather(*tasks, *self._zombies, return_exceptions=True)


class ReplicaSet:
    """A Deployment's pods, or an ECS service's tasks."""

    def __init__(self, world: World, *, minimum: int, max_unavailable: int | Callable[[int], int]) -> None:
        """`max_unavailable`: pods a rollout stops at once (a function of the pods, for ECS)."""
        self.world = world
        self.desired = minimum
        self.max_unavailable = max_unavailable
        self.version = 1
        self.latest = 1  # the newest version rolled out (a rollback returns to an older one)
        self.rolling = False
        self.events: list[tuple[float, int, int]] = []  # (when, from, to)
        world.on_end = lambda _pod: self.reconcile()

    def active(self) -> list[Pod]:
        """Pods not told to stop."""
        return [p for p in self.world.alive() if p.term_at is None]

    def ready(self) -> int:
        return sum(1 for p in self.world.pods if p.ready)

    def scale_to(self, desired: int) -> None:
        if desired != self.desired:
            self.events.append((clock.now(), self.desired, desired))
            self.desired = desired
        self.reconcile()

    def reconcile(self) -> None:
        active = self.active()
        for _ in range(self.desired - len(active)):
            self.world.launch(self.version)
        if len(active) > self.desired:
            # Old versions first, then pods not yet ready, then the newest (Kubernetes'
            # ReplicaSet ranking; ECS's scale-in has no such order, newest is as good).
            ranked = sorted(active, key=lambda p: (p.version == self.version, p.ready_at is not None, -p.created))
            for pod in ranked[: len(active) - self.desired]:
                self.world.terminate(pod, "deploy" if pod.version != self.version else "scale-in")

    async def rollout(self, *, failing: bool = False, to: int | None = None) -> None:
        """Replace every pod with a new version (or version `to`: a rollback), `max_unavailable`
        at a time, each batch once the replacements of the last are ready (no surge: the
        template's rollouts never run more pods than desired). `failing`: the new version's
        handler fails every job (a bad release)."""
        if to is None:
            self.latest += 1
        self.version = self.latest if to is None else to
        if failing:
            self.world.failing.add(self.version)
        self.rolling = True
        try:
            while True:
                old = [p for p in self.active() if p.version != self.version]
                if not old:
                    return
                unavailable = self.max_unavailable
                batch = max(1, unavailable(len(self.active())) if callable(unavailable) else unavailable)
                for pod in sorted(old, key=lambda p: p.created)[:batch]:
                    self.world.terminate(pod, "deploy")
                self.reconcile()
                # Virtual time: looking once a simulated second costs nothing.
                while any(p.version == self.version and p.ready_at is None for p in self.world.alive()):  # noqa: ASYNC110
                    await asyncio.sleep(1.0)
        finally:
            self.rolling = False

    def crash(self, rng: random.Random) -> None:
        ready = [p for p in self.world.pods if p.ready]
        if ready:
            self.world.crash(rng.choice(ready))


def spot_grace(grace: float) -> float:
    """SIGTERM to SIGKILL on a Spot interruption: the replica's grace period (ECS's
    stopTimeout, terminationGracePeriodSeconds), cut at the warning's end, when the capacity
    is gone whatever the replica asked for."""
    return min(grace, float(SPOT_WARNING_SECONDS))


def ecs_batch(tasks: int, min_healthy_percent: int) -> int:
    """Tasks ECS may stop at once in a rollout within maximumPercent 100: those above the
    minimum healthy count (at least one, or the rollout could never start)."""
    return max(1, tasks - math.ceil(tasks * min_healthy_percent / 100))


class JobPods:
    """A ScaledJob's Jobs: one pod each, until its worker exits or the deadline."""

    def __init__(self, world: World, *, deadline: float) -> None:
        self.world = world
        self.deadline = deadline
        self.created = 0
        self.events: list[tuple[float, int, int]] = []  # (when, active before, active after)

    def active(self) -> int:
        return len(self.world.alive())

    def pending(self, conditions: tuple[str, ...]) -> int:
        """Jobs whose pod is not yet ready (Ready, PodScheduled: Ready implies scheduled),
        or, without conditions, not yet running."""
        return sum(1 for p in self.world.alive() if p.ready_at is None)

    def create(self, n: int) -> None:
        if n <= 0:
            return
        before = self.active()
        for _ in range(n):
            pod = self.world.launch()
            self.world.later(self.deadline, self.world.terminate, pod, "deadline")
        self.created += n
        self.events.append((clock.now(), before, before + n))

    def ready(self) -> int:
        return sum(1 for p in self.world.pods if p.ready)
