"""The OTLP metrics bridge's settings (otlp_metrics.py): OTEL_METRIC_EXPORT_INTERVAL read as
OpenTelemetry's specification says, and WORKER_METRICS_EXPORTER's need of the otlp extra."""

from __future__ import annotations

import logging

import pytest

from sqs_worker_engine.process.platform import otlp_metrics
from sqs_worker_engine.process.platform.otlp_metrics import export_interval, exporter_problem

INTERVALS = [
    # (the variable's value, the interval in seconds, ignored with a warning)
    (None, 60.0, False),
    ("", 60.0, False),  # empty is unset (the specification)
    ("15000", 15.0, False),
    ("300", 0.3, False),
    ("1", 0.001, False),
    ("2147483647", 2_147_483.647, False),  # the specification's integer range, at its top
    ("15s", 60.0, True),  # not milliseconds in digits: ValueError at `run` before
    ("0", 60.0, True),  # no pause between exports: a busy loop before
    ("-1000", 60.0, True),
    ("1.5", 60.0, True),
    ("1e4", 60.0, True),
    (" 15000", 60.0, True),
    ("\uff11\uff15\uff10\uff10\uff10", 60.0, True),  # fullwidth digits, which int() takes
    ("2147483648", 60.0, True),
    ("9" * 5000, 60.0, True),  # float() made it infinite: the export thread's wait overflowed
]


@pytest.mark.parametrize(("value", "seconds", "ignored"), INTERVALS)
def test_the_export_interval_is_whole_milliseconds_and_anything_else_is_ignored_as_unset(
    value: str | None, seconds: float, ignored: bool
) -> None:
    interval, warning = export_interval(value)
    assert interval == seconds, f"{value!r:.40}: {interval} s"
    assert (warning is not None) == ignored, warning
    if warning is not None:
        assert warning.startswith("OTEL_METRIC_EXPORT_INTERVAL: ") and "\n" not in warning, warning
        assert "ignored" in warning and "every 60 s" in warning and "e.g. 15000" in warning, warning
        assert len(warning) < 300, f"one line, whatever the value: {len(warning)} characters"


@pytest.mark.parametrize("value", ["15s", "0", "-1000", "9" * 5000])
def test_run_exports_every_60_s_with_one_warning_for_an_interval_it_ignores(
    value: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """What `run` starts (cli.cmd_run): `15s` raised ValueError out of `run` (exit 1, a
    traceback); `0` exported without a pause (438 posts in 4 s)."""
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", value)
    monkeypatch.setattr(otlp_metrics.OtlpMetrics, "start", lambda self: self)  # no thread, no export
    with caplog.at_level(logging.INFO, logger=otlp_metrics.log.name):
        pushed = otlp_metrics.configure("otlp", "metered")
    assert pushed is not None
    pushed.exporter.shutdown()
    assert pushed.interval == 60, f"{value!r:.40}: exports every {pushed.interval} s"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "OTEL_METRIC_EXPORT_INTERVAL" in warnings[0], warnings


@pytest.mark.parametrize(
    ("exporter", "installed", "refused"),
    [
        ("prometheus", True, False),
        ("prometheus", False, False),
        ("otlp", True, False),
        ("otlp", False, True),
        ("both", True, False),
        ("both", False, True),
    ],
)
def test_pushing_over_otlp_needs_the_otlp_extra(exporter: str, installed: bool, refused: bool) -> None:
    problem = exporter_problem(exporter, installed)
    assert (problem is not None) == refused, problem
    if problem is not None:
        assert "sqs-worker-engine[otlp]" in problem and "prometheus" in problem, problem


def test_the_otlp_extra_is_found_installed_here() -> None:
    """The dev environment installs it (the integration suite pushes to a receiver)."""
    assert otlp_metrics.otlp_installed()
