"""Fair tenants (tenants.py): the real worker against the in-memory SQS model on virtual
time. A noisy tenant's backlog sits in front of the quiet tenants' messages, the worst
order a standard queue can deliver. The same scenario runs against LocalStack in
tests/integration/test_throttling.py."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from sqs_worker_engine.doubles.memory import MemorySQS
from sqs_worker_engine.handlers.job import Job
from sqs_worker_engine.handlers.router import Router

from . import vtime
from .harness import QUEUE, start, until

NOISY, QUIET = 120, ("b", "c", "d")  # the noisy tenant "a" has ten times each quiet one's messages


class Tenancy:
    """Which tenant's jobs ran, how many at once, and in what order they finished."""

    def __init__(self) -> None:
        self.running: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.done: list[str] = []  # "a-17", in the order they finished
        self.runs: Counter[str] = Counter()
        self.most_at_once = 0  # every tenant together: never above the concurrency

    def router(self, seconds: float) -> Router:
        router = Router()

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            tenant = job.payload.split("-")[0]
            self.runs[job.payload] += 1
            self.running[tenant] += 1
            self.most[tenant] = max(self.most[tenant], self.running[tenant])
            self.most_at_once = max(self.most_at_once, sum(self.running.values()))
            try:
                await asyncio.sleep(seconds)
            finally:
                self.running[tenant] -= 1
            self.done.append(job.payload)

        return router


def fill(sqs: MemorySQS) -> list[str]:
    bodies = [f"a-{i}" for i in range(NOISY)]
    bodies += [f"{t}-{i}" for i in range(NOISY // 10) for t in QUIET]
    for body in bodies:
        sqs.put(QUEUE, body, group=body.split("-")[0])
    return bodies


def test_a_noisy_tenant_gets_its_cap_and_the_others_the_rest() -> None:
    async def scenario() -> None:
        sqs = MemorySQS()
        sqs.create_queue_with_dlq(QUEUE, max_receive_count=5)
        bodies = fill(sqs)
        seen = Tenancy()
        worker = await start(sqs, seen.router(1.0), WORKER_CONCURRENCY="6", WORKER_GROUP_CONCURRENCY="2")
        assert await until(lambda: len(seen.done) == len(bodies), 600), len(seen.done)
        await worker.stop()
        assert sorted(seen.done) == sorted(bodies) and max(seen.runs.values()) == 1, "each ran once"
        assert sqs.bodies("jobs-dlq") == [] and sqs.bodies(QUEUE) == []
        assert seen.most["a"] == 2 and seen.most_at_once == 6, (seen.most, seen.most_at_once)
        # The quiet tenants share the other four slots: their 36 jobs are done while the
        # noisy tenant, at two at a time, has done well under half of its 120.
        last_quiet = max(i for i, body in enumerate(seen.done) if not body.startswith("a-"))
        noisy_before = sum(1 for body in seen.done[:last_quiet] if body.startswith("a-"))
        assert noisy_before < NOISY / 2, (noisy_before, seen.done[: last_quiet + 1])

    vtime.run(scenario())


def test_without_a_cap_the_noisy_tenant_takes_every_slot() -> None:
    """The same queue, no cap: what the cap prevents (so the test above can fail)."""

    async def scenario() -> None:
        sqs = MemorySQS()
        sqs.create_queue_with_dlq(QUEUE, max_receive_count=5)
        bodies = fill(sqs)
        seen = Tenancy()
        worker = await start(sqs, seen.router(1.0), WORKER_CONCURRENCY="6")
        assert await until(lambda: len(seen.done) == len(bodies), 600), len(seen.done)
        await worker.stop()
        assert seen.most["a"] == 6
        first_quiet = min(i for i, body in enumerate(seen.done) if not body.startswith("a-"))
        assert first_quiet >= NOISY - 6

    vtime.run(scenario())


def test_fairness_never_spends_a_message_s_receives_toward_the_dlq() -> None:
    """One tenant only, a slow one and maxReceiveCount 2: giving its messages back would
    send them to the DLQ unrun; they are parked instead, however many."""

    async def scenario() -> None:
        sqs = MemorySQS()
        sqs.create_queue_with_dlq(QUEUE, max_receive_count=2)
        bodies = [f"a-{i}" for i in range(40)]
        for body in bodies:
            sqs.put(QUEUE, body, group="a")
        seen = Tenancy()
        worker = await start(sqs, seen.router(5.0), WORKER_CONCURRENCY="4", WORKER_GROUP_CONCURRENCY="1")
        assert await until(lambda: len(seen.done) == len(bodies), 900), len(seen.done)
        await worker.stop()
        assert sqs.bodies("jobs-dlq") == []
        assert sorted(seen.done) == sorted(bodies) and max(seen.runs.values()) == 1
        assert seen.most["a"] == 1 == seen.most_at_once

    vtime.run(scenario())


def test_parked_messages_are_given_back_at_shutdown_and_nothing_is_lost() -> None:
    async def scenario() -> None:
        sqs = MemorySQS()
        sqs.create_queue_with_dlq(QUEUE, max_receive_count=5)
        bodies = fill(sqs)
        seen = Tenancy()
        worker = await start(sqs, seen.router(3.0), WORKER_CONCURRENCY="6", WORKER_GROUP_CONCURRENCY="2")
        assert await until(lambda: len(seen.done) >= 10, 600)
        pool = worker.worker.pools[0]
        assert pool.admission.line.parked > 0, "some were parked when the stop came"
        await worker.stop()
        left = sqs.bodies(QUEUE)
        assert sorted(left + seen.done) == sorted(bodies), "every message done or still in the queue"
        assert max(seen.runs.values()) == 1
        assert pool.admission.line.parked == 0 and pool.admission.tenants.get("a", 0) == 0
        assert pool.admission.in_use == 0 and pool.admission.held == 0

    vtime.run(scenario())


@pytest.mark.parametrize(("concurrency", "wait", "seconds"), [("6", "1", 1.0), ("4", "2", 0.5)])
def test_a_parked_message_whose_turn_comes_runs_even_while_a_poller_holds_every_free_place(
    concurrency: str, wait: str, seconds: float
) -> None:
    """One busy tenant only, its backlog all held here (parked) and the queue empty: a
    poller long-polls it holding every free place. A parked message handed its group's
    turn used to wait for a place, which the poller took back each time its empty poll
    ended: nothing ran again (these two cases stuck at 24 and 29 of 30). It takes its
    place at once; the concurrency and the cap still hold."""

    async def scenario() -> None:
        sqs = MemorySQS()
        sqs.create_queue(QUEUE)
        bodies = [f"a-{i}" for i in range(30)]
        for body in bodies:
            sqs.put(QUEUE, body, group="a")
        seen = Tenancy()
        worker = await start(
            sqs,
            seen.router(seconds),
            WORKER_CONCURRENCY=concurrency,
            WORKER_GROUP_CONCURRENCY="1",
            WORKER_WAIT_TIME_SECONDS=wait,
        )
        assert await until(lambda: len(seen.done) == len(bodies), 300), len(seen.done)
        await worker.stop()
        assert sorted(seen.done) == sorted(bodies) and max(seen.runs.values()) == 1
        assert seen.most["a"] == 1 == seen.most_at_once

    vtime.run(scenario())
