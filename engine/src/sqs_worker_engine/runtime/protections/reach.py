"""Whether SQS answers one queue's calls, kept per kind of call, and what waits on it.

The kinds are the SQS actions the pool uses, each its own permission in a worker's policy:

- "receive": ReceiveMessage (the pollers);
- "visibility": ChangeMessageVisibilityBatch (the lease keeper's extensions, and settling's
  retry delays and releases);
- "delete": DeleteMessageBatch (settling's deletes, after a job or a dead letter's copy).

A kind is down from a call of it that SQS did not answer (an error, a timeout) until one
that it answers; a call answered with some entries failed is an answer. One kind answering
says nothing of another: a policy without sqs:DeleteMessage receives and extends leases all
day while every delete is refused. So each kind ends its own outage only.

A start needs the deletes (`START_NEEDS`): a job whose message cannot be deleted runs for
nothing, and its message comes back charged a receive, towards the DLQ. While they are
down nothing starts and nothing more is received (a message received now could only wait,
charged a receive it cannot use). Extensions failing hold nothing back: a message received
now has its whole lease ahead, and a lease that lapses is lost, its job cancelled, never
run twice at once (delivery.py).

While a kind a start or a lease needs is down the lease keeper asks SQS again (lease.py),
every PROBE_BASE to PROBE_CAP seconds: an early extension of the leases held, or a call
naming no message (`PROBE_HANDLE`), which SQS answers with its one entry failed
(ReceiptHandleIsInvalid): an answer all the same. Receives need no probe: a failed one is
retried by its poller (receiving.py).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

Kind = Literal["receive", "visibility", "delete"]
OPERATIONS: dict[Kind, str] = {
    "receive": "ReceiveMessage",
    "visibility": "ChangeMessageVisibilityBatch",
    "delete": "DeleteMessageBatch",
}
START_NEEDS: frozenset[Kind] = frozenset({"delete"})
PROBED: tuple[Kind, ...] = ("visibility", "delete")  # the kinds the lease keeper asks again
PROBE_BASE, PROBE_CAP = 0.5, 4.0  # seconds between the calls that ask a down kind again
PROBE_HANDLE = "sqs-worker-engine-probe"  # a receipt handle that names no message, ever


def starts_held(down: Collection[Kind]) -> bool:
    """Whether nothing may start (nor be received) while these kinds are down."""
    return any(kind in START_NEEDS for kind in down)


class Reach:
    """The kinds of call SQS does not answer now, for one queue's pool (written by the
    pool's `sqs_answered` only: admission.py)."""

    def __init__(self) -> None:
        self.down: set[Kind] = set()

    def answers(self, kind: Kind) -> bool:
        return kind not in self.down

    @property
    def starts_held(self) -> bool:
        return starts_held(self.down)

    def answered(self, kind: Kind, ok: bool) -> bool:
        """A call of `kind` was answered (`ok`), or not. True if the kind's state changed."""
        if ok == (kind not in self.down):
            return False
        if ok:
            self.down.discard(kind)
        else:
            self.down.add(kind)
        return True
