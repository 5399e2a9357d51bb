"""Random schedules through the real engine: two workers on one in-memory queue.

Hypothesis drives sends (messages that succeed, fail once, always fail, are invalid, run
long, or ignore cancellation), the passing of time, slow and failing SQS calls, SIGTERMs
and hard kills, and checks the invariants of DESIGN.md after every step:

- a receipt handle is never used after its message was received again or its visibility
  ran out (the model records every such call);
- one message never runs twice at the same time, within a worker or across the two;
- no worker holds more messages than its concurrency plus the settling allowance;
- FIFO: a group's messages complete in the order they were sent, and none starts while
  an earlier one of its group is still pending;
- a stopped worker exits within its shutdown timeout plus a small margin;
- at the end (SQS healthy again, a fresh worker running): nothing is lost. Every message is
  completed, or in the DLQ with a reason when it deserved to be there, and no good message
  was ever dead-lettered.

Examples are derandomized: every run plays the same schedules, and a failure reproduces.
`SCHEDULES` (environment variable) sets how many; the closing count is printed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sqs_worker_engine import NonRetryableError
from sqs_worker_engine.doubles.memory import Fault, MemorySQS
from sqs_worker_engine.handlers.job import Job
from sqs_worker_engine.handlers.router import Router
from sqs_worker_engine.process.worker import Worker

from . import vtime
from .harness import config
from .vtime import VirtualTimeLoop

SCHEDULES = int(os.environ.get("SCHEDULES", "100"))  # the compositions suite covers the protections composed
MAX_RECEIVE = 5
SHUTDOWN_S = 20.0
EXIT_MARGIN = 12.0  # the release margin for polls out (10 s) plus the cut grace, rounded up
KINDS = ("ok", "ok", "ok", "fail_once", "fail_always", "fatal", "invalid", "slow", "stubborn")
GOOD = {"ok", "fail_once", "slow", "stubborn"}
OPERATIONS = ("ReceiveMessage", "ChangeMessageVisibilityBatch", "DeleteMessageBatch", "SendMessage")
ran = {"schedules": 0, "steps": 0}


def _key(body: str) -> str:
    return body.split()[-1] if body.startswith("{not json") else str(json.loads(body)["key"])


class Crashable:
    """One worker's view of SQS; `kill()` makes it a dead process: every call hangs."""

    def __init__(self, sqs: MemorySQS) -> None:
        self.sqs = sqs
        self.dead = False

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.sqs, name)

        async def call(**kwargs: Any) -> Any:
            if self.dead:
                await asyncio.get_running_loop().create_future()
            return await target(**kwargs)

        return call


@dataclass
class Seen:
    """What handlers did. Two runs of one message at once are a failure unless the earlier
    one's lease was lost (SQS redelivers a message whose lease ran out: only a held lease
    keeps it from another worker) or its worker was killed."""

    running: dict[str, dict[str, Job[Any]]] = field(default_factory=dict)  # key -> worker -> job
    attempts: dict[str, int] = field(default_factory=dict)
    completed: list[str] = field(default_factory=list)
    starts: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    dead: set[str] = field(default_factory=set)

    def enter(self, worker: str, key: str, job: Job[Any]) -> None:
        runs = self.running.setdefault(key, {})
        live = [w for w, j in runs.items() if w not in self.dead and j.cancel_reason != "lease_lost"]
        if live:
            self.problems.append(f"{key} started on {worker} while its lease was held by {live}")
        runs[worker] = job
        self.attempts[key] = self.attempts.get(key, 0) + 1
        self.starts.append(key)

    def leave(self, worker: str, key: str, ok: bool) -> None:
        self.running[key].pop(worker, None)
        if ok and worker not in self.dead:
            self.completed.append(key)


class Schedules(RuleBasedStateMachine):
    @initialize(fifo=st.booleans())
    def setup(self, fifo: bool) -> None:
        ran["schedules"] += 1
        self.loop = VirtualTimeLoop()
        asyncio.set_event_loop(self.loop)
        self.fifo = fifo
        self.queue = "jobs.fifo" if fifo else "jobs"
        self.dlq = "jobs-dlq.fifo" if fifo else "jobs-dlq"
        self.sqs = MemorySQS()
        self.sqs.create_queue_with_dlq(self.queue, MAX_RECEIVE, VisibilityTimeout="10")
        self.seen = Seen()
        self.sent: list[tuple[str, str, str | None]] = []  # key, kind, group
        self.router = self._router()
        self.workers: dict[str, tuple[Worker, asyncio.Task[None], Crashable]] = {}
        self.stops: dict[str, float] = {}
        self.serial = 0
        for name in ("w1", "w2"):
            self._start(name)

    def _router(self) -> Router:
        router = Router()
        seen = self.seen

        @router.handler(self.queue)
        async def handle(job: Job[Any]) -> None:
            key, kind = job.payload["key"], job.payload["kind"]
            seen.enter(job.worker_id, key, job)
            ok = False
            try:
                if kind == "fatal":
                    raise NonRetryableError("never valid")
                if kind == "fail_always" or (kind == "fail_once" and seen.attempts[key] == 1):
                    raise RuntimeError("failed")
                if kind == "stubborn":
                    try:
                        await asyncio.sleep(12)
                    except asyncio.CancelledError:
                        await asyncio.sleep(3)  # ignores the cancellation for a while
                        raise
                await asyncio.sleep(15 if kind == "slow" else 0.2)  # slow: past the 10 s visibility
                ok = True
            finally:
                seen.leave(job.worker_id, key, ok)

        return router

    def _start(self, name: str) -> None:
        client = Crashable(self.sqs)
        env = {
            "WORKER_ID": name,
            "WORKER_CONCURRENCY": "3",
            "WORKER_VISIBILITY_TIMEOUT_SECONDS": "10",
            "WORKER_JOB_TIMEOUT_MS": "18000",
            "WORKER_SHUTDOWN_TIMEOUT_MS": str(int(SHUTDOWN_S * 1000)),
            "WORKER_RETRY_BASE_SECONDS": "1",
            "WORKER_RETRY_MAX_SECONDS": "8",
        }
        worker = Worker(config(self.queue, **env), self.router, client=client)
        task = self.loop.create_task(worker.run())
        self.workers[name] = (worker, task, client)
        self.seen.dead.discard(name)

    def _play(self, seconds: float) -> None:
        ran["steps"] += 1
        self.loop.run_until_complete(asyncio.sleep(seconds))

    # -- rules -------------------------------------------------------------------

    @rule(kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=6), group=st.integers(0, 2))
    def send(self, kinds: list[str], group: int) -> None:
        self.loop.run_until_complete(self._send(kinds, group))

    async def _send(self, kinds: list[str], group: int) -> None:
        for kind in kinds:
            self.serial += 1
            key = f"k{self.serial}"
            body = f"{{not json {key}" if kind == "invalid" else json.dumps({"key": key, "kind": kind})
            gid = f"g{group}" if self.fifo else None
            self.sqs.put(self.queue, body, group=gid)
            self.sent.append((key, kind, gid))

    @rule(seconds=st.floats(0.05, 40))
    def wait(self, seconds: float) -> None:
        self._play(seconds)

    @rule(
        operation=st.sampled_from(OPERATIONS),
        before=st.floats(0, 30),
        error=st.sampled_from([None, "ThrottlingException", "InternalError", "ServiceUnavailable"]),
        times=st.integers(1, 4),
    )
    def trouble(self, operation: str, before: float, error: str | None, times: int) -> None:
        self.sqs.faults[operation] = Fault(before=before, error=error, times=times)

    @rule()
    def heal(self) -> None:
        self.sqs.heal()

    @precondition(lambda self: any(n not in self.stops for n in self.workers))
    @rule(which=st.sampled_from(["w1", "w2"]))
    def sigterm(self, which: str) -> None:
        if which in self.stops or which not in self.workers:
            return
        self.stops[which] = self.loop.time()
        self.workers[which][0].stop("SIGTERM")

    @rule(which=st.sampled_from(["w1", "w2"]))
    def kill(self, which: str) -> None:
        if which not in self.workers:
            return
        _, task, client = self.workers[which]
        if task.done():
            return
        client.dead = True  # SIGKILL: no call of it reaches SQS again
        self.seen.dead.add(which)
        self.stops.pop(which, None)
        task.cancel()
        del self.workers[which]
        self._reap(task)

    @precondition(lambda self: len(self.workers) < 2)
    @rule()
    def restart(self) -> None:
        for name in ("w1", "w2"):
            if name not in self.workers:
                self._start(name)
                return

    def _reap(self, task: asyncio.Task[None]) -> None:
        # A killed worker's tasks hang on its dead client forever: leave them be, never awaited.
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    # -- invariants --------------------------------------------------------------

    @invariant()
    def no_stale_handle_used(self) -> None:
        assert self.sqs.misuses == [], self.sqs.misuses

    @invariant()
    def never_twice_at_once(self) -> None:
        assert self.seen.problems == [], self.seen.problems

    @invariant()
    def in_flight_is_bounded(self) -> None:
        for worker, _, _ in self.workers.values():
            for pool in worker.pools:
                assert len(pool.book) <= pool.admission.strand_limit
                assert pool.admission.held <= pool.admission.held_limit
                assert pool.admission.sent <= pool.admission.sent_limit
                assert pool.active <= pool.options.concurrency

    @invariant()
    def fifo_order(self) -> None:
        if not self.fifo:
            return
        order = {key: i for i, (key, _, _) in enumerate(self.sent)}
        groups = {key: gid for key, _, gid in self.sent}
        done = set(self.seen.completed) | self._dead_lettered()
        for key in self.seen.starts:
            earlier = [k for k, _, g in self.sent[: order[key]] if g == groups[key]]
            pending = [k for k in earlier if k not in done]
            assert not pending, f"{key} started while {pending} of its group were pending"

    @invariant()
    def stopped_workers_exit_in_time(self) -> None:
        for name, since in self.stops.items():
            task = self.workers[name][1]
            assert task.done() or self.loop.time() - since <= SHUTDOWN_S + EXIT_MARGIN, f"{name} has not exited"

    def _dead_lettered(self) -> set[str]:
        return {_key(body) for body in self.sqs.bodies(self.dlq)}

    def teardown(self) -> None:
        try:
            self.sqs.heal()
            for name, (_, task, _) in list(self.workers.items()):
                if name in self.stops:
                    self.loop.run_until_complete(asyncio.wait_for(task, SHUTDOWN_S + EXIT_MARGIN))
                if task.done():
                    task.result()  # a worker that died on its own is a failure
                    del self.workers[name]
                    self.stops.pop(name, None)
            if not self.workers:
                self._start("w1")
            self._settle_everything()
            self._check_nothing_lost()
        finally:
            for worker, _, _ in self.workers.values():
                worker.stop()
            self.loop.run_until_complete(
                asyncio.gather(*(t for _, t, _ in self.workers.values()), return_exceptions=True)
            )
            vtime.cancel_leftovers(self.loop)  # killed workers' tasks, abandoned server-side polls
            asyncio.set_event_loop(None)
            self.loop.close()

    def _settle_everything(self) -> None:
        for _ in range(60):  # up to 20 virtual minutes for retries, leases and redrives
            self._play(20)
            if not self.sqs.bodies(self.queue):
                return

    def _check_nothing_lost(self) -> None:
        remaining = self.sqs.bodies(self.queue)
        assert remaining == [], f"still in the queue after 20 healthy minutes: {remaining}"
        dead = self._dead_lettered()
        completed = set(self.seen.completed)
        receives = {_key(body): n for body, n in self.sqs.receipts.items()}
        for key, kind, _ in self.sent:
            assert key in completed or key in dead, f"{kind} message {key} was lost"
            if kind in ("fatal", "invalid", "fail_always"):
                assert key in dead, f"{kind} message {key} did not reach the DLQ"
            elif key in dead:
                # A good message reaches the DLQ only once its receives are spent (by kills,
                # shutdowns and give-backs): SQS's redrive, or the worker's attempt count.
                assert receives[key] >= MAX_RECEIVE, f"good message {key} ({kind}) was dead-lettered"


Schedules.TestCase.settings = settings(
    max_examples=SCHEDULES,
    stateful_step_count=20,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestSchedules = Schedules.TestCase


@pytest.fixture(autouse=True)
def _quiet_engine() -> Iterator[None]:
    """Thousands of schedules log tens of thousands of expected warnings: keep them out of
    the captured output (a failing schedule is reported by hypothesis with its steps)."""
    engine = logging.getLogger("sqs_worker_engine")
    level = engine.level
    engine.setLevel(logging.CRITICAL)
    yield
    engine.setLevel(level)


def test_zz_report_how_many_schedules_ran() -> None:
    print(f"\n{ran['schedules']} schedules, {ran['steps']} timed steps")
