"""What a handler raises decides what happens to its message.

- returns normally: the message is deleted.
- raises `NonRetryableError` (or its payload does not parse or validate): the message is
  sent to the dead-letter queue at once with the error recorded, then deleted. Retrying
  would only fail again.
- raises `RetryLater(seconds)`: visible again after exactly that delay (an attempt all
  the same: it counts toward the queue's maxReceiveCount).
- raises `DownstreamUnavailable(seconds)`: as RetryLater, and the queue stops receiving for
  that long (then tries one message); the message is never dead-lettered for it.
- raises anything else, or outlives the job timeout: the message becomes visible again
  after an exponential backoff (decisions.py has the schedule); once its attempts reach
  the queue's maxReceiveCount the worker dead-letters it with the last error.
"""

from __future__ import annotations

from .limits import MAX_VISIBILITY_SECONDS


class NonRetryableError(Exception):
    """Raise from a handler when retrying cannot help (bad input, a permanent refusal)."""


class PayloadError(NonRetryableError):
    """The message body does not parse or does not match the handler's payload model."""


class JobCancelled(Exception):  # noqa: N818 - reads as an event, like asyncio.CancelledError
    """Raised by `Job.raise_if_cancelled()` once the job's cancellation signal is set."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"job cancelled: {reason}")
        self.reason = reason


class RetryLater(Exception):  # noqa: N818 - a request, not a failure
    """Raise from a handler to be retried after `seconds` (rate limited, not ready yet)."""

    def __init__(self, seconds: float, reason: str = "") -> None:
        if not 0 <= seconds <= MAX_VISIBILITY_SECONDS:
            raise ValueError(
                f"RetryLater seconds must be within 0..{MAX_VISIBILITY_SECONDS} (SQS's visibility limit), got {seconds}"
            )
        super().__init__(reason or f"retry in {seconds:g} s")
        self.seconds = seconds


class DownstreamUnavailable(RetryLater):
    """Raise from a handler when what it calls is down or rate limiting (a 429, a 503 with
    Retry-After): the queue pauses receiving for `seconds`, then probes with one message
    (throttle.py); this message comes back after `seconds` and is never dead-lettered for
    it. Not the message's fault, so not its failure."""
