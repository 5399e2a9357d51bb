"""What a pool tells the world: events, metrics, health and log lines, about each job and
about the queue (receives, pauses, the rate limit, tenants, the DLQ).

The one observer: the pool, its admission and its settling call this and write no metric
themselves, so that the pool reads as a message's life and the contract that dashboards
and listeners rely on (metric names, event names, their fields) lives in one file.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Callable

from prometheus_client import Counter, Gauge

from ..base import clock
from ..base.sqs import NOT_FOUND_CODES, error_code
from ..base.telemetry import metrics
from ..base.telemetry.events import Events
from ..base.telemetry.health import Health
from ..handlers.outcomes import OUTCOMES, Ending, describe
from .protections.adaptive import Limit, worth_telling

log = logging.getLogger("sqs_worker_engine.pool")


class QueueReport:
    def __init__(self, queue: str, worker_id: str, events: Events, health: Health, concurrency: int) -> None:
        self.queue = queue
        self.worker_id = worker_id
        self.events = events
        self.health = health
        self._loop_thread = threading.get_ident()
        # Metric children looked up once: labels() per message shows up in profiles.
        # Gauges that change with every message are read when scraped, not written each
        # time: a gauge's set or inc takes a lock, several times a message.
        self._inflight = metrics.INFLIGHT.labels(queue)
        self._inflight.set_function(lambda: 0)
        self._prefetched = metrics.PREFETCHED.labels(queue)
        self._prefetched.set_function(lambda: 0)
        self._duration = metrics.JOB_DURATION.labels(queue)
        self._receive_count = metrics.RECEIVE_COUNT.labels(queue)
        self._age = metrics.MESSAGE_AGE.labels(queue)
        self._processed = {o: metrics.JOBS_PROCESSED.labels(queue, o) for o in OUTCOMES}
        self._paused = metrics.PAUSED.labels(queue)
        self._paused.set(0)
        self._throttled = metrics.THROTTLED.labels(queue)
        self._tenant_gauges = (
            metrics.TENANTS_RUNNING.labels(queue),
            metrics.TENANTS_AT_CAP.labels(queue),
            metrics.TENANT_JOBS_PARKED.labels(queue),
        )
        metrics.CONCURRENCY.labels(queue).set(concurrency)
        self._limit = metrics.CONCURRENCY_LIMIT.labels(queue)
        self._limit.set(concurrency)
        self._limit_told = concurrency  # the limit the latest log line named
        self._shared: tuple[Gauge, Counter] | None = None  # the shared budget's series (shared_slots)

    # -- the queue ------------------------------------------------------------------

    def receive_ok(self) -> None:
        self.health.progress(self.queue)

    def receive_failed(self, exc: Exception, retry_in: float) -> None:
        code = error_code(exc)
        metrics.POLL_ERRORS.labels(self.queue, code).inc()
        self.health.sqs_result(False)
        self.health.progress(self.queue)  # backing off is progress: the loop is alive
        level = logging.ERROR if code in NOT_FOUND_CODES else logging.WARNING
        log.log(level, "receive failed (%s); retrying in %.1f s", code, retry_in, extra={"queue": self.queue})
        self.events.emit("error", worker_id=self.worker_id, error=exc, where=f"receive:{self.queue}")

    def paused(self, seconds: float, error: BaseException) -> None:
        metrics.PAUSES.labels(self.queue).inc()
        self._paused.set(1)
        self.health.paused.add(self.queue)
        log.warning(
            "downstream unavailable: receiving paused for %g s (%s)", seconds, error, extra={"queue": self.queue}
        )

    def resumed(self) -> None:
        self._paused.set(0)
        self.health.paused.discard(self.queue)
        log.info("downstream answers again: receiving resumed", extra={"queue": self.queue})

    def concurrency_limit(self, limit: Limit) -> None:
        """The adaptive limit moved: the gauge always, a log line when it moved enough."""
        current = limit.current
        self._limit.set(current)
        metrics.CONCURRENCY_FLOOR.labels(self.queue).set(limit.floor)  # what "stuck at its floor" compares with
        if worth_telling(self._limit_told, current, limit.floor, limit.ceiling):
            log.info(
                "concurrency limit %d -> %d (latency %s, baseline %s; floor %d, ceiling %d)",
                self._limit_told,
                current,
                _ms(limit.latency),
                _ms(limit.baseline),
                limit.floor,
                limit.ceiling,
                extra={"queue": self.queue},
            )
            self._limit_told = current

    def throttled(self, seconds: float) -> None:
        self._throttled.inc(seconds)

    def count_waiting(self, waiting: Callable[[], int]) -> None:
        """Messages waiting to start are counted by their owner (admission's ticket book)."""
        self._prefetched.set_function(waiting)

    def tenants(self, running: int, at_cap: int, parked: int) -> None:
        for gauge, value in zip(self._tenant_gauges, (running, at_cap, parked), strict=True):
            gauge.set(value)

    def tenant_capped(self, action: str, group: str, cap: int, job_id: str, delay: int | None) -> None:
        metrics.TENANT_CAPPED.labels(self.queue, action).inc()
        if delay is not None:
            log.info(
                "group at its cap of %d: message given back for %d s",
                cap,
                delay,
                extra={"queue": self.queue, "message_id": job_id, "group": group},
            )

    def shared_slots(self, in_use: int, given: bool) -> None:
        """The shared budget (budget.py): the slots this queue holds; `given`, one more given.
        Its series exist only where a budget is shared: made at the first report."""
        if self._shared is None:
            self._shared = (metrics.SHARED_IN_USE.labels(self.queue), metrics.SHARED_GIVEN.labels(self.queue))
        self._shared[0].set(in_use)
        if given:
            self._shared[1].inc()

    def batch(self, size: int) -> None:
        metrics.BATCH_SIZE.labels(self.queue).observe(size)

    def dlq_sent(self) -> None:
        metrics.DLQ_SENDS.labels(self.queue).inc()

    def dlq_send_failed(self, exc: Exception, retry_in: int) -> None:
        log.error(
            "could not send to the DLQ (%s); retrying the message in %d s instead",
            exc,
            retry_in,
            extra={"queue": self.queue},
        )

    # -- each job ---------------------------------------------------------------------

    def claimed(self, job_id: str, receive_count: int, age: float | None) -> None:
        """A message was received: its receive count, and its age when SQS said when it was
        sent. Told the facts, not handed the message: reporting never reads one."""
        self._receive_count.observe(receive_count)
        if age is not None:
            self._age.observe(age)
        if "job:claimed" in self.events.heard:  # a job's events: emitted only if someone listens
            self.events.emit("job:claimed", worker_id=self.worker_id, job_id=job_id, queue=self.queue)

    def started(self, job_id: str) -> None:
        if "job:started" in self.events.heard:
            self.events.emit("job:started", worker_id=self.worker_id, job_id=job_id, queue=self.queue)

    def count_running(self, running: Callable[[], int]) -> None:
        """The handler calls running are counted by their owner (calls.py): the gauge reads it."""
        self._inflight.set_function(running)

    def released(self, job_id: str, reason: str) -> None:
        """Given back without running (shutdown, or held behind its FIFO group)."""
        self._processed["released"].inc()
        self.events.emit("job:released", worker_id=self.worker_id, job_id=job_id, queue=self.queue, reason=reason)

    def ended(
        self,
        job_id: str,
        ending: Ending,
        will_retry: bool,
        trace: dict[str, str] | None = None,
        dead_lettered: bool = False,
    ) -> None:
        """`trace`: the job's trace and span ids, an exemplar of its duration (OpenMetrics);
        `dead_lettered`: its message went to the DLQ."""
        outcome = ending.outcome
        self._processed[outcome].inc()
        self.health.progress(self.queue)  # a job that ended is progress (health.py)
        if outcome != "released" and ending.called:  # 0.0 s too: shorter than the loop clock's tick
            self._duration.observe(ending.duration, exemplar=trace or None)
        if outcome == "success":
            log.debug("job completed in %.3f s", ending.duration)
            if "job:completed" in self.events.heard:
                self.events.emit(
                    "job:completed",
                    worker_id=self.worker_id,
                    job_id=job_id,
                    queue=self.queue,
                    result=None,
                    duration=ending.duration,
                )
        elif outcome == "dropped":
            log.info("message dropped: %s", describe(ending.error))
            self.events.emit(
                "job:dropped", worker_id=self.worker_id, job_id=job_id, queue=self.queue, reason=str(ending.error)
            )
        elif outcome in ("released", "lease_lost"):
            log.info("job released unsettled (%s)", outcome)
            self.events.emit("job:released", worker_id=self.worker_id, job_id=job_id, queue=self.queue, reason=outcome)
        else:
            error = ending.error
            # A retryable failure on its last attempt is dead-lettered: the line says so, or
            # the last words about the message would be "retry".
            label = "retry, no attempts left: dead-lettered" if outcome == "retry" and dead_lettered else outcome
            log.warning("job failed (%s): %s", label, describe(error), exc_info=error if outcome == "retry" else None)
            self.events.emit(
                "job:failed",
                worker_id=self.worker_id,
                job_id=job_id,
                queue=self.queue,
                error=error,
                will_retry=will_retry,
                outcome=outcome,
            )

    def progress_reporter(self, job_id: str) -> Callable[[float, str | None], None]:
        """`job.progress` for one job: safe from the loop, threads alike. (A partial: made
        for every job, most of which never report progress.)"""
        return functools.partial(self._progress, asyncio.get_running_loop(), job_id)

    def _progress(self, loop: asyncio.AbstractEventLoop, job_id: str, percent: float, message: str | None) -> None:
        def emit() -> None:
            self.health.progress(self.queue)
            self.events.emit(
                "job:progress",
                worker_id=self.worker_id,
                job_id=job_id,
                queue=self.queue,
                percent=percent,
                message=message,
            )

        if threading.get_ident() == self._loop_thread:
            emit()
        else:
            clock.from_thread(loop, emit)  # after the loop closed: nobody listens, the handler goes on


def _ms(seconds: float | None) -> str:
    return "unmeasured" if seconds is None else f"{seconds * 1000:.0f} ms"


def shared_budget(total: int) -> None:
    """The queues of this process share `total` handler slots (WORKER_SHARED_CONCURRENCY)."""
    metrics.SHARED_CONCURRENCY.set(total)
