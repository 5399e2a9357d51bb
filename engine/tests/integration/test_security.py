"""What the service gives away: no secret in a log line or the printed configuration, no
message body in the logs unless LOG_PAYLOADS asks for it (not even pieces of one quoted in a
validation error), and the metrics/health server only on WORKER_METRICS_HOST."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sqs_worker_engine.base.telemetry.health import Health
from sqs_worker_engine.doubles.emulators import free_port
from sqs_worker_engine.process.platform.server import make_app, start_server
from sqs_worker_engine.process.settings import load_settings

from ..support import PACKAGE, PROJECT_ROOT, REGION, Sqs, env_for, worker_process

SECRET = "s3cr3t-Marker-7f1d"  # every secret below contains it; it must never be printed

DATABASE_URLS = [
    f"postgresql://app:{SECRET}@db:5432/orders",
    f"postgresql://app:{SECRET}%40x:y@db/orders",  # a password with escapes and a colon
    f"postgresql://db/orders?user=app&password={SECRET}",
    f"host=db user=app password={SECRET} dbname=orders",  # libpq keyword form
    f"host=db user=app password='{SECRET} with spaces' dbname=orders",
    f"Server=db;User Id=app;Password={SECRET};Database=orders",
    f"jdbc:postgresql://app:{SECRET}@db/orders",
    f"mysql://app:{SECRET}@db/orders?sslpassword={SECRET}",
    f"postgresql://app:12/{SECRET}@db:5432/orders",  # "/" in the password: the parser ends the host there
    f"postgresql://db/orders?sslmode=require&auth={SECRET}",  # a secret under a name no list predicts
]


@pytest.mark.parametrize("url", DATABASE_URLS, ids=lambda u: u.split(SECRET)[0][:24])
def test_printed_configuration_never_shows_a_database_password(url: str) -> None:
    printed = json.dumps(load_settings({"WORKER_QUEUES": "orders", "DATABASE_URL": url}).describe())
    assert SECRET not in printed
    assert "***" in printed, "redacted, not dropped: the rest stays for debugging"


def test_config_command_prints_no_secret() -> None:
    env = {
        **os.environ,
        "AWS_REGION": REGION,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_SESSION_TOKEN": SECRET,
        "DATABASE_URL": DATABASE_URLS[0],
        "AWS_ENDPOINT_URL": f"http://user:{SECRET}@localhost:4566",
        "ECS_AGENT_URI": f"http://agent:{SECRET}@169.254.170.2/v1",
    }
    result = subprocess.run(
        [sys.executable, "-m", PACKAGE, "config"], env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert SECRET not in result.stdout + result.stderr


@pytest.fixture(scope="module")
def worker_log(localstack_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    """A worker with secrets in its environment, fed bodies carrying markers: valid, invalid
    (dead-lettered, their validation errors logged) and failing. One for the module."""
    sqs = Sqs(localstack_endpoint)
    tmp_path = tmp_path_factory.mktemp("security")
    queue = sqs.create(max_receive=2)
    sqs.send(
        queue,
        [
            {"id": "ok-BODY-MARKER-1"},
            {"id": ["BODY-MARKER-2"]},  # wrong type: the validation error quotes the input
            {"id": "x", "fail": "BODY-MARKER-3"},  # not one of the allowed values
            "BODY-MARKER-4 is not JSON",
            {"id": "BODY-MARKER-5", "fail": "fatal"},  # non-retryable: dead-lettered by the handler
        ],
    )
    port = free_port()
    log = tmp_path / "worker.log"
    env = env_for(
        localstack_endpoint,
        queue.name,
        str(tmp_path / "progress"),
        TEST_QUEUE=queue.name,
        TEST_RECORD_FILE=str(tmp_path / "records.jsonl"),
        WORKER_METRICS_HOST="127.0.0.1",
        WORKER_METRICS_PORT=port,
        AWS_SECRET_ACCESS_KEY=SECRET,
        DATABASE_URL=DATABASE_URLS[3],
    )
    proc = worker_process(env, log)
    try:
        deadline = time.monotonic() + 60
        while sqs.counts(queue.dlq_url or "")[0] < 4 or sqs.counts(queue.url) != (0, 0):
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        yield log, port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            sqs.cleanup()


def test_logs_and_metrics_carry_no_secret_and_no_body(worker_log: tuple[Path, int]) -> None:
    log, port = worker_log
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        metrics = r.read().decode()
    time.sleep(0.3)
    text = log.read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert any(line.get("message", "").startswith("job failed (dead_letter)") for line in lines), "failures were logged"
    assert SECRET not in text + metrics
    assert "BODY-MARKER" not in text, [line for line in text.splitlines() if "BODY-MARKER" in line][:3]


def other_local_addresses() -> list[str]:
    """IPv4 addresses of this machine other than 127.0.0.1: 127.0.0.2 (Linux routes all of
    127/8 to the loopback), and the host's own addresses if it has any."""
    found: list[str] = []
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing address
        found.append(s.getsockname()[0])
    with contextlib.suppress(OSError):
        found += [str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)]
    found.append("127.0.0.2")
    return [a for a in dict.fromkeys(found) if a != "127.0.0.1"]


def connects(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(3)
        try:
            s.connect((host, port))
        except OSError:
            return False
        return True


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a listening TCP socket on `port`, from the kernel's table (Linux)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as handle:
            for row in list(handle)[1:]:
                local, state = row.split()[1], row.split()[3]
                address, _, hex_port = local.partition(":")
                if state == "0A" and int(hex_port, 16) == port:
                    found.add(address)
    return found


def test_metrics_server_listens_only_on_its_host(worker_log: tuple[Path, int]) -> None:
    _, port = worker_log
    assert connects("127.0.0.1", port)

    async def control() -> list[str]:
        """The probe can see an exposed server: one bound to every address answers on these."""
        wide = free_port()
        runner = await start_server(make_app(Health(60, None), []), "0.0.0.0", wide)
        try:
            return [a for a in other_local_addresses() if await asyncio.to_thread(connects, a, wide)]
        finally:
            await runner.cleanup()

    reachable_elsewhere = asyncio.run(control())
    for address in reachable_elsewhere:
        assert not connects(address, port), f"the metrics server answers on {address}"
    sockets = listening_addresses(port)
    if sockets:
        assert sockets == {"0100007F"}, sockets  # 127.0.0.1, as the kernel writes it
    assert reachable_elsewhere or sockets, "no way to check the bind address on this machine"
