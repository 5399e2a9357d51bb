"""The Horizontal Pod Autoscaler as KEDA drives it, after Kubernetes' own controller
(pkg/controller/podautoscaler: the replica calculator and `behavior`).

Every sync period (15 s) each metric proposes a replica count; the HPA takes the largest,
stabilizes it (the lowest proposal of the scale-up window, the highest of the scale-down
window, so a dip or a blip inside a window moves nothing), then limits the change by the
policies (Pods or Percent per period, relative to the replicas at the period's start), and
keeps it within min and max. KEDA's metrics are external AverageValue metrics: a metric of
`value` against a target `target` proposes ceil(value / target), unless its ratio to
target x replicas is within the 10% tolerance, when it proposes no change.

Pure decisions (`proposal`, `stabilize`, `limit`) and one class that keeps what the HPA
remembers: its recent proposals and scale events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .deployfiles import Rules

SYNC_SECONDS = 15.0  # --horizontal-pod-autoscaler-sync-period
TOLERANCE = 0.1  # --horizontal-pod-autoscaler-tolerance


def proposal(value: float, target: float, current: int, tolerance: float = TOLERANCE) -> int:
    """One AverageValue metric's replica count."""
    if current > 0 and abs(value / (target * current) - 1) <= tolerance:
        return current
    return math.ceil(value / target - 1e-9)


def stabilize(history: list[tuple[float, int]], desired: int, current: int, now: float, up: Rules, down: Rules) -> int:
    """Within the windows: never above the lowest proposal of the scale-up window, never
    below the highest of the scale-down window (the current count between them)."""
    up_limit = down_limit = desired
    for at, proposed in history:
        if at > now - up.stabilization:
            up_limit = min(up_limit, proposed)
        if at > now - down.stabilization:
            down_limit = max(down_limit, proposed)
    return min(max(current, up_limit), down_limit)


def _changed(events: list[tuple[float, int]], now: float, period: int, sign: int) -> int:
    return sum(change for at, change in events if at > now - period and change * sign > 0) * sign


def limit(desired: int, current: int, events: list[tuple[float, int]], now: float, up: Rules, down: Rules) -> int:
    """The policies' bound on a change from `current` (events: (time, +added or -removed))."""
    if desired > current:
        if up.select == "Disabled":
            return current
        bounds = []
        for policy in up.policies:
            start = current - _changed(events, now, policy.period, +1) + _changed(events, now, policy.period, -1)
            if policy.kind == "Pods":
                bounds.append(start + policy.value)
            else:
                bounds.append(math.ceil(start * (1 + policy.value / 100)))
        bound = min(bounds) if up.select == "Min" else max(bounds)
        return min(desired, bound)
    if desired < current:
        if down.select == "Disabled":
            return current
        bounds = []
        for policy in down.policies:
            start = current + _changed(events, now, policy.period, -1) - _changed(events, now, policy.period, +1)
            if policy.kind == "Pods":
                bounds.append(start - policy.value)
            else:
                bounds.append(int(start * (1 - policy.value / 100)))
        bound = max(bounds) if down.select == "Min" else min(bounds)
        return max(desired, bound)
    return desired


@dataclass
class Hpa:
    minimum: int
    maximum: int
    up: Rules
    down: Rules
    history: list[tuple[float, int]] = field(default_factory=list)  # (when, proposed)
    events: list[tuple[float, int]] = field(default_factory=list)  # (when, change)

    def decide(self, now: float, proposals: list[int], current: int) -> int:
        """The replica count for `current` replicas given each metric's proposal."""
        proposed = min(self.maximum, max(self.minimum, max(proposals, default=current)))
        stable = stabilize(self.history, proposed, current, now, self.up, self.down)
        self.history.append((now, proposed))
        keep = max(self.up.stabilization, self.down.stabilization)
        self.history = [(at, p) for at, p in self.history if at > now - keep]
        desired = min(self.maximum, max(self.minimum, limit(stable, current, self.events, now, self.up, self.down)))
        if desired != current:
            self.events.append((now, desired - current))
            longest = max([p.period for p in (*self.up.policies, *self.down.policies)], default=0)
            self.events = [(at, c) for at, c in self.events if at > now - longest]
        return desired
