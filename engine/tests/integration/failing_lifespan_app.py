"""A service whose lifespan cannot open what its handlers need (`WORKER_HANDLERS`)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

from sqs_worker_engine import Job, Router

router = Router()


@router.lifespan
async def resources() -> AsyncIterator[None]:
    raise ConnectionRefusedError("database at db:5432 refused the connection")
    yield


@router.handler(os.environ.get("TEST_QUEUE", "test-queue"))
async def handle(job: Job[object]) -> None:
    raise AssertionError("never reached: the worker must not start")
