"""A handler of `executor="process"` whose jobs may kill their process, for tests that run
the worker as a separate process (`WORKER_HANDLERS=tests.integration.crash_app:router`).
A "kill" job waits until TEST_NEIGHBOURS other jobs have started (so they share its pool
when it dies), then exits its process abruptly; the others record, with their process's
pid and receive count, and work `seconds`. TEST_IMPORT_SECONDS makes each process's
import of this module take that long (a service pulling in a large SDK)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from pydantic import BaseModel

from sqs_worker_engine import Job, Router

from .app import QUEUE, RECORD_FILE

time.sleep(float(os.environ.get("TEST_IMPORT_SECONDS", "0")))

NEIGHBOURS = int(os.environ.get("TEST_NEIGHBOURS", "0"))
router = Router()


class Task(BaseModel):
    id: str
    seconds: float = 0.0
    kill: bool = False


def record(event: str, job: Job[Task]) -> None:
    line = {"event": event, "id": job.payload.id, "receive_count": job.receive_count, "pid": os.getpid()}
    with open(RECORD_FILE, "a") as handle:
        handle.write(json.dumps(line) + "\n")


def others_started(me: str) -> int:
    path = Path(RECORD_FILE)
    lines = path.read_text().splitlines() if path.exists() else []
    return len({e["id"] for e in map(json.loads, lines) if e["event"] == "start" and e["id"] != me})


def work(job: Job[Task]) -> None:
    """Module level, so each handler process imports it by name."""
    record("start", job)
    if job.payload.kill:
        deadline = time.monotonic() + 60
        while others_started(job.payload.id) < NEIGHBOURS and time.monotonic() < deadline:
            time.sleep(0.02)
        os._exit(1)
    time.sleep(job.payload.seconds)
    record("done", job)


router.handler(QUEUE, payload=Task, executor="process")(work)
