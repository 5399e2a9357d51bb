"""An ECS service's step scaling policy (Application Auto Scaling) and the CloudWatch alarm
that invokes it, beside the target tracking policy (targettracking.py).

The alarm reads one-minute datapoints (SQS's metrics are published a minute after their
minute ends: counts.py) and is in ALARM when `DatapointsToAlarm` of the latest
`EvaluationPeriods` breach the threshold; missing datapoints do not breach. While it is in
ALARM it invokes the policy at each evaluation (once a minute). The policy takes the step
whose interval holds the breach (the alarm's value less its threshold) and applies its
adjustment to the capacity: a count (ChangeInCapacity), a percentage (rounded down when
above 1, up to 1 when between 0 and 1, at least MinAdjustmentMagnitude), or the capacity
itself (ExactCapacity). While its cooldown lasts, what the last scale-out added counts as
part of the capacity: the next scale-out adds only what a larger step asks beyond it
(Application Auto Scaling's StepScalingPolicyConfiguration.Cooldown).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .counts import Datapoint
from .deployfiles import DATAPOINT_METRICS, Step, StepScaling
from .metricmath import evaluate


def alarm_value(spec: StepScaling, point: Datapoint) -> float | None:
    """The alarm's metric for one datapoint."""
    values = {metric_id: float(getattr(point, DATAPOINT_METRICS[name])) for metric_id, name in spec.metrics}
    return evaluate(spec.expression, values)


def in_alarm(spec: StepScaling, points: list[Datapoint]) -> tuple[bool, float | None]:
    """(the alarm's state is ALARM, its latest value), given the latest datapoints (newest first)."""
    latest = [alarm_value(spec, p) for p in points[: spec.periods]]
    breaching = sum(1 for v in latest if v is not None and v > spec.threshold)
    return breaching >= spec.datapoints, latest[0] if latest else None


def step_for(steps: tuple[Step, ...], breach: float) -> Step | None:
    """The step whose interval [lower, upper) holds the breach (bounds are offsets from the threshold)."""
    for step in steps:
        if (step.lower is None or breach >= step.lower) and (step.upper is None or breach < step.upper):
            return step
    return None


def adjusted(spec: StepScaling, step: Step, capacity: int) -> int:
    """The capacity a step sets from `capacity`."""
    if spec.adjustment_type == "ExactCapacity":
        return int(step.adjustment)
    if spec.adjustment_type == "ChangeInCapacity":
        return capacity + int(step.adjustment)
    change = capacity * step.adjustment / 100
    if 0 < change < 1:
        change = 1
    elif change > 1:
        change = math.floor(change)
    if change > 0:
        change = max(change, spec.min_magnitude)
    return capacity + int(change)


@dataclass
class StepPolicy:
    spec: StepScaling
    minimum: int
    maximum: int
    last_out: float = -1e9
    cooldown_base: int = 0  # the capacity before the scale-out that started the cooldown
    out_to: int = 0  # the capacity the last scale-out set

    def decide(self, now: float, points: list[Datapoint], current: int) -> int | None:
        """The capacity the policy sets now (None: the alarm is not in ALARM, or no step applies)."""
        alarmed, value = in_alarm(self.spec, points)
        if not alarmed or value is None:
            return None
        step = step_for(self.spec.steps, value - self.spec.threshold)
        if step is None:
            return None
        cooling = now - self.last_out < self.spec.cooldown
        base = self.cooldown_base if cooling else current
        wanted = min(self.maximum, max(self.minimum, adjusted(self.spec, step, base)))
        if cooling:
            wanted = max(wanted, self.out_to)
        if wanted <= current:
            return None
        if not cooling:  # this scale-out starts a cooldown
            self.cooldown_base, self.last_out = current, now
        self.out_to = wanted
        return wanted
