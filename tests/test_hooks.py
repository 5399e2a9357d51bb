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
from cookiecutter.environment import StrictEnvironment

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "{{cookiecutter.project_slug}}"
HOOKS = ROOT / "hooks"
CONFIG: dict[str, Any] = json.loads((ROOT / "cookiecutter.json").read_text(encoding="utf-8"))
MARGIN = int(CONFIG["_grace_margin_seconds"])
ECS_MAX_SHUTDOWN = 120 - MARGIN
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
    "metrics_port": "9102",
    "use_idempotency": "no",
}


def cookiecutter_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run cookiecutter into tmp_path/out; replay files stay inside tmp_path, not in $HOME."""
    config = tmp_path / "cookiecutter-config.yaml"
    config.write_text(
        f"replay_dir: {json.dumps(str(tmp_path / 'replay'))}\n"
        f"cookiecutters_dir: {json.dumps(str(tmp_path / 'cookiecutters'))}\n",
        encoding="utf-8",
    )
    cmd = [sys.executable, "-m", "cookiecutter", "--config-file", str(config), "-o", str(tmp_path / "out")]
    return subprocess.run(
        [*cmd, *args],
        env={**os.environ, "SQS_WORKER_TEMPLATE_LOCK": "0"},  # locking is tested by the bakes
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=120,
        check=False,
    )


def bake_cli(tmp_path: Path, **answers: str) -> subprocess.CompletedProcess[str]:
    return cookiecutter_cli(tmp_path, "--no-input", str(ROOT), *(f"{k}={v}" for k, v in answers.items()))


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


# Answers whose defaults derive from others, pinned so one bad answer makes one problem.
PINNED = {"project_slug": "svc", "package_name": "svc", "queue_name": "jobs"}

# (answers, variable reported, fragment of the message); baked on top of PINNED.
REFUSED_ON_COMMAND_LINE: list[tuple[dict[str, str], str, str]] = [
    ({"project_name": 'a"; rm -rf /'}, "project_name", "letters A-Z a-z, digits, spaces"),
    ({"project_name": "Orders\nWorker"}, "project_name", "letters A-Z a-z"),
    ({"project_name": "$(id)"}, "project_name", "quotes, $, backticks"),
    ({"project_name": "`id` worker"}, "project_name", "letters A-Z a-z"),
    ({"project_name": "Orders: Worker"}, "project_name", "letters A-Z a-z"),
    ({"project_name": "Orders # Worker"}, "project_name", "letters A-Z a-z"),
    ({"project_name": "O'Brien Worker"}, "project_name", "letters A-Z a-z"),
    ({"project_name": "-rf"}, "project_name", "starting with a letter or digit"),
    ({"project_name": "Orders "}, "project_name", "not ending in a space"),
    ({"project_name": "   "}, "project_name", "must not be empty"),
    ({"project_name": "x" * 101}, "project_name", "at most 100 characters"),
    ({"project_slug": "Orders"}, "project_slug", "lowercase letters, digits and single hyphens"),
    ({"project_slug": "1orders"}, "project_slug", "starting with a letter"),
    ({"project_slug": "orders--worker"}, "project_slug", "single hyphens"),
    ({"project_slug": "orders-"}, "project_slug", "not ending in a hyphen"),
    ({"project_slug": "orders_worker"}, "project_slug", "DNS-1123"),
    ({"project_slug": "orders.worker"}, "project_slug", "DNS-1123"),
    ({"project_slug": "a" * 64}, "project_slug", "1-63 characters"),
    ({"package_name": "1svc"}, "package_name", "lowercase Python identifier"),
    ({"package_name": "Svc"}, "package_name", "lowercase Python identifier"),
    ({"package_name": "my-svc"}, "package_name", "lowercase Python identifier"),
    ({"package_name": "class"}, "package_name", "Python keyword"),
    ({"package_name": "p" * 51}, "package_name", "at most 50"),
    ({"package_name": "json"}, "package_name", "standard library module"),
    ({"package_name": "asyncio"}, "package_name", "standard library module"),
    ({"package_name": "boto3"}, "package_name", "would shadow the 'boto3' module"),
    ({"package_name": "pydantic_settings"}, "package_name", "would shadow"),
    ({"package_name": "aws_lambda_powertools"}, "package_name", "would shadow"),
    ({"package_name": "tests"}, "package_name", "would shadow"),
    ({"description": "two\nlines"}, "description", "one line of printable characters"),
    ({"description": "tab\there"}, "description", "printable"),
    ({"description": "d" * 201}, "description", "at most 200 characters"),
    # The command line renders answers as Jinja; raw blocks let the markers through to the files.
    ({"description": "{% raw %}{{ 7*7 }}{% endraw %}"}, "description", "must not contain template markers"),
    ({"description": "{% raw %}{% if x %}{% endraw %}"}, "description", "template markers"),
    ({"author_name": "Evil\x1b[31m Team"}, "author_name", "printable"),
    ({"author_name": "Team\u202e1 nimda"}, "author_name", "printable"),  # right-to-left override
    ({"author_name": "a" * 201}, "author_name", "at most 200 characters"),
    ({"aws_region": "US-EAST-1"}, "aws_region", "AWS region code"),
    ({"aws_region": "us-east"}, "aws_region", "AWS region code"),
    ({"aws_region": "us-east-1\n"}, "aws_region", "AWS region code"),
    ({"aws_region": "useast1"}, "aws_region", "AWS region code"),
    ({"queue_name": "bad name"}, "queue_name", "letters, digits, '-' and '_'"),
    ({"queue_name": "jobs.fifo.fifo"}, "queue_name", "'.fifo' at the end only for a FIFO queue"),
    ({"queue_name": ".fifo"}, "queue_name", "1-80 characters"),
    ({"queue_name": "jobs;rm"}, "queue_name", "1-80 characters"),
    ({"queue_name": "q" * 81}, "queue_name", "SQS allows at most 80"),
    ({"queue_name": "q" * 77}, "queue_name", "dead-letter queue '" + "q" * 77 + "-dlq'"),
    ({"queue_name": "q" * 77}, "queue_name", "keep the queue name to at most 76 characters"),
    ({"queue_name": "q" * 72 + ".fifo"}, "queue_name", "keep the part before .fifo to at most 71 characters"),
    ({"worker_concurrency": "08"}, "worker_concurrency", "whole number from 1 to 1000"),
    ({"worker_concurrency": "+3"}, "worker_concurrency", "plain digits"),
    ({"worker_concurrency": " 5"}, "worker_concurrency", "plain digits"),
    ({"worker_concurrency": "1e3"}, "worker_concurrency", "plain digits"),
    ({"worker_concurrency": "abc"}, "worker_concurrency", "plain digits"),
    ({"worker_concurrency": "-1"}, "worker_concurrency", "whole number from 1 to 1000"),
    ({"worker_concurrency": "0"}, "worker_concurrency", "whole number from 1 to 1000"),
    ({"worker_concurrency": "1001"}, "worker_concurrency", "whole number from 1 to 1000"),
    ({"worker_concurrency": "9" * 5000}, "worker_concurrency", "whole number from 1 to 1000"),
    ({"visibility_timeout_seconds": "1"}, "visibility_timeout_seconds", "SQS allows 0-43200"),
    ({"visibility_timeout_seconds": "0"}, "visibility_timeout_seconds", "at least 2 s so heartbeats"),
    ({"visibility_timeout_seconds": "43201"}, "visibility_timeout_seconds", "from 2 to 43200"),
    ({"job_timeout_seconds": "0"}, "job_timeout_seconds", "from 1 to 43200"),
    (
        {"job_timeout_seconds": "43201", "deploy_target": "eks", "shutdown_timeout_seconds": "43200"},
        "job_timeout_seconds",
        "12 h",
    ),
    ({"shutdown_timeout_seconds": "0"}, "shutdown_timeout_seconds", "whole number from 1"),
    (
        {"job_timeout_seconds": "90", "shutdown_timeout_seconds": "90"},
        "job_timeout_seconds",
        "must be below shutdown_timeout_seconds (90); otherwise SIGTERM cuts a running job off",
    ),
    (
        {"job_timeout_seconds": "100", "shutdown_timeout_seconds": "50"},
        "job_timeout_seconds",
        "must be below shutdown_timeout_seconds",
    ),
    (
        {"deploy_target": "ecs", "shutdown_timeout_seconds": str(ECS_MAX_SHUTDOWN + 1)},
        "shutdown_timeout_seconds",
        f"ECS caps stopTimeout at 120 s and the task definition sets stopTimeout = shutdown timeout + {MARGIN} s",
    ),
    (
        {"deploy_target": "ecs-and-eks", "shutdown_timeout_seconds": "600", "job_timeout_seconds": "500"},
        "shutdown_timeout_seconds",
        f"the shutdown timeout can be at most {ECS_MAX_SHUTDOWN} s",
    ),
    ({"max_receive_count": "0"}, "max_receive_count", "from 1 to 1000"),
    ({"max_receive_count": "1001"}, "max_receive_count", "RedrivePolicy"),
    ({"metrics_port": "80"}, "metrics_port", "non-root and cannot bind below 1024"),
    ({"metrics_port": "1023"}, "metrics_port", "from 1024 to 65535"),
    ({"metrics_port": "65536"}, "metrics_port", "from 1024 to 65535"),
    ({"metrics_port": "4566"}, "metrics_port", "LocalStack's port"),
]


@pytest.mark.parametrize(("answers", "variable", "fragment"), REFUSED_ON_COMMAND_LINE)
def test_bad_answer_is_refused(tmp_path: Path, answers: dict[str, str], variable: str, fragment: str) -> None:
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
        "shorten job_timeout_seconds",
    ):
        assert advice in line, line


# Values only a replay file (or another cookiecutter front end) can hand over unrendered.
REFUSED_FROM_REPLAY: list[tuple[dict[str, Any], str, str]] = [
    ({"python_version": "3.10"}, "python_version", "must be one of 3.11, 3.12, 3.13"),
    ({"python_version": "3.14"}, "python_version", "must be one of 3.11, 3.12, 3.13"),
    ({"deploy_target": "k8s"}, "deploy_target", "must be one of ecs-and-eks, ecs, eks"),
    ({"use_idempotency": "maybe"}, "use_idempotency", "must be one of yes, no"),
    ({"use_idempotency": True}, "use_idempotency", "must be one of yes, no"),
    ({"project_name": "{{ 7*7 }}"}, "project_name", "letters A-Z a-z"),
    ({"project_name": "a'''b\\\"c"}, "project_name", "letters A-Z a-z"),
    ({"description": "{{ cookiecutter.__class__ }}"}, "description", "template markers"),
    ({"author_name": "{# note #}"}, "author_name", "template markers"),
    ({"worker_concurrency": 8.5}, "worker_concurrency", "plain digits"),
    ({"_grace_margin_seconds": "soon"}, "_grace_margin_seconds", "whole number of seconds"),
]


@pytest.mark.parametrize(("answers", "variable", "fragment"), REFUSED_FROM_REPLAY)
def test_bad_replayed_answer_is_refused(tmp_path: Path, answers: dict[str, Any], variable: str, fragment: str) -> None:
    assert_refused(bake_replay(tmp_path, **answers), tmp_path, variable, fragment)


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


UNUSUAL_BUT_VALID: list[dict[str, str]] = [
    {"queue_name": "q_" * 38},  # 76 characters, so '<name>-dlq' is exactly 80
    {"queue_name": "q_" * 35 + "q.fifo"},  # 71 before .fifo, so '<base>-dlq.fifo' is exactly 80
    {"queue_name": "jobs.fifo", "deploy_target": "ecs"},
    {"project_name": "A1 B2", "project_slug": "a1-b2", "package_name": "svc_x", "deploy_target": "eks"},
    {"project_name": "Acme.io worker_2", "project_slug": "acme-io-worker-2", "package_name": "acme_io"},
    {"project_slug": "a" * 63, "package_name": "a" * 50},
    {"deploy_target": "ecs", "shutdown_timeout_seconds": str(ECS_MAX_SHUTDOWN), "job_timeout_seconds": "100"},
    {"deploy_target": "ecs-and-eks", "shutdown_timeout_seconds": str(ECS_MAX_SHUTDOWN)},
    {
        "deploy_target": "eks",
        "job_timeout_seconds": "43199",
        "shutdown_timeout_seconds": "43200",
        "visibility_timeout_seconds": "43200",
    },
    {"deploy_target": "eks", "job_timeout_seconds": "3600", "shutdown_timeout_seconds": "3700"},
    {"worker_concurrency": "1000", "max_receive_count": "1000", "visibility_timeout_seconds": "2"},
    {"job_timeout_seconds": "1", "shutdown_timeout_seconds": "2", "worker_concurrency": "1", "max_receive_count": "1"},
    {"metrics_port": "1024", "aws_region": "us-gov-west-1", "python_version": "3.13"},
    {"metrics_port": "65535", "aws_region": "us-isob-east-1", "python_version": "3.11"},
    {"aws_region": "cn-northwest-1", "use_idempotency": "yes"},
    {"description": "Says \"hi\" to O'Brien's queue \\ with 'quotes' and ünïcode: $HOME # {x}"},
]


@pytest.mark.parametrize("answers", UNUSUAL_BUT_VALID)
def test_unusual_answer_is_accepted(tmp_path: Path, answers: dict[str, str]) -> None:
    result = bake_cli(tmp_path, **answers)
    assert result.returncode == 0, result.stderr
    assert HEADER not in result.stderr
    slug = answers.get("project_slug", "orders-worker")
    package = answers.get("package_name", "orders_worker")
    project = tmp_path / "out" / slug
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [slug]
    assert (project / "src" / package).is_dir()
    assert empty_dirs(project) == []
    assert_deploy_files(project, answers.get("deploy_target", VALID["deploy_target"]), result.stdout)
    assert_idempotency_files(project, package, answers.get("use_idempotency", VALID["use_idempotency"]))
    for step in (f"cd {project.resolve()}", "make install", "make test", "make dev", "make up"):
        assert step in result.stdout, result.stdout


def assert_deploy_files(project: Path, target: str, stdout: str) -> None:
    wanted = {"ecs": target in ("ecs", "ecs-and-eks"), "k8s": target in ("eks", "ecs-and-eks")}
    for name, included in wanted.items():
        generated = project / "deploy" / name
        if not included:
            assert not generated.exists(), f"deploy/{name} generated for deploy_target={target}"
            assert f"deploy/{name}/" not in stdout
            continue
        if any(p.is_file() for p in (TEMPLATE / "deploy" / name).rglob("*")):
            assert any(p.is_file() for p in generated.rglob("*")), f"deploy/{name} missing for {target}"
            assert f"deploy/{name}/" in stdout, stdout


def assert_idempotency_files(project: Path, package: str, use_idempotency: str) -> None:
    optional = [project / "src" / package / "idempotency.py", project / "tests" / "integration" / "test_idempotency.py"]
    if use_idempotency == "no":
        assert [p for p in optional if p.exists()] == []


# The hooks rendered as cookiecutter renders them, to run them against a prepared directory.
def render_hook(tmp_path: Path, name: str, answers: dict[str, Any]) -> Path:
    env = StrictEnvironment(context={"cookiecutter": answers}, keep_trailing_newline=True)
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
    assert changed == ['ENCODED_ANSWERS = "{{ cookiecutter | tojson | urlencode }}"']


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
    assert reported >= set(VALID), reported


def test_pre_hook_accepts_valid_answers(tmp_path: Path) -> None:
    result = run_hook(render_hook(tmp_path, "pre_gen_project.py", {**CONFIG, **VALID}), tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def make_project(root: Path, package: str) -> None:
    for rel in (
        f"src/{package}/__init__.py",
        f"src/{package}/idempotency.py",
        "tests/integration/test_idempotency.py",
        "tests/unit/test_x.py",
        "deploy/ecs/task-definition.json",
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
    for kept in ("src/svc/__init__.py", "tests/unit/test_x.py", "deploy/ecs/task-definition.json"):
        assert (project / kept).is_file(), kept
    optional = ("src/svc/idempotency.py", "tests/integration/test_idempotency.py")
    assert all((project / rel).exists() == (use_idempotency == "yes") for rel in optional)
    assert (project / "tests" / "integration").exists() == (use_idempotency == "yes")
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
