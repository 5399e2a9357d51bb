"""Readers and validators for the generated service's deployment artifacts.

Each validator returns the problems it found (an empty list: valid), so a test can assert
`== []` on a good artifact and show it non-empty on a broken one (test_artifacts_*.py do
both). The facts the artifacts are held against come from the engine, never from a
rendered file: its metrics here, its limits and settings through tests/matrix.py and
sqs_worker_engine.process.settings.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import botocore.loaders
import botocore.session
import jsonschema
import kubernetes_validate
import pytest
import yaml
from botocore.validate import ParamValidator
from conftest import ROOT, run

PLACEHOLDER_ACCOUNT = "123456789012"
# What the ADOT collector's X-Ray exporter calls (AWS's AWSXrayWriteOnlyAccess managed policy).
XRAY_ACTIONS = (
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "xray:GetSamplingRules",
    "xray:GetSamplingTargets",
    "xray:PutSpans",  # the worker's spans straight to X-Ray's OTLP endpoint
)
KEDA_SCHEMA_DIR = Path(os.environ.get("KEDA_SCHEMA_DIR") or ROOT.parent / "shared" / "schemas" / "keda")
# The other operators' CRD schemas (prometheus-operator, external-secrets), one folder each.
CRD_SCHEMA_DIR = Path(os.environ.get("CRD_SCHEMA_DIR") or ROOT.parent / "shared" / "schemas")
K8S_VERSIONS = ["1.29.0", kubernetes_validate.latest_version()]


# --- readers ----------------------------------------------------------------------------------


class CfnLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short-form intrinsics (!Ref, !Sub, ...) as plain mappings."""


def _intrinsic(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{suffix}": value}


CfnLoader.add_multi_constructor("!", _intrinsic)


def load_cfn(path: Path) -> dict[str, Any]:
    return yaml.load(path.read_text(), Loader=CfnLoader)


def load_k8s(project: Path, folder: str = "") -> dict[str, dict[str, Any]]:
    """Every object in deploy/k8s (or its `folder`), by kind (one object of each kind), but
    ConfigMaps by `ConfigMap/<name>` (the settings and the collector's configuration)."""
    objects: dict[str, dict[str, Any]] = {}
    for path in sorted((project / "deploy" / "k8s" / folder).glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                key = f"ConfigMap/{doc['metadata']['name']}" if doc["kind"] == "ConfigMap" else doc["kind"]
                assert key not in objects, f"two {key} objects"
                objects[key] = doc
    return objects


def load_workflow(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    if True in data:  # YAML 1.1 reads the key `on` as a boolean
        data["on"] = data.pop(True)
    return data


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        instruction, _, args = buf.partition(" ")
        out.append((instruction.upper(), " ".join(args.split())))
        buf = ""
    assert not buf, "Dockerfile ends inside a continuation line"
    return out


def dockerfile_stages(text: str) -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for instruction, args in dockerfile_instructions(text):
        if instruction == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((instruction, args))
    return stages


def image_repository(image: str) -> str:
    """`registry/path/name:tag` -> `name`."""
    return image.rsplit("/", 1)[-1].split("@", 1)[0].split(":", 1)[0]


def seconds(duration: str | int) -> float:
    """Compose durations: `105s`, `1m30s`, or a number of seconds."""
    if isinstance(duration, int):
        return duration
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?", duration)
    assert parts and any(parts.groups()), f"not a duration: {duration!r}"
    hours, minutes, secs = (float(g) if g else 0.0 for g in parts.groups())
    return hours * 3600 + minutes * 60 + secs


def env_file(text: str) -> dict[str, str]:
    """A KEY=value env file as ECS's EnvironmentFiles and `kubectl create configmap
    --from-env-file` read it: lines starting with # and blank lines left out, the value
    everything after the first =, quotes and all."""
    found: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, equals, value = line.partition("=")
        assert equals and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key), f"line {number} is not KEY=value: {line!r}"
        found[key] = value
    return found


def env_list(items: list[dict[str, Any]]) -> dict[str, str]:
    """The plain values of a container's environment, by name. An entry read from a Secret
    (`valueFrom`) is no plain value: left out (the tests of secrets read those)."""
    out: dict[str, str] = {}
    seen: set[str] = set()
    for item in items:
        assert item["name"] not in seen, f"{item['name']} set twice"
        seen.add(item["name"])
        if "valueFrom" not in item:
            out[item["name"]] = item["value"]
    return out


# --- what the engine exports -------------------------------------------------------------------

_METRICS_SCRIPT = """
import json
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase
from sqs_worker_engine.base.telemetry import metrics
collectors = [c for c in vars(metrics).values() if isinstance(c, MetricWrapperBase)]
collectors.append(metrics.enable_db_pool_gauge(CollectorRegistry()))  # registered with DB_POOL_SIZE only
collectors.append(metrics.enable_jobs_left_gauge(CollectorRegistry()))  # with WORKER_MAX_JOBS only
print(json.dumps({m.name: m.type for c in collectors for m in c.describe()}))
"""


@functools.cache
def engine_metrics() -> dict[str, str]:
    """The engine's metrics as PromQL names them (counters with `_total`, info with `_info`),
    with their kind. Read from sqs_worker_engine.base.telemetry.metrics in a process of its
    own, so that registering the optional gauges touches nothing here."""
    result = run([sys.executable, "-c", _METRICS_SCRIPT], ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    suffix = {"counter": "_total", "info": "_info"}
    return {name + suffix.get(kind, ""): kind for name, kind in json.loads(result.stdout).items()}


@functools.cache
def engine_metric_labels() -> dict[str, tuple[str, ...]]:
    """Each engine metric's labels, by its name as engine_metrics() gives it."""
    script = _METRICS_SCRIPT.replace(
        "print(json.dumps({m.name: m.type for c in collectors for m in c.describe()}))",
        "print(json.dumps({m.name: [m.type, list(c._labelnames)] for c in collectors for m in c.describe()}))",
    )
    result = run([sys.executable, "-c", script], ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    suffix = {"counter": "_total", "info": "_info"}
    return {name + suffix.get(kind, ""): tuple(labels) for name, (kind, labels) in json.loads(result.stdout).items()}


def metric_series() -> set[str]:
    """Every series name a query may select: the metrics, and each histogram's parts."""
    names = set(engine_metrics())
    for name, kind in engine_metrics().items():
        if kind == "histogram":
            names |= {f"{name}_{part}" for part in ("bucket", "sum", "count")}
    return names


# --- validators ------------------------------------------------------------------------------


def tool(name: str) -> str:
    """A validator from the template's own environment (`make install` provides them) or
    from the scanners' (`make scanners`: checkov, zizmor)."""
    dirs = os.pathsep.join(str(ROOT / venv / "bin") for venv in (".venv", ".venv-scanners"))
    path = shutil.which(name, path=dirs) or shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is missing: run `make install scanners` (the test target does)")
    return path


def _tool_problems(cmd: list[str], cwd: Path, timeout: float = 120) -> list[str]:
    result = run(cmd, cwd=cwd, timeout=timeout)
    return [] if result.returncode == 0 else (result.stdout + result.stderr).splitlines()


def hadolint_problems(dockerfile: Path) -> list[str]:
    return _tool_problems(
        [tool("hadolint"), "--no-color", "--failure-threshold", "style", str(dockerfile)], dockerfile.parent
    )


def actionlint_problems(workflow: Path) -> list[str]:
    """actionlint (expressions, contexts, job needs and outputs, action inputs) on a workflow."""
    return _tool_problems([tool("actionlint"), "-no-color", str(workflow)], workflow.parent)


def jsonschema_cli_problems(builtin: str, path: Path) -> list[str]:
    return _tool_problems([tool("check-jsonschema"), "--builtin-schema", builtin, str(path)], path.parent)


@functools.cache
def _api_input(service: str, operation: str) -> Any:
    return botocore.session.get_session().get_service_model(service).operation_model(operation).input_shape


def api_problems(service: str, operation: str, params: dict[str, Any]) -> list[str]:
    """`params` against the AWS API model of `operation` (botocore's, as the SDKs send it)."""
    report = ParamValidator().validate(params, _api_input(service, operation))
    return report.generate_report().splitlines() if report.has_errors() else []


def ecs_problems(task_definition: dict[str, Any]) -> list[str]:
    """A task definition against the ECS API model (RegisterTaskDefinition's input)."""
    return api_problems("ecs", "RegisterTaskDefinition", task_definition)


@functools.cache
def aws_partition(region: str) -> tuple[str, str]:
    """(partition, DNS suffix) of a region, from botocore's partition data."""
    for part in botocore.loaders.Loader().load_data("partitions")["partitions"]:
        if region in part["regions"] or re.match(part["regionRegex"], region):
            return part["id"], part["outputs"]["dnsSuffix"]
    raise LookupError(region)


def cfn_resolve(value: Any, names: dict[str, Any]) -> Any:
    """A CloudFormation value with its intrinsics resolved: `Ref` and `Fn::Sub` variables from
    `names` (parameter defaults, pseudo parameters, resource placeholders), `Fn::GetAtt` as
    the names entry `Resource.Attribute`, `Fn::If` by the template's condition (`names`
    entry `Condition:<name>`) evaluated over `names`, `Fn::Split` and `Fn::Select`, and
    `AWS::NoValue` removing its key or item. Any other intrinsic is left for the caller to see."""
    if isinstance(value, list):
        items = [cfn_resolve(item, names) for item in value]
        return [item for item in items if item is not None]
    if not isinstance(value, dict):
        return value
    if set(value) == {"Ref"}:
        return names[value["Ref"]]
    if set(value) == {"Fn::GetAtt"}:
        return names[".".join(value["Fn::GetAtt"])]
    if set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
        return re.sub(r"\$\{([^}!]+)\}", lambda m: str(names[m.group(1)]), value["Fn::Sub"])
    if set(value) == {"Fn::Split"}:
        separator, text = value["Fn::Split"]
        return str(cfn_resolve(text, names)).split(separator)
    if set(value) == {"Fn::Select"}:
        index, items = value["Fn::Select"]
        return cfn_resolve(items, names)[int(index)]
    if set(value) == {"Fn::If"}:
        condition, then, otherwise = value["Fn::If"]
        return cfn_resolve(then if cfn_condition(names[f"Condition:{condition}"], names) else otherwise, names)
    resolved = {key: cfn_resolve(item, names) for key, item in value.items()}
    return {key: item for key, item in resolved.items() if item is not None}


def cfn_condition(expression: Any, names: dict[str, Any]) -> bool:
    """A condition of the template's Conditions section, over `names`."""
    if set(expression) in ({"Condition"}, {"Fn::Condition"}):  # the long form, and the `!Condition` tag
        return cfn_condition(names[f"Condition:{next(iter(expression.values()))}"], names)
    (function, args), *_ = expression.items()
    if function == "Fn::Not":
        return not cfn_condition(args[0], names)
    if function == "Fn::And":
        return all(cfn_condition(arg, names) for arg in args)
    if function == "Fn::Or":
        return any(cfn_condition(arg, names) for arg in args)
    if function == "Fn::Equals":
        left, right = (cfn_resolve(arg, names) for arg in args)
        return bool(left == right)
    raise ValueError(f"not a condition function: {function}")


def cfn_names(template: dict[str, Any], region: str, resources: dict[str, Any] | None = None) -> dict[str, Any]:
    """What `cfn_resolve` substitutes: every parameter's default (a placeholder for one without),
    the pseudo parameters for `region` and the placeholder account, and `resources` (Ref and
    GetAtt values of the template's own resources)."""
    partition, suffix = aws_partition(region)
    names: dict[str, Any] = {
        "AWS::AccountId": PLACEHOLDER_ACCOUNT,
        "AWS::Region": region,
        "AWS::Partition": partition,
        "AWS::URLSuffix": suffix,
        "AWS::StackName": "stack",
        "AWS::NoValue": None,
    }
    for name, parameter in template.get("Parameters", {}).items():
        # In lower case: a value that must be a bucket name still is one.
        placeholder: Any = (
            ["subnet-0123456789abcdef0"] if parameter["Type"].startswith("List<") else f"{name.lower()}-value"
        )
        names[name] = parameter.get("Default", placeholder)
    for name, expression in template.get("Conditions", {}).items():
        names[f"Condition:{name}"] = expression
    names.update(resources or {})
    return names


def api_shape(properties: Any) -> Any:
    """CloudFormation property names as the ECS API spells them (`ContainerDefinitions` ->
    `containerDefinitions`): the two differ only in that letter. (Application Auto
    Scaling's API spells them as CloudFormation does.)"""
    if isinstance(properties, list):
        return [api_shape(item) for item in properties]
    if isinstance(properties, dict):
        return {key[:1].lower() + key[1:]: api_shape(item) for key, item in properties.items()}
    return properties


def cfn_problems(path: Path, region: str) -> list[str]:
    from cfnlint.api import ManualArgs, lint_file  # imported on first use: it takes seconds

    # Informational checks too: "clean" means cfn-lint has nothing at all to say.
    matches = lint_file(path, config=ManualArgs(regions=[region], include_checks=["I"]))
    return [str(match) for match in matches]


def k8s_problems(obj: dict[str, Any]) -> list[str]:
    problems = []
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{obj['kind']} (Kubernetes {version}): {exc.message} at {list(exc.path)}")
    return problems


def keda_schema_dir() -> Path:
    """The KEDA CRD schemas (KEDA_SCHEMA_DIR); the test skips, visibly, without them."""
    if not KEDA_SCHEMA_DIR.is_dir():
        pytest.skip(f"KEDA CRD schemas not found at {KEDA_SCHEMA_DIR} (set KEDA_SCHEMA_DIR)")
    return KEDA_SCHEMA_DIR


def crd_schema_dir(operator: str) -> Path:
    """One operator's CRD schemas (CRD_SCHEMA_DIR/<operator>); the test skips, visibly, without them."""
    path = CRD_SCHEMA_DIR / operator
    if not path.is_dir():
        pytest.skip(f"{operator} CRD schemas not found at {path} (set CRD_SCHEMA_DIR)")
    return path


def keda_problems(obj: dict[str, Any], schema_dir: Path) -> list[str]:
    return crd_problems(obj, schema_dir)


def crd_problems(obj: dict[str, Any], schema_dir: Path, check_schema: bool = True) -> list[str]:
    """A custom resource against its CRD's schema (`<kind>_<version>.json` in `schema_dir`).
    `check_schema=False` for a schema whose patterns are Go's regular expressions that Python's
    cannot compile (prometheus-operator's `^(?i)(abort|warn)?$`): the metaschema check would
    fail on the dialect, while the patterns of the fields an object sets still apply."""
    schema_file = schema_dir / f"{obj['kind'].lower()}_{obj['apiVersion'].split('/')[1]}.json"
    schema = json.loads(schema_file.read_text())
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    if check_schema:
        validator_class.check_schema(schema)
    return [f"{obj['kind']}: {e.message} at {list(e.absolute_path)}" for e in validator_class(schema).iter_errors(obj)]


PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless"}
PROMQL_KEYWORDS |= {"offset", "inf", "nan", "Inf", "NaN"}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression reads (functions, keywords and label names excluded)."""
    s = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)
    s = re.sub(r"\{[^{}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\boffset\s+\w+", " ", s)
    s = re.sub(r"(?<![\w:])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?", " ", s)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        if s[match.end() :].lstrip().startswith("(") or match.group() in PROMQL_KEYWORDS:
            continue
        names.add(match.group())
    return names


def unknown_metrics(expr: str) -> set[str]:
    """The names in `expr` the engine does not export (a query that reads no metric at all
    is reported too)."""
    names = promql_metric_names(expr)
    if not names:
        return {"<no metric at all>"}
    return names - metric_series()


def promtool_problems(rules_file: Path) -> list[str] | None:
    """`promtool check rules`; None when promtool is not installed."""
    promtool = shutil.which("promtool")
    if promtool is None:
        return None
    return _tool_problems([promtool, "check", "rules", str(rules_file)], rules_file.parent, timeout=60)


def rule_structure_problems(doc: dict[str, Any]) -> list[str]:
    """What promtool would reject in structure (the fallback where promtool is missing)."""
    problems = []
    groups = doc.get("groups")
    if not isinstance(groups, list) or not groups:
        return ["no rule groups"]
    for group in groups:
        for rule in group.get("rules") or [{}]:
            name = rule.get("alert") or rule.get("record")
            if not name or not isinstance(rule.get("expr"), str):
                problems.append(f"rule without a name or expression: {rule}")
                continue
            expr = rule["expr"]
            for open_, close in ("()", "[]", "{}"):
                if expr.count(open_) != expr.count(close):
                    problems.append(f"{name}: unbalanced {open_}{close} in {expr!r}")
            if "for" in rule and not re.fullmatch(r"(\d+[smhdwy])+", str(rule["for"])):
                problems.append(f"{name}: bad duration {rule['for']!r}")
            if "alert" in rule and "severity" not in (rule.get("labels") or {}):
                problems.append(f"{name}: no severity label")
    return problems


def check_rules(path: Path) -> list[str]:
    """The structure check, and promtool where it is installed (a warning where it is not)."""
    problems = rule_structure_problems(yaml.safe_load(path.read_text()))
    promtool = promtool_problems(path)
    if promtool is None:
        warnings.warn(
            "promtool is not installed (Debian package `prometheus`): Prometheus rules got the structure check only",
            stacklevel=2,
        )
    else:
        problems += promtool
    return problems


def policy_problems(
    policy: dict[str, Any],
    *,
    region: str,
    queue: str,
    dlq: str,
    ecs: str | None,
    table: str | None,
    bucket: str | None = None,
    tracing: bool = False,
) -> list[str]:
    """Exactly the permissions the worker needs, on exactly its resources, in its region's
    partition: its queue, its dead-letter queue, ECS scale-in protection on the tasks of
    service `ecs` (on ECS), the idempotency `table` if any, the objects (never the listing)
    of the large-payload `bucket` if any, X-Ray's write actions with `tracing` (which X-Ray
    authorises on "*" only: the one resource wildcard besides the tasks')."""
    partition = aws_partition(region)[0]
    sqs = f"arn:{partition}:sqs:{region}:{PLACEHOLDER_ACCOUNT}:"
    expected = {
        sqs + queue: {
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:ChangeMessageVisibility",
            "sqs:GetQueueAttributes",
            "sqs:GetQueueUrl",
        },
        sqs + dlq: {"sqs:SendMessage", "sqs:GetQueueUrl", "sqs:GetQueueAttributes"},
    }
    # The worker holds ECS scale-in protection while busy: task ids are not known in advance
    # (the one wildcard allowed), so the statement is narrowed to its own service's tasks by
    # the tag the service propagates to them.
    ecs_tasks = f"arn:{partition}:ecs:{region}:{PLACEHOLDER_ACCOUNT}:task/CHANGE-ME-cluster/*"
    conditions = {}
    if ecs is not None:
        expected[ecs_tasks] = {"ecs:GetTaskProtection", "ecs:UpdateTaskProtection"}
        conditions[ecs_tasks] = {"StringEquals": {"aws:ResourceTag/service": ecs}}
    if table is not None:
        arn = f"arn:{partition}:dynamodb:{region}:{PLACEHOLDER_ACCOUNT}:table/{table}"
        expected[arn] = {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}
    objects = f"arn:{partition}:s3:::{bucket}/*"
    if bucket is not None:
        expected[objects] = {"s3:GetObject", "s3:PutObject", "s3:DeleteObject"}
    if tracing:
        expected["*"] = set(XRAY_ACTIONS)
    problems = []
    if policy.get("Version") != "2012-10-17":
        problems.append(f"policy Version {policy.get('Version')!r}")
    granted: dict[str, set[str]] = {}
    for statement in policy.get("Statement", []):
        extra = set(statement) - {"Sid", "Effect", "Action", "Resource", "Condition"}
        if extra or statement.get("Effect") != "Allow":
            problems.append(f"unexpected statement shape: {statement}")
            continue
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        for item in actions + resources:
            if ("*" in item or "?" in item) and item not in (ecs_tasks, objects) and not (item == "*" and tracing):
                problems.append(f"wildcard {item!r}")
        for resource in resources:
            granted.setdefault(resource, set()).update(actions)
            if statement.get("Condition") != conditions.get(resource):
                problems.append(
                    f"{resource}: condition {statement.get('Condition')}, expected {conditions.get(resource)}"
                )
    if granted != expected:
        problems.append(f"granted {granted}, expected exactly {expected}")
    return problems
