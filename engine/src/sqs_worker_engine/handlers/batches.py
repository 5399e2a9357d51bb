"""Batch handlers: one call with many jobs, while each message lives its own life.

    @router.batch_handler("events", payload=Event, size=50, wait_ms=200)
    async def handle(jobs: list[Job[Event]]) -> dict[str, Any] | None:
        rejected = await warehouse.insert_many([j.payload for j in jobs])
        return {"batchItemFailures": [{"itemIdentifier": jobs[i].id} for i in rejected]}

The pool runs every message exactly as for a single-message handler: its own lease and
heartbeats, job timeout, retry delay, receive count and dead-lettering; a lost lease or a
timeout ends only that job. Only the handler call is shared. The `Collector` gathers jobs
ready to run until `size` of them wait, or `wait` seconds after the first, or no more can
come (every slot of the pool holds one), and calls the handler once with them: a batch
can hold more than one receive's 10 when the concurrency allows it. A message whose body
fails the payload model is dead-lettered before it reaches a batch.

What the call returns, as with Lambda's partial batch responses (`batchItemFailures`):
None or no failures: every job succeeded. Failures: those jobs are retried (the error says
the batch handler reported them), the rest deleted. A response that is not that shape,
or names a job that is not in the batch, fails the whole batch, as Lambda does, with a
reason naming what is wrong. An exception ends every job in the batch with it
(NonRetryableError: all to the DLQ; RetryLater, DownstreamUnavailable as for one job).

FIFO queues: a group's next message runs only once the one before it is settled, so a
batch holds at most one message of each group, and a failed message holds back the rest
of its group exactly as with single jobs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .job import Job

FAILURES = "batchItemFailures"
ITEM_ID = "itemIdentifier"


class BatchItemFailedError(Exception):
    """The batch handler reported this job as failed (it is retried)."""


class BatchResponseError(Exception):
    """The batch handler's response was not a partial batch response: the whole batch failed."""


def item_failures(ids: Sequence[str], response: object) -> set[str]:
    """The job ids a batch handler's `response` reports failed; BatchResponseError, naming
    what is wrong, for anything but None or {"batchItemFailures": [{"itemIdentifier": id}]}."""
    if response is None:
        return set()
    if not isinstance(response, Mapping) or FAILURES not in response:
        raise BatchResponseError(
            f'a batch handler returns None or {{"{FAILURES}": [{{"{ITEM_ID}": job.id}}, ...]}}, '
            f"not {type(response).__name__}"
        )
    items = response[FAILURES]
    if not isinstance(items, Sequence) or isinstance(items, str):
        raise BatchResponseError(f"{FAILURES} must be a list, not {type(items).__name__}")
    known, failed = set(ids), set()
    for n, item in enumerate(items):
        job_id = item.get(ITEM_ID) if isinstance(item, Mapping) else None
        if not isinstance(job_id, str) or not job_id:
            raise BatchResponseError(f"{FAILURES}[{n}] has no {ITEM_ID} (a job id): {item!r}")
        if job_id not in known:
            raise BatchResponseError(f"{FAILURES}[{n}] names {job_id!r}, which is not a job of this batch")
        failed.add(job_id)
    return failed


# Starts the handler on a list of jobs: (its response, done once the work has really
# ended: for a thread, when the call returns, even after the response was given up).
Call = Callable[[list[Job[Any]]], tuple[asyncio.Future[Any], asyncio.Future[None]]]


@dataclass(eq=False)
class _Batch:
    jobs: list[Job[Any]] = field(default_factory=list)
    results: list[asyncio.Future[None]] = field(default_factory=list)
    ended: asyncio.Future[None] | None = None  # done once the handler's work has ended
    call: asyncio.Future[Any] | None = None  # the handler's response


class Collector:
    """Gathers one pool's ready jobs into handler calls (see the module docstring).
    `most` bounds a batch: the handler's size, at most the pool's concurrency (more can
    never be ready at once)."""

    def __init__(self, call: Call, most: int, wait: float, usable: Callable[[Job[Any]], bool] | None = None) -> None:
        """`usable(job)`: may the job still run (its lease held)? A job that lost its lease
        while it waited for company is left out of the call (its owner gives it up)."""
        self._call = call
        self.usable = usable or (lambda job: True)
        self.most = most
        self.wait = wait
        self._open = _Batch()
        self._timer: asyncio.TimerHandle | None = None
        self.closing = False  # shutdown: nobody more is coming, so nothing waits

    def submit(self, job: Job[Any]) -> tuple[asyncio.Future[None], asyncio.Future[None]]:
        """Put `job` in the open batch. Returns its result (None, or its failure as the
        exception) and a future done once the handler's work for its batch has ended.
        Cancelling the result gives the job up: it is left out of a call not yet made, and
        once every job of a batch is given up, the call is cancelled."""
        loop = asyncio.get_running_loop()
        batch = self._open
        if batch.ended is None:
            batch.ended = loop.create_future()
        result: asyncio.Future[None] = loop.create_future()
        result.add_done_callback(lambda _r: self._given_up(batch))
        batch.jobs.append(job)
        batch.results.append(result)
        if sum(1 for r in batch.results if not r.done()) >= self.most or self.closing:
            self.flush()
        elif self._timer is None:
            self._timer = loop.call_later(self.wait, self.flush)
        return result, batch.ended

    def flush(self) -> None:
        """Call the handler with the open batch now (full, its wait over, or shutdown)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._open = self._open, _Batch()
        if not batch.jobs:
            return
        assert batch.ended is not None
        live = [
            (job, result)
            for job, result in zip(batch.jobs, batch.results, strict=True)
            if not result.done() and self.usable(job)
        ]
        if not live:  # all given up while they waited
            batch.ended.set_result(None)
            return
        batch.jobs, batch.results = [job for job, _ in live], [result for _, result in live]
        batch.call, work_ended = self._call(batch.jobs)
        batch.call.add_done_callback(lambda call: self._answer(batch, call))
        work_ended.add_done_callback(lambda _w: batch.ended.set_result(None) if batch.ended else None)

    def close(self) -> None:
        """Shutdown: what waits is called now, and later jobs do not wait for company."""
        self.closing = True
        self.flush()

    @staticmethod
    def _answer(batch: _Batch, call: asyncio.Future[Any]) -> None:
        """Each job's result from the handler's response (see item_failures)."""
        ids = [job.id for job in batch.jobs]
        errors: list[BaseException | None]
        if call.cancelled():
            errors = [asyncio.CancelledError()] * len(ids)
        elif (error := call.exception()) is not None:
            errors = [error] * len(ids)
        else:
            try:
                failed = item_failures(ids, call.result())
            except BatchResponseError as exc:
                errors = [exc] * len(ids)
            else:
                errors = [
                    BatchItemFailedError("reported failed by the batch handler") if i in failed else None for i in ids
                ]
        for result, error in zip(batch.results, errors, strict=True):
            if result.done():
                continue
            if error is None:
                result.set_result(None)
            else:
                result.set_exception(error)

    @staticmethod
    def _given_up(batch: _Batch) -> None:
        if batch.call is not None and not batch.call.done() and all(r.cancelled() for r in batch.results):
            batch.call.cancel()


def failures(jobs: Iterable[Job[Any]]) -> dict[str, list[dict[str, str]]]:
    """The partial batch response that reports `jobs` failed (all others succeeded)."""
    return {FAILURES: [{ITEM_ID: job.id} for job in jobs]}
