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
