"""The answer sets the template supports and the ones it refuses: the one table each that
every check of the template is parametrised over (cookiecutter-django's
SUPPORTED_COMBINATIONS / UNSUPPORTED_COMBINATIONS). Adding an option is a row here.

Each supported set says how deep it is checked:
- "full": baked, locked, and the generated project's whole `make test` (ruff, formatting,
  strict mypy, handler tests and the end-to-end test against LocalStack);
- "checked": baked, locked, ruff, formatting, mypy and the handler tests, and every
  deployment artifact through its validator (no LocalStack);
- "artifacts": every deployment artifact through its validator, not the project's own
  checks (for answers that change the deployment files, not the code);
- "rendered": baked, nothing left unrendered, every YAML/JSON/TOML file parses, the right
  files for its options.
Every set is rendered; "full", "checked" and "artifacts" sets are also validated artifact by
artifact; sets the bakes do not lock ("artifacts", "rendered") are linted and type-checked in
one shared environment (tests/test_bake.py).

`COVERING`: answer sets computed from cookiecutter.json's choices (and the queue's kind), so
that every pair of answer values meets in at least one set whose generated `make test` runs,
the "full" sets counted first (tests/pairwise.py; tests/test_matrix.py checks the coverage).
A defect that needs three answers together is left to the nightly run: `FULL=1` (make
test-full) runs the whole `make test` of every supported set that can be locked here.

Facts (SQS limits, ECS's stop timeout cap, the grace margin, the DLQ name rule, the fleet
budget) come from the engine's limits.py through `LIMITS`, never from rendered files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pairwise import Row, cover

from sqs_worker_template_jinja.checkout import load_limits

ROOT = Path(__file__).resolve().parents[1]
COOKIECUTTER: dict[str, Any] = json.loads((ROOT / "cookiecutter.json").read_text(encoding="utf-8"))


LIMITS = load_limits()  # the engine's limits.py, as the templates see it
ECS_MAX_SHUTDOWN = LIMITS.ECS_MAX_STOP_TIMEOUT - LIMITS.GRACE_MARGIN_SECONDS
LONG_SLUG = "a" + "-bcde" * 12 + "-x"  # 63 characters: the most a Kubernetes name allows

Depth = Literal["full", "checked", "artifacts", "rendered"]


@dataclass(frozen=True)
class Combination:
    answers: dict[str, str]
    depth: Depth = "rendered"
    why: str = ""


SUPPORTED: dict[str, Combination] = {
    "defaults": Combination({}, "full", "what `cookiecutter --no-input` gives"),
    "eks-py313-fifo": Combination(
        {
            "deploy_target": "eks",
            "python_version": "3.13",
            "project_name": "X9 Ledger Sync",
            "queue_name": "ledger-updates.fifo",
            "worker_concurrency": "25",
            "job_timeout_seconds": "500",
            "shutdown_timeout_seconds": "600",
            "max_receive_count": "10",
            "large_payloads": "yes",
            "tracing": "yes",
        },
        "full",
        "EKS only, the newest Python, a FIFO queue, jobs longer than ECS's stopTimeout allows, large payloads, tracing",
    ),
    "ecs-py311": Combination(
        {
            "deploy_target": "ecs",
            "python_version": "3.11",
            "secrets": "DATABASE_URL, PARTNER_API_TOKEN",
            "queue_name": "billing_events",
            "worker_concurrency": "3",
            "visibility_timeout_seconds": "7",
            "job_timeout_seconds": "20",
            "shutdown_timeout_seconds": "45",
            "max_receive_count": "2",
            "metrics_port": "9555",
            "aws_region": "eu-west-2",
        },
        "checked",
        "ECS only, the oldest Python, snake_case queue, small non-default numbers, two owner secrets",
    ),
    "idempotency-long-names": Combination(
        {
            "use_idempotency": "yes",
            "untrusted_input": "yes",
            "tracing": "yes",
            "project_name": "Edge",
            "project_slug": LONG_SLUG,
            "package_name": LONG_SLUG.replace("-", "_")[:50],
            "queue_name": "q" * 76,
            "description": 'Quotes " and \\ backslashes & <angles> survive rendering',
            "author_name": "O'Brien & Søren",
        },
        "checked",
        "idempotency on, untrusted input, tracing, names at their length limits, quotes in free text",
    ),
    "fifo-ecs-idempotency": Combination(
        {
            "project_name": "Billing Events",
            "queue_name": "billing-events.fifo",
            "max_receive_count": "3",
            "deploy_target": "ecs",
            "use_idempotency": "yes",
            "python_version": "3.13",
            "large_payloads": "yes",
            "fifo_throughput": "high",
        },
        "checked",
        "FIFO on ECS with idempotency, large payloads and high-throughput mode",
    ),
    # Hostile but legal text: YAML, JSON and TOML must still parse and read back exactly.
    "markup-characters": Combination(
        {
            "description": "Quotes \" ' and: colons # hash & amp * star ! bang | pipe > gt % pct @ at `tick` $HOME {x} [y]",
            "author_name": 'O\'Brien & Søren: #1 "Team" \\ back\\slash',
        }
    ),
    "yaml-and-toml-look-alikes": Combination(
        {
            "description": "- a list item?: no, key: value # not a comment",
            "author_name": "null",
            "project_name": "X.y_z 2-0 Worker",
            "project_slug": "x-y-z-2-0-worker",
            "package_name": "x_y_z_2_0_worker",
        }
    ),
    "yaml-scalars": Combination({"description": "yes", "author_name": "1e3"}),
    "unicode-bmp": Combination(
        {
            "description": "Ünïcödé ✓ 日本語 — naïve façade, «guillemets», ‹›, € and ½",
            "author_name": "Zoë Ñúñez 李",
        }
    ),
    # Beyond the Basic Multilingual Plane: Jinja's tojson writes a surrogate pair, which TOML
    # does not accept; the templates escape for each format instead.
    "unicode-astral": Combination({"description": "Emoji 😀 in a description", "author_name": "𝒜𝓊𝓉𝒽𝑜𝓇"}),
    # Unusual but valid: limits met exactly.
    "dlq-name-at-80": Combination({"queue_name": "q_" * 38}, why="'<name>-dlq' is exactly 80 characters"),
    "fifo-dlq-name-at-80": Combination({"queue_name": "q_" * 35 + "q.fifo"}, why="'<base>-dlq.fifo' is exactly 80"),
    "odd-legal-names": Combination(
        {"queue_name": "Q_-9.fifo", "aws_region": "us-gov-west-1", "description": "ends with a backslash \\"}
    ),
    "short-names-eks": Combination(
        {"project_name": "A1 B2", "project_slug": "a1-b2", "package_name": "svc_x", "deploy_target": "eks"}
    ),
    "dotted-name": Combination(
        {"project_name": "Acme.io worker_2", "project_slug": "acme-io-worker-2", "package_name": "acme_io"}
    ),
    "ecs-longest-drain": Combination(
        {"deploy_target": "ecs", "shutdown_timeout_seconds": str(ECS_MAX_SHUTDOWN), "job_timeout_seconds": "100"},
        why="the longest drain ECS's stopTimeout allows",
    ),
    "eks-12h-jobs": Combination(
        {
            "deploy_target": "eks",
            "job_timeout_seconds": str(LIMITS.MAX_VISIBILITY_SECONDS - 1),
            "shutdown_timeout_seconds": str(LIMITS.MAX_VISIBILITY_SECONDS),
            "visibility_timeout_seconds": str(LIMITS.MAX_VISIBILITY_SECONDS),
        },
        why="SQS's 12-hour visibility cap, reached",
    ),
    "extremes-high": Combination(
        {
            "worker_concurrency": "1000",
            "max_receive_count": str(LIMITS.MAX_RECEIVE_COUNT),
            "visibility_timeout_seconds": "2",
        }
    ),
    "extremes-low": Combination(
        {
            "job_timeout_seconds": "1",
            "shutdown_timeout_seconds": "2",
            "worker_concurrency": "1",
            "max_receive_count": "1",
        }
    ),
    "port-and-region-edges": Combination(
        {"metrics_port": "65535", "aws_region": "us-isob-east-1", "python_version": "3.11"}
    ),
    "eks-scaledjob": Combination(
        {
            "deploy_target": "eks",
            "kubernetes_workload": "scaledjob",
            "secrets": "BILLING_DATABASE_URL,PARTNER_API_TOKEN",
            "job_timeout_seconds": "3600",
            "shutdown_timeout_seconds": "3700",
            "visibility_timeout_seconds": "300",
            "worker_concurrency": "2",
            "tracing": "yes",
        },
        "artifacts",
        "long jobs as a KEDA ScaledJob: one Job per message that exits after it, with the collector sidecar, two owner secrets",
    ),
    "py314": Combination(
        {"python_version": "3.14"},
        "artifacts",
        "the newest Python: its images, CI and tooling (no 3.14 interpreter here to lock it; the template's CI bakes it)",
    ),
    # `_engine_source=index`: rendered from this checkout, a bake would get its engine/ by path.
    "engine-from-index": Combination(
        {
            "engine_source": "index",
            "_engine_source": "index",
            "engine_index_url": "https://packages.example.com/simple/",
        },
        "artifacts",
        "the engine from the package index it names, and from no other: the version pin, moved by Dependabot (git, the default, is every other row)",
    ),
    "engine-from-unnamed-index": Combination(
        {"engine_source": "index", "_engine_source": "index"},
        "rendered",
        "the version pin alone, its index named at install time (UV_INDEX); the Makefile refuses to lock or install before",
    ),
    "ecs-spot-arm64": Combination(
        {"deploy_target": "ecs", "capacity": "spot-mix", "cpu_architecture": "arm64"},
        "artifacts",
        "Fargate Spot with an on-demand base, Graviton tasks, one image for amd64 and arm64",
    ),
    "eks-pod-identity-arm64-untrusted": Combination(
        {
            "deploy_target": "eks",
            "eks_identity": "pod-identity",
            "cpu_architecture": "arm64",
            "capacity": "spot-mix",
            "untrusted_input": "yes",
        },
        "artifacts",
        "EKS Pod Identity through the locked-down NetworkPolicy, arm64 nodes, Spot nodes preferred",
    ),
    "both-pod-identity-scaledjob": Combination(
        {"eks_identity": "pod-identity", "kubernetes_workload": "scaledjob", "capacity": "spot-mix"},
        "artifacts",
        "Pod Identity and Spot on a ScaledJob, beside Fargate Spot on ECS (both targets)",
    ),
    "china-idempotency": Combination(
        {"aws_region": "cn-northwest-1", "use_idempotency": "yes"},
        "artifacts",
        "another partition: aws-cn ARNs and amazonaws.com.cn endpoints",
    ),
}

# Answers that only change text the service carries (its description, its author): every
# file of such a bake is rendered and parsed (test_rendering.py), while the costly runs (the
# README examples against the emulator, the security scanners) take one bake of each shape.
TEXT_ONLY = frozenset({"description", "author_name"})
SHAPES: dict[str, Combination] = {
    key: combo for key, combo in SUPPORTED.items() if not combo.answers or set(combo.answers) - TEXT_ONLY
}


# --- the covering set: every pair of answer values run end to end at least once ---------------

# The nightly run (make test-full): every lockable set end to end, and the long suites.
FULL = os.environ.get("TEMPLATE_TESTS_FULL", "") not in ("", "0")
# Choices the covering set leaves out, and why. Their pairs are still rendered and validated.
# Answers that change the deploy files only, which no end-to-end run exercises (the service's
# code and its `make test` are the same): the "artifacts" sets render and validate them.
DEPLOY_FILES_ONLY = "deploy files only: rendered and validated by the artifact sets"
NOT_RUN = {
    ("python_version", "3.14"): "no 3.14 interpreter here to lock and run it; the template's CI bakes it",
    ("capacity", "spot-mix"): DEPLOY_FILES_ONLY,
    ("cpu_architecture", "arm64"): DEPLOY_FILES_ONLY,
    ("eks_identity", "pod-identity"): DEPLOY_FILES_ONLY,
}
# The queue's kind is no choice of cookiecutter.json (a name ending in .fifo makes a FIFO
# queue), but it changes what the service runs: it is varied like one.
QUEUE_KINDS = {"standard": "orders-worker-jobs", "fifo": "orders-worker-jobs.fifo"}
RUN_FACTORS: dict[str, tuple[str, ...]] = {
    **{
        name: tuple(value for value in values if (name, value) not in NOT_RUN)
        for name, values in COOKIECUTTER.items()
        if isinstance(values, list) and not name.startswith("_")
    },
    "queue": tuple(QUEUE_KINDS),
}


def meaningful(row: Mapping[str, str]) -> bool:
    """Answer sets the hooks accept and that use every answer given: high FIFO throughput
    only on a FIFO queue (refused on a standard one), a ScaledJob only where Kubernetes is a
    target (ignored on ECS alone)."""
    if row["fifo_throughput"] == "high" and row["queue"] != "fifo":
        return False
    return not (row["kubernetes_workload"] == "scaledjob" and row["deploy_target"] == "ecs")


def run_row(answers: Mapping[str, str]) -> Row:
    """A supported set's values of RUN_FACTORS (a choice not given: cookiecutter.json's first)."""
    row = {name: answers.get(name, values[0]) for name, values in RUN_FACTORS.items() if name != "queue"}
    row["queue"] = "fifo" if answers.get("queue_name", "").endswith(".fifo") else "standard"
    return row


def covering_answers(row: Mapping[str, str]) -> dict[str, str]:
    """The answers to bake for a covering row (the queue's kind as a queue name)."""
    answers = {name: value for name, value in row.items() if name != "queue"}
    if row["queue"] == "fifo":
        answers["queue_name"] = QUEUE_KINDS["fifo"]
    return answers


def answers(name: str) -> dict[str, str]:
    return SUPPORTED[name].answers


def names(*depths: Depth) -> list[str]:
    """The supported sets checked at any of these depths."""
    return [name for name, combo in SUPPORTED.items() if combo.depth in depths]


def lockable(name: str) -> bool:
    """Whether the bakes can lock (and so run) a supported set here: not on a choice left out
    of the run (NOT_RUN) for want of what runs it (a choice of the deploy files only can be),
    nor with the engine from an index (none serves this checkout's)."""
    answers = SUPPORTED[name].answers
    return (
        all(answers.get(key) != value for (key, value), why in NOT_RUN.items() if why != DEPLOY_FILES_ONLY)
        and answers.get("_engine_source") != "index"
    )


# Generated rows, each named for its place: the same on every run (the greedy choice is).
COVERING: dict[str, Combination] = {
    f"pairs-{number}": Combination(
        covering_answers(row),
        "full",
        "pairwise: " + ", ".join(f"{name}={value}" for name, value in row.items()),
    )
    for number, row in enumerate(
        cover(RUN_FACTORS, meaningful, [run_row(SUPPORTED[name].answers) for name in names("full")]), start=1
    )
}


# The security scanners (tests/test_scanners.py) judge the files each answer adds, not what a
# name or a number looks like: every pair of choice values, those of the deploy files alone
# among them, in at least one bake after the defaults (whose broken copy shows they look).
# The nightly run scans every shape.
SCAN_FACTORS: dict[str, tuple[str, ...]] = {
    **{
        name: tuple(values)
        for name, values in COOKIECUTTER.items()
        if isinstance(values, list) and not name.startswith("_")
    },
    "queue": tuple(QUEUE_KINDS),
}
SCANNED: dict[str, Combination] = (
    SHAPES
    if FULL
    else {
        "defaults": SUPPORTED["defaults"],
        **{
            f"scan-{number}": Combination(
                covering_answers(row), "artifacts", "pairwise: " + ", ".join(f"{k}={v}" for k, v in row.items())
            )
            for number, row in enumerate(cover(SCAN_FACTORS, meaningful, [run_row({})]), start=1)
        },
    }
)


def end_to_end() -> list[str]:
    """The sets whose whole generated `make test` runs (tests/test_bake.py): the "full" sets,
    and with FULL every other set that can be locked here; then the covering set."""
    run = [name for name in SUPPORTED if SUPPORTED[name].depth == "full" or (FULL and lockable(name))]
    return run + list(COVERING)


@dataclass(frozen=True)
class Refusal:
    """An answer set the hooks refuse: which variable they name, and a fragment of why.
    `replay`: the value can only arrive through a replay file (or another front end): the
    command line would render or reject it before the hooks see it."""

    answers: dict[str, Any]
    variable: str
    fragment: str
    replay: bool = False
    pinned: dict[str, str] = field(default_factory=dict)


# Answers whose defaults derive from others, pinned so one bad answer makes one problem.
PINNED = {"project_slug": "svc", "package_name": "svc", "queue_name": "jobs"}

# (answers, variable reported, fragment of the message), typed on the command line on top of PINNED.
_ON_COMMAND_LINE: list[tuple[dict[str, Any], str, str]] = [
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
    ({"package_name": "sqs_worker_engine"}, "package_name", "would shadow the 'sqs_worker_engine' module"),
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
        (
            f"ECS caps stopTimeout at {LIMITS.ECS_MAX_STOP_TIMEOUT} s and the task definition sets stopTimeout = "
            f"shutdown timeout + {LIMITS.GRACE_MARGIN_SECONDS} s"
        ),
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
    ({"fifo_throughput": "high"}, "fifo_throughput", "high-throughput mode is for FIFO queues"),
    # The index the engine comes from, when named: a URL uv reads as given, holding no secret.
    (
        {"engine_index_url": "http://packages.example.com/simple/", "engine_source": "index"},
        "engine_index_url",
        "must be an https:// URL",
    ),
    (
        {"engine_index_url": "https://me:secret@packages.example.com/simple/", "engine_source": "index"},
        "engine_index_url",
        "must not hold credentials",
    ),
    (
        {"engine_index_url": "https://packages.example.com/simple/ extra", "engine_source": "index"},
        "engine_index_url",
        "without spaces, quotes or braces",
    ),
    ({"engine_index_url": "packages.example.com/simple/", "engine_source": "index"}, "engine_index_url", "https://"),
    ({"secrets": "api_token"}, "secrets", "not an environment variable name"),
    ({"secrets": "API-TOKEN"}, "secrets", "not an environment variable name"),
    ({"secrets": "WORKER_TOKEN"}, "secrets", "a setting of the engine or an SDK"),
    ({"secrets": "LOG_LEVEL"}, "secrets", "a setting of the engine or an SDK"),
    ({"secrets": "API_TOKEN,API_TOKEN"}, "secrets", "names API_TOKEN more than once"),
]
# Values only a replay file (or another cookiecutter front end) can hand over unrendered.
_FROM_REPLAY: list[tuple[dict[str, Any], str, str]] = [
    ({"python_version": "3.10"}, "python_version", "must be one of 3.11, 3.12, 3.13, 3.14"),
    ({"python_version": "3.15"}, "python_version", "must be one of 3.11, 3.12, 3.13, 3.14"),
    ({"deploy_target": "k8s"}, "deploy_target", "must be one of ecs-and-eks, ecs, eks"),
    ({"use_idempotency": "maybe"}, "use_idempotency", "must be one of yes, no"),
    ({"use_idempotency": True}, "use_idempotency", "must be one of yes, no"),
    ({"untrusted_input": "sometimes"}, "untrusted_input", "must be one of yes, no"),
    ({"large_payloads": "big"}, "large_payloads", "must be one of yes, no"),
    ({"tracing": "otel"}, "tracing", "must be one of yes, no"),
    ({"engine_source": "path"}, "engine_source", "must be one of git, index"),
    ({"kubernetes_workload": "job"}, "kubernetes_workload", "must be one of deployment, scaledjob"),
    ({"fifo_throughput": "turbo", "queue_name": "jobs.fifo"}, "fifo_throughput", "must be one of standard, high"),
    ({"capacity": "spot"}, "capacity", "must be one of on-demand, spot-mix"),
    ({"cpu_architecture": "aarch64"}, "cpu_architecture", "must be one of x86_64, arm64"),
    ({"eks_identity": "kiam"}, "eks_identity", "must be one of irsa, pod-identity"),
    ({"project_name": "{{ 7*7 }}"}, "project_name", "letters A-Z a-z"),
    ({"project_name": "a'''b\\\"c"}, "project_name", "letters A-Z a-z"),
    ({"description": "{{ cookiecutter.__class__ }}"}, "description", "template markers"),
    ({"author_name": "{# note #}"}, "author_name", "template markers"),
    ({"worker_concurrency": 8.5}, "worker_concurrency", "plain digits"),
]
UNSUPPORTED: list[Refusal] = [Refusal(a, v, f) for a, v, f in _ON_COMMAND_LINE] + [
    Refusal(a, v, f, replay=True) for a, v, f in _FROM_REPLAY
]
