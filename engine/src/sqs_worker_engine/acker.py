"""Settles messages: coalesces deletes and visibility changes into batch calls.

A batch goes out when it holds ten entries or `flush_interval` after its first entry,
whichever comes first, and at shutdown. Failed entries are retried while the lease is
still safe to use; what cannot be settled is logged and counted, never dropped silently
(the message then simply reappears: at-least-once). Until a delete is confirmed its lease
stays with the keeper and keeps being extended.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Literal

from . import metrics
from .backoff import backoff_delay
from .lease import Lease, LeaseKeeper
from .sqs import SQSClient, entry_gone, error_code

log = logging.getLogger(__name__)
Action = Literal["delete", "visibility"]
ATTEMPTS = 4


@dataclass(eq=False)
class _Entry:
    lease: Lease
    action: Action
    seconds: int
    done: asyncio.Future[bool]
    attempt: int = 0


class Acker:
    def __init__(
        self, client: SQSClient, queue: str, queue_url: str, keeper: LeaseKeeper, flush_interval: float
    ) -> None:
        self.client = client
        self.queue = queue
        self.queue_url = queue_url
        self.keeper = keeper
        self.flush_interval = flush_interval
        self._pending: dict[Action, list[_Entry]] = {"delete": [], "visibility": []}
        self._timers: dict[Action, asyncio.TimerHandle | None] = {"delete": None, "visibility": None}
        self._sending: set[asyncio.Task[None]] = set()

    def delete(self, lease: Lease) -> asyncio.Future[bool]:
        """Delete the message; the future says whether SQS confirmed it."""
        return self._add(lease, "delete", 0)

    def change_visibility(self, lease: Lease, seconds: int) -> asyncio.Future[bool]:
        """Make the message visible again after `seconds` (0 = release now)."""
        return self._add(lease, "visibility", max(0, seconds))

    async def close(self) -> None:
        """Send everything pending and wait for it (shutdown)."""
        actions: tuple[Action, ...] = ("delete", "visibility")
        for action in actions:
            self._flush(action)
        while self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)

    def _add(self, lease: Lease, action: Action, seconds: int) -> asyncio.Future[bool]:
        loop = asyncio.get_running_loop()
        lease.state = "settling"
        entry = _Entry(lease, action, seconds, loop.create_future())
        pending = self._pending[action]
        pending.append(entry)
        if len(pending) >= 10:
            self._flush(action)
        elif self._timers[action] is None:
            self._timers[action] = loop.call_later(self.flush_interval, self._flush, action)
        return entry.done

    def _flush(self, action: Action) -> None:
        timer = self._timers[action]
        if timer is not None:
            timer.cancel()
            self._timers[action] = None
        pending = self._pending[action]
        while pending:
            batch, pending[:] = pending[:10], pending[10:]
            task = asyncio.get_running_loop().create_task(self._send(action, batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, action: Action, batch: list[_Entry]) -> None:
        while batch:
            now = time.monotonic()
            usable = []
            for entry in batch:
                if entry.lease.usable(now, self.keeper.safety):
                    usable.append(entry)
                else:
                    self._give_up(entry, "lease expired or lost before it could be settled")
            if not usable:
                return
            batch = await self._call(action, usable)
            if batch:
                attempt = max(e.attempt for e in batch)
                await asyncio.sleep(backoff_delay(attempt, 0.2, 2.0))

    async def _call(self, action: Action, batch: list[_Entry]) -> list[_Entry]:
        """One batch call; returns the entries worth retrying."""
        ids = {str(i): entry for i, entry in enumerate(batch)}
        operation = "DeleteMessageBatch" if action == "delete" else "ChangeMessageVisibilityBatch"
        try:
            if action == "delete":
                resp = await self.client.delete_message_batch(
                    QueueUrl=self.queue_url,
                    Entries=[{"Id": i, "ReceiptHandle": e.lease.receipt_handle} for i, e in ids.items()],
                )
            else:
                resp = await self.client.change_message_visibility_batch(
                    QueueUrl=self.queue_url,
                    Entries=[
                        {"Id": i, "ReceiptHandle": e.lease.receipt_handle, "VisibilityTimeout": e.seconds}
                        for i, e in ids.items()
                    ],
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            metrics.SQS_CALLS.labels(operation, error_code(exc)).inc()
            log.warning("%s failed: %s", operation, exc, extra={"queue": self.queue})
            return self._retry_or_give_up(batch, f"{operation} failed: {exc}")
        metrics.SQS_CALLS.labels(operation, "ok").inc()
        for ok in resp.get("Successful", []):
            entry = ids[ok["Id"]]
            entry.lease.state = "settled"
            self.keeper.remove(entry.lease)
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
        for entry in entries:
            entry.attempt += 1
            if entry.attempt >= ATTEMPTS:
                self._give_up(entry, reason)
            else:
                retry.append(entry)
        return retry

    def _give_up(self, entry: _Entry, reason: str) -> None:
        metrics.SETTLE_FAILURES.labels(self.queue, entry.action).inc()
        log.error(
            "could not %s message; it will be delivered again: %s",
            entry.action if entry.action == "delete" else "change the visibility of",
            reason,
            extra={"queue": self.queue, "message_id": entry.lease.message_id},
        )
        # Stop extending: the message becomes visible when its current lease runs out.
        if entry.lease.state == "settling":
            entry.lease.state = "lost"
        self.keeper.remove(entry.lease)
        if not entry.done.done():
            entry.done.set_result(False)
