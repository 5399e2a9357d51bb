"""What a handler's ending means for its message: a pure decision, shared by the pool and
by `testing.run_handler`, so a unit test of a handler sees the outcome the worker acts on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from ..base.errors import DownstreamUnavailable, JobCancelled, NonRetryableError

# success: deleted. retry / timeout: visible again after a backoff (or RetryLater's delay). dead_letter: sent to
# the DLQ with its reason. released: given back at once (shutdown). lease_lost: never
# touched again (another delivery owns the message now). dropped: deleted unrun, a control
# message of the transport (an SNS subscription confirmation, S3's test event), not work.
# deferred: the downstream is unavailable (DownstreamUnavailable): visible again after the
# delay it asked for, never dead-lettered for it.
Outcome = Literal["success", "retry", "dead_letter", "timeout", "lease_lost", "released", "dropped", "deferred"]
# Derived, never restated: every table keyed by outcome is built from this.
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)


@dataclass(frozen=True, slots=True)  # one or two a message: no instance dict
class Ending:
    """How one attempt ended: its handler's call, or (`called` False) a message that never
    reached its handler (a payload that does not parse, a control message, a lost lease
    during the payload's read), which says nothing about what the handler calls."""

    outcome: Outcome
    error: BaseException | None
    duration: float
    requested_delay: float | None = None
    called: bool = True


def describe(error: BaseException | None) -> str:
    return "" if error is None else f"{type(error).__name__}: {error}"


def classify(error: BaseException | None) -> Outcome:
    """The outcome of a handler that returned (`error` None) or raised `error`."""
    if error is None:
        return "success"
    if isinstance(error, NonRetryableError):
        return "dead_letter"
    if isinstance(error, DownstreamUnavailable):
        return "deferred"
    if isinstance(error, JobCancelled) and error.reason == "shutdown":
        return "released"
    if isinstance(error, JobCancelled) and error.reason == "lease_lost":
        return "lease_lost"
    return "retry"
