"""Life events of the process crossing a capability: SQS answering again, SIGTERM on a
shared budget, a pause's probe that never reaches its handler, a handler process dying.
Each test is a case that was seen to go wrong end to end, the real worker against the
in-memory SQS on virtual time."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from sqs_worker_engine import DownstreamUnavailable, clock
from sqs_worker_engine.job import Job
from sqs_worker_engine.memory import MemorySQS
from sqs_worker_engine.router import Router

from . import vtime
from .harness import QUEUE, start, until


def test_once_sqs_answers_again_a_received_message_starts_at_once() -> None:
    """DeleteMessageBatch fails for 15 s, then SQS answers again. A message sent then was
    received at once but waited 15 s to start, until its first lease extension happened to
    succeed: a successful receive did not count as SQS answering."""
    started: dict[str, float] = {}

    async def scenario() -> None:
        sqs = MemorySQS()
        sqs.create_queue(QUEUE, VisibilityTimeout="30")
        router = Router()

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            started[job.payload] = clock.now()

        sqs.fail("DeleteMessageBatch", "ServiceUnavailable")
        sqs.put(QUEUE, "before")
        worker = await start(sqs, router, WORKER_CONCURRENCY="2", WORKER_VISIBILITY_TIMEOUT_SECONDS="30")
        assert await until(lambda: "before" in started, 30)
        await asyncio.sleep(15)
        sqs.heal()
        sent = clock.now()
        sqs.put(QUEUE, "after")
        assert await until(lambda: "after" in started, 60)
        waited = started["after"] - sent
        assert waited < 1.0, f"the message sent once SQS answered again waited {waited:.1f} s to start"
        await worker.stop()

    vtime.run(scenario())


def test_once_sqs_answers_again_a_held_message_starts_without_waiting_for_its_lease_to_fall_due() -> None:
    """Concurrency 1, three messages held, and SQS unreachable: the first jobs' deletes
    fail until the acker gives them up, and SQS answers again only after that. The held
    messages waited until their leases fell due for an extension (half of a 120 s
    visibility) to learn that SQS answered: while SQS is down the lease keeper now asks it
    again, a few seconds apart."""
    started: dict[str, float] = {}

    async def scenario() -> None:
        sqs = MemorySQS()
        sqs.create_queue(QUEUE, VisibilityTimeout="120")
        router = Router()

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            started[job.payload] = clock.now()
            await asyncio.sleep(1)

        for name in ("a", "b", "c"):
            sqs.put(QUEUE, name)
        worker = await start(sqs, router, WORKER_CONCURRENCY="1", WORKER_VISIBILITY_TIMEOUT_SECONDS="120")
        assert await until(lambda: "a" in started, 30)
        for operation in ("ReceiveMessage", "DeleteMessageBatch", "ChangeMessageVisibilityBatch"):
            sqs.fail(operation, "ServiceUnavailable")
        await asyncio.sleep(14)  # the deletes were given up after 10 s of failures
        # "b" took a's slot before a's delete failed: the first sign was that failure.
        assert "c" not in started, "nothing starts while SQS cannot settle it"
        sqs.heal()
        healed = clock.now()
        assert await until(lambda: "c" in started, 120)
        waited = started["c"] - healed
        assert waited < 5.0, f"a held message waited {waited:.1f} s after SQS answered again"
        await worker.stop()

    vtime.run(scenario())
