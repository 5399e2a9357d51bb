"""Refuse answers the generated service could not live with, before any file is written.

Every answer lands somewhere strict: Python identifiers, Docker image and Kubernetes
object names, SQS API limits, ECS task definitions, and YAML/JSON/TOML/shell/Markdown
text. A bad value found here costs one re-run; found later, it costs a broken build or a
worker that cuts jobs off on every deploy. All problems are reported at once, one line
each, naming the variable, the value and what is allowed.
"""

from __future__ import annotations

import importlib.util
import json
import keyword
import re
import sys
from collections.abc import Callable
from types import ModuleType
from urllib.parse import unquote

# Cookiecutter renders this file with Jinja before running it. The answers arrive as JSON,
# percent-encoded, so no answer (quotes, backslashes, newlines, Jinja markers) can end the
# string literal early or change this program; it also keeps the file plain Python for ruff.
ENCODED_ANSWERS = "{{ cookiecutter | tojson | urlencode }}"

# SQS and platform limits, and the DLQ naming rule: the engine's own `limits.py`, the one
# place they are stated (rendered as a path by the template's Jinja extension).
LIMITS_FILE = unquote("{{ limits_file | urlencode }}")


def _load_limits() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sqs_worker_engine_limits", LIMITS_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LIMITS = _load_limits()
SQS_MAX_NAME = LIMITS.MAX_QUEUE_NAME
SQS_MAX_VISIBILITY = LIMITS.MAX_VISIBILITY_SECONDS  # 12 h: also the cap on a message's total visibility
SQS_MAX_RECEIVE_COUNT = LIMITS.MAX_RECEIVE_COUNT
FIFO_SUFFIX = LIMITS.FIFO_SUFFIX
ECS_MAX_STOP_TIMEOUT = LIMITS.ECS_MAX_STOP_TIMEOUT
GRACE_MARGIN = LIMITS.GRACE_MARGIN_SECONDS
# A non-root container cannot bind below 1024; LocalStack owns 4566 in `make dev`/`make up`.
LOCALSTACK_PORT = 4566

PYTHON_VERSIONS = ("3.11", "3.12", "3.13", "3.14")
DEPLOY_TARGETS = ("ecs-and-eks", "ecs", "eks")
ECS_TARGETS = ("ecs-and-eks", "ecs")
WORKLOADS = ("deployment", "scaledjob")  # kubernetes_workload
FIFO_THROUGHPUTS = ("standard", "high")  # fifo_throughput
CAPACITIES = ("on-demand", "spot-mix")  # capacity
CPU_ARCHITECTURES = ("x86_64", "arm64")  # cpu_architecture
EKS_IDENTITIES = ("irsa", "pod-identity")  # eks_identity
YES_NO = ("yes", "no")
ENGINE_SOURCES = ("git", "index")

# Top-level modules the generated project imports or runs next to its package; a package
# of the same name would shadow them on sys.path (src/ layout, tests on the path).
SHADOWED_MODULES = frozenset(
    {
        "aiobotocore",
        "aiohttp",
        "aws_lambda_powertools",
        "boto3",
        "botocore",
        "conftest",
        "hatchling",
        "localstack",
        "moto",
        "mypy",
        "prometheus_client",
        "pydantic",
        "pydantic_core",
        "pydantic_settings",
        "pytest",
        "sqs_worker_engine",
        "ruff",
        "tests",
        "typing_extensions",
    }
)
# Older interpreters lack sys.stdlib_module_names; these are the names people pick by accident.
_FALLBACK_STDLIB = frozenset(
    {"abc", "ast", "asyncio", "code", "email", "http", "io", "json", "logging", "queue", "select", "signal", "types"}
)
STDLIB_MODULES = frozenset(getattr(sys, "stdlib_module_names", _FALLBACK_STDLIB))

# Built without writing the markers literally: this file is itself a Jinja template.
_BRACE = "{"
JINJA_MARKERS = (_BRACE * 2, _BRACE + "%", _BRACE + "#")

# Only characters that are inert in YAML, JSON, TOML, shell words and Markdown headings.
PROJECT_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9 ._-]*[A-Za-z0-9._-])?")
# DNS-1123 label (Kubernetes object names), also a valid Docker image name and directory.
SLUG_RE = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
SLUG_MAX = 63
PACKAGE_RE = re.compile(r"[a-z_][a-z0-9_]*")
REGION_RE = re.compile(r"[a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-[0-9]")
QUEUE_BASE_RE = re.compile(r"[A-Za-z0-9_-]+")
# Canonical decimal only: "08", "+3", " 5", "1e3" are typos more often than intent.
CANONICAL_INT_RE = re.compile(r"0|[1-9][0-9]*")
TEXT_MAX = 200
PROJECT_NAME_MAX = 100
SHOWN_MAX = 60

Problems = list[str]


def show(value: object) -> str:
    """The value as given, escaped onto one line and cut to a readable length."""
    if value is None:
        return "(missing)"
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    if len(text) > SHOWN_MAX:
        return f"{text[:SHOWN_MAX]}... ({len(value) if isinstance(value, str) else len(text)} characters)"
    return text


def problem(problems: Problems, name: str, value: object, message: str) -> None:
    problems.append(f"{name}={show(value)}: {message}")


def whole_number(
    problems: Problems, answers: dict[str, object], name: str, low: int, high: int, why: str = ""
) -> int | None:
    """Parse a canonical decimal within low..high; report and return None otherwise."""
    value = answers.get(name)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # a replay file may hold numbers rather than strings
    allowed = f"a whole number from {low} to {high}" + (f" ({why})" if why else "")
    if not isinstance(value, str) or not CANONICAL_INT_RE.fullmatch(value):
        problem(problems, name, value, f"must be {allowed}, written in plain digits")
        return None
    # Long digit strings are out of range anyway; int() of thousands of digits would raise.
    number = int(value) if len(value) <= 12 else high + 1
    if not low <= number <= high:
        problem(problems, name, value, f"must be {allowed}")
        return None
    return number


def free_text(problems: Problems, answers: dict[str, object], name: str) -> None:
    value = answers.get(name)
    if not isinstance(value, str):
        problem(problems, name, value, "must be text")
        return
    if len(value) > TEXT_MAX:
        problem(problems, name, value, f"must be at most {TEXT_MAX} characters")
    if not value.isprintable():
        problem(problems, name, value, "must be one line of printable characters (no newlines, tabs or control codes)")
    if any(marker in value for marker in JINJA_MARKERS):
        problem(problems, name, value, "must not contain template markers ('{' followed by '{', '%' or '#')")


def check_project_name(problems: Problems, answers: dict[str, object]) -> None:
    value = answers.get("project_name")
    if not isinstance(value, str):
        problem(problems, "project_name", value, "must be text")
    elif not value.strip():
        problem(problems, "project_name", value, "must not be empty")
    elif len(value) > PROJECT_NAME_MAX or not PROJECT_NAME_RE.fullmatch(value):
        problem(
            problems,
            "project_name",
            value,
            f"use at most {PROJECT_NAME_MAX} characters: letters A-Z a-z, digits, spaces, '.', '_' and '-', "
            "starting with a letter or digit and not ending in a space (it lands in YAML, JSON, TOML, "
            "shell and Markdown, where quotes, $, backticks, braces, '#' and ':' would break out)",
        )


def check_project_slug(problems: Problems, answers: dict[str, object]) -> None:
    value = answers.get("project_slug")
    if not isinstance(value, str) or len(value) > SLUG_MAX or not SLUG_RE.fullmatch(value):
        problem(
            problems,
            "project_slug",
            value,
            f"must be 1-{SLUG_MAX} characters of lowercase letters, digits and single hyphens, starting with "
            "a letter and not ending in a hyphen, e.g. 'orders-worker' (it names the directory, the "
            "Docker image and the Kubernetes objects, which must be DNS-1123 labels)",
        )


PACKAGE_MAX = 50


def check_package_name(problems: Problems, answers: dict[str, object]) -> None:
    value = answers.get("package_name")
    if not isinstance(value, str) or not PACKAGE_RE.fullmatch(value):
        problem(
            problems,
            "package_name",
            value,
            "must be a lowercase Python identifier: letters a-z, digits and '_', not starting with a digit, "
            "e.g. 'orders_worker'",
        )
    elif len(value) > PACKAGE_MAX:
        problem(
            problems,
            "package_name",
            value,
            f"is {len(value)} characters; at most {PACKAGE_MAX} (generated import lines must fit the line length): "
            "answer package_name with a shorter name",
        )
    elif keyword.iskeyword(value):
        problem(problems, "package_name", value, "is a Python keyword; choose another name, e.g. add a suffix")
    elif value in STDLIB_MODULES:
        problem(
            problems,
            "package_name",
            value,
            f"is a standard library module name; the package would shadow it (choose e.g. '{value}_worker')",
        )
    elif value in SHADOWED_MODULES:
        problem(
            problems,
            "package_name",
            value,
            f"would shadow the '{value}' module the service or its tests depend on (choose e.g. '{value}_worker')",
        )


def check_description(problems: Problems, answers: dict[str, object]) -> None:
    free_text(problems, answers, "description")


def check_author_name(problems: Problems, answers: dict[str, object]) -> None:
    free_text(problems, answers, "author_name")


def check_python_version(problems: Problems, answers: dict[str, object]) -> None:
    value = answers.get("python_version")
    if value not in PYTHON_VERSIONS:
        problem(problems, "python_version", value, f"must be one of {', '.join(PYTHON_VERSIONS)}")


def check_aws_region(problems: Problems, answers: dict[str, object]) -> None:
    value = answers.get("aws_region")
    if not isinstance(value, str) or not REGION_RE.fullmatch(value):
        problem(
            problems,
            "aws_region",
            value,
            "must be an AWS region code such as 'us-east-1', 'eu-west-2' or 'us-gov-west-1'",
        )


def check_queue_name(problems: Problems, answers: dict[str, object]) -> None:
    value = answers.get("queue_name")
    if not isinstance(value, str):
        problem(problems, "queue_name", value, "must be text")
        return
    fifo = value.endswith(FIFO_SUFFIX)
    base = value[: -len(FIFO_SUFFIX)] if fifo else value
    if not QUEUE_BASE_RE.fullmatch(base):
        problem(
            problems,
            "queue_name",
            value,
            "SQS queue names are 1-80 characters of letters, digits, '-' and '_', with '.fifo' at the end "
            "only for a FIFO queue (e.g. 'orders-jobs' or 'orders-jobs.fifo')",
        )
        return
    if len(value) > SQS_MAX_NAME:
        problem(
            problems,
            "queue_name",
            value,
            f"is {len(value)} characters; SQS allows at most {SQS_MAX_NAME}, '.fifo' included",
        )
        return
    dlq = LIMITS.dlq_name(value)
    if len(dlq) > SQS_MAX_NAME:
        longest_base = SQS_MAX_NAME - (len(dlq) - len(base))
        problem(
            problems,
            "queue_name",
            value,
            f"leaves no room for its dead-letter queue '{dlq}' ({len(dlq)} characters; SQS allows "
            f"{SQS_MAX_NAME}): keep {'the part before .fifo' if fifo else 'the queue name'} to at most "
            f"{longest_base} characters",
        )


def check_numbers(problems: Problems, answers: dict[str, object]) -> None:
    concurrency_note = "jobs in flight per worker process"
    whole_number(problems, answers, "worker_concurrency", 1, 1000, concurrency_note)
    whole_number(
        problems,
        answers,
        "visibility_timeout_seconds",
        2,
        SQS_MAX_VISIBILITY,
        f"SQS allows 0-{SQS_MAX_VISIBILITY}; the worker needs at least 2 s so heartbeats can extend the "
        "lease before it expires",
    )
    job = whole_number(
        problems,
        answers,
        "job_timeout_seconds",
        1,
        SQS_MAX_VISIBILITY,
        f"SQS caps a message's total visibility at 12 h = {SQS_MAX_VISIBILITY} s",
    )
    shutdown = whole_number(
        problems,
        answers,
        "shutdown_timeout_seconds",
        1,
        SQS_MAX_VISIBILITY,
        "it must exceed the job timeout, which SQS caps at 12 h",
    )
    whole_number(
        problems, answers, "max_receive_count", 1, SQS_MAX_RECEIVE_COUNT, "the SQS RedrivePolicy maxReceiveCount range"
    )
    if job is not None and shutdown is not None and job >= shutdown:
        problem(
            problems,
            "job_timeout_seconds",
            answers.get("job_timeout_seconds"),
            f"must be below shutdown_timeout_seconds ({shutdown}); otherwise SIGTERM cuts a running job off "
            "before its timeout (raise the shutdown timeout or lower the job timeout)",
        )
    if shutdown is not None:
        check_grace_period(problems, answers, shutdown)


def check_grace_period(problems: Problems, answers: dict[str, object], shutdown: int) -> None:
    """ECS stopTimeout and Kubernetes terminationGracePeriodSeconds are shutdown + margin."""
    if answers.get("deploy_target") not in ECS_TARGETS:
        return  # Kubernetes has no cap on terminationGracePeriodSeconds
    margin = GRACE_MARGIN
    if shutdown + margin > ECS_MAX_STOP_TIMEOUT:
        most = ECS_MAX_STOP_TIMEOUT - margin
        problem(
            problems,
            "shutdown_timeout_seconds",
            answers.get("shutdown_timeout_seconds"),
            f"ECS caps stopTimeout at {ECS_MAX_STOP_TIMEOUT} s and the task definition sets stopTimeout = "
            f"shutdown timeout + {margin} s = {shutdown + margin} s, so with "
            f"deploy_target={answers.get('deploy_target')} the shutdown timeout can be at most {most} s. "
            "For longer jobs choose deploy_target=eks (Kubernetes has no such cap), or split long jobs into "
            "resumable steps that checkpoint their progress; else lower it to at most "
            f"{most} s with job_timeout_seconds below that (it is {answers.get('job_timeout_seconds')})",
        )


def check_metrics_port(problems: Problems, answers: dict[str, object]) -> None:
    port = whole_number(
        problems, answers, "metrics_port", 1024, 65535, "the container runs as non-root and cannot bind below 1024"
    )
    if port == LOCALSTACK_PORT:
        problem(
            problems,
            "metrics_port",
            answers.get("metrics_port"),
            f"{LOCALSTACK_PORT} is LocalStack's port in local development; choose another port from 1024 to 65535",
        )


def check_choices(problems: Problems, answers: dict[str, object]) -> None:
    for name, choices in (
        ("deploy_target", DEPLOY_TARGETS),
        ("kubernetes_workload", WORKLOADS),
        ("fifo_throughput", FIFO_THROUGHPUTS),
        ("capacity", CAPACITIES),
        ("cpu_architecture", CPU_ARCHITECTURES),
        ("eks_identity", EKS_IDENTITIES),
        ("use_idempotency", YES_NO),
        ("untrusted_input", YES_NO),
        ("large_payloads", YES_NO),
        ("tracing", YES_NO),
        ("engine_source", ENGINE_SOURCES),
    ):
        value = answers.get(name)
        if value not in choices:
            problem(problems, name, value, f"must be one of {', '.join(choices)}")


def check_fifo_throughput(problems: Problems, answers: dict[str, object]) -> None:
    """High-throughput mode is a FIFO queue's: on a standard queue it would be ignored
    silently, which a person answering `high` did not mean."""
    queue = answers.get("queue_name")
    if answers.get("fifo_throughput") == "high" and isinstance(queue, str) and not queue.endswith(FIFO_SUFFIX):
        problem(
            problems,
            "fifo_throughput",
            "high",
            f"high-throughput mode is for FIFO queues, and queue_name {show(queue)} is a standard queue "
            f"(no throughput limit to raise): answer standard, or end queue_name in '{FIFO_SUFFIX}'",
        )


# An index URL as uv reads it from pyproject.toml: https (file:// for an index on this machine),
# nothing a TOML string, a shell word or a template could trip on.
INDEX_URL_RE = re.compile(r"(?:https|file)://[^\s\"'`\\<>{}]+")
INDEX_URL_MAX = 500


def check_engine_index(problems: Problems, answers: dict[str, object]) -> None:
    """The index the engine is installed from, when the bake names it: uv's explicit index,
    written into pyproject.toml and .cruft.json, so a URL uv reads as given and no secret.
    Empty is allowed with engine_source=index too: the version pin alone, the index named at
    install time (UV_INDEX); the generated Makefile refuses to lock or install before one is
    named, since `sqs-worker-engine` is not claimed on the public index, where anyone could
    publish a package of that name (dependency confusion)."""
    value = answers.get("engine_index_url") or ""  # absent from answers recorded before it was asked
    if not isinstance(value, str):
        problem(problems, "engine_index_url", value, "must be text: a URL, or empty")
        return
    if not value:
        return
    if len(value) > INDEX_URL_MAX or not INDEX_URL_RE.fullmatch(value):
        problem(
            problems,
            "engine_index_url",
            value,
            "must be an https:// URL (file:// for an index on this machine) of an index's simple API, without "
            "spaces, quotes or braces",
        )
    elif "@" in value.split("://", 1)[1].split("/", 1)[0]:
        problem(
            problems,
            "engine_index_url",
            value,
            "must not hold credentials (they would be written into pyproject.toml and .cruft.json): give uv "
            "UV_INDEX_ENGINE_USERNAME and UV_INDEX_ENGINE_PASSWORD in the environment instead",
        )


def check_secrets(problems: Problems, answers: dict[str, object]) -> None:
    """The owner's secrets: environment variable names, each once, none the engine's own
    (the rule is the engine's, in limits.py; the engine holds ServiceDefaults to it too)."""
    value = answers.get("secrets", "")
    if not isinstance(value, str):
        problem(problems, "secrets", value, "must be text: variable names separated by commas")
        return
    names = value.replace(",", " ").split()
    for name in names:
        if not re.match(LIMITS.SECRET_NAME_PATTERN, name):
            problem(
                problems,
                "secrets",
                value,
                f"{name!r} is not an environment variable name (A-Z, 0-9 and _, starting with a letter, "
                "at most 128 characters), e.g. API_TOKEN",
            )
        elif name.startswith(LIMITS.RESERVED_PREFIXES) or name in LIMITS.UNPREFIXED_SETTINGS:
            problem(
                problems,
                "secrets",
                value,
                f"{name!r} is a setting of the engine or an SDK (prefixes {', '.join(LIMITS.RESERVED_PREFIXES)}), "
                "not a secret of the service's own",
            )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        problem(problems, "secrets", value, f"names {', '.join(repeated)} more than once")


CHECKS: tuple[Callable[[Problems, dict[str, object]], None], ...] = (
    check_project_name,
    check_project_slug,
    check_package_name,
    check_description,
    check_author_name,
    check_python_version,
    check_aws_region,
    check_queue_name,
    check_numbers,
    check_metrics_port,
    check_choices,
    check_fifo_throughput,
    check_engine_index,
    check_secrets,
)


def collect_problems(answers: dict[str, object]) -> Problems:
    problems: Problems = []
    for check in CHECKS:
        try:
            check(problems, answers)
        except Exception as exc:  # noqa: BLE001 - one broken rule must not hide the others
            problems.append(f"{check.__name__.removeprefix('check_')}: could not be checked ({exc!r})")
    return problems


def main() -> int:
    # A value the terminal cannot encode must be escaped, not turned into a traceback.
    if hasattr(sys.stderr, "reconfigure"):
        sys.stderr.reconfigure(errors="backslashreplace")
    try:
        answers = json.loads(unquote(ENCODED_ANSWERS))
        if not isinstance(answers, dict):
            raise TypeError("the answers are not a mapping")
        problems = collect_problems(answers)
    except Exception as exc:  # noqa: BLE001 - refuse with a message, never with a traceback
        problems = [f"the answers could not be read ({exc!r})"]
    if not problems:
        return 0
    print("Cannot generate the project; fix these answers and run cookiecutter again:", file=sys.stderr)
    for line in problems:
        print(f"  {line}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
