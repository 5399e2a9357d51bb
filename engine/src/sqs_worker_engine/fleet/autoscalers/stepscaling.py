"""An ECS service's step scaling policies (Application Auto Scaling) and the CloudWatch
alarms that invoke them, beside the target tracking policy (targettracking.py): one that
scales out on a high alarm, one that scales in on a low alarm.

An alarm reads one-minute datapoints (SQS's metrics are published a minute after their
minute ends: sqs/counts.py) and is in ALARM when `DatapointsToAlarm` of the latest
`EvaluationPeriods` breach the threshold (above it for a high alarm, below it for a low
one); missing datapoints do not breach. While it is in ALARM it invokes its policy at each
evaluation (once a minute). The policy takes the step whose interval holds the breach (the
alarm's value less its threshold: at or above the threshold [lower, upper), below it
(lower, upper], Application Auto Scaling's StepAdjustment) and applies its adjustment to the
capacity: a count (ChangeInCapacity), a percentage (its magnitude rounded down when above
1, up to 1 when below, at least MinAdjustmentMagnitude), or the capacity itself
(ExactCapacity).

The cooldown (StepScalingPolicyConfiguration.Cooldown) means one thing for each direction.
After a scale-out, what it added counts as part of the capacity while the cooldown lasts:
the next scale-out adds only what a larger step asks beyond it. After a scale-in, further
scale-ins wait for the cooldown to end; a scale-out (by any policy) ends it at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..sqs.counts import DATAPOINT_METRICS, Datapoint
from ..sqs.metricmath import evaluate


@dataclass(frozen=True)
class Step:
    """One step adjustment: where the alarm's value lies from its threshold (the bounds
    are offsets from it, negative below it; None: unbounded) and what the step adds (a
    negative adjustment removes)."""

    lower: float | None
    upper: float | None
    adjustment: float


@dataclass(frozen=True)
class StepScaling:
    """A step scaling policy and the CloudWatch alarm that invokes it: a high alarm
    (GreaterThan...) for a policy that scales out, a low one (LessThan...) for one that
    scales in."""

    metrics: tuple[tuple[str, str], ...]  # (the alarm's metric id, the metric's name)
    expression: str  # what the alarm compares, over those ids (a metric math expression, or one id)
    threshold: float
    periods: int  # EvaluationPeriods
    datapoints: int  # DatapointsToAlarm
    adjustment_type: str  # ChangeInCapacity, PercentChangeInCapacity or ExactCapacity
    steps: tuple[Step, ...]
    cooldown: int
    min_magnitude: int = 0  # MinAdjustmentMagnitude (PercentChangeInCapacity only)
    comparison: str = "GreaterThanThreshold"  # the alarm's ComparisonOperator

    @property
    def scales_in(self) -> bool:
        """A low alarm: the policy removes capacity while the metric stays below the threshold."""
        return self.comparison in LOW_COMPARISONS

    def breaching(self, value: float) -> bool:
        """The alarm's comparison of one datapoint's value with its threshold."""
        if self.comparison == "GreaterThanOrEqualToThreshold":
            return value >= self.threshold
        if self.comparison == "LessThanThreshold":
            return value < self.threshold
        if self.comparison == "LessThanOrEqualToThreshold":
            return value <= self.threshold
        return value > self.threshold


HIGH_COMPARISONS = ("GreaterThanThreshold", "GreaterThanOrEqualToThreshold")
LOW_COMPARISONS = ("LessThanThreshold", "LessThanOrEqualToThreshold")


def alarm_value(spec: StepScaling, point: Datapoint) -> float | None:
    """The alarm's metric for one datapoint."""
    values = {metric_id: float(getattr(point, DATAPOINT_METRICS[name])) for metric_id, name in spec.metrics}
    return evaluate(spec.expression, values)


def in_alarm(spec: StepScaling, points: list[Datapoint]) -> tuple[bool, float | None]:
    """(the alarm's state is ALARM, its latest value), given the latest datapoints (newest first)."""
    latest = [alarm_value(spec, p) for p in points[: spec.periods]]
    breaching = sum(1 for v in latest if v is not None and spec.breaching(v))
    return breaching >= spec.datapoints, latest[0] if latest else None


def step_for(steps: tuple[Step, ...], breach: float, *, below: bool = False) -> Step | None:
    """The step whose interval holds the breach (bounds are offsets from the threshold):
    [lower, upper) for a high alarm, (lower, upper] for a low one (`below`), so that the
    threshold itself belongs to the steps on the alarm's side of it."""
    for step in steps:
        if not below:
            within = (step.lower is None or breach >= step.lower) and (step.upper is None or breach < step.upper)
        else:
            within = (step.lower is None or breach > step.lower) and (step.upper is None or breach <= step.upper)
        if within:
            return step
    return None


def adjusted(spec: StepScaling, step: Step, capacity: int) -> int:
    """The capacity a step sets from `capacity`."""
    if spec.adjustment_type == "ExactCapacity":
        return int(step.adjustment)
    if spec.adjustment_type == "ChangeInCapacity":
        return capacity + int(step.adjustment)
    change = capacity * step.adjustment / 100
    if change == 0:
        return capacity
    # Application Auto Scaling rounds the magnitude: down past 1 (12.7 -> 12, -6.67 -> -6),
    # up to 1 below it (0.67 -> 1, -0.58 -> -1); then at least MinAdjustmentMagnitude.
    magnitude = max(1, math.floor(abs(change)), spec.min_magnitude)
    return capacity + int(math.copysign(magnitude, change))


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


@dataclass
class ScaleInStepPolicy:
    """The step scaling policy on a low alarm: it removes capacity while the alarm holds,
    one step per cooldown."""

    spec: StepScaling
    minimum: int
    maximum: int
    last_in: float = -1e9

    def decide(self, now: float, points: list[Datapoint], current: int) -> int | None:
        """The capacity the policy sets now (None: not in ALARM, cooling down, or no step applies)."""
        if now - self.last_in < self.spec.cooldown:
            return None
        alarmed, value = in_alarm(self.spec, points)
        if not alarmed or value is None:
            return None
        step = step_for(self.spec.steps, value - self.spec.threshold, below=True)
        if step is None:
            return None
        wanted = min(self.maximum, max(self.minimum, adjusted(self.spec, step, current)))
        if wanted >= current:
            return None
        self.last_in = now
        return wanted

    def scaled_out(self) -> None:
        """A scale-out by any policy ends the scale-in cooldown."""
        self.last_in = -1e9
