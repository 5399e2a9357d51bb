"""Finding and starting the SQS emulator: SQS_EMULATOR chooses, AWS_ENDPOINT_URL is used as
the emulator it is, and `start` / `stop` keep one running for `make dev`: on LOCALSTACK_PORT,
per project and port, so that `stop` stops only what that project started (LocalStack's own
runtime on free ports of this machine, never the one a machine may share on 4566)."""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import boto3
import pytest

from sqs_worker_engine.doubles import emulators


def test_an_unknown_emulator_name_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQS_EMULATOR", "elasticmq")
    with pytest.raises(emulators.EmulatorError, match=r"SQS_EMULATOR='elasticmq' .* localstack, moto"):
        emulators.ensure()
    with pytest.raises(emulators.EmulatorError, match="'elasticmq'"):
        emulators.ensure(emulator="elasticmq")


def test_moto_without_its_server_installed_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(emulators.EmulatorError, match=re.escape("install 'moto[server]'")):
        emulators.start_moto()


def test_aws_endpoint_url_is_used_as_the_emulator_it_is(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.delenv("SQS_EMULATOR", raising=False)
    found = emulators.ensure()
    assert (found.endpoint, found.kind, found.started_here) == (moto_endpoint, "moto", False)
    monkeypatch.setenv("SQS_EMULATOR", "moto")
    assert emulators.ensure().endpoint == moto_endpoint


def test_an_endpoint_that_is_not_the_chosen_emulator_is_refused(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("SQS_EMULATOR", "localstack")
    with pytest.raises(
        emulators.EmulatorError, match=re.escape(f"SQS_EMULATOR=localstack but AWS_ENDPOINT_URL={moto_endpoint}")
    ):
        emulators.ensure()


def test_an_endpoint_that_answers_as_no_emulator_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nothing = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", nothing)
    monkeypatch.setattr(emulators, "wait_identified", lambda endpoint, service, timeout: emulators.identify(endpoint))
    with pytest.raises(emulators.EmulatorError, match=r"answers neither as LocalStack .* nor as moto's server"):
        emulators.ensure()


def command(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`python -m sqs_worker_engine.doubles.emulators ...` as a project's Makefile runs it (in its directory)."""
    return subprocess.run(
        [sys.executable, "-m", "sqs_worker_engine.doubles.emulators", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def machine_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No endpoint named, no Docker, the state files in a temporary directory of the test's own."""
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_ENDPOINT_URL", "SQS_EMULATOR", "LOCALSTACK_PORT")}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env.update(TMPDIR=str(tmp_path / "tmp"), LOCALSTACK_NO_DOCKER="1", **extra)
    return env


def projects(tmp_path: Path, *names: str) -> list[Path]:
    made = [tmp_path / name for name in names]
    for path in made:
        path.mkdir()
    return made


def test_start_keeps_one_moto_server_that_a_second_start_finds_and_stop_ends(tmp_path: Path) -> None:
    """`make dev` twice reuses the server the first left running; `make localstack-stop` ends it."""
    env = machine_env(tmp_path, SQS_EMULATOR="moto")
    (project,) = projects(tmp_path, "service")

    def run(*args: str) -> str:
        done = command(*args, cwd=project, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    endpoint = run("start")
    try:
        assert emulators.identify(endpoint) == "moto"
        assert run("start") == endpoint, "the running one is found, not a second started"
    finally:
        run("stop")
    assert emulators.identify(endpoint, timeout=1) is None, "stop ended it"


def test_localstack_starts_on_its_port_and_stop_stops_only_what_this_project_started(tmp_path: Path) -> None:
    """One project starts LocalStack on LOCALSTACK_PORT; another finds it answering there and
    says so in one line; the other's `stop` leaves it running, its own `stop` ends it. The
    machine's own emulator on 4566, if any, is never touched."""
    port = emulators.free_port()
    url = emulators.local_url(port)
    env = machine_env(tmp_path, LOCALSTACK_PORT=str(port))
    owner, other = projects(tmp_path, "owner", "other")
    # A generous timeout: a busy machine's LocalStack can take seconds to answer its health check.
    shared_before = emulators.identify(emulators.DEFAULT_URL, timeout=30)

    started = command("start", cwd=owner, env=env)
    try:
        assert started.returncode == 0, started.stderr
        assert started.stdout.strip() == url
        sqs = boto3.client("sqs", endpoint_url=url, region_name="us-east-1")
        queue = sqs.create_queue(QueueName="on-its-port")["QueueUrl"]  # the runtime's Python makes queues
        sqs.send_message(QueueUrl=queue, MessageBody="hello")

        found = command("start", cwd=other, env=env)
        assert (found.returncode, found.stdout.strip()) == (0, url), found.stderr
        (said,) = found.stderr.splitlines()
        assert said.startswith(f"LocalStack already answers at {url}, not started by this project"), said
        left = command("stop", cwd=other, env=env)
        assert left.returncode == 0 and "started no emulator on port" in left.stderr, left.stderr
        assert emulators.healthy(url), "another project's stop stopped it"

        again = command("start", cwd=owner, env=env)
        assert again.stdout.strip() == url and "started earlier for this project" in again.stderr, again.stderr
    finally:
        stopped = command("stop", cwd=owner, env=env)
    assert stopped.returncode == 0 and f"stopped LocalStack at {url}" in stopped.stderr, stopped.stderr
    assert emulators.identify(url, timeout=1) is None and emulators.free_port(port) == port, "its stop ended it"
    assert emulators.identify(emulators.DEFAULT_URL, timeout=30) == shared_before, "the machine's 4566 is as it was"
    assert not list((tmp_path / "tmp").glob("sqs-worker-emulator-*.json")), "no state left behind"


def localstacks_on(port: int) -> list[int]:
    """The LocalStack runtimes of this machine started for `port` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"localstack.runtime.main" in command and f"GATEWAY_LISTEN=127.0.0.1:{port}".encode() in environ:
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads the processes' environments from /proc")
def test_a_start_that_loses_the_race_for_its_port_stops_its_own_and_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two projects start at once on one port: both find it free, and the one that binds second
    still says "Ready." while the first answers on the port. It must not take the first's
    endpoint for its own (its queues would go into the other project's emulator): it stops its
    own and refuses, and keeps no state."""
    monkeypatch.setenv("LOCALSTACK_NO_DOCKER", "1")
    port = emulators.free_port()
    first = emulators.start_host(port)
    try:
        with pytest.raises(emulators.PortTakenError):
            emulators.start_host(port)
        assert localstacks_on(port) == [first.pid], "the loser's runtime is gone"

        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        monkeypatch.setenv("LOCALSTACK_PORT", str(port))
        monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
        monkeypatch.delenv("SQS_EMULATOR", raising=False)
        # As both saw it: nothing answering yet, the port free.
        monkeypatch.setattr(emulators, "identify", lambda *args, **kwargs: None)
        monkeypatch.setattr(emulators, "port_free", lambda port: True)
        with pytest.raises(emulators.EmulatorError, match=rf"another process took port {port} while LocalStack"):
            emulators.start()
        assert not emulators.state_file(port).exists(), "nothing kept for a stop to find"
        assert localstacks_on(port) == [first.pid]
        assert emulators.healthy(first.endpoint), "the winner serves on"
    finally:
        first.stop()


def test_a_localstack_on_the_default_port_without_a_needed_service_is_passed_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A LocalStack left running with SERVICES=sqs answers on its port; a suite that needs
    CloudFormation too must not take it (its deploy tests would fail with "Service
    'cloudformation' is not enabled"), but start one of its own beside it."""
    import http.server
    import json
    import threading

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"services": {"sqs": "running", "cloudformation": "disabled"}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        started: list[tuple[str, int]] = []
        monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
        monkeypatch.delenv("SQS_EMULATOR", raising=False)
        monkeypatch.setenv("LOCALSTACK_PORT", str(server.server_address[1]))
        monkeypatch.setattr(emulators, "docker_available", lambda: False)

        def start_private(services: str, timeout: float, port: int) -> emulators.Emulator:
            started.append((services, port))
            return emulators.Emulator("http://127.0.0.1:1", "host")

        monkeypatch.setattr(emulators, "start_private", start_private)
        assert emulators.ensure(services="sqs").endpoint == endpoint  # all it needs is there
        emulators.ensure(services="sqs,cloudformation")
        # One of its own: start_private takes a free port when that one is taken.
        assert [services for services, _port in started] == ["sqs,cloudformation"]
    finally:
        server.shutdown()


def test_a_port_held_by_something_else_is_refused_naming_localstack_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not an emulator (no LocalStack health, no moto API), and still not one after a moment
    in which one that is starting would have answered: no start, no state, the variable named."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        monkeypatch.setenv("LOCALSTACK_PORT", str(port))
        monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
        monkeypatch.delenv("SQS_EMULATOR", raising=False)
        with pytest.raises(emulators.EmulatorError, match=rf"port {port} on 127.0.0.1 is taken .* LOCALSTACK_PORT="):
            emulators.start()
    assert not emulators.state_file(port).exists()
