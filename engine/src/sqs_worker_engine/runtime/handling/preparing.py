"""What a received message is to its handler: the payload read (inline, or from S3 with
its lease held), the envelope opened, an SNS signature checked, and the `Job` made.

A message that cannot become a job ends here with what to do about it: a control
message is dropped, a payload error goes to the DLQ, an S3 read that failed is worth
another attempt, and a message whose lease went meanwhile must not start at all
(another delivery of it may be running already).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...base.errors import PayloadError
from ...base.telemetry.logs import get_logger
from ...formats.dlq import original_attributes
from ...formats.envelopes import ControlMessage, read_payload
from ...formats.offload import PayloadStore, S3Pointer, pointer_of, pointer_problem
from ...formats.signatures import SnsSignatures
from ...handlers.job import Job
from ...handlers.outcomes import Ending
from ...handlers.router import HandlerSpec
from ..settling.delivery import Delivery, State


class LeaseLostError(Exception):
    """The lease went while the payload was read: the handler must not start."""


@dataclass(slots=True)  # one a message: no instance dict
class Payload:
    """Where a message's payload is, and the payload once read: kept for retries in place."""

    pointer: S3Pointer | None = None  # an offloaded payload's place in S3
    body: str | None = None  # the payload read from there


@dataclass(frozen=True)
class Preparer:
    """Makes one queue's jobs."""

    queue: str
    spec: HandlerSpec
    worker_id: str
    job_timeout: float
    max_receive: int | None  # the queue's maxReceiveCount (None: no DLQ)
    progress: Callable[[str], Callable[[float, str | None], None]]  # job id -> `job.progress`
    payloads: PayloadStore | None = None  # reads offloaded payloads (None: refused)
    signatures: SnsSignatures | None = None  # checks SNS notifications (None: not checked)

    async def prepare(self, delivery: Delivery, attempt: int, payload: Payload) -> Job[Any] | Ending:
        """The job to run, or the ending of a message that cannot run."""
        try:
            payload.pointer = pointer = pointer_of(delivery.message)
            if pointer is None:  # its body is the payload (most messages: no coroutine for it)
                body = str(delivery.message.get("Body", ""))
            else:
                body = await self._offloaded(delivery, payload, pointer)
            value, envelope = read_payload(self.spec.payload, self.spec.envelope, body)
            if self.signatures is not None and envelope is not None and envelope.sns is not None:
                await self.signatures.check(envelope.sns.signed, envelope.sns.topic_arn)
        except LeaseLostError:
            return Ending("lease_lost", None, 0.0, called=False)
        except ControlMessage as exc:
            return Ending("dropped", exc, 0.0, called=False)
        except PayloadError as exc:
            return Ending("dead_letter", exc, 0.0, called=False)
        except Exception as exc:  # S3 unreachable or slow: worth another attempt
            return Ending("retry", exc, 0.0, called=False)
        if delivery.state not in (State.RECEIVED, State.RUNNING):
            return Ending("lease_lost", None, 0.0, called=False)  # another delivery may run it now
        message = delivery.message
        return Job(
            id=delivery.message_id,
            queue=self.queue,
            body=body,
            payload=value,
            envelope=envelope,
            large_payload=payload.pointer,
            attributes=dict(message.get("Attributes", {})),
            # As first sent: a record of the worker's, brought back by a move task, unfolded.
            message_attributes=original_attributes(message.get("MessageAttributes")),
            receive_count=attempt,
            max_retries=None if self.max_receive is None else self.max_receive - 1,
            worker_id=self.worker_id,
            logger=get_logger(),
            _on_progress=self.progress(delivery.message_id),
        )

    async def _offloaded(self, delivery: Delivery, payload: Payload, pointer: S3Pointer) -> str:
        """An offloaded message's payload text: the S3 object at `pointer`, read inside the
        job, its lease held, within the job timeout (kept in `payload` for a retry in
        place). A read that outlasts the lease is abandoned: LeaseLostError."""
        if payload.body is None:
            if self.payloads is None:
                raise PayloadError(pointer_problem(pointer, ()) or "")
            fetch = asyncio.ensure_future(asyncio.wait_for(self.payloads.fetch(pointer), self.job_timeout))
            either: set[asyncio.Future[Any]] = {fetch, delivery.lost()}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not fetch.done():
                fetch.cancel()
                await asyncio.gather(fetch, return_exceptions=True)
                raise LeaseLostError(pointer.uri)
            payload.body = fetch.result()
        return payload.body
