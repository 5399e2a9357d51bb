"""The lease keeper: extends every held lease before SQS would make its message visible.

Each tick it first gives up every lease whose deadline has come (the book marks it lost,
and its job is cancelled), then extends those due, in ChangeMessageVisibilityBatch calls
of ten, at `heartbeat_fraction` of the visibility timeout. While SQS cannot be reached (a
settling call or an extension failed, and nothing has answered since), nothing held may
start (admission.py); so the keeper asks SQS again sooner than any lease falls due: one
extension call, of leases not due yet, every PROBE_BASE..PROBE_CAP seconds (backing off),
and held messages start as soon as SQS answers again, not a half visibility later. Each call runs as its own task
with its own short timeout (half the time left before its nearest lease would be given
up, at most CALL_TIMEOUT), so one slow or hung
call never stops the ticks: the deadline check goes on, and a lease whose extension is
not confirmed in time is lost rather than trusted. The SDK does not retry these calls
(see sqs.create_client); the next tick does, if the lease is still safe to use.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ..base import clock
from ..base.backoff import Backoff
from ..base.limits import MAX_RECEIVE_BATCH
from ..base.sqs import SqsApi, entry_gone, error_code, lease_client
from .delivery import Delivery, LeaseBook, extension_seconds, lease_timing

log = logging.getLogger("sqs_worker_engine.lease")
CALL_TIMEOUT = 5.0  # seconds an extension call may take at most, however far its deadline
PROBE_BASE, PROBE_CAP = 0.5, 4.0  # seconds between extension calls that ask a down SQS again


def heartbeat_problem(visibility: int, fraction: float) -> str | None:
    """Why leases of `visibility` seconds, extended at `fraction` of it, could never be
    extended in time (None when they can): an extension falls due `visibility * (1 -
    fraction)` before the deadline, the lease is given up `safety` before it, and the
    keeper must get to look at least once in between."""

    def works(f: float) -> bool:
        safety, tick = lease_timing(visibility, f)
        return visibility * (1 - f) - safety >= tick

    if works(fraction):
        return None
    usable = next((f / 100 for f in range(90, 9, -5) if works(f / 100)), None)
    advice = f"use a fraction of at most {usable:g}" if usable is not None else "use a longer visibility timeout"
    return (
        f"with a {visibility} s visibility timeout an extension at {fraction:g} of it falls due "
        f"{visibility * (1 - fraction):.2f} s before the deadline, but a lease is given up "
        f"{lease_timing(visibility, fraction)[0]:.2f} s before it: no lease could be extended in time; {advice}"
    )


class LeaseKeeper:
    def __init__(
        self,
        book: LeaseBook,
        client: SqsApi,
        queue_url: str,
        on_sqs: Callable[[bool], None],
        sqs_ok: Callable[[], bool] = lambda: True,
    ) -> None:
        """`on_sqs(ok)`: told whether each extension call reached SQS; `sqs_ok()`: whether
        SQS answers now, as the pool knows it (admission's fact, not a copy)."""
        self.book = book
        self.client = lease_client(client)  # its visibility changes extend, never settle (no span)
        self.queue_url = queue_url
        self.on_sqs = on_sqs
        self.sqs_ok = sqs_ok
        self._calls: set[asyncio.Task[None]] = set()
        self._probes = Backoff(PROBE_BASE, PROBE_CAP)
        self._next_probe = 0.0

    async def run(self) -> None:
        try:
            while True:
                await asyncio.sleep(self.book.tick)
                self.tick()
        finally:
            for call in self._calls:
                call.cancel()

    def tick(self) -> None:
        now = clock.now()
        self.book.expired(now)
        due = self.book.due(now)
        if self.sqs_ok():
            self._probes.reset()
            self._next_probe = 0.0
        elif not due and not self._calls and now >= self._next_probe:
            due = self.book.due(now + self.book.visibility)[:MAX_RECEIVE_BATCH]  # asks SQS again, early
            self._next_probe = now + self._probes.next_delay()
        for i in range(0, len(due), MAX_RECEIVE_BATCH):
            batch = due[i : i + MAX_RECEIVE_BATCH]
            call = asyncio.create_task(self._extend(batch, now))
            self._calls.add(call)
            call.add_done_callback(self._calls.discard)
            for delivery in batch:
                delivery.extension = call

    async def _extend(self, batch: list[Delivery], sent: float) -> None:
        entries, by_id = [], {}
        for i, delivery in enumerate(batch):
            seconds = extension_seconds(self.book.visibility, delivery.received_at, sent)
            if seconds > 0 and self.book.may_use(delivery, sent):  # else the deadline check loses it
                entries.append({"Id": str(i), "ReceiptHandle": delivery.receipt_handle, "VisibilityTimeout": seconds})
                by_id[str(i)] = (delivery, seconds)
        if not entries:
            return
        # Half the time left before the nearest lease is given up: a call that hangs still
        # leaves room for the next tick's attempt.
        slack = min(d.deadline for d, _ in by_id.values()) - self.book.safety - sent
        timeout = min(CALL_TIMEOUT, slack / 2)
        try:
            resp = await asyncio.wait_for(
                self.client.change_message_visibility_batch(QueueUrl=self.queue_url, Entries=entries),
                max(0.05, timeout),
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a timeout too: the deadlines stay, the next tick tries again
            code = "Timeout" if isinstance(exc, TimeoutError) else error_code(exc)
            self.on_sqs(False)
            log.warning("lease extension failed: %s", code, extra={"queue": self.book.queue})
            return
        self.on_sqs(True)
        for ok in resp.get("Successful", []):
            delivery, seconds = by_id[ok["Id"]]
            self.book.extended(delivery, sent, seconds)
        for failed in resp.get("Failed", []):
            delivery, _ = by_id[failed["Id"]]
            if entry_gone(failed):
                self.book.lose(delivery, f"SQS refused the extension: {failed.get('Code')} {failed.get('Message', '')}")
            else:
                log.warning("lease extension entry failed: %s", failed.get("Code"), extra={"queue": self.book.queue})
