"""Protecting what the worker calls, against LocalStack: a rate limit that holds over
thousands of messages, and a partner outage of a minute that ends with nothing in the DLQ."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

from sqs_worker_engine import DownstreamUnavailable, Job, Router, clock

from ..support import Sqs, env_for, free_port, http_get, metric, running_worker, wait_for

RATE = 150.0
MESSAGES = 2000


def test_a_rate_limit_holds_over_thousands_of_messages(sqs: Sqs, localstack_endpoint: str, health_file: str) -> None:
    """By every start, on the loop's clock, no more jobs have started than one second of
    burst plus RATE x the time since the worker began: the bucket's own bound, which a
    slow receive or a busy machine can only keep further from (starts follow the receives
    the bucket allowed). How close the run comes to RATE is reported, not asserted."""
    queue = sqs.create()
    sqs.send(queue, [{"n": i} for i in range(MESSAGES)])
    starts: list[float] = []
    began: list[float] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        starts.append(clock.now())

    async def scenario() -> None:
        env = env_for(
            localstack_endpoint, queue.name, health_file, WORKER_CONCURRENCY=50, WORKER_RATE_LIMIT=f"{RATE:g}/s"
        )
        began.append(clock.now())  # before the pool, so before its bucket: the bound only loosens
        async with running_worker(env, router):
            await wait_for(lambda: len(starts) >= MESSAGES, timeout=600, what=f"{MESSAGES} jobs")

    asyncio.run(scenario())
    starts.sort()
    burst = max(1.0, RATE)
    for k, at in enumerate(starts):
        assert k + 1 <= burst + RATE * (at - began[0]) + 1e-6, f"{k + 1} jobs started by {at - began[0]:.3f} s"
    # The rate the run kept, the bucket's first second of burst set aside.
    achieved = (len(starts) - burst) / (starts[-1] - starts[0])
    assert metric("worker_rate_limited_seconds_total", queue=queue.name) > 0
    print(f"rate limit {RATE:g}/s: {achieved:.1f}/s over {len(starts)} jobs, ratio {achieved / RATE:.3f}")


OUTAGE = 60.0


def test_a_partner_outage_of_a_minute_sends_nothing_to_the_dlq(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    """The partner refuses everything for a minute (the handler raises DownstreamUnavailable,
    5 s). The queue pauses, probes one message at a time with a doubling pause, and resumes
    when the partner answers: every message is processed once, none dead-lettered, and the
    receives spent during the outage stay far below the queue's maxReceiveCount each."""
    queue = sqs.create(max_receive=5)
    sqs.send(queue, [{"n": i} for i in range(30)])
    ends = time.monotonic() + OUTAGE
    done: Counter[int] = Counter()
    refused: Counter[int] = Counter()
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        n = job.payload["n"]
        if time.monotonic() < ends:
            refused[n] += 1
            raise DownstreamUnavailable(5, "partner answers 503")
        done[n] += 1

    port = free_port()
    readiness: list[dict[str, Any]] = []

    async def scenario() -> None:
        env = env_for(
            localstack_endpoint,
            queue.name,
            health_file,
            WORKER_CONCURRENCY=10,
            WORKER_RETRY_MAX_SECONDS=300,
            WORKER_METRICS_PORT=port,
            WORKER_METRICS_HOST="127.0.0.1",
        )
        async with running_worker(env, router):
            await wait_for(lambda: metric("worker_queue_paused", queue=queue.name) == 1, what="the pause")
            readiness.append(json.loads((await http_get(port, "/readyz"))[1]))
            await wait_for(lambda: len(done) == 30, timeout=OUTAGE + 240, what="every message after the outage")
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), what="the queue empty")

    asyncio.run(scenario())
    assert queue.dlq_url is not None
    assert sqs.counts(queue.dlq_url) == (0, 0), "a good message reached the DLQ"
    assert set(done.values()) == {1}, "each processed exactly once"
    assert max(refused.values()) < 5
    assert metric("worker_queue_pauses_total", queue=queue.name) == 1  # one outage, one pause
    assert readiness[0]["paused"] == [queue.name] and readiness[0]["checks"]["sqs"] is True
    assert metric("worker_queue_paused", queue=queue.name) == 0
    assert metric("jobs_processed_total", queue=queue.name, outcome="deferred") == sum(refused.values())
    assert metric("worker_dead_letter_sends_total", queue=queue.name) == 0
    print(
        f"outage {OUTAGE:g} s: {sum(refused.values())} refusals over {len(refused)} messages, most {max(refused.values())}"
    )
