"""What AWS's latency costs, and what prefetch wins back: side by side in one run.

The real Worker (in this process) against LocalStack, through the engine's fault proxy,
which holds every SQS request for an added round trip (0 ms: the emulator's own latency,
a few ms; 20 ms: about SQS in-region). For each handler and concurrency, the worker runs
with WORKER_PREFETCH=0 (no messages beyond the concurrency) and with WORKER_PREFETCH set to
the concurrency (sized within that by Little's law, see the engine's prefetch.py), taking
turns. Reported: throughput, efficiency (throughput / (concurrency / handler time)), SQS
requests per message, and the ratio prefetch / none. No pass/fail threshold.

    python bench/latency.py [--seconds S] [--latency-ms 20] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import sys
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
from sqs_worker_engine import Job, Router, localstack
from sqs_worker_engine.settings import ServiceDefaults, load_settings
from sqs_worker_engine.worker import Worker

ROOT = Path(__file__).resolve().parents[1]
REGION = "us-east-1"
SCENARIOS = ((0.01, 10), (0.1, 10), (0.1, 50))  # (handler seconds, concurrency)


def _faultproxy() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_faultproxy", ROOT / "engine" / "tests" / "faultproxy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _client(endpoint: str) -> Any:
    return boto3.client(
        "sqs", endpoint_url=endpoint, region_name=REGION, aws_access_key_id="test", aws_secret_access_key="test"
    )


def _seed(sqs: Any, url: str, count: int) -> None:
    body = json.dumps({"n": 0})
    for start in range(0, count, 10):
        entries = [{"Id": str(i), "MessageBody": body} for i in range(min(10, count - start))]
        sqs.send_message_batch(QueueUrl=url, Entries=entries)


async def _run(
    endpoint: str, queue: str, handler_s: float, concurrency: int, prefetch: int, seconds: float
) -> list[float]:
    """Completion times of a worker that ran `seconds` after its first job and a second's warm-up."""
    done: list[float] = []
    router = Router()

    @router.handler(queue)
    async def handle(job: Job[Any]) -> None:
        await asyncio.sleep(handler_s)
        done.append(time.monotonic())

    env = {
        "WORKER_QUEUES": queue,
        "AWS_REGION": REGION,
        "AWS_ENDPOINT_URL": endpoint,
        "WORKER_METRICS_PORT": "0",
        "WORKER_CONCURRENCY": str(concurrency),
        "WORKER_PREFETCH": str(prefetch),
        "WORKER_BACKLOG_SAMPLE_SECONDS": "3600",
        "WORKER_WAIT_TIME_SECONDS": "1",
    }
    worker = Worker(load_settings(env, ServiceDefaults(name="bench-latency")), router)
    task = asyncio.create_task(worker.run())
    for _ in range(600):  # the window counts from the first job, however slow the start
        if done or task.done():
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0 + seconds)
    worker.stop("bench done")
    await task
    return done


def measure(
    endpoint: str, latency_ms: float, seconds: float, scenarios: tuple[tuple[float, int], ...] = SCENARIOS
) -> list[dict[str, Any]]:
    faultproxy = _faultproxy()
    sqs = _client(endpoint)
    rows = []
    for handler_s, concurrency in scenarios:
        for added in (0.0, latency_ms):
            row: dict[str, Any] = {"handler_ms": handler_s * 1000, "concurrency": concurrency, "added_ms": added}
            for prefetch in (0, concurrency):
                queue = f"bench-latency-{uuid.uuid4().hex[:8]}"
                url = sqs.create_queue(QueueName=queue)["QueueUrl"]
                limit = concurrency / handler_s
                _seed(sqs, url, int(limit * (seconds + 1) * 1.2) + 100)
                proxy = faultproxy.FaultProxy(endpoint).start()
                if added:
                    proxy.slow("*", added / 1000, rate=1.0)
                try:
                    requests_before = sum(proxy.counts.values())
                    done = asyncio.run(_run(proxy.url, queue, handler_s, concurrency, prefetch, seconds))
                    requests = sum(proxy.counts.values()) - requests_before
                finally:
                    proxy.stop()
                    sqs.delete_queue(QueueUrl=url)
                start = done[0] + 1.0 if done else 0.0
                window = [t for t in done if t >= start]
                span = (window[-1] - window[0]) if len(window) > 1 else 0.0
                rate = (len(window) - 1) / span if span else 0.0
                key = "prefetch" if prefetch else "none"
                row[f"{key}_per_s"] = round(rate, 1)
                row[f"{key}_efficiency"] = round(rate / limit, 3)
                row[f"{key}_requests_per_message"] = round(requests / max(1, len(done)), 3)
            row["ratio"] = round(row["prefetch_per_s"] / row["none_per_s"], 2) if row["none_per_s"] else None
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def markdown(rows: list[dict[str, Any]], latency_ms: float, seconds: float) -> str:
    lines = [
        "# What AWS's latency costs, and what prefetch wins back",
        "",
        "Generated by `make bench-latency` (`bench/latency.py`): the worker in one process",
        "against LocalStack through the engine's fault proxy, which adds a round trip to every",
        f"SQS request (0 ms: the emulator's own few ms; {latency_ms:g} ms: about SQS in-region).",
        "Each row runs `WORKER_PREFETCH=0` and `WORKER_PREFETCH=<concurrency>` in turn,",
        f"measured over {seconds:g} s from a second after the first job. Efficiency = throughput /",
        "(concurrency / handler time). The worker, the proxy and LocalStack share one 2-core",
        "machine; this run does not separate what each costs at the higher rates.",
        "",
        "| handler | concurrency | added round trip | no prefetch: jobs/s (efficiency) | prefetch: jobs/s (efficiency) | ratio | requests/message (none, prefetch) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['handler_ms']:g} ms | {r['concurrency']} | +{r['added_ms']:g} ms "
            f"| {r['none_per_s']} ({r['none_efficiency']}) | {r['prefetch_per_s']} ({r['prefetch_efficiency']}) "
            f"| {r['ratio']} | {r['none_requests_per_message']}, {r['prefetch_requests_per_message']} |"
        )
    return "\n".join([*lines, ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    args = parser.parse_args(argv)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):  # LocalStack's; the SDK reads the environment
        os.environ.setdefault(key, "test")
    ls = localstack.ensure(services="sqs")
    try:
        rows = measure(ls.endpoint, args.latency_ms, args.seconds)
    finally:
        if ls.started_here:
            ls.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"latency_ms": args.latency_ms, "seconds": args.seconds, "rows": rows}
    (args.out / "benchmarks-latency.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "benchmarks-latency.md").write_text(markdown(rows, args.latency_ms, args.seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
