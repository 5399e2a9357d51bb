"""Liveness of the protections composed: random compositions of pauses, rate limits, tenant
caps, prefetch on and off, adaptive concurrency on and off, FIFO and standard queues, batch
handlers, slow and failing SQS calls, lost leases and SIGTERM, the real worker against the
in-memory SQS on virtual time, and run to completion (WORKER_MAX_JOBS); with the life
events of life.py mixed in: the lifespan slow, failing or hanging in its open or its close,
SIGTERM in a phase (the lifespan opening, a pause, a quiet spell, a message settling), SQS
failing per call kind and answering again, a handler process dying.

Checked in every composition:
- every message ends: completed, or in the DLQ for its own failure (never a good one),
  within a bound of virtual time once SQS is healthy (a wedged queue fails here);
- what a worker holds never exceeds concurrency + prefetch places (admission.held_limit)
  and as many again deletes sent and unanswered (sent_limit, strand_limit);
- no handler starts on a delivery whose lease was lost, and one message never runs twice
  at once while a lease on it is held;
- a rate limit is never exceeded in any window of its length;
- no handler slot is taken while the slots running are at the limit in use (the adaptive
  limit, or the concurrency);
- a SIGTERM'd worker exits within its shutdown timeout plus a small margin;
- from a refused delete until one is answered no job starts and no receive brings a
  message, and no receive brings more messages than the places granted for it (life.py:
  `Heard`, `watched_receives`), FIFO receives sent again among them;
- no job starts in a worker after it was told to stop; once SQS answers again no queue
  still waits on it (life.RECOVERY); no message is charged for a process another one
  killed; the worker is live whenever it runs (nothing here is stuck for good), and a
  lifespan that fails to open receives nothing;
- with WORKER_MAX_JOBS, each worker runs at most that many jobs and never holds more
  messages that have not started than the jobs it has left; one that exits by itself says
  "max jobs reached", and another takes its place, as a ScaledJob starts another pod. The
  run ends at the cap with the rest still in the queue, not lost: so every message still
  ends, over the workers that come one after another.

`test_a_leaked_probe_is_caught` breaks admission on purpose (the probe of a pause is never
handed back when its job leaves without an answer) and checks that this suite's liveness
check fails on it. Examples are derandomized; COMPOSITIONS sets how many (default 100; the
nightly CI run plays 3,000).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqs_worker_engine import DownstreamUnavailable, NonRetryableError
from sqs_worker_engine.base import clock
from sqs_worker_engine.doubles.memory import Fault, MemorySQS
from sqs_worker_engine.handlers.job import Job
from sqs_worker_engine.handlers.router import Router
from sqs_worker_engine.process.worker import Worker
from sqs_worker_engine.runtime.admission.admission import Admission
from sqs_worker_engine.runtime.admission.line import StartLine
from sqs_worker_engine.runtime.handling import processes
from sqs_worker_engine.runtime.protections import reach
from sqs_worker_engine.runtime.protections.throttle import StartWindow
from sqs_worker_engine.runtime.settling.delivery import State

from . import life, vtime
from .harness import Running, config

COMPOSITIONS = int(os.environ.get("COMPOSITIONS", "100"))
MAX_RECEIVE = 5
SHUTDOWN_S = 20.0
EXIT_MARGIN = 12.0
ENDS_WITHIN = 3600.0  # virtual seconds after the last disturbance by which every message ended
KINDS = ("ok", "ok", "ok", "fail_once", "fatal", "pause_once", "slow", "lost")
GOOD = {"ok", "fail_once", "pause_once", "slow"}
ran = {"compositions": 0, "capped": 0, "replaced": 0}


@dataclass(frozen=True)
class Composition:
    fifo: bool
    batch: bool
    concurrency: int
    prefetch: str
    rate: str | None
    group_cap: str | None
    kinds: tuple[tuple[str, int], ...]  # each message's kind and group
    trouble: tuple[tuple[str, float, str | None], ...]  # (operation, delay, error) while disturbed
    sigterm_at: float | None  # virtual seconds after the start
    adaptive: bool = False  # WORKER_ADAPTIVE_CONCURRENCY: the concurrency is the ceiling
    max_jobs: str | None = None  # WORKER_MAX_JOBS of every worker
    events: life.Life = life.Life()  # noqa: RUF009 - frozen: one shared default is safe; the process's life events (life.py)


@st.composite
def compositions(draw: st.DrawFn) -> Composition:
    fifo = draw(st.booleans())
    batch = draw(st.booleans())
    events = draw(life.lives(batch))
    kinds = KINDS + (("crash",) if events.processes else ())
    return Composition(
        fifo=fifo,
        batch=batch,
        concurrency=draw(st.integers(1, 4)),
        prefetch=draw(st.sampled_from(["0", "5", "50"])),
        rate=draw(st.sampled_from([None, None, "3/s", "20/min"])),
        group_cap=None if fifo else draw(st.sampled_from([None, "1", "2"])),
        kinds=tuple(draw(st.lists(st.tuples(st.sampled_from(kinds), st.integers(0, 2)), min_size=1, max_size=10))),
        trouble=tuple(
            draw(
                st.lists(
                    st.tuples(
                        st.sampled_from(["ReceiveMessage", "DeleteMessageBatch", "ChangeMessageVisibilityBatch"]),
                        st.sampled_from([0.0, 3.0]),
                        st.sampled_from([None, "ServiceUnavailable"]),
                    ),
                    max_size=2,
                )
            )
        ),
        sigterm_at=draw(st.one_of(st.none(), st.floats(0.5, 30))),
        adaptive=draw(st.booleans()),
        max_jobs=draw(st.sampled_from([None, None, "1", "3"])),
        events=events,
    )


@dataclass
class Seen:
    problems: list[str] = field(default_factory=list)
    running: dict[str, list[Job[Any]]] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    completed: set[str] = field(default_factory=set)
    starts: list[float] = field(default_factory=list)
    jobs: dict[int, set[str]] = field(default_factory=dict)  # worker -> receipt handles its handlers saw


def _router(c: Composition, queue: str, seen: Seen, workers: list[Worker], router: Router | None = None) -> Router:
    """`queue`'s handler, on `router` (default: a new one)."""
    router = router or Router()

    def enter(job: Job[Any]) -> tuple[str, str]:
        key, kind = job.payload["key"], job.payload["kind"]
        pool = next(p for p in workers[-1].pools if p.name == queue)
        run = next((r for r in pool.runs if r.job is job), None)
        if run is None or run.delivery.state is not State.RUNNING:
            seen.problems.append(f"{key} started without a held lease ({run and run.delivery.state})")
        # A run whose lease was lost is told so (job.cancelled) and may still be ending.
        if [j for j in seen.running.get(key, []) if j.cancel_reason != "lease_lost"]:
            seen.problems.append(f"{key} started while another run of it held its lease")
        seen.running.setdefault(key, []).append(job)
        seen.attempts[key] = seen.attempts.get(key, 0) + 1
        if run is not None:  # a delivery is one job, however often it runs in place
            seen.jobs.setdefault(len(workers) - 1, set()).add(run.delivery.receipt_handle)
        # The rate limit counts starts as admission makes them: a batch handler's call comes
        # up to its wait_ms after its jobs started, which no limit on starts can move.
        if not c.events.processes:  # (in a process pool, a job caught in a crash runs again: see checked_take)
            seen.starts.append(run.ticket.started_at if c.batch and run is not None else clock.now())
        return key, kind

    async def work(job: Job[Any], key: str, kind: str) -> None:
        try:
            if kind == "fatal":
                raise NonRetryableError("never valid")
            if kind == "fail_once" and seen.attempts[key] == 1:
                raise RuntimeError("failed once")
            if kind == "pause_once" and seen.attempts[key] == 1:
                raise DownstreamUnavailable(2, "partner down")
            if kind == "hangs":  # only in the check of the liveness check: ignores its timeout for a minute
                await life.ignore_cancellation(60.0)
            await asyncio.sleep({"slow": 14.0, "lost": 12.0}.get(kind, 0.2))
            seen.completed.add(key)
        finally:
            if job in seen.running[key]:
                seen.running[key].remove(job)

    if c.events.processes:

        @router.handler(queue, executor="process")
        def in_a_process(job: Job[Any]) -> None:
            """Runs on life.FakeProcesses: its time and its end are the pool's (`process_plan`)."""
            key, kind = enter(job)
            if kind == "fatal":
                raise NonRetryableError("never valid")
            if kind == "fail_once" and seen.attempts[key] == 1:
                raise RuntimeError("failed once")
            if kind == "pause_once" and seen.attempts[key] == 1:
                raise DownstreamUnavailable(2, "partner down")

    elif c.batch:

        @router.batch_handler(queue, size=3, wait_ms=100)
        async def handle_batch(jobs: list[Job[Any]]) -> dict[str, Any]:
            failed = []
            entered = [(job, *enter(job)) for job in jobs]  # the batch starts them all at once
            try:
                for job, key, kind in entered:
                    try:
                        await work(job, key, "fail_once" if kind == "pause_once" else kind)
                    except Exception:
                        failed.append({"itemIdentifier": job.id})
            finally:  # a batch cut short (all its jobs given up) ends the ones it never reached
                for job, key, _ in entered:
                    if job in seen.running[key]:
                        seen.running[key].remove(job)
            return {"batchItemFailures": failed}

    else:

        @router.handler(queue)
        async def handle(job: Job[Any]) -> None:
            key, kind = enter(job)
            await work(job, key, kind)

    return router


def play(c: Composition) -> None:
    """Run one composition; raises AssertionError naming the invariant that broke."""
    ran["compositions"] += 1
    ran["capped"] += c.max_jobs is not None
    life.tally(c.events, c.sigterm_at is not None, c.kinds)
    queue = "jobs.fifo" if c.fifo else "jobs"
    dlq = "jobs-dlq.fifo" if c.fifo else "jobs-dlq"
    seen = Seen()
    workers: list[Worker] = []
    env = {
        "WORKER_CONCURRENCY": str(c.concurrency),
        "WORKER_PREFETCH": c.prefetch,
        "WORKER_VISIBILITY_TIMEOUT_SECONDS": "10",
        "WORKER_JOB_TIMEOUT_MS": "18000",
        "WORKER_SHUTDOWN_TIMEOUT_MS": str(int(SHUTDOWN_S * 1000)),
        "WORKER_RETRY_BASE_SECONDS": "1",
        "WORKER_RETRY_MAX_SECONDS": "8",
        **({"WORKER_RATE_LIMIT": c.rate} if c.rate else {}),
        **({"WORKER_GROUP_CONCURRENCY": c.group_cap} if c.group_cap else {}),
        **({"WORKER_ADAPTIVE_CONCURRENCY": "true"} if c.adaptive else {}),
        **({"WORKER_MAX_JOBS": c.max_jobs} if c.max_jobs else {}),
        **life.env(c.events),
    }
    take = StartLine._take
    watch = life.Watch()

    def checked_take(line: StartLine, ticket: Any, now: float) -> None:
        admission = line.member
        assert isinstance(admission, Admission)
        # A job cancelled past its timeout whose work goes on (a process cannot be stopped)
        # holds a slot of the concurrency, not of the limit in use (admission._slots_full).
        live = admission.running - admission.overdue_running
        if live >= admission.limit or admission.running >= admission.capacity:
            seen.problems.append(
                f"a start with {admission.running} running ({live} live) at a limit of {admission.limit}"
            )
        watch.take(workers, admission)
        if c.events.processes:
            seen.starts.append(now)
        take(line, ticket, now)

    async def scenario() -> None:
        sqs = MemorySQS()
        sqs.create_queue_with_dlq(queue, MAX_RECEIVE, VisibilityTimeout="10")
        router = _router(c, queue, seen, workers)
        life.add_lifespan(router, c.events)
        keys: dict[str, str] = {}
        kinds_by_id: dict[str, str] = {}
        for i, (kind, group) in enumerate(c.kinds):
            key = f"k{i}"
            keys[key] = kind
            message_id = sqs.put(queue, json.dumps({"key": key, "kind": kind}), group=f"g{group}")
            kinds_by_id[message_id] = kind
            if kind == "lost":
                sqs.refuse_extensions(message_id, "ReceiptHandleIsInvalid")
        now: dict[str, Running] = {}

        def begin() -> None:
            client = life.Heard(sqs, watch.problems, c.events)  # what this worker hears of SQS is judged
            worker = Worker(config(queue, **env), router, client=client)
            watch.hear(worker, client)
            worker.on("job:failed", watch.failed(kinds_by_id.get))
            now["running"] = Running(worker)
            workers.append(worker)

        begin()
        if c.events.lifespan == "failing_open":
            await life.failed_to_open(now["running"], sqs)
            begin()  # the platform starts another
        sampler = asyncio.create_task(_sample(workers, seen, watch))
        replacer = asyncio.create_task(_replace_finished(c, now, begin, seen)) if c.max_jobs else None
        for operation, before, error in c.trouble:
            sqs.faults[operation] = Fault(before=before, error=error, times=3)
        outage = asyncio.create_task(life.outage(sqs, c.events))
        if await life.sigterm_moment(now["running"].worker, c.events, c.sigterm_at):
            if replacer is not None:
                replacer.cancel()
            took = await now["running"].stop()
            assert took <= SHUTDOWN_S + EXIT_MARGIN, f"the worker took {took:.1f} s to exit"
            begin()
            if replacer is not None:
                replacer = asyncio.create_task(_replace_finished(c, now, begin, seen))
        await asyncio.sleep(30)
        await outage
        sqs.heal()
        if c.events.outage:
            watch.healed_at = clock.now()
        deadline = clock.now() + ENDS_WITHIN
        while clock.now() < deadline and not _all_ended(sqs, keys, seen, queue, dlq):
            await asyncio.sleep(5)
        sampler.cancel()
        if replacer is not None:
            replacer.cancel()
        await now["running"].stop()
        if c.max_jobs:
            for i, handles in seen.jobs.items():
                assert len(handles) <= int(c.max_jobs), f"worker {i} ran {len(handles)} jobs over its cap"
        assert seen.problems == [], seen.problems
        assert watch.problems == [], watch.problems
        dead = {json.loads(b)["key"] for b in sqs.bodies(dlq)}
        receives = {json.loads(body)["key"]: n for body, n in sqs.receipts.items()}
        for key, kind in keys.items():
            assert key in seen.completed or key in dead, f"{kind} message {key} never ended ({c})"
            if kind in GOOD and key in dead:  # only once its receives were spent (shutdowns, SQS trouble)
                assert receives[key] >= MAX_RECEIVE, f"good message {key} ({kind}) was dead-lettered"
            if kind == "fatal":
                assert key in dead, f"fatal message {key} was not dead-lettered"
        if c.rate:
            _check_rate(seen.starts, StartWindow(_per_second(c.rate)), len(workers))

    def ended_in_process(job: Job[Any], ok: bool) -> None:
        key = job.payload["key"]
        if job in seen.running.get(key, []):
            seen.running[key].remove(job)
        if ok:
            seen.completed.add(key)

    with (
        mock.patch.object(StartLine, "_take", checked_take),
        life.fake_processes(ended_in_process),
        life.watched_receives(watch),
    ):
        vtime.run(scenario())


def _all_ended(sqs: MemorySQS, keys: dict[str, str], seen: Seen, queue: str, dlq: str) -> bool:
    dead = {json.loads(b)["key"] for b in sqs.bodies(dlq)}
    return all(k in seen.completed or k in dead for k in keys) and not sqs.bodies(queue)


async def _sample(workers: list[Worker], seen: Seen, watch: life.Watch) -> None:
    while True:
        watch.sample(workers)
        for i, worker in enumerate(workers):
            for pool in worker.pools:
                a = pool.admission
                if len(pool.book) > a.strand_limit or a.held > a.held_limit or a.sent > a.sent_limit:
                    seen.problems.append(
                        f"{len(pool.book)} held ({a.held} places, {a.sent} deletes sent), more than "
                        f"{a.strand_limit} ({a.held_limit}, {a.sent_limit})"
                    )
                cap = worker.settings.max_jobs
                if cap is not None:
                    # Held and not started (by what its handlers saw) within the jobs left.
                    jobs = seen.jobs.get(i, set())
                    waiting = sum(1 for d in pool.book if d.receipt_handle not in jobs)
                    if waiting > cap - len(jobs):
                        seen.problems.append(f"worker {i} holds {waiting} not started with {cap - len(jobs)} jobs left")
        await asyncio.sleep(0.1)


async def _replace_finished(c: Composition, now: dict[str, Running], begin: Any, seen: Seen) -> None:
    """A worker that reached its cap exits by itself; another takes its place (a ScaledJob's
    next pod). One that exits by itself for any other reason is a problem."""
    while True:
        await asyncio.sleep(1)
        running = now["running"]
        if running.task.done():
            reason = running.worker._stop_reason
            completion = running.worker.completion
            if reason != "max jobs reached" or completion is None or completion.started != int(c.max_jobs or 0):
                seen.problems.append(f"a worker exited by itself: {reason!r}, {completion and completion.started} jobs")
            ran["replaced"] += 1
            begin()


def _per_second(rate: str) -> float:
    number, unit = rate.split("/")
    return float(number) / {"s": 1, "min": 60}[unit]


def _check_rate(starts: list[float], window: StartWindow, workers: int) -> None:
    """Per worker process the limit holds; a restart's new worker has its own window, so
    over the run at most `workers` windows' worth can meet in one window."""
    for i, t in enumerate(starts):
        inside = sum(1 for s in starts[i:] if s < t + window.seconds)
        assert inside <= window.count * workers, (
            f"{inside} starts in {window.seconds:g} s over a limit of {window.count}"
        )


@settings(
    max_examples=COMPOSITIONS,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(compositions())
def test_every_message_ends_whatever_the_composition(c: Composition) -> None:
    play(c)


LEAK_CASE = Composition(
    fifo=False,
    batch=False,
    concurrency=1,
    prefetch="50",
    rate=None,
    group_cap=None,
    kinds=(("pause_once", 0), ("lost", 0), ("ok", 0), ("ok", 0)),
    trouble=(),
    sigterm_at=None,
)


def test_the_probe_case_ends_as_it_should() -> None:
    """The pause's probe is the message whose lease is lost: it leaves without an answer,
    and the next message probes."""
    play(LEAK_CASE)


def test_a_leaked_probe_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check of the check: a probe that is never handed back when its job leaves
    without an answer wedges the queue, and the liveness check says so."""
    close = StartLine.close

    def leaky_close(self: StartLine, ticket: Any) -> None:
        probe = self.gate.probe
        close(self, ticket)
        self.gate.probe = probe  # the permit is not returned

    monkeypatch.setattr(StartLine, "close", leaky_close)
    # Nothing held ahead: the next probe must be received for the purpose, and the leaked
    # one stops that. (A prefetched message would start once the pause ran its time, and
    # its answer end the pause: the leak would go unseen.)
    with pytest.raises(AssertionError, match="never ended"):
        play(dataclasses.replace(LEAK_CASE, prefetch="0"))


def test_a_stuck_handler_is_caught_by_the_liveness_check() -> None:
    """The check of the check: a handler that ignores its timeout for a minute holds the one
    slot, and the worker must not be live through it (the suite asserts it is whenever it
    can make progress)."""
    stuck = dataclasses.replace(LEAK_CASE, concurrency=1, kinds=(("hangs", 0), ("ok", 0)))
    with pytest.raises(AssertionError, match="not live"):
        play(stuck)


def test_a_neighbour_charged_for_a_crash_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check of the check: a process pool that fails every job of a broken pool as its
    own failure (Python's, alone) charges a message for its neighbour's crash, and the suite
    says so."""

    monkeypatch.setattr(processes, "after_break", lambda begun, breaks, stopped: "fail")  # as Python does
    crash = dataclasses.replace(
        LEAK_CASE, concurrency=2, kinds=(("slow", 0), ("crash", 1)), events=life.Life(processes=True)
    )
    with pytest.raises(AssertionError, match="charged for a process that died"):
        play(crash)


DELETES_CASE = dataclasses.replace(
    LEAK_CASE,
    concurrency=2,
    prefetch="5",
    kinds=tuple(("ok", i % 3) for i in range(6)),
    events=life.Life(outage=("DeleteMessageBatch",), deletes_refused=True),
)


def test_the_refused_deletes_case_ends_as_it_should() -> None:
    """A worker policy without sqs:DeleteMessage from the start, for half a minute: nothing
    starts from the first refused delete until a delete is answered, and every message
    ends."""
    play(DELETES_CASE)


def test_a_start_while_deletes_are_refused_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check of the check: deletes that hold no start (as when any call SQS answered
    ended the outage) start jobs whose messages cannot be deleted, and the suite says so."""
    monkeypatch.setattr(reach, "starts_held", lambda down: False)
    with pytest.raises(AssertionError, match="after a refused delete"):
        play(DELETES_CASE)


@pytest.fixture(autouse=True)
def _quiet_engine() -> Iterator[None]:
    engine = logging.getLogger("sqs_worker_engine")
    level = engine.level
    engine.setLevel(logging.CRITICAL)
    yield
    engine.setLevel(level)


def test_zz_report_how_many_compositions_ran() -> None:
    print(
        f"\n{ran['compositions']} compositions, {ran['capped']} with WORKER_MAX_JOBS "
        f"({ran['replaced']} workers exited at their cap and were replaced); life events: {life.told()}"
    )
