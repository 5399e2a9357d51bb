"""What happens to a message when its handler fails: retry with backoff, DLQ, timeouts."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from pydantic import BaseModel

from sqs_worker_engine import Job, NonRetryableError, Router
from sqs_worker_engine.process.settings import queue_env_key

from ..support import CallLog, Sqs, env_for, metric, running_worker, wait_for


def test_failing_message_is_retried_then_dead_lettered(sqs: Sqs, localstack_endpoint: str, health_file: str) -> None:
    # Visibility 300 s: a retry that waited for the visibility timeout would never happen
    # within this test; the worker's backoff makes the message visible again in seconds.
    queue = sqs.create(visibility=300, max_receive=3)
    attempts: list[int] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        attempts.append(job.receive_count)
        raise RuntimeError("downstream unavailable")

    sqs.send(queue, [{"order": 1}])
    calls = CallLog()
    failures: list[dict[str, Any]] = []

    async def scenario() -> None:
        env = env_for(localstack_endpoint, queue.name, health_file, WORKER_RETRY_BASE_SECONDS=1)
        async with running_worker(env, router, calls.attach, {"job:failed": failures.append}):
            await wait_for(lambda: len(attempts) == 3, 90, "three deliveries")
            assert queue.dlq_url
            await wait_for(lambda: sqs.counts(queue.dlq_url or "")[0] == 1, 90, "message in the DLQ")

    asyncio.run(scenario())
    assert attempts == [1, 2, 3]
    # The third failure reaches maxReceiveCount: SQS dead-letters it instead of a retry.
    assert [f["will_retry"] for f in failures] == [True, True, False]
    dead = sqs.receive_all(queue.dlq_url or "")
    assert [json.loads(m["Body"]) for m in dead] == [{"order": 1}]
    assert sqs.counts(queue.url) == (0, 0)
    # Backoff goes through ChangeMessageVisibility(Batch) with short, growing delays.
    delays = [e["VisibilityTimeout"] for c in calls.named("ChangeMessageVisibilityBatch") for e in c["Entries"]]
    assert delays[:2] and all(d < 300 for d in delays), delays
    assert metric("jobs_processed_total", queue=queue.name, outcome="retry") == 3


def test_a_queue_of_another_account_dead_letters_into_that_accounts_dlq(
    localstack_endpoint: str, health_file: str
) -> None:
    """The worker may consume a queue another account owns (WORKER_QUEUE_<KEY>_URL, a queue
    policy). Its DLQ is the one the RedrivePolicy's ARN names, in the owner's account, not a
    queue of the same name in the worker's own account."""
    owner = Sqs(localstack_endpoint, access_key="111111111111")  # LocalStack: the key is the account
    try:
        queue = owner.create(max_receive=5)
        assert ":111111111111:" in owner.attributes(queue.url)["QueueArn"]
        router = Router()

        @router.handler(queue.name)
        async def handle(job: Job[Any]) -> None:
            raise NonRetryableError("refused")

        owner.send(queue, [{"n": 1}])
        key = queue_env_key(queue.name)
        env = env_for(localstack_endpoint, queue.name, health_file, **{f"WORKER_QUEUE_{key}_URL": queue.url})

        async def scenario() -> None:
            async with running_worker(env, router):
                await wait_for(lambda: owner.counts(queue.dlq_url or "")[0] == 1, 60, "the owner's DLQ to hold it")

        asyncio.run(scenario())
        assert owner.counts(queue.url) == (0, 0)
    finally:
        owner.cleanup()


def test_non_retryable_error_goes_straight_to_dlq_with_reason(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    queue = sqs.create(max_receive=5)
    attempts = 0
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        nonlocal attempts
        attempts += 1
        raise NonRetryableError("customer 42 does not exist")

    sqs.send(
        queue,
        [{"customer": 42}],
        MessageAttributes={"tenant": {"DataType": "String", "StringValue": "acme"}},
    )

    async def scenario() -> None:
        async with running_worker(env_for(localstack_endpoint, queue.name, health_file), router):
            await wait_for(lambda: sqs.counts(queue.dlq_url or "")[0] == 1, 60, "message in the DLQ")
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), 60, "source queue empty")

    asyncio.run(scenario())
    assert attempts == 1, "a non-retryable failure must not be retried"
    (dead,) = sqs.receive_all(queue.dlq_url or "")
    attrs = dead["MessageAttributes"]
    assert attrs["x-error-type"]["StringValue"] == "NonRetryableError"
    assert attrs["x-error-message"]["StringValue"] == "customer 42 does not exist"
    context = json.loads(attrs["x-error-context"]["StringValue"])
    assert context["source_queue"] == queue.name and context["receive_count"] == 1
    assert attrs["tenant"]["StringValue"] == "acme", "original attributes are kept"
    assert metric("worker_dead_letter_sends_total", queue=queue.name) == 1


class Order(BaseModel):
    order_id: int
    amount_cents: int


def test_invalid_payload_is_dead_lettered_without_running_the_handler(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    queue = sqs.create(max_receive=5)
    ran: list[Order] = []
    router = Router()

    @router.handler(queue.name, payload=Order)
    async def handle(job: Job[Order]) -> None:
        ran.append(job.payload)

    sqs.send(queue, ["not json at all", {"order_id": "x"}, {"order_id": 7, "amount_cents": 100}, " "])

    async def scenario() -> None:
        async with running_worker(env_for(localstack_endpoint, queue.name, health_file), router):
            await wait_for(lambda: sqs.counts(queue.dlq_url or "")[0] == 3, 60, "3 bad messages in the DLQ")
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), 60, "source queue empty")

    asyncio.run(scenario())
    assert ran == [Order(order_id=7, amount_cents=100)]
    reasons = {
        m["Body"]: m["MessageAttributes"]["x-error-type"]["StringValue"] for m in sqs.receive_all(queue.dlq_url or "")
    }
    assert set(reasons.values()) == {"PayloadError"}
    assert set(reasons) == {"not json at all", '{"order_id": "x"}', " "}


def test_job_timeout_cancels_and_retries(sqs: Sqs, localstack_endpoint: str, health_file: str) -> None:
    queue = sqs.create(visibility=300, max_receive=5)
    outcomes: list[str] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        if job.receive_count == 1:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                outcomes.append(f"cancelled:{job.cancel_reason}")
                raise
        outcomes.append(f"done:{job.receive_count}")

    sqs.send(queue, [{"slow": True}])

    async def scenario() -> None:
        env = env_for(
            localstack_endpoint, queue.name, health_file, WORKER_JOB_TIMEOUT_MS=1000, WORKER_RETRY_BASE_SECONDS=1
        )
        async with running_worker(env, router):
            await wait_for(lambda: "done:2" in outcomes, 60, "second delivery to succeed")
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), 60)

    asyncio.run(scenario())
    assert outcomes == ["cancelled:timeout", "done:2"]
    assert metric("jobs_processed_total", queue=queue.name, outcome="timeout") == 1


def test_sync_handler_timeout_keeps_its_slot_until_the_thread_returns(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    """A thread cannot be interrupted: past its timeout it keeps its slot and its message's
    lease until it returns (nobody else may run it meanwhile), then the message is retried."""
    queue = sqs.create(visibility=300, max_receive=5)
    release = threading.Event()
    runs: list[int] = []
    router = Router()

    @router.handler(queue.name)
    def handle(job: Job[Any]) -> None:
        runs.append(job.receive_count)
        if job.receive_count == 1:
            release.wait(30)

    sqs.send(queue, [{"n": 1}])

    async def scenario() -> None:
        env = env_for(
            localstack_endpoint,
            queue.name,
            health_file,
            WORKER_CONCURRENCY=1,
            WORKER_JOB_TIMEOUT_MS=500,
            WORKER_RETRY_BASE_SECONDS=0.5,
        )
        async with running_worker(env, router) as worker:
            await wait_for(lambda: runs == [1])
            await asyncio.sleep(2)  # four times the job timeout
            # The only slot is still taken by the stuck thread, and its message still hidden.
            assert runs == [1]
            assert worker.pools[0].admission.in_use == 1
            assert sqs.counts(queue.url) == (0, 1)
            release.set()
            await wait_for(lambda: metric("jobs_processed_total", queue=queue.name, outcome="timeout") == 1)
            await wait_for(lambda: runs == [1, 2], 30, "retry after the thread returned")

    asyncio.run(scenario())
