"""A service whose lifespan takes a minute to open (a database slow to answer), and marks
`TEST_LIFESPAN_MARKER` once it has begun (`WORKER_HANDLERS`)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

from sqs_worker_engine import Job, Router

router = Router()


@router.lifespan
async def resources() -> AsyncIterator[None]:
    Path(os.environ["TEST_LIFESPAN_MARKER"]).write_text("opening")
    await asyncio.sleep(60)
    yield


@router.handler(os.environ.get("TEST_QUEUE", "test-queue"))
async def handle(job: Job[object]) -> None:
    raise AssertionError("never reached: the worker was stopped while its lifespan opened")
