"""Several queues in one process, each with its own pool: a slow queue never starves a fast one."""

from __future__ import annotations

import asyncio
from typing import Any

from sqs_worker_engine import Job, Router
from sqs_worker_engine.process.settings import queue_env_key

from ..support import Sqs, env_for, running_worker, wait_for


def test_slow_queue_does_not_starve_fast_queue(sqs: Sqs, localstack_endpoint: str, health_file: str) -> None:
    slow, fast = sqs.create(prefix="slow"), sqs.create(prefix="fast")
    finished: list[str] = []
    router = Router()

    @router.handler(slow.name)
    async def slow_job(job: Job[Any]) -> None:
        await asyncio.sleep(4)
        finished.append("slow")

    @router.handler(fast.name)
    async def fast_job(job: Job[Any]) -> None:
        await asyncio.sleep(0.05)
        finished.append("fast")

    sqs.send(slow, [{"n": i} for i in range(6)])
    sqs.send(fast, [{"n": i} for i in range(30)])
    env = env_for(
        localstack_endpoint,
        f"{slow.name},{fast.name}",
        health_file,
        **{
            f"WORKER_QUEUE_{queue_env_key(slow.name)}_CONCURRENCY": 2,
            f"WORKER_QUEUE_{queue_env_key(fast.name)}_CONCURRENCY": 5,
        },
    )

    async def scenario() -> None:
        async with running_worker(env, router) as worker:
            assert {p.name: p.options.concurrency for p in worker.pools} == {slow.name: 2, fast.name: 5}
            await wait_for(lambda: finished.count("fast") == 30, 60, "the fast queue")
            # The slow pool is full the whole time; the fast one drained regardless.
            assert finished.count("slow") <= 2
            await wait_for(lambda: finished.count("slow") == 6, 60, "the slow queue")

    asyncio.run(scenario())


def test_strict_priority_on_a_shared_budget_runs_the_higher_queue_first(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    """Two backlogged queues sharing 2 slots, strict priority: the higher queue's messages
    all complete before most of the lower queue's (at most what started before the
    higher queue's first receive came back, and a few on a short receive)."""
    high, low = sqs.create(prefix="high"), sqs.create(prefix="low")
    finished: list[str] = []
    low_done_when_high_drained: list[int] = []
    router = Router()

    @router.handler(high.name)
    async def high_job(job: Job[Any]) -> None:
        await asyncio.sleep(0.05)
        finished.append("high")
        if finished.count("high") == 30:
            low_done_when_high_drained.append(finished.count("low"))

    @router.handler(low.name)
    async def low_job(job: Job[Any]) -> None:
        await asyncio.sleep(0.05)
        finished.append("low")

    sqs.send(high, [{"n": i} for i in range(30)])
    sqs.send(low, [{"n": i} for i in range(30)])
    env = env_for(
        localstack_endpoint,
        f"{high.name},{low.name}",
        health_file,
        WORKER_SHARED_CONCURRENCY=2,
        WORKER_PRIORITY="strict",
    )

    async def scenario() -> None:
        async with running_worker(env, router) as worker:
            assert [p.options.concurrency for p in worker.pools] == [2, 2]
            await wait_for(lambda: len(finished) == 60, 60, "both queues")
            # The last handler has appended, but its slot comes back once its ending is read,
            # a few loop turns later (on a loaded machine the check above can fall between).
            await wait_for(lambda: sum(p.admission.running for p in worker.pools) == 0, 10, "every slot back")

    asyncio.run(scenario())
    (low_done,) = low_done_when_high_drained
    assert low_done <= 10, f"{low_done} of the lower queue's 30 completed before the higher queue's 30"
