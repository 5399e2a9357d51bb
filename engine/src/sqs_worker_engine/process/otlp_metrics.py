"""The worker's metrics over OTLP (WORKER_METRICS_EXPORTER=otlp or both), with the names
`/metrics` shows.

The engine counts with prometheus_client. No kept Python library carries a
prometheus_client registry to OTLP (OpenTelemetry's Go contrib has such a bridge; the
specification's is still being asked for), so this module is that bridge, small: every
interval it reads the registry `/metrics` serves, turns each family into the SDK's metric
data (`convert`, a pure function), and hands it to the SDK's own OTLP/HTTP exporter, which
takes its endpoint, headers, timeout and compression from the standard
`OTEL_EXPORTER_OTLP_[METRICS_]*` variables. `OTEL_METRIC_EXPORT_INTERVAL` (milliseconds,
default 60000) is the interval; the last export goes out after the drain.

Names are exactly the Prometheus ones: a counter is its `..._total` series (a cumulative
monotonic sum), a histogram its base name (buckets, count and sum, cumulative), a gauge
its name, an Info `<name>_info` (a gauge of 1). Prometheus's OTLP receiver keeps them as
they are (it adds no second `_total`), so one dashboard and one set of rules read both.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.metrics_core import Metric as Family

log = logging.getLogger("sqs_worker_engine.otlp_metrics")
EXPORTERS = ("prometheus", "otlp", "both")  # WORKER_METRICS_EXPORTER
DEFAULT_INTERVAL_MS = 60_000
STARTED_NS = time.time_ns()  # a series' start when prometheus_client keeps no _created


def _labels(sample: Any, drop: str = "") -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in sample.labels.items() if k != drop))


def convert(families: Iterable[Family], resource: Mapping[str, str], now_ns: int | None = None) -> Any:
    """The SDK's MetricsData for these Prometheus families, under one resource."""
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        Gauge,
        Histogram,
        HistogramDataPoint,
        Metric,
        MetricsData,
        NumberDataPoint,
        ResourceMetrics,
        ScopeMetrics,
        Sum,
    )
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    from ..base._version import ENGINE_VERSION

    now = now_ns if now_ns is not None else time.time_ns()
    cumulative = AggregationTemporality.CUMULATIVE
    metrics: list[Any] = []
    for family in families:
        created = {_labels(s): int(s.value * 1e9) for s in family.samples if s.name == f"{family.name}_created"}

        def point(sample: Any, created: dict[tuple[tuple[str, str], ...], int] = created) -> Any:
            labels = _labels(sample)
            return NumberDataPoint(dict(labels), created.get(labels, STARTED_NS), now, sample.value)

        if family.type == "counter":
            points = [point(s) for s in family.samples if s.name == f"{family.name}_total"]
            data: Any = Sum(points, cumulative, is_monotonic=True)
            metrics.append(Metric(f"{family.name}_total", family.documentation, family.unit, data))
        elif family.type == "histogram":
            series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
            for s in family.samples:
                key = _labels(s, drop="le")
                entry = series.setdefault(key, {"buckets": [], "count": 0.0, "sum": 0.0})
                if s.name == f"{family.name}_bucket":
                    entry["buckets"].append((float(s.labels["le"]), s.value))
                elif s.name == f"{family.name}_count":
                    entry["count"] = s.value
                elif s.name == f"{family.name}_sum":
                    entry["sum"] = s.value
            histogram_points = []
            for key, entry in series.items():
                cumulative_counts = sorted(entry["buckets"])
                bounds = [le for le, _ in cumulative_counts if not math.isinf(le)]
                counts, below = [], 0.0
                for _, count in cumulative_counts:  # OTLP counts each bucket on its own
                    counts.append(int(count - below))
                    below = count
                histogram_points.append(
                    HistogramDataPoint(
                        dict(key),
                        created.get(key, STARTED_NS),
                        now,
                        int(entry["count"]),
                        entry["sum"],
                        counts,
                        bounds,
                        min=None,  # type: ignore[arg-type] # not kept by prometheus_client
                        max=None,  # type: ignore[arg-type]
                    )
                )
            metrics.append(
                Metric(family.name, family.documentation, family.unit, Histogram(histogram_points, cumulative))
            )
        else:  # gauge, info, and any other: each series as it is named on /metrics
            by_name: dict[str, list[Any]] = {}
            for s in family.samples:
                if not s.name.endswith("_created"):
                    by_name.setdefault(s.name, []).append(point(s))
            for name, points in by_name.items():
                metrics.append(Metric(name, family.documentation, family.unit, Gauge(points)))
    scope = InstrumentationScope("sqs_worker_engine", ENGINE_VERSION)
    return MetricsData([ResourceMetrics(Resource.create(dict(resource)), [ScopeMetrics(scope, metrics, "")], "")])


class OtlpMetrics:
    """Exports the registry over OTLP/HTTP every `interval` seconds from a thread of its own
    (prometheus_client is thread-safe), and once more at `shutdown()`."""

    def __init__(self, exporter: Any, resource: Mapping[str, str], interval: float) -> None:
        self.exporter = exporter
        self.resource = dict(resource)
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="otlp-metrics", daemon=True)

    def start(self) -> OtlpMetrics:
        self._thread.start()
        return self

    def export(self) -> bool:
        try:
            result = self.exporter.export(convert(REGISTRY.collect(), self.resource))
        except Exception:
            log.warning("metrics export over OTLP failed", exc_info=True)
            return False
        return bool(getattr(result, "name", "") == "SUCCESS")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.export()

    def shutdown(self) -> None:
        """The last export (the drain's counts), then the exporter's own shutdown."""
        self._stop.set()
        self._thread.join(timeout=self.interval + 5)
        self.export()
        self.exporter.shutdown()


def configure(exporter: str, service_name: str) -> OtlpMetrics | None:
    """With `otlp` or `both` (WORKER_METRICS_EXPORTER), start exporting; None with
    `prometheus`, or without the SDK (the engine's `otlp` extra), which is said."""
    if exporter not in ("otlp", "both"):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    except ImportError:
        log.error(
            "WORKER_METRICS_EXPORTER=%s needs the engine's otlp extra: no metrics are exported over OTLP", exporter
        )
        return None
    interval = float(os.environ.get("OTEL_METRIC_EXPORT_INTERVAL") or DEFAULT_INTERVAL_MS) / 1000
    resource = {"service.name": os.environ.get("OTEL_SERVICE_NAME") or service_name}
    log.info("metrics: exported over OTLP/HTTP every %g s", interval)
    return OtlpMetrics(OTLPMetricExporter(), resource, interval).start()
