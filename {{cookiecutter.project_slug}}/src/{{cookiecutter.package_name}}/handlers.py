"""Your handlers: the one file of this service you are meant to edit.

Map each queue in WORKER_QUEUES to a handler with `@router.handler(queue)`:

- `async def` handlers run on the event loop (use them for I/O); plain `def` handlers run
  in a thread pool sized to the queue's concurrency; `executor="process"` runs a plain
  module-level function in worker processes for CPU-bound work.
- Return normally and the message is deleted. Raise `NonRetryableError` (or let the
  payload fail its model) and it goes to the dead-letter queue with the error recorded.
  Raise anything else and it is retried with backoff, until SQS dead-letters it after
  maxReceiveCount deliveries.
- Declare a few examples of each payload on its model, pydantic's standard way
  (`model_config = ConfigDict(json_schema_extra={"examples": [...]})`, below): messages
  your handler processes successfully. `tests/test_end_to_end.py` runs the whole service
  against the SQS emulator with them (and a body the model refuses, which must reach the
  DLQ), so it needs no change when you replace `Task` and `handle_task` with your own.
- `tests/test_handlers.py` shows how to test a handler without AWS
  (`sqs_worker_engine.testing.run_handler`).
- What handlers share (a database pool, an HTTP client) is opened and closed by a
  `@router.lifespan` (at the end of this file): the worker opens it before its first
  receive and closes it after the drain; handlers reach it as `job.resources`.
- Delivery is at-least-once: a crash or SIGKILL mid-job means the message runs again.
  Make handlers idempotent (upsert rather than insert, key side effects on `job.id` or a
  business key, check before you send an email twice).
- Long work should check at its checkpoints: `job.cancelled` means stop now (job
  timeout, lost lease); `job.stopping` means the worker is draining after SIGTERM, so
  finish if you can, or save progress and `job.raise_if_stopping()` to hand the message
  to another worker at once.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, ConfigDict, Field
from sqs_worker_engine import Job, NonRetryableError, Router
{%- if cookiecutter.use_idempotency == "yes" %}

from .idempotency import once
{%- endif %}

router = Router()
# The queue this handler serves (also the default of WORKER_QUEUES, in service.py and deploy/).
QUEUE = "{{ cookiecutter.queue_name }}"


class Task(BaseModel):
    """The payload this queue carries. Replace it with your own model."""

    # Messages this queue's handler processes successfully (the end-to-end test sends them).
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"task_id": "example-1", "work_ms": 50}, {"task_id": "example-2"}]}
    )

    task_id: str = Field(min_length=1)
    work_ms: int = Field(default=0, ge=0, le=3_600_000)
    fail: bool = False  # fail for good: straight to the dead-letter queue
    fail_attempts: int = Field(default=0, ge=0)  # fail (retryably) on the first N deliveries


class TransientError(Exception):
    """A failure worth retrying (a timeout, a 503): any exception but NonRetryableError is one."""


@router.handler(QUEUE, payload=Task)
async def handle_task(job: Job[Task]) -> None:
    task = job.payload
    if task.fail:
        raise NonRetryableError(f"task {task.task_id} asked to fail")
    if job.receive_count <= task.fail_attempts:
        raise TransientError(f"task {task.task_id} fails on delivery {job.receive_count} of {task.fail_attempts}")
    job.progress(0, "started")
    # Your work goes here. Sleep in steps so a shutdown can stop it at a checkpoint.
    remaining = task.work_ms / 1000
    while remaining > 0 and not job.cancelled:
        step = min(remaining, 0.5)
        await asyncio.sleep(step)
        remaining -= step
    job.raise_if_cancelled()
{%- if cookiecutter.use_idempotency == "yes" %}
    # The side effect runs once per task_id, however often the message is delivered.
    await asyncio.to_thread(record_completion, task=task)
{%- endif %}
    job.logger.info("task done", extra={"task_id": task.task_id, "work_ms": task.work_ms})
{%- if cookiecutter.use_idempotency == "yes" %}


@once(key="task_id")
def record_completion(task: Task) -> dict[str, str]:
    """The part that must not happen twice (charge, email, external write): put it here."""
    return {"task_id": task.task_id}
{%- endif %}


# What handlers share: opened before the first receive, closed after the drain. What it
# yields is `job.resources` in every handler, and the argument of a readiness check that
# takes one; if it raises, the worker refuses to start with the reason. For example, with
# asyncpg (`run_handler` in tests runs it too, or takes `resources=` as a stand-in):
#
# @dataclass
# class Resources:
#     db: asyncpg.Pool
#
# @router.lifespan
# async def resources() -> AsyncIterator[Resources]:
#     async with asyncpg.create_pool(os.environ["DATABASE_URL"]) as db:
#         yield Resources(db=db)
#
# An HTTP client (httpx.AsyncClient, say) opens the same way; in the tests,
# `sqs_worker_engine.testing.stand_in_http` serves a stand-in of the API on 127.0.0.1
# (tests/test_end_to_end.py shows it).
#
# Readiness: add a check for each dependency a job cannot run without. /readyz fails while
# one fails (the platform stops sending traffic); liveness never looks at them.
#
# @router.readiness_check("database")
# async def database_ready(resources: Resources) -> bool:
#     async with resources.db.acquire() as conn:
#         return await conn.fetchval("select 1") == 1
#
# With DB_POOL_SIZE set, feed the db_pool_in_use gauge from your pool's hooks:
#     from sqs_worker_engine import set_db_pool_in_use
#     set_db_pool_in_use(db.get_size() - db.get_idle_size())
