"""What a handler sees: one received message, its payload, attempts and cancellation."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..base.errors import JobCancelled
from ..base.telemetry import logs

if TYPE_CHECKING:
    from ..formats.envelopes import Envelope
    from ..formats.offload import S3Pointer

P = TypeVar("P")

# What the router's lifespan yielded, set by the worker (and by `testing.run_handler`) before
# its first receive; a Job takes it when it is made, so it reaches the handler in whatever
# task or thread runs it.
RESOURCES: contextvars.ContextVar[Any] = contextvars.ContextVar("sqs_worker_engine.resources", default=None)


@dataclass(eq=False)
class Job(Generic[P]):
    """One delivery of one SQS message.

    `receive_count` is the attempt number: SQS's ApproximateReceiveCount (1 on the first
    delivery; it also counts deliveries given back unrun), plus, for a FIFO message
    retried in place behind which group-mates wait, the retries run in place.
    `max_retries` is the queue's maxReceiveCount minus one, or None without a DLQ: once
    `receive_count` reaches maxReceiveCount, a failure sends the message to the DLQ.

    Two signals, for checkpoints in long work:
    - `stopping`: the worker is draining (SIGTERM). Finish if you can within the shutdown
      timeout; long work may instead save its progress and call `raise_if_stopping()`,
      which gives the message back at once for another worker to resume.
    - `cancelled`: stop now; the result will not count (job timeout, lost lease, or the
      shutdown timeout ran out). `cancel_reason` says which.
    """

    id: str
    queue: str
    body: str
    payload: P
    attributes: dict[str, str]
    # As the producer sent them: on a message the worker dead-lettered and a redrive brought
    # back, its record (x-error-*) taken off and what it folded restored (dlq.py).
    message_attributes: dict[str, Any]
    receive_count: int
    max_retries: int | None
    worker_id: str
    # What wrapped the payload (the handler's `envelope`), None for "raw": topic, event id,
    # bucket and key... `envelope.id` is the envelope's own id, the one to key idempotency on.
    envelope: Envelope | None = None
    # Where the payload was, for a message a producer offloaded to S3 (the extended client's
    # format); `body` is then the payload read from there.
    large_payload: S3Pointer | None = None
    # What the router's lifespan yielded (`@router.lifespan`): the database pool, the HTTP
    # client... handlers share. None without a lifespan, and in `executor="process"` handlers.
    resources: Any = field(default_factory=RESOURCES.get, repr=False)
    logger: logging.Logger | Any = field(repr=False, default=None)
    # The two signals, as plain flags: a handler's thread only reads them, the loop alone
    # sets them, and a bool is read whole (two threading.Events a job cost it 5% of the
    # engine's CPU per message; nothing waits on them).
    _cancel_flag: bool = field(default=False, repr=False)
    _cancel_reason: str | None = field(default=None, repr=False)
    _cancel_event: asyncio.Event | None = field(default=None, repr=False)
    _on_progress: Callable[[float, str | None], None] | None = field(default=None, repr=False)
    _stop_flag: bool = field(default=False, repr=False)
    _stop_event: asyncio.Event | None = field(default=None, repr=False)
    last_progress: tuple[float, str | None] | None = None

    @property
    def retry_count(self) -> int:
        """Retries so far: 0 on the first delivery."""
        return max(self.receive_count - 1, 0)

    @property
    def group_id(self) -> str | None:
        """The FIFO MessageGroupId, if any."""
        return self.attributes.get("MessageGroupId")

    @property
    def cancelled(self) -> bool:
        return self._cancel_flag

    @property
    def cancel_reason(self) -> str | None:
        return self._cancel_reason

    @property
    def stopping(self) -> bool:
        return self._cancel_flag or self._stop_flag

    def raise_if_stopping(self) -> None:
        """Give the message back (visibility 0) if the worker is draining."""
        if self.stopping:
            raise JobCancelled(self._cancel_reason or "shutdown")

    async def wait_stopping(self) -> None:
        """Wait until the worker starts draining (or the job is cancelled)."""
        if self._stop_event is None:
            self._stop_event = asyncio.Event()
            if self.stopping:
                self._stop_event.set()
        await self._stop_event.wait()

    def raise_if_cancelled(self) -> None:
        if self.cancelled:
            raise JobCancelled(self._cancel_reason or "cancelled")

    async def wait_cancelled(self) -> str:
        """Wait until the job is cancelled (async handlers); returns the reason."""
        if self._cancel_event is None:
            self._cancel_event = asyncio.Event()
            if self.cancelled:
                self._cancel_event.set()
        await self._cancel_event.wait()
        return self._cancel_reason or "cancelled"

    def progress(self, percent: float, message: str | None = None) -> None:
        """Report progress (0-100). Safe from async and sync handlers alike."""
        if not 0 <= percent <= 100:
            raise ValueError(f"percent must be within 0..100, got {percent}")
        self.last_progress = (percent, message)
        if self._on_progress is not None:
            self._on_progress(percent, message)

    def _request_stop(self) -> None:
        """Set the draining signal (runtime only; call on the event loop)."""
        self._stop_flag = True
        if self._stop_event is not None:
            self._stop_event.set()

    def _cancel(self, reason: str) -> None:
        """Set the cancellation signal (runtime only; call on the event loop)."""
        if self.cancelled:
            return
        self._cancel_reason = reason
        self._cancel_flag = True
        if self._cancel_event is not None:
            self._cancel_event.set()
        self._request_stop()

    def __getstate__(self) -> dict[str, Any]:
        # Sent to a worker process: keep the data, drop loop- and thread-bound parts.
        state = dict(self.__dict__)
        for key in ("resources", "logger", "_cancel_event", "_on_progress", "_stop_event"):
            state[key] = None
        state["_cancel_flag"] = state["_stop_flag"] = False  # the process is told nothing after
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Arrived in a handler process: its logger is the process's, and the lines logged
        # there carry the job's id, queue and receive count, as `bind_job` gives them on the
        # event loop (a handler process runs one job at a time).
        self.__dict__.update(state)
        self.logger = logs.get_logger()
        logs.bind_job(job_id=self.id, queue=self.queue, receive_count=self.receive_count)
