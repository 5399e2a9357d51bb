"""Priorities across queues on one budget (budget.py, WORKER_SHARED_CONCURRENCY): two
backlogged queues sharing 4 slots, the real worker against the in-memory SQS on virtual
time. The figures asserted are docs/engine/protections.md's ("Priorities on one budget")."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import REGISTRY

from sqs_worker_engine.base import clock
from sqs_worker_engine.doubles.memory import MemorySQS
from sqs_worker_engine.handlers.job import Job
from sqs_worker_engine.handlers.router import Router

from . import vtime
from .harness import start, until

HIGH, LOW = "high", "low"
BOTH = f"{HIGH},{LOW}"


def _router(completed: list[str], job_seconds: float = 1.0) -> Router:
    router = Router()
    for queue in (HIGH, LOW):

        @router.handler(queue, payload=str)
        async def handle(job: Job[str], queue: str = queue) -> None:
            await asyncio.sleep(job_seconds)
            completed.append(queue)

    return router


def completions(n_each: int, first: int, **env: str) -> list[str]:
    """Which queue each of the `first` completions came from, both queues backlogged."""
    completed: list[str] = []

    async def scenario() -> None:
        sqs = MemorySQS()
        for queue in (HIGH, LOW):
            sqs.create_queue(queue)
            for i in range(n_each):
                sqs.put(queue, f"{queue}-{i}")
        worker = await start(sqs, _router(completed), BOTH, WORKER_SHARED_CONCURRENCY="4", **env)
        assert await until(lambda: len(completed) >= first, 600), completed
        await worker.stop()

    vtime.run(scenario())
    return completed[:first]


def test_strict_priority_runs_the_higher_queue_first() -> None:
    first = completions(150, 80, WORKER_PRIORITY="strict")
    assert first.count(HIGH) >= 0.95 * 80, f"{first.count(HIGH)} of the first 80 from the higher queue"


def given(queue: str) -> float:
    return REGISTRY.get_sample_value("worker_shared_slots_given_total", {"queue": queue}) or 0.0


def test_weights_share_the_budget_three_to_one() -> None:
    before = given(HIGH), given(LOW)
    first = completions(150, 100, WORKER_QUEUE_HIGH_WEIGHT="3", WORKER_QUEUE_LOW_WEIGHT="1")
    high, low = first.count(HIGH), first.count(LOW)
    assert low >= 15, f"the lower queue got {low} of the first 100"
    assert 2.4 <= high / low <= 3.6, f"{high}:{low}"
    # The metrics tell the same share: slots given to each queue, and the budget.
    high_given, low_given = given(HIGH) - before[0], given(LOW) - before[1]
    assert 2.4 <= high_given / low_given <= 3.6, (high_given, low_given)
    assert REGISTRY.get_sample_value("worker_shared_concurrency") == 4


def test_weighted_is_the_default_and_equal_weights_share_evenly() -> None:
    first = completions(100, 80)
    assert abs(first.count(HIGH) - first.count(LOW)) <= 8, first


def test_a_lower_queue_runs_the_whole_budget_until_the_higher_has_work_again() -> None:
    """Strict: the higher queue is empty, so the lower one runs 4 at a time; once messages
    reach the higher queue, every slot that frees goes to it until it is drained."""
    completed: list[str] = []
    most_low = 0
    started: list[tuple[float, str]] = []

    async def scenario() -> None:
        nonlocal most_low
        sqs = MemorySQS()
        for queue in (HIGH, LOW):
            sqs.create_queue(queue)
        for i in range(100):
            sqs.put(LOW, f"low-{i}")
        router = Router()
        for queue in (HIGH, LOW):

            @router.handler(queue, payload=str)
            async def handle(job: Job[Any], queue: str = queue) -> None:
                started.append((clock.now(), queue))
                await asyncio.sleep(1.0)
                completed.append(queue)

        worker = await start(sqs, router, BOTH, WORKER_SHARED_CONCURRENCY="4", WORKER_PRIORITY="strict")
        high_pool, low_pool = worker.worker.pools
        for _ in range(100):  # 5 virtual seconds
            most_low = max(most_low, low_pool.admission.running)
            await asyncio.sleep(0.05)
        put_at = clock.now()
        for i in range(12):
            sqs.put(HIGH, f"high-{i}")
        assert await until(lambda: completed.count(HIGH) == 12, 120)
        # The lower queue's jobs that started after the higher had work: none until it drained.
        last_high = max(t for t, q in started if q == HIGH)
        late = [t for t, q in started if q == LOW and put_at + 1.0 < t < last_high]
        assert late == [], f"{len(late)} lower jobs started while the higher queue had work"
        first_high = min(t for t, q in started if q == HIGH)
        assert first_high - put_at <= 1.0 + 0.1, "the higher queue waited longer than one job for a slot"
        assert high_pool.admission.running + low_pool.admission.running <= 4
        await worker.stop()

    vtime.run(scenario())
    assert most_low == 4, f"the lower queue ran at most {most_low} of the budget of 4 with the higher empty"


def test_a_fifo_group_running_one_at_a_time_lends_the_rest_of_the_budget() -> None:
    """Strict: the higher queue is FIFO with one group, so it runs one job at a time and
    its group-mates wait for their turn, not for the budget: the lower queue runs on the
    other 3 slots meanwhile. Before, group-mates received in the same batch counted as the
    higher queue's backlog until their turn, and held the lower queue to nothing."""
    completed: list[str] = []
    most_low = 0

    async def scenario() -> None:
        nonlocal most_low
        sqs = MemorySQS()
        sqs.create_queue("high.fifo")
        sqs.create_queue(LOW)
        for i in range(10):
            sqs.put("high.fifo", f"high-{i}", group="one")
            sqs.put(LOW, f"low-{i}")
        router = Router()
        for queue in ("high.fifo", LOW):

            @router.handler(queue, payload=str)
            async def handle(job: Job[str], queue: str = queue) -> None:
                await asyncio.sleep(1.0)
                completed.append(queue)

        worker = await start(sqs, router, f"high.fifo,{LOW}", WORKER_SHARED_CONCURRENCY="4", WORKER_PRIORITY="strict")
        low_pool = worker.worker.pools[1]
        while completed.count("high.fifo") < 10 and clock.now() < 120:
            most_low = max(most_low, low_pool.admission.running)
            await asyncio.sleep(0.05)
        await worker.stop()

    vtime.run(scenario())
    assert completed.count("high.fifo") == 10
    assert most_low == 3, f"the lower queue ran at most {most_low} beside the higher queue's one group"


def test_weighted_a_queue_without_work_lends_its_share_and_takes_it_back() -> None:
    """Weights 3:1: with the higher queue empty the lower one runs all 4 slots; once the
    higher queue has work it holds its share of 3 within three job durations (slots that
    free while its next receive is on its way are lent for a job, then paid back)."""
    most_low = 0
    high_running: list[int] = []

    async def scenario() -> None:
        nonlocal most_low
        sqs = MemorySQS()
        for queue in (HIGH, LOW):
            sqs.create_queue(queue)
        for i in range(100):
            sqs.put(LOW, f"low-{i}")
        worker = await start(
            sqs,
            _router([]),
            BOTH,
            WORKER_SHARED_CONCURRENCY="4",
            WORKER_QUEUE_HIGH_WEIGHT="3",
        )
        high_pool, low_pool = worker.worker.pools
        for _ in range(100):  # 5 virtual seconds
            most_low = max(most_low, low_pool.admission.running)
            await asyncio.sleep(0.05)
        for i in range(50):
            sqs.put(HIGH, f"high-{i}")
        await asyncio.sleep(3.05)
        for _ in range(40):
            high_running.append(high_pool.admission.running)
            await asyncio.sleep(0.1)
        await worker.stop()

    vtime.run(scenario())
    assert most_low == 4, f"the lower queue ran at most {most_low} of 4 with the higher empty"
    assert min(high_running) >= 3, f"the higher queue ran {min(high_running)}, below its share of 3"
