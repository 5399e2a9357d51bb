"""The README's first command: scaffold a service and run it end to end (what a new user
sees first), against the suite's LocalStack."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import ROOT, run


def test_demo_scaffolds_processes_and_drains(tmp_path: Path, localstack_endpoint: str) -> None:
    demo = run(
        [sys.executable, str(ROOT / "scripts" / "demo.py"), "--output", str(tmp_path / "demo"), "--messages", "8"],
        ROOT,
        timeout=600,
        AWS_ENDPOINT_URL=localstack_endpoint,
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
    assert "demo OK" in output
