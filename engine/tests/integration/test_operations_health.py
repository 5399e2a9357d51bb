"""What an on-call engineer relies on, from a running worker: metrics that move, health that
tells the truth, structured logs, and ECS scale-in protection."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from sqs_worker_engine import DownstreamUnavailable, Job, NonRetryableError, Router
from sqs_worker_engine.base.telemetry.health import progress_files
from sqs_worker_engine.base.telemetry.metrics import set_db_pool_in_use
from sqs_worker_engine.doubles import emulators
from sqs_worker_engine.doubles.emulators import free_port
from sqs_worker_engine.process.platform import ecs as ecs_module

from ..support import (
    Sqs,
    cli,
    env_for,
    http_get,
    log_lines,
    metrics_env,
    running_worker,
    until_status,
    wait_for,
    wait_until,
    worker_process,
)


def samples(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


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

    port, env = metrics_env(
        localstack_endpoint,
        queue.name,
        health_file,
        WORKER_BACKLOG_SAMPLE_SECONDS=1,
        WORKER_CONCURRENCY=4,
        DB_POOL_SIZE=8,
    )
    scrapes: dict[str, str] = {}
    q = {"queue": queue.name}

    def backlog(text: str) -> float:
        return samples(text, "sqs_queue_messages", state="visible", **q) + samples(
            text, "sqs_queue_messages", state="in_flight", **q
        )

    async def scenario() -> None:
        async with running_worker(env, router) as worker:
            scrapes["before"] = (await http_get(port, "/metrics"))[1]
            sqs.send(queue, [{"n": i} for i in range(10)] + [{"poison": True}])
            await wait_for(lambda: worker.active_job_count == 4, 30, "4 jobs in flight")
            # The backlog sampler runs on its own clock (1 s here): scrape until it has seen
            # the jobs in flight, and later the queue empty, rather than sleeping a guess.
            scrapes["busy"] = await scrape_until(port, lambda text: backlog(text) >= 4, "the sampler's busy queue")
            release.set()
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), 60, "all settled")
            scrapes["after"] = await scrape_until(
                port,
                lambda text: backlog(text) == 0 and samples(text, "queue_oldest_message_seconds", **q) == 0,
                "the sampler's empty queue",
            )

    asyncio.run(scenario())
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

    progress = str(tmp_path / "progress")
    port, env = metrics_env(
        localstack_endpoint,
        queue.name,
        progress,
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

    port, env = metrics_env(
        localstack_endpoint,
        queue.name,
        str(tmp_path / "progress"),
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

    port, env = metrics_env(
        localstack_endpoint,
        f"{high.name},{low.name}",
        str(tmp_path / "progress"),
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
        wait_until(lambda: bool(progress_files(str(progress))), "the worker's first progress", 120)
        assert cli("healthcheck", **env).returncode == 0
        sqs.send(queue, [{"id": "blocks", "seconds": 25, "blocking_loop": True}])
        deadline = time.monotonic() + 40
        while cli("healthcheck", **env).returncode == 0:
            assert time.monotonic() < deadline, "the healthcheck never saw the blocked loop"
            time.sleep(1)
    finally:
        proc.kill()
        proc.wait(30)


async def scrape_until(port: int, condition: Any, what: str, timeout: float = 60) -> str:
    """/metrics once `condition(text)` holds (the sampler and the scrape run on their own clocks)."""
    deadline = time.monotonic() + timeout
    while True:
        text = (await http_get(port, "/metrics"))[1]
        if condition(text):
            return text
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


def test_readiness_follows_sqs_while_liveness_stays_healthy(health_file: str) -> None:
    """Stop the SQS emulator itself: not ready, still live; start it again: ready."""
    ls = emulators.start_private()
    try:
        sqs = Sqs(ls.endpoint)
        queue = sqs.create(max_receive=None)
        done: list[int] = []
        router = Router()

        @router.handler(queue.name)
        async def handle(job: Job[Any]) -> None:
            done.append(job.payload["n"])

        port, env = metrics_env(
            ls.endpoint,
            queue.name,
            health_file,
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
    from sqs_worker_engine.base.telemetry.health import progress_files

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
    port, env = metrics_env(
        localstack_endpoint,
        queue.name,
        health_file,
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
