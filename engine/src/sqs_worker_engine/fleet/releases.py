"""A bad release, and what catches it: ECS's deployment alarms (the service's
`DeploymentConfiguration.Alarms`), read from the stack and evaluated on the simulated
fleet's own figures, roll a deployment back to the release before it.

What the stack names: each alarm of `AlarmNames`, found among the stack's own alarms or,
for a parameter (`DeadLetterAlarmName`), among deploy/aws/queues.yaml's alarms that an
output of that name refers to; where `AlarmNames` is an `Fn::If`, the longer branch (the
owner passes the parameter, as deploy/README.md's commands do). An alarm is simulated when
every metric it reads is one the simulation produces (`reading`): the worker's
`jobs_processed_total` by outcome (the bad release's failures counted as `retry`, the jobs
completed as `success`) and the DLQ's `ApproximateNumberOfMessagesVisible`. Any other is
listed as not simulated, with why: the report says so.

How ECS acts (the model): CloudWatch evaluates each alarm once a minute on its latest
`EvaluationPeriods` periods, each published `delay` after it ends (SQS's metrics are a
minute late; the worker's, through the collector's EMF, are taken to be the same). While
the deployment is in progress, and for a bake time after it completed, an alarm in ALARM
fails it and ECS rolls back: a rolling update to the task definition before it, at the
service's own pace. AWS computes the bake time from the alarms and does not publish how:
the model takes the longest alarm's window (EvaluationPeriods x Period).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..handlers.outcomes import OUTCOMES
from .autoscalers.deployfiles import cloudformation
from .sqs.counts import Datapoint
from .sqs.metricmath import evaluate

# The outcomes a failed job is published under; the bad release's are all counted as retries
# (its last attempt's dead_letter among them: the error ratio's numerator sums them all).
FAILED_OUTCOME = "retry"
STATS = ("Sum", "Maximum")


@dataclass(frozen=True)
class Alarm:
    """One CloudWatch alarm the deployment watches, as the simulation evaluates it."""

    name: str
    metrics: tuple[tuple[str, str], ...]  # (metric id, what the simulation reads for it: a Datapoint field or "zero")
    expression: str
    threshold: float
    period: int  # seconds, a multiple of 60
    periods: int  # EvaluationPeriods
    datapoints: int  # DatapointsToAlarm
    stat: str  # Sum or Maximum, over the period's one-minute datapoints

    @property
    def window(self) -> int:
        return self.period * self.periods


@dataclass(frozen=True)
class DeploymentAlarms:
    """What the service's DeploymentConfiguration.Alarms names, as simulated."""

    rollback: bool
    alarms: tuple[Alarm, ...]
    not_simulated: tuple[str, ...] = ()  # "<alarm>: why"

    @property
    def bake_seconds(self) -> float:
        return float(max((a.window for a in self.alarms), default=0))


def reading(metric: dict[str, Any]) -> str | None:
    """What the simulation reads for a CloudWatch metric (a Datapoint field, or "zero": an
    outcome the simulated handlers never end with); None: not one it produces."""
    name = metric.get("MetricName")
    dimensions = {d.get("Name"): d.get("Value") for d in metric.get("Dimensions", [])}
    if name == "jobs_processed_total" and dimensions.get("outcome") in OUTCOMES:
        outcome = dimensions["outcome"]
        return "deleted" if outcome == "success" else "failed" if outcome == FAILED_OUTCOME else "zero"
    queue = dimensions.get("QueueName")
    if name == "ApproximateNumberOfMessagesVisible" and "DeadLetterQueue" in str(queue):
        return "dead_letters"
    return None


def _alarm(name: str, props: dict[str, Any]) -> Alarm | str:
    """The alarm as simulated, or why it cannot be."""
    entries = props.get("Metrics") or [
        {"Id": "m", "MetricStat": {"Metric": props, "Period": props.get("Period", 60), "Stat": props.get("Statistic")}}
    ]
    metrics, expression, periods, stats = [], "", set(), set()
    for entry in entries:
        stat = entry.get("MetricStat")
        if stat is not None:
            read = reading(stat.get("Metric", {}))
            if read is None:
                return (
                    f"{name}: reads {stat.get('Metric', {}).get('MetricName')}, which the simulation does not produce"
                )
            metrics.append((str(entry["Id"]), read))
            periods.add(int(stat.get("Period", 60)))
            stats.add(stat.get("Stat"))
            if entry.get("ReturnData", True):
                expression = str(entry["Id"])
        elif entry.get("ReturnData", True):
            expression = str(entry.get("Expression"))
    if len(periods) != 1 or min(periods) % 60 or len(stats) != 1 or min(stats) not in STATS:
        return f"{name}: one period (whole minutes) and one of {', '.join(STATS)} for every metric are simulated"
    if str(props.get("ComparisonOperator")) != "GreaterThanThreshold":
        return f"{name}: compares with {props.get('ComparisonOperator')}; GreaterThanThreshold is simulated"
    ids = {i: 1.0 for i, _ in metrics}
    try:
        evaluate(expression, ids, ids)
    except (ValueError, SyntaxError) as exc:
        return f"{name}: its expression {expression!r}: {exc}"
    count = int(props.get("EvaluationPeriods", 1))
    return Alarm(
        name,
        tuple(metrics),
        expression,
        float(props.get("Threshold", 0)),
        periods.pop(),
        count,
        int(props.get("DatapointsToAlarm", count)),
        stats.pop(),
    )


def read(deploy: Path) -> DeploymentAlarms | None:
    """The deployment alarms of deploy/ecs/service.yaml (None: no ECS stack, or its
    deployments watch no alarm)."""
    path = deploy / "ecs" / "service.yaml"
    if not path.is_file():
        return None
    template = cloudformation(path)
    resources = template.get("Resources", {})
    service: dict[str, Any] = next(
        (r.get("Properties", {}) for r in resources.values() if r.get("Type") == "AWS::ECS::Service"), {}
    )
    config = service.get("DeploymentConfiguration", {}).get("Alarms")
    if not config or str(config.get("Enable", "false")).lower() != "true":
        return None
    names = config.get("AlarmNames", [])
    if isinstance(names, dict) and "Fn::If" in names:
        names = max(names["Fn::If"][1:], key=lambda branch: len(branch) if isinstance(branch, list) else 0)
    queues_path = deploy / "aws" / "queues.yaml"
    queues = cloudformation(queues_path) if queues_path.is_file() else {}
    alarms: list[Alarm] = []
    not_simulated: list[str] = []
    for entry in names:
        ref = entry.get("Ref") if isinstance(entry, dict) else None
        found = _find(ref, resources, queues) if ref else None
        if found is None:
            not_simulated.append(f"{ref or entry}: not an alarm of the stack or of deploy/aws/queues.yaml")
            continue
        alarm = _alarm(*found)
        if isinstance(alarm, Alarm):
            alarms.append(alarm)
        else:
            not_simulated.append(alarm)
    rollback = str(config.get("Rollback", "false")).lower() == "true"
    return DeploymentAlarms(rollback, tuple(alarms), tuple(not_simulated))


def _find(ref: str, resources: dict[str, Any], queues: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(the alarm's name, its properties) for a Ref: one of the stack's alarms, or the queues
    stack's alarm its output of that name refers to (a parameter the owner passes)."""
    if resources.get(ref, {}).get("Type") == "AWS::CloudWatch::Alarm":
        return ref, dict(resources[ref].get("Properties", {}))
    output = queues.get("Outputs", {}).get(ref, {}).get("Value", {})
    target = output.get("Ref") if isinstance(output, dict) else None
    alarm = queues.get("Resources", {}).get(target, {})
    if alarm.get("Type") == "AWS::CloudWatch::Alarm":
        return str(target), dict(alarm.get("Properties", {}))
    return None


def value(alarm: Alarm, minutes: list[Datapoint], before: list[Datapoint] | None = None) -> float | None:
    """The alarm's metric over one period's one-minute datapoints (oldest first); `before`,
    the period before it, for a DIFF."""
    if not minutes:
        return None
    return evaluate(alarm.expression, _combined(alarm, minutes), _combined(alarm, before) if before else None)


def _combined(alarm: Alarm, minutes: list[Datapoint]) -> dict[str, float]:
    """Each metric's statistic over the period's minutes."""
    combine = sum if alarm.stat == "Sum" else max
    return {i: float(combine(0.0 if f == "zero" else float(getattr(p, f)) for p in minutes)) for i, f in alarm.metrics}


def in_alarm(alarm: Alarm, periods: list[list[Datapoint]]) -> bool:
    """ALARM: at least `datapoints` of the latest `periods` (newest first, each its minutes
    oldest first; one more than it evaluates, for a DIFF) breach; missing ones do not."""
    breaching = 0
    for i, minutes in enumerate(periods[: alarm.periods]):
        now = value(alarm, minutes, periods[i + 1] if i + 1 < len(periods) else None)
        breaching += now is not None and now > alarm.threshold
    return breaching >= alarm.datapoints


def periods_of(alarm: Alarm, minutes: dict[int, Datapoint], now: float, delay: float) -> list[list[Datapoint]]:
    """The alarm's periods published by `now` (each published `delay` after it ends), newest
    first, each its one-minute datapoints oldest first: as many as an evaluation reads."""
    per = alarm.period // 60
    newest_end = int((now - delay) // alarm.period) * per  # the first minute after the newest published period
    found = []
    for end in range(newest_end, newest_end - per * (alarm.periods + 1), -per):
        points = [minutes[m] for m in range(end - per, end) if m in minutes]
        found.append(points)
    return found


def rollback_due(*, alarmed: bool, deploying: bool, since_completed: float | None, bake: float) -> bool:
    """ECS fails a deployment and rolls it back when a watched alarm is in ALARM while it
    is in progress, or within its bake time after it completed."""
    if not alarmed:
        return False
    return deploying or (since_completed is not None and since_completed <= bake)


def describe(alarms: DeploymentAlarms | None) -> dict[str, Any]:
    """For the report: what the deployment watches, and what of it is simulated."""
    if alarms is None:
        return {"watched": [], "rollback": False, "not_simulated": []}
    return {
        "watched": [
            f"{a.name}: {a.expression} > {a.threshold:g}, {a.datapoints} of {a.periods} periods of {a.period} s"
            for a in alarms.alarms
        ],
        "rollback": alarms.rollback,
        "bake_seconds": alarms.bake_seconds,
        "not_simulated": list(alarms.not_simulated),
    }
