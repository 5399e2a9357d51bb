"""Helpers for integration tests: queues on the emulator (LocalStack, or moto's server), and a
worker run in-process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import boto3
from prometheus_client import REGISTRY

from sqs_worker_engine import Router, Worker, WorkerState
from sqs_worker_engine.base.telemetry.events import EventName, Listener
from sqs_worker_engine.doubles.emulators import free_port
from sqs_worker_engine.process.settings import load_settings

PACKAGE = "tests.service"
REGION = "us-east-1"
# The emulators the tests of raw SQS behaviour run on (conftest.py: the `emulator` fixture).
EMULATORS = ["localstack", "moto"]
PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Queue:
    name: str
    url: str
    dlq_name: str | None
    dlq_url: str | None


class Sqs:
    """A plain boto3 client on the emulator, for arranging and inspecting queues."""

    def __init__(self, endpoint: str, access_key: str | None = None) -> None:
        self.endpoint = endpoint
        # Any: the tests poke at responses freely; the runtime is what mypy checks strictly.
        # `access_key`: LocalStack takes a 12-digit key as the account id (another account).
        self.client: Any = boto3.client(
            "sqs",
            endpoint_url=endpoint,
            region_name=REGION,
            aws_access_key_id=access_key,
            aws_secret_access_key="test" if access_key else None,
        )
        self._created: list[str] = []

    def create(
        self, *, fifo: bool = False, visibility: int = 30, max_receive: int | None = 3, prefix: str = "t"
    ) -> Queue:
        suffix = ".fifo" if fifo else ""
        base = f"{prefix}-{uuid.uuid4().hex[:12]}"
        attrs: dict[str, str] = {"VisibilityTimeout": str(visibility)}
        if fifo:
            attrs["FifoQueue"] = "true"
        dlq_name = dlq_url = None
        if max_receive is not None:
            dlq_name = f"{base}-dlq{suffix}"
            dlq_url = self.client.create_queue(QueueName=dlq_name, Attributes={"FifoQueue": "true"} if fifo else {})[
                "QueueUrl"
            ]
            self._created.append(dlq_url)
            dlq_arn = self.attributes(dlq_url)["QueueArn"]
            attrs["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive)})
        name = base + suffix
        url = self.client.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"]
        self._created.append(url)
        return Queue(name, url, dlq_name, dlq_url)

    def track(self, url: str) -> None:
        """Delete this queue at the end of the test."""
        self._created.append(url)

    def attributes(self, url: str) -> dict[str, str]:
        return dict(self.client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"])

    def send(self, queue: Queue, bodies: list[Any], group: str | None = None, **extra: Any) -> list[str]:
        ids = []
        for i in range(0, len(bodies), 10):
            entries = []
            for j, body in enumerate(bodies[i : i + 10]):
                entry: dict[str, Any] = {
                    "Id": str(j),
                    "MessageBody": body if isinstance(body, str) else json.dumps(body),
                }
                if group is not None:
                    entry["MessageGroupId"] = group
                    entry["MessageDeduplicationId"] = uuid.uuid4().hex
                entry.update(extra)
                entries.append(entry)
            resp = self.client.send_message_batch(QueueUrl=queue.url, Entries=entries)
            assert not resp.get("Failed"), resp.get("Failed")
            ids += [ok["MessageId"] for ok in resp["Successful"]]
        return ids

    def counts(self, url: str) -> tuple[int, int]:
        """(visible, in flight) right now."""
        a = self.attributes(url)
        return int(a["ApproximateNumberOfMessages"]), int(a["ApproximateNumberOfMessagesNotVisible"])

    def receive_all(self, url: str, wait: int = 1, visibility: int = 60) -> list[dict[str, Any]]:
        """Drain what is visible now (keeps it invisible for `visibility` seconds)."""
        out: list[dict[str, Any]] = []
        while True:
            resp = self.client.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=wait,
                VisibilityTimeout=visibility,
                MessageAttributeNames=["All"],
                MessageSystemAttributeNames=["All"],
            )
            batch = resp.get("Messages", [])
            if not batch:
                return out
            out += batch

    def cleanup(self) -> None:
        for url in self._created:
            with contextlib.suppress(Exception):  # best effort; LocalStack may be gone
                self.client.delete_queue(QueueUrl=url)


def env_for(endpoint: str, queues: str, health_file: str, **overrides: Any) -> dict[str, str]:
    """Worker environment for tests: fast retries, no HTTP server unless asked."""
    env = {
        "WORKER_QUEUES": queues,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": REGION,
        "WORKER_METRICS_PORT": "0",
        "WORKER_HEALTH_FILE": health_file,
        "WORKER_RETRY_BASE_SECONDS": "0.5",
        "WORKER_RETRY_MAX_SECONDS": "2",
        "WORKER_ACK_FLUSH_MS": "50",
        "WORKER_ID": "test-worker",
    }
    env.update({k: str(v) for k, v in overrides.items()})
    return env


def metrics_env(endpoint: str, queues: str, health_file: str, **overrides: Any) -> tuple[int, dict[str, str]]:
    """`env_for`, with the worker's metrics and health server on a free port of 127.0.0.1:
    that port, and the environment."""
    port = free_port()
    env = env_for(endpoint, queues, health_file, WORKER_METRICS_PORT=port, WORKER_METRICS_HOST="127.0.0.1", **overrides)
    return port, env


async def http_get(port: int, path: str) -> tuple[int, str]:
    """Status and body from the worker's HTTP server (async: it may serve from this loop)."""
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}{path}") as r:
        return r.status, await r.text()


async def until_status(port: int, path: str, status: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while (await http_get(port, path))[0] != status:
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never answered {status}")
        await asyncio.sleep(0.2)


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def wait_for(predicate: Callable[[], bool], timeout: float = 60, what: str = "condition") -> None:
    """Poll until `predicate()`; the timeout only bounds a broken run, it is not a measurement."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    """`wait_for` for a test that is not a coroutine: poll until `condition()`."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def cli(*args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m <package> <args>` in a separate process, as an operator types it."""
    return subprocess.run(
        [sys.executable, "-m", PACKAGE, *args],
        env={**os.environ, "AWS_REGION": REGION, **env},
        cwd=PROJECT_ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@asynccontextmanager
async def running_worker(
    env: Mapping[str, str],
    router: Router,
    on_client: Callable[[Any], None] | None = None,
    listeners: Mapping[EventName, Listener] | None = None,
) -> Any:
    """Run a Worker in this event loop; stop (drain) it on exit."""
    worker = Worker(load_settings(env), router, on_client=on_client)
    for event, listener in (listeners or {}).items():
        worker.on(event, listener)
    task = asyncio.create_task(worker.run())
    try:
        await wait_for(lambda: worker.state == WorkerState.RUNNING or task.done(), 60, "worker start")
        if task.done():
            task.result()
        yield worker
    finally:
        worker.stop("test finished")
        await asyncio.wait_for(task, 120)


class CallLog:
    """Records SQS API calls through botocore's own event hooks (the calls still go to LocalStack)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.responses: list[str] = []

    def attach(self, client: Any) -> None:
        client.meta.events.register("before-parameter-build.sqs", self._record)
        client.meta.events.register("after-call.sqs", self._answered)

    def _record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls.append((model.name, dict(params)))

    def _answered(self, model: Any, **_: Any) -> None:
        self.responses.append(model.name)

    def completed(self, operation: str) -> int:
        return self.responses.count(operation)

    def named(self, operation: str) -> list[dict[str, Any]]:
        return [params for op, params in self.calls if op == operation]


# -- subprocess workers ---------------------------------------------------------------


def running(pid: int) -> bool:
    """Is process `pid` alive (a zombie, dead but not yet reaped, is not)?"""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def worker_process(
    env: Mapping[str, str], log_path: Path, handlers: str = "tests.integration.app:router"
) -> subprocess.Popen[bytes]:
    """`python -m <package> run` as a separate process, the way a platform runs it."""
    full = {**os.environ, **env, "WORKER_HANDLERS": handlers, "PYTHONPATH": str(PROJECT_ROOT)}
    with open(log_path, "ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", PACKAGE, "run"], env=full, cwd=PROJECT_ROOT, stdout=log, stderr=log
        )


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def log_lines(path: Path) -> Iterator[dict[str, Any]]:
    for line in path.read_text().splitlines():
        try:
            yield json.loads(line)
        except ValueError:
            continue
