"""SQS failing under the worker: connection refused, throttling, 5xx, partial batch
failures. The worker backs off, reports not ready, stays alive, recovers, loses nothing."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sqs_worker_engine import Job, Router

from ..faultproxy import FaultProxy
from ..support import Sqs, env_for, http_get, metric, metrics_env, running_worker, until_status, wait_for


@pytest.fixture
def proxy(localstack_endpoint: str) -> Iterator[FaultProxy]:
    p = FaultProxy(localstack_endpoint).start()
    yield p
    p.stop()


async def probe(port: int, path: str) -> int:
    return (await http_get(port, path))[0]


def test_outage_backs_off_reports_not_ready_and_recovers(sqs: Sqs, proxy: FaultProxy, health_file: str) -> None:
    queue = sqs.create()
    done: set[int] = set()
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        done.add(job.payload["n"])

    port, env = metrics_env(
        proxy.url,
        queue.name,
        health_file,
        WORKER_WAIT_TIME_SECONDS=2,
    )
    readiness: list[tuple[str, int, int]] = []
    errors: list[dict[str, Any]] = []

    async def scenario() -> None:
        async with running_worker(env, router, listeners={"error": errors.append}):
            await until_status(port, "/readyz", 200)
            readiness.append(("before", await probe(port, "/readyz"), await probe(port, "/livez")))
            proxy.down()
            await wait_for(
                lambda: metric("worker_poll_errors_total", queue=queue.name, code="EndpointConnectionError") >= 2, 60
            )
            # Messages sent during the outage (straight to SQS) wait for the worker.
            sqs.send(queue, [{"n": i} for i in range(20)])
            readiness.append(("outage", await probe(port, "/readyz"), await probe(port, "/livez")))
            proxy.up()
            await wait_for(lambda: len(done) == 20, 60, "recovery")
            await until_status(port, "/readyz", 200)
            readiness.append(("after", await probe(port, "/readyz"), await probe(port, "/livez")))

    asyncio.run(scenario())
    assert readiness == [("before", 200, 200), ("outage", 503, 200), ("after", 200, 200)]
    assert errors and {e["where"] for e in errors} == {f"receive:{queue.name}"}, "each failed poll is an error event"
    assert done == set(range(20))
    assert sqs.counts(queue.url) == (0, 0)


def test_throttling_and_server_errors_are_ridden_out(sqs: Sqs, proxy: FaultProxy, health_file: str) -> None:
    queue = sqs.create()
    done: list[int] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        done.append(job.payload["n"])

    sqs.send(queue, [{"n": i} for i in range(30)])
    # The SDK does not retry (see below): the poller and the acker ride these out themselves.
    proxy.fail("ReceiveMessage", status=400, code="ThrottlingException", times=6)
    proxy.fail("DeleteMessageBatch", status=500, code="InternalFailure", times=4)

    async def scenario() -> None:
        async with running_worker(env_for(proxy.url, queue.name, health_file), router):
            await wait_for(lambda: len(set(done)) == 30, 90, "all 30 jobs")
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), 60, "all deleted")

    asyncio.run(scenario())
    assert proxy.injected["400:ThrottlingException"] == 6 and proxy.injected["500:InternalFailure"] == 4
    assert sorted(set(done)) == list(range(30))
    assert metric("worker_settle_failures_total", queue=queue.name, action="delete") == 0


def test_a_burst_of_failed_deletes_is_ridden_out_while_the_lease_holds(
    sqs: Sqs, proxy: FaultProxy, health_file: str
) -> None:
    """Six failed delete calls in a row for one message take a few seconds of backoff; the
    lease keeper holds the message all along, so giving up (and running the job again) would
    turn a short SQS hiccup into a duplicate."""
    queue = sqs.create()
    done: list[int] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        done.append(job.payload["n"])

    proxy.fail("DeleteMessageBatch", status=500, code="InternalFailure", times=6)
    sqs.send(queue, [{"n": 1}])

    async def scenario() -> None:
        async with running_worker(env_for(proxy.url, queue.name, health_file), router):
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), 60, "the message deleted")

    asyncio.run(scenario())
    assert proxy.injected["500:InternalFailure"] == 6
    assert done == [1], "the job ran once"
    assert metric("worker_settle_failures_total", queue=queue.name, action="delete") == 0


def test_partial_batch_failures_are_retried_not_dropped(sqs: Sqs, proxy: FaultProxy, health_file: str) -> None:
    queue = sqs.create()
    done: list[int] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        done.append(job.payload["n"])

    sqs.send(queue, [{"n": i} for i in range(20)])
    proxy.fail_entries("DeleteMessageBatch", every=2, times=3)

    async def scenario() -> None:
        async with running_worker(env_for(proxy.url, queue.name, health_file, WORKER_CONCURRENCY=10), router):
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), 60, "all deleted")

    asyncio.run(scenario())
    assert proxy.injected["failed_entries"] > 0
    assert sorted(done) == list(range(20)), "no message was redelivered: failed entries were retried"
    assert metric("worker_settle_failures_total", queue=queue.name, action="delete") == 0
    requests = json.dumps(dict(proxy.counts))
    assert proxy.counts["DeleteMessageBatch"] >= 3, requests


def test_the_sdk_never_resends_a_poll_an_extension_or_a_settlement(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    """A receive the SDK sends again runs longer than the worker assumes (and may take a
    message given back at shutdown); a delete it retries may arrive after the lease's local
    deadline. The worker retries those calls itself, checking the lease before each one."""
    queue = sqs.create()
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        return None

    attempts: list[Any] = []

    async def scenario() -> None:
        async with running_worker(
            env_for(sqs.endpoint, queue.name, health_file), router, on_client=lambda c: attempts.append(c)
        ):
            pass

    asyncio.run(scenario())
    assert len(attempts) == 2, "one client for the long polls, one for everything else"
    assert [c.meta.config.retries.get("total_max_attempts") for c in attempts] == [1, 1]


def test_once_sqs_answers_again_the_next_message_starts_at_once(sqs: Sqs, proxy: FaultProxy, health_file: str) -> None:
    """DeleteMessageBatch fails until the first job's delete is given up: nothing may start
    (nor be received) until a delete is answered. Then SQS answers deletes again, while
    every lease extension still fails. The next message waited for a lease extension to
    succeed (19.5 s, seen on LocalStack), and here, with extensions failing, it would never
    start: the deletes answering (asked again every 0.5 to 4 s) are what a start needs."""
    queue = sqs.create(visibility=40)
    started: set[int] = set()
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        started.add(job.payload["n"])

    def given_up() -> bool:
        return metric("worker_settle_failures_total", queue=queue.name, action="delete") >= 1

    async def scenario() -> None:
        env = env_for(proxy.url, queue.name, health_file, WORKER_VISIBILITY_TIMEOUT_SECONDS=40)
        async with running_worker(env, router):
            proxy.fail("DeleteMessageBatch", status=500, code="InternalFailure")
            sqs.send(queue, [{"n": 1}])
            await wait_for(lambda: 1 in started, 60, "the first job")
            await wait_for(given_up, 60, "the first job's delete given up")
            proxy.fail("ChangeMessageVisibilityBatch", status=500, code="InternalFailure")
            proxy.clear("DeleteMessageBatch")
            sqs.send(queue, [{"n": 2}])
            await wait_for(lambda: 2 in started, 60, "the second job, started once a delete was answered")

    asyncio.run(scenario())


def test_while_deletes_are_refused_nothing_starts_and_no_good_message_is_dead_lettered(
    sqs: Sqs, proxy: FaultProxy, health_file: str
) -> None:
    """A worker policy without sqs:DeleteMessage, for 25 s: every DeleteMessageBatch refused
    (AccessDenied) while receives and lease extensions are answered. Concurrency 2,
    maxReceiveCount 2, a 10 s visibility timeout, six messages. The receives and extensions
    SQS answered ended "SQS unreachable", so jobs started within a second of each refused
    delete, and their messages came back until SQS dead-lettered them. From the first
    refused delete until one is answered nothing starts; the worker is live, not ready."""
    queue = sqs.create(visibility=10, max_receive=2)
    starts: list[tuple[int, float]] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        starts.append((job.payload["n"], time.monotonic()))

    port, env = metrics_env(
        proxy.url, queue.name, health_file, WORKER_CONCURRENCY=2, WORKER_VISIBILITY_TIMEOUT_SECONDS=10
    )
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        async with running_worker(env, router):
            await until_status(port, "/readyz", 200)
            proxy.fail("DeleteMessageBatch", status=400, code="AccessDenied")
            sqs.send(queue, [{"n": i} for i in range(6)])
            await wait_for(lambda: proxy.injected["400:AccessDenied"] >= 1, 60, "the first refused delete")
            seen["refused"] = time.monotonic()
            await asyncio.sleep(25)
            seen["outage"] = (await probe(port, "/readyz"), await probe(port, "/livez"))
            seen["cleared"] = time.monotonic()
            proxy.clear("DeleteMessageBatch")
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), 90, "every message deleted")
            await until_status(port, "/readyz", 200)

    asyncio.run(scenario())
    during = [n for n, at in starts if seen["refused"] < at < seen["cleared"]]
    assert during == [], f"started while deletes were refused: {during} (all starts: {[n for n, _ in starts]})"
    assert seen["outage"] == (503, 200), f"/readyz, /livez while deletes were refused: {seen['outage']}"
    assert queue.dlq_url is not None and sqs.counts(queue.dlq_url) == (0, 0), "good messages were dead-lettered"
    assert {n for n, _ in starts} == set(range(6))
