"""Each message's life, edge by edge: the real worker against the in-memory SQS model.

Every test here failed on the engine before its lease book (see the engine changelog);
each SQS behaviour the model plays is also proven against LocalStack in
tests/integration.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading

import pytest

from sqs_worker_engine import NonRetryableError, RetryLater
from sqs_worker_engine.base import clock
from sqs_worker_engine.doubles.memory import MemorySQS
from sqs_worker_engine.handlers.job import Job
from sqs_worker_engine.handlers.router import Router

from . import vtime
from .harness import QUEUE, Recorder, memory_queue, start, until


def test_a_failing_fifo_head_does_not_push_its_group_mates_to_the_dlq() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue("jobs.fifo", dlq_after=3)
        seen = Recorder()

        @router.handler("jobs.fifo", payload=str)
        async def handle(job: Job[str]) -> None:
            seen.enter(job.payload)
            seen.leave(job.payload, job.payload != "a")
            if job.payload == "a":
                raise RuntimeError("a always fails")

        for body in ("a", "b", "c"):
            sqs.put("jobs.fifo", body, group="g")
        worker = await start(sqs, router, "jobs.fifo", WORKER_RETRY_BASE_SECONDS="1")
        assert await until(lambda: seen.finished == ["b", "c"], 600), (seen, sqs.bodies("jobs-dlq.fifo"))
        await worker.stop()
        assert sqs.bodies("jobs-dlq.fifo") == ["a"]  # only the failing one, after its own attempts
        assert seen.runs["a"] == 3
        assert seen.order == ["a", "a", "a", "b", "c"]  # in order, nothing overtook a

    vtime.run(scenario())


def test_a_message_given_back_at_sigterm_is_visible_at_once_not_after_the_slowest_job() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue()

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            if job.payload == "slow":
                await asyncio.sleep(20)  # finishes within the shutdown timeout
                return
            await job.wait_stopping()
            job.raise_if_stopping()  # checkpoint: hand the message back

        sqs.put(QUEUE, "slow")
        sqs.put(QUEUE, "resumable")
        worker = await start(sqs, router, WORKER_CONCURRENCY="2")
        assert await until(lambda: worker.worker.active_job_count == 2, 10)
        stopping = asyncio.create_task(worker.stop())
        stopped_at = clock.now()
        assert await until(lambda: "resumable" in sqs.visible(QUEUE), 20)
        assert clock.now() - stopped_at < 2, "given back only when the slowest job ended"
        await stopping

    vtime.run(scenario())


def test_a_hung_lease_extension_does_not_freeze_lease_keeping() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue()
        seen = Recorder()

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            seen.enter(job.payload)
            await asyncio.sleep(60)  # six visibility timeouts
            seen.leave(job.payload, True)

        sqs.put(QUEUE, "long")
        worker = await start(sqs, router, WORKER_VISIBILITY_TIMEOUT_SECONDS="10")
        assert await until(lambda: seen.runs.get("long") == 1, 5)
        sqs.slow("ChangeMessageVisibilityBatch", before=120, times=1)  # one call hangs for 2 minutes
        assert await until(lambda: seen.finished == ["long"], 120)
        await worker.stop()
        assert seen.runs == {"long": 1}, "the lease ran out while the keeper waited on one call"
        assert sqs.bodies(QUEUE) == []
        assert sqs.misuses == []

    vtime.run(scenario())


def test_settlement_counts_against_in_flight() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue(dlq_after=5)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            raise NonRetryableError("never valid")

        for i in range(120):
            sqs.put(QUEUE, f"m{i}")
        sqs.slow("SendMessage", before=60)  # the DLQ answers slowly
        worker = await start(sqs, router, WORKER_CONCURRENCY="2")
        most = 0
        for _ in range(200):
            await asyncio.sleep(0.1)
            most = max(most, len(sqs.bodies(QUEUE)) - len(sqs.visible(QUEUE)))
        sqs.heal()
        await worker.stop()
        limit = worker.worker.pools[0].admission.held_limit
        assert limit == 2 + 50  # the concurrency and the default prefetch cap, settling included
        assert most <= limit, f"{most} messages held in flight with a concurrency of 2"

    vtime.run(scenario())


def test_a_message_near_the_dlq_size_limit_is_dead_lettered_with_its_reason() -> None:
    async def scenario() -> None:
        sqs = MemorySQS()
        sqs.create_queue("jobs-dlq", MaximumMessageSize="1024")
        policy = {"deadLetterTargetArn": sqs.queues["jobs-dlq"].arn, "maxReceiveCount": 3}
        sqs.create_queue(QUEUE, MaximumMessageSize="1024", RedrivePolicy=json.dumps(policy))
        router = Router()

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            raise NonRetryableError("rejected: " + "why " * 200)

        sqs.put(QUEUE, "x" * 900)
        worker = await start(sqs, router)
        assert await until(lambda: sqs.bodies("jobs-dlq") != [], 60)
        await worker.stop()
        assert sqs.bodies("jobs-dlq") == ["x" * 900]
        (attributes,) = sqs.message_attributes("jobs-dlq")
        assert attributes["x-error-type"]["StringValue"] == "NonRetryableError"
        assert sqs.bodies(QUEUE) == []

    vtime.run(scenario())


def test_a_lost_waiting_fifo_member_holds_back_the_rest_of_its_group() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue("jobs.fifo")
        seen = Recorder()

        @router.handler("jobs.fifo", payload=str)
        async def handle(job: Job[str]) -> None:
            seen.enter(job.payload)
            await asyncio.sleep(30 if job.payload == "a" else 0.1)
            seen.leave(job.payload, True)

        for body in ("a", "b", "c"):
            sqs.put("jobs.fifo", body, group="g")
        worker = await start(sqs, router, "jobs.fifo", WORKER_VISIBILITY_TIMEOUT_SECONDS="10")
        assert await until(lambda: seen.runs.get("a") == 1, 5)
        sqs.refuse_extensions(sqs.message_id("jobs.fifo", "b"), "InternalError")  # b's lease cannot be kept
        assert await until(lambda: sorted(seen.finished) == ["a", "b", "c"], 300), seen
        sqs.refuse_extensions(None, None)
        await worker.stop()
        assert seen.order.index("b") < seen.order.index("c"), f"c overtook b: {seen.order}"

    vtime.run(scenario())


def test_a_queued_retry_delay_is_not_overwritten_by_a_lease_extension() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue()

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            await asyncio.sleep(4.9)  # fails just before its lease is due an extension
            raise RuntimeError("try again later")

        sqs.put(QUEUE, "m")
        sqs.slow("ChangeMessageVisibilityBatch", before=2)  # every visibility change takes 2 s to land
        worker = await start(sqs, router, WORKER_VISIBILITY_TIMEOUT_SECONDS="10", WORKER_RETRY_BASE_SECONDS="60")
        await asyncio.sleep(25)
        assert sqs.receive_counts(QUEUE) == {"m": 1}, "redelivered before its retry delay"
        assert sqs.visible(QUEUE) == []
        sqs.heal()
        await worker.stop()

    vtime.run(scenario())


def test_an_abandoned_poll_cannot_take_a_message_released_at_shutdown() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue()

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            await job.wait_stopping()
            job.raise_if_stopping()

        sqs.put(QUEUE, "m")
        worker = await start(sqs, router, WORKER_CONCURRENCY="2", WORKER_POLLERS="1")
        assert await until(lambda: worker.worker.active_job_count == 1, 5)
        sqs.slow("ReceiveMessage", before=15)  # the next poll reaches SQS late, then waits 20 s
        await asyncio.sleep(1)
        await worker.stop()
        await asyncio.sleep(1)
        assert sqs.visible(QUEUE) == ["m"], "our own abandoned poll took the released message"
        await sqs.settle()

    vtime.run(scenario())


def test_a_timed_out_job_that_cannot_be_interrupted_keeps_its_lease_until_it_returns() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue()
        seen = Recorder()

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            seen.enter(job.payload)
            try:
                await asyncio.sleep(50)
            except asyncio.CancelledError:
                await asyncio.sleep(50)  # ignores the cancellation: its work goes on
            finally:
                seen.leave(job.payload, True)

        sqs.put(QUEUE, "m")
        worker = await start(sqs, router, WORKER_VISIBILITY_TIMEOUT_SECONDS="10", WORKER_JOB_TIMEOUT_MS="5000")
        await asyncio.sleep(40)
        assert seen.runs == {"m": 1}, "retried while its first run was still going"
        assert sqs.visible(QUEUE) == []
        await worker.stop()
        assert seen.overlaps == []

    vtime.run(scenario())


def test_a_thread_still_running_at_the_drain_deadline_is_released_at_exit() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue()
        gate = threading.Event()

        @router.handler(QUEUE, payload=str)
        def handle(job: Job[str]) -> None:
            gate.wait(60)  # a blocking call that no signal interrupts

        sqs.put(QUEUE, "m")
        worker = await start(
            sqs, router, WORKER_CONCURRENCY="1", WORKER_SHUTDOWN_TIMEOUT_MS="4000", WORKER_JOB_TIMEOUT_MS="3000"
        )
        assert await until(lambda: worker.worker.active_job_count == 1, 5)
        await asyncio.sleep(2)
        took = await worker.stop()  # the job timeout passes during the drain
        assert took < 4 + 2, took
        await asyncio.sleep(0.5)
        assert sqs.visible(QUEUE) == ["m"], "left invisible for its visibility timeout after the exit"
        gate.set()

    vtime.run(scenario())


def test_retry_later_sets_the_delay_the_handler_asked_for() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue()
        seen: list[float] = []

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            seen.append(clock.now())
            if len(seen) == 1:
                raise RetryLater(42, "rate limited")

        sqs.put(QUEUE, "m")
        worker = await start(sqs, router, WORKER_RETRY_BASE_SECONDS="1")
        assert await until(lambda: len(seen) == 2, 120)
        await worker.stop()
        assert 42 <= seen[1] - seen[0] < 43.5

    vtime.run(scenario())


def test_a_message_out_of_attempts_is_dead_lettered_by_the_worker_with_its_last_error() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue(dlq_after=3)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            raise ValueError(f"attempt {job.receive_count} failed")

        sqs.put(QUEUE, "m")
        worker = await start(sqs, router, WORKER_RETRY_BASE_SECONDS="1")
        assert await until(lambda: sqs.bodies("jobs-dlq") == ["m"], 300)
        await worker.stop()
        (attributes,) = sqs.message_attributes("jobs-dlq")
        assert attributes["x-error-message"]["StringValue"] == "attempt 3 failed"
        assert "gave up after 3 attempts" in attributes["x-error-context"]["StringValue"]

    vtime.run(scenario())


def test_given_back_while_a_poll_outlasts_the_drain_it_is_visible_when_that_poll_ends() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue()

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            await job.wait_stopping()
            job.raise_if_stopping()

        sqs.put(QUEUE, "m")
        worker = await start(
            sqs,
            router,
            WORKER_CONCURRENCY="2",
            WORKER_POLLERS="1",
            WORKER_SHUTDOWN_TIMEOUT_MS="2000",
            WORKER_JOB_TIMEOUT_MS="1000",
        )
        assert await until(lambda: worker.worker.active_job_count == 1, 5)
        polled_at = clock.now()  # the free slot's poll went out as the job started: it ends 20 s on
        took = await worker.stop()
        assert took <= 2 + 10 + 1, "exits by the release cap, whatever the poll"
        assert await until(lambda: sqs.visible(QUEUE) == ["m"], 30)
        assert clock.now() - polled_at <= 20 + 3, "visible when the poll ended, not a visibility timeout later"
        assert sqs.receive_counts(QUEUE) == {"m": 1}, "no poll of ours took it again"
        await sqs.settle()

    vtime.run(scenario())


def test_a_retryable_failure_on_its_last_attempt_is_logged_as_dead_lettered(caplog: pytest.LogCaptureFixture) -> None:
    """Its last words in the log said "retry" while it went to the DLQ: the line for the
    last attempt now says where it went, the ones before it still say retry."""

    async def scenario() -> None:
        sqs, router = memory_queue(dlq_after=3)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            raise RuntimeError("downstream said no")

        sqs.put(QUEUE, "m")
        worker = await start(sqs, router, WORKER_RETRY_BASE_SECONDS="1")
        assert await until(lambda: sqs.bodies(f"{QUEUE}-dlq") == ["m"], 600), sqs.bodies(QUEUE)
        await worker.stop()

    with caplog.at_level(logging.WARNING, logger="sqs_worker_engine"):
        vtime.run(scenario())
    failed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("job failed")]
    assert failed == [
        "job failed (retry): RuntimeError: downstream said no",
        "job failed (retry): RuntimeError: downstream said no",
        "job failed (retry, no attempts left: dead-lettered): RuntimeError: downstream said no",
    ], failed
