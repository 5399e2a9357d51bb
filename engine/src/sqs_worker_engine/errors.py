"""What a handler raises decides what happens to its message.

- returns normally: the message is deleted.
- raises `NonRetryableError` (or its payload does not parse or validate): the message is
  sent to the dead-letter queue at once with the error recorded, then deleted. Retrying
  would only fail again.
- raises anything else, or outlives the job timeout: the message becomes visible again
  after an exponential backoff, and SQS moves it to the dead-letter queue after the
  queue's maxReceiveCount deliveries.
"""

from __future__ import annotations


class NonRetryableError(Exception):
    """Raise from a handler when retrying cannot help (bad input, a permanent refusal)."""


class PayloadError(NonRetryableError):
    """The message body does not parse or does not match the handler's payload model."""


class JobCancelled(Exception):  # noqa: N818 - reads as an event, like asyncio.CancelledError
    """Raised by `Job.raise_if_cancelled()` once the job's cancellation signal is set."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"job cancelled: {reason}")
        self.reason = reason
