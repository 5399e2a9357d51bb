"""Leases: heartbeats keep long jobs exclusive; a lost lease cancels its job, unsettled."""

from __future__ import annotations

import asyncio
from typing import Any

from botocore.exceptions import EndpointConnectionError

from sqs_worker_engine import Job, Router

from ..support import CallLog, Sqs, env_for, metric, running_worker, wait_for


def test_job_much_longer_than_visibility_runs_exactly_once(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    queue = sqs.create(visibility=2, max_receive=5)
    starts: list[str] = []
    done: list[str] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        starts.append(job.id)
        await asyncio.sleep(7)  # 3.5x the visibility timeout
        done.append(job.id)

    sqs.send(queue, [{"long": True}])
    calls = CallLog()

    async def scenario() -> None:
        env = env_for(localstack_endpoint, queue.name, health_file, WORKER_VISIBILITY_TIMEOUT_SECONDS=2)
        # Two workers on the same queue: without heartbeats the second would get the message.
        async with running_worker(env, router, calls.attach), running_worker({**env, "WORKER_ID": "other"}, router):
            await wait_for(lambda: len(done) == 1, 60, "the long job")
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), 30, "queue empty")
            await asyncio.sleep(3)  # a redelivery, if any, would show up here

    asyncio.run(scenario())
    assert len(starts) == 1 and done == starts, f"processed {len(starts)} times"
    extensions = [e for c in calls.named("ChangeMessageVisibilityBatch") for e in c["Entries"]]
    assert len(extensions) >= 3, "the lease was extended while the job ran"
    assert metric("worker_lease_extensions_total", queue=queue.name) >= 3


def test_heartbeats_extend_all_leases_in_batches(sqs: Sqs, localstack_endpoint: str, health_file: str) -> None:
    queue = sqs.create(visibility=2, max_receive=5)
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        await asyncio.sleep(3)

    sqs.send(queue, [{"n": i} for i in range(12)])
    calls = CallLog()

    async def scenario() -> None:
        env = env_for(
            localstack_endpoint, queue.name, health_file, WORKER_VISIBILITY_TIMEOUT_SECONDS=2, WORKER_CONCURRENCY=12
        )
        async with running_worker(env, router, calls.attach):
            await wait_for(lambda: metric("jobs_processed_total", queue=queue.name, outcome="success") == 12, 60)

    asyncio.run(scenario())
    batches = [len(c["Entries"]) for c in calls.named("ChangeMessageVisibilityBatch")]
    assert batches and max(batches) > 1, f"extensions were not batched: {batches}"
    assert max(batches) <= 10
    assert not calls.named("ChangeMessageVisibility"), "one call per message would cost 10x the requests"
    assert metric("jobs_processed_total", queue=queue.name, outcome="lease_lost") == 0


def test_lease_lost_when_message_is_gone_cancels_without_settling(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    queue = sqs.create(visibility=2, max_receive=5)
    seen: list[str | None] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        seen.append("started")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append(job.cancel_reason)
            raise

    sqs.send(queue, [{"n": 1}])
    calls = CallLog()
    released: list[dict[str, Any]] = []

    async def scenario() -> None:
        env = env_for(localstack_endpoint, queue.name, health_file, WORKER_VISIBILITY_TIMEOUT_SECONDS=2)
        async with running_worker(env, router, calls.attach, {"job:released": released.append}):
            await wait_for(lambda: seen == ["started"], 30)
            # The message disappears under the running job (another consumer deleted it).
            sqs.client.purge_queue(QueueUrl=queue.url)
            await wait_for(lambda: len(seen) == 2, 30, "the job to be cancelled")

    asyncio.run(scenario())
    assert seen == ["started", "lease_lost"]
    assert [r["reason"] for r in released] == ["lease_lost"]
    assert not calls.named("DeleteMessageBatch"), "a lost lease must never be used to delete"
    assert metric("worker_leases_lost_total", queue=queue.name) == 1
    assert metric("jobs_processed_total", queue=queue.name, outcome="lease_lost") == 1
    assert metric("jobs_processed_total", queue=queue.name, outcome="success") == 0


def test_lease_lost_when_extensions_cannot_be_confirmed(sqs: Sqs, localstack_endpoint: str, health_file: str) -> None:
    """SQS may accept a stale handle silently, so the local deadline is what counts."""
    queue = sqs.create(visibility=2, max_receive=5)
    runs: list[tuple[int, str]] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        if job.receive_count == 1:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                runs.append((1, job.cancel_reason or ""))
                raise
        runs.append((job.receive_count, "done"))

    sqs.send(queue, [{"n": 1}])
    calls = CallLog()
    broken = {"heartbeats": True}

    def attach(client: Any) -> None:
        calls.attach(client)

        def fail_heartbeat(**_: Any) -> None:
            if broken["heartbeats"]:
                raise EndpointConnectionError(endpoint_url=localstack_endpoint)

        client.meta.events.register("before-call.sqs.ChangeMessageVisibilityBatch", fail_heartbeat)

    async def scenario() -> None:
        env = env_for(localstack_endpoint, queue.name, health_file, WORKER_VISIBILITY_TIMEOUT_SECONDS=2)
        async with running_worker(env, router, attach):
            await wait_for(lambda: runs[:1] == [(1, "lease_lost")], 30, "the job to lose its lease")
            broken["heartbeats"] = False
            await wait_for(lambda: (2, "done") in runs, 30, "redelivery to be processed")
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), 30)

    asyncio.run(scenario())
    assert runs == [(1, "lease_lost"), (2, "done")]
    deleted = [e for c in calls.named("DeleteMessageBatch") for e in c["Entries"]]
    assert len(deleted) == 1, "only the second delivery's handle is used to delete"
