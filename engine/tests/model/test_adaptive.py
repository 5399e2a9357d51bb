"""Adaptive concurrency through the whole worker (WORKER_ADAPTIVE_CONCURRENCY): the real
pool, admission and limit against the in-memory SQS on virtual time, with a downstream
whose calls slow down past its capacity. The limit alone is in unit/test_adaptive.py."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import REGISTRY

from sqs_worker_engine import DownstreamUnavailable
from sqs_worker_engine.base import clock
from sqs_worker_engine.doubles.memory import MemorySQS
from sqs_worker_engine.handlers.job import Job
from sqs_worker_engine.handlers.router import Router
from sqs_worker_engine.runtime.admission.admission import Ticket
from sqs_worker_engine.runtime.admission.gate import StartGate
from sqs_worker_engine.runtime.admission.line import StartLine

from . import vtime
from .harness import QUEUE, Running, memory_queue, start, until

BASE = 0.05  # a call's seconds within the downstream's capacity


@dataclass
class Downstream:
    """Calls take BASE up to `capacity` in flight, BASE x (in flight / capacity)^2 beyond;
    `down_until`: it answers 503 (DownstreamUnavailable) until then."""

    capacity: int
    inflight: int = 0
    most: int = 0
    down_until: float = 0.0
    done: set[str] = field(default_factory=set)

    async def call(self, body: str) -> None:
        if clock.now() < self.down_until:
            await asyncio.sleep(0.005)
            raise DownstreamUnavailable(1, "503")
        self.inflight += 1
        self.most = max(self.most, self.inflight)
        try:
            await asyncio.sleep(BASE * max(1.0, (self.inflight / self.capacity) ** 2))
        finally:
            self.inflight -= 1
        self.done.add(body)


@dataclass
class Watch:
    """Every start admission makes, checked against the limit in use at that moment."""

    over: list[str] = field(default_factory=list)
    limits: list[int] = field(default_factory=list)  # every limit set, in order


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> Watch:
    seen = Watch()
    take, set_limit = StartLine._take, StartGate.set_limit

    def checked_take(self: StartLine, ticket: Ticket, now: float) -> None:
        running, limit = self.book.running, self.gate.limit
        if running >= limit:
            seen.over.append(f"a start with {running} running at a limit of {limit}")
        take(self, ticket, now)

    def recorded_set_limit(self: StartGate, limit: int) -> None:
        set_limit(self, limit)
        seen.limits.append(self.limit)

    monkeypatch.setattr(StartLine, "_take", checked_take)
    monkeypatch.setattr(StartGate, "set_limit", recorded_set_limit)
    return seen


def backlog(downstream: Downstream, messages: int) -> tuple[MemorySQS, Router]:
    sqs, router = memory_queue(messages=messages)
    sqs.slow("ReceiveMessage", before=0.02)

    @router.handler(QUEUE, payload=str)
    async def handle(job: Job[str]) -> None:
        await downstream.call(job.payload)

    return sqs, router


def gauge() -> float | None:
    return REGISTRY.get_sample_value("worker_concurrency_limit", {"queue": QUEUE})


async def sample_until_done(running: Running, downstream: Downstream, messages: int, within: float) -> list[int]:
    """The limit in use every 0.25 s until every message is done."""
    admission = running.worker.pools[0].admission
    path: list[int] = []
    deadline = clock.now() + within
    while len(downstream.done) < messages and clock.now() < deadline:
        path.append(admission.limit)
        assert gauge() == admission.limit, "the gauge shows the limit in use"
        await asyncio.sleep(0.25)
    return path


def test_adaptive_finds_the_knee_and_never_starts_past_the_limit(watch: Watch) -> None:
    downstream = Downstream(capacity=6)
    messages = 1500

    async def scenario() -> None:
        sqs, router = backlog(downstream, messages)
        running = await start(
            sqs, router, WORKER_CONCURRENCY="48", WORKER_ADAPTIVE_CONCURRENCY="true", WORKER_PREFETCH="20"
        )
        path = await sample_until_done(running, downstream, messages, 600)
        assert len(downstream.done) == messages, f"{len(downstream.done)} of {messages} done"
        settled = path[len(path) // 2 :]
        assert set(settled) <= {6, 7}, f"the limit settled at {min(settled)}..{max(settled)}, not at the knee"
        assert max(path) <= 48
        await running.stop()

    vtime.run(scenario())
    assert watch.over == [], watch.over[:3]
    assert len(watch.limits) > 10, "the limit moved"


def test_a_shrunken_limit_holds_no_more_than_it_may_start_plus_the_prefetch(watch: Watch) -> None:
    """Receives ask for places by the limit in use: at a limit of 6 with a ceiling of 48
    the pool holds at most about 6 + the prefetch, not 48 + the prefetch."""
    downstream = Downstream(capacity=6)
    messages = 1000

    async def scenario() -> None:
        sqs, router = backlog(downstream, messages)
        running = await start(
            sqs, router, WORKER_CONCURRENCY="48", WORKER_ADAPTIVE_CONCURRENCY="true", WORKER_PREFETCH="5"
        )
        admission = running.worker.pools[0].admission
        await until(lambda: len(downstream.done) >= messages // 2, 600)
        most = 0
        while len(downstream.done) < messages - 50:
            assert admission.limit <= 8, admission.limit
            most = max(most, admission.in_use)
            await asyncio.sleep(0.01)
        assert most <= 8 + 5 + 10, f"held {most} waiting or running at a limit of at most 8"
        await running.stop()

    vtime.run(scenario())


def test_off_the_limit_is_the_concurrency_all_along(watch: Watch) -> None:
    downstream = Downstream(capacity=6)
    messages = 200

    async def scenario() -> None:
        sqs, router = backlog(downstream, messages)
        running = await start(sqs, router, WORKER_CONCURRENCY="12")
        path = await sample_until_done(running, downstream, messages, 600)
        assert set(path) == {12}
        assert running.worker.pools[0].admission.adaptive is None
        await running.stop()

    vtime.run(scenario())
    assert downstream.most == 12
    assert watch.limits == [], "never set"


def test_downstream_unavailable_brings_the_limit_down_and_it_recovers(
    watch: Watch, caplog: pytest.LogCaptureFixture
) -> None:
    """An outage (every call a 503 for 20 s) halves the limit per burst down to the floor;
    once the downstream answers again the limit climbs back to the knee, every message is
    done, and the log tells the moves, not every sample."""
    downstream = Downstream(capacity=6)
    messages = 2000

    async def scenario() -> None:
        sqs, router = backlog(downstream, messages)
        running = await start(
            sqs,
            router,
            WORKER_CONCURRENCY="48",
            WORKER_ADAPTIVE_CONCURRENCY="true",
            WORKER_CONCURRENCY_FLOOR="2",
            WORKER_RETRY_BASE_SECONDS="1",
            WORKER_RETRY_MAX_SECONDS="4",
        )
        admission = running.worker.pools[0].admission
        await until(lambda: len(downstream.done) >= 300, 600)
        assert admission.limit >= 6
        downstream.down_until = clock.now() + 20
        await until(lambda: clock.now() >= downstream.down_until, 60)
        assert admission.limit == 2, f"at the floor after the outage, not {admission.limit}"
        path = await sample_until_done(running, downstream, messages, 1200)
        assert len(downstream.done) == messages
        assert set(path[len(path) // 2 :]) <= {6, 7}, path
        await running.stop()

    with caplog.at_level(logging.INFO, logger="sqs_worker_engine"):
        vtime.run(scenario())
    told = [r for r in caplog.records if r.getMessage().startswith("concurrency limit")]
    assert watch.over == []
    assert 2 <= len(told) < len(watch.limits) / 2, f"{len(told)} lines for {len(watch.limits)} moves"
    assert any("-> 2 " in r.getMessage() for r in told), "reaching the floor is told"
    assert all(getattr(r, "queue", None) == QUEUE for r in told)


def test_a_handler_that_fails_fast_does_not_shrink_the_limit(watch: Watch) -> None:
    """Failures are no latency: a handler that raises in a millisecond half the time must
    not drag the baseline down and the limit with it."""
    messages = 600
    done: set[str] = set()

    async def scenario() -> None:
        sqs, router = memory_queue(messages=messages)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[Any]) -> None:
            if job.receive_count == 1 and int(job.payload[2:]) % 2:
                raise RuntimeError("fails fast once")
            await asyncio.sleep(BASE)
            done.add(job.payload)

        running = await start(
            sqs,
            router,
            WORKER_CONCURRENCY="16",
            WORKER_ADAPTIVE_CONCURRENCY="true",
            WORKER_RETRY_BASE_SECONDS="1",
        )
        await until(lambda: len(done) == messages, 600)
        assert running.worker.pools[0].admission.limit == 16
        await running.stop()

    vtime.run(scenario())
    assert len(done) == messages
    assert watch.over == []


def test_two_workers_sharing_the_downstream_keep_it_near_its_knee_together(watch: Watch) -> None:
    """Two replicas, each with a ceiling of 48, on one downstream of capacity 6: each sees
    the latency both cause and backs off, so together they hold it near the knee rather
    than at 96 in flight, and neither is starved."""
    downstream = Downstream(capacity=6)
    messages = 3000

    async def scenario() -> None:
        sqs, router = backlog(downstream, messages)
        env = {"WORKER_CONCURRENCY": "48", "WORKER_ADAPTIVE_CONCURRENCY": "true", "WORKER_PREFETCH": "10"}
        first = await start(sqs, router, **env)
        second = await start(sqs, router, **env)
        pools = [first.worker.pools[0], second.worker.pools[0]]
        await until(lambda: len(downstream.done) >= messages // 3, 600)
        inflight: list[int] = []
        limits: list[tuple[int, int]] = []
        while len(downstream.done) < messages - 200:
            inflight.append(downstream.inflight)
            limits.append((pools[0].admission.limit, pools[1].admission.limit))
            await asyncio.sleep(0.05)
        mean = sum(inflight) / len(inflight)
        assert mean <= 9, f"{mean:.1f} calls in flight on average, the knee is 6"
        assert min(min(pair) for pair in limits) >= 1
        shares = [sum(pair[i] for pair in limits) / len(limits) for i in (0, 1)]
        assert min(shares) >= 0.25 * max(shares), f"one replica starved: mean limits {shares}"
        print(f"two replicas: {mean:.1f} in flight on average, mean limits {shares[0]:.1f} and {shares[1]:.1f}")
        assert await until(lambda: len(downstream.done) == messages, 600)
        await first.stop()
        await second.stop()

    vtime.run(scenario())
    assert len(downstream.done) == messages
    assert watch.over == []


def test_a_quiet_spell_does_not_leave_the_limit_at_the_ceiling_for_the_next_backlog(watch: Watch) -> None:
    """Two messages a second for two minutes need one or two handlers: the limit grows no
    further than the queue used it, so the backlog that follows meets a limit near the
    knee, not 48 calls at once."""
    downstream = Downstream(capacity=6)
    trickle, burst = 240, 600

    async def scenario() -> None:
        sqs, router = backlog(downstream, 0)
        running = await start(sqs, router, WORKER_CONCURRENCY="48", WORKER_ADAPTIVE_CONCURRENCY="true")
        admission = running.worker.pools[0].admission
        for i in range(trickle):
            sqs.put(QUEUE, f"t-{i}")
            await asyncio.sleep(0.5)
        assert await until(lambda: len(downstream.done) == trickle, 60)
        before = admission.limit
        assert before <= 8, f"the limit grew to {before} while at most a few ran"
        print(f"limit after the quiet spell: {before}")
        downstream.most = 0
        for i in range(burst):
            sqs.put(QUEUE, f"b-{i}")
        assert await until(lambda: len(downstream.done) == trickle + burst, 600)
        assert downstream.most <= max(12, 2 * before), f"{downstream.most} calls at once at the burst"
        print(f"most calls at once at the burst: {downstream.most}")
        await running.stop()

    vtime.run(scenario())
    assert watch.over == []


def test_timeouts_halve_the_limit_through_the_worker(watch: Watch) -> None:
    """A downstream that hangs a call once more than 8 are in flight: such a job runs into
    its 1 s timeout and is retried. Fixed at 32, every call past the first 8 hangs, and so
    does every one started beside the hung ones: the queue is stuck. Adaptive with a ceiling
    of 32 halves its limit on the timeouts and ends every message."""

    def run(adaptive: bool, within: float) -> tuple[int, int, float, list[int]]:
        """Messages done, calls hung, virtual seconds taken, the limit sampled."""
        done: set[str] = set()
        hung = [0]
        inflight = [0]
        limits: list[int] = []
        took = [0.0]

        async def scenario() -> None:
            sqs, router = memory_queue(messages=400)

            @router.handler(QUEUE, payload=str)
            async def handle(job: Job[str]) -> None:
                inflight[0] += 1
                try:
                    if inflight[0] > 8:
                        hung[0] += 1
                        await asyncio.sleep(3600)
                    await asyncio.sleep(BASE)
                finally:
                    inflight[0] -= 1
                done.add(job.payload)

            running = await start(
                sqs,
                router,
                WORKER_CONCURRENCY="32",
                WORKER_ADAPTIVE_CONCURRENCY="true" if adaptive else "false",
                WORKER_JOB_TIMEOUT_MS="1000",
                WORKER_RETRY_BASE_SECONDS="1",
                WORKER_RETRY_MAX_SECONDS="2",
            )
            admission = running.worker.pools[0].admission
            began = clock.now()
            while len(done) < 400 and clock.now() - began < within:
                limits.append(admission.limit)
                await asyncio.sleep(0.25)
            took[0] = clock.now() - began
            await running.stop()

        vtime.run(scenario())
        return len(done), hung[0], took[0], limits

    done, hung, took, limits = run(adaptive=True, within=1200)
    assert done == 400, f"adaptive: {done} of 400 done"
    assert max(limits[len(limits) // 2 :]) <= 16, limits
    # Each timeout episode also ends slow start at half the limit it met (354 calls hung
    # when doubling resumed after every halving).
    assert hung <= 150, f"{hung} calls hung"
    fixed_done, fixed_hung, _, _ = run(adaptive=False, within=took)
    assert fixed_done < 100, f"fixed 32 did {fixed_done} in the {took:.0f} s adaptive took for 400"
    assert watch.over == []
    print(f"adaptive: 400 in {took:.1f} s, {hung} calls hung; fixed 32 in that time: {fixed_done}, {fixed_hung} hung")
