"""What an on-call engineer relies on: metrics that move, health that tells the truth,
structured logs, DLQ tools that lose nothing, and ECS scale-in protection."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from sqs_worker_engine import DownstreamUnavailable, Job, NonRetryableError, Router, localstack, redrive
from sqs_worker_engine import ecs as ecs_module
from sqs_worker_engine.emulators import free_port
from sqs_worker_engine.health import progress_files
from sqs_worker_engine.metrics import set_db_pool_in_use

from ..support import (
    EMULATORS,
    PACKAGE,
    PROJECT_ROOT,
    REGION,
    Sqs,
    env_for,
    http_get,
    log_lines,
    running_worker,
    until_status,
    wait_for,
    worker_process,
)


def samples(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def cli(*args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
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


def test_metrics_move_as_jobs_flow(sqs: Sqs, localstack_endpoint: str, health_file: str, tmp_path: Path) -> None:
    queue = sqs.create(max_receive=3)
    release = asyncio.Event()
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        set_db_pool_in_use(3)  # what a pool hook would report
        if job.payload.get("poison"):
            raise NonRetryableError("poison")
        await release.wait()

    port = free_port()
    env = env_for(
        localstack_endpoint,
        queue.name,
        health_file,
        WORKER_METRICS_PORT=port,
        WORKER_METRICS_HOST="127.0.0.1",
        WORKER_BACKLOG_SAMPLE_SECONDS=1,
        WORKER_CONCURRENCY=4,
        DB_POOL_SIZE=8,
    )
    scrapes: dict[str, str] = {}

    async def scenario() -> None:
        async with running_worker(env, router) as worker:
            scrapes["before"] = (await http_get(port, "/metrics"))[1]
            sqs.send(queue, [{"n": i} for i in range(10)] + [{"poison": True}])
            await wait_for(lambda: worker.active_job_count == 4, 30, "4 jobs in flight")
            await asyncio.sleep(1.5)  # let the backlog sampler run once with jobs in flight
            scrapes["busy"] = (await http_get(port, "/metrics"))[1]
            release.set()
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), 60, "all settled")
            await asyncio.sleep(1.5)
            scrapes["after"] = (await http_get(port, "/metrics"))[1]

    asyncio.run(scenario())
    q = {"queue": queue.name}
    before, busy, after = scrapes["before"], scrapes["busy"], scrapes["after"]
    assert samples(before, "jobs_processed_total", outcome="success", **q) == 0
    assert samples(busy, "worker_inflight_jobs", **q) == 4
    assert samples(busy, "worker_concurrency", **q) == 4
    assert (
        samples(busy, "sqs_queue_messages", state="visible", **q)
        + samples(busy, "sqs_queue_messages", state="in_flight", **q)
        >= 4
    )
    assert samples(after, "jobs_processed_total", outcome="success", **q) == 10
    assert samples(after, "jobs_processed_total", outcome="dead_letter", **q) == 1
    assert samples(after, "worker_dead_letter_sends_total", **q) == 1
    assert samples(after, "job_duration_seconds_count", **q) == 11
    assert samples(after, "worker_inflight_jobs", **q) == 0
    assert samples(after, "sqs_message_receive_count_count", **q) == 11
    assert samples(after, "sqs_message_age_at_receive_seconds_count", **q) == 11
    assert samples(after, "sqs_queue_messages", state="visible", **q) == 0
    assert samples(after, "queue_oldest_message_seconds", **q) == 0
    assert samples(after, "sqs_api_calls_total", operation="DeleteMessageBatch", outcome="ok") >= 1
    assert samples(after, "db_pool_in_use") == 3
    assert samples(after, "worker_last_progress_timestamp_seconds") > time.time() - 60
    (tmp_path / "metrics.txt").write_text(after)


def test_liveness_reports_hung_handlers_and_recovers(sqs: Sqs, localstack_endpoint: str, tmp_path: Path) -> None:
    queue = sqs.create(visibility=60, max_receive=5)
    unblock = threading.Event()
    router = Router()

    @router.handler(queue.name)
    def stuck(job: Job[Any]) -> None:  # a thread that ignores the timeout: holds its slot
        unblock.wait(60)

    port = free_port()
    progress = str(tmp_path / "progress")
    env = env_for(
        localstack_endpoint,
        queue.name,
        progress,
        WORKER_METRICS_PORT=port,
        WORKER_METRICS_HOST="127.0.0.1",
        WORKER_CONCURRENCY=1,
        WORKER_JOB_TIMEOUT_MS=1000,
        WORKER_WAIT_TIME_SECONDS=1,
        WORKER_STALLED_AFTER_SECONDS=7,
    )
    seen: list[tuple[str, int, int]] = []

    def healthcheck() -> int:
        return cli("healthcheck", **env).returncode  # the probe sees the worker's own environment

    async def scenario() -> None:
        async with running_worker(env, router):
            seen.append(("idle", (await http_get(port, "/livez"))[0], await asyncio.to_thread(healthcheck)))
            sqs.send(queue, [{"n": 1}])

            async def stalled() -> bool:
                return (await http_get(port, "/livez"))[0] == 503

            deadline = time.monotonic() + 60
            while not await stalled():
                assert time.monotonic() < deadline, "liveness never reported the stall"
                await asyncio.sleep(0.5)
            await asyncio.sleep(1.5)  # the progress file is written once a second
            seen.append(("hung", 503, await asyncio.to_thread(healthcheck)))
            unblock.set()
            deadline = time.monotonic() + 60
            while (await http_get(port, "/livez"))[0] != 200:
                assert time.monotonic() < deadline, "liveness never recovered"
                await asyncio.sleep(0.5)
            await asyncio.sleep(1.5)
            seen.append(("recovered", 200, await asyncio.to_thread(healthcheck)))

    asyncio.run(scenario())
    assert seen == [("idle", 200, 0), ("hung", 503, 1), ("recovered", 200, 0)]


async def _liveness_while(port: int, env: dict[str, str], seconds: float) -> list[tuple[int, int]]:
    """/livez and the `healthcheck` command, every second for `seconds`."""
    seen = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        check = await asyncio.to_thread(lambda: cli("healthcheck", **env).returncode)
        seen.append(((await http_get(port, "/livez"))[0], check))
        await asyncio.sleep(1)
    return seen


def test_a_worker_paused_on_a_partner_outage_stays_live(sqs: Sqs, localstack_endpoint: str, tmp_path: Path) -> None:
    """A 20 s pause (DownstreamUnavailable) with WORKER_STALLED_AFTER_SECONDS=8: the pause is
    the worker doing what it should, not a stall. /livez failed 8 s into it, and the
    platform restarted a healthy worker exactly while its downstream was in trouble."""
    queue = sqs.create(visibility=60, max_receive=5)
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        raise DownstreamUnavailable(20, "partner answers 503")

    port = free_port()
    env = env_for(
        localstack_endpoint,
        queue.name,
        str(tmp_path / "progress"),
        WORKER_METRICS_PORT=port,
        WORKER_METRICS_HOST="127.0.0.1",
        WORKER_JOB_TIMEOUT_MS=2000,
        WORKER_WAIT_TIME_SECONDS=1,
        WORKER_STALLED_AFTER_SECONDS=8,
        WORKER_RETRY_MAX_SECONDS=60,
    )

    async def scenario() -> list[tuple[int, int]]:
        async with running_worker(env, router) as worker:
            sqs.send(queue, [{"n": 1}])
            await wait_for(lambda: worker.pools[0].admission.breaker.paused, 60, "the pause")
            return await _liveness_while(port, env, 16)

    seen = asyncio.run(scenario())
    assert set(seen) == {(200, 0)}, f"(/livez, healthcheck) during the pause: {seen}"


def test_a_lower_queue_starved_by_strict_priority_stays_live(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    """Two queues on a strict budget of 1: the higher queue's backlog takes every slot, so
    the lower queue waits, by design, with its prefetch full. Its pollers had nothing to do,
    and its silence failed /livez after WORKER_STALLED_AFTER_SECONDS."""
    high, low = sqs.create(visibility=60), sqs.create(visibility=60)
    router = Router()

    @router.handler(high.name)
    async def slow(job: Job[Any]) -> None:
        await asyncio.sleep(0.4)

    @router.handler(low.name)
    async def never_first(job: Job[Any]) -> None:
        pass

    port = free_port()
    env = env_for(
        localstack_endpoint,
        f"{high.name},{low.name}",
        str(tmp_path / "progress"),
        WORKER_METRICS_PORT=port,
        WORKER_METRICS_HOST="127.0.0.1",
        WORKER_JOB_TIMEOUT_MS=2000,
        WORKER_WAIT_TIME_SECONDS=1,
        WORKER_STALLED_AFTER_SECONDS=8,
        WORKER_SHARED_CONCURRENCY=1,
        WORKER_PRIORITY="strict",
        WORKER_PREFETCH=5,
    )
    sqs.send(high, [{"n": n} for n in range(60)])
    sqs.send(low, [{"n": n} for n in range(10)])

    async def scenario() -> list[tuple[int, int]]:
        async with running_worker(env, router):
            return await _liveness_while(port, env, 14)

    seen = asyncio.run(scenario())
    assert set(seen) == {(200, 0)}, f"(/livez, healthcheck) while the lower queue waited: {seen}"


def test_a_blocked_event_loop_fails_the_healthcheck(sqs: Sqs, localstack_endpoint: str, tmp_path: Path) -> None:
    """An async handler that blocks the loop (a sync call where an await belongs) stops the
    whole worker: the progress file is no longer written, and `healthcheck` says so."""
    queue = sqs.create(visibility=60)
    progress = tmp_path / "progress"
    env = {
        **env_for(localstack_endpoint, queue.name, str(progress), TEST_QUEUE=queue.name),
        "TEST_RECORD_FILE": str(tmp_path / "records.jsonl"),
        "WORKER_JOB_TIMEOUT_MS": "2000",
        "WORKER_WAIT_TIME_SECONDS": "1",
        "WORKER_STALLED_AFTER_SECONDS": "7",
    }
    proc = worker_process(env, tmp_path / "log")
    try:
        wait_for_sync(lambda: bool(progress_files(str(progress))), 120, "the worker's first progress")
        assert cli("healthcheck", **env).returncode == 0
        sqs.send(queue, [{"id": "blocks", "seconds": 25, "blocking_loop": True}])
        deadline = time.monotonic() + 40
        while cli("healthcheck", **env).returncode == 0:
            assert time.monotonic() < deadline, "the healthcheck never saw the blocked loop"
            time.sleep(1)
    finally:
        proc.kill()
        proc.wait(30)


def wait_for_sync(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_readiness_follows_sqs_while_liveness_stays_healthy(health_file: str) -> None:
    """Stop the SQS emulator itself: not ready, still live; start it again: ready."""
    ls = localstack.start_private()
    try:
        sqs = Sqs(ls.endpoint)
        queue = sqs.create(max_receive=None)
        done: list[int] = []
        router = Router()

        @router.handler(queue.name)
        async def handle(job: Job[Any]) -> None:
            done.append(job.payload["n"])

        port = free_port()
        env = env_for(
            ls.endpoint,
            queue.name,
            health_file,
            WORKER_METRICS_PORT=port,
            WORKER_METRICS_HOST="127.0.0.1",
            WORKER_WAIT_TIME_SECONDS=1,
        )
        seen: list[tuple[str, int, int]] = []

        async def scenario() -> None:
            async with running_worker(env, router):
                await until_status(port, "/readyz", 200)
                seen.append(("up", (await http_get(port, "/readyz"))[0], (await http_get(port, "/livez"))[0]))
                await asyncio.to_thread(ls.kill)
                await until_status(port, "/readyz", 503)
                seen.append(("down", (await http_get(port, "/readyz"))[0], (await http_get(port, "/livez"))[0]))
                await asyncio.to_thread(ls.restart)
                # The emulator keeps no state across a restart: the queue comes back empty.
                again = await asyncio.to_thread(Sqs(ls.endpoint).client.create_queue, QueueName=queue.name)
                assert again["QueueUrl"] == queue.url
                await asyncio.to_thread(sqs.send, queue, [{"n": 1}])
                await wait_for(lambda: done == [1], 90, "a job after the restart")
                await until_status(port, "/readyz", 200)
                seen.append(("back", (await http_get(port, "/readyz"))[0], (await http_get(port, "/livez"))[0]))

        asyncio.run(scenario())
        assert seen == [("up", 200, 200), ("down", 503, 200), ("back", 200, 200)]
    finally:
        ls.stop()


def test_logs_are_structured_and_carry_the_job(sqs: Sqs, localstack_endpoint: str, tmp_path: Path) -> None:
    secret_body = "super-private-payload-marker"
    lines: dict[bool, list[dict[str, Any]]] = {}
    names: dict[bool, str] = {}
    for log_payloads in (False, True):
        queue = sqs.create()  # a queue each: the first worker's last long poll may linger in SQS
        names[log_payloads] = queue.name
        sqs.send(queue, [{"id": secret_body, "seconds": 0}])
        log = tmp_path / f"worker-{log_payloads}.log"
        env = env_for(
            localstack_endpoint,
            queue.name,
            str(tmp_path / "progress"),
            TEST_QUEUE=queue.name,
            TEST_RECORD_FILE=str(tmp_path / "records.jsonl"),
            LOG_PAYLOADS=str(log_payloads).lower(),
            DATABASE_URL="postgresql://app:hunter2@db:5432/orders",
        )
        proc = worker_process(env, log)
        deadline = time.monotonic() + 60
        while "a library logs too" not in log.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        text = log.read_text()
        assert "hunter2" not in text, "a secret leaked into the logs"
        assert (secret_body in text) is log_payloads, "bodies are logged only with LOG_PAYLOADS"
        lines[log_payloads] = list(log_lines(log))
    parsed = lines[False]
    in_job = [line for line in parsed if line.get("message") in ("working", "a library logs too")]
    assert len(in_job) == 2
    for line in in_job:
        assert line["queue"] == names[False] and line["receive_count"] == 1 and line["job_id"]
        assert line["level"] == "INFO" and line["service"] and line["timestamp"]
    started = next(line for line in parsed if line.get("message") == "worker started")
    stopped = next(line for line in parsed if line.get("message") == "worker stopped")
    for line in (started, stopped):
        assert line["version"] and line["worker_id"] == "test-worker"
        assert line["config"]["database_url"] == "postgresql://app:***@db:5432/orders"
        assert line["config"]["queues"][0]["name"] == names[False]


def test_each_worker_process_has_its_own_progress_file_and_healthcheck_judges_each(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    """Two workers of one service on one host, with one WORKER_HEALTH_FILE: each writes its
    own file. With one of them frozen (SIGSTOP), `healthcheck` fails naming it while the
    other makes progress; a file both wrote said ok. A stopped worker leaves no file."""
    from sqs_worker_engine.health import progress_files

    queue = sqs.create()
    base = str(tmp_path / "orders.progress")
    env = env_for(localstack_endpoint, queue.name, base, TEST_QUEUE=queue.name, WORKER_WAIT_TIME_SECONDS=1)
    workers = [worker_process(env, tmp_path / f"worker-{i}.log") for i in range(2)]
    frozen, running = workers
    stalled_after = 8.0

    def ages() -> dict[int, float]:
        now = time.time()
        return {pid: now - float(Path(path).read_text() or 0) for pid, path in progress_files(base).items()}

    try:
        deadline = time.monotonic() + 90
        while set(progress_files(base)) != {frozen.pid, running.pid}:
            assert time.monotonic() < deadline, f"one file per worker: {progress_files(base)}"
            time.sleep(0.2)
        frozen.send_signal(signal.SIGSTOP)
        # Until the frozen one's file is older than the threshold and the other's is not.
        while not (ages()[frozen.pid] > stalled_after > ages()[running.pid] + 2):
            assert time.monotonic() < deadline + 60, ages()
            time.sleep(0.2)
        verdict = cli("healthcheck", f"--stalled-after={stalled_after:g}", **env)
        assert verdict.returncode == 1, verdict.stdout + verdict.stderr
        assert f"worker {frozen.pid}: stalled" in verdict.stderr and f"worker {running.pid}: ok" in verdict.stderr
        alone = cli("healthcheck", f"--stalled-after={stalled_after:g}", f"--pid={running.pid}", **env)
        assert alone.returncode == 0, alone.stderr
    finally:
        frozen.send_signal(signal.SIGCONT)
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
    assert [worker.wait(60) for worker in workers] == [0, 0]
    assert progress_files(base) == {}, "a stopped worker leaves its file behind"
    after = cli("healthcheck", **env)
    assert after.returncode == 1 and "no progress file of a running worker" in after.stderr, after.stderr


def test_log_format_text_gives_a_person_lines_to_read(sqs: Sqs, localstack_endpoint: str, tmp_path: Path) -> None:
    """LOG_FORMAT=text (what `make dev` sets): one text line per record, the job on the
    lines from inside it, and start and stop lines whose configuration is what this worker
    sets apart from the engine's defaults (the JSON start line used to be about 2 KB)."""
    queue = sqs.create()
    sqs.send(queue, [{"id": "plain", "seconds": 0}])
    log = tmp_path / "worker.log"
    env = env_for(
        localstack_endpoint,
        queue.name,
        str(tmp_path / "progress"),
        TEST_QUEUE=queue.name,
        TEST_RECORD_FILE=str(tmp_path / "records.jsonl"),
        LOG_FORMAT="text",
    )
    proc = worker_process(env, log)
    deadline = time.monotonic() + 60
    while "a library logs too" not in log.read_text():
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    text = log.read_text().splitlines()
    assert not list(log_lines(log)), "no JSON line"
    started = next(line for line in text if " worker started " in line)
    stopped = next(line for line in text if " worker stopped " in line)
    working = next(line for line in text if " working " in line)
    assert f"queue={queue.name} receive_count=1" in working and "job_id=" in working, working
    for line in (started, stopped):
        assert " INFO " in line and " config={" in line and f'"queues":[{{"name":"{queue.name}"}}]}}' in line, line
        assert '"retry_base_seconds":0.5' in line and '"concurrency"' not in line, "what is set, not the defaults"
        assert len(line) < 600, f"{len(line)} characters: {line}"


def test_poison_messages_redrive_back_none_lost_none_duplicated(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    queue = sqs.create(max_receive=2)
    router = Router()
    poisoned: set[int] = set()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        poisoned.add(job.payload["n"])
        raise NonRetryableError(f"cannot handle {job.payload['n']}")

    sqs.send(queue, [{"n": i} for i in range(25)])

    async def poison() -> None:
        # WORKER_DRAIN_POLLS: this worker's last long poll must not linger in SQS and take
        # one of the messages the redrive brings back (see WORKER_DRAIN_POLLS in settings.py).
        env = env_for(
            localstack_endpoint, queue.name, health_file, WORKER_DRAIN_POLLS="true", WORKER_WAIT_TIME_SECONDS=2
        )
        async with running_worker(env, router):
            await wait_for(lambda: sqs.counts(queue.dlq_url or "")[0] == 25, 60, "25 in the DLQ")

    asyncio.run(poison())
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name}
    peek = cli("dlq", "peek", "--count", "5", **env)
    assert peek.returncode == 0, peek.stderr
    shown = [json.loads(line) for line in peek.stdout.splitlines()]
    assert len(shown) == 5 and all(s["x-error-type"] == "NonRetryableError" for s in shown)
    assert shown[0]["x-error-context"]["source_queue"] == queue.name
    again = [json.loads(line) for line in cli("dlq", "peek", "--count", "25", **env).stdout.splitlines()]
    assert {s["receive_count"] for s in again} == {1}, "the source's count, not the DLQ's (each peek is a receive)"
    assert all(s["dead_lettered_by"] == "worker" for s in shown)
    assert sqs.counts(queue.dlq_url or "") == (25, 0), "peek takes nothing"

    moved = cli("redrive", "--rate", "50", **env)
    assert moved.returncode == 0, moved.stderr
    assert "COMPLETED" in moved.stdout and "moved 25 / 25" in moved.stdout.replace("moved 25 / 0", "moved 25 / 25")
    back = sqs.receive_all(queue.url)
    numbers = sorted(json.loads(m["Body"])["n"] for m in back)
    assert numbers == list(range(25)), "every message back, each exactly once"
    assert sqs.counts(queue.dlq_url or "") == (0, 0)


def copy_back(sqs: Sqs, queue: Any, journal: Path, after_send: Any = None) -> int:
    from aiobotocore.session import get_session

    async def go() -> int:
        async with get_session().create_client("sqs", region_name=REGION, endpoint_url=sqs.endpoint) as client:
            return await redrive.copy_back(
                client, queue.dlq_url, queue.url, False, redrive.Journal(journal), after_send=after_send
            )

    return asyncio.run(go())


def fill_dlq(sqs: Sqs, queue: Any, count: int) -> None:
    for start in range(0, count, 10):
        entries = [{"Id": str(i), "MessageBody": json.dumps({"n": start + i})} for i in range(min(10, count - start))]
        sqs.client.send_message_batch(QueueUrl=queue.dlq_url, Entries=entries)


# On moto's server too: its lack of StartMessageMoveTask leaves `redrive --copy` (README,
# "Emulator fidelity").
@pytest.mark.parametrize("emulator", EMULATORS)
def test_copy_redrive_interrupted_then_resumed_moves_each_message_once(sqs: Sqs, tmp_path: Path) -> None:
    queue = sqs.create(max_receive=2)
    fill_dlq(sqs, queue, 20)
    journal = tmp_path / "journal"

    class CtrlCError(Exception):
        pass

    async def interrupt() -> None:
        raise CtrlCError  # Ctrl-C right after SQS took the first copies

    with pytest.raises(CtrlCError):
        copy_back(sqs, queue, journal, interrupt)
    assert copy_back(sqs, queue, journal) + sqs.counts(queue.url)[0] >= 20
    numbers = sorted(json.loads(m["Body"])["n"] for m in sqs.receive_all(queue.url))
    assert numbers == list(range(20)), "nothing lost, nothing sent twice"
    assert sqs.counts(queue.dlq_url or "") == (0, 0)
    assert not journal.exists()


def test_copy_redrive_after_a_crash_deletes_what_was_copied_without_resending(sqs: Sqs, tmp_path: Path) -> None:
    """The state a SIGKILL leaves: copies sent and journaled, originals still in the DLQ."""
    queue = sqs.create(max_receive=2)
    fill_dlq(sqs, queue, 5)
    journal = tmp_path / "journal"
    copied = sqs.client.receive_message(QueueUrl=queue.dlq_url, MaxNumberOfMessages=3, VisibilityTimeout=0)["Messages"]
    for message in copied:
        sqs.client.send_message(QueueUrl=queue.url, MessageBody=message["Body"])
    redrive.Journal(journal).record([m["MessageId"] for m in copied])
    assert copy_back(sqs, queue, journal) == 5
    numbers = sorted(json.loads(m["Body"])["n"] for m in sqs.receive_all(queue.url))
    assert numbers == list(range(5))
    assert sqs.counts(queue.dlq_url or "") == (0, 0)


def test_copy_redrive_leaves_an_unsendable_message_in_the_dlq_and_ends(sqs: Sqs, tmp_path: Path) -> None:
    queue = sqs.create(max_receive=2)
    sqs.client.set_queue_attributes(QueueUrl=queue.url, Attributes={"MaximumMessageSize": "1024"})
    fill_dlq(sqs, queue, 2)
    sqs.client.send_message(QueueUrl=queue.dlq_url, MessageBody=json.dumps({"n": 99, "pad": "x" * 2000}))
    reports: list[str] = []

    async def go() -> int:
        from aiobotocore.session import get_session

        async with get_session().create_client("sqs", region_name=REGION, endpoint_url=sqs.endpoint) as client:
            copying = redrive.copy_back(
                client, queue.dlq_url or "", queue.url, False, redrive.Journal(tmp_path / "j"), refused=reports.append
            )
            return await asyncio.wait_for(copying, 60)  # it used to hand the big one back and receive it forever

    assert asyncio.run(go()) == 2
    assert sorted(json.loads(m["Body"])["n"] for m in sqs.receive_all(queue.url)) == [0, 1]
    assert len(reports) == 1, reports
    assert sum(sqs.counts(queue.dlq_url or "")) == 1, "the unsendable message stays in the DLQ"


def read_only_directory(tmp_path: Path) -> tuple[list[str], Path] | None:
    """A directory no write reaches, root's included, and the command prefix that makes it
    so: for another user, mode 0555; for root (which writes through any mode), a read-only
    tmpfs mounted over it in a mount namespace of the command's own (as a container's
    read-only root filesystem refuses writes: EROFS). None where neither can be had."""
    directory = tmp_path / "read-only"
    directory.mkdir()
    if os.geteuid() != 0:
        directory.chmod(0o555)
        return [], directory
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o ro tmpfs {directory} && ! touch {directory}/x"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        return None
    # `cd` again after the mount: a working directory entered before it is the one beneath.
    mount = f'mount -t tmpfs -o ro tmpfs {directory} && cd "$(pwd -P)" && exec "$@"'
    return ["unshare", "-m", "sh", "-c", mount, "sh"], directory


def redrive_from(cwd: Path, env: dict[str, str], prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """`redrive --copy` as an operator runs it in `cwd` (the image's working directory)."""
    keep = {k: v for k, v in os.environ.items() if k not in ("REDRIVE_JOURNAL_DIR", "XDG_STATE_HOME", "TMPDIR")}
    return subprocess.run(
        [*(prefix or []), sys.executable, "-m", PACKAGE, "redrive", "--copy"],
        env={**keep, "AWS_REGION": REGION, "PYTHONPATH": str(PROJECT_ROOT), **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.parametrize("where", ["read-only", "under a file"])
def test_copy_redrive_that_cannot_write_its_journal_sends_nothing_and_names_the_path(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path, where: str
) -> None:
    """It used to send the copies, then fail on its journal with a traceback: the originals
    stayed in the DLQ, and a rerun sent them again."""
    prefix: list[str] = []
    if where == "read-only":
        made = read_only_directory(tmp_path)
        if made is None:
            pytest.skip("no read-only directory to be had here (root without a mount namespace)")
        prefix, directory = made
    else:
        (tmp_path / "a-file").write_text("")
        directory = tmp_path / "a-file" / "journals"  # no one, root included, makes this
    queue = sqs.create(max_receive=2)
    fill_dlq(sqs, queue, 5)
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name, "REDRIVE_JOURNAL_DIR": str(directory)}
    result = redrive_from(PROJECT_ROOT, env, prefix)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output, output
    assert str(directory) in result.stderr and "REDRIVE_JOURNAL_DIR" in result.stderr, output
    assert sqs.counts(queue.url) == (0, 0), "nothing sent"
    assert sum(sqs.counts(queue.dlq_url or "")) == 5, "everything still in the DLQ"


def test_copy_redrive_whose_journal_fails_after_a_send_deletes_what_it_sent_and_stops(sqs: Sqs, tmp_path: Path) -> None:
    """The disk fills (or goes read-only) between the check and a write: what SQS took is
    still deleted from the DLQ before the run stops, so a rerun sends none of it again."""
    queue = sqs.create(max_receive=2)
    fill_dlq(sqs, queue, 15)
    (tmp_path / "a-file").write_text("")

    async def go() -> None:
        from aiobotocore.session import get_session

        journal = redrive.Journal.ready(tmp_path / "journal")
        journal.path = tmp_path / "a-file" / "journal"  # every write from now on fails
        async with get_session().create_client("sqs", region_name=REGION, endpoint_url=sqs.endpoint) as client:
            await redrive.copy_back(client, queue.dlq_url or "", queue.url, False, journal)

    with pytest.raises(redrive.JournalError, match="a-file/journal"):
        asyncio.run(go())
    sent = sqs.counts(queue.url)[0]
    assert sent > 0 and sent + sqs.counts(queue.dlq_url or "")[0] == 15, "what was sent left the DLQ"
    assert copy_back(sqs, queue, tmp_path / "journal") == 15 - sent
    numbers = sorted(json.loads(m["Body"])["n"] for m in sqs.receive_all(queue.url))
    assert numbers == list(range(15)), "each message once"


def test_copy_redrive_from_a_read_only_working_directory_journals_in_the_temp_dir(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    """The image's read-only root as the working directory, nothing set: the journal goes to
    $TMPDIR (a tmpfs or emptyDir in the deploy files), in a directory of this user's own."""
    made = read_only_directory(tmp_path)
    if made is None:
        pytest.skip("no read-only directory to be had here (root without a mount namespace)")
    prefix, read_only = made
    temp = tmp_path / "tmp"
    temp.mkdir()
    queue = sqs.create(max_receive=2)
    fill_dlq(sqs, queue, 12)
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name, "TMPDIR": str(temp)}
    result = redrive_from(read_only, env, prefix)
    assert result.returncode == 0, result.stdout + result.stderr
    journals = temp / f"sqs-worker-engine-{os.geteuid()}"
    assert str(journals) in result.stdout, "it says where its journal is"
    assert "COMPLETED: moved 12" in result.stdout, result.stdout
    numbers = sorted(json.loads(m["Body"])["n"] for m in sqs.receive_all(queue.url))
    assert numbers == list(range(12))
    assert journals.is_dir() and not list(journals.iterdir()), "the journal goes once every copy is settled"
    assert journals.stat().st_mode & 0o077 == 0, "private: what it holds decides what is deleted"


def test_purge_asks_on_a_terminal_and_refuses_without_one(sqs: Sqs, localstack_endpoint: str) -> None:
    queue = sqs.create(max_receive=2)
    sqs.client.send_message(QueueUrl=queue.dlq_url, MessageBody="x")
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name}
    closed = subprocess.run(
        [sys.executable, "-m", PACKAGE, "dlq", "purge"],
        env={**os.environ, "AWS_REGION": REGION, **env},
        cwd=PROJECT_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert closed.returncode == 2 and "--yes" in closed.stderr and "Traceback" not in closed.stderr, closed.stderr
    assert "not purged" in on_a_terminal(["dlq", "purge"], "no\n", env)
    assert sqs.counts(queue.dlq_url or "")[0] == 1
    assert f"purged {queue.dlq_name}" in on_a_terminal(["dlq", "purge"], f"{queue.dlq_name}\n", env)
    wait_until(lambda: sqs.counts(queue.dlq_url or "")[0] == 0, "the DLQ purged")


def on_a_terminal(args: list[str], typed: str, env: dict[str, str]) -> str:
    """Run the command with a terminal as its stdin, type `typed`; what it printed."""
    import pty

    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", PACKAGE, *args],
            env={**os.environ, "AWS_REGION": REGION, **env},
            cwd=PROJECT_ROOT,
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        os.write(controller, typed.encode())
        out, _ = process.communicate(timeout=180)
    finally:
        os.close(terminal)
        os.close(controller)
    return out


def wait_until(condition: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def look(sqs: Sqs, url: str, count: int) -> list[dict[str, Any]]:
    """`count` messages of the queue, by id, left visible."""
    seen: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 30
    while len(seen) < count:
        assert time.monotonic() < deadline, f"only {len(seen)} of {count} messages seen"
        for m in sqs.client.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=1,
            VisibilityTimeout=0,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
        ).get("Messages", []):
            seen[m["MessageId"]] = m
    return list(seen.values())


XRAY = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
TEN = {
    **{f"s{i}": {"DataType": "String", "StringValue": f"v{i}"} for i in range(7)},
    "amount": {"DataType": "Number", "StringValue": "12.50"},
    "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xffbytes"},
    "kind": {"DataType": "String.custom", "StringValue": "order"},
}


def test_a_fair_queue_message_dead_lettered_and_redriven_comes_back_whole(
    sqs: Sqs, localstack_endpoint: str, health_file: str, tmp_path: Path
) -> None:
    queue = sqs.create(max_receive=3)
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        raise NonRetryableError("cannot handle it")

    sqs.client.send_message(
        QueueUrl=queue.url,
        MessageBody='{"n": 1}',
        MessageGroupId="tenant-a",
        MessageAttributes=TEN,
        MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": XRAY}},
    )

    async def dead_letter() -> None:
        env = env_for(
            localstack_endpoint, queue.name, health_file, WORKER_DRAIN_POLLS="true", WORKER_WAIT_TIME_SECONDS=2
        )
        async with running_worker(env, router):
            await wait_for(lambda: sqs.counts(queue.dlq_url or "")[0] == 1, 60, "the copy in the DLQ")

    asyncio.run(dead_letter())
    [copy] = look(sqs, queue.dlq_url or "", 1)
    assert copy["Attributes"].get("MessageGroupId") == "tenant-a", "the fair queue's tenant travels with the copy"
    assert copy["Attributes"].get("AWSTraceHeader") == XRAY
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name, "REDRIVE_JOURNAL_DIR": str(tmp_path)}
    moved = cli("redrive", "--copy", **env)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    [back] = sqs.receive_all(queue.url)
    assert back["MessageAttributes"] == TEN, "every attribute, with its type, and none of the worker's"
    assert back["Attributes"].get("AWSTraceHeader") == XRAY
    assert back["Attributes"].get("MessageGroupId") == "tenant-a"
    assert sqs.counts(queue.dlq_url or "") == (0, 0)


def test_a_message_dead_lettered_with_ten_attributes_meets_its_handler_with_ten_after_the_default_redrive(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    """SQS's move task brings the DLQ copy back as it is: 7 originals beside the worker's 3
    (the other 3 folded into x-error-context). The worker unfolds them for the handler."""
    queue = sqs.create(max_receive=3)
    router = Router()
    seen: list[dict[str, Any]] = []

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        seen.append(dict(job.message_attributes))
        if len(seen) == 1:
            raise NonRetryableError("cannot handle it yet")

    sqs.client.send_message(QueueUrl=queue.url, MessageBody='{"n": 1}', MessageAttributes=TEN)
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name}

    async def scenario() -> None:
        worker_env = env_for(localstack_endpoint, queue.name, health_file, WORKER_WAIT_TIME_SECONDS=2)
        async with running_worker(worker_env, router):
            await wait_for(lambda: sqs.counts(queue.dlq_url or "")[0] == 1, 60, "the copy in the DLQ")
            [copy] = look(sqs, queue.dlq_url or "", 1)
            assert len(copy["MessageAttributes"]) == 10 and "blob" not in copy["MessageAttributes"]
            moved = await asyncio.to_thread(cli, "redrive", **env)
            assert moved.returncode == 0, moved.stdout + moved.stderr
            assert "not available" not in moved.stdout, "SQS's own move task moved it"
            await wait_for(lambda: len(seen) == 2, 60, "the redriven message handled")

    asyncio.run(scenario())
    assert seen[0] == TEN
    assert seen[1] == TEN, "every original with its type, none of the worker's"
    assert sqs.counts(queue.dlq_url or "") == (0, 0)


def test_copy_redrive_splits_near_limit_messages_by_size(sqs: Sqs, tmp_path: Path) -> None:
    queue = sqs.create(max_receive=2)
    pad = "x" * 250_000  # four of these fill SQS's 1 MiB a batch request
    for n in range(6):
        sqs.client.send_message(QueueUrl=queue.dlq_url, MessageBody=json.dumps({"n": n, "pad": pad}))
    assert copy_back(sqs, queue, tmp_path / "journal") == 6
    assert sorted(json.loads(m["Body"])["n"] for m in sqs.receive_all(queue.url)) == list(range(6))
    assert sqs.counts(queue.dlq_url or "") == (0, 0)


FORGED = {
    "x-error-type": {"DataType": "String", "StringValue": "Handled"},
    "x-error-message": {"DataType": "String", "StringValue": "handled: safe to purge"},
    "x-error-context": {"DataType": "String", "StringValue": "{not json"},
    "tenant": {"DataType": "String", "StringValue": "acme"},
}


def test_peek_and_redrive_take_a_producers_error_attributes_for_the_producers(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    """A crash-looping message SQS dead-lettered itself, its producer's x-error-* untouched."""
    queue = sqs.create(max_receive=1)
    for n in range(2):
        sqs.client.send_message(QueueUrl=queue.url, MessageBody=json.dumps({"n": n}), MessageAttributes=FORGED)
    sqs.receive_all(queue.url, visibility=0)  # each message's one receive: a worker that crashed
    wait_until(lambda: not sqs.receive_all(queue.url, visibility=0), "SQS to move both")  # the next moves it
    wait_until(lambda: sqs.counts(queue.dlq_url or "")[0] == 2, "both in the DLQ")
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name, "REDRIVE_JOURNAL_DIR": str(tmp_path)}
    peek = cli("dlq", "peek", **env)
    assert peek.returncode == 0 and "Traceback" not in peek.stderr, peek.stderr
    shown = [json.loads(line) for line in peek.stdout.splitlines()]
    assert len(shown) == 2, peek.stdout
    for message in shown:
        assert message["dead_lettered_by"] == "sqs" and message["receive_count"] == 1
        assert not {"x-error-type", "x-error-message", "x-error-context"} & set(message), "none passes for the worker's"
        assert message["producer_attributes"]["x-error-message"] == "handled: safe to purge"
    assert cli("redrive", "--copy", **env).returncode == 0
    back = sqs.receive_all(queue.url)
    assert len(back) == 2 and all(m["MessageAttributes"] == FORGED for m in back), "the producer's, as sent"


def test_one_dlq_message_is_deleted_or_redriven_by_its_id(sqs: Sqs, localstack_endpoint: str, tmp_path: Path) -> None:
    queue = sqs.create(max_receive=2)
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name, "REDRIVE_JOURNAL_DIR": str(tmp_path)}
    empty = cli("dlq", "peek", **env)
    assert empty.returncode == 0 and f"{queue.dlq_name} is empty" in empty.stderr, empty.stdout + empty.stderr
    fill_dlq(sqs, queue, 3)
    ids = {json.loads(m["Body"])["n"]: m["MessageId"] for m in look(sqs, queue.dlq_url or "", 3)}
    deleted = cli("dlq", "delete", "--id", ids[0], **env)
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    moved = cli("redrive", "--id", ids[1], **env)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    missing = cli("dlq", "delete", "--id", "no-such-id", **env)
    assert missing.returncode == 1 and "no-such-id not found" in missing.stderr, missing.stderr
    assert [json.loads(m["Body"])["n"] for m in sqs.receive_all(queue.url)] == [1]
    assert [json.loads(m["Body"])["n"] for m in sqs.receive_all(queue.dlq_url or "")] == [2], "the other one stays"


def test_ecs_scale_in_protection_while_busy(
    sqs: Sqs, localstack_endpoint: str, health_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against a stand-in for the ECS agent's task-protection endpoint."""
    monkeypatch.setattr(ecs_module, "IDLE_BEFORE_RELEASE", 0.5)
    calls: list[tuple[bool, float]] = []
    queue = sqs.create()
    running = asyncio.Event()
    finish = asyncio.Event()
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        running.set()
        await finish.wait()

    async def agent(request: web.Request) -> web.Response:
        body = await request.json()
        calls.append((bool(body["ProtectionEnabled"]), time.monotonic()))
        return web.json_response({"protection": {"ProtectionEnabled": body["ProtectionEnabled"]}})

    async def scenario() -> None:
        app = web.Application()
        app.router.add_put("/task-protection/v1/state", agent)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        env = env_for(localstack_endpoint, queue.name, health_file, ECS_AGENT_URI=f"http://127.0.0.1:{port}")
        try:
            async with running_worker(env, router):
                await asyncio.sleep(1.5)
                assert calls == [], "an idle task is not protected"
                sqs.send(queue, [{"n": 1}])
                await running.wait()
                await wait_for(lambda: [c for c, _ in calls] == [True], 10, "protection while busy")
                finish.set()
                await wait_for(lambda: [c for c, _ in calls] == [True, False], 20, "release when idle")
        finally:
            await runner.cleanup()

    asyncio.run(scenario())


def test_readiness_checks_the_configured_database(sqs: Sqs, localstack_endpoint: str, health_file: str) -> None:
    """DATABASE_URL set: /readyz also needs its host:port to accept a connection."""
    queue = sqs.create()
    router = Router()
    router.handler(queue.name)(lambda job: None)
    database = socket.socket()
    database.bind(("127.0.0.1", 0))
    db_port = database.getsockname()[1]
    port = free_port()
    env = env_for(
        localstack_endpoint,
        queue.name,
        health_file,
        WORKER_METRICS_PORT=port,
        WORKER_METRICS_HOST="127.0.0.1",
        DATABASE_URL=f"postgresql://app:secret@127.0.0.1:{db_port}/orders",
    )
    seen: list[tuple[int, dict[str, bool]]] = []

    async def scenario() -> None:
        async with running_worker(env, router):
            status, body = await http_get(port, "/readyz")
            seen.append((status, json.loads(body)["checks"]))
            database.listen()  # the database comes up
            await until_status(port, "/readyz", 200)
            status, body = await http_get(port, "/readyz")
            seen.append((status, json.loads(body)["checks"]))

    try:
        asyncio.run(scenario())
    finally:
        database.close()
    assert seen == [
        (503, {"sqs": True, "running": True, "database": False}),
        (200, {"sqs": True, "running": True, "database": True}),
    ]
