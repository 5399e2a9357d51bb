"""Bake the answer sets tests/matrix.py marks "full" or "checked" and run each generated
project's own checks, as its owner would: uv.lock written at bake time, ruff clean,
formatting stable, strict mypy clean, its handler tests green; for "full" sets the whole
`make test`, whose end-to-end test runs the service against LocalStack; and the defaults'
`make test` against moto's server (SQS_EMULATOR=moto), the emulator no vendor can take away.

Also: the service holds only what its owner writes, none of the engine."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, bake, run
from matrix import SUPPORTED, names
from sqs_worker_engine.doubles import emulators

REPORT = ROOT / ".test-reports" / "bakes.jsonl"
# What a service's src/ may hold: its own modules. The engine comes as a dependency.
SERVICE_MODULES = {"__init__.py", "__main__.py", "service.py", "handlers.py", "idempotency.py"}
HEAP_PROBE = (
    "import gc\n"
    "from sqs_worker_engine.process.host import heap\n"
    "gc.collect()  # on 3.12, it moves every immortal object it meets to the permanent generation\n"
    "print(heap.hold().frozen)\n"
)


def pytest_summary(output: str) -> dict[str, int]:
    summary = re.findall(r"=+ (.*(?:passed|failed|error).*) in [\d.]+s", output)
    assert summary, output[-3000:]
    return {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|errors?)", summary[-1])}


@pytest.mark.parametrize("name", names("full", "checked"))
def test_generated_project_passes_its_own_checks(name: str, tmp_path: Path, localstack_endpoint: str) -> None:
    combo = SUPPORTED[name]
    project = bake(tmp_path, lock=True, **combo.answers)
    assert (project / "uv.lock").is_file(), "the post-generation hook locks the dependencies"
    lock = (project / "uv.lock").read_text()
    assert 'name = "sqs-worker-engine"' in lock, "uv.lock records which engine the service runs"

    (package,) = [p for p in (project / "src").iterdir() if p.is_dir()]
    modules = {p.name for p in package.rglob("*") if p.is_file()}
    assert modules <= SERVICE_MODULES, f"engine code copied into the service: {sorted(modules - SERVICE_MODULES)}"
    lines = sum(len(p.read_text().splitlines()) for p in package.rglob("*.py"))

    started = time.monotonic()
    target = ["test"] if combo.depth == "full" else ["lint", "typecheck", "test-unit"]
    result = run(["make", *target], project, timeout=1500, AWS_ENDPOINT_URL=localstack_endpoint)
    seconds = time.monotonic() - started
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"`make {' '.join(target)}` failed for {name}:\n{output[-6000:]}"
    counts = pytest_summary(output)
    assert counts.get("passed") and not counts.get("failed") and not counts.get("skipped"), counts
    collected = run(["uv", "run", "--quiet", "pytest", "--collect-only", "-q"], project).stdout.splitlines()
    ids = [line for line in collected if "::" in line]
    assert any(i.startswith("tests/test_handlers.py::") for i in ids), "the handlers have unit tests"
    end_to_end = [i for i in ids if i.startswith("tests/test_end_to_end.py::")]
    assert end_to_end, "the service has its end-to-end test"
    expected = len(ids) if combo.depth == "full" else len(ids) - len(end_to_end)
    assert counts["passed"] == expected, f"{counts} of {len(ids)} collected ({len(end_to_end)} end-to-end)"

    if combo.depth == "full":
        # `make simulate` on the service's own deploy files, in the environment `make test` made.
        simulated = run(["make", "simulate", "SIMULATE_ARGS=--shapes drip --no-oracle"], project, timeout=600)
        assert simulated.returncode == 0, (simulated.stdout + simulated.stderr)[-3000:]
        report = json.loads((project / "simulation" / "report.json").read_text())
        drip = report["shapes"]["drip"]
        assert drip["messages_lost"] == 0 and drip["unfinished"] == 0, drip
        assert {"duplicate_runs", "p99_oldest_age_seconds", "replica_minutes", "sqs_requests", "cost"} <= set(drip)
        assert (project / "simulation" / "report.md").is_file() and (project / "simulation" / "drip.png").is_file()

    # On the interpreter the service runs, the worker keeps its start-up heap out of the
    # collector's full passes (engine: process/host/heap.py). CPython 3.12's collector parks
    # immortal objects in the permanent generation, which the worker once read as a heap
    # frozen by its owner: on 3.12, the template's default, it froze nothing.
    probe = run(["uv", "run", "--quiet", "python", "-c", HEAP_PROBE], project)
    assert probe.stdout.split() == ["True"], f"the start-up heap was not frozen: {probe.stdout}{probe.stderr}"

    # Baked from this checkout, the engine comes by path: an image build says why it cannot work.
    build = run(["make", "build"], project)
    assert build.returncode != 0 and "cannot see" in build.stdout, build.stdout + build.stderr

    # Separate, explicit statements of what `make lint` already enforces, with clear messages.
    fmt = run(["uv", "run", "--quiet", "ruff", "format", "--diff", "."], project)
    assert fmt.returncode == 0, f"formatting changes the generated code:\n{fmt.stdout[-3000:]}"

    if combo.depth == "full":
        assert_pre_commit_runs_the_makefiles_checks(project, package, tmp_path)

    REPORT.parent.mkdir(exist_ok=True)
    with REPORT.open("a") as handle:
        record = {
            "combination": name,
            "depth": combo.depth,
            "tests": counts,
            "src_lines": lines,
            "seconds": round(seconds),
        }
        handle.write(json.dumps(record) + "\n")


def assert_pre_commit_runs_the_makefiles_checks(project: Path, package: Path, tmp_path: Path) -> None:
    """`.pre-commit-config.yaml`: valid for pre-commit itself; its hooks are the Makefile's
    `lint` and `typecheck`, so they run the ruff and mypy uv.lock pins (never a copy at
    another version); and they pass on the bake and catch what `make lint` catches."""
    config = yaml.safe_load((project / ".pre-commit-config.yaml").read_text())
    hooks = [(repo["repo"], hook["entry"]) for repo in config["repos"] for hook in repo["hooks"]]
    assert hooks == [("local", "make --no-print-directory lint"), ("local", "make --no-print-directory typecheck")]
    env = {"PRE_COMMIT_HOME": str(tmp_path / "pre-commit")}
    valid = run(["uv", "run", "--quiet", "pre-commit", "validate-config"], project, **env)
    assert valid.returncode == 0, valid.stdout + valid.stderr
    assert run(["git", "init", "-q"], project).returncode == 0
    assert run(["git", "add", "-A"], project).returncode == 0
    passed = run(["uv", "run", "--quiet", "pre-commit", "run", "--all-files"], project, **env)
    assert passed.returncode == 0 and "Passed" in passed.stdout, passed.stdout + passed.stderr
    unused = package / "unused_import.py"
    unused.write_text("import os\n")
    assert run(["git", "add", "-A"], project).returncode == 0
    caught = run(["uv", "run", "--quiet", "pre-commit", "run", "--all-files"], project, **env)
    unused.unlink()
    assert caught.returncode != 0 and "F401" in caught.stdout, caught.stdout + caught.stderr


def test_a_fresh_bake_passes_make_test_against_motos_server(tmp_path: Path) -> None:
    """`SQS_EMULATOR=moto make test` on a default bake: the end-to-end test on moto's server.
    The server is this test's own, named by AWS_ENDPOINT_URL, so that its log shows the
    test's requests reached it (a bake that ignored the switch would find the suite's
    LocalStack and pass without touching moto)."""
    project = bake(tmp_path, lock=True)
    moto = emulators.start_moto()
    try:
        result = run(["make", "test"], project, timeout=1500, SQS_EMULATOR="moto", AWS_ENDPOINT_URL=moto.endpoint)
        served = Path(moto.log_path or "").read_text(errors="replace")
    finally:
        moto.stop()
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"`make test` against moto's server failed:\n{output[-6000:]}"
    counts = pytest_summary(output)
    assert counts.get("passed") and not counts.get("failed") and not counts.get("skipped"), counts
    assert not counts.get("error") and not counts.get("errors"), counts
    requests = served.count('"POST / HTTP/1.1" 200')
    assert requests > 20, f"the end-to-end test never reached moto's server ({requests} requests):\n{served[-2000:]}"
