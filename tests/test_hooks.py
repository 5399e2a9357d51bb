"""The generation hooks: bad answers are refused before anything is written, and a
generated project carries no leftovers (empty directories, unwanted optional modules).

Cookiecutter runs as a subprocess, as a person would run it, so the hooks' own output is
what is asserted on. Choice variables are checked through a replay file: cookiecutter
itself rejects an unknown choice given on the command line, but a replay file reaches
the hook unchecked, and so do values that the command line would render as Jinja.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import bake_cli, cookiecutter_cli
from cookiecutter.environment import StrictEnvironment
from matrix import COOKIECUTTER, ECS_MAX_SHUTDOWN, PINNED, UNSUPPORTED, Refusal

from sqs_worker_template_jinja.checkout import engine_version, git
from sqs_worker_template_jinja.extension import EngineExtension
from sqs_worker_template_jinja.source import INDEX_VARIABLES

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "hooks"
CONFIG: dict[str, Any] = COOKIECUTTER
HEADER = "Cannot generate the project"

# A complete, valid set of answers as they reach the hooks (choices resolved, defaults rendered).
VALID: dict[str, str] = {
    "project_name": "Orders Worker",
    "project_slug": "orders-worker",
    "package_name": "orders_worker",
    "description": "A worker service that consumes an AWS SQS queue.",
    "author_name": "Platform Team",
    "python_version": "3.12",
    "aws_region": "us-east-1",
    "queue_name": "orders-worker-jobs",
    "worker_concurrency": "8",
    "visibility_timeout_seconds": "30",
    "job_timeout_seconds": "60",
    "shutdown_timeout_seconds": "90",
    "max_receive_count": "5",
    "deploy_target": "ecs-and-eks",
    "kubernetes_workload": "deployment",
    "fifo_throughput": "standard",
    "capacity": "on-demand",
    "cpu_architecture": "x86_64",
    "eks_identity": "irsa",
    "metrics_port": "9102",
    "use_idempotency": "no",
    "untrusted_input": "no",
    "large_payloads": "no",
    "tracing": "no",
    "engine_source": "index",
    "engine_index_url": "https://packages.example.com/simple/",
}


def bake_replay(tmp_path: Path, **answers: Any) -> subprocess.CompletedProcess[str]:
    """Answers handed to the hooks verbatim: not rendered, not checked against the choices."""
    replay = tmp_path / "answers.json"
    replay.write_text(json.dumps({"cookiecutter": {**CONFIG, **VALID, **answers}}), encoding="utf-8")
    return cookiecutter_cli(tmp_path, "--replay-file", str(replay), str(ROOT))


def problem_lines(stderr: str) -> list[str]:
    """The pre-generation hook's report: the indented lines after its header."""
    lines = stderr.splitlines()
    assert any(line.startswith(HEADER) for line in lines), f"no refusal from the hook:\n{stderr}"
    start = next(i for i, line in enumerate(lines) if line.startswith(HEADER)) + 1
    report = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        report.append(line.strip())
    return report


def assert_refused(result: subprocess.CompletedProcess[str], tmp_path: Path, variable: str, fragment: str) -> str:
    assert result.returncode != 0, result.stdout + result.stderr
    report = problem_lines(result.stderr)
    assert len(report) == 1, report
    line = report[0]
    assert line.startswith(f"{variable}="), line
    assert fragment in line, line
    assert_nothing_written(tmp_path)
    return line


def assert_nothing_written(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert not out.exists() or not any(out.iterdir()), list(out.rglob("*"))


def empty_dirs(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_dir() and not any(p.iterdir())]


def refusal_id(refusal: Refusal) -> str:
    return f"{refusal.variable}={next(iter(refusal.answers.values()))!r}"[:60]


@pytest.mark.parametrize("refusal", [r for r in UNSUPPORTED if not r.replay], ids=refusal_id)
def test_bad_answer_is_refused(tmp_path: Path, refusal: Refusal) -> None:
    answers, variable, fragment = refusal.answers, refusal.variable, refusal.fragment
    line = assert_refused(bake_cli(tmp_path, **{**PINNED, **answers}), tmp_path, variable, fragment)
    typed = answers[variable].replace("{% raw %}", "").replace("{% endraw %}", "")
    shown = repr(typed)[:40]
    assert shown in line, f"the value {shown} is not named in: {line}"


def test_ecs_limit_message_says_what_to_do(tmp_path: Path) -> None:
    result = bake_cli(tmp_path, deploy_target="ecs", shutdown_timeout_seconds="300", job_timeout_seconds="240")
    line = assert_refused(result, tmp_path, "shutdown_timeout_seconds", "ECS caps stopTimeout at 120 s")
    for advice in (
        f"at most {ECS_MAX_SHUTDOWN} s",
        "choose deploy_target=eks (Kubernetes has no such cap)",
        "resumable steps that checkpoint",
        f"lower it to at most {ECS_MAX_SHUTDOWN} s with job_timeout_seconds below that (it is 240)",
    ):
        assert advice in line, line


@pytest.mark.parametrize("refusal", [r for r in UNSUPPORTED if r.replay], ids=refusal_id)
def test_bad_replayed_answer_is_refused(tmp_path: Path, refusal: Refusal) -> None:
    assert_refused(bake_replay(tmp_path, **refusal.answers), tmp_path, refusal.variable, refusal.fragment)


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    bad = {
        "project_name": "$(id)",
        "project_slug": "Bad_Slug",
        "package_name": "sys",
        "description": "a\nb",
        "author_name": "b" * 300,
        "python_version": "2.7",
        "aws_region": "mars",
        "queue_name": "has space",
        "worker_concurrency": "0",
        "visibility_timeout_seconds": "1",
        "job_timeout_seconds": "0",
        "shutdown_timeout_seconds": "abc",
        "max_receive_count": "0",
        "deploy_target": "nomad",
        "metrics_port": "22",
        "use_idempotency": "y",
        "untrusted_input": "maybe",
    }
    result = bake_replay(tmp_path, **bad)
    assert result.returncode != 0
    reported = [line.split("=", 1)[0] for line in problem_lines(result.stderr)]
    assert sorted(reported) == sorted(bad), reported
    assert_nothing_written(tmp_path)


def test_default_answers_are_accepted(tmp_path: Path) -> None:
    result = bake_cli(tmp_path)
    assert result.returncode == 0, result.stderr
    assert HEADER not in result.stderr
    assert (tmp_path / "out" / "orders-worker" / "src" / "orders_worker").is_dir()


# The hooks rendered as cookiecutter renders them, to run them against a prepared directory.
def render_hook(tmp_path: Path, name: str, answers: dict[str, Any]) -> Path:
    env = StrictEnvironment(context={"cookiecutter": answers}, keep_trailing_newline=True)
    env.add_extension(EngineExtension)  # what `_extensions` loads in a real bake
    source = (HOOKS / name).read_text(encoding="utf-8")
    rendered = tmp_path / name
    rendered.write_text(env.from_string(source).render(cookiecutter=answers), encoding="utf-8")
    return rendered


def run_hook(hook: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(hook)],
        cwd=cwd,
        env={**os.environ, "SQS_WORKER_TEMPLATE_LOCK": "0"},
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("name", ["pre_gen_project.py", "post_gen_project.py"])
def test_rendering_changes_only_the_answers_line(tmp_path: Path, name: str) -> None:
    """Jinja must see no markers in the hook's own code, or rendering would rewrite it."""
    hostile = {**VALID, "description": "'''\"\"\"\\\n{{ x }}{% y %}"}
    source = (HOOKS / name).read_text(encoding="utf-8").splitlines()
    rendered = render_hook(tmp_path, name, hostile).read_text(encoding="utf-8").splitlines()
    assert len(source) == len(rendered)
    changed = [s for s, r in zip(source, rendered, strict=True) if s != r]
    templated = [line for line in source if "{{" in line or "{%" in line]
    assert changed == templated, "only the lines that are meant to be rendered change"
    assert 'ENCODED_ANSWERS = "{{ cookiecutter | tojson | urlencode }}"' in changed
    assert all(line.split(" = ", 1)[0].isupper() for line in changed), "each rendered line is one constant"


@pytest.mark.parametrize(
    "answers",
    [
        {},
        {key: None for key in VALID},
        {key: ["a", "list"] for key in VALID},
        {key: {"a": 1} for key in VALID},
    ],
)
def test_pre_hook_reports_malformed_answers_without_traceback(tmp_path: Path, answers: dict[str, Any]) -> None:
    result = run_hook(render_hook(tmp_path, "pre_gen_project.py", answers), tmp_path)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr, result.stderr
    reported = {line.split("=", 1)[0] for line in problem_lines(result.stderr)}
    # engine_index_url may be absent or empty (a service with its engine from git needs none).
    assert reported >= set(VALID) - {"engine_index_url"}, reported


def test_pre_hook_accepts_valid_answers(tmp_path: Path) -> None:
    result = run_hook(render_hook(tmp_path, "pre_gen_project.py", {**CONFIG, **VALID}), tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def make_project(root: Path, package: str) -> None:
    for rel in (
        f"src/{package}/__init__.py",
        f"src/{package}/idempotency.py",
        "tests/test_idempotency.py",
        "tests/unit/test_x.py",
        "deploy/ecs/service.yaml",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x\n", encoding="utf-8")
    for rel in ("deploy/k8s", "a/b/c", "tests/empty"):
        (root / rel).mkdir(parents=True)


@pytest.mark.parametrize("use_idempotency", ["no", "yes"])
def test_post_hook_prunes_and_removes_optional_files(tmp_path: Path, use_idempotency: str) -> None:
    project = tmp_path / "project"
    make_project(project, "svc")
    answers = {**VALID, "package_name": "svc", "deploy_target": "ecs", "use_idempotency": use_idempotency}
    result = run_hook(render_hook(tmp_path, "post_gen_project.py", answers), project)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert project.is_dir()
    assert empty_dirs(project) == []
    for gone in ("deploy/k8s", "a", "tests/empty"):
        assert not (project / gone).exists(), gone
    for kept in ("src/svc/__init__.py", "tests/unit/test_x.py", "deploy/ecs/service.yaml"):
        assert (project / kept).is_file(), kept
    optional = ("src/svc/idempotency.py", "tests/test_idempotency.py")
    assert all((project / rel).exists() == (use_idempotency == "yes") for rel in optional)
    assert (project / ".cruft.json").is_file() == (git("rev-parse", "HEAD") is not None)
    assert "deploy/ecs/" in result.stdout
    assert "make install" in result.stdout


def test_post_hook_keeps_an_empty_project_root_and_tolerates_missing_paths(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    answers = {**VALID, "use_idempotency": "no", "deploy_target": "eks"}
    result = run_hook(render_hook(tmp_path, "post_gen_project.py", answers), project)
    assert result.returncode == 0, result.stderr
    assert project.is_dir()
    assert "make dev" in result.stdout
    assert "deploy/" not in result.stdout


def test_post_hook_never_fails_on_malformed_answers(tmp_path: Path) -> None:
    project = tmp_path / "project"
    make_project(project, "svc")
    result = run_hook(render_hook(tmp_path, "post_gen_project.py", {"package_name": ["x"]}), project)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert empty_dirs(project) == []
    assert (project / "src" / "svc" / "idempotency.py").is_file()  # only removed when "no" is explicit


def test_a_bake_without_uv_says_that_it_wrote_no_lock(tmp_path: Path) -> None:
    """A new user who has not installed uv yet is told why uv.lock is missing, and what
    writes it, instead of finding out at the first locked install."""
    project = tmp_path / "project"
    make_project(project, "svc")
    (project / "pyproject.toml").write_text('[project]\nname = "svc"\nversion = "0.1.0"\n', encoding="utf-8")
    hook = render_hook(tmp_path, "post_gen_project.py", {**VALID, "package_name": "svc"})
    no_uv = tmp_path / "bin"  # a PATH on which there is no uv
    no_uv.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "SQS_WORKER_TEMPLATE_LOCK"}
    result = subprocess.run(
        [sys.executable, str(hook)],
        cwd=project,
        env={**env, "PATH": str(no_uv)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert not (project / "uv.lock").exists()
    assert "uv is not on PATH, so no uv.lock was written" in result.stderr, result.stderr
    assert "make install" in result.stderr


# The engine from an index the bake does not name (engine_source=index, no engine_index_url).
UNNAMED = {**VALID, "package_name": "svc", "_engine_source": "index", "engine_index_url": ""}


def run_post_hook_with_uv(
    tmp_path: Path, answers: dict[str, Any], uv_exit: int, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """The post-generation hook with locking on and a stand-in uv on PATH that records its
    calls and exits `uv_exit`; the hook's output and the uv calls."""
    project = tmp_path / "project"
    make_project(project, "svc")
    (project / "pyproject.toml").write_text('[project]\nname = "svc"\nversion = "0.1.0"\n', encoding="utf-8")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "uv-calls"
    uv = bin_dir / "uv"
    uv.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\nexit {uv_exit}\n', encoding="utf-8")
    uv.chmod(0o755)
    base = {k: v for k, v in os.environ.items() if k != "SQS_WORKER_TEMPLATE_LOCK" and k not in INDEX_VARIABLES}
    result = subprocess.run(
        [sys.executable, str(render_hook(tmp_path, "post_gen_project.py", answers))],
        cwd=project,
        env={**base, "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result, calls.read_text().splitlines() if calls.exists() else []


def test_a_bake_with_no_index_named_says_how_to_name_one_before_any_step(tmp_path: Path) -> None:
    """The closing message starts with what must be published and how to name the index, and
    offers no `Next steps: make install` that the Makefile would refuse; nothing is locked,
    since uv would resolve the engine from the default index."""
    result, calls = run_post_hook_with_uv(tmp_path, UNNAMED, uv_exit=0)
    assert result.returncode == 0, result.stderr
    assert calls == [], "uv lock must not run with no index named"
    assert "Next steps:" not in result.stdout, result.stdout
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "Created orders-worker.", lines
    before = "\n".join(lines[1 : lines.index("Then:")])
    assert "no index named" in before and "anyone" in before, before
    assert f"publish sqs-worker-engine=={engine_version()}" in before, before
    assert "export UV_INDEX=engine=<its simple API URL>" in before, before
    steps = lines[lines.index("Then:") + 1 :]
    assert steps[1].strip().startswith("make lock") and steps[2].strip().startswith("make install"), steps


def test_a_bake_with_no_index_named_locks_from_the_index_the_environment_names(tmp_path: Path) -> None:
    result, calls = run_post_hook_with_uv(tmp_path, UNNAMED, uv_exit=0, UV_INDEX="engine=https://example.com/simple/")
    assert result.returncode == 0, result.stderr
    assert calls == ["lock --quiet"], calls
    assert "Next steps:" in result.stdout and "UV_INDEX=" not in result.stdout, result.stdout


def test_a_bake_naming_its_index_locks_and_says_what_to_publish_when_it_cannot(tmp_path: Path) -> None:
    named = {**UNNAMED, "engine_index_url": "https://packages.example.com/simple/"}
    result, calls = run_post_hook_with_uv(tmp_path, named, uv_exit=1)
    assert calls == ["lock --quiet"], calls
    assert "The engine comes from the index https://packages.example.com/simple/ alone" in result.stdout
    assert "UV_INDEX=" not in result.stdout and "Next steps:" not in result.stdout, result.stdout


def test_the_template_s_own_python_is_formatted_and_linted() -> None:
    """The hooks, the Jinja extension and the suite, as ruff formats and lints them (the
    generated project's files are held to its own configuration by test_bake)."""
    paths = ["hooks", "local_extensions.py", "sqs_worker_template_jinja", "scripts", "bench", "tests"]
    for command in (["ruff", "format", "--check", *paths], ["ruff", "check", *paths]):
        result = subprocess.run(
            [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_a_bake_whose_lock_found_no_interpreter_says_first_what_to_install(tmp_path: Path) -> None:
    """A bake for Python 3.14 on a machine without one: `uv lock` fails for the interpreter,
    and the closing message began `Next steps: make install`, which failed the same way."""
    project = tmp_path / "project"
    make_project(project, "svc")
    (project / "pyproject.toml").write_text('[project]\nname = "svc"\nversion = "0.1.0"\n', encoding="utf-8")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    uv = bin_dir / "uv"
    uv.write_text(
        "#!/bin/sh\necho 'error: No interpreter found for Python 3.14 in managed installations or search path' >&2\n"
        "exit 2\n",
        encoding="utf-8",
    )
    uv.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "SQS_WORKER_TEMPLATE_LOCK"}
    result = subprocess.run(
        [sys.executable, str(render_hook(tmp_path, "post_gen_project.py", {**VALID, "package_name": "svc"}))],
        cwd=project,
        env={**env, "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert "Next steps:" not in lines, result.stdout
    before = "\n".join(lines[1 : lines.index("Then:")])
    assert "No Python 3.14 was found" in before and "uv python install 3.14" in before, before
    steps = lines[lines.index("Then:") + 1 :]
    assert steps[1].strip().startswith("make lock") and steps[2].strip().startswith("make install"), steps


def test_cruft_s_renders_under_make_upgrade_print_no_next_steps(tmp_path: Path) -> None:
    """`make upgrade` asks cruft to render the template twice in directories of its own: the
    bake's closing message, with a `cd` into a temporary directory, was printed each time."""
    project = tmp_path / "project"
    make_project(project, "svc")
    env = {**os.environ, "SQS_WORKER_TEMPLATE_QUIET": "1", "SQS_WORKER_TEMPLATE_LOCK": "0"}
    result = subprocess.run(
        [sys.executable, str(render_hook(tmp_path, "post_gen_project.py", {**VALID, "package_name": "svc"}))],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout) == (0, ""), result.stdout + result.stderr
