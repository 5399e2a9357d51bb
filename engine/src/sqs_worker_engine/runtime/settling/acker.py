"""Settles messages: coalesces deletes and visibility changes into batch calls.

A batch goes out when it holds ten entries or `flush_interval` after its first entry,
whichever comes first, and at shutdown. Before every attempt the lease book says whether
each handle may still be used; an entry that may not is given up (the message simply
comes back: at-least-once), never sent late. Failed entries are retried by the acker
itself, with short timeouts (the SDK does not retry these calls), for as long as
`keep_trying` says: the keeper holds a message's lease until its delete is confirmed,
so a burst of SQS errors costs a few seconds, not a second run of the job. A
visibility change waits for the keeper's extension call of the same lease, if one is out,
so that the extension cannot land after it and undo a retry delay or a release.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...base import clock
from ...base.backoff import backoff_delay
from ...base.limits import MAX_RECEIVE_BATCH
from ...base.sqs import SqsApi, entry_gone, error_code
from ...base.telemetry import metrics
from ..protections.reach import Kind
from .delivery import Delivery, LeaseBook, SettleAction
from .lease import CALL_TIMEOUT

log = logging.getLogger("sqs_worker_engine.acker")
# A failed entry gets at least ATTEMPTS calls, and more until RETRY_SECONDS after it was
# queued: SQS throttling and 5xx bursts last seconds. Past both, the failure is no burst,
# and holding the message longer (and a drain with it) would not help.
ATTEMPTS = 4
RETRY_SECONDS = 10.0


def keep_trying(attempts: int, queued_at: float, now: float) -> bool:
    """Whether an entry whose calls failed `attempts` times gets another call."""
    return attempts < ATTEMPTS or now - queued_at < RETRY_SECONDS


@dataclass(eq=False, slots=True)  # one a message: no instance dict
class _Entry:
    delivery: Delivery
    action: SettleAction
    seconds: int
    done: asyncio.Future[bool]
    queued_at: float
    attempt: int = 0
    sent: Callable[[], None] | None = None  # told once, as its first batch call goes out


class Acker:
    def __init__(
        self,
        client: SqsApi,
        book: LeaseBook,
        queue_url: str,
        flush_interval: float,
        on_sqs: Callable[[Kind, bool], None] | None = None,
    ) -> None:
        """`on_sqs(kind, ok)`: told whether each call reached SQS (reach.py: admission
        starts nothing while deletes cannot)."""
        self.on_sqs = on_sqs or (lambda kind, ok: None)
        self.client = client
        self.book = book
        self.queue = book.queue
        self.queue_url = queue_url
        self.flush_interval = flush_interval
        self._pending: dict[SettleAction, list[_Entry]] = {"delete": [], "visibility": []}
        self._timers: dict[SettleAction, asyncio.TimerHandle | None] = {"delete": None, "visibility": None}
        self._sending: set[asyncio.Task[None]] = set()

    def delete(self, delivery: Delivery, sent: Callable[[], None] | None = None) -> asyncio.Future[bool]:
        """Delete the message; the future says whether SQS confirmed it. `sent()`: its
        batch call goes out (admission gives its place back then: StartLine.delete_sent)."""
        return self._add(delivery, "delete", 0, sent)

    def change_visibility(self, delivery: Delivery, seconds: int) -> asyncio.Future[bool]:
        """Make the message visible again after `seconds` (0 = release now)."""
        return self._add(delivery, "visibility", max(0, seconds))

    async def close(self) -> None:
        """Send everything pending and wait for it (shutdown)."""
        actions: tuple[SettleAction, ...] = ("delete", "visibility")
        for action in actions:
            self._flush(action)
        while self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)

    def _add(
        self, delivery: Delivery, action: SettleAction, seconds: int, sent: Callable[[], None] | None = None
    ) -> asyncio.Future[bool]:
        loop = asyncio.get_running_loop()
        now = clock.now()
        entry = _Entry(delivery, action, seconds, loop.create_future(), now, sent=sent)
        if not self.book.settling(delivery, action, now):
            self._give_up(entry, "lease expired or lost before it could be settled")
            return entry.done
        pending = self._pending[action]
        pending.append(entry)
        if len(pending) >= MAX_RECEIVE_BATCH:
            self._flush(action)
        elif self._timers[action] is None:
            self._timers[action] = loop.call_later(self.flush_interval, self._flush, action)
        return entry.done

    def _flush(self, action: SettleAction) -> None:
        timer = self._timers[action]
        if timer is not None:
            timer.cancel()
            self._timers[action] = None
        pending = self._pending[action]
        while pending:
            batch, pending[:] = pending[:MAX_RECEIVE_BATCH], pending[MAX_RECEIVE_BATCH:]
            for entry in batch:
                if entry.sent is not None:
                    entry.sent()
                    entry.sent = None
            task = asyncio.get_running_loop().create_task(self._send(action, batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, action: SettleAction, batch: list[_Entry]) -> None:
        if action == "visibility":
            extending = {e.delivery.extension for e in batch if e.delivery.extension is not None}
            if pending := {call for call in extending if not call.done()}:
                await asyncio.wait(pending)
        while batch:
            now = clock.now()
            usable = []
            for entry in batch:
                if self.book.may_use(entry.delivery, now):
                    usable.append(entry)
                else:
                    self._give_up(entry, "lease expired or lost before it could be settled")
            if not usable:
                return
            batch = await self._call(action, usable, now)
            if batch:
                await asyncio.sleep(backoff_delay(max(e.attempt for e in batch), 0.2, 2.0))

    async def _call(self, action: SettleAction, batch: list[_Entry], now: float) -> list[_Entry]:
        """One batch call; returns the entries worth retrying."""
        ids = {str(i): entry for i, entry in enumerate(batch)}
        operation = "DeleteMessageBatch" if action == "delete" else "ChangeMessageVisibilityBatch"
        entries: list[dict[str, Any]] = [{"Id": i, "ReceiptHandle": e.delivery.receipt_handle} for i, e in ids.items()]
        if action == "visibility":
            for request, queued in zip(entries, ids.values(), strict=True):
                request["VisibilityTimeout"] = queued.seconds
        call = (
            self.client.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)
            if action == "delete"
            else self.client.change_message_visibility_batch(QueueUrl=self.queue_url, Entries=entries)
        )
        timeout = min(CALL_TIMEOUT, min(e.delivery.deadline for e in batch) - self.book.safety - now)
        try:
            resp = await asyncio.wait_for(call, max(0.05, timeout))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            code = "Timeout" if isinstance(exc, TimeoutError) else error_code(exc)
            self.on_sqs(action, False)  # a settling action is the kind of call it makes (reach.py)
            log.warning("%s failed: %s", operation, code, extra={"queue": self.queue})
            return self._retry_or_give_up(batch, f"{operation} failed: {code}")
        self.on_sqs(action, True)
        for ok in resp.get("Successful", []):
            entry = ids[ok["Id"]]
            self.book.confirmed(entry.delivery, released=action == "visibility" and entry.seconds == 0)
            if not entry.done.done():
                entry.done.set_result(True)
        retry: list[_Entry] = []
        for failed in resp.get("Failed", []):
            entry = ids[failed["Id"]]
            reason = f"{operation} entry failed: {failed.get('Code')} {failed.get('Message', '')}".strip()
            if entry_gone(failed) or failed.get("SenderFault"):
                self._give_up(entry, reason)
            else:
                retry += self._retry_or_give_up([entry], reason)
        if resp.get("Failed"):
            log.warning(
                "%s: %d of %d entries failed", operation, len(resp["Failed"]), len(batch), extra={"queue": self.queue}
            )
        return retry

    def _retry_or_give_up(self, entries: list[_Entry], reason: str) -> list[_Entry]:
        retry = []
        now = clock.now()
        for entry in entries:
            entry.attempt += 1
            if keep_trying(entry.attempt, entry.queued_at, now):
                retry.append(entry)
            else:
                self._give_up(entry, reason)
        return retry

    def _give_up(self, entry: _Entry, reason: str) -> None:
        metrics.SETTLE_FAILURES.labels(self.queue, entry.action).inc()
        log.error(
            "could not %s message; it will be delivered again: %s",
            entry.action if entry.action == "delete" else "change the visibility of",
            reason,
            extra={"queue": self.queue, "message_id": entry.delivery.message_id},
        )
        self.book.lose(entry.delivery, reason)  # stop extending: it comes back when its lease runs out
        if not entry.done.done():
            entry.done.set_result(False)
