"""Batch handlers (batches.py): the real worker against the in-memory SQS model on virtual
time. Each message in a batch keeps its own life; the partial-failure case also runs
against LocalStack in tests/integration/test_processing.py."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

from sqs_worker_engine import NonRetryableError
from sqs_worker_engine.base.telemetry.logs import get_logger
from sqs_worker_engine.doubles.memory import MemorySQS
from sqs_worker_engine.handlers.batches import failures
from sqs_worker_engine.handlers.job import Job

from . import vtime
from .harness import QUEUE, memory_queue, start, until


class Calls:
    """Every call of a batch handler: the bodies and receive counts it was given."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, int]]] = []
        self.runs: Counter[str] = Counter()
        self.done: list[str] = []

    def saw(self, jobs: list[Job[str]]) -> None:
        self.batches.append([(j.payload, j.receive_count) for j in jobs])
        self.runs.update(j.payload for j in jobs)


def dlq_reasons(sqs: MemorySQS, name: str) -> dict[str, str]:
    queue = sqs.queues[name]
    return {
        m.body: str(m.message_attributes.get("x-error-message", {}).get("StringValue", ""))
        for m in queue.messages.values()
    }


def test_a_partial_failure_retries_exactly_the_failed_jobs_each_with_its_own_receives() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue(dlq_after=3)
        bodies = [f"ok-{i}" for i in range(14)] + ["bad-1", "bad-2", "flaky-1", "flaky-2"]
        for body in bodies:
            sqs.put(QUEUE, body)
        calls = Calls()

        @router.batch_handler(QUEUE, payload=str, size=20, wait_ms=200)
        async def handle(jobs: list[Job[str]]) -> dict[str, Any]:
            calls.saw(jobs)
            failed = [
                j
                for j in jobs
                if j.payload.startswith("bad") or (j.payload.startswith("flaky") and j.receive_count == 1)
            ]
            calls.done += [j.payload for j in jobs if j not in failed]
            return failures(failed)

        worker = await start(sqs, router, WORKER_CONCURRENCY="20", WORKER_RETRY_BASE_SECONDS="1")
        assert await until(lambda: len(sqs.bodies("jobs-dlq")) == 2 and not sqs.bodies(QUEUE), 300), calls.batches
        await worker.stop()
        assert sorted(calls.done) == sorted(b for b in bodies if not b.startswith("bad"))
        assert calls.runs == Counter(
            {**{b: 1 for b in bodies if b.startswith("ok")}, "flaky-1": 2, "flaky-2": 2, "bad-1": 3, "bad-2": 3}
        )
        assert len(calls.batches[0]) == 18, "the first call took every message: more than one receive's 10"
        # Each retried job came back with its own receive count; the rest were not re-run.
        retried = [entry for batch in calls.batches[1:] for entry in batch]
        assert sorted(retried) == sorted(
            [("bad-1", 2), ("bad-2", 2), ("flaky-1", 2), ("flaky-2", 2), ("bad-1", 3), ("bad-2", 3)]
        )
        reasons = dlq_reasons(sqs, "jobs-dlq")
        assert sorted(reasons) == ["bad-1", "bad-2"]
        assert all("reported failed by the batch handler" in r for r in reasons.values()), reasons

    vtime.run(scenario())


def test_a_batch_fills_up_to_its_size_or_waits_no_longer_than_its_window() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue()
        calls = Calls()

        keys: list[dict[str, Any]] = []

        @router.batch_handler(QUEUE, payload=str, size=4, wait_ms=5000)
        async def handle(jobs: list[Job[str]]) -> None:
            calls.saw(jobs)
            keys.append(get_logger().thread_safe_get_current_keys())
            await asyncio.sleep(1)

        for i in range(9):
            sqs.put(QUEUE, f"m-{i}")
        worker = await start(sqs, router, WORKER_CONCURRENCY="10")
        assert await until(lambda: sum(calls.runs.values()) == 8, 60)
        began = asyncio.get_running_loop().time()
        assert await until(lambda: sum(calls.runs.values()) == 9, 60)
        waited = asyncio.get_running_loop().time() - began
        await worker.stop()
        assert [len(b) for b in calls.batches] == [4, 4, 1]
        assert all("job_id" not in k for k in keys), "a call's log lines carry no one job's id"
        assert 3.0 <= waited <= 5.5, "the odd one out waited out the window, not forever"
        assert sqs.bodies(QUEUE) == []

    vtime.run(scenario())


def test_an_exception_ends_every_job_of_the_batch_with_it() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue(dlq_after=5, messages=3)
        calls = Calls()

        @router.batch_handler(QUEUE, payload=str, size=3, wait_ms=1000)
        async def handle(jobs: list[Job[str]]) -> None:
            calls.saw(jobs)
            raise NonRetryableError("the warehouse rejected the schema")

        worker = await start(sqs, router)
        assert await until(lambda: len(sqs.bodies("jobs-dlq")) == 3, 60)
        await worker.stop()
        assert calls.runs == Counter({"m-0": 1, "m-1": 1, "m-2": 1}), "non-retryable: dead-lettered at once"
        assert set(dlq_reasons(sqs, "jobs-dlq").values()) == {"the warehouse rejected the schema"}

    vtime.run(scenario())


def test_a_response_naming_a_job_not_in_the_batch_fails_the_whole_batch() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue(dlq_after=2)
        sqs.put(QUEUE, "m-0")
        sqs.put(QUEUE, "m-1")
        calls = Calls()

        @router.batch_handler(QUEUE, payload=str, size=2, wait_ms=1000)
        async def handle(jobs: list[Job[str]]) -> dict[str, Any]:
            calls.saw(jobs)
            return {"batchItemFailures": [{"itemIdentifier": "not-a-job"}]}

        worker = await start(sqs, router, WORKER_RETRY_BASE_SECONDS="1")
        assert await until(lambda: len(sqs.bodies("jobs-dlq")) == 2, 120)
        await worker.stop()
        assert calls.runs == Counter({"m-0": 2, "m-1": 2})
        reasons = set(dlq_reasons(sqs, "jobs-dlq").values())
        assert reasons == {"batchItemFailures[0] names 'not-a-job', which is not a job of this batch"}, reasons

    vtime.run(scenario())


def test_a_body_that_fails_the_model_is_dead_lettered_and_never_reaches_a_batch() -> None:
    async def scenario() -> None:
        from pydantic import BaseModel

        class Event(BaseModel):
            n: int

        sqs, router = memory_queue(dlq_after=3)
        for body in ('{"n": 1}', '{"n": "one"}', '{"n": 2}'):
            sqs.put(QUEUE, body)
        seen: list[list[int]] = []

        @router.batch_handler(QUEUE, payload=Event, size=3, wait_ms=500)
        async def handle(jobs: list[Job[Event]]) -> None:
            seen.append(sorted(j.payload.n for j in jobs))

        worker = await start(sqs, router)
        assert await until(lambda: len(sqs.bodies("jobs-dlq")) == 1 and not sqs.bodies(QUEUE), 60)
        await worker.stop()
        assert seen == [[1, 2]]
        assert [json.loads(b) for b in sqs.bodies("jobs-dlq")] == [{"n": "one"}]

    vtime.run(scenario())


def test_a_lost_lease_ends_only_its_own_job() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue()
        for body in ("a", "b", "c"):
            sqs.put(QUEUE, body)
        calls = Calls()
        cancelled: list[tuple[str, str | None]] = []

        @router.batch_handler(QUEUE, payload=str, size=3, wait_ms=1000)
        async def handle(jobs: list[Job[str]]) -> None:
            calls.saw(jobs)
            if len(calls.batches) == 1:
                await asyncio.sleep(25)  # outlives b's lease, whose extensions SQS refuses
                cancelled.extend((j.payload, j.cancel_reason) for j in jobs if j.cancelled)
            calls.done += [j.payload for j in jobs if not j.cancelled]

        worker = await start(sqs, router, WORKER_VISIBILITY_TIMEOUT_SECONDS="10")
        assert await until(lambda: len(calls.batches) == 1, 10)
        sqs.refuse_extensions(sqs.message_id(QUEUE, "b"), "InternalError")
        assert await until(lambda: sqs.bodies(QUEUE) == [] and "b" in calls.done, 300), (
            calls.batches,
            sqs.bodies(QUEUE),
        )
        sqs.refuse_extensions(None, None)
        await worker.stop()
        assert cancelled == [("b", "lease_lost")]
        assert calls.runs == Counter({"a": 1, "b": 2, "c": 1}), "a and c were deleted after the first call"
        assert calls.batches[1] == [("b", 2)]

    vtime.run(scenario())


def test_a_hung_batch_times_out_job_by_job_and_the_call_is_cancelled() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue()
        sqs.put(QUEUE, "a")
        sqs.put(QUEUE, "b")
        calls = Calls()
        cancelled_calls: list[int] = []

        @router.batch_handler(QUEUE, payload=str, size=2, wait_ms=100)
        async def handle(jobs: list[Job[str]]) -> None:
            calls.saw(jobs)
            if len(calls.batches) == 1:
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    cancelled_calls.append(len(jobs))
                    raise

        worker = await start(sqs, router, WORKER_JOB_TIMEOUT_MS="5000", WORKER_RETRY_BASE_SECONDS="1")
        assert await until(lambda: sqs.bodies(QUEUE) == [], 120), calls.batches
        await worker.stop()
        assert cancelled_calls == [2], "once both jobs timed out, the call itself was cancelled"
        assert sorted(calls.batches[1]) == [("a", 2), ("b", 2)]

    vtime.run(scenario())


def test_a_fifo_batch_holds_one_message_per_group_and_keeps_each_group_s_order() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue("jobs.fifo", dlq_after=5)
        for i in range(3):
            for group in ("g1", "g2", "g3"):
                sqs.put("jobs.fifo", f"{group}-{i}", group=group)
        calls = Calls()

        @router.batch_handler("jobs.fifo", payload=str, size=10, wait_ms=200)
        async def handle(jobs: list[Job[str]]) -> dict[str, Any]:
            calls.saw(jobs)
            failed = [j for j in jobs if j.payload == "g2-0" and j.receive_count == 1 and calls.runs["g2-0"] == 1]
            calls.done += [j.payload for j in jobs if j not in failed]
            return failures(failed)

        worker = await start(sqs, router, "jobs.fifo", WORKER_RETRY_BASE_SECONDS="1")
        assert await until(lambda: len(calls.done) == 9, 120), calls.batches
        await worker.stop()
        for batch in calls.batches:
            groups = [body.split("-")[0] for body, _ in batch]
            assert len(groups) == len(set(groups)), f"two of one group in one call: {batch}"
        for group in ("g1", "g2", "g3"):
            assert [b for b in calls.done if b.startswith(group)] == [f"{group}-{i}" for i in range(3)]
        assert calls.runs["g2-0"] == 2 and sqs.bodies("jobs-dlq.fifo") == []

    vtime.run(scenario())
