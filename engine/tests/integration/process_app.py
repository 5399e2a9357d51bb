"""A handler of `executor="process"` for tests that run the worker as a separate process
(`WORKER_HANDLERS=tests.integration.process_app:router`): it records, with its process's
pid, logs as the example handler does (and as a library it calls would), then works
`seconds` in that process (a plain sleep, which nothing interrupts)."""

from __future__ import annotations

import logging
import time

from sqs_worker_engine import Job, Router

from .app import QUEUE, Work, record

router = Router()


def work(job: Job[Work]) -> None:
    """Module level, so each handler process imports it by name."""
    record("start", job)
    job.logger.info("working in its process", extra={"seconds": job.payload.seconds})
    logging.getLogger("app.library").info("a library logs in its process too")
    time.sleep(job.payload.seconds)
    record("done", job)


router.handler(QUEUE, payload=Work, executor="process")(work)
