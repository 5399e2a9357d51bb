"""The router's lifespan: what handlers share is opened before the first receive, reaches
every kind of handler and the readiness checks, and is closed after the drain; a lifespan
that fails keeps the worker from receiving anything."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sqs_worker_engine.job import Job
from sqs_worker_engine.memory import MemorySQS
from sqs_worker_engine.router import Router
from sqs_worker_engine.worker import StartupError, Worker

from . import vtime
from .harness import QUEUE, config, start, until


class Shared:
    """Stands for a database pool: usable only between open and close."""

    def __init__(self, timeline: list[str]) -> None:
        self.timeline = timeline
        self.open = True

    def use(self, who: str) -> None:
        assert self.open, f"{who} used the resources after they were closed"
        self.timeline.append(who)


def recording(sqs: MemorySQS, timeline: list[str]) -> None:
    """Note each receive the worker makes, in the timeline the lifespan writes too."""
    receive = sqs.receive_message

    async def noted(**kwargs: Any) -> dict[str, Any]:
        timeline.append("receive")
        return await receive(**kwargs)

    sqs.receive_message = noted  # type: ignore[method-assign]


def test_the_lifespan_opens_before_the_first_receive_and_closes_after_the_drain() -> None:
    async def scenario() -> None:
        sqs = MemorySQS()
        sqs.create_queue(QUEUE)
        sqs.create_queue("threads")
        sqs.create_queue("batches")
        timeline: list[str] = []
        recording(sqs, timeline)
        router = Router()

        @router.lifespan
        async def resources() -> AsyncIterator[Shared]:
            timeline.append("open")
            shared = Shared(timeline)
            try:
                yield shared
            finally:
                shared.open = False
                timeline.append("close")

        @router.handler(QUEUE, payload=str)
        async def on_loop(job: Job[str]) -> None:
            await asyncio.sleep(20)  # still running when the stop comes: the drain waits for it
            job.resources.use(f"async {job.payload}")

        @router.handler("threads", payload=str)
        def in_thread(job: Job[str]) -> None:
            job.resources.use(f"thread {job.payload}")

        @router.batch_handler("batches", payload=str, size=2, wait_ms=10)
        async def in_batch(jobs: list[Job[str]]) -> None:
            for job in jobs:
                job.resources.use(f"batch {job.payload}")

        @router.readiness_check("shared")
        async def ready(shared: Shared) -> bool:
            shared.use("readiness")
            return True

        sqs.put(QUEUE, "a")
        sqs.put("threads", "b")
        sqs.put("batches", "c")
        running = await start(sqs, router, f"{QUEUE},threads,batches", WORKER_SHUTDOWN_TIMEOUT_MS="150000")
        assert await until(lambda: {"thread b", "batch c"} <= set(timeline), 60), timeline
        [(name, check)] = router.readiness_checks_with(running.worker.resources)
        assert name == "shared" and await check()
        await running.stop()
        assert timeline[0] == "open", timeline
        assert timeline[-1] == "close", timeline
        assert "async a" in timeline, "the job running at the stop finished with the resources still open"
        assert timeline.count("open") == timeline.count("close") == 1

    vtime.run(scenario())


def test_a_lifespan_that_fails_refuses_to_start_and_receives_nothing() -> None:
    async def scenario() -> None:
        sqs = MemorySQS()
        sqs.create_queue(QUEUE)
        timeline: list[str] = []
        recording(sqs, timeline)
        router = Router()

        @router.lifespan
        async def resources() -> AsyncIterator[None]:
            raise ConnectionRefusedError("database at db:5432 refused the connection")
            yield

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            timeline.append("handled")

        sqs.put(QUEUE, "a")
        worker = Worker(config(QUEUE), router, client=sqs)
        with pytest.raises(StartupError) as info:
            await worker.run()
        assert "ConnectionRefusedError: database at db:5432 refused the connection" in str(info.value)
        assert timeline == [], "nothing was received"
        assert sqs.receive_counts(QUEUE) == {"a": 0}

    vtime.run(scenario())
