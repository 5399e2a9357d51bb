"""Bake the template for a curated set of answer combinations and run each generated
project's own checks: nothing left unrendered, ruff clean, formatting stable, mypy clean,
and its `make test` (unit and integration tests against LocalStack) green."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from conftest import ROOT, bake, run

LONG_SLUG = "a" + "-bcde" * 12 + "-x"  # 63 characters: the most a Kubernetes name allows

COMBINATIONS: dict[str, dict[str, str]] = {
    # The defaults: what `cookiecutter --no-input` gives.
    "defaults": {},
    # ECS only, the oldest supported Python, snake_case queue, small non-default numbers.
    "ecs-py311": {
        "deploy_target": "ecs",
        "python_version": "3.11",
        "queue_name": "billing_events",
        "worker_concurrency": "3",
        "visibility_timeout_seconds": "7",
        "job_timeout_seconds": "20",
        "shutdown_timeout_seconds": "45",
        "max_receive_count": "2",
        "metrics_port": "9555",
        "aws_region": "eu-west-2",
    },
    # EKS only, the newest Python, a FIFO queue, long jobs beyond ECS's stopTimeout cap.
    "eks-py313-fifo": {
        "deploy_target": "eks",
        "python_version": "3.13",
        "project_name": "X9 Ledger Sync",
        "queue_name": "ledger-updates.fifo",
        "worker_concurrency": "25",
        "job_timeout_seconds": "500",
        "shutdown_timeout_seconds": "600",
        "max_receive_count": "10",
    },
    # Idempotency on, and names at their length limits.
    "idempotency-long-names": {
        "use_idempotency": "yes",
        "project_name": "Edge",
        "project_slug": LONG_SLUG,
        "package_name": LONG_SLUG.replace("-", "_")[:50],
        "queue_name": "q" * 76,
        "description": 'Quotes " and \\ backslashes & <angles> survive rendering',
        "author_name": "O'Brien & Søren",
    },
}
UNRENDERED = re.compile(r"\{\{\s*cookiecutter|\{%[^%]*cookiecutter|cookiecutter\.\w+\s*\}\}")
REPORT = ROOT / ".test-reports" / "bakes.jsonl"


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_generated_project_passes_its_own_checks(name: str, tmp_path: Path, localstack_endpoint: str) -> None:
    answers = COMBINATIONS[name]
    project = bake(tmp_path, lock=True, **answers)
    assert (project / "uv.lock").is_file(), "the post-generation hook locks the dependencies"

    leftovers = [
        str(path.relative_to(project))
        for path in project.rglob("*")
        if path.is_file() and UNRENDERED.search(path.read_text(errors="ignore"))
    ]
    assert not leftovers, f"unrendered template text in {leftovers}"
    assert not [p for p in project.rglob("*") if p.is_dir() and not any(p.iterdir())], "empty directories left"

    started = time.monotonic()
    test = run(["make", "test"], project, timeout=1500, AWS_ENDPOINT_URL=localstack_endpoint)
    seconds = time.monotonic() - started
    output = test.stdout + test.stderr
    assert test.returncode == 0, f"`make test` failed for {name}:\n{output[-6000:]}"
    summary = re.findall(r"=+ (.*(?:passed|failed).*) in [\d.]+s", output)
    assert summary, output[-3000:]
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|error)", summary[-1])}
    assert counts.get("passed", 0) >= 60 and not counts.get("skipped") and not counts.get("failed"), summary[-1]

    # Separate, explicit statements of what `make test` already enforces, with clear messages.
    fmt = run(["uv", "run", "--quiet", "ruff", "format", "--diff", "."], project)
    assert fmt.returncode == 0, f"formatting changes the generated code:\n{fmt.stdout[-3000:]}"
    integration = run(["uv", "run", "--quiet", "pytest", "--collect-only", "-q", "-m", "integration"], project)
    collected = re.search(r"(\d+)(?:/\d+)? tests? (?:collected|selected)", integration.stdout)
    assert collected and int(collected.group(1)) >= 30, integration.stdout[-2000:]

    REPORT.parent.mkdir(exist_ok=True)
    with REPORT.open("a") as handle:
        record = {
            "combination": name,
            "tests": counts,
            "integration_tests": int(collected.group(1)),
            "seconds": round(seconds),
        }
        handle.write(json.dumps(record) + "\n")
