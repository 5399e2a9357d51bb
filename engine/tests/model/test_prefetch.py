"""Prefetch (prefetch.py): the real worker against the in-memory SQS model on virtual time,
with every receive taking a round trip of its own. Prefetched messages are deliveries
like any other: bounded, started in receive order, released at once on SIGTERM."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from sqs_worker_engine.base import clock
from sqs_worker_engine.handlers.job import Job

from . import vtime
from .harness import QUEUE, memory_queue, start, until

ROUND_TRIP = 0.1  # seconds each receive takes, as SQS's latency would make it


def busy_worker(prefetch: str, job_seconds: float, messages: int = 400, **env: str) -> tuple[int, int, Counter[str]]:
    """Jobs done in 10 virtual seconds, the most messages held at once, and runs per body."""
    result: dict[str, int] = {}
    runs: Counter[str] = Counter()

    async def scenario() -> None:
        sqs, router = memory_queue(messages=messages)
        sqs.slow("ReceiveMessage", before=ROUND_TRIP)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            runs[job.payload] += 1
            await asyncio.sleep(job_seconds)

        worker = await start(sqs, router, WORKER_CONCURRENCY="4", WORKER_PREFETCH=prefetch, **env)
        pool = worker.worker.pools[0]
        most = 0
        began = clock.now()
        while clock.now() - began < 10:
            most = max(most, pool.admission.in_use)
            await asyncio.sleep(0.01)
        result["done"] = sum(runs.values())
        result["most"] = most
        await worker.stop()

    vtime.run(scenario())
    return result["done"], result["most"], runs


def test_prefetch_hides_the_receive_round_trip() -> None:
    """0.1 s jobs, 0.1 s receives, 4 slots: without prefetch each freed slot waits a round
    trip (about half the time idle); with it the next job is already here."""
    without, held_without, _ = busy_worker("0", 0.1)
    with_prefetch, held_with, runs = busy_worker("10", 0.1)
    assert with_prefetch >= 1.5 * without, (without, with_prefetch)
    assert with_prefetch <= 4 * 10 / 0.1, "never more than the slots allow"
    assert held_without <= 4 and held_with <= 4 + 10, (held_without, held_with)
    assert max(runs.values()) == 1


def test_with_a_cap_of_zero_nothing_is_received_ahead() -> None:
    _, most, _ = busy_worker("0", 1.0)
    assert most <= 4


def test_prefetched_messages_are_released_at_once_on_sigterm_and_none_runs_twice() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue(messages=100)
        sqs.slow("ReceiveMessage", before=ROUND_TRIP)
        runs: Counter[str] = Counter()

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            runs[job.payload] += 1
            await asyncio.sleep(0.5)

        worker = await start(sqs, router, WORKER_CONCURRENCY="4", WORKER_PREFETCH="10")
        pool = worker.worker.pools[0]
        assert await until(lambda: pool.admission.waiting > 0, 30), "some were received ahead"
        took = await worker.stop()
        assert took < 2, "the running jobs finished; the prefetched did not wait for slots"
        assert len(sqs.visible(QUEUE)) == len(sqs.bodies(QUEUE)), "every message left is visible again"
        assert max(runs.values()) == 1
        assert pool.admission.in_use == 0 and pool.admission.running == 0 and pool.admission.held == 0

    vtime.run(scenario())


def test_a_fifo_queue_keeps_each_group_s_order_with_prefetch() -> None:
    async def scenario() -> None:
        sqs, router = memory_queue("jobs.fifo")
        for i in range(10):
            for group in ("g1", "g2", "g3", "g4", "g5", "g6"):
                sqs.put("jobs.fifo", f"{group}-{i}", group=group)
        sqs.slow("ReceiveMessage", before=ROUND_TRIP)
        done: list[str] = []

        @router.handler("jobs.fifo", payload=str)
        async def handle(job: Job[str]) -> None:
            await asyncio.sleep(0.05)
            done.append(job.payload)

        worker = await start(sqs, router, "jobs.fifo", WORKER_CONCURRENCY="3", WORKER_PREFETCH="10")
        assert await until(lambda: len(done) == 60, 300), len(done)
        await worker.stop()
        for group in ("g1", "g2", "g3", "g4", "g5", "g6"):
            assert [b for b in done if b.startswith(group)] == [f"{group}-{i}" for i in range(10)]

    vtime.run(scenario())


def test_an_idle_queue_costs_one_long_poll_at_a_time_and_work_wakes_every_poller() -> None:
    """Five pollers (concurrency 40 with prefetch 10): on an empty queue only the lead keeps
    long-polling; when messages come, the others join in."""
    result: dict[str, int] = {}

    async def scenario() -> None:
        sqs, router = memory_queue()
        sqs.slow("ReceiveMessage", before=ROUND_TRIP)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            await asyncio.sleep(30)

        worker = await start(sqs, router, WORKER_CONCURRENCY="40", WORKER_PREFETCH="10", WORKER_WAIT_TIME_SECONDS="20")
        pool = worker.worker.pools[0]
        assert pool.options.pollers == 5
        # Every poller's first long poll has come back empty (the fifth waited for places:
        # the prefetch is 0 until it has been measured).
        await asyncio.sleep(45)
        before = sqs.calls.get("ReceiveMessage", 0)
        out_idle = 0
        for _ in range(2000):  # 200 s: ten long polls' worth of an empty queue
            out_idle = max(out_idle, len(pool.polls.out))
            await asyncio.sleep(0.1)
        result["idle_receives"] = sqs.calls.get("ReceiveMessage", 0) - before
        result["out_idle"] = out_idle
        for i in range(200):
            sqs.put(QUEUE, f"m-{i}")
        out_busy = 0
        for _ in range(100):
            out_busy = max(out_busy, len(pool.polls.out))
            await asyncio.sleep(0.01)
        result["out_busy"] = out_busy
        await worker.stop()

    vtime.run(scenario())
    assert result["idle_receives"] <= 11 and result["out_idle"] == 1, result
    assert result["out_busy"] >= 3, result


def test_a_place_comes_back_when_its_delete_is_sent_within_a_bound() -> None:
    """Deletes take 1 s, jobs 10 ms, 4 slots and prefetch 10. A place that came back only
    when its delete was answered lasted over a second, so 14 places ran at most 14 jobs a
    second (Little's law). A place given back when its delete is sent lets more run; what
    is held stays within the documented bounds: places within concurrency + prefetch,
    deletes sent and unanswered within the prefetch, both within what a SIGKILL strands."""
    seen = {"done": 0, "book": 0, "held": 0, "sent": 0}
    runs: Counter[str] = Counter()

    async def scenario() -> None:
        sqs, router = memory_queue(messages=1000)
        sqs.slow("ReceiveMessage", before=ROUND_TRIP)
        sqs.slow("DeleteMessageBatch", before=1.0)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            runs[job.payload] += 1
            await asyncio.sleep(0.01)

        worker = await start(sqs, router, WORKER_CONCURRENCY="4", WORKER_PREFETCH="10")
        admission = worker.worker.pools[0].admission
        assert (admission.held_limit, admission.sent_limit, admission.strand_limit) == (14, 10, 24)
        began = clock.now()
        while clock.now() - began < 10:
            seen["book"] = max(seen["book"], len(worker.worker.pools[0].book))
            seen["held"] = max(seen["held"], admission.held)
            seen["sent"] = max(seen["sent"], admission.sent)
            await asyncio.sleep(0.005)
        seen["done"] = sum(runs.values())
        await worker.stop()
        assert admission.held == admission.sent == 0

    vtime.run(scenario())
    assert seen["done"] > 14 * (10 + 1), f"{seen}: places waited for their deletes' answers"
    assert seen["held"] <= 14 and seen["sent"] <= 10 and seen["book"] <= 24, seen
    assert max(runs.values()) == 1


@pytest.mark.slow
def test_short_jobs_at_an_in_region_round_trip_run_near_their_concurrency_by_default() -> None:
    """10 ms jobs at concurrency 50, every receive and delete taking 20 ms (SQS in-region),
    the default prefetch: at least 0.9 of the 5,000 jobs a second the slots allow. With a
    cap of the concurrency and places back only when deletes were answered, 100 places of
    about 50 ms each held it to under half that (make bench: 0.48)."""
    done: list[float] = []

    async def scenario() -> None:
        sqs, router = memory_queue(messages=20_000)
        sqs.slow("ReceiveMessage", before=0.02)
        sqs.slow("DeleteMessageBatch", before=0.02)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            await asyncio.sleep(0.01)
            done.append(clock.now())

        worker = await start(sqs, router, WORKER_CONCURRENCY="50")
        began = clock.now()
        await asyncio.sleep(1.0)  # the prefetch measures its round trip and job times
        await asyncio.sleep(2.0)
        window = [t for t in done if began + 1.0 <= t < began + 3.0]
        done[:] = [len(window) / 2.0]
        await worker.stop()

    vtime.run(scenario())
    assert done[0] >= 0.9 * 50 / 0.01, f"{done[0]:.0f} jobs a second, of 5,000"


def test_jobs_shorter_than_the_loop_clock_s_tick_still_count() -> None:
    """No-op jobs on a clock that does not move while they run (virtual time here; uvloop's
    loop clock ticks in whole milliseconds): each one's duration is 0.0. They were taken for
    jobs that never reached their handler: no duration observed, and the prefetch, which
    waits for a job time, never started; every freed slot waited a receive's round trip."""
    from prometheus_client import REGISTRY

    def observed() -> float:
        return REGISTRY.get_sample_value("job_duration_seconds_count", {"queue": QUEUE}) or 0.0

    seen: dict[str, float] = {}

    async def scenario() -> None:
        sqs, router = memory_queue(messages=200)
        sqs.slow("ReceiveMessage", before=ROUND_TRIP)
        done: list[str] = []

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            done.append(job.payload)

        before = observed()
        worker = await start(sqs, router, WORKER_CONCURRENCY="4")
        assert await until(lambda: len(done) >= 100, 60)
        seen["prefetch"] = worker.worker.pools[0].admission.prefetch
        await worker.stop()
        seen["jobs"], seen["observed"] = len(done), observed() - before

    vtime.run(scenario())
    assert seen["observed"] == seen["jobs"], seen
    assert seen["prefetch"] > 0, seen
