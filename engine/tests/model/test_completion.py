"""Run to completion (completion.py): WORKER_MAX_JOBS and WORKER_IDLE_EXIT_SECONDS, the real
worker against the in-memory SQS on virtual time. A capped worker receives nothing it will
not run, exits 0 through the normal drain by itself, and leaves the rest of the queue
receivable at once; an idle worker exits after its idle spell, never while a job runs."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from pydantic import BaseModel

from sqs_worker_engine.base import clock
from sqs_worker_engine.doubles.memory import MemorySQS
from sqs_worker_engine.handlers.job import Job
from sqs_worker_engine.handlers.router import Router
from sqs_worker_engine.process.worker import WorkerState

from . import vtime
from .harness import QUEUE, Running, memory_queue, start, until

ROUND_TRIP = 0.05  # seconds each receive takes


class Item(BaseModel):
    n: int


def received(sqs: MemorySQS) -> int:
    """Messages SQS handed out, counting every delivery."""
    return sum(sqs.receipts.values())


async def exited(running: Running, within: float) -> bool:
    """The worker's run ended by itself (nobody called stop)."""
    return await until(running.task.done, within)


def test_a_worker_capped_to_one_job_runs_one_exits_and_leaves_the_rest_receivable() -> None:
    """WORKER_MAX_JOBS=1 at concurrency 4 with prefetch on, 3 messages: one is received,
    run and deleted; the worker exits by itself through the drain; the other two were never
    received and are visible at once."""
    runs: Counter[str] = Counter()
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        sqs, router = memory_queue(messages=3)
        sqs.slow("ReceiveMessage", before=ROUND_TRIP)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            runs[job.payload] += 1
            seen["stopping"] = job.stopping
            await asyncio.sleep(5)
            seen["stopping_at_end"] = job.stopping

        worker = await start(sqs, router, WORKER_CONCURRENCY="4", WORKER_PREFETCH="50", WORKER_MAX_JOBS="1")
        stopped: list[str] = []
        worker.worker.on("stopped", lambda e: stopped.append(e["reason"]))
        seen["exited"] = await exited(worker, 60)
        seen["reason"] = stopped
        seen["state"] = worker.worker.state
        seen["received"] = received(sqs)
        seen["visible"] = sorted(sqs.visible(QUEUE))
        seen["left"] = sorted(sqs.bodies(QUEUE))

    vtime.run(scenario())
    assert seen["exited"], "the worker did not exit after its one job"
    assert seen["reason"] == ["max jobs reached"], seen["reason"]
    assert seen["state"] is WorkerState.STOPPED
    assert sum(runs.values()) == 1 and seen["received"] == 1, (runs, seen["received"])
    assert not seen["stopping"] and not seen["stopping_at_end"], "the one job was told to stop"
    assert len(seen["left"]) == 2 and seen["visible"] == seen["left"], seen


def test_capped_to_n_it_never_holds_more_than_the_jobs_left() -> None:
    """WORKER_MAX_JOBS=5 at concurrency 8, prefetch 50, 30 messages: at every moment what
    SQS handed out and no handler started yet is at most 5 - started, and exactly 5 run."""
    runs: Counter[str] = Counter()
    worst: dict[str, Any] = {"over": []}

    async def scenario() -> None:
        sqs, router = memory_queue(messages=30)
        sqs.slow("ReceiveMessage", before=ROUND_TRIP)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            runs[job.payload] += 1
            await asyncio.sleep(1 + int(job.payload[2:]) % 3)

        worker = await start(sqs, router, WORKER_CONCURRENCY="8", WORKER_PREFETCH="50", WORKER_MAX_JOBS="5")
        while not worker.task.done() and clock.now() < 120:
            started = sum(runs.values())
            if received(sqs) - started > 5 - started:
                worst["over"].append((clock.now(), received(sqs), started))
            await asyncio.sleep(0.005)
        worst["exited"] = worker.task.done()
        worst["received"] = received(sqs)
        worst["visible"] = len(sqs.visible(QUEUE))

    vtime.run(scenario())
    assert worst["exited"]
    assert worst["over"] == [], f"held more than the jobs left: {worst['over'][:5]}"
    assert sum(runs.values()) == 5 == worst["received"], (runs, worst)
    assert worst["visible"] == 25


def test_the_cap_is_the_whole_process_across_queues() -> None:
    """Two queues, WORKER_MAX_JOBS=3: three jobs in all, whichever queues they came from."""
    runs: Counter[str] = Counter()
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        sqs = MemorySQS()
        for name in ("a", "b"):
            sqs.create_queue(name)
            for i in range(5):
                sqs.put(name, f"{name}-{i}")
        sqs.slow("ReceiveMessage", before=ROUND_TRIP)
        router = Router()

        @router.handler("a", payload=str)
        async def handle_a(job: Job[str]) -> None:
            runs[job.payload] += 1
            await asyncio.sleep(2)

        @router.handler("b", payload=str)
        async def handle_b(job: Job[str]) -> None:
            runs[job.payload] += 1
            await asyncio.sleep(2)

        worker = await start(sqs, router, "a,b", WORKER_CONCURRENCY="4", WORKER_PREFETCH="10", WORKER_MAX_JOBS="3")
        seen["exited"] = await exited(worker, 60)
        seen["received"] = received(sqs)
        seen["visible"] = len(sqs.visible("a")) + len(sqs.visible("b"))

    vtime.run(scenario())
    assert seen["exited"]
    assert sum(runs.values()) == 3 == seen["received"], (runs, seen)
    assert seen["visible"] == 7


def test_a_fifo_retry_in_place_is_the_same_job() -> None:
    """FIFO, WORKER_MAX_JOBS=2: the group's first message fails once and is retried in place
    (its mate waits behind it); its second run is the same job, so its mate runs too."""
    calls: list[str] = []
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        queue = "jobs.fifo"
        sqs, router = memory_queue(queue)
        for i in range(4):
            sqs.put(queue, f"m-{i}", group="g")

        @router.handler(queue, payload=str)
        async def handle(job: Job[str]) -> None:
            calls.append(job.payload)
            if job.payload == "m-0" and calls.count("m-0") == 1:
                raise RuntimeError("fails once")

        worker = await start(
            sqs, router, queue, WORKER_CONCURRENCY="4", WORKER_MAX_JOBS="2", WORKER_RETRY_BASE_SECONDS="2"
        )
        seen["exited"] = await exited(worker, 120)
        seen["left"] = sorted(sqs.visible(queue))

    vtime.run(scenario())
    assert seen["exited"]
    assert calls == ["m-0", "m-0", "m-1"], calls
    assert seen["left"] == ["m-2", "m-3"], seen["left"]


def test_every_message_of_a_batch_call_is_a_job() -> None:
    """A batch handler of size 10, WORKER_MAX_JOBS=3: one call of 3 jobs, then the exit."""
    batches: list[list[str]] = []
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        sqs, router = memory_queue(messages=10)

        @router.batch_handler(QUEUE, payload=str, size=10, wait_ms=100)
        async def handle(jobs: list[Job[str]]) -> None:
            batches.append([j.payload for j in jobs])

        worker = await start(sqs, router, WORKER_CONCURRENCY="10", WORKER_MAX_JOBS="3")
        seen["exited"] = await exited(worker, 60)
        seen["received"] = received(sqs)
        seen["visible"] = len(sqs.visible(QUEUE))

    vtime.run(scenario())
    assert seen["exited"]
    assert [len(b) for b in batches] == [3] and seen["received"] == 3, (batches, seen)
    assert seen["visible"] == 7


def test_a_message_that_never_reaches_its_handler_is_not_a_job() -> None:
    """WORKER_MAX_JOBS=1: a body the payload model refuses is dead-lettered without a
    handler call; the worker then runs one real job and exits."""
    runs: list[int] = []
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        sqs, router = memory_queue(dlq_after=3)
        sqs.put(QUEUE, "not json")
        sqs.put(QUEUE, '{"n": 1}')
        sqs.put(QUEUE, '{"n": 2}')

        @router.handler(QUEUE, payload=Item)
        async def handle(job: Job[Item]) -> None:
            runs.append(job.payload.n)

        worker = await start(sqs, router, WORKER_CONCURRENCY="1", WORKER_PREFETCH="0", WORKER_MAX_JOBS="1")
        seen["exited"] = await exited(worker, 60)
        seen["dead"] = sqs.bodies(f"{QUEUE}-dlq")
        seen["left"] = sqs.visible(QUEUE)

    vtime.run(scenario())
    assert seen["exited"]
    assert runs == [1] and seen["dead"] == ["not json"], (runs, seen)
    assert seen["left"] == ['{"n": 2}'], seen


def test_an_idle_worker_exits_after_its_idle_spell() -> None:
    """An empty queue, WORKER_IDLE_EXIT_SECONDS=45 with 20 s long polls: the worker exits
    45 s after it started polling (its last poll cancelled), by itself, reason `idle`."""
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        sqs, router = memory_queue()

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            return None

        began = clock.now()
        worker = await start(sqs, router, WORKER_IDLE_EXIT_SECONDS="45", WORKER_WAIT_TIME_SECONDS="20")
        stopped: list[str] = []
        worker.worker.on("stopped", lambda e: stopped.append(e["reason"]))
        seen["exited"] = await exited(worker, 120)
        seen["after"] = (worker.stopped_at or 0) - began
        seen["reason"] = stopped
        seen["receives"] = sqs.calls.get("ReceiveMessage", 0)

    vtime.run(scenario())
    assert seen["exited"] and seen["reason"] == ["idle"], seen
    assert 45 <= seen["after"] < 46, seen


def test_the_idle_spell_begins_when_the_last_job_ends_not_while_it_runs() -> None:
    """WORKER_IDLE_EXIT_SECONDS=30 and one 100 s job: the worker keeps running while it runs,
    and exits 30 s after it was settled; a message arriving in the spell starts it again."""
    ended: dict[str, float] = {}
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        sqs, router = memory_queue()
        sqs.put(QUEUE, "long")
        began = clock.now()

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            await asyncio.sleep(100 if job.payload == "long" else 1)
            ended[job.payload] = clock.now() - began

        worker = await start(sqs, router, WORKER_IDLE_EXIT_SECONDS="30", WORKER_WAIT_TIME_SECONDS="20")
        await until(lambda: "long" in ended, 200)
        await asyncio.sleep(20)
        sqs.put(QUEUE, "late")  # 20 s into the spell: the spell starts over after it
        seen["exited"] = await exited(worker, 200)
        seen["after"] = (worker.stopped_at or 0) - began

    vtime.run(scenario())
    assert seen["exited"], seen
    assert "late" in ended, ended
    assert ended["late"] + 30 <= seen["after"] < ended["late"] + 31, (ended, seen)


def test_an_empty_queues_long_polls_do_not_keep_the_jobs_left_from_a_queue_with_messages() -> None:
    """Queues a (empty) and b (3 messages), WORKER_MAX_JOBS=2, 20 s long polls. a's poll
    holds the two places it was granted until it answers empty; then b must get them. Before
    the jobs left were shared in turn, a took them back at once, every 20 s: none of b's ran
    in 600 s and the worker never exited."""
    runs: Counter[str] = Counter()
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        sqs = MemorySQS()
        for name in ("a", "b"):
            sqs.create_queue(name)
        for i in range(3):
            sqs.put("b", f"b-{i}")
        router = Router()

        @router.handler("a", payload=str)
        async def handle_a(job: Job[str]) -> None:
            runs[job.payload] += 1

        @router.handler("b", payload=str)
        async def handle_b(job: Job[str]) -> None:
            runs[job.payload] += 1

        worker = await start(sqs, router, "a,b", WORKER_CONCURRENCY="1", WORKER_PREFETCH="0", WORKER_MAX_JOBS="2")
        seen["exited"] = await exited(worker, 600)
        seen["at"] = clock.now()
        seen["left"] = sqs.visible("b")

    vtime.run(scenario())
    assert seen["exited"], f"the worker was still running: {runs}"
    assert sum(runs.values()) == 2 and len(seen["left"]) == 1, (runs, seen)
    assert seen["at"] < 60, f"b waited for a's long polls: exited at {seen['at']:.0f} s"


def test_an_idle_exit_with_drain_polls_gives_a_late_message_back_at_once() -> None:
    """WORKER_IDLE_EXIT_SECONDS=45 with 20 s long polls: the exit comes while the poll sent
    at 40 s is out. With WORKER_DRAIN_POLLS=true (as the ScaledJob sets it) a message
    arriving at 50 s is taken by that poll and given back at once; without it, the
    abandoned poll takes it inside SQS and hides it for the visibility timeout."""
    visible: dict[str, list[str]] = {}

    for drain in ("true", "false"):

        async def scenario(drain: str = drain) -> None:
            sqs, router = memory_queue()

            @router.handler(QUEUE, payload=str)
            async def handle(job: Job[str]) -> None:
                raise AssertionError("nothing runs after the idle exit")

            began = clock.now()
            worker = await start(
                sqs, router, WORKER_IDLE_EXIT_SECONDS="45", WORKER_WAIT_TIME_SECONDS="20", WORKER_DRAIN_POLLS=drain
            )
            await asyncio.sleep(began + 50 - clock.now())
            sqs.put(QUEUE, "late")
            await until(worker.task.done, 60)
            await asyncio.sleep(began + 51 - clock.now())
            visible[drain] = sqs.visible(QUEUE)
            await sqs.settle()

        vtime.run(scenario())
    assert visible == {"true": ["late"], "false": []}, visible
