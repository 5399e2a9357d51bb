"""ECS service autoscaling as a stack sets it: an Application Auto Scaling target tracking
policy (where the stack has one: the generated stack's scale-out is a step policy sized on
what the tasks clear, and its scale-in another) on messages per running task (metric math over AWS/SQS
ApproximateNumberOfMessagesVisible, plus ApproximateNumberOfMessagesNotVisible when the
policy counts it, and ECS/ContainerInsights RunningTaskCount).

The policy acts through the two CloudWatch alarms target tracking creates for it, on
one-minute datapoints: the high alarm when 3 datapoints in a row are above the target,
the low alarm when 15 in a row are below 90% of it. Scale-out is proportional (the
capacity that brings the metric to the target, at once); the capacity a scale-out added
counts while its cooldown lasts, so the next scale-out only adds what is still missing.
Scale-in is proportional too, and waits its cooldown after the last scale-in (a
scale-out is never held back by it); with DisableScaleIn the policy never scales in.

Beside it, the stack's step scaling policies on alarms of their own (stepscaling.py): any
that scale out, one that scales in. All are evaluated each minute. When several want to
change the capacity, Application Auto Scaling takes the one that gives the largest: any
scale-out wins over every scale-in, and of two scale-ins the smaller one is made. A
scale-out ends the step scale-in's cooldown.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass

from ...base import clock
from ..sqs.counts import DATAPOINT_METRICS, Datapoint
from ..sqs.metricmath import evaluate
from .deployfiles import EcsService
from .keda import Readers
from .platform import ReplicaSet
from .stepscaling import ScaleInStepPolicy, StepPolicy

HIGH_DATAPOINTS = 3
LOW_DATAPOINTS = 15
LOW_RATIO = 0.9


def tracked(spec: EcsService, point: Datapoint) -> float | None:
    """The value target tracking holds at its target for one datapoint: the stack's metric
    math (None: no value, as CloudWatch gives none); without any (a spec built by hand),
    visible messages / running tasks, all of them while no task runs."""
    if not spec.tracking_expression:
        return point.visible / point.running if point.running else point.visible
    values = {metric_id: float(getattr(point, DATAPOINT_METRICS[name])) for metric_id, name in spec.tracking_metrics}
    return evaluate(spec.tracking_expression, values)


def proportional(point: Datapoint, value: float | None, target: float) -> int:
    """The capacity that brings the latest value to the target: the running tasks (one at
    least) scaled by value / target, rounded up (a value at the target keeps them)."""
    return math.ceil(max(point.running, 1) * (value or 0.0) / target - 1e-9)


@dataclass
class TargetTracking:
    spec: EcsService
    last_out: float = -1e9
    last_in: float = -1e9
    out_to: int = 0  # the capacity the last scale-out set

    def decide(self, now: float, points: list[Datapoint], current: int) -> int:
        """The desired count, given the latest datapoints (newest first); the current one
        when the stack has no target tracking policy."""
        target = self.spec.target
        if target is None:
            return current
        values = [tracked(self.spec, p) for p in points[:LOW_DATAPOINTS]]
        if len(values) >= HIGH_DATAPOINTS and all(v is not None and v > target for v in values[:HIGH_DATAPOINTS]):
            wanted = proportional(points[0], values[0], target)
            if now - self.last_out < self.spec.scale_out_cooldown:
                wanted = max(wanted, self.out_to)  # what the last scale-out added still counts
            wanted = min(self.spec.maximum, wanted)
            if wanted > current:
                self.last_out, self.out_to = now, wanted
                return wanted
            return current
        low = target * LOW_RATIO
        quiet = len(values) >= LOW_DATAPOINTS and all(v is not None and v < low for v in values)
        cooled = (
            now - self.last_in >= self.spec.scale_in_cooldown and now - self.last_out >= self.spec.scale_out_cooldown
        )
        if quiet and cooled and not self.spec.scale_in_disabled:
            wanted = max(self.spec.minimum, proportional(points[0], values[0], target))
            if wanted < current:
                self.last_in = now
                return wanted
        return current


def combined(current: int, tracked: int, *stepped: int | None) -> int:
    """The capacity when target tracking and the step policies have each had their say (a
    step policy's None: it wants no change): the largest capacity that changes it, so any
    scale-out beats every scale-in and the gentler of two scale-ins is made."""
    return max((c for c in (tracked, *stepped) if c is not None and c != current), default=current)


async def track(
    spec: EcsService, readers: Readers, service: ReplicaSet, on_decision: Callable[[int], None], phase: float = 0.0
) -> None:
    """Evaluate the alarms once a minute, as CloudWatch does, the first `phase` seconds from now."""
    policy = TargetTracking(spec)
    steps_out = [StepPolicy(s, spec.minimum, spec.maximum) for s in spec.steps_out]
    step_in = ScaleInStepPolicy(spec.step_in, spec.minimum, spec.maximum) if spec.step_in is not None else None
    wanted = max([LOW_DATAPOINTS] + [s.periods for s in (*spec.steps_out, spec.step_in) if s is not None])
    await asyncio.sleep(phase)
    while True:
        now, current = clock.now(), service.desired
        points = readers.alarm_datapoints(wanted)
        desired = combined(
            current,
            policy.decide(now, points, current),
            *(step.decide(now, points, current) for step in steps_out),
            step_in.decide(now, points, current) if step_in is not None else None,
        )
        if desired > current and step_in is not None:
            step_in.scaled_out()
        service.scale_to(desired)
        on_decision(desired)
        await asyncio.sleep(60.0)
