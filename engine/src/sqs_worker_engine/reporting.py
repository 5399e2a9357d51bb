"""What a pool tells the world about each job: events, metrics and log lines.

One place for them, so that the pool reads as a message's life and the contract that
dashboards and listeners rely on (metric names, event names, their fields) lives in one file.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from . import metrics
from .delivery import Delivery
from .events import Events
from .health import Health
from .outcomes import Outcome

log = logging.getLogger("sqs_worker_engine.pool")
OUTCOMES: tuple[Outcome, ...] = (
    "success",
    "retry",
    "dead_letter",
    "timeout",
    "lease_lost",
    "released",
    "dropped",
    "deferred",
)


@dataclass(frozen=True)
class Ending:
    """How one handler call ended."""

    outcome: Outcome
    error: BaseException | None
    duration: float
    requested_delay: float | None = None


def describe(error: BaseException | None) -> str:
    return "" if error is None else f"{type(error).__name__}: {error}"


class JobReport:
    def __init__(self, queue: str, worker_id: str, events: Events, health: Health) -> None:
        self.queue = queue
        self.worker_id = worker_id
        self.events = events
        self.health = health
        self._loop_thread = threading.get_ident()
        # Metric children looked up once: labels() per message shows up in profiles.
        self._inflight = metrics.INFLIGHT.labels(queue)
        self._duration = metrics.JOB_DURATION.labels(queue)
        self._receive_count = metrics.RECEIVE_COUNT.labels(queue)
        self._age = metrics.MESSAGE_AGE.labels(queue)
        self._processed = {o: metrics.JOBS_PROCESSED.labels(queue, o) for o in OUTCOMES}
        self._inflight.set(0)

    def claimed(self, delivery: Delivery, now_wall: float) -> float:
        """A message was received; returns its age in seconds (0 if SQS did not say)."""
        self._receive_count.observe(delivery.receive_count)
        age = 0.0
        sent_ms = delivery.message.get("Attributes", {}).get("SentTimestamp")
        if sent_ms is not None:
            age = max(0.0, now_wall - int(sent_ms) / 1000)
            self._age.observe(age)
        self.events.emit("job:claimed", worker_id=self.worker_id, job_id=delivery.message_id, queue=self.queue)
        return age

    def started(self, job_id: str) -> None:
        self.events.emit("job:started", worker_id=self.worker_id, job_id=job_id, queue=self.queue)

    def running(self, change: int) -> None:
        self._inflight.inc(change)

    def released(self, job_id: str, reason: str) -> None:
        """Given back without running (shutdown, or held behind its FIFO group)."""
        self._processed["released"].inc()
        self.events.emit("job:released", worker_id=self.worker_id, job_id=job_id, queue=self.queue, reason=reason)

    def ended(self, job_id: str, ending: Ending, will_retry: bool, trace: dict[str, str] | None = None) -> None:
        """`trace`: the job's trace and span ids, an exemplar of its duration (OpenMetrics)."""
        outcome = ending.outcome
        self._processed[outcome].inc()
        if outcome != "released" and ending.duration:
            self._duration.observe(ending.duration, exemplar=trace or None)
        if outcome == "success":
            log.debug("job completed in %.3f s", ending.duration)
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
            log.warning("job failed (%s): %s", outcome, describe(error), exc_info=error if outcome == "retry" else None)
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
        """`job.progress` for one job: safe from the loop, threads alike."""
        loop = asyncio.get_running_loop()

        def report(percent: float, message: str | None) -> None:
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
                loop.call_soon_threadsafe(emit)

        return report
