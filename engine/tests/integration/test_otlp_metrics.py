"""WORKER_METRICS_EXPORTER: a worker process pushes its metrics over OTLP/HTTP to a receiver
the test runs (decoding the protobuf as a collector would), with the names /metrics shows;
with `otlp` alone there is no /metrics, and the health endpoints stay."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from sqs_worker_engine.doubles.emulators import free_port

from ..support import PACKAGE, PROJECT_ROOT, Sqs, env_for, wait_for


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
