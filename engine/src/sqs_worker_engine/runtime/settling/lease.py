"""The lease keeper: extends every held lease before SQS would make its message visible.

Each tick it first gives up every lease whose deadline has come (the book marks it lost,
and its job is cancelled), then extends those due, in ChangeMessageVisibilityBatch calls
of ten, at `heartbeat_fraction` of the visibility timeout. Each call runs as its own task
with its own short timeout (half the time left before its nearest lease would be given
up, at most CALL_TIMEOUT), so one slow or hung call never stops the ticks: the deadline
check goes on, and a lease whose extension is not confirmed in time is lost rather than
trusted. The SDK does not retry these calls (see sqs.create_client); the next tick does,
if the lease is still safe to use.

While a kind of call SQS does not answer (reach.py: the extensions, or the deletes, which
hold every start), the keeper asks SQS again every PROBE_BASE..PROBE_CAP seconds (backing
off), sooner than any lease falls due and whether or not a failed delete is still retried:
extensions with an early extension of the leases held (ten at most), deletes and, with no
lease held, extensions with a call naming no message (`probe`). So held messages start
within seconds of SQS answering again, not a half visibility later, and not at all
before its deletes do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ...base import clock
from ...base.backoff import Backoff
from ...base.limits import MAX_RECEIVE_BATCH
from ...base.sqs import SqsApi, entry_gone, error_code, lease_client
from ..protections.reach import OPERATIONS, PROBE_BASE, PROBE_CAP, PROBE_HANDLE, PROBED, Kind
from .delivery import Delivery, LeaseBook, extension_seconds, lease_timing

log = logging.getLogger("sqs_worker_engine.lease")
CALL_TIMEOUT = 5.0  # seconds an extension call may take at most, however far its deadline


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
        on_sqs: Callable[[Kind, bool], None],
        answers: Callable[[Kind], bool] = lambda kind: True,
    ) -> None:
        """`on_sqs(kind, ok)`: told whether each of its calls reached SQS; `answers(kind)`:
        whether SQS answers that kind of call now, as the pool knows it (admission's fact,
        not a copy)."""
        self.book = book
        self.client = lease_client(client)  # its visibility changes extend, never settle (no span)
        self.queue_url = queue_url
        self.on_sqs = on_sqs
        self.answers = answers
        self._calls: set[asyncio.Task[None]] = set()
        self._probes = {kind: Backoff(PROBE_BASE, PROBE_CAP) for kind in PROBED}
        self._next_probe = dict.fromkeys(PROBED, 0.0)
        self._asking: dict[Kind, asyncio.Task[None]] = {}  # a call naming no message, out

    async def run(self) -> None:
        try:
            while True:
                await asyncio.sleep(self.book.tick)
                self.tick()
        finally:
            for call in [*self._calls, *self._asking.values()]:
                call.cancel()

    def tick(self) -> None:
        now = clock.now()
        self.book.expired(now)
        due = self._ask_again(now, self.book.due(now))
        for i in range(0, len(due), MAX_RECEIVE_BATCH):
            batch = due[i : i + MAX_RECEIVE_BATCH]
            call = asyncio.create_task(self._extend(batch, now))
            self._calls.add(call)
            call.add_done_callback(self._calls.discard)
            for delivery in batch:
                delivery.extension = call

    def _ask_again(self, now: float, due: list[Delivery]) -> list[Delivery]:
        """Ask SQS again about each kind of call it does not answer, when its backoff has
        run (an extension due or out asks about extensions already). Returns the leases to
        extend now: `due`, or held ones extended early to ask."""
        for kind in PROBED:
            if self.answers(kind):
                self._probes[kind].reset()
                self._next_probe[kind] = 0.0
                continue
            asking = kind in self._asking or (kind == "visibility" and bool(due or self._calls))
            if asking or now < self._next_probe[kind]:
                continue
            self._next_probe[kind] = now + self._probes[kind].next_delay()
            early = self.book.due(now + self.book.visibility)[:MAX_RECEIVE_BATCH] if kind == "visibility" else []
            if early:
                due = early
            else:
                self._asking[kind] = asyncio.create_task(self.probe(kind))
        return due

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
            self.on_sqs("visibility", False)
            log.warning("lease extension failed: %s", code, extra={"queue": self.book.queue})
            return
        self.on_sqs("visibility", True)
        for ok in resp.get("Successful", []):
            delivery, seconds = by_id[ok["Id"]]
            self.book.extended(delivery, sent, seconds)
        for failed in resp.get("Failed", []):
            delivery, _ = by_id[failed["Id"]]
            if entry_gone(failed):
                self.book.lose(delivery, f"SQS refused the extension: {failed.get('Code')} {failed.get('Message', '')}")
            else:
                log.warning("lease extension entry failed: %s", failed.get("Code"), extra={"queue": self.book.queue})

    async def probe(self, kind: Kind) -> None:
        """Ask SQS whether it answers `kind` again, with a call naming no message: it answers
        the call with the entry failed (ReceiptHandleIsInvalid), or fails it as it failed
        the others (an error, a timeout)."""
        entry: dict[str, str | int] = {"Id": "probe", "ReceiptHandle": PROBE_HANDLE}
        try:
            if kind == "delete":
                call = self.client.delete_message_batch(QueueUrl=self.queue_url, Entries=[entry])
            else:
                call = self.client.change_message_visibility_batch(
                    QueueUrl=self.queue_url, Entries=[{**entry, "VisibilityTimeout": 0}]
                )
            await asyncio.wait_for(call, CALL_TIMEOUT)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            code = "Timeout" if isinstance(exc, TimeoutError) else error_code(exc)
            self.on_sqs(kind, False)
            log.info("SQS still fails %s: %s", OPERATIONS[kind], code, extra={"queue": self.book.queue})
            return
        finally:
            self._asking.pop(kind, None)
        self.on_sqs(kind, True)
