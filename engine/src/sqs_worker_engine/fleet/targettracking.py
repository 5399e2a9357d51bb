"""ECS service autoscaling as the generated stack sets it: an Application Auto Scaling
target tracking policy on messages per running task (metric math over AWS/SQS
ApproximateNumberOfMessagesVisible, plus ApproximateNumberOfMessagesNotVisible when the
policy counts it, and ECS/ContainerInsights RunningTaskCount).

The policy acts through the two CloudWatch alarms target tracking creates for it, on
one-minute datapoints: the high alarm when 3 datapoints in a row are above the target,
the low alarm when 15 in a row are below 90% of it. Scale-out is proportional (the
capacity that brings the metric to the target, at once); the capacity a scale-out added
counts while its cooldown lasts, so the next scale-out only adds what is still missing.
Scale-in is proportional too, and waits its cooldown after the last scale-in (a
scale-out is never held back by it).

Beside it, a step scaling policy on an alarm of its own (stepscaling.py), when the stack
has one. Both are evaluated each minute; when both scale out, Application Auto Scaling
takes the larger capacity, and a step policy that scales out overrides a target tracking
scale-in (scale-in is target tracking's alone).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass

from ..base import clock
from .counts import Datapoint
from .deployfiles import EcsService
from .keda import Readers
from .platform import ReplicaSet
from .stepscaling import StepPolicy

HIGH_DATAPOINTS = 3
LOW_DATAPOINTS = 15
LOW_RATIO = 0.9


def messages(point: Datapoint, in_flight: bool) -> float:
    return point.visible + (point.inflight if in_flight else 0)


def metric(point: Datapoint, in_flight: bool = False) -> float:
    """messages / tasks: the stack's metric math (no tasks: as many messages as there are)."""
    return messages(point, in_flight) / point.running if point.running else messages(point, in_flight)


@dataclass
class TargetTracking:
    spec: EcsService
    last_out: float = -1e9
    last_in: float = -1e9
    out_to: int = 0  # the capacity the last scale-out set

    def decide(self, now: float, points: list[Datapoint], current: int) -> int:
        """The desired count, given the latest datapoints (newest first)."""
        target, in_flight = self.spec.target, self.spec.in_flight
        if len(points) >= HIGH_DATAPOINTS and all(metric(p, in_flight) > target for p in points[:HIGH_DATAPOINTS]):
            wanted = math.ceil(messages(points[0], in_flight) / target)
            if now - self.last_out < self.spec.scale_out_cooldown:
                wanted = max(wanted, self.out_to)  # what the last scale-out added still counts
            wanted = min(self.spec.maximum, wanted)
            if wanted > current:
                self.last_out, self.out_to = now, wanted
                return wanted
            return current
        low = target * LOW_RATIO
        quiet = len(points) >= LOW_DATAPOINTS and all(metric(p, in_flight) < low for p in points[:LOW_DATAPOINTS])
        cooled = (
            now - self.last_in >= self.spec.scale_in_cooldown and now - self.last_out >= self.spec.scale_out_cooldown
        )
        if quiet and cooled:
            wanted = max(self.spec.minimum, math.ceil(messages(points[0], in_flight) / target))
            if wanted < current:
                self.last_in = now
                return wanted
        return current


def combined(tracked: int, stepped: int | None) -> int:
    """Both policies' capacities: the larger when the step policy scales out (a target
    tracking scale-in loses to it), target tracking's otherwise."""
    return tracked if stepped is None else max(tracked, stepped)


async def track(spec: EcsService, readers: Readers, service: ReplicaSet, on_decision: Callable[[int], None]) -> None:
    """Evaluate the alarms once a minute, as CloudWatch does."""
    policy = TargetTracking(spec)
    step = StepPolicy(spec.step, spec.minimum, spec.maximum) if spec.step is not None else None
    wanted = max(LOW_DATAPOINTS, spec.step.periods if spec.step is not None else 0)
    while True:
        now, current = clock.now(), service.desired
        points = readers.alarm_datapoints(wanted)
        desired = policy.decide(now, points, current)
        desired = combined(desired, step.decide(now, points, current) if step is not None else None)
        service.scale_to(desired)
        on_decision(desired)
        await asyncio.sleep(60.0)
