"""Jinja globals for the template: the engine's facts, and where a bake gets its engine.

Cookiecutter loads this module from the template's root (`_extensions` in
cookiecutter.json) for every render, `cookiecutter` and `cruft` alike.

- `limits`: the engine's `limits.py` (SQS's 12-hour cap, ECS's 120 s stop timeout, the fleet
  concurrency budget, the DLQ naming rule...), loaded from this very checkout, so that what
  is generated and what runs state each fact once. The hooks load the same file through
  `limits_file`.
- `engine_source(cookiecutter)`: the `[tool.uv.sources]` entry the service installs the
  engine from (`engine_source_for` decides; see its docstring), or "" for the version pin
  alone; `engine_index`, the index it is pinned to when the bake names one; and
  `engine_index_unnamed`, true for the pin alone (an index the owner names at install time).
- `engine_link(cookiecutter)`: the engine named in the generated README, linked to the
  repository the service was baked from (or the checkout's path, for a local bake);
  `template_doc_link(cookiecutter, doc)` the same for one of its documents.
- `git_credential_helper`: the git credential helper the Dockerfile and CI of a service with
  the engine as a git source use to read the template repository with a token.
- `partition` / `dns_suffix` (filters on a region): the AWS partition an ARN names and the
  domain its endpoints live under, so that a China, GovCloud or ISO region gets ARNs and
  hosts that exist there.
- `worker_policy(cookiecutter, cfn)`: the worker's IAM statements, once, for the policy file
  (literal ARNs) and for the ECS stack's task role (ARNs the stack builds itself).
- `to_yaml(indent)`, `to_json` (filters): a value as block YAML indented to sit under a key,
  or as pretty JSON, keys in the order given.
- `alerts(cookiecutter)`, `dashboard(cookiecutter)`, `emf_metrics(cookiecutter)`: the bake's
  alerts and dashboard panels, one table each (observability.py).
- `secret_parameter` (filter): the ECS stack's parameter for an owner secret's ARN
  (DATABASE_URL -> DatabaseUrlSecretArn); `secrets(cookiecutter)`: the `secrets` answer as a list.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from jinja2.ext import Extension

ROOT = Path(__file__).resolve().parent
ENGINE_DIR = ROOT / "engine"
LIMITS_FILE = ENGINE_DIR / "src" / "sqs_worker_engine" / "base" / "limits.py"


@functools.cache
def load_limits() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sqs_worker_engine_limits", LIMITS_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _git(*args: str) -> str | None:
    try:
        result = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 and result.stdout.strip() else None


def as_url(origin: str) -> str:
    """A git remote as a URL uv accepts: a plain path (a clone of a local repository)
    becomes file://, scp-like `git@host:org/repo` becomes ssh://."""
    if "://" in origin:
        return origin
    if ":" in origin.split("/", 1)[0] and not os.path.exists(origin):
        host, path = origin.split(":", 1)
        return f"ssh://{host}/{path}"
    return Path(origin).resolve().as_uri()


def rendered_in_place(template: str | None, root: Path = ROOT) -> bool:
    """True when cookiecutter renders straight from the checkout this module is in, not from
    a clone it (or cruft) made of a repository."""
    return template is not None and Path(os.path.expanduser(template)).resolve() == root


ENGINE_SOURCES = ("git", "index")  # the `engine_source` answer (cookiecutter.json; the first is the default)
OVERRIDES = ("path", "git", "index")  # the `_engine_source` extra-context answer


# The name of the index the engine is pinned to (`[[tool.uv.index]]`): uv reads its
# credentials from UV_INDEX_ENGINE_USERNAME and UV_INDEX_ENGINE_PASSWORD.
ENGINE_INDEX = "engine"
# The environment variables by which uv is told of an index: with one set, a service pinning
# the engine with no index named for it may lock (the generated Makefile and the
# post-generation hook both ask).
INDEX_VARIABLES = ("UV_INDEX", "UV_DEFAULT_INDEX", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL")


def engine_source_for(
    answer: str,
    override: str,
    template: str | None,
    origin: str | None,
    commit: str | None,
    engine_dir: Path,
    index_url: str = "",
) -> dict[str, str]:
    """Where the baked service installs its engine from: its `[tool.uv.sources]` entry.

    - `override` (the `_engine_source` extra-context answer) wins: "path" (this checkout's
      engine/), "index" or "git".
    - Rendered in place from a local checkout (`cookiecutter ./checkout`, this repository's
      own tests and demo): that checkout's engine/, by path, whatever `answer` says: its
      version may not be on any index yet, and the checkout is what the files were
      generated from.
    - Otherwise the `engine_source` answer: "index" (the version pin, moved by Dependabot
      and Renovate: from the index `index_url` names and from no other, written as uv's
      explicit index; without `index_url`, {}: the pin alone, the index named at install
      time, which the generated Makefile insists on), or "git" (the template's repository
      at the exact commit baked from, for forks without an index).
    """
    if override and override not in OVERRIDES:
        raise ValueError(f"_engine_source must be one of {', '.join(OVERRIDES)} (or empty), got {override!r}")
    if not override and answer not in ENGINE_SOURCES:
        raise ValueError(f"engine_source must be one of {', '.join(ENGINE_SOURCES)}, got {answer!r}")
    choice = override or ("path" if rendered_in_place(template) else answer)
    if choice == "index":
        # Without a URL, no source: the owner names the index when installing (UV_INDEX).
        return {"index": ENGINE_INDEX} if index_url else {}
    if choice == "path":
        return {"path": str(engine_dir)}
    if not (origin and commit):
        raise ValueError("engine_source=git needs the template to be a git clone with an origin remote")
    return {"git": as_url(origin), "subdirectory": "engine", "rev": commit}


def toml_inline(table: dict[str, str]) -> str:
    return "{ " + ", ".join(f"{key} = {json.dumps(value)}" for key, value in table.items()) + " }"


def _engine_source_table(cookiecutter: dict[str, Any]) -> dict[str, str]:
    return engine_source_for(
        str(cookiecutter.get("engine_source") or ""),
        str(cookiecutter.get("_engine_source") or ""),
        cookiecutter.get("_template"),
        _git("remote", "get-url", "origin"),
        _git("rev-parse", "HEAD"),
        ENGINE_DIR,
        str(cookiecutter.get("engine_index_url") or ""),
    )


def engine_source(cookiecutter: dict[str, Any]) -> str:
    """The TOML for `sqs-worker-engine = ...` under [tool.uv.sources], or "" for the pin alone."""
    table = _engine_source_table(cookiecutter)
    return toml_inline(table) if table else ""


def engine_index_unnamed(cookiecutter: dict[str, Any]) -> bool:
    """True when the service pins the engine with no index named for it (engine_source=index
    without engine_index_url): the bake the Makefile keeps from locking or installing until
    pyproject.toml or the environment names one. False when the answers cannot say (the
    post-generation hook renders this too, and must not fail)."""
    try:
        return _engine_source_table(cookiecutter) == {}
    except ValueError:
        return False


def engine_index(cookiecutter: dict[str, Any]) -> str:
    """The URL of the index the service installs its engine from, or "" when the engine comes
    from git or a path (the post-generation hook says what must be published there first),
    or when the answers cannot say (the hook renders this too, and must not fail)."""
    try:
        table = _engine_source_table(cookiecutter)
    except ValueError:
        return ""
    if table.get("index") != ENGINE_INDEX:
        return ""
    return str(cookiecutter.get("engine_index_url") or "")


# How git, asked for the template repository's credentials (a git source of the engine, a
# private template for `cruft`), gets them from the environment: TEMPLATE_REPO_TOKEN, with
# TEMPLATE_REPO_USER as the user name (GitHub takes any for a token; x-access-token is the
# one its app tokens use). Set through GIT_CONFIG_* variables, so it is written to no file.
GIT_CREDENTIAL_HELPER = (
    '!f() { test "$1" = get && test -n "$TEMPLATE_REPO_TOKEN" && '
    'echo "username=${TEMPLATE_REPO_USER:-x-access-token}" && echo "password=$TEMPLATE_REPO_TOKEN"; }; f'
)


def template_origin(cookiecutter: dict[str, Any]) -> str:
    """Where `cruft update` finds this template again: the repository it was cloned from,
    or the local checkout it was generated from."""
    template = cookiecutter.get("_template")
    if rendered_in_place(template):
        return str(ROOT)
    origin = _git("remote", "get-url", "origin")
    return as_url(origin) if origin else str(template or ROOT)


def web_url(origin: str, commit: str, page: str = "engine", kind: str = "tree") -> str | None:
    """The page of the template's `page` (engine/ by default; `kind` "blob" for a file) at
    `commit`, for a repository on a host that serves one (https, or ssh to the same host);
    None for a checkout or a file:// clone on this machine, which has no page."""
    url = as_url(origin)
    scheme, _, rest = url.partition("://")
    if scheme not in ("https", "http", "ssh") or "/" not in rest:
        return None
    host, path = rest.split("/", 1)
    host = host.rsplit("@", 1)[-1].split(":", 1)[0]  # no user, no port (ssh's is not the web's)
    path = path.removesuffix("/").removesuffix(".git")
    if not host or not path:
        return None
    # GitHub's and Gitea's page of a folder at a commit; GitLab takes the same with a `/-`.
    return f"https://{host}/{path}/{kind}/{commit or 'HEAD'}/{page}"


def engine_link(cookiecutter: dict[str, Any]) -> str:
    """Markdown naming the engine where its source is: a link to the template repository's
    engine/ at the commit baked from, or, for a bake from a checkout on this machine, the
    checkout's path (a README must not point at a repository the service was not made from)."""
    origin = template_origin(cookiecutter)
    page = web_url(origin, _git("rev-parse", "HEAD") or "")
    if page:
        return f"[`sqs-worker-engine`]({page})"
    return f"`sqs-worker-engine` (`engine/` of the template checkout `{origin.removeprefix('file://')}`)"


def template_doc_link(cookiecutter: dict[str, Any], doc: str) -> str:
    """Markdown naming one of the template repository's documents (docs/scaling.md) where it
    is: a link at the commit baked from, or its path in the checkout for a local bake."""
    origin = template_origin(cookiecutter)
    page = web_url(origin, _git("rev-parse", "HEAD") or "", doc, "blob")
    if page:
        return f"[{doc}]({page}) in the template's repository"
    return f"`{doc}` of the template checkout `{origin.removeprefix('file://')}`"


def engine_version() -> str:
    """The engine's version, from its pyproject (the pin the service is baked with)."""
    for line in (ENGINE_DIR / "pyproject.toml").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "version":
            return value.strip().strip('"')
    raise LookupError("no version in engine/pyproject.toml")


# (region prefix, partition, DNS suffix), most specific first. The same data as botocore's
# partitions.json (tests/test_rendering.py holds this table to it), kept here because
# cookiecutter runs without botocore.
PARTITIONS = [
    ("cn-", "aws-cn", "amazonaws.com.cn"),
    ("us-gov-", "aws-us-gov", "amazonaws.com"),
    ("us-isob-", "aws-iso-b", "sc2s.sgov.gov"),
    ("us-isof-", "aws-iso-f", "csp.hci.ic.gov"),
    ("us-iso-", "aws-iso", "c2s.ic.gov"),
    ("eu-isoe-", "aws-iso-e", "cloud.adc-e.uk"),
    ("eusc-", "aws-eusc", "amazonaws.eu"),
]
DEFAULT_PARTITION = ("aws", "amazonaws.com")


def _partition(region: str) -> tuple[str, str]:
    for prefix, name, suffix in PARTITIONS:
        if region.startswith(prefix):
            return name, suffix
    return DEFAULT_PARTITION


def partition(region: str) -> str:
    return _partition(region)[0]


def dns_suffix(region: str) -> str:
    return _partition(region)[1]


PLACEHOLDER_ACCOUNT = "123456789012"
# The large-payload bucket is named by CloudFormation (deploy/aws/queues.yaml's output
# PayloadBucketName); the policy file and the Kubernetes manifests say where it goes. In
# lower case, unlike the other placeholders: it must stay a valid bucket name, which the
# worker's settings insist on.
PAYLOAD_BUCKET_PLACEHOLDER = "change-me-payload-bucket"
# What the ADOT collector's X-Ray exporter calls (AWS's AWSXrayWriteOnlyAccess policy), and
# xray:PutSpans: the worker's own spans straight to X-Ray's OTLP endpoint, the other route.
XRAY_ACTIONS = [
    "xray:GetSamplingRules",
    "xray:GetSamplingTargets",
    "xray:PutSpans",
    "xray:PutTelemetryRecords",
    "xray:PutTraceSegments",
]


def worker_policy(cookiecutter: dict[str, Any], cfn: bool = False) -> dict[str, Any]:
    """The worker's IAM policy: consume its queue, dead-letter to its DLQ, scale-in protection
    for its own ECS tasks (on ECS), its idempotency table (with idempotency).

    `cfn=False`: literal ARNs in the bake's region and partition, account 123456789012 (the
    policy file, for an EKS role or a review). `cfn=True`: ARNs the ECS stack substitutes
    (`Fn::Sub` with the stack's own partition, region, account and cluster)."""
    region = cookiecutter["aws_region"]
    slug = cookiecutter["project_slug"]

    def arn(service: str, resource: str) -> Any:
        if cfn:
            return {"Fn::Sub": f"arn:${{AWS::Partition}}:{service}:${{AWS::Region}}:${{AWS::AccountId}}:{resource}"}
        return f"arn:{partition(region)}:{service}:{region}:{PLACEHOLDER_ACCOUNT}:{resource}"

    queue = cookiecutter["queue_name"]
    statements: list[dict[str, Any]] = [
        {
            "Sid": "ConsumeQueue",
            "Effect": "Allow",
            "Action": [
                "sqs:ChangeMessageVisibility",
                "sqs:DeleteMessage",
                "sqs:GetQueueAttributes",
                "sqs:GetQueueUrl",
                "sqs:ReceiveMessage",
            ],
            "Resource": arn("sqs", queue),
        },
        {
            "Sid": "DeadLetterNonRetryable",
            "Effect": "Allow",
            "Action": ["sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage"],
            "Resource": arn("sqs", load_limits().dlq_name(queue)),
        },
    ]
    if cookiecutter["deploy_target"] != "eks":
        cluster = "${ClusterName}" if cfn else "CHANGE-ME-cluster"
        statements.append(
            {
                # Task ids are not known in advance, so the resource is every task of the
                # cluster; the condition narrows it to this service's tasks (the service
                # propagates its `service` tag to every task it starts).
                "Sid": "ScaleInProtectionWhileBusy",
                "Effect": "Allow",
                "Action": ["ecs:GetTaskProtection", "ecs:UpdateTaskProtection"],
                "Resource": arn("ecs", f"task/{cluster}/*"),
                "Condition": {"StringEquals": {"aws:ResourceTag/service": slug}},
            }
        )
    if cookiecutter["use_idempotency"] == "yes":
        statements.append(
            {
                "Sid": "IdempotencyRecords",
                "Effect": "Allow",
                "Action": ["dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"],
                "Resource": arn("dynamodb", f"table/{slug}-idempotency"),
            }
        )
    if cookiecutter["large_payloads"] == "yes":
        bucket = "${PayloadBucketName}" if cfn else PAYLOAD_BUCKET_PLACEHOLDER
        objects = f"arn:{partition(region)}:s3:::{bucket}/*"
        statements.append(
            {
                # Read offloaded payloads, offload what `send` and the producer send, delete
                # after processing (WORKER_LARGE_PAYLOAD_DELETE). Objects only: no listing.
                "Sid": "LargePayloads",
                "Effect": "Allow",
                "Action": ["s3:DeleteObject", "s3:GetObject", "s3:PutObject"],
                "Resource": {"Fn::Sub": f"arn:${{AWS::Partition}}:s3:::{bucket}/*"} if cfn else objects,
            }
        )
    if cookiecutter["tracing"] == "yes":
        statements.append(
            {
                # The collector beside the worker sends its traces to X-Ray. These actions
                # take no resource: X-Ray authorises them for the account as a whole.
                "Sid": "WriteTraces",
                "Effect": "Allow",
                "Action": XRAY_ACTIONS,
                "Resource": "*",
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


def to_json(value: Any) -> str:
    """Pretty JSON in the order given (Jinja's `tojson` sorts keys and escapes HTML)."""
    return json.dumps(value, indent=2, ensure_ascii=False)


class _Plain(yaml.SafeDumper):
    """Every value written out where it stands: no anchors and aliases for repeated ones."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(value: Any, indent: int = 0) -> str:
    """Block YAML, every line after the first indented by `indent` spaces (the first sits
    where the template puts it)."""
    text = yaml.dump(value, Dumper=_Plain, sort_keys=False, default_flow_style=False, width=1000, allow_unicode=True)
    return text.rstrip("\n").replace("\n", "\n" + " " * indent)


def secrets(cookiecutter: dict[str, Any]) -> list[str]:
    """The owner's secrets (the `secrets` answer: names separated by commas or spaces)."""
    return [name for name in str(cookiecutter.get("secrets") or "").replace(",", " ").split() if name]


def secret_parameter(name: str) -> str:
    """The ECS stack's parameter holding a secret's ARN: DATABASE_URL -> DatabaseUrlSecretArn."""
    return "".join(part.capitalize() for part in name.split("_") if part) + "SecretArn"


def secret_path(cookiecutter: dict[str, Any], name: str) -> str:
    """Where a secret lives in Secrets Manager by the deploy docs' convention:
    `<slug>/<name in lower case, hyphens>` (DATABASE_URL -> orders-worker/database-url)."""
    return f"{cookiecutter['project_slug']}/{name.lower().replace('_', '-')}"


class EngineExtension(Extension):
    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        import observability  # beside this module; it reads limits through load_limits

        limits = load_limits()
        environment.globals["limits"] = limits
        environment.globals["limits_file"] = str(LIMITS_FILE)
        environment.globals["engine_source"] = engine_source
        environment.globals["engine_index"] = engine_index
        environment.globals["engine_index_unnamed"] = engine_index_unnamed
        environment.globals["engine_index_name"] = ENGINE_INDEX
        environment.globals["index_variables"] = INDEX_VARIABLES
        environment.globals["engine_version"] = engine_version()
        environment.globals["template_origin"] = template_origin
        environment.globals["engine_link"] = engine_link
        environment.globals["template_doc_link"] = template_doc_link
        environment.globals["git_credential_helper"] = GIT_CREDENTIAL_HELPER
        environment.globals["template_commit"] = lambda: _git("rev-parse", "HEAD") or ""
        environment.globals["worker_policy"] = worker_policy
        environment.globals["payload_bucket_placeholder"] = PAYLOAD_BUCKET_PLACEHOLDER
        environment.filters["dlq_name"] = limits.dlq_name
        environment.filters["partition"] = partition
        environment.filters["dns_suffix"] = dns_suffix
        environment.filters["to_yaml"] = to_yaml
        environment.filters["to_json"] = to_json
        environment.globals["alerts"] = observability.alerts
        environment.globals["dashboard"] = observability.dashboard
        environment.globals["emf_metrics"] = observability.emf_metrics
        environment.globals["emf_dimensions"] = observability.EMF_DIMENSIONS
        environment.globals["secrets"] = secrets
        environment.globals["secret_path"] = secret_path
        environment.filters["secret_parameter"] = secret_parameter
