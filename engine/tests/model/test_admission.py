"""Admission composed: pauses, rate limits, tenant caps, prefetch and slots together, the
real worker against the in-memory SQS on virtual time. Each test is a composition that
once wedged a queue for good, ran a message twice, or held more than the documented
bound (admission.py owns every one of these decisions now)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

from sqs_worker_engine import DownstreamUnavailable, NonRetryableError
from sqs_worker_engine.base import clock
from sqs_worker_engine.doubles.memory import Fault
from sqs_worker_engine.formats.offload import POINTER_CLASS, S3Pointer
from sqs_worker_engine.handlers.job import Job

from . import vtime
from .harness import QUEUE, memory_queue, start, until


def test_a_pause_ending_with_too_few_rate_tokens_does_not_wedge_the_queue() -> None:
    """10/min and one DownstreamUnavailable(2): once the pause ends the probe must still get
    its token when one comes. Before, the probe's turn was marked taken before the bucket
    was asked, and never given back: 0 of 3 done, the worker idle for good."""
    done: list[str] = []
    troubled: set[str] = set()

    async def scenario() -> None:
        sqs, router = memory_queue(messages=3)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            if not troubled:
                troubled.add(job.payload)
                raise DownstreamUnavailable(2, "partner down")
            done.append(job.payload)

        worker = await start(sqs, router, WORKER_CONCURRENCY="2", WORKER_RATE_LIMIT="10/min")
        await until(lambda: len(done) == 3, 300)
        await worker.stop()

    vtime.run(scenario())
    assert sorted(done) == ["m-0", "m-1", "m-2"], done


def test_a_pause_with_a_tenant_cap_and_parked_messages_does_not_wedge_the_queue() -> None:
    """Standard queue, group cap 1, concurrency 2: tenant a's 10 s job runs, its other
    messages parked; a message of tenant b raises DownstreamUnavailable(2). Before, the
    probe left through the tenant path and nothing cleared it: 3 of 10 done, then nothing."""
    done: list[str] = []
    troubled: set[str] = set()

    async def scenario() -> None:
        sqs, router = memory_queue()
        sqs.put(QUEUE, "a-slow", group="a")
        for i in range(5):
            sqs.put(QUEUE, f"a-{i}", group="a")
        for i in range(4):
            sqs.put(QUEUE, f"b-{i}", group="b")

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            if job.payload == "a-slow":
                await asyncio.sleep(10)
            elif job.payload.startswith("b") and not troubled:
                troubled.add(job.payload)
                raise DownstreamUnavailable(2, "partner down")
            done.append(job.payload)

        worker = await start(sqs, router, WORKER_CONCURRENCY="2", WORKER_GROUP_CONCURRENCY="1")
        await until(lambda: len(done) == 10, 600)
        await worker.stop()

    vtime.run(scenario())
    assert len(done) == 10, sorted(done)


def test_a_probe_parked_behind_a_long_job_does_not_keep_the_queue_paused() -> None:
    """The message that ends a pause is parked behind its tenant's 60 s job: other tenants'
    messages must not wait for that job to end."""
    done: dict[str, float] = {}
    troubled: set[str] = set()

    async def scenario() -> None:
        sqs, router = memory_queue(VisibilityTimeout="30")
        sqs.put(QUEUE, "a-long", group="a")
        sqs.put(QUEUE, "b-trouble", group="b")
        began = clock.now()

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            if job.payload == "a-long":
                await asyncio.sleep(60)
            elif job.payload == "b-trouble" and not troubled:
                troubled.add(job.payload)
                for i in range(3):
                    sqs.put(QUEUE, f"a-{i}", group="a")  # parked behind a-long
                raise DownstreamUnavailable(2, "partner down")
            done[job.payload] = clock.now() - began

        worker = await start(sqs, router, WORKER_CONCURRENCY="4", WORKER_GROUP_CONCURRENCY="1")
        await until(lambda: "b-trouble" in done, 30)
        for i in range(3):
            sqs.put(QUEUE, f"c-{i}", group="c")
        await until(lambda: all(f"c-{i}" in done for i in range(3)), 50)
        await worker.stop()

    vtime.run(scenario())
    assert all(f"c-{i}" in done for i in range(3)), done
    assert max(done[f"c-{i}"] for i in range(3)) < 55, f"tenant c waited for tenant a's long job: {done}"


def test_prefetched_messages_do_not_start_during_a_pause() -> None:
    """Messages held ahead of their slot when a pause begins wait it out: starting them
    would send each into the downstream that just said it is down, and each would come
    back with one more receive counted."""
    starts: list[tuple[float, str]] = []
    paused_at: list[float] = []

    async def scenario() -> None:
        sqs, router = memory_queue(VisibilityTimeout="60", messages=30)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            starts.append((clock.now(), job.payload))
            await asyncio.sleep(0.5)
            if job.payload == "m-0":
                paused_at.append(clock.now())
                raise DownstreamUnavailable(20, "partner down")

        worker = await start(sqs, router, WORKER_CONCURRENCY="1", WORKER_PREFETCH="20")
        await until(lambda: len(starts) >= 30, 300)
        await worker.stop()

    vtime.run(scenario())
    assert paused_at, "the troubled message never ran"
    during = [name for at, name in starts if paused_at[0] < at < paused_at[0] + 20]
    assert during == [], f"started during the pause: {during}"


def test_a_rate_limit_holds_in_every_one_second_window_from_a_cold_start() -> None:
    """200 quick jobs under 20/s: a full bucket let a second's worth through on top of the
    rate at the start (22.2/s over the run). No one-second window may see more than 20."""
    starts: list[float] = []

    async def scenario() -> None:
        sqs, router = memory_queue(messages=200)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            starts.append(clock.now())
            await asyncio.sleep(0.01)

        worker = await start(sqs, router, WORKER_CONCURRENCY="10", WORKER_RATE_LIMIT="20/s")
        await until(lambda: len(starts) == 200, 60)
        await asyncio.sleep(5)  # idle: the limit must hold after an idle spell too
        for i in range(100):
            sqs.put(QUEUE, f"n-{i}")
        await until(lambda: len(starts) == 300, 60)
        await worker.stop()

    vtime.run(scenario())
    assert len(starts) == 300
    worst = max(sum(1 for t in starts if s <= t < s + 1) for s in starts)
    assert worst <= 20, f"{worst} starts in one second under a 20/s limit"


def test_held_messages_never_exceed_concurrency_plus_prefetch_while_dlq_sends_are_slow() -> None:
    """DLQ sends take 5 s: settling messages count toward the places held. Before, the bound
    added a settling room of max(concurrency, 50) on top: 100 held at concurrency 2 and
    prefetch 50, twice what a SIGKILL may strand by the documentation. A message whose copy
    is in the DLQ and whose delete is sent gives its place back (its line.delete_sent):
    those are bounded apart, by the prefetch."""
    most = {"held": 0, "places": 0}

    async def scenario() -> None:
        sqs, router = memory_queue(dlq_after=5, messages=300)
        sqs.slow("SendMessage", before=5.0)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            raise NonRetryableError("poison")

        worker = await start(sqs, router, WORKER_CONCURRENCY="2", WORKER_PREFETCH="50")
        pool = worker.worker.pools[0]
        began = clock.now()
        while clock.now() - began < 30:
            most["held"] = max(most["held"], len(pool.book))
            most["places"] = max(most["places"], pool.admission.held)
            await asyncio.sleep(0.05)
        await worker.stop()

    vtime.run(scenario())
    assert 0 < most["places"] <= 2 + 50, most
    assert most["held"] <= 2 + 50 + 50, most


class SlowStore:
    """Large payloads whose S3 read takes `seconds` (the pool's PayloadStore, duck-typed)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.reads = 0

    async def fetch(self, pointer: S3Pointer) -> str:
        self.reads += 1
        await asyncio.sleep(self.seconds)
        return json.dumps({"key": pointer.key})

    async def delete(self, pointer: S3Pointer) -> None:
        return None

    async def close(self) -> None:
        return None


def test_a_rate_limit_counts_starts_where_their_handlers_are_called() -> None:
    """20/s, and the first ten messages are large payloads whose S3 read takes 0.6 s, the
    rest inline: counted where admission let them go, the ten reached their handlers late,
    together with the next ones on time: 30 calls in a rolling second. A start is counted
    where its handler is called: no rolling second of calls holds more than 20."""
    calls: list[float] = []
    store = SlowStore(0.6)

    async def scenario() -> None:
        sqs, router = memory_queue()
        size = {"ExtendedPayloadSize": {"DataType": "Number", "StringValue": "300000"}}
        for i in range(10):
            pointer = json.dumps([POINTER_CLASS, {"s3BucketName": "payloads", "s3Key": f"big-{i}"}])
            sqs.put(QUEUE, pointer, attributes=size)
        for i in range(50):
            sqs.put(QUEUE, json.dumps({"n": i}))

        @router.handler(QUEUE)
        async def handle(job: Job[Any]) -> None:
            calls.append(clock.now())

        from sqs_worker_engine.process.worker import Worker

        from .harness import Running, config

        running = Running(
            Worker(
                config(
                    QUEUE, WORKER_CONCURRENCY="40", WORKER_RATE_LIMIT="20/s", WORKER_LARGE_PAYLOAD_BUCKET="payloads"
                ),
                router,
                client=sqs,
                payloads=store,  # type: ignore[arg-type]
            )
        )
        await until(lambda: len(calls) == 60, 60)
        running.worker.stop("SIGTERM")
        await running.task

    vtime.run(scenario())
    assert store.reads == 10 and len(calls) == 60
    worst = max(sum(1 for t in calls if s <= t < s + 1) for s in calls)
    assert worst <= 20, f"{worst} handler calls in one second under a 20/s limit"


def test_no_handler_starts_after_its_lease_was_lost_during_the_payload_read() -> None:
    """The S3 read outlasts the lease (every extension hangs): the handler must not start,
    or two deliveries of one message run at once."""
    starts: Counter[str] = Counter()
    store = SlowStore(6.0)

    async def scenario() -> None:
        sqs, router = memory_queue(VisibilityTimeout="4")
        pointer = json.dumps([POINTER_CLASS, {"s3BucketName": "payloads", "s3Key": "big-1"}])
        size = {"ExtendedPayloadSize": {"DataType": "Number", "StringValue": "300000"}}
        sqs.put(QUEUE, pointer, attributes=size)
        sqs.faults["ChangeMessageVisibilityBatch"] = Fault(before=3600)

        @router.handler(QUEUE)
        async def handle(job: Job[Any]) -> None:
            starts[job.id] += 1
            await asyncio.sleep(1)

        from sqs_worker_engine.process.worker import Worker

        from .harness import Running, config

        running = Running(
            Worker(
                config(
                    QUEUE,
                    WORKER_VISIBILITY_TIMEOUT_SECONDS="4",
                    WORKER_CONCURRENCY="2",
                    WORKER_LARGE_PAYLOAD_BUCKET="payloads",
                ),
                router,
                client=sqs,
                payloads=store,  # type: ignore[arg-type]
            )
        )
        await asyncio.sleep(20)
        running.worker.stop("SIGTERM")
        await running.task

    vtime.run(scenario())
    assert store.reads >= 1, "the payload was never read: the test proves nothing"
    assert sum(starts.values()) == 0, f"handlers started on lost leases: {dict(starts)}"


def test_held_messages_do_not_start_while_sqs_cannot_settle_them() -> None:
    """Deletes and lease extensions fail (SQS unreachable): a message started now could
    not be deleted, and would run again when its lease lapses. Only the jobs running when
    SQS went away may run twice, and those that started before the worker could know: the
    first sign is a failed call, and one is made within a flush of each job's end, so at
    most one job per slot starts in between."""
    runs: Counter[str] = Counter()
    running_at_outage: list[int] = []

    async def scenario() -> None:
        sqs, router = memory_queue(VisibilityTimeout="10", messages=400)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            runs[job.payload] += 1
            await asyncio.sleep(0.5)

        worker = await start(sqs, router, WORKER_CONCURRENCY="4", WORKER_PREFETCH="40")
        await until(lambda: sum(runs.values()) >= 40, 60)
        running_at_outage.append(worker.worker.pools[0].active)
        for operation in ("DeleteMessageBatch", "ChangeMessageVisibilityBatch", "ReceiveMessage"):
            sqs.faults[operation] = Fault(error="ServiceUnavailable")
        await asyncio.sleep(30)
        sqs.heal()
        await until(lambda: len(runs) == 400, 600)
        await worker.stop()

    vtime.run(scenario())
    twice = [body for body, n in runs.items() if n > 1]
    assert len(runs) == 400
    bound = running_at_outage[0] + 4  # plus one per slot, started before the first failed call
    assert len(twice) <= bound, f"{len(twice)} ran twice; {running_at_outage[0]} were running"


def test_with_drain_polls_the_worker_exits_once_its_last_polls_answered() -> None:
    """WORKER_DRAIN_POLLS: the stop waits for the polls out, then exits. A poller whose
    empty receive answered after the stop went back to waiting for work that would never
    come, and the stop waited for it until the release cap (100 s in the LocalStack test)."""
    took: list[float] = []

    async def scenario() -> None:
        sqs, router = memory_queue(messages=25)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            await asyncio.sleep(0.1)

        worker = await start(
            sqs, router, WORKER_DRAIN_POLLS="true", WORKER_WAIT_TIME_SECONDS="2", WORKER_SHUTDOWN_TIMEOUT_MS="150000"
        )
        await until(lambda: not sqs.bodies(QUEUE), 60)
        await asyncio.sleep(0.5)  # every poller is out in a long poll of the empty queue
        took.append(await worker.stop())

    vtime.run(scenario())
    assert took[0] <= 2 + 1, f"the stop took {took[0]:.1f} s with 2 s long polls"


def test_a_pool_that_can_never_fill_a_delete_batch_does_not_wait_for_one() -> None:
    """WORKER_PREFETCH=0 at concurrency 1: what is held, settling included, is one message,
    so the next receive waits for the delete. Waiting WORKER_ACK_FLUSH_MS (100 ms) for a
    batch of 10 that cannot form held such a worker to 9 messages a second (make bench)."""
    took: list[float] = []

    async def scenario() -> None:
        sqs, router = memory_queue(messages=50)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            return None

        began = clock.now()
        worker = await start(sqs, router, WORKER_CONCURRENCY="1", WORKER_PREFETCH="0")
        await until(lambda: not sqs.bodies(QUEUE), 60, step=0.001)
        took.append(clock.now() - began)
        await worker.stop()

    vtime.run(scenario())
    assert took[0] < 50 * 0.1 / 2, f"50 messages took {took[0]:.2f} s: the deletes waited for a batch"
