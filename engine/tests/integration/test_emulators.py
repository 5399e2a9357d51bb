"""Finding and starting the SQS emulator: SQS_EMULATOR chooses, AWS_ENDPOINT_URL is used as
the emulator it is, and `start` / `stop` keep one running for `make dev` (moto's server here:
it starts in a second; LocalStack's path is what every other integration test goes through)."""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sqs_worker_engine import emulators


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
    monkeypatch.setattr(emulators, "_wait_identified", lambda endpoint, service, timeout: emulators.identify(endpoint))
    with pytest.raises(emulators.EmulatorError, match=r"answers neither as LocalStack .* nor as moto's server"):
        emulators.ensure()


def test_start_keeps_one_moto_server_that_a_second_start_finds_and_stop_ends(tmp_path: Path) -> None:
    """`make dev` twice reuses the server the first left running; `make localstack-stop` ends it."""
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    env.update(SQS_EMULATOR="moto", TMPDIR=str(tmp_path))  # the state file goes in TMPDIR

    def command(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "sqs_worker_engine.localstack", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    endpoint = command("start")
    try:
        assert emulators.identify(endpoint) == "moto"
        assert command("start") == endpoint, "the running one is found, not a second started"
    finally:
        command("stop")
    assert emulators.identify(endpoint, timeout=1) is None, "stop ended it"


def test_a_localstack_on_the_default_port_without_a_needed_service_is_passed_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A LocalStack left running with SERVICES=sqs answers on 4566; a suite that needs
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
        monkeypatch.setattr(emulators, "DEFAULT_URL", endpoint)
        monkeypatch.setattr(emulators, "_docker_available", lambda: False)

        def start_private(services: str, timeout: float, port: int) -> emulators.Emulator:
            started.append((services, port))
            return emulators.Emulator("http://127.0.0.1:1", "host")

        monkeypatch.setattr(emulators, "start_private", start_private)
        assert emulators.ensure(services="sqs").endpoint == endpoint  # all it needs is there
        emulators.ensure(services="sqs,cloudformation")
        # One of its own: start_private takes the next free port when 4566 is taken.
        assert [services for services, _port in started] == ["sqs,cloudformation"]
    finally:
        server.shutdown()
