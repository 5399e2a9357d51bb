"""Bake answer sets of tests/matrix.py and run each generated project's own checks, as its
owner would, uv.lock written at bake time:

- the end-to-end sets (`end_to_end()`: the "full" sets and the covering set, which holds
  every pair of answer values; with FULL, every set the bakes can lock): the whole
  `make test` (ruff, formatting, strict mypy, the handler tests and the end-to-end test
  against LocalStack), the start-up heap probe and `make build`'s refusal; for "full" sets
  `make simulate` too, and for the defaults pre-commit (its configuration is the same in
  every bake);
- the last covering set's `make test` against moto's server (SQS_EMULATOR=moto), the
  emulator no vendor can take away, in place of LocalStack;
- the "checked" sets: ruff, formatting, strict mypy and the handler tests;
- every set the bakes do not lock ("artifacts", "rendered"): ruff, formatting and strict
  mypy in one shared environment that has every optional dependency.

Also: the service holds only what its owner writes, none of the engine. Every bake starts
from its Python's shared mypy cache (conftest's `seed_mypy_cache`)."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import time
from pathlib import Path

import boto3
import pytest
import yaml
from conftest import MYPY_SEEDS, ROOT, bake, run, seed_mypy_cache, share_mypy_cache
from matrix import COOKIECUTTER, COVERING, SUPPORTED, end_to_end, names
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
    return {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?)", summary[-1])}


# The project's pytest lists each test it passed (`-rA`), so a run shows what it ran.
ALL_REPORTED = {"PYTEST_ADDOPTS": "-rA"}
# The covering set's last row runs against moto's server instead (its pairs still run end to end).
ON_MOTO = list(COVERING)[-1]
ON_LOCALSTACK = [name for name in end_to_end() if name != ON_MOTO]


def baked_and_locked(name: str, tmp_path: Path) -> tuple[Path, Path]:
    """A supported or covering set, baked with its uv.lock and its Python's warm mypy cache;
    the project and its package. The service holds only its own modules."""
    project = bake(tmp_path, lock=True, **(SUPPORTED | COVERING)[name].answers)
    assert (project / "uv.lock").is_file(), "the post-generation hook locks the dependencies"
    lock = (project / "uv.lock").read_text()
    assert 'name = "sqs-worker-engine"' in lock, "uv.lock records which engine the service runs"
    (package,) = [p for p in (project / "src").iterdir() if p.is_dir()]
    modules = {p.name for p in package.rglob("*") if p.is_file()}
    assert modules <= SERVICE_MODULES, f"engine code copied into the service: {sorted(modules - SERVICE_MODULES)}"
    seed_mypy_cache(project)
    return project, package


def passed_all_it_ran(output: str, integration: bool) -> dict[str, int]:
    """The counts of a run of the project's tests (with PASSED lines: `ALL_REPORTED`): every
    test passed, none failed or skipped; the handler tests ran, and the end-to-end test ran
    when `integration` is on and was the only one left out when it is off."""
    counts = pytest_summary(output)
    assert counts.get("passed") and not counts.get("failed") and not counts.get("skipped"), counts
    assert not counts.get("error") and not counts.get("errors"), counts
    passed = re.findall(r"^PASSED (tests/\S+)", output, re.MULTILINE)
    assert len(passed) == counts["passed"], f"{counts}, yet {len(passed)} PASSED lines"
    assert any(p.startswith("tests/test_handlers.py::") for p in passed), "the handlers have unit tests"
    end_to_end = [p for p in passed if p.startswith("tests/test_end_to_end.py::")]
    if integration:
        assert end_to_end and not counts.get("deselected"), f"the end-to-end test did not run: {counts}"
    else:
        assert not end_to_end and counts.get("deselected") == 1, f"more than the end-to-end test left out: {counts}"
    return counts


def record(name: str, depth: str, counts: dict[str, int], package: Path, seconds: float) -> None:
    lines = sum(len(p.read_text().splitlines()) for p in package.rglob("*.py"))
    REPORT.parent.mkdir(exist_ok=True)
    with REPORT.open("a") as handle:
        entry = {"combination": name, "depth": depth, "tests": counts, "src_lines": lines, "seconds": round(seconds)}
        handle.write(json.dumps(entry) + "\n")


@pytest.mark.parametrize("name", ON_LOCALSTACK)
def test_generated_project_passes_its_whole_make_test(name: str, tmp_path: Path, localstack_endpoint: str) -> None:
    combo = (SUPPORTED | COVERING)[name]
    project, package = baked_and_locked(name, tmp_path)
    started = time.monotonic()
    result = run(["make", "test"], project, timeout=1500, AWS_ENDPOINT_URL=localstack_endpoint, **ALL_REPORTED)
    seconds = time.monotonic() - started
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"`make test` failed for {name}:\n{output[-6000:]}"
    counts = passed_all_it_ran(output, integration=True)
    share_mypy_cache(project)

    if combo.depth == "full" and name in SUPPORTED:
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

    # A separate, explicit statement of what `make lint` already enforces, with a clear message.
    fmt = run(["uv", "run", "--quiet", "ruff", "format", "--diff", "."], project)
    assert fmt.returncode == 0, f"formatting changes the generated code:\n{fmt.stdout[-3000:]}"

    if name == "defaults":
        assert_pre_commit_runs_the_makefiles_checks(project, package, tmp_path)
    if name == FIFO_SEND:
        assert_make_send_groups_a_fifo_queues_messages(project, package.name, localstack_endpoint)
    record(name, combo.depth, counts, package, seconds)


@pytest.mark.parametrize("name", names("checked"))
def test_a_checked_set_lints_type_checks_and_passes_its_handler_tests(name: str, tmp_path: Path) -> None:
    """Ruff, formatting, strict mypy and the handler tests (no LocalStack) in the set's own
    environment: `make check` runs the first of these."""
    project, package = baked_and_locked(name, tmp_path)
    started = time.monotonic()
    result = run(["make", "lint", "typecheck", "test-unit"], project, timeout=900, **ALL_REPORTED)
    seconds = time.monotonic() - started
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"`make lint typecheck test-unit` failed for {name}:\n{output[-6000:]}"
    counts = passed_all_it_ran(output, integration=False)
    share_mypy_cache(project)
    fmt = run(["uv", "run", "--quiet", "ruff", "format", "--diff", "."], project)
    assert fmt.returncode == 0, f"formatting changes the generated code:\n{fmt.stdout[-3000:]}"
    record(name, "checked", counts, package, seconds)


# Every optional dependency a service can have, in one environment: what the sets the bakes do
# not lock are linted and type-checked in.
WITH_EVERY_DEPENDENCY = {"project_name": "Shared Tools", "use_idempotency": "yes", "tracing": "yes"}


@pytest.fixture(scope="module")
def shared_tools(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The environment of a bake with every optional dependency (its ruff and mypy at the
    versions its uv.lock pins), and a mypy cache for the sets checked in it, seeded with each
    Python's shared one."""
    project = bake(tmp_path_factory.mktemp("shared-tools"), lock=True, **WITH_EVERY_DEPENDENCY)
    installed = run(["make", "install"], project, timeout=900)
    assert installed.returncode == 0, (installed.stdout + installed.stderr)[-3000:]
    cache = tmp_path_factory.mktemp("shared-mypy-cache")
    for version in COOKIECUTTER["python_version"]:
        with contextlib.suppress(FileNotFoundError, shutil.Error):
            shutil.copytree(MYPY_SEEDS / version, cache, dirs_exist_ok=True)
    return project / ".venv" / "bin", cache


@pytest.mark.xdist_group("shared-tools")  # one environment and one mypy cache, written by one test at a time
@pytest.mark.parametrize("name", names("artifacts", "rendered"))
def test_a_set_the_bakes_do_not_lock_lints_and_type_checks(
    name: str, projects: dict[str, Path], shared_tools: tuple[Path, Path]
) -> None:
    """Ruff, formatting and strict mypy, with the set's own configuration, in the shared
    environment: the bake itself is left as rendered (no caches written into it), for the
    artifact tests that share it."""
    tools, cache = shared_tools
    project = projects[name]
    for step in (
        [str(tools / "ruff"), "check", "--no-cache", "."],
        [str(tools / "ruff"), "format", "--check", "--no-cache", "."],
        [str(tools / "mypy"), "--cache-dir", str(cache)],
    ):
        result = run(step, project, timeout=600)
        assert result.returncode == 0, (
            f"{Path(step[0]).name} failed for {name}:\n{(result.stdout + result.stderr)[-4000:]}"
        )
    assert not (project / ".mypy_cache").exists() and not (project / ".ruff_cache").exists(), "a cache in the bake"


# The "full" set with a FIFO queue: its `make send` runs as its owner's second terminal would.
FIFO_SEND = "eks-py313-fifo"
# `make send` reaches the emulator as account `test`, as `make dev` does: in a region no other
# test uses, as LocalStack keeps each region's queues apart, its queue is this test's own.
SEND_REGION = "ap-southeast-5"


def assert_make_send_groups_a_fifo_queues_messages(project: Path, package: str, endpoint: str) -> None:
    """`make send` on a FIFO queue, as the README gives it: the payload model's examples in the
    message group `make-send`, or in the group SEND_ARGS names (`send` itself refuses to guess
    one, against AWS)."""
    queue = SUPPORTED[FIFO_SEND].answers["queue_name"]
    assert queue.endswith(".fifo"), queue
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_REGION": SEND_REGION, "AWS_DEFAULT_REGION": SEND_REGION}
    sqs = boto3.client("sqs", endpoint_url=endpoint, region_name=SEND_REGION)
    try:
        made = run(["uv", "run", "--quiet", "python", "-m", package, "bootstrap"], project, **env)
        assert made.returncode == 0, made.stdout + made.stderr
        examples = run(["make", "--no-print-directory", "send"], project, **env)
        assert f"sent 2 message(s) to {queue}" in examples.stdout, examples.stdout + examples.stderr
        named = run(["make", "send", 'BODY={"task_id": "t-9"}', "SEND_ARGS=--group=customer-7"], project, **env)
        assert f"sent 1 message(s) to {queue}" in named.stdout, named.stdout + named.stderr
        url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
        groups: dict[str, list[str]] = {}
        for _ in range(10):
            got = sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, MessageSystemAttributeNames=["MessageGroupId"]
            )
            for message in got.get("Messages", []):
                group = message["Attributes"]["MessageGroupId"]
                groups.setdefault(group, []).append(json.loads(message["Body"])["task_id"])
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            if sum(map(len, groups.values())) >= 3:
                break
        assert groups == {"make-send": ["example-1", "example-2"], "customer-7": ["t-9"]}, groups
    finally:
        for name in (queue, queue.removesuffix(".fifo") + "-dlq.fifo"):
            with contextlib.suppress(Exception):
                sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=name)["QueueUrl"])


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


def test_a_covering_set_passes_make_test_against_motos_server(tmp_path: Path) -> None:
    """`SQS_EMULATOR=moto make test` on the covering set's last row: the end-to-end test on
    moto's server, in place of LocalStack (so the row's pairs still run end to end). The
    server is this test's own, named by AWS_ENDPOINT_URL, so that its log shows the test's
    requests reached it (a bake that ignored the switch would find the suite's LocalStack
    and pass without touching moto)."""
    project, _ = baked_and_locked(ON_MOTO, tmp_path)
    moto = emulators.start_moto()
    try:
        result = run(
            ["make", "test"], project, timeout=1500, SQS_EMULATOR="moto", AWS_ENDPOINT_URL=moto.endpoint, **ALL_REPORTED
        )
        served = Path(moto.log_path or "").read_text(errors="replace")
    finally:
        moto.stop()
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"`make test` against moto's server failed:\n{output[-6000:]}"
    passed_all_it_ran(output, integration=True)
    requests = served.count('"POST / HTTP/1.1" 200')
    assert requests > 20, f"the end-to-end test never reached moto's server ({requests} requests):\n{served[-2000:]}"
