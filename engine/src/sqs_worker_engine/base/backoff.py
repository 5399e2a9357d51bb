"""Exponential backoff with jitter, for retried jobs and for SQS errors alike."""

from __future__ import annotations

import random


def backoff_delay(attempt: int, base: float, cap: float, rand: float | None = None) -> float:
    """Delay before attempt `attempt` (1 = first retry): "equal jitter".

    Half of the exponential step is kept and half is random, so retries spread out (no
    thundering herd after an outage) yet still grow with every attempt.
    """
    step = min(cap, base * 2.0 ** min(max(attempt - 1, 0), 32))
    r = random.random() if rand is None else rand  # noqa: S311 - jitter, not cryptography
    return step / 2 + r * step / 2


class Backoff:
    """Consecutive-failure counter for a loop that must keep going (a poller, a flusher)."""

    def __init__(self, base: float = 0.5, cap: float = 30.0) -> None:
        self.base = base
        self.cap = cap
        self.failures = 0

    def next_delay(self) -> float:
        self.failures += 1
        return backoff_delay(self.failures, self.base, self.cap)

    def reset(self) -> None:
        self.failures = 0
