"""The worker that bench/instructions.py counts: the engine's real Worker with its own
aiobotocore clients, consuming MESSAGES messages of QUEUE at ENDPOINT, then stopping as
SIGTERM would. Prints one JSON line: the messages handled and the SQS requests made, by
operation (the worker's own counter, `sqs_api_calls_total`). It imports only the engine's
public face, which every version bench/instructions.py puts first on the path has."""

from __future__ import annotations

import asyncio
import json
import logging
import os

import uvloop
from prometheus_client import REGISTRY
from sqs_worker_engine import Job, Router, ServiceDefaults, Worker, load_settings

logging.disable(logging.INFO)  # a log line a message would be counted as the engine's work
MESSAGES = int(os.environ["MESSAGES"])
SLEEP = float(os.environ.get("SLEEP_SECONDS", "0"))
router = Router()
handled = 0


@router.handler(os.environ["QUEUE"], payload=str)
async def handle(job: Job[str]) -> None:
    global handled
    if SLEEP:
        await asyncio.sleep(SLEEP)
    handled += 1


SETTINGS = {
    "AWS_REGION": "us-east-1",
    "AWS_ENDPOINT_URL": os.environ["ENDPOINT"],
    "WORKER_QUEUES": os.environ["QUEUE"],
    "WORKER_CONCURRENCY": os.environ["CONCURRENCY"],
    "WORKER_METRICS_PORT": "0",
    "WORKER_BACKLOG_SAMPLE_SECONDS": "3600",
    # Under valgrind a message takes ~50 times its CPU: leases long enough that none is lost.
    "WORKER_VISIBILITY_TIMEOUT_SECONDS": "600",
    "WORKER_JOB_TIMEOUT_MS": "60000",
}


async def main() -> None:
    worker = Worker(load_settings(SETTINGS, ServiceDefaults(name="instructions")), router)
    running = asyncio.create_task(worker.run())
    while handled < MESSAGES and not running.done():
        await asyncio.sleep(0.05)
    worker.stop("SIGTERM")
    await running


uvloop.run(main())
requests: dict[str, float] = {}
for family in REGISTRY.collect():
    for sample in family.samples:
        if sample.name == "sqs_api_calls_total":
            operation = sample.labels["operation"]
            requests[operation] = requests.get(operation, 0.0) + sample.value
print(json.dumps({"handled": handled, "requests": requests}))
