"""WORKER_METRICS_EXPORTER: a worker process pushes its metrics over OTLP/HTTP to a receiver
the test runs (decoding the protobuf as a collector would), with the names /metrics shows;
with `otlp` alone there is no /metrics, and the health endpoints stay. An
OTEL_METRIC_EXPORT_INTERVAL the specification says to ignore is ignored, with one line."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from sqs_worker_engine.doubles.emulators import free_port

from ..support import PACKAGE, PROJECT_ROOT, Sqs, cli, env_for, wait_for


def exposed_names(text: str) -> set[str]:
    """The metric names of a /metrics page: a histogram's by its base name, a counter's
    with `_total`, an Info's with `_info`; `_created` series left out."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        if family.type == "histogram":
            names.add(family.name)
        else:
            names.update(s.name for s in family.samples if not s.name.endswith("_created"))
    return names


async def run_worker(env: dict[str, str], until: Any, scrape: list[str] | None = None) -> tuple[int, str]:
    worker = subprocess.Popen(
        [sys.executable, "-m", PACKAGE, "run"],
        env=env,
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        await wait_for(until, timeout=120, what="the worker's exports")
        if scrape is not None:
            port = env["WORKER_METRICS_PORT"]
            async with aiohttp.ClientSession() as session:
                for path in ("/metrics", "/livez"):
                    async with session.get(f"http://127.0.0.1:{port}{path}") as r:
                        scrape.append(f"{r.status} {await r.text()}")
    finally:
        worker.send_signal(signal.SIGTERM)
        out, _ = await asyncio.to_thread(worker.communicate, timeout=120)
    return worker.returncode, out.decode()


def test_metrics_reach_an_otlp_receiver_with_the_prometheus_names(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    queue = sqs.create()
    sqs.send(queue, [{"id": "counted"}])
    exports: list[ExportMetricsServiceRequest] = []
    receiver, metrics_port = free_port(), free_port()

    async def collect(request: web.Request) -> web.Response:
        export = ExportMetricsServiceRequest()
        export.ParseFromString(await request.read())
        exports.append(export)
        return web.Response(body=b"", content_type="application/x-protobuf")

    def pushed() -> dict[str, Any]:
        return {m.name: m for e in exports for r in e.resource_metrics for s in r.scope_metrics for m in s.metrics}

    def counted() -> bool:
        metric = pushed().get("jobs_processed_total")
        return metric is not None and any(
            p.as_double == 1 and {a.key: a.value.string_value for a in p.attributes}.get("outcome") == "success"
            for p in metric.sum.data_points
        )

    def started() -> bool:
        """worker_info names the worker once it has started, its HTTP server with it (before,
        the Info is exported without labels)."""
        info = pushed().get("worker_info")
        return info is not None and any(
            a.key == "worker_id" for point in info.gauge.data_points for a in point.attributes
        )

    def environment(exporter: str, port: int) -> dict[str, str]:
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "WORKER_"))},
            **env_for(localstack_endpoint, queue.name, str(tmp_path / f"{exporter}.progress")),
            "TEST_QUEUE": queue.name,
            "TEST_RECORD_FILE": str(tmp_path / "records.jsonl"),
            "WORKER_METRICS_EXPORTER": exporter,
            "WORKER_METRICS_PORT": str(port),
            "WORKER_METRICS_HOST": "127.0.0.1",
            "OTEL_SERVICE_NAME": "metered-worker",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver}",
            "OTEL_METRIC_EXPORT_INTERVAL": "300",
        }

    scraped: list[str] = []
    only_otlp: list[str] = []

    async def scenario() -> tuple[tuple[int, str], tuple[int, str]]:
        app = web.Application()
        app.router.add_post("/v1/metrics", collect)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", receiver).start()
        try:
            both = await run_worker(environment("both", metrics_port), counted, scraped)
            exports.clear()
            otlp = await run_worker(environment("otlp", free_port()), started, only_otlp)
        finally:
            await runner.cleanup()
        return both, otlp

    (code, out), (otlp_code, otlp_out) = asyncio.run(scenario())
    assert code == 0, out[-3000:]
    assert otlp_code == 0, otlp_out[-3000:]
    status, page = scraped[0].split(" ", 1)
    assert status == "200"
    names = exposed_names(page)
    assert "sqs_request_duration_seconds" in names and "jobs_processed_total" in names
    # The last export, after the drain, names every series /metrics showed (more may have
    # appeared since the scrape: the drain's own).
    last = {m.name for e in exports[-1:] for r in e.resource_metrics for s in r.scope_metrics for m in s.metrics}
    assert last, "no export after the drain"
    missing = names - {m.name for e in exports for r in e.resource_metrics for s in r.scope_metrics for m in s.metrics}
    assert not missing, f"on /metrics but never over OTLP: {sorted(missing)}"
    # The kinds: a counter is a cumulative monotonic sum, a histogram has its buckets.
    duration = {m.name: m for e in exports for r in e.resource_metrics for s in r.scope_metrics for m in s.metrics}
    jobs = duration["jobs_processed_total"]
    assert jobs.sum.is_monotonic and jobs.sum.aggregation_temporality == 2  # CUMULATIVE
    requests = duration["sqs_request_duration_seconds"].histogram.data_points
    receives = [
        p for p in requests if {a.key: a.value.string_value for a in p.attributes}.get("operation") == "ReceiveMessage"
    ]
    assert receives and all(
        sum(p.bucket_counts) == p.count and len(p.bucket_counts) == len(p.explicit_bounds) + 1 for p in receives
    )
    resource = {a.key: a.value.string_value for a in exports[0].resource_metrics[0].resource.attributes}
    assert resource["service.name"] == "metered-worker"
    # WORKER_METRICS_EXPORTER=otlp: nothing to scrape, health answered as ever.
    assert only_otlp[0].startswith("404") and only_otlp[1].startswith("200"), only_otlp


INTERVAL_NAMED = "OTEL_METRIC_EXPORT_INTERVAL: "  # how a line about the variable begins


def test_an_interval_the_specification_ignores_is_one_warning_line_not_a_traceback_or_a_busy_loop(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    """OTEL_METRIC_EXPORT_INTERVAL=15s made `run` exit 1 with a ValueError traceback, and 0
    exported without a pause (438 posts in 4 s). As OpenTelemetry's specification says for a
    value it cannot parse or out of range, each is ignored with one warning line: `config`
    exits 0 saying so, and `run` exports every 60 s (the default), then once after the drain."""
    queue = sqs.create()
    receiver = free_port()
    posts: list[float] = []

    async def collect(request: web.Request) -> web.Response:
        await request.read()
        posts.append(time.monotonic())
        return web.Response(body=b"", content_type="application/x-protobuf")

    def environment(value: str) -> dict[str, str]:
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "WORKER_"))},
            **env_for(localstack_endpoint, queue.name, str(tmp_path / "worker.progress")),
            "TEST_QUEUE": queue.name,
            "WORKER_METRICS_EXPORTER": "otlp",
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver}",
            "OTEL_METRIC_EXPORT_INTERVAL": value,
        }

    async def run(value: str) -> tuple[int, list[str], float, int]:
        """`run` until it has started, then SIGTERM: its exit code, its log lines, how long it
        ran and the exports received meanwhile."""
        log = tmp_path / f"run-{value}.log"
        posts.clear()
        began = time.monotonic()
        with log.open("wb") as out:
            worker = subprocess.Popen(
                [sys.executable, "-m", PACKAGE, "run"], env=environment(value), cwd=PROJECT_ROOT, stdout=out, stderr=out
            )
            try:
                await wait_for(lambda: "worker started" in log.read_text() or worker.poll() is not None, 120, "start")
            finally:
                worker.send_signal(signal.SIGTERM)
                code = await asyncio.to_thread(worker.wait, 120)
        return code, log.read_text().splitlines(), time.monotonic() - began, len(posts)

    async def scenario() -> dict[str, tuple[int, list[str], float, int]]:
        app = web.Application()
        app.router.add_post("/v1/metrics", collect)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", receiver).start()
        try:
            return {value: await run(value) for value in ("15s", "0")}
        finally:
            await runner.cleanup()

    runs = asyncio.run(scenario())
    for value, (code, lines, seconds, exports) in runs.items():
        output = "\n".join(lines)
        assert code == 0, f"{value}: exit {code}\n{output[-3000:]}"
        assert "Traceback" not in output, f"{value}: {output[-3000:]}"
        said = [json.loads(line)["message"] for line in lines if INTERVAL_NAMED in line]
        assert (
            len(said) == 1 and said[0].startswith(f"OTEL_METRIC_EXPORT_INTERVAL: {value!r} ") and "ignored" in said[0]
        )
        assert any("exported over OTLP/HTTP every 60 s" in line for line in lines), output[-3000:]
        # One export a minute while it ran, and the last after the drain (the busy loop: hundreds).
        assert 1 <= exports <= 1 + math.ceil(seconds / 60), f"{value}: {exports} exports in {seconds:.1f} s"
        checked = cli("config", **environment(value))
        assert checked.returncode == 0, f"{value}: exit {checked.returncode}\n{checked.stderr}"
        warnings = [line for line in checked.stderr.splitlines() if INTERVAL_NAMED in line]
        assert len(warnings) == 1 and f"config: warning: {INTERVAL_NAMED}{value!r} " in warnings[0], checked.stderr
        assert "Traceback" not in checked.stderr, checked.stderr


# What a machine without the engine's otlp extra finds: no OpenTelemetry SDK, no exporter
# (a sitecustomize.py on PYTHONPATH, which Python imports before anything else).
WITHOUT_THE_OTLP_EXTRA = """\
import sys


class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("opentelemetry.sdk", "opentelemetry.exporter")):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
"""


def test_pushing_metrics_without_the_otlp_extra_is_refused_by_config_and_run(tmp_path: Path) -> None:
    """WORKER_METRICS_EXPORTER=otlp (or both) without the SDK: `config` accepted it and `run`
    exported no metrics at all. Both exit 2 with one line saying to install the extra."""
    (tmp_path / "sitecustomize.py").write_text(WITHOUT_THE_OTLP_EXTRA)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    for command, exporter in (("config", "otlp"), ("run", "both")):
        result = cli(command, PYTHONPATH=path, WORKER_METRICS_EXPORTER=exporter, WORKER_METRICS_PORT="0")
        output = result.stdout + result.stderr
        assert result.returncode == 2, f"{command}: exit {result.returncode}\n{output[-3000:]}"
        assert "Traceback" not in output, output[-3000:]
        (line,) = [line for line in result.stderr.splitlines() if line.startswith("  ")]
        assert line.startswith("  WORKER_METRICS_EXPORTER: "), result.stderr
        assert "install the engine's otlp extra (sqs-worker-engine[otlp]), or use prometheus" in line, line
