"""Runs the real worker against the in-memory SQS model on virtual time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from sqs_worker_engine.base import clock
from sqs_worker_engine.doubles.memory import MemorySQS
from sqs_worker_engine.handlers.router import Router
from sqs_worker_engine.process.settings import ServiceDefaults, WorkerConfig, load_settings
from sqs_worker_engine.process.worker import Worker

QUEUE = "jobs"
BASE_ENV = {
    "AWS_REGION": "us-east-1",
    "WORKER_METRICS_PORT": "0",
    "WORKER_BACKLOG_SAMPLE_SECONDS": "3600",
    "WORKER_CONCURRENCY": "4",
    "WORKER_VISIBILITY_TIMEOUT_SECONDS": "30",
    "WORKER_JOB_TIMEOUT_MS": "120000",
    "WORKER_SHUTDOWN_TIMEOUT_MS": "150000",
}


def config(queue: str = QUEUE, **env: str) -> WorkerConfig:
    return load_settings({**BASE_ENV, "WORKER_QUEUES": queue, **env}, ServiceDefaults(name="model"))


@dataclass
class Recorder:
    """What handlers did: who ran, and whether one message ever ran twice at once."""

    running: dict[str, int] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)
    finished: list[str] = field(default_factory=list)
    overlaps: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)

    def enter(self, body: str) -> None:
        self.runs[body] = self.runs.get(body, 0) + 1
        self.order.append(body)
        if self.running.get(body, 0):
            self.overlaps.append(body)
        self.running[body] = self.running.get(body, 0) + 1

    def leave(self, body: str, ok: bool) -> None:
        self.running[body] -= 1
        if ok:
            self.finished.append(body)


class Running:
    """A started worker; `stop()` is what SIGTERM does."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.task = asyncio.create_task(worker.run())
        self.stopped_at: float | None = None
        self.task.add_done_callback(lambda _t: setattr(self, "stopped_at", clock.now()))

    async def stop(self) -> float:
        """SIGTERM, then wait for the worker to exit; returns how long that took."""
        began = clock.now()
        self.worker.stop("SIGTERM")
        await self.task
        return clock.now() - began


def memory_queue(
    queue: str = QUEUE, *, dlq_after: int | None = None, messages: int = 0, **attributes: str
) -> tuple[MemorySQS, Router]:
    """An in-memory SQS with `queue` on it, and an empty Router for the test's handlers.

    `dlq_after`: the queue gets its DLQ (`<queue>-dlq`), which takes a message at that many
    receives. `messages`: that many are waiting on the queue, with bodies `m-0`, `m-1`, ...
    `attributes`: the queue's own (VisibilityTimeout, ...)."""
    sqs = MemorySQS()
    if dlq_after is None:
        sqs.create_queue(queue, **attributes)
    else:
        sqs.create_queue_with_dlq(queue, max_receive_count=dlq_after, **attributes)
    for i in range(messages):
        sqs.put(queue, f"m-{i}")
    return sqs, Router()


async def start(sqs: MemorySQS, router: Router, queue: str = QUEUE, **env: str) -> Running:
    running = Running(Worker(config(queue, **env), router, client=sqs))
    await until(lambda: running.worker.pools != [] or running.task.done(), 60)
    return running


async def until(condition: Callable[[], bool], within: float, step: float = 0.05) -> bool:
    """Wait (virtual time) until `condition()` holds; False if it did not within `within` s."""
    deadline = clock.now() + within
    while not condition():
        if clock.now() >= deadline:
            return False
        await asyncio.sleep(step)
    return True
