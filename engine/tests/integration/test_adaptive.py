"""Adaptive concurrency against LocalStack: a worker whose handler calls a slow downstream
(capacity 6: 50 ms a call up to 6 in flight, quadratically slower beyond) with a ceiling
of 48. It processes everything, once, and its /metrics shows the limit in use below the
ceiling. Fixed 6 and fixed 48 run the same backlog beside it: the ratios of the rates are
printed, never asserted (real time on a shared machine; the exact figures are bench/adaptive.py's,
on virtual time)."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from typing import Any

from sqs_worker_engine import Job, Router
from sqs_worker_engine.doubles.emulators import free_port

from ..support import Sqs, env_for, http_get, metric, running_worker, wait_for

CAPACITY = 6
BASE = 0.05
MESSAGES = 400


class Downstream:
    def __init__(self) -> None:
        self.inflight = 0
        self.most = 0

    async def call(self) -> None:
        self.inflight += 1
        self.most = max(self.most, self.inflight)
        try:
            await asyncio.sleep(BASE * max(1.0, (self.inflight / CAPACITY) ** 2))
        finally:
            self.inflight -= 1


def run_backlog(
    sqs: Sqs, endpoint: str, health_file: str, adaptive: bool, concurrency: int = 48
) -> tuple[float, Counter[int], list[float], str]:
    """Messages per second, runs per message, the limit gauge sampled, and /metrics at the end."""
    queue = sqs.create()
    sqs.send(queue, [{"n": i} for i in range(MESSAGES)])
    downstream = Downstream()
    done: Counter[int] = Counter()
    limits: list[float] = []
    scraped: list[str] = []
    times: list[float] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        await downstream.call()
        done[job.payload["n"]] += 1

    port = free_port()

    async def scenario() -> None:
        env = env_for(
            endpoint,
            queue.name,
            health_file,
            WORKER_CONCURRENCY=concurrency,
            WORKER_ADAPTIVE_CONCURRENCY="true" if adaptive else "false",
            WORKER_METRICS_PORT=port,
            WORKER_METRICS_HOST="127.0.0.1",
        )
        async with running_worker(env, router):
            times.append(time.monotonic())

            async def sample() -> None:
                while True:
                    limits.append(metric("worker_concurrency_limit", queue=queue.name))
                    await asyncio.sleep(0.1)

            sampler = asyncio.create_task(sample())
            await wait_for(lambda: len(done) == MESSAGES, timeout=300, what=f"{MESSAGES} messages")
            times.append(time.monotonic())
            sampler.cancel()
            scraped.append((await http_get(port, "/metrics"))[1])
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), what="the queue empty")

    asyncio.run(scenario())
    return MESSAGES / (times[1] - times[0]), done, limits, scraped[0]


def test_adaptive_concurrency_processes_everything_and_reports_its_limit(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    rate, done, limits, scraped = run_backlog(sqs, localstack_endpoint, health_file, adaptive=True)
    assert set(done.values()) == {1} and len(done) == MESSAGES, "each processed exactly once"
    found = re.findall(r'^worker_concurrency_limit\{queue="([^"]+)"\} (\S+)$', scraped, re.MULTILINE)
    assert found, "the limit gauge is exported on /metrics"
    assert limits and all(1 <= v <= 48 for v in limits), limits
    assert max(limits[len(limits) // 2 :]) < 48, f"the limit stayed below the ceiling once it found the knee: {limits}"
    fixed, fixed_done, fixed_limits, _ = run_backlog(sqs, localstack_endpoint, health_file, adaptive=False)
    assert len(fixed_done) == MESSAGES and set(fixed_limits) == {48.0}
    best, best_done, _, _ = run_backlog(sqs, localstack_endpoint, health_file, adaptive=False, concurrency=CAPACITY)
    assert len(best_done) == MESSAGES
    print(
        f"capacity {CAPACITY}, ceiling 48, {MESSAGES} messages: adaptive {rate:.1f}/s, fixed {CAPACITY} {best:.1f}/s, "
        f"fixed 48 {fixed:.1f}/s; adaptive / fixed {CAPACITY} {rate / best:.2f}, adaptive / fixed 48 "
        f"{rate / fixed:.1f}x; adaptive limit in the second half "
        f"{min(limits[len(limits) // 2 :]):g}..{max(limits[len(limits) // 2 :]):g}"
    )
