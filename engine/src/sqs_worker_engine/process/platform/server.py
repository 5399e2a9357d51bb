"""The HTTP side: /metrics (Prometheus), /livez (progress), /readyz (dependencies)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics

from ...base.telemetry.health import Health

log = logging.getLogger("sqs_worker_engine.server")
ReadyCheck = tuple[str, Callable[[], Awaitable[bool]]]


def make_app(health: Health, checks: list[ReadyCheck], serve_metrics: bool = True) -> web.Application:
    """`serve_metrics=False` (WORKER_METRICS_EXPORTER=otlp): no /metrics, the health endpoints only."""

    async def metrics(request: web.Request) -> web.Response:
        health.write_file()  # keeps the progress gauge current for this scrape
        if "application/openmetrics-text" in request.headers.get("Accept", ""):
            # OpenMetrics carries the exemplars: job_duration_seconds -> the job's trace.
            body = openmetrics.generate_latest(REGISTRY)  # type: ignore[no-untyped-call]
            return web.Response(body=body, headers={"Content-Type": openmetrics.CONTENT_TYPE_LATEST})
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def livez(_: web.Request) -> web.Response:
        stalled = health.stalled_for()
        ok = stalled <= health.stalled_after
        body = {"status": "ok" if ok else "stalled", "seconds_since_progress": round(stalled, 3)}
        return web.json_response(body, status=200 if ok else 503)

    async def readyz(_: web.Request) -> web.Response:
        results: dict[str, bool] = {"sqs": health.sqs_ok is True, "running": not health.stopping}
        for name, check in checks:
            try:
                results[name] = bool(await asyncio.wait_for(check(), timeout=2))
            except Exception:
                results[name] = False
        ok = all(results.values())
        return web.Response(
            text=json.dumps(
                {"status": "ready" if ok else "not ready", "checks": results, "paused": sorted(health.paused)}
            ),
            status=200 if ok else 503,
            content_type="application/json",
        )

    app = web.Application()
    if serve_metrics:
        app.router.add_get("/metrics", metrics)
    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
    return app


async def start_server(app: web.Application, host: str, port: int) -> web.AppRunner:
    # A scraper's keep-alive connection must not hold up the worker's exit.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    paths = " ".join(resource.canonical for resource in app.router.resources())
    log.info("serving %s on %s:%d", paths, host, port)
    return runner
