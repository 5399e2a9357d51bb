"""Several queues in one process, each with its own pool: a slow queue never starves a fast one."""

from __future__ import annotations

import asyncio
from typing import Any

from sqs_worker_engine import Job, Router
from sqs_worker_engine.settings import queue_env_key

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
