"""What the autoscalers and the workers see of the queue's size: never the truth.

- SQS's `ApproximateNumberOfMessages*` are eventually consistent: after producers stop they
  may take about a minute to settle (GetQueueAttributes reference). Each read here returns
  the true counts of a moment up to `lag` seconds back, drawn afresh per read, so two reads
  in a row can disagree, as KEDA's users report of the SQS scaler (kedacore/keda #7845).
- CloudWatch's SQS metrics are one datapoint a minute, published `delay` seconds after the
  minute ends; a reader gets the latest published (what KEDA's aws-cloudwatch scaler and
  Application Auto Scaling's alarms act on). The counts in a datapoint are one approximate
  read in the minute, so a backlog that began after it waits a minute more to be seen; the
  sums (`NumberOfMessagesSent`, `NumberOfMessagesDeleted`) count the whole minute, exactly.

The truth is recorded once a simulated second (`record`), in real messages: with a scale
k > 1 the ledger's counts, not the simulated messages' (load/work.py).
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Truth:
    at: float
    visible: int
    inflight: int
    oldest_age: float  # seconds: the oldest message not yet deleted (SQS's ApproximateAgeOfOldestMessage)
    running: int  # replicas running (ECS's RunningTaskCount, Container Insights)
    sent: int = 0  # messages sent so far (cumulative)
    deleted: int = 0  # messages deleted so far, by the workers that completed them (cumulative)
    failed: int = 0  # jobs failed so far (a bad release's; cumulative)
    dead_letters: int = 0  # messages in the DLQ
    desired: int = 0  # replicas the service asks for (ECS's DesiredTaskCount, Container Insights)


@dataclass(frozen=True, slots=True)
class Datapoint:
    minute: int
    visible: float
    inflight: float
    oldest_age: float
    running: float
    sent: float = 0.0  # NumberOfMessagesSent: messages sent in the minute (its Sum)
    deleted: float = 0.0  # NumberOfMessagesDeleted: messages deleted in the minute (its Sum)
    failed: float = 0.0  # jobs failed in the minute (the worker's jobs_processed_total, failed outcomes)
    dead_letters: float = 0.0  # the DLQ's messages visible at the minute's end (nothing leaves it in a run)
    desired: float = 0.0  # the replicas asked for at the minute's end (ECS's DesiredTaskCount)


# What a simulated CloudWatch datapoint holds, by the metric's name.
DATAPOINT_METRICS = {
    "ApproximateNumberOfMessagesVisible": "visible",
    "ApproximateNumberOfMessagesNotVisible": "inflight",
    "ApproximateAgeOfOldestMessage": "oldest_age",
    "RunningTaskCount": "running",
    "DesiredTaskCount": "desired",
    "NumberOfMessagesSent": "sent",
    "NumberOfMessagesDeleted": "deleted",
}


class Counts:
    def __init__(self, *, lag: float = 60.0, delay: float = 60.0, seed: int = 0) -> None:
        self.lag = lag
        self.delay = delay
        self._rng = random.Random(seed)
        self._recent: deque[Truth] = deque(maxlen=int(lag) + 2)
        self._minutes: dict[int, Datapoint] = {}
        self._latest: Truth | None = None
        self._closed: Truth | None = None  # the last truth of the minute closed before

    def record(self, truth: Truth) -> None:
        """The true state now (once a simulated second)."""
        self._recent.append(truth)
        minute = int(truth.at // 60)
        if self._latest is not None and int(self._latest.at // 60) != minute:
            self._close_minute(self._latest)
        self._latest = truth

    def _close_minute(self, last: Truth) -> None:
        # SQS samples its counts once a minute; what it publishes is its own approximate read.
        seen = self.approximate(at=last.at)
        minute = int(last.at // 60)
        before = self._closed or Truth(0.0, 0, 0, 0.0, 0)
        self._minutes[minute] = Datapoint(
            minute,
            seen.visible,
            seen.inflight,
            last.oldest_age,
            last.running,
            sent=last.sent - before.sent,
            deleted=last.deleted - before.deleted,
            failed=last.failed - before.failed,
            dead_letters=last.dead_letters,
            desired=last.desired,
        )
        self._closed = last

    @property
    def published(self) -> dict[int, Datapoint]:
        """Every minute's datapoint closed so far, by minute (a reader asks which are published)."""
        return self._minutes

    def approximate(self, at: float | None = None) -> Truth:
        """SQS's answer to GetQueueAttributes: the counts of a moment up to `lag` back."""
        if not self._recent:
            return Truth(0.0, 0, 0, 0.0, 0)
        now = self._recent[-1].at if at is None else at
        back = self._rng.uniform(0, self.lag)
        for truth in reversed(self._recent):
            if truth.at <= now - back:
                return truth
        return self._recent[0]

    def sqs_attributes(self) -> dict[str, int]:
        seen = self.approximate()
        return {
            "ApproximateNumberOfMessages": seen.visible,
            "ApproximateNumberOfMessagesNotVisible": seen.inflight,
            "ApproximateNumberOfMessagesDelayed": 0,
        }

    def cloudwatch(self, now: float, minutes: int = 1) -> list[Datapoint]:
        """The latest `minutes` datapoints published by `now`, newest first."""
        newest = math.floor((now - self.delay) / 60) - 1
        found = []
        for minute in range(newest, newest - 15, -1):
            point = self._minutes.get(minute)
            if point is not None:
                found.append(point)
                if len(found) == minutes:
                    break
        return found
