"""Runs the real worker against the in-memory SQS model on virtual time: the set-up is
sqs_worker_engine.testing's memory worker; here, the model's settings, its waits and its
record of what handlers did."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from sqs_worker_engine.base import clock
from sqs_worker_engine.doubles.memory import MemorySQS
from sqs_worker_engine.handlers.router import Router
from sqs_worker_engine.process.settings import WorkerConfig
from sqs_worker_engine.testing import MEMORY_QUEUE as QUEUE
from sqs_worker_engine.testing import RunningWorker as Running
from sqs_worker_engine.testing import memory_config, memory_sqs, memory_worker

__all__ = ["QUEUE", "Recorder", "Running", "config", "memory_queue", "start", "until"]

# The model's settings, under the test's own (the set-up itself: sqs_worker_engine.testing).
MODEL_ENV = {
    "WORKER_CONCURRENCY": "4",
    "WORKER_VISIBILITY_TIMEOUT_SECONDS": "30",
    "WORKER_JOB_TIMEOUT_MS": "120000",
    "WORKER_SHUTDOWN_TIMEOUT_MS": "150000",
}
# A worker writes its progress file once a second, and the model's seconds are virtual: a
# composition writes it thousands of times, each an atomic rename, which on a journalled disk
# waits for the file's data (test_shared_compositions spent half its time there). The same
# writes, where the system has a tmpfs, go to memory.
if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
    MODEL_ENV["WORKER_HEALTH_FILE"] = "/dev/shm/sqs-worker-engine-model.progress"


def config(queue: str = QUEUE, **env: str) -> WorkerConfig:
    return memory_config(queue, name="model", **{**MODEL_ENV, **env})


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


def memory_queue(
    queue: str = QUEUE, *, dlq_after: int | None = None, messages: int = 0, **attributes: str
) -> tuple[MemorySQS, Router]:
    """An in-memory SQS with `queue` on it, and an empty Router for the test's handlers.

    `dlq_after`: the queue gets its DLQ (`<queue>-dlq`), which takes a message at that many
    receives. `messages`: that many are waiting on the queue, with bodies `m-0`, `m-1`, ...
    `attributes`: the queue's own (VisibilityTimeout, ...)."""
    return memory_sqs(queue, messages=messages, dlq_after=dlq_after, attributes=attributes), Router()


async def start(sqs: MemorySQS, router: Router, queue: str = QUEUE, **env: str) -> Running:
    """The worker started, once its pools exist (or it has already exited)."""
    running = memory_worker(sqs, router, queue, name="model", **{**MODEL_ENV, **env})
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
