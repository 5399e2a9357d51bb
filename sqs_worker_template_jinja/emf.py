"""Which of the worker's metrics CloudWatch makes of the collector's EMF (every other series
stays in the log group): those the service's alarms (alerts.py) and the dashboard
(dashboard.py) read, and the label sets they carry as dimensions."""

from __future__ import annotations

from typing import Any

from .alerts import Bake, alerts
from .dashboard import PANELS, panel_metrics, selected


def emf_metrics(cookiecutter: dict[str, Any]) -> dict[str, list[str]]:
    """The metrics CloudWatch makes of the collector's EMF (every other series stays in the
    log group): what the service's alarms and the dashboard read, by whether they carry
    labels ("labelled": by the label sets of EMF_DIMENSIONS; "plain": no dimension)."""
    b = Bake.of(cookiecutter)
    used = set().union(*(panel_metrics(p) for p in PANELS))
    for alert in alerts(cookiecutter):
        if alert.stack == "service":
            used |= _alarm_metrics(alert.alarm, b.slug)
    plain = {
        "worker_last_progress_timestamp_seconds",
        "db_pool_in_use",
        "worker_jobs_left",
        "worker_shared_concurrency",
    }
    return {"labelled": sorted(used - plain), "plain": sorted(used & plain)}


# The label sets the worker's metrics carry, as CloudWatch dimension sets.
EMF_DIMENSIONS = [
    ["queue"],
    ["queue", "outcome"],
    ["queue", "state"],
    ["queue", "code"],
    ["queue", "action"],
    ["operation", "outcome"],
]


def _alarm_metrics(alarm: dict[str, Any], namespace: str) -> set[str]:
    names = set()
    for metric in alarm.get("Metrics", []):
        if "MetricStat" in metric and metric["MetricStat"]["Metric"]["Namespace"] == namespace:
            names.add(metric["MetricStat"]["Metric"]["MetricName"])
        elif name := selected(str(metric.get("Expression", ""))):
            names.add(name)
    return names
