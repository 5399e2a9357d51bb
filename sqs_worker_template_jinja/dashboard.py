"""What a bake's CloudWatch dashboard shows: one table of panels.

From `PANELS` comes the CloudWatch dashboard of `deploy/ecs/service.yaml`: the panels of
`deploy/grafana/dashboard.json`, title for title and metric for metric
(tests/test_artifacts_monitoring.py holds the two together), as CloudWatch Metrics Insights
queries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .alerts import Bake
from .checkout import load_limits


@dataclass(frozen=True)
class Panel:
    """One panel: its title (the Grafana panel's) and its series, each a label and a
    Metrics Insights query (`{ns}` the EMF namespace) or a metric math expression over
    `metrics` (CloudWatch metric ids -> the metric). A panel of SQS's own metrics (`sqs`)
    shows `metrics` of the queue in AWS/SQS instead, and the Grafana panel reads them from
    a CloudWatch data source; `standard_only`: a metric SQS publishes for standard queues
    only (no panel on a FIFO queue's dashboards)."""

    title: str
    series: list[tuple[str, str]]
    metrics: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (metric, statistic)
    sqs: bool = False
    standard_only: bool = False


def _q(agg: str, metric: str, dims: str = "queue", group: str | None = None) -> str:
    schema = f'SCHEMA("{{ns}}", {dims})' if dims else 'SCHEMA("{ns}")'
    grouped = group if group is not None else dims
    return f"SELECT {agg}({metric}) FROM {schema}" + (f" GROUP BY {grouped}" if grouped else "")


PANELS = [
    Panel("Oldest message age", [("oldest", _q("MAX", "queue_oldest_message_seconds"))]),
    Panel("Backlog (visible / in flight / delayed)", [("messages", _q("MAX", "sqs_queue_messages", "queue, state"))]),
    Panel("Throughput by outcome", [("jobs", _q("SUM", "jobs_processed_total", "outcome, queue", "queue, outcome"))]),
    Panel(
        "Job duration p50 / p95 / p99",
        [("average", _q("AVG", "job_duration_seconds")), ("maximum", _q("MAX", "job_duration_seconds"))],
    ),
    Panel(
        "In flight vs concurrency",
        [
            ("in flight", _q("SUM", "worker_inflight_jobs")),
            ("concurrency", _q("SUM", "worker_concurrency")),
            ("prefetched", _q("SUM", "worker_prefetched_messages")),
            ("limit in use", _q("SUM", "worker_concurrency_limit")),
            ("adaptive floor", _q("MIN", "worker_concurrency_floor")),
        ],
    ),
    Panel(
        "Lease extensions and losses",
        [("extended", _q("SUM", "worker_lease_extensions_total")), ("lost", _q("SUM", "worker_leases_lost_total"))],
    ),
    Panel("Dead-letter sends", [("sent", _q("SUM", "worker_dead_letter_sends_total"))]),
    Panel(
        "SQS API calls by operation and outcome", [("calls", _q("SUM", "sqs_api_calls_total", "operation, outcome"))]
    ),
    Panel("Poll errors", [("errors", _q("SUM", "worker_poll_errors_total", "code, queue", "queue, code"))]),
    Panel(
        "Last progress age",
        [("seconds since the stalest worker's last progress", "EPOCH(progress) - progress")],
        {"progress": ("worker_last_progress_timestamp_seconds", "Minimum")},
    ),
    Panel(
        "Settle failures", [("failures", _q("SUM", "worker_settle_failures_total", "action, queue", "queue, action"))]
    ),
    Panel(
        "Message age at receive p95 and receive count p95",
        [
            ("age at receive (maximum)", _q("MAX", "sqs_message_age_at_receive_seconds")),
            ("receive count (maximum)", _q("MAX", "sqs_message_receive_count")),
        ],
    ),
    Panel("Database pool in use", [("in use (most of any worker)", _q("MAX", "db_pool_in_use", ""))]),
    Panel(
        "Paused on downstream trouble, and rate limited",
        [
            ("paused", _q("MAX", "worker_queue_paused")),
            ("pauses", _q("SUM", "worker_queue_pauses_total")),
            ("rate limited (s)", _q("SUM", "worker_rate_limited_seconds_total")),
        ],
    ),
    Panel(
        "Fair tenants",
        [
            ("running", _q("SUM", "worker_tenants_running")),
            ("at cap", _q("SUM", "worker_tenants_at_cap")),
            ("parked", _q("SUM", "worker_tenant_jobs_parked")),
            ("capped", _q("SUM", "worker_tenant_capped_total", "action, queue", "queue, action")),
        ],
    ),
    Panel(
        "Batch handler calls",
        [("size (average)", _q("AVG", "worker_batch_size")), ("size (maximum)", _q("MAX", "worker_batch_size"))],
    ),
    Panel("Jobs left before the worker exits", [("jobs left (fewest)", _q("MIN", "worker_jobs_left", ""))]),
    Panel(
        "Shared budget: slots per queue",
        [
            ("in use", _q("SUM", "worker_shared_slots_in_use")),
            ("budget", _q("MAX", "worker_shared_concurrency", "")),
            ("given", _q("SUM", "worker_shared_slots_given_total")),
        ],
    ),
    Panel(
        "SQS request duration by operation",
        [
            ("average", _q("AVG", "sqs_request_duration_seconds", "operation, outcome", "operation")),
            ("maximum", _q("MAX", "sqs_request_duration_seconds", "operation, outcome", "operation")),
        ],
    ),
    # SQS fair queues: with tenants as the MessageGroupId of a standard queue, the groups SQS
    # finds noisy (their messages kept behind the quiet tenants'). Only CloudWatch has it.
    Panel(
        "Noisy tenants (SQS fair queue)",
        [],
        {"noisy": ("ApproximateNumberOfNoisyGroups", "Maximum")},
        sqs=True,
        standard_only=True,
    ),
]


def selected(query: str) -> str | None:
    """The metric a Metrics Insights query reads (`SELECT SUM(name) FROM ...`), else None."""
    return query.split("(", 2)[1].split(")", 1)[0] if query.startswith("SELECT") else None


def panel_metrics(panel: Panel) -> set[str]:
    """The metric names of the worker's a panel reads (none for SQS's own)."""
    if panel.sqs:
        return set()
    names = {metric for metric, _ in panel.metrics.values()}
    return names | {name for _, query in panel.series if (name := selected(query))}


def panels(cookiecutter: dict[str, Any]) -> list[Panel]:
    """The panels of this bake's dashboards (a FIFO queue's: none of standard queues only)."""
    fifo = str(cookiecutter["queue_name"]).endswith(load_limits().FIFO_SUFFIX)
    return [panel for panel in PANELS if not (fifo and panel.standard_only)]


def dashboard(cookiecutter: dict[str, Any]) -> str:
    """The CloudWatch dashboard's body: JSON for `Fn::Sub` (the region is the stack's)."""
    b = Bake.of(cookiecutter)
    widgets = []
    for n, panel in enumerate(panels(cookiecutter)):
        metrics: list[list[Any]] = []
        for i, (label, query) in enumerate(panel.series):
            expression = query.replace("{ns}", b.slug)
            metrics.append([{"expression": expression, "label": label, "id": f"e{i}"}])
        for id_, (metric, stat) in panel.metrics.items():
            if panel.sqs:
                metrics.append(["AWS/SQS", metric, "QueueName", b.queue, {"id": id_, "stat": stat}])
            else:
                metrics.append([b.slug, metric, {"id": id_, "stat": stat, "visible": False}])
        widgets.append(
            {
                "type": "metric",
                "x": 12 * (n % 2),
                "y": 6 * (n // 2),
                "width": 12,
                "height": 6,
                "properties": {
                    "title": panel.title,
                    "region": "${AWS::Region}",
                    "view": "timeSeries",
                    "stacked": False,
                    "period": 60,
                    "metrics": metrics,
                },
            }
        )
    return json.dumps({"widgets": widgets}, indent=1)
