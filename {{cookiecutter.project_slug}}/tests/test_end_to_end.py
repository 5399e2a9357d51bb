"""The service end to end against LocalStack, driven as an operator drives it: `bootstrap`
creates the queue and its DLQ, `send` enqueues, `run` processes, SIGTERM drains.

Each run makes its own queue (so runs can share one LocalStack) and points the service's
configured queue at it with WORKER_QUEUE_<KEY>_URL, the per-queue override.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from sqs_worker_engine.limits import dlq_name

from {{ cookiecutter.package_name }}.handlers import QUEUE

PACKAGE = "{{ cookiecutter.package_name }}"
FIFO = QUEUE.endswith(".fifo")
MAX_RECEIVE_COUNT = 2

pytestmark = pytest.mark.integration


@dataclass
class Service:
    """One private queue on LocalStack, and the service's commands pointed at it."""

    endpoint: str
    queue: str
    tmp: Path
    sqs: Any

    @property
    def env(self) -> dict[str, str]:
        key = re.sub(r"[^A-Z0-9]", "_", QUEUE.upper())
        urls = self.sqs.list_queues(QueueNamePrefix=self.queue).get("QueueUrls", [])
        url = next((u for u in urls if u.endswith("/" + self.queue)), None)
        return {
            **os.environ,
            "AWS_ENDPOINT_URL": self.endpoint,
            "WORKER_QUEUES": QUEUE,
            **({f"WORKER_QUEUE_{key}_URL": url} if url else {}),
            "WORKER_METRICS_PORT": "0",
            "WORKER_HEALTH_FILE": str(self.tmp / "progress"),
            "WORKER_RETRY_BASE_SECONDS": "0.2",
            "WORKER_RETRY_MAX_SECONDS": "1",
            "WORKER_WAIT_TIME_SECONDS": "2",
        }

    def command(self, *args: str, **env: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", PACKAGE, *args],
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def send(self, body: dict[str, Any], group: str = "e2e") -> None:
        self.command("send", "--queue", self.queue, "--count", "1", "--body", json.dumps(body), "--group", group)

    def send_now(self, bodies: list[dict[str, Any]]) -> None:
        """One batch straight through the SDK (each in its own FIFO group), so all arrive at once."""
        url = self.sqs.get_queue_url(QueueName=self.queue)["QueueUrl"]
        entries: list[dict[str, Any]] = [{"Id": str(i), "MessageBody": json.dumps(b)} for i, b in enumerate(bodies)]
        if FIFO:
            for entry in entries:
                entry.update(MessageGroupId=f"g-{entry['Id']}", MessageDeduplicationId=uuid.uuid4().hex)
        assert not self.sqs.send_message_batch(QueueUrl=url, Entries=entries).get("Failed")

    def run(self, log: Path, **env: str) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", PACKAGE, "run"], env={**self.env, **env}, stdout=out, stderr=out
            )

    @contextmanager
    def running(self, log: Path, **env: str) -> Iterator[subprocess.Popen[bytes]]:
        """`run`, killed at the end if a failed test left it running."""
        worker = self.run(log, **env)
        try:
            yield worker
        finally:
            if worker.poll() is None:
                worker.kill()

    def counts(self, name: str) -> tuple[int, int]:
        url = self.sqs.get_queue_url(QueueName=name)["QueueUrl"]
        attrs = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]), int(attrs["ApproximateNumberOfMessagesNotVisible"])

    def dead_letters(self) -> list[dict[str, Any]]:
        url = self.sqs.get_queue_url(QueueName=dlq_name(self.queue))["QueueUrl"]
        found: list[dict[str, Any]] = []
        while batch := self.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, MessageAttributeNames=["All"]
        ).get("Messages", []):
            found += batch
        return found


def done_tasks(log: Path) -> list[str]:
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return [line["task_id"] for line in lines if line.get("message") == "task done"]


def drain(worker: subprocess.Popen[bytes], log: Path) -> None:
    """SIGTERM, as the platform sends it: the worker drains and exits 0."""
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(120) == 0, log.read_text()[-3000:]


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 120) -> None:
    """The timeout only bounds a broken run (a busy machine is slow, never wrong)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture
def service(localstack_endpoint: str, tmp_path: Path) -> Iterator[Service]:
    sqs = boto3.client("sqs", endpoint_url=localstack_endpoint, region_name="{{ cookiecutter.aws_region }}")
    queue = f"e2e-{uuid.uuid4().hex[:12]}" + (".fifo" if FIFO else "")
    it = Service(localstack_endpoint, queue, tmp_path, sqs)
    yield it
    for name in (queue, dlq_name(queue)):
        for url in sqs.list_queues(QueueNamePrefix=name).get("QueueUrls", []):
            sqs.delete_queue(QueueUrl=url)


def test_bootstrap_send_process_dead_letter_and_drain(service: Service, tmp_path: Path) -> None:
    out = service.command("bootstrap", "--max-receive-count", str(MAX_RECEIVE_COUNT), WORKER_QUEUES=service.queue)
    assert service.queue in out and dlq_name(service.queue) in out

    # Processed once and deleted.
    for i in range(5):
        service.send({"task_id": f"ok-{i}", "work_ms": 50}, group=f"g{i}")
    log = tmp_path / "worker.log"
    with service.running(log) as worker:
        wait_until(lambda: len(done_tasks(log)) == 5, "five tasks done")
        wait_until(lambda: service.counts(service.queue) == (0, 0), "the queue to empty")
        assert sorted(done_tasks(log)) == [f"ok-{i}" for i in range(5)], "each ran once"

        # A failing message: a transient failure is retried until SQS dead-letters it after
        # maxReceiveCount deliveries; a permanent one goes to the DLQ at once, with its reason.
        service.send({"task_id": "flaky", "fail_attempts": 99}, group="flaky")
        service.send({"task_id": "fatal", "fail": True}, group="fatal")
        wait_until(lambda: service.counts(dlq_name(service.queue))[0] == 2, "two dead letters", timeout=180)
        wait_until(lambda: service.counts(service.queue) == (0, 0), "the queue to empty")
        letters = {json.loads(m["Body"])["task_id"]: m for m in service.dead_letters()}
        assert set(letters) == {"flaky", "fatal"}
        fatal_error = letters["fatal"]["MessageAttributes"]["x-error-message"]["StringValue"]
        assert "asked to fail" in fatal_error
        assert "flaky" not in done_tasks(log)

        # SIGTERM while jobs run: they finish, are deleted, and the worker exits 0.
        service.send_now([{"task_id": f"slow-{i}", "work_ms": 4000} for i in range(3)])
        wait_until(lambda: service.counts(service.queue) == (0, 3), "three slow jobs in flight")
        drain(worker, log)
    assert {f"slow-{i}" for i in range(3)} <= set(done_tasks(log)), "every running job finished during the drain"
    assert service.counts(service.queue) == (0, 0), "nothing left in flight or lost"
{%- if cookiecutter.large_payloads == "yes" %}


def test_a_payload_over_the_size_limit_goes_through_s3(service: Service, tmp_path: Path) -> None:
    """`bootstrap` makes the bucket, `send` offloads a 300 KB task in the SQS extended
    client's format, the worker reads it back from S3 and runs it."""
    bucket = f"e2e-{uuid.uuid4().hex[:12]}"
    large = {"WORKER_LARGE_PAYLOAD_BUCKET": bucket}
    out = service.command("bootstrap", WORKER_QUEUES=service.queue, **large)
    assert f"bucket {bucket}: created" in out
    body = tmp_path / "large.json"
    body.write_text(json.dumps({"task_id": "large", "work_ms": 10, "notes": "n" * 300_000}))
    service.command("send", "--queue", service.queue, "--count", "1", "--body-file", str(body), **large)
    log = tmp_path / "worker.log"
    with service.running(log, **large) as worker:  # the worker follows pointers into this bucket only
        wait_until(lambda: done_tasks(log) == ["large"], "the large task done")
        wait_until(lambda: service.counts(service.queue) == (0, 0), "the queue to empty")
        drain(worker, log)
{%- endif %}
