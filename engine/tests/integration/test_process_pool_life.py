"""The process pool's life against LocalStack, the worker as a separate process on the
Python that runs the suite (test_other_pythons.py runs this file on 3.12 and 3.13 too):
a job that kills its process alone is dead-lettered after maxReceiveCount while its
neighbours complete on their first receive; a pool's start-up does not count against a
job's timeout. Both were seen failing on CPython 3.12.1: the killer hung in flight with
its lease extended until SIGTERM, and the first jobs after boot timed out and ran twice."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

from ..support import Sqs, env_for, read_records, worker_process

HANDLERS = "tests.integration.crash_app:router"


def wait_until(condition: Any, what: str, timeout: float = 180) -> None:
    """A hang guard, not a measure of speed: the old code never got there at all."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.2)


def run_worker(sqs: Sqs, endpoint: str, tmp_path: Path, queue: Any, **env: Any) -> tuple[Any, Path, Path]:
    records, log = tmp_path / "records.jsonl", tmp_path / "worker.log"
    full = env_for(
        endpoint, queue.name, str(tmp_path / "progress"), TEST_QUEUE=queue.name, TEST_RECORD_FILE=records, **env
    )
    return worker_process(full, log, HANDLERS), records, log


def test_a_job_that_kills_its_process_alone_is_dead_lettered_and_its_neighbours_complete_once(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    queue = sqs.create(visibility=30, max_receive=2)
    assert queue.dlq_url is not None
    dlq = queue.dlq_url
    sqs.send(queue, [{"id": "killer", "kill": True}, *({"id": n, "seconds": 2} for n in "abc")])
    proc, records, log = run_worker(
        sqs,
        localstack_endpoint,
        tmp_path,
        queue,
        TEST_NEIGHBOURS=3,
        WORKER_CONCURRENCY=4,
        WORKER_PROCESS_POOL_SIZE=4,
        WORKER_JOB_TIMEOUT_MS=3000,
        WORKER_SHUTDOWN_TIMEOUT_MS=10000,
        WORKER_WAIT_TIME_SECONDS=1,
    )
    try:
        wait_until(lambda: sqs.counts(dlq) == (1, 0), "the killer reached the DLQ")
        wait_until(lambda: sqs.counts(queue.url) == (0, 0), "the queue emptied")
    finally:
        proc.send_signal(signal.SIGTERM)
        exit_code = proc.wait(60)
    (dead,) = sqs.receive_all(dlq)
    assert json.loads(dead["Body"])["id"] == "killer"
    found = read_records(records)
    for name in "abc":
        starts = [r for r in found if r["id"] == name and r["event"] == "start"]
        done = [r for r in found if r["id"] == name and r["event"] == "done"]
        assert [r["receive_count"] for r in done] == [1], f"{name} completed once, on its first receive: {found}"
        assert len(starts) <= 2, f"{name} ran at most twice (once more, alone, if caught in the crash): {found}"
    text = log.read_text()
    assert "HandlerProcessDied" in text, "the killer's failed attempts are logged as what they were"
    assert exit_code == 0, text[-3000:]


def test_a_cold_pool_start_does_not_count_against_a_job_s_timeout(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    """Each handler process takes 2 s to import the handler's module; jobs take 1 s and time
    out at 1.5 s."""
    queue = sqs.create(visibility=30, max_receive=3)
    sqs.send(queue, [{"id": f"j{i}", "seconds": 1} for i in range(2)])
    proc, records, log = run_worker(
        sqs,
        localstack_endpoint,
        tmp_path,
        queue,
        TEST_IMPORT_SECONDS=2,
        WORKER_CONCURRENCY=2,
        WORKER_PROCESS_POOL_SIZE=2,
        WORKER_JOB_TIMEOUT_MS=1500,
        WORKER_SHUTDOWN_TIMEOUT_MS=10000,
        WORKER_WAIT_TIME_SECONDS=1,
    )
    try:
        wait_until(lambda: sqs.counts(queue.url) == (0, 0), "both jobs were deleted")
    finally:
        proc.send_signal(signal.SIGTERM)
        exit_code = proc.wait(60)
    found = read_records(records)
    assert sorted((r["id"], r["event"], r["receive_count"]) for r in found) == [
        ("j0", "done", 1),
        ("j0", "start", 1),
        ("j1", "done", 1),
        ("j1", "start", 1),
    ], f"each ran once, within its timeout: {found}"
    assert exit_code == 0, log.read_text()[-3000:]
