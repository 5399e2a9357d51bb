"""Leases: every received message is held by its receipt handle until a local deadline.

One keeper per queue extends every lease that is due in a single
ChangeMessageVisibilityBatch call per ten leases, at `heartbeat_fraction` of the
visibility timeout. A lease whose extension SQS refuses (the message is gone, the handle
is stale) or whose local deadline passes without a confirmed extension is *lost*: its job
is cancelled and its handle is never used again. Trusting the deadline matters because
SQS (and LocalStack) may accept a stale handle silently and delete another consumer's
delivery with it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from . import metrics
from .limits import MAX_VISIBILITY_SECONDS
from .sqs import SQSClient, entry_gone, error_code

# SQS: a message's visibility cannot be extended past 12 hours from its receive.
MAX_LEASE_SECONDS = MAX_VISIBILITY_SECONDS
log = logging.getLogger(__name__)
LeaseState = Literal["held", "settling", "settled", "lost"]


def extension_seconds(visibility: int, received_at: float, now: float) -> int:
    """How long to extend: the visibility timeout, but never past SQS's 12-hour cap
    (counted from our conservative receive time, minus a second of margin)."""
    return max(0, min(visibility, int(MAX_LEASE_SECONDS - (now - received_at)) - 1))


def lease_timing(visibility: int, fraction: float) -> tuple[float, float]:
    """(safety, tick): the margin before the deadline at which a handle is no longer
    trusted, and how often the keeper looks for leases due an extension."""
    return max(0.2, min(2.0, visibility * 0.1)), max(0.05, min(1.0, visibility * fraction / 4))


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


@dataclass(eq=False)
class Lease:
    message_id: str
    receipt_handle: str
    received_at: float  # monotonic time SQS handed the message out, at the earliest
    deadline: float  # monotonic time SQS makes the message visible again, unless extended
    state: LeaseState = "held"
    on_lost: Callable[[str], None] | None = None
    extensions: int = 0

    def usable(self, now: float, safety: float) -> bool:
        """Safe to use the handle: not lost and comfortably before the deadline."""
        return self.state in ("held", "settling") and self.deadline - now > safety


class LeaseKeeper:
    def __init__(
        self,
        client: SQSClient,
        queue: str,
        queue_url: str,
        visibility: int,
        fraction: float,
        on_sqs: Callable[[bool], None],
    ) -> None:
        self.client = client
        self.queue = queue
        self.queue_url = queue_url
        self.visibility = visibility
        self.fraction = fraction
        self.on_sqs = on_sqs
        self.safety, self.tick = lease_timing(visibility, fraction)
        self._leases: dict[int, Lease] = {}

    def __len__(self) -> int:
        return len(self._leases)

    def add(self, lease: Lease) -> None:
        self._leases[id(lease)] = lease

    def remove(self, lease: Lease) -> None:
        self._leases.pop(id(lease), None)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.tick)
            try:
                await self.extend_due()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("lease keeper tick failed", extra={"queue": self.queue})

    async def extend_due(self) -> None:
        now = time.monotonic()
        due: list[Lease] = []
        for lease in list(self._leases.values()):
            if lease.state == "held" and now >= lease.deadline - self.safety:
                self.lose(lease, "deadline passed without a confirmed extension")
            elif lease.state in ("held", "settling") and now >= lease.deadline - self.visibility * (1 - self.fraction):
                due.append(lease)
        if due:
            await asyncio.gather(*(self._extend(due[i : i + 10]) for i in range(0, len(due), 10)))

    def lose(self, lease: Lease, why: str) -> None:
        if lease.state != "held":
            return
        lease.state = "lost"
        self.remove(lease)
        metrics.LEASES_LOST.labels(self.queue).inc()
        log.warning("lease lost: %s", why, extra={"queue": self.queue, "message_id": lease.message_id})
        if lease.on_lost is not None:
            lease.on_lost(why)

    async def _extend(self, leases: list[Lease]) -> None:
        sent = time.monotonic()
        entries = []
        by_id: dict[str, tuple[Lease, int]] = {}
        for i, lease in enumerate(leases):
            seconds = extension_seconds(self.visibility, lease.received_at, sent)
            if seconds <= 0:
                continue  # cannot extend further; the deadline check will call it lost
            entries.append({"Id": str(i), "ReceiptHandle": lease.receipt_handle, "VisibilityTimeout": seconds})
            by_id[str(i)] = (lease, seconds)
        if not entries:
            return
        try:
            resp = await self.client.change_message_visibility_batch(QueueUrl=self.queue_url, Entries=entries)  # type: ignore[arg-type]
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Keep the deadlines: the next tick retries, and the deadline check stays honest.
            metrics.SQS_CALLS.labels("ChangeMessageVisibilityBatch", error_code(exc)).inc()
            self.on_sqs(False)
            log.warning("lease extension failed: %s", exc, extra={"queue": self.queue})
            return
        metrics.SQS_CALLS.labels("ChangeMessageVisibilityBatch", "ok").inc()
        self.on_sqs(True)
        for ok in resp.get("Successful", []):
            lease, seconds = by_id[ok["Id"]]
            if lease.state in ("held", "settling"):
                lease.deadline = sent + seconds
                lease.extensions += 1
                metrics.LEASE_EXTENSIONS.labels(self.queue).inc()
        for failed in resp.get("Failed", []):
            lease, _ = by_id[failed["Id"]]
            if entry_gone(failed):
                self.lose(lease, f"SQS refused the extension: {failed.get('Code')} {failed.get('Message', '')}")
            else:
                log.warning("lease extension entry failed: %s", failed.get("Code"), extra={"queue": self.queue})
