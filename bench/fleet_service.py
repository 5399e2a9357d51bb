"""The worker that bench/fleet_check.py runs as real processes: `python bench/fleet_service.py run`.

Each message's body is its job: `{"id": ..., "seconds": ...}`. The handler sleeps that long
and appends one line per completion, `<unix time> <id> <pid>`, to FLEET_COMPLETIONS (one
write each, O_APPEND: lines from several processes never interleave), so the check counts
completions over time across every process, whatever happens to them.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from pydantic import BaseModel
from sqs_worker_engine import Job, Router, ServiceDefaults
from sqs_worker_engine.entry import main

QUEUE = os.environ.get("WORKER_QUEUES", "fleet-check")
COMPLETIONS = os.environ.get("FLEET_COMPLETIONS", "completions.log")

router = Router()


class Work(BaseModel):
    id: str
    seconds: float


@router.handler(QUEUE, payload=Work)
async def work(job: Job[Work]) -> None:
    await asyncio.sleep(job.payload.seconds)
    line = f"{time.time():.3f} {job.payload.id} {os.getpid()}\n".encode()
    fd = os.open(COMPLETIONS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


SERVICE = ServiceDefaults(
    name="fleet-check",
    version="0",
    command="python bench/fleet_service.py",
    environ={"WORKER_HANDLERS": "fleet_service:router"},
)

if __name__ == "__main__":
    sys.exit(main(SERVICE))
