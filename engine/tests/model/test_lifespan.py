"""The router's lifespan: what handlers share is opened before the first receive, reaches
every kind of handler and the readiness checks, and is closed after the drain; a lifespan
that fails keeps the worker from receiving anything."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sqs_worker_engine.doubles.memory import MemorySQS
from sqs_worker_engine.handlers.job import Job
from sqs_worker_engine.handlers.router import Router
from sqs_worker_engine.process.worker import StartupError, Worker

from . import vtime
from .harness import QUEUE, config, memory_queue, start, until


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
        sqs, router = memory_queue()
        sqs.create_queue("threads")
        sqs.create_queue("batches")
        timeline: list[str] = []
        recording(sqs, timeline)

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
        sqs, router = memory_queue()
        timeline: list[str] = []
        recording(sqs, timeline)

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


SHUTDOWN_S = 20.0
TIMEOUTS = {"WORKER_SHUTDOWN_TIMEOUT_MS": str(int(SHUTDOWN_S * 1000)), "WORKER_JOB_TIMEOUT_MS": "10000"}


def _opening(seconds: float, timeline: list[str], *, ignore_cancel: bool = False) -> Router:
    """A router whose lifespan takes `seconds` to open (a database that is slow to answer)."""
    router = Router()

    @router.lifespan
    async def resources() -> AsyncIterator[None]:
        timeline.append("opening")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            timeline.append("open cancelled")
            if not ignore_cancel:
                raise
            await asyncio.sleep(seconds)  # a library that swallows the cancellation and goes on
        timeline.append("open")
        try:
            yield
        finally:
            timeline.append("close")

    @router.handler(QUEUE, payload=str)
    async def handle(job: Job[str]) -> None:
        timeline.append("handled")

    return router


def test_a_stop_while_the_lifespan_opens_cancels_the_opening_and_exits_holding_nothing() -> None:
    """SIGTERM 5 s into a lifespan that takes a minute to open: the opening is cancelled,
    nothing is received, and the worker exits at once, not after the minute (or never)."""

    async def scenario() -> None:
        sqs = MemorySQS()
        sqs.create_queue(QUEUE)
        timeline: list[str] = []
        recording(sqs, timeline)
        router = _opening(60, timeline)
        sqs.put(QUEUE, "a")
        worker = Worker(config(QUEUE, **TIMEOUTS), router, client=sqs)
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(5)
        assert timeline == ["opening"]
        began = asyncio.get_running_loop().time()
        worker.stop("SIGTERM")
        await task
        took = asyncio.get_running_loop().time() - began
        assert took < 1.0, f"the worker took {took:.1f} s to exit after the signal"
        assert timeline == ["opening", "open cancelled"], timeline
        assert sqs.receive_counts(QUEUE) == {"a": 0}, "nothing was received"
        assert worker.state == "stopped"

    vtime.run(scenario())


def test_a_lifespan_that_ignores_the_stop_while_opening_is_left_behind_at_the_shutdown_timeout() -> None:
    async def scenario() -> None:
        sqs = MemorySQS()
        sqs.create_queue(QUEUE)
        timeline: list[str] = []
        router = _opening(600, timeline, ignore_cancel=True)
        worker = Worker(config(QUEUE, **TIMEOUTS), router, client=sqs)
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(5)
        began = asyncio.get_running_loop().time()
        worker.stop("SIGTERM")
        await task
        took = asyncio.get_running_loop().time() - began
        assert took <= SHUTDOWN_S + 1, f"the worker took {took:.1f} s to exit after the signal"
        assert "open" not in timeline and sqs.receive_counts(QUEUE) == {}
        assert worker.state == "stopped"

    vtime.run(scenario())


def _closing(timeline: list[str], *, hang: bool = False, fail: bool = False) -> Router:
    router = Router()

    @router.lifespan
    async def resources() -> AsyncIterator[None]:
        yield
        timeline.append("closing")
        if fail:
            raise ConnectionResetError("the pool's last connection reset while closing")
        if hang:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                timeline.append("close cancelled")
                await asyncio.sleep(3600)  # swallows it, and hangs on
        timeline.append("closed")

    @router.handler(QUEUE, payload=str)
    async def handle(job: Job[str]) -> None:
        timeline.append("handled")

    return router


@pytest.mark.parametrize("how", ["hang", "fail"])
def test_a_lifespan_that_hangs_or_fails_while_closing_does_not_keep_the_worker(how: str) -> None:
    """The lifespan's close has what is left of the shutdown timeout (and the release
    margin) at most: a close that hangs is left behind, one that fails is logged; the worker
    exits either way, within the platform's grace period."""

    async def scenario() -> None:
        sqs = MemorySQS()
        sqs.create_queue(QUEUE)
        sqs.put(QUEUE, "a")
        timeline: list[str] = []
        router = _closing(timeline, hang=how == "hang", fail=how == "fail")
        running = await start(sqs, router, **TIMEOUTS)
        assert await until(lambda: "handled" in timeline, 60)
        took = await running.stop()
        assert took <= SHUTDOWN_S + 12, f"the worker took {took:.1f} s to exit"
        assert "closing" in timeline and "closed" not in timeline
        assert running.worker.state == "stopped"

    vtime.run(scenario())
