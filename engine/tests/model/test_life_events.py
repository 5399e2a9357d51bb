"""Life events of the process crossing a capability: SQS answering again, SIGTERM on a
shared budget, a pause's probe that never reaches its handler, a handler process dying.
Each test is a case that was seen to go wrong end to end, the real worker against the
in-memory SQS on virtual time."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError
from pydantic import BaseModel

from sqs_worker_engine import DownstreamUnavailable
from sqs_worker_engine.base import clock
from sqs_worker_engine.base.telemetry.logs import bind_job as real_bind
from sqs_worker_engine.doubles.memory import Fault, MemorySQS
from sqs_worker_engine.handlers.job import Job
from sqs_worker_engine.handlers.router import Router
from sqs_worker_engine.runtime import pool as pool_module
from sqs_worker_engine.runtime.admission.admission import Admission, Grant, Ticket
from sqs_worker_engine.runtime.protections.reach import PROBE_CAP

from . import vtime
from .harness import QUEUE, memory_queue, start, until


def test_once_sqs_answers_again_a_received_message_starts_at_once() -> None:
    """DeleteMessageBatch fails for 15 s, then SQS answers again. A message sent then waited
    15 s to start, until its first lease extension happened to succeed. Only a delete
    answered ends a delete outage (reach.py), and while it lasts the lease keeper asks SQS
    for one again every 0.5 to 4 s: the message starts within one such wait."""
    started: dict[str, float] = {}

    async def scenario() -> None:
        sqs, router = memory_queue(VisibilityTimeout="30")

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
        assert waited < PROBE_CAP + 1.0, f"the message sent once SQS answered again waited {waited:.1f} s to start"
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
        sqs, router = memory_queue(VisibilityTimeout="120")

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


def test_after_sigterm_no_queue_on_a_strict_budget_starts_a_job() -> None:
    """Two queues on a strict budget of 2: the higher queue's receives take 2 s, and
    between them the budget keeps its slots free for the messages on their way. SIGTERM
    then: the pools were stopped one after the other, and stopping the higher queue woke
    the lower queue's line, which took the two free slots after the signal."""
    starts: list[tuple[str, float]] = []
    stopped: list[float] = []

    async def scenario() -> None:
        sqs = MemorySQS()
        for queue in ("high", "low"):
            sqs.create_queue(queue)
            for i in range(20):
                sqs.put(queue, f"{queue}-{i}")
        receive = sqs.receive_message

        async def slow_for_high(**kwargs: Any) -> dict[str, Any]:
            if kwargs["QueueUrl"].endswith("/high"):
                await asyncio.sleep(2)
            return await receive(**kwargs)

        sqs.receive_message = slow_for_high  # type: ignore[method-assign]
        router = Router()
        for queue in ("high", "low"):

            @router.handler(queue, payload=str)
            async def handle(job: Job[str], queue: str = queue) -> None:
                starts.append((queue, clock.now()))
                await asyncio.sleep(0.5)

        worker = await start(
            sqs,
            router,
            "high,low",
            WORKER_CONCURRENCY="2",
            WORKER_QUEUE_HIGH_PREFETCH="0",
            WORKER_QUEUE_LOW_PREFETCH="10",
            WORKER_SHARED_CONCURRENCY="2",
            WORKER_PRIORITY="strict",
        )
        high, low = (pool.admission for pool in worker.worker.pools)

        def kept_for_high() -> bool:  # every slot free, the lower queue's messages waiting
            return high.running == low.running == 0 and low.waiting > 0 and high.reserved > 0

        assert await until(kept_for_high, 60, step=0.01), "the budget never kept its slots for the higher queue"
        stopped.append(clock.now())
        await worker.stop()

    vtime.run(scenario())
    late = [(q, round(t, 2)) for q, t in starts if t >= stopped[0]]
    assert late == [], f"jobs started after SIGTERM: {late}"


def test_a_message_that_never_reaches_its_handler_is_no_answer_to_a_pause() -> None:
    """A partner down for a minute; messages that cannot even be parsed arrive meanwhile.
    One of them was let through as the pause's probe, its dead-lettering counted as the
    partner answering: the pause ended, the paused message met the outage again, and so on
    each round, until SQS dead-lettered a good message for an outage. A message whose
    handler is never called says nothing about the partner: the next message probes."""
    down_until = 60.0
    resumed: list[float] = []
    handled: list[str] = []

    async def scenario() -> None:
        sqs, router = memory_queue(dlq_after=5)

        @router.handler(QUEUE, payload=Order)
        async def handle(job: Job[Order]) -> None:
            if clock.now() < down_until:
                raise DownstreamUnavailable(5, "partner down")
            handled.append(job.payload.order_id)

        sqs.put(QUEUE, json.dumps({"order_id": "o-1"}))
        worker = await start(sqs, router, WORKER_CONCURRENCY="1", WORKER_RETRY_MAX_SECONDS="20")
        admission = worker.worker.pools[0].admission
        assert await until(lambda: admission.breaker.paused, 30)
        for i in range(12):  # a malformed message every 4 s through the outage
            sqs.put(QUEUE, f"not json {i}")
            paused_until = clock.now() + 4
            while clock.now() < paused_until:
                if not admission.breaker.paused and clock.now() < down_until:
                    resumed.append(clock.now())
                await asyncio.sleep(0.05)
        good = json.dumps({"order_id": "o-1"})
        assert await until(lambda: handled == ["o-1"] or good in sqs.bodies(f"{QUEUE}-dlq"), 300)
        await worker.stop()
        assert good not in sqs.bodies(f"{QUEUE}-dlq"), "the good message was dead-lettered for an outage"
        assert handled == ["o-1"]

    vtime.run(scenario())
    assert resumed == [], f"the pause ended during the outage at {sorted(set(round(t) for t in resumed))}"


async def will_not_end(released: list[bool]) -> None:
    """A handler that ignores its timeout and its cancellation, until the test lets it go."""
    while not released:
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            continue


class Order(BaseModel):
    order_id: str


def test_liveness_holds_through_a_pause_and_fails_on_a_handler_that_will_not_end() -> None:
    """WORKER_STALLED_AFTER_SECONDS=8: a 20 s pause keeps the worker live; a handler that
    ignores its timeout and holds the only slot stalls it, 8 s after it last progressed."""
    live_during_pause: list[bool] = []
    stuck_at: list[float] = []
    released: list[bool] = []

    async def scenario() -> None:
        sqs, router = memory_queue()

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            if job.payload == "paused":
                if job.receive_count == 1:
                    raise DownstreamUnavailable(20, "partner down")
                return
            stuck_at.append(clock.now())
            await will_not_end(released)

        settings = {
            "WORKER_CONCURRENCY": "1",
            "WORKER_JOB_TIMEOUT_MS": "2000",
            "WORKER_WAIT_TIME_SECONDS": "1",
            "WORKER_STALLED_AFTER_SECONDS": "8",
            "WORKER_RETRY_MAX_SECONDS": "60",
            "WORKER_SHUTDOWN_TIMEOUT_MS": "5000",
        }
        worker = await start(sqs, router, **settings)
        health = worker.worker.health
        sqs.put(QUEUE, "paused")
        admission = worker.worker.pools[0].admission
        assert await until(lambda: admission.breaker.paused, 30)
        while admission.breaker.paused and admission.breaker.until > clock.now():
            live_during_pause.append(health.live())
            await asyncio.sleep(0.5)
        assert await until(lambda: sqs.bodies(QUEUE) == [], 120)
        sqs.put(QUEUE, "stuck")
        assert await until(lambda: bool(stuck_at), 30)
        assert await until(lambda: not health.live(), 60), "a handler that will not end never stalled the worker"
        stalled_at = clock.now()
        assert 8 <= stalled_at - stuck_at[0] <= 10, stalled_at - stuck_at[0]
        released.append(True)
        assert await until(health.live, 30), "the worker is live again once the handler ended"
        await worker.stop()

    vtime.run(scenario())
    assert len(live_during_pause) >= 30 and all(live_during_pause), live_during_pause


def test_a_rate_limit_paces_starts_evenly_and_keeps_close_to_the_limit() -> None:
    """200 quick jobs at WORKER_RATE_LIMIT=20/s, SQS answering in 20 ms: at most 20 start in
    any closed second, and the rate kept is within 0.95-1.0 of the limit (the grid's 2.5%
    margin is all it gives up: the line is kept a window's worth ahead of the starts)."""
    starts: list[float] = []

    async def scenario() -> None:
        sqs, router = memory_queue(messages=200)
        sqs.slow("ReceiveMessage", after=0.02)
        sqs.slow("DeleteMessageBatch", after=0.02)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            starts.append(clock.now())

        worker = await start(sqs, router, WORKER_CONCURRENCY="20", WORKER_RATE_LIMIT="20/s")
        assert await until(lambda: len(starts) == 200, 120)
        await worker.stop()

    vtime.run(scenario())
    most = max(sum(1 for u in starts[i:] if u <= t + 1.0) for i, t in enumerate(starts))
    achieved = (len(starts) - 1) / (starts[-1] - starts[0]) / 20
    print(f"20/s on the model: at most {most} in a closed second, {achieved:.3f} of the limit")
    assert most <= 20, f"{most} starts in a closed second"
    assert 0.95 <= achieved <= 1.0, f"{achieved:.3f} of the limit"


def test_one_job_that_ignores_its_timeout_does_not_halt_an_adaptive_queue() -> None:
    """Adaptive concurrency starts at its floor (1) and grows only from successes: the first
    job hung past its timeout, ignoring the cancellation, held that one slot, and no job
    ever succeeded to grow the limit. A job past its timeout whose work will not end holds
    its slot of the concurrency (the ceiling), not of the adaptive limit."""
    done: list[str] = []
    release: list[bool] = []

    async def scenario() -> None:
        sqs, router = memory_queue(VisibilityTimeout="60")

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            if job.payload == "hangs":
                while not release:
                    try:
                        await asyncio.sleep(1)
                    except asyncio.CancelledError:
                        continue  # ignores its timeout
                return
            done.append(job.payload)

        sqs.put(QUEUE, "hangs")
        worker = await start(
            sqs,
            router,
            WORKER_CONCURRENCY="4",
            WORKER_ADAPTIVE_CONCURRENCY="true",
            WORKER_JOB_TIMEOUT_MS="2000",
            WORKER_VISIBILITY_TIMEOUT_SECONDS="60",
        )
        await asyncio.sleep(1)
        for i in range(5):
            sqs.put(QUEUE, f"m-{i}")
        try:
            assert await until(lambda: len(done) == 5, 120), f"{len(done)} of 5 done beside the hung job"
        finally:
            release.append(True)
        await worker.stop()

    vtime.run(scenario())


def test_a_fifo_receive_whose_answer_was_lost_is_retried_with_its_attempt_id() -> None:
    """A FIFO receive whose answer never arrives (SQS took the message, the connection
    dropped): the retry sent a new receive, and the message, hidden for its visibility
    timeout, held its whole group back for 30 s. Retried with the same
    ReceiveRequestAttemptId, SQS gives the same message back at once."""
    started: list[float] = []

    async def scenario() -> None:
        sqs, router = memory_queue(
            "jobs.fifo", VisibilityTimeout="30", FifoQueue="true", ContentBasedDeduplication="true"
        )

        @router.handler("jobs.fifo", payload=str)
        async def handle(job: Job[str]) -> None:
            started.append(clock.now())

        sqs.faults["ReceiveMessage"] = Fault(lost=True, times=1)
        sqs.put("jobs.fifo", "a", group="g")
        worker = await start(sqs, router, "jobs.fifo")
        assert await until(lambda: bool(started), 60)
        await worker.stop()
        assert sqs.receipts["a"] == 1, f"received {sqs.receipts['a']} times: one receive, answered twice"

    vtime.run(scenario())
    assert started[0] < 5, f"the message started {started[0]:.1f} s in"


def test_no_job_starts_after_the_stop_signal_even_before_the_drain_begins() -> None:
    """From the moment `stop()` returns (SIGTERM's handler calls it), no queue starts a job
    or sends a receive. The pools were stopped only once the run loop woke to its shutdown:
    meanwhile a slot that came free, or a receive answered, could start one more job."""

    async def scenario() -> None:
        sqs = MemorySQS()
        sqs.create_queue(QUEUE)
        sqs.create_queue("other")
        router = Router()
        for queue in (QUEUE, "other"):

            @router.handler(queue, payload=str)
            async def handle(job: Job[str]) -> None:
                await asyncio.sleep(1)

        running = await start(sqs, router, f"{QUEUE},other")
        assert await until(lambda: running.worker.state == "running", 30)
        running.worker.stop("SIGTERM")
        halted = [pool.admission.stopping for pool in running.worker.pools]
        await running.task
        assert halted == [True, True], "the pools still started jobs after stop() returned"

    vtime.run(scenario())


def test_a_job_that_ends_is_progress() -> None:
    """One slot, a 14 s job, then an empty queue's 20 s long poll: with
    WORKER_STALLED_AFTER_SECONDS=26 the worker looked stalled 26 s in, for a job's end
    was not counted as progress (only receives were), and the long poll was still out."""
    live: list[bool] = []

    async def scenario() -> None:
        sqs, router = memory_queue(VisibilityTimeout="60")

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            await asyncio.sleep(14)

        sqs.put(QUEUE, "slow")
        worker = await start(
            sqs,
            router,
            WORKER_CONCURRENCY="1",
            WORKER_PREFETCH="0",
            WORKER_JOB_TIMEOUT_MS="18000",
            WORKER_VISIBILITY_TIMEOUT_SECONDS="60",
            WORKER_STALLED_AFTER_SECONDS="26",
        )
        for _ in range(400):
            live.append(worker.worker.health.live())
            await asyncio.sleep(0.1)
        await worker.stop()

    vtime.run(scenario())
    assert all(live), f"stalled {live.index(False) / 10:.1f} s in"


def test_a_handler_that_will_not_end_stalls_the_worker_while_the_pollers_still_answer() -> None:
    """WORKER_STALLED_AFTER_SECONDS=8, the default prefetch, an idle queue: once jobs were
    timed, the pollers receive ahead of the one slot, and every long poll on the empty queue
    answered. Each answer counted as progress, so a handler that ignores its timeout held
    the only slot and the worker stayed live for as long as SQS answered. With every slot
    held only a job's end is progress."""
    stuck_at: list[float] = []
    released: list[bool] = []
    stalled: list[float] = []

    async def scenario() -> None:
        sqs, router = memory_queue()

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            if job.payload != "stuck":
                await asyncio.sleep(0.05)
                return
            stuck_at.append(clock.now())
            await will_not_end(released)

        worker = await start(
            sqs,
            router,
            WORKER_CONCURRENCY="1",
            WORKER_JOB_TIMEOUT_MS="2000",
            WORKER_WAIT_TIME_SECONDS="1",
            WORKER_STALLED_AFTER_SECONDS="8",
            WORKER_SHUTDOWN_TIMEOUT_MS="5000",
        )
        health = worker.worker.health
        for i in range(5):
            sqs.put(QUEUE, f"warm-{i}")
        assert await until(lambda: sqs.bodies(QUEUE) == [], 30)
        assert worker.worker.pools[0].admission.prefetch > 0, "the prefetch should be on for this case"
        sqs.put(QUEUE, "stuck")
        assert await until(lambda: bool(stuck_at), 30)
        if await until(lambda: not health.live(), 60):
            stalled.append(clock.now() - stuck_at[0])
        released.append(True)
        await worker.stop()

    vtime.run(scenario())
    assert stalled, "a handler that will not end never stalled the worker while its pollers answered"
    assert 8 <= stalled[0] <= 10, stalled


def test_a_message_s_life_that_crashes_on_a_bug_gives_back_its_place_and_its_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not the handler's failure (that is a decision) but the worker's own: here the log
    binding, the first thing a message's life does, raises once. The worker logs it and
    lets the message's lease go, so it comes back, and frees its place: with concurrency 1
    the next message runs at once, the crashed one runs when its visibility ends, and the
    drain ends with nothing held. Had the place not been given back, nothing would run
    again; had the lease been kept, it would be extended for ever."""
    ran: list[tuple[str, int]] = []
    crashes = [RuntimeError("a bug in the worker")]

    def bind_once_broken(**ids: Any) -> None:
        if crashes:
            raise crashes.pop()
        real_bind(**ids)

    monkeypatch.setattr(pool_module, "bind_job", bind_once_broken)

    async def scenario() -> None:
        sqs, router = memory_queue(VisibilityTimeout="10")

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            ran.append((job.payload, job.receive_count))

        sqs.put(QUEUE, "first")
        sqs.put(QUEUE, "second")
        worker = await start(sqs, router, WORKER_CONCURRENCY="1", WORKER_VISIBILITY_TIMEOUT_SECONDS="10")
        assert await until(lambda: len(ran) == 2, 60), f"ran {ran}: the crashed life kept its place, or its message"
        assert not crashes, "the life never crashed"
        assert ran[0] == ("second", 1), ran
        assert ran[1] == ("first", 2), ran
        assert await until(lambda: sqs.bodies(QUEUE) == [], 10)
        await worker.stop()
        assert worker.worker.pools[0].runs == set(), "a run outlived the drain"

    vtime.run(scenario())


def test_while_deletes_are_refused_no_message_starts_and_none_is_dead_lettered_for_it() -> None:
    """A worker policy without sqs:DeleteMessage: every DeleteMessageBatch refused for 50 s,
    concurrency 2, maxReceiveCount 2, six good messages. Any call SQS answered (a receive, a
    lease extension, which the lease keeper made every 0.5-4 s) ended "SQS unreachable", so
    starts resumed within a second of each refused delete: 8 of 12 runs started after the
    first refusal and all six messages were dead-lettered. Whether SQS answers is kept per
    call kind: from the first refused delete until a delete is answered, nothing starts and
    nothing more is received, and the worker stays live but not ready."""
    starts: list[tuple[str, float]] = []
    deletes: list[tuple[float, bool]] = []  # (when SQS answered a DeleteMessageBatch, whether it was refused)
    seen: dict[str, list[bool | None]] = {"live": [], "ready": []}
    dead: list[str] = []

    async def scenario() -> None:
        sqs, router = memory_queue(dlq_after=2, messages=6, VisibilityTimeout="10")
        delete = sqs.delete_message_batch

        async def noted(**params: Any) -> dict[str, Any]:
            try:
                answer = await delete(**params)
            except Exception:
                deletes.append((clock.now(), True))
                raise
            deletes.append((clock.now(), False))
            return answer

        sqs.delete_message_batch = noted  # type: ignore[method-assign]

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            starts.append((job.payload, clock.now()))
            await asyncio.sleep(1)

        sqs.fail("DeleteMessageBatch", "AccessDenied")
        worker = await start(sqs, router, WORKER_CONCURRENCY="2", WORKER_VISIBILITY_TIMEOUT_SECONDS="10")
        health = worker.worker.health
        await asyncio.sleep(40)
        seen["live"].append(health.live())
        seen["ready"].append(health.sqs_ok)
        await asyncio.sleep(10)
        sqs.heal()
        assert await until(lambda: sqs.bodies(QUEUE) == [], 300), f"left in the queue: {sqs.bodies(QUEUE)}"
        seen["ready"].append(health.sqs_ok)
        await worker.stop()
        dead.extend(sqs.bodies(f"{QUEUE}-dlq"))

    vtime.run(scenario())
    first_refused = min(t for t, refused in deletes if refused)
    answered = min((t for t, refused in deletes if not refused and t > first_refused), default=math.inf)
    during = [(body, round(t, 1)) for body, t in starts if first_refused < t < answered]
    assert during == [], (
        f"started after the first refused delete ({first_refused:.1f} s) "
        f"and before one was answered ({answered:.1f} s): {during}"
    )
    assert dead == [], f"good messages dead-lettered for the refused deletes: {dead}"
    assert {body for body, _ in starts} == {f"m-{i}" for i in range(6)}
    assert seen == {"live": [True], "ready": [False, True]}, f"a worker that cannot delete is live, not ready: {seen}"


def test_a_fifo_receive_sent_again_brings_no_more_messages_than_the_places_held_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Concurrency 3, no prefetch, a FIFO queue. A receive for two places whose answer never
    arrives (SQS handed out two messages), and meanwhile a running job says its downstream
    is unavailable. The next receive, the pause's probe on one place, was sent with the lost
    one's ReceiveRequestAttemptId, and SQS answered it with the two messages: two tickets on
    one place. A receive is sent again as it was, on the places held for it."""
    answers: list[tuple[int, int]] = []  # (places granted, messages received) of every receive
    done: list[str] = []
    received = Admission.received

    def noted(admission: Admission, grant: Grant, got: int) -> list[Ticket]:
        answers.append((grant.places, got))
        return received(admission, grant, got)

    monkeypatch.setattr(Admission, "received", noted)

    async def scenario() -> None:
        sqs, router = memory_queue(
            "jobs.fifo", VisibilityTimeout="30", FifoQueue="true", ContentBasedDeduplication="true"
        )
        lost = asyncio.Event()
        receive = sqs.receive_message

        async def loses_the_pair(**params: Any) -> dict[str, Any]:
            answer = await receive(**params)
            if not lost.is_set() and len(answer.get("Messages", [])) == 2:
                lost.set()
                raise EndpointConnectionError(endpoint_url=params["QueueUrl"])
            return answer

        sqs.receive_message = loses_the_pair  # type: ignore[method-assign]

        @router.handler("jobs.fifo", payload=str)
        async def handle(job: Job[str]) -> None:
            if job.payload == "trouble" and job.receive_count == 1:
                await lost.wait()
                raise DownstreamUnavailable(5, "partner down")
            done.append(job.payload)

        sqs.put("jobs.fifo", "trouble", group="t")
        worker = await start(sqs, router, "jobs.fifo", WORKER_CONCURRENCY="3", WORKER_PREFETCH="0")
        assert await until(lambda: worker.worker.pools[0].admission.running == 1, 30)
        sqs.put("jobs.fifo", "a", group="a")
        sqs.put("jobs.fifo", "b", group="b")
        assert await until(lambda: sorted(done) == ["a", "b", "trouble"], 120), f"done: {done}"
        await worker.stop()
        assert sqs.receipts["a"] == sqs.receipts["b"] == 1, f"received {sqs.receipts}: one receive, sent twice"

    vtime.run(scenario())
    over = [(places, got) for places, got in answers if got > places]
    assert over == [], f"receives that brought more messages than their places (places, messages): {over}"
