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

Read as OpenTelemetry's specification says for its numeric variables (`export_interval`):
a value that is not a whole number of milliseconds (`15s`), or one out of range (0 or
less: no pause between exports, a busy loop), is ignored with a warning, as if unset. Both
exporters that push need the SDK and its OTLP/HTTP exporter (the engine's `otlp` extra):
without them the settings refuse to boot (`exporter_problem`), rather than run without
metrics.

Names are exactly the Prometheus ones: a counter is its `..._total` series (a cumulative
monotonic sum), a histogram its base name (buckets, count and sum, cumulative), a gauge
its name, an Info `<name>_info` (a gauge of 1). Prometheus's OTLP receiver keeps them as
they are (it adds no second `_total`), so one dashboard and one set of rules read both.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import REGISTRY
from prometheus_client.metrics_core import Metric as Family

log = logging.getLogger("sqs_worker_engine.otlp_metrics")
EXPORTERS = ("prometheus", "otlp", "both")  # WORKER_METRICS_EXPORTER
INTERVAL_VARIABLE = "OTEL_METRIC_EXPORT_INTERVAL"
DEFAULT_INTERVAL_MS = 60_000
# The specification's integer range (0 to 2**31 - 1) without 0, which is no interval.
MAX_INTERVAL_MS = 2**31 - 1
# What an export needs beyond the API: the SDK's metric data, and its OTLP/HTTP exporter.
OTLP_MODULES = ("opentelemetry.sdk.metrics.export", "opentelemetry.exporter.otlp.proto.http.metric_exporter")
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

    from ...base._version import ENGINE_VERSION

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


def otlp_installed() -> bool:
    """Whether the SDK and its OTLP/HTTP exporter import here (the engine's otlp extra)."""
    try:
        for module in OTLP_MODULES:
            importlib.import_module(module)
    except ImportError:
        return False
    return True


def exporter_problem(exporter: str, installed: bool) -> str | None:
    """Why WORKER_METRICS_EXPORTER=`exporter` cannot run here, when the otlp extra is (or is
    not) `installed`; None when it can."""
    if exporter in ("otlp", "both") and not installed:
        return (
            f"{exporter} pushes metrics over OTLP, and the OpenTelemetry SDK and its OTLP/HTTP exporter are "
            "not installed: install the engine's otlp extra (sqs-worker-engine[otlp]), or use prometheus"
        )
    return None


def export_interval(raw: str | None) -> tuple[float, str | None]:
    """The seconds between exports for OTEL_METRIC_EXPORT_INTERVAL=`raw`, and the warning to
    give when it is ignored: as OpenTelemetry's specification says for a value that cannot
    be parsed or is out of range, treated as unset (an empty one is unset too)."""
    default = DEFAULT_INTERVAL_MS / 1000
    if not raw:
        return default, None
    # Digits 0-9 only (int() also takes " 5", "+5", "1_0" and other scripts' digits), and
    # few enough of them for the bound to be checked on the number.
    if re.fullmatch(r"[0-9]{1,10}", raw) and 0 < int(raw) <= MAX_INTERVAL_MS:
        return int(raw) / 1000, None
    shown = repr(raw) if len(raw) <= 40 else f"{raw[:40]!r}..."
    return default, (
        f"{INTERVAL_VARIABLE}: {shown} is not a number of milliseconds from 1 to {MAX_INTERVAL_MS} in digits "
        f"(e.g. 15000 for 15 s): ignored, as OpenTelemetry's specification says, and metrics are exported "
        f"every {default:g} s (the default)"
    )


def configure(exporter: str, service_name: str) -> OtlpMetrics | None:
    """With `otlp` or `both` (WORKER_METRICS_EXPORTER), start exporting; None with
    `prometheus`. Settings refused to boot without the SDK (`exporter_problem`)."""
    if exporter not in ("otlp", "both"):
        return None
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    interval, warning = export_interval(os.environ.get(INTERVAL_VARIABLE))
    if warning is not None:
        log.warning("%s", warning)
    resource = {"service.name": os.environ.get("OTEL_SERVICE_NAME") or service_name}
    log.info("metrics: exported over OTLP/HTTP every %g s", interval)
    return OtlpMetrics(OTLPMetricExporter(), resource, interval).start()
