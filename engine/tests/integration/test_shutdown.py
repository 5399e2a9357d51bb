"""SIGTERM drains, a second signal exits at once, SIGKILL is survivable: against LocalStack,
with the worker as a separate process, the way a platform stops it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sqs_worker_engine import Job, Router, Worker, WorkerState
from sqs_worker_engine.base.sqs import CONNECT_TIMEOUT
from sqs_worker_engine.process.assembly import POLL_READ_MARGIN
from sqs_worker_engine.process.settings import load_settings
from sqs_worker_engine.process.worker import SIGNAL_ECHO_SECONDS

from ..support import (
    PACKAGE,
    PROJECT_ROOT,
    CallLog,
    Sqs,
    env_for,
    log_lines,
    metric,
    read_records,
    running,
    running_worker,
    wait_for,
    worker_process,
)

# A worker giving messages back at shutdown first lets its in-flight long polls end (so none
# of them can take a released message inside SQS): short polls keep these tests quick.
SHORT_POLLS = {"WORKER_WAIT_TIME_SECONDS": "2"}


def wait_records(path: Path, predicate: Any, timeout: float = 60) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        records = read_records(path)
        if predicate(records):
            return records
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; records: {records}")
        time.sleep(0.05)


def events(records: list[dict[str, Any]], kind: str) -> list[str]:
    return sorted(r["id"] for r in records if r["event"] == kind)


def start(
    sqs: Sqs, endpoint: str, tmp_path: Path, queue_name: str, **env: Any
) -> tuple[subprocess.Popen[bytes], Path, Path]:
    records, log = tmp_path / "records.jsonl", tmp_path / "worker.log"
    full = env_for(
        endpoint, queue_name, str(tmp_path / "progress"), TEST_QUEUE=queue_name, TEST_RECORD_FILE=records, **env
    )
    return worker_process(full, log), records, log


def test_sigterm_lets_running_jobs_finish_and_exits_zero(sqs: Sqs, localstack_endpoint: str, tmp_path: Path) -> None:
    queue = sqs.create(visibility=30)
    ids = [f"job-{i}" for i in range(4)]
    sqs.send(queue, [{"id": i, "seconds": 2} for i in ids])
    proc, records, log = start(sqs, localstack_endpoint, tmp_path, queue.name, WORKER_CONCURRENCY=4)
    wait_records(records, lambda r: len(events(r, "start")) == 4)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    final = read_records(records)
    assert events(final, "done") == sorted(ids), "every running job finished"
    assert len(events(final, "start")) == 4, "nothing ran twice"
    assert sqs.counts(queue.url) == (0, 0), "every finished job was deleted before exit"
    lines = list(log_lines(log))
    stopped = [line for line in lines if line.get("message") == "worker stopped"]
    assert stopped and stopped[0]["reason"] == "SIGTERM" and stopped[0]["jobs_cut_off_and_released"] == 0
    assert any(line.get("message") == "stopping: 4 job(s) running" for line in lines)


def test_cooperative_job_stops_at_its_checkpoint_and_is_released(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    queue = sqs.create(visibility=300)
    sqs.send(queue, [{"id": "long", "seconds": 50, "cooperative": True}])
    proc, records, _ = start(sqs, localstack_endpoint, tmp_path, queue.name, **SHORT_POLLS)
    wait_records(records, lambda r: len(events(r, "start")) == 1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert events(read_records(records), "done") == []
    # Released with visibility 0: another worker can take it at once, not in 300 s.
    (again,) = sqs.receive_all(queue.url, wait=5)
    assert json.loads(again["Body"])["id"] == "long"
    # Delivered before; a poll of ours still listening may have taken it once more and
    # given it straight back.
    assert int(again["Attributes"]["ApproximateReceiveCount"]) >= 2


def test_jobs_still_running_at_the_shutdown_deadline_are_released(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    """The last resort: a handler that ignores job.cancelled is cut off and its message released."""
    queue = sqs.create(visibility=300)
    router = Router()
    started: list[str] = []

    @router.handler(queue.name)
    async def stubborn(job: Job[Any]) -> None:
        started.append(job.id)
        await asyncio.sleep(60)

    sqs.send(queue, [{"n": 1}])
    env = env_for(
        localstack_endpoint,
        queue.name,
        health_file,
        WORKER_SHUTDOWN_TIMEOUT_MS=1000,
        WORKER_JOB_TIMEOUT_MS=900,
        **SHORT_POLLS,
    )
    config = load_settings(env)
    # Validation keeps job timeouts below the shutdown timeout; lift it to reach the cut-off path.
    config = dataclasses.replace(config, queues=(dataclasses.replace(config.queues[0], job_timeout_ms=60_000),))

    async def scenario() -> Worker:
        worker = Worker(config, router)
        task = asyncio.create_task(worker.run())
        await wait_for(lambda: len(started) == 1, 30)
        worker.stop("test")
        await asyncio.wait_for(task, 30)
        return worker

    worker = asyncio.run(scenario())
    assert worker.state == WorkerState.STOPPED and worker.released_at_shutdown == 1
    (again,) = sqs.receive_all(queue.url, wait=5)
    # Delivered before; a poll of ours still listening may have taken it once more and
    # given it straight back.
    assert int(again["Attributes"]["ApproximateReceiveCount"]) >= 2
    assert metric("jobs_processed_total", queue=queue.name, outcome="released") == 1


def test_received_but_not_started_messages_are_released_at_once(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    """FIFO: the rest of a group waits its turn; on SIGTERM it is given back, not stranded."""
    queue = sqs.create(fifo=True, visibility=300)
    ids = [f"m{i}" for i in range(5)]
    sqs.send(queue, [{"id": i, "seconds": 2} for i in ids], group="g1")
    proc, records, _ = start(sqs, localstack_endpoint, tmp_path, queue.name, WORKER_CONCURRENCY=10, **SHORT_POLLS)
    wait_records(records, lambda r: len(events(r, "start")) == 1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    final = read_records(records)
    assert events(final, "done") == ["m0"]
    assert events(final, "start") == ["m0"], "nothing new starts after SIGTERM"
    rest = sqs.receive_all(queue.url, wait=5)
    assert [json.loads(m["Body"])["id"] for m in rest] == ids[1:], "released, in order, immediately"


def test_prefetched_messages_are_released_at_once_on_sigterm(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    """With WORKER_PREFETCH, messages wait for a slot beyond the concurrency; a SIGTERM
    gives them back at once, visible to the next worker, while the running jobs finish."""
    queue = sqs.create(visibility=300)
    ids = [f"m{i}" for i in range(30)]
    sqs.send(queue, [{"id": i, "seconds": 2} for i in ids])
    proc, records, _ = start(
        sqs, localstack_endpoint, tmp_path, queue.name, WORKER_CONCURRENCY=2, WORKER_PREFETCH=10, **SHORT_POLLS
    )
    # The prefetch is sized once a receive came back full and a job ended (prefetch.py);
    # then more are in flight than the two slots.
    wait_records(records, lambda r: len(events(r, "done")) >= 2 and sqs.counts(queue.url)[1] > 2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    final = read_records(records)
    started, done = events(final, "start"), events(final, "done")
    assert sorted(started) == sorted(done) and len(set(started)) == len(started), "each ran once, to the end"
    assert sqs.counts(queue.url) == (len(ids) - len(done), 0), "the rest are visible again, none in flight"


def test_a_thread_started_with_to_thread_does_not_hold_the_exit(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    queue = sqs.create(visibility=60)
    sqs.send(queue, [{"id": "blocked", "seconds": 600, "blocking_thread": True}])
    proc, records, _ = start(
        sqs,
        localstack_endpoint,
        tmp_path,
        queue.name,
        WORKER_SHUTDOWN_TIMEOUT_MS=2000,
        WORKER_JOB_TIMEOUT_MS=1500,
        WORKER_RETRY_BASE_SECONDS=0,
        WORKER_WAIT_TIME_SECONDS=1,  # no long poll of ours outlasts the drain by much
    )
    wait_records(records, lambda r: len(events(r, "start")) == 1)
    proc.send_signal(signal.SIGTERM)
    # The shutdown timeout is 2 s: the exit must not wait 600 s for the blocked thread.
    assert proc.wait(60) == 0
    deadline = time.monotonic() + 10
    while sqs.counts(queue.url)[0] != 1:
        assert time.monotonic() < deadline, "its message is not visible again for another worker"
        time.sleep(0.2)


def second_signal(proc: subprocess.Popen[bytes], log: Path, sig: signal.Signals = signal.SIGTERM) -> None:
    """A second signal as an operator gives it: once the worker took the first (it logged
    that it drains), and longer after it than an echo of it would come."""
    deadline = time.monotonic() + 30
    while not any("draining" in str(line.get("message")) for line in log_lines(log)):
        assert time.monotonic() < deadline, f"the worker never took the first signal:\n{log.read_text()[-3000:]}"
        time.sleep(0.05)
    time.sleep(SIGNAL_ECHO_SECONDS + 0.2)  # a lower bound, not a race: later is just as good
    proc.send_signal(sig)


def test_second_signal_exits_at_once(sqs: Sqs, localstack_endpoint: str, tmp_path: Path) -> None:
    queue = sqs.create(visibility=300)
    sqs.send(queue, [{"id": "slow", "seconds": 60}])
    proc, records, log = start(sqs, localstack_endpoint, tmp_path, queue.name)
    wait_records(records, lambda r: len(events(r, "start")) == 1)
    proc.send_signal(signal.SIGTERM)
    second_signal(proc, log)
    assert proc.wait(30) == 128 + signal.SIGTERM
    assert events(read_records(records), "done") == []


def test_second_signal_still_sends_the_deletes_of_finished_jobs(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    """Exiting at once must not throw away what is already decided: a job that finished and
    waits in the delete batch is deleted before the exit, not redelivered."""
    queue = sqs.create(visibility=300)
    sqs.send(queue, [{"id": "quick"}, {"id": "slow", "seconds": 60}])
    proc, records, log = start(
        sqs, localstack_endpoint, tmp_path, queue.name, WORKER_ACK_FLUSH_MS=10_000, WORKER_CONCURRENCY=2
    )
    wait_records(records, lambda r: len(events(r, "done")) == 1 and len(events(r, "start")) == 2)
    proc.send_signal(signal.SIGTERM)
    second_signal(proc, log)
    assert proc.wait(30) == 128 + signal.SIGTERM, log.read_text()
    assert sum(sqs.counts(queue.url)) == 1, "only the unfinished job is left; the finished one was deleted"


def test_the_same_signal_again_within_a_second_is_one_stop(sqs: Sqs, localstack_endpoint: str, tmp_path: Path) -> None:
    """Ctrl-C signals the terminal's whole process group; a wrapper in it (`uv run`) passes
    the SIGINT on again some 200 ms later. That echo must not cut the drain short."""
    queue = sqs.create(visibility=300)
    sqs.send(queue, [{"id": "slow", "seconds": 3}])
    proc, records, log = start(sqs, localstack_endpoint, tmp_path, queue.name, **SHORT_POLLS)
    wait_records(records, lambda r: len(events(r, "start")) == 1)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.1)  # what the echo comes after; the worker must take both as one
    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 0, log.read_text()[-3000:]
    assert events(read_records(records), "done") == ["slow"], "the running job finished"
    assert sqs.counts(queue.url) == (0, 0), "and was deleted"


def test_sigkill_mid_job_is_survivable(sqs: Sqs, localstack_endpoint: str, tmp_path: Path) -> None:
    # No DLQ here: a killed worker's long polls live on in SQS for their wait time and each
    # may take the message once more (costing a receive); on a queue with a low
    # maxReceiveCount that alone can dead-letter it.
    queue = sqs.create(visibility=2, max_receive=None)
    sqs.send(queue, [{"id": "k", "seconds": 3}])
    killed = {"WORKER_VISIBILITY_TIMEOUT_SECONDS": 2, "WORKER_CONCURRENCY": 1, **SHORT_POLLS}
    proc, records, _ = start(sqs, localstack_endpoint, tmp_path, queue.name, **killed)
    wait_records(records, lambda r: len(events(r, "start")) == 1)
    proc.kill()
    proc.wait(30)
    again, _, _ = start(sqs, localstack_endpoint, tmp_path, queue.name, **killed)
    try:
        final = wait_records(records, lambda r: events(r, "done") == ["k"], 60)
    finally:
        again.send_signal(signal.SIGTERM)
        again.wait(60)
    # At-least-once: the killed delivery ran again (which is why handlers must be idempotent).
    # The receive count may skip one: the killed process's long poll lives on in SQS and
    # can take the message once more before it expires.
    counts = [r["receive_count"] for r in final if r["event"] == "start"]
    assert counts[0] == 1 and len(counts) == 2 and counts[1] >= 2, counts
    assert sqs.counts(queue.url) == (0, 0)


def test_stop_cancels_the_long_poll_instead_of_waiting_it_out(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    queue = sqs.create()
    router = Router()
    router.handler(queue.name)(lambda job: None)
    calls = CallLog()

    async def scenario() -> None:
        env = env_for(localstack_endpoint, queue.name, health_file, WORKER_WAIT_TIME_SECONDS=20, WORKER_CONCURRENCY=1)
        async with running_worker(env, router, calls.attach):
            await wait_for(lambda: len(calls.named("ReceiveMessage")) == 1, 60, "the long poll to start")

    asyncio.run(scenario())
    (poll,) = calls.named("ReceiveMessage")
    assert poll["WaitTimeSeconds"] == 20
    # The 20 s poll started and never completed: the stop cancelled it.
    assert calls.completed("ReceiveMessage") == 0


def test_invalid_configuration_refuses_to_boot(tmp_path: Path) -> None:
    env = {
        "WORKER_CONCURRENCY": "lots",
        "WORKER_JOB_TIMEOUT_MS": "-5",
        "WORKER_QUEUES": "bad queue name!",
    }
    proc = worker_process(env, tmp_path / "log")
    assert proc.wait(60) == 2
    output = (tmp_path / "log").read_text()
    for variable in ("WORKER_CONCURRENCY", "WORKER_JOB_TIMEOUT_MS", "WORKER_QUEUES"):
        assert variable in output
    assert "Traceback" not in output


def test_a_failing_lifespan_refuses_to_boot_with_the_reason_and_receives_nothing(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    queue = sqs.create()
    sqs.send(queue, [{"id": "untouched"}])
    env = env_for(localstack_endpoint, queue.name, str(tmp_path / "progress"), TEST_QUEUE=queue.name)
    log = tmp_path / "worker.log"
    proc = worker_process(env, log, handlers="tests.integration.failing_lifespan_app:router")
    assert proc.wait(60) == 3, log.read_text()[-3000:]
    text = log.read_text()
    assert "cannot start: the lifespan failed: ConnectionRefusedError: database at db:5432 refused" in text, text
    [message] = sqs.receive_all(queue.url)
    assert message["Attributes"]["ApproximateReceiveCount"] == "1", "the worker received nothing"


def test_missing_queue_is_a_clear_startup_error(localstack_endpoint: str, tmp_path: Path) -> None:
    env = env_for(localstack_endpoint, "no-such-queue-here", str(tmp_path / "p"), TEST_QUEUE="no-such-queue-here")
    proc = worker_process(env, tmp_path / "log")
    assert proc.wait(60) == 3
    output = (tmp_path / "log").read_text()
    assert "'no-such-queue-here' does not exist" in output
    assert "Traceback" not in output


# A service's __main__ names its defaults ("module:SERVICE") and the entry point imports
# them, and later the handlers, only once stop signals are kept.
SLOW_STARTS = {
    "importing the handlers": [sys.executable, "-m", PACKAGE, "run"],
    "importing the service's defaults": [
        sys.executable,
        "-c",
        "import sys; from sqs_worker_engine.entry import main; "
        "sys.exit(main('tests.integration.slow_service:SERVICE', ['run']))",
    ],
}


@pytest.mark.parametrize("moment", list(SLOW_STARTS))
def test_sigterm_while_still_importing_exits_cleanly_holding_nothing(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path, moment: str
) -> None:
    """A rolling deploy may stop a replica that is still importing: it exits 0 and takes nothing."""
    queue = sqs.create()
    sqs.send(queue, [{"id": "untouched"}])
    marker = tmp_path / "importing"
    env = {
        **os.environ,
        **env_for(localstack_endpoint, queue.name, str(tmp_path / "hf"), TEST_QUEUE=queue.name),
        "TEST_IMPORT_MARKER": str(marker),
        "WORKER_HANDLERS": "tests.integration.slow_import_app:router"
        if moment == "importing the handlers"
        else "tests.integration.app:router",
        "PYTHONPATH": str(PROJECT_ROOT),
    }
    log = tmp_path / "log"
    with log.open("ab") as out:
        proc = subprocess.Popen(SLOW_STARTS[moment], env=env, cwd=PROJECT_ROOT, stdout=out, stderr=out)
    deadline = time.monotonic() + 120  # bounds a broken run only: start-up may be slow on a busy machine
    while not marker.exists():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"never reached {moment}"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, log.read_text()
    assert any("stopped while starting" in line.get("message", "") for line in log_lines(log)), log.read_text()
    assert sqs.counts(queue.url) == (1, 0), "the message was never received"


def test_sigterm_while_the_lifespan_opens_exits_at_once_holding_nothing(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    """A lifespan that takes a minute to open: SIGTERM cancels the opening, and the worker
    exits 0 at once, having received nothing (it used to run on until SIGKILL)."""
    queue = sqs.create()
    sqs.send(queue, [{"id": "untouched"}])
    marker = tmp_path / "opening"
    env = {
        **env_for(localstack_endpoint, queue.name, str(tmp_path / "hf"), TEST_QUEUE=queue.name),
        "TEST_LIFESPAN_MARKER": str(marker),
    }
    log = tmp_path / "log"
    proc = worker_process(env, log, handlers="tests.integration.slow_lifespan_app:router")
    deadline = time.monotonic() + 120  # bounds a broken run only: start-up may be slow on a busy machine
    while not marker.exists():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "the lifespan never began to open"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, log.read_text()  # well before the lifespan's minute
    assert any("stopped while starting" in line.get("message", "") for line in log_lines(log)), log.read_text()
    assert sqs.counts(queue.url) == (1, 0), "the message was never received"


def test_sigterm_while_sqs_is_unreachable_at_start_exits_cleanly(tmp_path: Path) -> None:
    """Stopped before SQS ever answered: nothing is held, so the exit is clean (0), not a start-up error."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"  # nothing listens once the socket closes
    env = env_for(closed, "test-queue", str(tmp_path / "hf"))
    proc = worker_process(env, tmp_path / "log")
    lines = wait_for_log(tmp_path / "log", "cannot reach SQS", proc)
    assert lines
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, (tmp_path / "log").read_text()


def wait_for_log(path: Path, fragment: str, proc: subprocess.Popen[bytes], timeout: float = 120) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        found = [line for line in path.read_text().splitlines() if fragment in line] if path.exists() else []
        if found:
            return found
        assert proc.poll() is None, path.read_text()
        assert time.monotonic() < deadline, f"{fragment!r} never logged"
        time.sleep(0.05)


def test_a_worker_with_max_jobs_1_runs_one_exits_zero_and_leaves_the_rest_receivable(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    """WORKER_MAX_JOBS=1 (a ScaledJob's pod) with 3 messages, 4 slots and the default
    prefetch: it runs one, exits 0 by itself, and the other two were never received: they
    are receivable at once, not invisible for a visibility timeout."""
    queue = sqs.create(visibility=300)
    sqs.send(queue, [{"id": f"job-{i}", "seconds": 0.5} for i in range(3)])
    proc, records, log = start(
        sqs, localstack_endpoint, tmp_path, queue.name, WORKER_CONCURRENCY=4, WORKER_MAX_JOBS=1, **SHORT_POLLS
    )
    assert proc.wait(60) == 0
    final = read_records(records)
    assert len(events(final, "start")) == 1 and events(final, "done") == events(final, "start"), final
    rest = sqs.receive_all(queue.url, wait=1)
    assert len(rest) == 2, rest
    assert {json.loads(m["Body"])["id"] for m in rest} | set(events(final, "done")) == {"job-0", "job-1", "job-2"}
    assert all(m["Attributes"]["ApproximateReceiveCount"] == "1" for m in rest), "the worker received them"
    lines = list(log_lines(log))
    assert any(str(line.get("message", "")).startswith("max jobs reached") for line in lines), lines[-5:]
    stopped = [line for line in lines if line.get("message") == "worker stopped"]
    assert stopped and stopped[0]["reason"] == "max jobs reached", stopped


def test_an_idle_worker_exits_zero_after_its_idle_spell(sqs: Sqs, localstack_endpoint: str, tmp_path: Path) -> None:
    """WORKER_IDLE_EXIT_SECONDS on an empty queue: the process exits 0 by itself, saying why."""
    queue = sqs.create()
    proc, _, log = start(sqs, localstack_endpoint, tmp_path, queue.name, WORKER_IDLE_EXIT_SECONDS=3, **SHORT_POLLS)
    assert proc.wait(60) == 0
    lines = list(log_lines(log))
    assert any(str(line.get("message", "")).startswith("idle") for line in lines), lines[-5:]
    stopped = [line for line in lines if line.get("message") == "worker stopped"]
    assert stopped and stopped[0]["reason"] == "idle", stopped


def test_process_handlers_end_with_the_worker_and_leave_nothing_running(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    """executor="process": after the drain the idle handler processes exit when asked, and
    the one still running a job the drain cut off and released is killed. Before, the
    exit found the pool's manager thread running (and said so), skipped the pool's cleanup
    (leaked semaphores) and left the released job running on in an orphaned process while
    another worker could take its message."""
    queue = sqs.create(visibility=60)
    sqs.send(queue, [{"id": "quick"}, {"id": "stuck", "seconds": 600}])
    records, log = tmp_path / "records.jsonl", tmp_path / "worker.log"
    env = env_for(
        localstack_endpoint,
        queue.name,
        str(tmp_path / "progress"),
        TEST_QUEUE=queue.name,
        TEST_RECORD_FILE=records,
        WORKER_CONCURRENCY=2,
        WORKER_PROCESS_POOL_SIZE=2,
        WORKER_SHUTDOWN_TIMEOUT_MS=2000,
        WORKER_JOB_TIMEOUT_MS=1500,
        WORKER_WAIT_TIME_SECONDS=1,  # no long poll of ours outlasts the drain by much
    )
    proc = worker_process(env, log, "tests.integration.process_app:router")
    found = wait_records(records, lambda r: events(r, "done") == ["quick"] and "stuck" in events(r, "start"))
    (stuck_pid,) = {r["pid"] for r in found if r["id"] == "stuck"}
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert not running(stuck_pid), "the released job's process ended with the worker"
    text = log.read_text()
    for trouble in ("still running", "leaked", "Traceback"):
        assert trouble not in text, f"{trouble!r} in the worker's log:\n{text[-3000:]}"
    stopped = [line for line in log_lines(log) if line.get("message") == "worker stopped"]
    assert stopped and stopped[0]["jobs_cut_off_and_released"] == 1
    # In its process, a job logs as on the event loop: `job.logger` (it was None there, and
    # the example handler's `job.logger.info` failed every job) and any logger, on the
    # worker's format, each line with the job's id, queue and receive count.
    in_process = [
        line
        for line in log_lines(log)
        if line.get("message") in ("working in its process", "a library logs in its process too")
    ]
    assert len(in_process) == 4, f"two jobs, two lines each:\n{text[-3000:]}"
    for line in in_process:
        assert line["queue"] == queue.name and line["receive_count"] == 1 and line["job_id"], line
        assert line["level"] == "INFO" and line["service"] and line["timestamp"], line
    # Released at once, or, while a poll of ours may still be out in SQS (on a loaded
    # machine LocalStack answers a 1 s poll seconds late), once it surely has ended: at
    # most its client's own timeout later (receiving.Polls.release_delay). Before, a bound
    # of 10 s failed under load while the worker waited out its late poll, as it should.
    deadline = time.monotonic() + CONNECT_TIMEOUT + 1 + POLL_READ_MARGIN + 10
    while sqs.counts(queue.url)[0] != 1:
        assert time.monotonic() < deadline, "the cut-off job's message is not visible again"
        time.sleep(0.2)
