"""The README's first command: scaffold a service and run it end to end (what a new user
sees first), against the suite's LocalStack, and against moto's server that the demo starts
itself when SQS_EMULATOR=moto."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, tool_env
from sqs_worker_engine.doubles import emulators


@pytest.mark.parametrize("emulator", ["localstack", "moto"])
def test_demo_scaffolds_processes_and_drains(tmp_path: Path, localstack_endpoint: str, emulator: str) -> None:
    env = tool_env(AWS_ENDPOINT_URL=localstack_endpoint)
    if emulator == "moto":
        del env["AWS_ENDPOINT_URL"]  # the demo finds nothing, and starts moto's server
        env["SQS_EMULATOR"] = "moto"
    # A new user's machine: no AWS credentials or configuration at all.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        env.pop(name, None)
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp_path / "no-aws-config")
    # Both demos may run at once, and each would serve /metrics on the default port: one
    # would refuse to start. The demo scrapes the port the worker's settings name.
    env["WORKER_METRICS_PORT"] = str(emulators.free_port())
    demo = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py"), "--output", str(tmp_path / "demo"), "--messages", "8"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = demo.stdout + demo.stderr
    assert demo.returncode == 0, output[-4000:]
    assert output.count("task done") == 8 + 6, "every message was processed once"
    assert "SIGTERM received: draining" in output and "worker stopped" in output
    assert "worker exited with code 0; 6 of 6 running jobs finished during the drain" in output
    assert "0 visible, 0 in flight" in output
    assert 'jobs_processed_total{outcome="success",queue="orders-worker-jobs"} 8.0' in output, (
        "the /metrics scrape is shown"
    )
    assert f"curl http://127.0.0.1:{env['WORKER_METRICS_PORT']}/metrics" in output
    assert "demo OK" in output
    if emulator == "moto":
        assert "moto's server (host) at" in output and "stopping what this demo started: moto's server" in output
