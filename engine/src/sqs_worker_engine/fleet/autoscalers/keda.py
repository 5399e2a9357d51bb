"""KEDA, as it scales on SQS (after kedacore/keda's scalers and pkg/scaling/executor).

ScaledObject: the aws-sqs-queue scaler's metric is ApproximateNumberOfMessages, plus
NotVisible with `scaleOnInFlight` (plus Delayed with `scaleOnDelayed`), read from SQS at
each of the HPA's syncs (no `useCachedMetrics`); the aws-cloudwatch scaler's is the latest
published datapoint. Both are AverageValue metrics against their targets, for the HPA
(hpa.py). With minReplicaCount 0, KEDA itself moves 0 <-> 1: up once a metric passes its
activation, down after cooldownPeriod with none active.

ScaledJob: every pollingInterval, the queue length (visible, plus in flight with
`scaleOnInFlight`) over queueLength is `max_scale` (at most maxReplicaCount); the
strategy turns it, the Jobs running and those pending into how many Jobs to create.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass

from ...base import clock
from ..sqs.counts import Counts, Datapoint
from ..sqs.queue import FleetQueue
from .deployfiles import ScaledJob, ScaledObject, SqsTrigger
from .hpa import SYNC_SECONDS, Hpa, proposal
from .platform import JobPods, ReplicaSet


def queue_length(attributes: dict[str, int], trigger: SqsTrigger) -> int:
    """The aws-sqs-queue scaler's metric."""
    value = attributes["ApproximateNumberOfMessages"]
    if trigger.in_flight:
        value += attributes["ApproximateNumberOfMessagesNotVisible"]
    if trigger.delayed:
        value += attributes["ApproximateNumberOfMessagesDelayed"]
    return value


def jobs_to_create(strategy: str, max_scale: int, running: int, pending: int, maximum: int, minimum: int = 0) -> int:
    """KEDA's ScaledJob decision (scale_jobs.go: getScalingDecision, GetEffectiveMaxScale,
    createJobs), with scaleTo = max_scale (a queueLength target of 1, or what it rounds to)."""
    if running < minimum:
        return minimum - running
    running -= minimum
    if strategy == "accurate":
        effective = maximum - running if max_scale + running > maximum else max_scale - pending
    elif strategy == "eager":
        effective = min(maximum - running - pending, max_scale)
    else:  # default
        effective = max_scale - running
    return max(0, min(max_scale, effective)) if strategy != "eager" else max(0, effective)


@dataclass
class Readers:
    """The scaler's reads, billed: GetQueueAttributes to SQS, GetMetricData to CloudWatch."""

    queue: FleetQueue
    counts: Counts
    metric_reads: int = 0

    def sqs(self) -> dict[str, int]:
        self.queue.calls.count("GetQueueAttributes")
        return self.counts.sqs_attributes()

    def cloudwatch(self) -> Datapoint | None:
        self.metric_reads += 1
        points = self.counts.cloudwatch(clock.now())
        return points[0] if points else None

    def alarm_datapoints(self, n: int) -> list[Datapoint]:
        """What a CloudWatch alarm evaluates (billed per alarm, not per read): the latest n."""
        return self.counts.cloudwatch(clock.now(), n)


async def scale_object(
    spec: ScaledObject, readers: Readers, fleet: ReplicaSet, on_decision: Callable[[int], None]
) -> None:
    """The HPA's loop, fed KEDA's metrics, and KEDA's own 0 <-> 1."""
    hpa = Hpa(max(1, spec.minimum), spec.maximum, spec.scale_up, spec.scale_down)
    inactive_since: float | None = None
    while True:
        now = clock.now()
        proposals, active = [], False
        current = fleet.desired
        if spec.sqs is not None:
            value = queue_length(readers.sqs(), spec.sqs)
            active = active or value > spec.sqs.activation
            proposals.append(proposal(value, spec.sqs.queue_length, current))
        if spec.age is not None:
            point = readers.cloudwatch()
            if point is not None:
                active = active or point.oldest_age > spec.age.activation
                proposals.append(proposal(point.oldest_age, spec.age.target, current))
        if spec.minimum == 0 and current == 0:
            desired = 1 if active else 0
        else:
            desired = hpa.decide(now, proposals, current)
            if spec.minimum == 0:
                inactive_since = None if active else (inactive_since if inactive_since is not None else now)
                if inactive_since is not None and now - inactive_since >= spec.cooldown:
                    desired, inactive_since = 0, None
        fleet.scale_to(desired)
        on_decision(desired)
        await asyncio.sleep(SYNC_SECONDS)


async def scale_jobs(spec: ScaledJob, readers: Readers, jobs: JobPods) -> None:
    while True:
        length = queue_length(readers.sqs(), spec.sqs)
        if length > spec.sqs.activation:  # KEDA creates Jobs only while a trigger is active
            max_scale = min(math.ceil(length / spec.sqs.queue_length), spec.maximum)
            jobs.create(
                jobs_to_create(
                    spec.strategy,
                    max_scale,
                    jobs.active(),
                    jobs.pending(spec.pending_conditions),
                    spec.maximum,
                    spec.minimum,
                )
            )
        await asyncio.sleep(spec.polling)
