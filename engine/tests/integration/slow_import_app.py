"""Handlers whose import takes a while (like a service pulling in a large SDK), so a test
can signal a worker that is still importing. Writes TEST_IMPORT_MARKER when the import
begins."""

from __future__ import annotations

import os
import time
from pathlib import Path

from sqs_worker_engine import Job, Router

Path(os.environ["TEST_IMPORT_MARKER"]).write_text("importing")
time.sleep(float(os.environ.get("TEST_IMPORT_SECONDS", "3")))

router = Router()


@router.handler(os.environ.get("TEST_QUEUE", "test-queue"))
async def handle(job: Job[object]) -> None:
    raise AssertionError("a worker stopped while starting must not receive anything")
