"""Liveness of a shared budget (budget.py) composed with everything else: two or three
queues of random compositions (test_compositions.py's: pauses, rate limits, tenant caps,
prefetch, adaptive concurrency, FIFO, batch handlers, failing messages, lost leases),
sharing 1-4 slots under strict or weighted priority, with slow and failing SQS calls,
SIGTERM, and WORKER_MAX_JOBS (a worker at its cap exits and another takes its place); and
the life events of life.py (the first queue's: the lifespan, SIGTERM in a phase, an SQS
outage; each queue's own handlers in a process pool, where a message may kill its process).

Checked in every composition, besides test_compositions.py's invariants per queue (every
message ends, held within concurrency + prefetch, no start on a lost lease, no message
run twice at once, rate limits kept, a prompt exit on SIGTERM): the queues together never
hold more slots than the budget, and life.Watch's: no start after SIGTERM (the budget's
queues stop together), SQS's recovery seen by every queue, no message charged for another's
crash, liveness whenever a worker runs. A slot that nobody holds while a line waits for it
for good, or a line that nobody wakes, leaves a message that never ends: the check fails.
SHARED_COMPOSITIONS sets how many are played (default: COMPOSITIONS / 3).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqs_worker_engine.base import clock
from sqs_worker_engine.doubles.memory import Fault, MemorySQS
from sqs_worker_engine.handlers.job import Job
from sqs_worker_engine.handlers.router import Router
from sqs_worker_engine.process.settings import queue_env_key
from sqs_worker_engine.process.worker import Worker
from sqs_worker_engine.runtime.admission.admission import Admission
from sqs_worker_engine.runtime.admission.line import StartLine
from sqs_worker_engine.runtime.protections.budget import Member, SharedBudget
from sqs_worker_engine.runtime.protections.throttle import StartWindow

from . import life, vtime
from .harness import Running, config
from .test_compositions import (
    COMPOSITIONS,
    ENDS_WITHIN,
    EXIT_MARGIN,
    GOOD,
    MAX_RECEIVE,
    SHUTDOWN_S,
    Composition,
    Seen,
    _check_rate,
    _per_second,
    _quiet_engine,  # noqa: F401 - autouse here too: the engine's logs stay quiet while suites play
    _replace_finished,
    _router,
    compositions,
)

SHARED_COMPOSITIONS = int(os.environ.get("SHARED_COMPOSITIONS", str(max(1, COMPOSITIONS // 3))))
ran = {"compositions": 0}


@dataclass(frozen=True)
class Shared:
    queues: tuple[Composition, ...]  # each queue's own composition (its trouble and SIGTERM unused)
    budget: int
    priority: str
    weights: tuple[int, ...]
    trouble: tuple[tuple[str, float, str | None], ...]
    sigterm_at: float | None
    max_jobs: str | None = None  # WORKER_MAX_JOBS of every worker: the process's, all queues together
    events: life.Life = life.Life()  # noqa: RUF009 - frozen: one shared default is safe; the process's life events (the first queue's)


@st.composite
def shared_compositions(draw: st.DrawFn) -> Shared:
    queues = tuple(draw(st.lists(compositions(), min_size=2, max_size=3)))
    first = queues[0]
    return Shared(
        queues=queues,
        budget=draw(st.integers(1, 4)),
        priority=draw(st.sampled_from(["strict", "weighted"])),
        weights=tuple(draw(st.integers(1, 3)) for _ in queues),
        trouble=first.trouble,
        sigterm_at=first.sigterm_at,
        max_jobs=first.max_jobs,
        events=first.events,
    )


def _name(i: int, c: Composition) -> str:
    return f"q{i}.fifo" if c.fifo else f"q{i}"


def _env(s: Shared) -> dict[str, str]:
    env = {
        "WORKER_SHARED_CONCURRENCY": str(s.budget),
        "WORKER_PRIORITY": s.priority,
        "WORKER_VISIBILITY_TIMEOUT_SECONDS": "10",
        "WORKER_JOB_TIMEOUT_MS": "18000",
        "WORKER_SHUTDOWN_TIMEOUT_MS": str(int(SHUTDOWN_S * 1000)),
        "WORKER_RETRY_BASE_SECONDS": "1",
        "WORKER_RETRY_MAX_SECONDS": "8",
        **({"WORKER_MAX_JOBS": s.max_jobs} if s.max_jobs else {}),
        **life.env(dataclasses.replace(s.events, processes=any(c.events.processes for c in s.queues))),
    }
    for i, (c, weight) in enumerate(zip(s.queues, s.weights, strict=True)):
        prefix = f"WORKER_QUEUE_{queue_env_key(_name(i, c))}_"
        env[prefix + "CONCURRENCY"] = str(c.concurrency)
        env[prefix + "PREFETCH"] = c.prefetch
        if c.rate:
            env[prefix + "RATE_LIMIT"] = c.rate
        if c.group_cap:
            env[prefix + "GROUP_CONCURRENCY"] = c.group_cap
        if c.adaptive:  # a limit that moves under a shared budget
            env[prefix + "ADAPTIVE_CONCURRENCY"] = "true"
        if s.priority == "weighted":
            env[prefix + "WEIGHT"] = str(weight)
    return env


def play(s: Shared) -> None:
    """Run one composition; raises AssertionError naming the invariant that broke."""
    ran["compositions"] += 1
    life.tally(s.events, s.sigterm_at is not None, [k for c in s.queues for k in c.kinds])
    names = [_name(i, c) for i, c in enumerate(s.queues)]
    seen = {name: Seen() for name in names}
    problems: list[str] = []
    workers: list[Worker] = []
    env = _env(s)
    watch = life.Watch()
    take = StartLine._take

    def watched_take(line: StartLine, ticket: Any, now: float) -> None:
        assert isinstance(line.member, Admission)
        watch.take(workers, line.member)
        take(line, ticket, now)

    async def scenario() -> None:
        sqs = MemorySQS()
        router = Router()
        life.add_lifespan(router, s.events)
        keys: dict[str, dict[str, str]] = {}
        kinds_by_id: dict[str, str] = {}
        for i, (name, c) in enumerate(zip(names, s.queues, strict=True)):
            sqs.create_queue_with_dlq(name, MAX_RECEIVE, VisibilityTimeout="10")
            _router(c, name, seen[name], workers, router)
            keys[name] = {}
            for j, (kind, group) in enumerate(c.kinds):
                key = f"q{i}k{j}"
                keys[name][key] = kind
                message_id = sqs.put(name, json.dumps({"key": key, "kind": kind}), group=f"g{group}")
                kinds_by_id[message_id] = kind
                if kind == "lost":
                    sqs.refuse_extensions(message_id, "ReceiptHandleIsInvalid")
        queues = ",".join(names)
        now: dict[str, Running] = {}

        def begin() -> None:
            client = life.Heard(sqs, watch.problems, s.events)  # what this worker hears of SQS is judged
            worker = Worker(config(queues, **env), router, client=client)
            watch.hear(worker, client)
            worker.on("job:failed", watch.failed(kinds_by_id.get))
            now["running"] = Running(worker)
            workers.append(worker)

        # With WORKER_MAX_JOBS a worker exits at its cap and another takes its place.
        capped = dataclasses.replace(s.queues[0], max_jobs=s.max_jobs)
        seen_first = seen[names[0]]

        def replacing() -> asyncio.Task[None] | None:
            return asyncio.create_task(_replace_finished(capped, now, begin, seen_first)) if s.max_jobs else None

        begin()
        if s.events.lifespan == "failing_open":
            await life.failed_to_open(now["running"], sqs)
            begin()  # the platform starts another
        sampler = asyncio.create_task(_sample(workers, s.budget, problems, watch))
        replacer = replacing()
        for operation, before, error in s.trouble:
            sqs.faults[operation] = Fault(before=before, error=error, times=3)
        outage = asyncio.create_task(life.outage(sqs, s.events))
        if await life.sigterm_moment(now["running"].worker, s.events, s.sigterm_at):
            if replacer is not None:
                replacer.cancel()
            took = await now["running"].stop()
            assert took <= SHUTDOWN_S + EXIT_MARGIN, f"the worker took {took:.1f} s to exit"
            begin()
            replacer = replacing()
        await asyncio.sleep(30)
        await outage
        sqs.heal()
        if s.events.outage:
            watch.healed_at = clock.now()
        deadline = clock.now() + ENDS_WITHIN
        while clock.now() < deadline and not all(_ended(sqs, name, keys[name], seen[name]) for name in names):
            await asyncio.sleep(5)
        sampler.cancel()
        if replacer is not None:
            replacer.cancel()
        await now["running"].stop()
        assert problems == [], problems
        assert watch.problems == [], watch.problems
        receives = {json.loads(body)["key"]: n for body, n in sqs.receipts.items()}
        for name, c in zip(names, s.queues, strict=True):
            assert seen[name].problems == [], seen[name].problems
            dead = {json.loads(b)["key"] for b in sqs.bodies(_dlq(name))}
            for key, kind in keys[name].items():
                assert key in seen[name].completed or key in dead, f"{kind} message {key} never ended ({s})"
                if kind in GOOD and key in dead:
                    assert receives[key] >= MAX_RECEIVE, f"good message {key} ({kind}) was dead-lettered"
                if kind == "fatal":
                    assert key in dead, f"fatal message {key} was not dead-lettered"
            if c.rate:
                _check_rate(seen[name].starts, StartWindow(_per_second(c.rate)), len(workers))

    def ended_in_process(job: Job[Any], ok: bool) -> None:
        key, queue = job.payload["key"], job.queue
        if job in seen[queue].running.get(key, []):
            seen[queue].running[key].remove(job)
        if ok:
            seen[queue].completed.add(key)

    with (
        mock.patch.object(StartLine, "_take", watched_take),
        life.fake_processes(ended_in_process),
        life.watched_receives(watch),
    ):
        vtime.run(scenario())


def _dlq(name: str) -> str:
    return name.removesuffix(".fifo") + "-dlq" + (".fifo" if name.endswith(".fifo") else "")


def _ended(sqs: MemorySQS, name: str, keys: dict[str, str], seen: Seen) -> bool:
    dead = {json.loads(b)["key"] for b in sqs.bodies(_dlq(name))}
    return all(k in seen.completed or k in dead for k in keys) and not sqs.bodies(name)


async def _sample(workers: list[Worker], budget: int, problems: list[str], watch: life.Watch) -> None:
    while True:
        watch.sample(workers)
        for worker in workers:
            in_use = sum(pool.admission.running for pool in worker.pools)
            if in_use > budget:
                problems.append(f"{in_use} slots held, more than the budget of {budget}")
            for pool in worker.pools:
                a = pool.admission
                if len(pool.book) > a.strand_limit or a.held > a.held_limit or a.sent > a.sent_limit:
                    problems.append(f"{pool.name}: {len(pool.book)} held, more than {a.strand_limit}")
        await asyncio.sleep(0.5)


@settings(
    max_examples=SHARED_COMPOSITIONS,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(shared_compositions())
def test_every_message_of_every_queue_ends_on_a_shared_budget(s: Shared) -> None:
    play(s)


def test_zz_report_how_many_shared_compositions_ran() -> None:
    print(f"\n{ran['compositions']} shared compositions; life events: {life.told()}")


def _plain(kinds: tuple[tuple[str, int], ...]) -> Composition:
    """A standard queue running one job at a time, without prefetch: its one poller waits
    while its one message waits for a slot, so only the budget can wake it."""
    return Composition(False, False, 1, "0", None, None, kinds, (), None)


WAKE_CASE = Shared(
    queues=(_plain((("ok", 0),) * 3), _plain((("ok", 0),) * 3)),
    budget=1,
    priority="weighted",
    weights=(1, 1),
    trouble=(),
    sigterm_at=None,
)


def test_the_wake_case_ends_as_it_should() -> None:
    """One slot for two queues: each job's end hands the slot to the other queue's line."""
    play(WAKE_CASE)


def test_a_line_nobody_wakes_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check of the check: a budget that lets only the queue whose state changed admit
    again (a slot freed in one queue never wakes the other's line) strands the other
    queue's messages, and the liveness check says so."""

    def selfish(self: SharedBudget, source: Member) -> None:
        source.refresh()

    monkeypatch.setattr(SharedBudget, "changed", selfish)
    with pytest.raises(AssertionError, match="never ended"):
        play(WAKE_CASE)
