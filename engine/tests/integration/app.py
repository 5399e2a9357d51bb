"""Handlers for tests that run the worker as a separate process (`WORKER_HANDLERS`).

Each job appends what happened to TEST_RECORD_FILE (one JSON line per event), outside the
worker, so a test can count starts and completions across restarts and kills.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from typing import Literal

from pydantic import BaseModel

from sqs_worker_engine import Job, NonRetryableError, Router

QUEUE = os.environ.get("TEST_QUEUE", "test-queue")
RECORD_FILE = os.environ.get("TEST_RECORD_FILE", "records.jsonl")

router = Router()


class Work(BaseModel):
    id: str
    seconds: float = 0.0
    fail: Literal["no", "retry", "fatal"] = "no"
    cooperative: bool = False
    blocking_thread: bool = False  # awaits asyncio.to_thread on a call that blocks
    blocking_loop: bool = False  # blocks the event loop itself (a sync call in an async handler)


def record(event: str, job: Job[Work]) -> None:
    line = json.dumps(
        {"event": event, "id": job.payload.id, "receive_count": job.receive_count, "pid": os.getpid(), "t": time.time()}
    )
    with open(RECORD_FILE, "a") as handle:
        handle.write(line + "\n")


@router.handler(QUEUE, payload=Work)
async def handle(job: Job[Work]) -> None:
    record("start", job)
    job.logger.info("working", extra={"seconds": job.payload.seconds})
    logging.getLogger("app.library").info("a library logs too")
    if job.payload.fail == "fatal":
        raise NonRetryableError("asked to fail")
    if job.payload.fail == "retry":
        raise RuntimeError("asked to fail, retryable")
    if job.payload.blocking_loop:
        time.sleep(job.payload.seconds)
    elif job.payload.blocking_thread:
        await asyncio.to_thread(time.sleep, job.payload.seconds)
    elif job.payload.cooperative:
        # Long work that checkpoints: stop when the worker drains, give the message back.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(job.wait_stopping(), job.payload.seconds)
        job.raise_if_stopping()
    else:
        await asyncio.sleep(job.payload.seconds)
    record("done", job)
