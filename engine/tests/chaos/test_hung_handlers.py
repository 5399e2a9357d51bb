"""Handlers that never return, in worker processes: the job timeout frees an async handler's
slot and its message is retried, then dead-lettered; a blocked thread keeps its slot and
its message's lease (nobody else may run it while the thread does), so liveness reports
the stall, and the worker can still be stopped: the message is released at exit.

Both workers run at once (each with one slot), to keep the suite short."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

from sqs_worker_engine.doubles.emulators import free_port

from ..support import Sqs, env_for, worker_process
from . import report
from .harness import HANDLERS, probe, until


def events(db: Path, kind: str) -> list[tuple[str, int]]:
    conn = sqlite3.connect(str(db), timeout=60)
    try:
        return list(conn.execute("SELECT id, receive_count FROM events WHERE kind = ? ORDER BY t", (kind,)))
    finally:
        conn.close()


def start_worker(name: str, queue: str, tmp_path: Path, db: Path, endpoint: str, **env: Any) -> tuple[Any, int, Path]:
    port = free_port()
    settings: dict[str, Any] = {
        "CHAOS_DB": str(db),
        "WORKER_CONCURRENCY": 1,  # one slot: only a freed slot lets anything else run
        "WORKER_JOB_TIMEOUT_MS": 1000,
        "WORKER_WAIT_TIME_SECONDS": 1,
        "WORKER_METRICS_HOST": "127.0.0.1",
        "WORKER_METRICS_PORT": port,
    }
    full = env_for(endpoint, queue, str(tmp_path / f"{name}.progress"), **{**settings, **env})
    log = tmp_path / f"{name}.log"
    return worker_process(full, log, HANDLERS), port, log


def stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(60)  # bounded by the shutdown timeout plus start-up slack


def test_handlers_that_never_return(sqs: Sqs, localstack_endpoint: str, tmp_path: Path, chaos_db: Path) -> None:
    hanging = sqs.create(visibility=30, max_receive=2)
    blocking = sqs.create(visibility=30, max_receive=5)
    sqs.send(hanging, [{"id": "hang", "hang": True}, {"id": "a"}, {"id": "b"}])
    sqs.send(blocking, [{"id": "stuck"}])
    procs: list[subprocess.Popen[bytes]] = []
    try:
        async_proc, async_port, async_log = start_worker(
            "async", hanging.name, tmp_path, chaos_db, localstack_endpoint, CHAOS_QUEUE=hanging.name
        )
        procs.append(async_proc)
        sync_proc, sync_port, sync_log = start_worker(
            "sync",
            blocking.name,
            tmp_path,
            chaos_db,
            localstack_endpoint,
            CHAOS_SYNC_QUEUE=blocking.name,
            # The least the settings allow: above the job timeout and the long-poll wait + 5 s.
            WORKER_WAIT_TIME_SECONDS=0,
            WORKER_STALLED_AFTER_SECONDS=5.5,
            WORKER_SHUTDOWN_TIMEOUT_MS=3000,
        )
        procs.append(sync_proc)

        # Async: each timeout frees the one slot, so the other jobs run; the hung message is
        # retried once, then SQS dead-letters it (maxReceiveCount 2).
        until(lambda: sorted(i for i, _ in events(chaos_db, "done")) == ["a", "b"], 60, "the other jobs")
        until(lambda: sqs.counts(hanging.dlq_url or "")[0] == 1, 60, "the hung message in the DLQ")
        async_live = probe(async_port, "/livez")

        # Sync: the thread cannot be interrupted and holds the only slot: nothing polls, and
        # liveness reports the stall. The timed-out job keeps its lease while its thread runs.
        until(lambda: probe(sync_port, "/livez") == 503, 60, "liveness to report the stall")
        held_back = sqs.counts(blocking.url)
        assert async_proc.poll() is None and sync_proc.poll() is None
        stopping = time.monotonic()
        codes = (stop(async_proc), stop(sync_proc))
        report.add("hung_handlers", stop_with_blocked_thread_seconds=round(time.monotonic() - stopping, 2))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    assert codes == (0, 0), "a blocked thread must not hold the process's exit"
    assert async_live == 200, "timed-out async jobs do not stall the worker"
    hang_starts = [row for row in events(chaos_db, "start") if row[0] == "hang"]
    assert hang_starts == [("hang", 1), ("hang", 2)], "retried once, then dead-lettered"
    (dead,) = sqs.receive_all(hanging.dlq_url or "")
    assert '"hang"' in dead["Body"]
    assert sqs.counts(hanging.url) == (0, 0)
    assert held_back == (0, 1), "a timed-out job still running must not be visible to another worker"
    assert sqs.counts(blocking.url) == (1, 0), "the abandoned job's message is released at exit"
    assert "thread(s) still running" in sync_log.read_text()
    (again,) = sqs.receive_all(blocking.url)
    assert '"stuck"' in again["Body"], "nothing lost"
    for log in (async_log, sync_log):
        assert "Traceback" not in log.read_text()
