"""The generated service's deployment artifacts: each checked by the tool its platform uses,
and all of them checked against the answers and against each other.

Every answer set tests/matrix.py checks at depth "full" or "checked" is baked once per
test process (conftest's `projects`, shared with test_readmes) and every validator runs on every deploy target it applies to; every supported set
is baked to show that the files of a target that was not chosen do not exist. The
validators (tests/validators.py) are shown to reject a broken artifact
(`test_validators_reject_defects`), so a green run means the checks looked, not that they
could not fail. Facts come from the engine (`LIMITS`, its settings, its metrics) and the
service's defaults from the baked service itself, imported: nothing is recovered by
parsing rendered code.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import shutil
import sys
import tomllib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from conftest import ROOT, run
from matrix import COOKIECUTTER, LIMITS, SUPPORTED, names
from sqs_worker_engine import emulators as engine_emulators
from sqs_worker_engine.settings import _ALIASES, ServiceDefaults, load_settings
from validators import (
    PLACEHOLDER_ACCOUNT,
    actionlint_problems,
    api_problems,
    api_shape,
    aws_partition,
    cfn_names,
    cfn_problems,
    cfn_resolve,
    check_rules,
    crd_problems,
    crd_schema_dir,
    dockerfile_instructions,
    dockerfile_stages,
    ecs_problems,
    engine_metric_labels,
    engine_metrics,
    env_list,
    hadolint_problems,
    image_repository,
    jsonschema_cli_problems,
    k8s_problems,
    keda_problems,
    keda_schema_dir,
    load_cfn,
    load_k8s,
    load_workflow,
    policy_problems,
    promql_metric_names,
    seconds,
    unknown_metrics,
)

import local_extensions
import observability
from local_extensions import PAYLOAD_BUCKET_PLACEHOLDER

LOCALSTACK_IMAGE = COOKIECUTTER["_localstack_image"]
UV_VERSION = COOKIECUTTER["_uv_version"]
# What the worker reads: the engine's settings, the variables the AWS SDK reads itself
# (compose passes LocalStack's dummies), and with idempotency the service's idempotency.py.
SDK_VARIABLES = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
IDEMPOTENCY_VARIABLES = {"IDEMPOTENCY_TABLE", "IDEMPOTENCY_TTL_SECONDS"}
# The OpenTelemetry SDK's own (tracing=yes): where spans go, how they are sampled, or off.
OTEL_VARIABLES = {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_EXPORTER"}
COLLECTOR_ENV = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_SAMPLER": "parentbased_always_on"}

COMMON_FILES = {
    "Dockerfile",
    ".dockerignore",
    "docker-compose.yml",
    "docker-compose.moto.yml",
    ".github/workflows/ci.yml",
    ".github/workflows/template-update.yml",
    ".github/workflows/release.yml",
    ".github/dependabot.yml",
    "renovate.json",
    "deploy/README.md",
    "deploy/aws/queues.yaml",
    "deploy/aws/release-roles.yaml",
    "deploy/aws/worker-policy.json",
    "deploy/prometheus/alerts.yaml",
    "deploy/grafana/dashboard.json",
}
ECS_FILES = {"deploy/ecs/service.yaml"}
# Custom resources: held to their operators' CRD schemas, not to Kubernetes' built-in ones.
CUSTOM_RESOURCE_GROUPS = ("keda.sh/", "monitoring.coreos.com/", "external-secrets.io/")
K8S_FILES = {
    "deploy/k8s/serviceaccount.yaml",
    "deploy/k8s/triggerauthentication.yaml",
    "deploy/k8s/service.yaml",
    "deploy/k8s/networkpolicy.yaml",
    "deploy/k8s/namespace.yaml",
    "deploy/k8s/servicemonitor.yaml",
    "deploy/k8s/prometheusrule.yaml",
    "deploy/k8s/settings.yaml",
    "deploy/k8s/optional/external-secrets.yaml",
}
K8S_TRACING_FILES = {"deploy/k8s/otel-collector.yaml"}  # with tracing=yes
# kubernetes_workload: long-lived pods scaled by KEDA, or one Job per message.
K8S_DEPLOYMENT_FILES = {
    "deploy/k8s/deployment.yaml",
    "deploy/k8s/scaledobject.yaml",
    "deploy/k8s/poddisruptionbudget.yaml",
}
K8S_SCALEDJOB_FILES = {"deploy/k8s/scaledjob.yaml"}
# What the ScaledJob's pods add to the environment: one job, an idle exit, the last poll waited out.
SCALEDJOB_ENV = {"WORKER_MAX_JOBS": "1", "WORKER_IDLE_EXIT_SECONDS": "60", "WORKER_DRAIN_POLLS": "true"}


def context(given: dict[str, str]) -> dict[str, str]:
    """cookiecutter.json under `given`: a choice's first option, a derived default
    (project_slug, package_name, queue_name) rendered from the answers before it."""
    out: dict[str, str] = {}
    for key, default in COOKIECUTTER.items():
        if key.startswith("_"):
            continue
        if key in given:
            out[key] = given[key]
        elif isinstance(default, list):
            out[key] = default[0]
        else:
            out[key] = jinja2.Template(default).render(cookiecutter=out)
    return out


@dataclass(frozen=True)
class Answers:
    """The answers a project was baked with, cookiecutter.json's defaults filled in."""

    name: str
    slug: str
    package: str
    python: str
    region: str
    queue: str
    concurrency: int
    visibility: int
    job_timeout: int
    shutdown: int
    max_receive: int
    port: int
    target: str
    idempotency: bool
    untrusted: bool
    large: bool
    tracing: bool
    workload: str = "deployment"
    fifo_throughput: str = "standard"
    secrets: tuple[str, ...] = ("DATABASE_URL",)

    @classmethod
    def of(cls, given: dict[str, str]) -> Answers:
        c = context(given)
        return cls(
            name=c["project_name"],
            slug=c["project_slug"],
            package=c["package_name"],
            python=c["python_version"],
            region=c["aws_region"],
            queue=c["queue_name"],
            concurrency=int(c["worker_concurrency"]),
            visibility=int(c["visibility_timeout_seconds"]),
            job_timeout=int(c["job_timeout_seconds"]),
            shutdown=int(c["shutdown_timeout_seconds"]),
            max_receive=int(c["max_receive_count"]),
            port=int(c["metrics_port"]),
            target=c["deploy_target"],
            idempotency=c["use_idempotency"] == "yes",
            untrusted=c["untrusted_input"] == "yes",
            large=c["large_payloads"] == "yes",
            tracing=c["tracing"] == "yes",
            workload=c["kubernetes_workload"],
            fifo_throughput=c["fifo_throughput"],
            secrets=tuple(local_extensions.secrets(c)),
        )

    @property
    def scaledjob(self) -> bool:
        """Kubernetes runs a KEDA ScaledJob (one Job per message), not a Deployment."""
        return self.eks and self.workload == "scaledjob"

    @property
    def k8s_files(self) -> set[str]:
        return K8S_FILES | (K8S_SCALEDJOB_FILES if self.scaledjob else K8S_DEPLOYMENT_FILES)

    @property
    def ecs(self) -> bool:
        return self.target != "eks"

    @property
    def eks(self) -> bool:
        return self.target != "ecs"

    @property
    def dlq(self) -> str:
        return LIMITS.dlq_name(self.queue)

    @property
    def grace(self) -> int:
        """ECS stopTimeout and Kubernetes terminationGracePeriodSeconds."""
        return self.shutdown + LIMITS.GRACE_MARGIN_SECONDS

    @property
    def max_replicas(self) -> int:
        return LIMITS.max_replicas(self.concurrency)

    @property
    def table(self) -> str | None:
        return f"{self.slug}-idempotency" if self.idempotency else None

    @property
    def stalled_after(self) -> int:
        """The liveness threshold the engine picks itself for this job timeout (the deploy
        files spell it out, for the probes and the stall alert)."""
        config = load_settings(
            {
                "WORKER_QUEUES": self.queue,
                "WORKER_JOB_TIMEOUT_MS": str(self.job_timeout * 1000),
                "WORKER_SHUTDOWN_TIMEOUT_MS": str(self.shutdown * 1000),
            }
        )
        assert config.stalled_after.is_integer(), config.stalled_after
        return int(config.stalled_after)

    @property
    def variables(self) -> set[str]:
        """Every environment variable the worker reads (its owner's secrets among them)."""
        return (
            set(_ALIASES)
            | set(self.secrets)
            | SDK_VARIABLES
            | (IDEMPOTENCY_VARIABLES if self.idempotency else set())
            | (OTEL_VARIABLES if self.tracing else set())
        )

    def env(self, bucket: str | None = None, collector: bool = True) -> dict[str, str]:
        """The environment every deployment gives the worker; with large payloads, the
        deployment's `bucket` too (each names it its own way: a stack parameter, a
        placeholder, LocalStack's); with tracing, the way to the `collector` beside it, or
        tracing off where none runs (compose)."""
        large = {"WORKER_LARGE_PAYLOAD_BUCKET": bucket} if self.large and bucket else {}
        assert self.large == bool(large) or bucket is None, "large payloads: say the deployment's bucket"
        otel = {} if not self.tracing else COLLECTOR_ENV if collector else {"OTEL_TRACES_EXPORTER": "none"}
        return (
            large
            | otel
            | {
                "WORKER_QUEUES": self.queue,
                "WORKER_CONCURRENCY": str(self.concurrency),
                "WORKER_JOB_TIMEOUT_MS": str(self.job_timeout * 1000),
                "WORKER_SHUTDOWN_TIMEOUT_MS": str(self.shutdown * 1000),
                "WORKER_VISIBILITY_TIMEOUT_SECONDS": str(self.visibility),
                "WORKER_HEARTBEAT_FRACTION": "0.5",
                "WORKER_MAX_RECEIVE_COUNT": str(self.max_receive),
                "WORKER_METRICS_HOST": "0.0.0.0",
                "WORKER_METRICS_PORT": str(self.port),
                "WORKER_HEALTH_FILE": f"/tmp/{self.slug}.progress",
                "WORKER_STALLED_AFTER_SECONDS": str(self.stalled_after),
                "OTEL_SERVICE_NAME": self.slug,
                "AWS_REGION": self.region,
                "LOG_LEVEL": "INFO",
                "LOG_PAYLOADS": "false",
            }
        )

    def policy_problems(self, policy: dict[str, Any]) -> list[str]:
        return policy_problems(
            policy,
            region=self.region,
            queue=self.queue,
            dlq=self.dlq,
            ecs=self.slug if self.ecs else None,
            table=self.table,
            bucket=PAYLOAD_BUCKET_PLACEHOLDER if self.large else None,
            tracing=self.tracing,
        )


ANSWERS = {key: Answers.of(combo.answers) for key, combo in SUPPORTED.items()}
CHECKED = names("full", "checked", "artifacts")
ECS_SETS = [key for key in CHECKED if ANSWERS[key].ecs]
EKS_SETS = [key for key in CHECKED if ANSWERS[key].eks]
assert {ANSWERS[key].target for key in CHECKED} == set(COOKIECUTTER["deploy_target"]), "a target goes unchecked"
assert {ANSWERS[key].workload for key in EKS_SETS} == set(COOKIECUTTER["kubernetes_workload"]), (
    "a workload goes unchecked"
)


_SERVICE_SCRIPT = """
import json
from {package}.handlers import router
from {package}.service import SERVICE
print(json.dumps({{"name": SERVICE.name, "environ": dict(SERVICE.environ), "secrets": SERVICE.secrets, "queues": router.queues}}))
"""


def baked_service(project: Path, answers: Answers) -> tuple[ServiceDefaults, list[str]]:
    """The baked service's SERVICE and the queues its router serves, as it imports them."""
    result = run(
        [sys.executable, "-c", _SERVICE_SCRIPT.format(package=answers.package)],
        project,
        timeout=120,
        PYTHONPATH=str(project / "src"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(result.stdout)
    service = ServiceDefaults(name=data["name"], environ=data["environ"], secrets=tuple(data["secrets"]))
    return service, data["queues"]


# --- every artifact, per answer set ----------------------------------------------------------


@pytest.mark.parametrize("key", list(SUPPORTED))
def test_files_follow_deploy_target(projects: dict[str, Path], key: str) -> None:
    project, answers = projects[key], ANSWERS[key]
    assert project.name == answers.slug
    expected = set(COMMON_FILES)
    if answers.ecs:
        expected |= ECS_FILES
    if answers.eks:
        expected |= answers.k8s_files | (K8S_TRACING_FILES if answers.tracing else set())
    for rel in expected:
        assert (project / rel).is_file(), f"{rel} missing for deploy_target={answers.target}"
    absent = (ECS_FILES | K8S_FILES | K8S_TRACING_FILES | K8S_DEPLOYMENT_FILES | K8S_SCALEDJOB_FILES) - expected
    for rel in absent:
        assert not (project / rel).exists(), f"{rel} generated for deploy_target={answers.target}"
    deploy_files = {p.relative_to(project).as_posix() for p in (project / "deploy").rglob("*") if p.is_file()}
    assert deploy_files == {rel for rel in expected if rel.startswith("deploy/")}
    for rel in expected:
        text = (project / rel).read_text()
        for leftover in ("cookiecutter", "{%", "%}", "{#"):
            assert leftover not in text, f"{rel}: unrendered template syntax {leftover!r}"


@pytest.mark.parametrize("key", CHECKED)
def test_dockerfile(projects: dict[str, Path], key: str) -> None:
    project, answers = projects[key], ANSWERS[key]
    dockerfile = project / "Dockerfile"
    assert hadolint_problems(dockerfile) == []

    stages = dockerfile_stages(dockerfile.read_text())
    assert len(stages) >= 2, "multi-stage build expected"
    bases = [stage[0][1].split()[0] for stage in stages]
    # Every base image pinned by digest (a tag can be moved; a digest cannot), the tag kept
    # beside it for readers and for Dependabot.
    for base in bases:
        assert re.fullmatch(r"[\w.:/-]+@sha256:[0-9a-f]{64}", base), f"{base} is not pinned by digest"
    dependabot = yaml.safe_load((project / ".github" / "dependabot.yml").read_text())
    assert {"package-ecosystem": "docker", "directory": "/"}.items() <= next(
        u for u in dependabot["updates"] if u["package-ecosystem"] == "docker"
    ).items(), "Dependabot keeps the digests current"
    tags = [base.split("@", 1)[0] for base in bases]
    assert set(tags) <= {f"python:{answers.python}", f"python:{answers.python}-slim"}, tags
    assert tags[-1] == f"python:{answers.python}-slim", "the runtime stage is the slim image"
    assert (project / ".python-version").read_text().strip() == answers.python
    final = stages[-1]
    by_kind: dict[str, list[str]] = {}
    for instruction, args in final:
        by_kind.setdefault(instruction, []).append(args)
    # Nothing is built or installed in the runtime stage: it only receives the venv.
    # The build stage's uv is the one CI runs (cookiecutter.json's _uv_version, everywhere).
    (build_uv,) = re.findall(r"\buv==(\S+)", " ".join(args for stage in stages for _, args in stage))
    assert build_uv == UV_VERSION
    runs = " ".join(by_kind.get("RUN", []))
    assert not re.search(r"\b(uv|pip|apt-get|gcc|make)\b", runs), f"build tooling in the final stage: {runs}"
    copies = by_kind.get("COPY", [])
    assert copies and all(c.startswith("--from=") for c in copies), copies
    assert by_kind["USER"] == ["10001:10001"]
    assert json.loads(by_kind["ENTRYPOINT"][-1]) == ["python", "-m", answers.package]
    assert json.loads(by_kind["CMD"][-1]) == ["run"]
    healthcheck = by_kind["HEALTHCHECK"][-1]
    command = json.loads(healthcheck.split(" CMD ", 1)[1])
    assert command == ["python", "-m", answers.package, "healthcheck"]
    env = " ".join(by_kind.get("ENV", []))
    for setting in (
        "PYTHONDONTWRITEBYTECODE=1",
        "PYTHONUNBUFFERED=1",
        f"WORKER_HEALTH_FILE=/tmp/{answers.slug}.progress",
    ):
        assert setting in env, f"ENV {setting} missing"
    assert f"WORKER_METRICS_PORT={answers.port}" in env
    assert by_kind["EXPOSE"] == [str(answers.port)]
    assert json.loads(by_kind["VOLUME"][-1]) == ["/tmp"]

    # The build context: everything is ignored except what the Dockerfile copies in.
    ignore = [
        line.strip()
        for line in (project / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ignore[0] == "**"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for stage in stages:
        for instruction, args in stage:
            if instruction == "COPY" and not args.startswith("--from="):
                for source in args.split()[:-1]:
                    assert source.rstrip("*/") in allowed, f"COPY {source} is excluded by .dockerignore"


@pytest.mark.parametrize("key", CHECKED)
def test_compose(projects: dict[str, Path], key: str) -> None:
    project, answers = projects[key], ANSWERS[key]
    path = project / "docker-compose.yml"
    assert jsonschema_cli_problems("vendor.compose-spec", path) == []
    services = yaml.safe_load(path.read_text())["services"]

    localstack = services["localstack"]
    assert localstack["image"] == LOCALSTACK_IMAGE == engine_emulators.IMAGE
    assert re.fullmatch(r"localstack/localstack:[\d.]+@sha256:[0-9a-f]{64}", LOCALSTACK_IMAGE), "pin by digest"
    assert "sqs" in localstack["environment"]["SERVICES"].split(",")
    assert localstack["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL")

    bootstrap, worker = services["bootstrap"], services["worker"]
    assert bootstrap["command"] == ["bootstrap"]
    assert bootstrap["depends_on"]["localstack"]["condition"] == "service_healthy"
    assert worker["depends_on"]["bootstrap"]["condition"] == "service_completed_successfully"
    assert worker["init"] is True
    assert seconds(worker["stop_grace_period"]) > answers.shutdown
    # Published for this machine only, never for every interface of the host.
    assert [str(p) for p in worker["ports"]] == [f"127.0.0.1:{answers.port}:{answers.port}"]
    assert [str(p) for p in localstack["ports"]] == ["127.0.0.1:${LOCALSTACK_PORT:-4566}:4566"]
    assert worker["read_only"] is True and "/tmp" in worker["tmpfs"]
    for service in (bootstrap, worker):
        assert image_repository(service["image"]) == answers.slug
        env = {k: str(v) for k, v in service["environment"].items()}
        assert env.pop("AWS_ENDPOINT_URL") == "http://localstack:4566"
        assert env.pop("AWS_ACCESS_KEY_ID") == "test" and env.pop("AWS_SECRET_ACCESS_KEY") == "test"
        assert env == answers.env(bucket="local-payloads", collector=False)


@pytest.mark.parametrize("key", CHECKED)
def test_compose_takes_motos_server_in_localstacks_place(projects: dict[str, Path], key: str) -> None:
    """`SQS_EMULATOR=moto make up` adds docker-compose.moto.yml: moto's server under
    LocalStack's service name and port (bootstrap and the worker unchanged), built from PyPI
    at the version the suite's own moto is locked at."""
    project = projects[key]
    path = project / "docker-compose.moto.yml"
    assert jsonschema_cli_problems("vendor.compose-spec", path) == []
    (name,) = yaml.safe_load(path.read_text())["services"]
    moto = yaml.safe_load(path.read_text())["services"][name]
    assert name == "localstack", "the worker's AWS_ENDPOINT_URL and depends_on name this service"
    assert moto["command"][:1] == ["moto_server"] and moto["command"][-2:] == ["-p", "4566"]
    assert "@sha256:" not in moto["image"], "a local tag: LocalStack's digest must not name a moto build"
    locked = tomllib.loads((ROOT / "uv.lock").read_text())["package"]
    (version,) = [p["version"] for p in locked if p["name"] == "moto"]
    assert f'"moto[server]=={COOKIECUTTER["_moto_version"]}"' in moto["build"]["dockerfile_inline"]
    assert COOKIECUTTER["_moto_version"] == version, "the compose file's moto is the one the suite tests"
    assert "moto-api" in " ".join(moto["healthcheck"]["test"])
    makefile = (project / "Makefile").read_text()
    assert "-f docker-compose.yml -f docker-compose.moto.yml" in makefile and "SQS_EMULATOR" in makefile


# Placeholders for what the ECS stack's own resources resolve to (Ref and GetAtt).
ECS_RESOURCES = {
    "LogGroup": "/ecs/log-group",
    "LogGroup.Arn": f"arn:aws:logs:us-east-1:{PLACEHOLDER_ACCOUNT}:log-group:/ecs/log-group:*",
    "ExecutionRole.Arn": f"arn:aws:iam::{PLACEHOLDER_ACCOUNT}:role/execution",
    "TaskRole.Arn": f"arn:aws:iam::{PLACEHOLDER_ACCOUNT}:role/task",
    "SecurityGroup.GroupId": "sg-0123456789abcdef0",
    "TaskDefinition": f"arn:aws:ecs:us-east-1:{PLACEHOLDER_ACCOUNT}:task-definition/family:1",
    "Service.Name": "service-name",
    "ScalableTarget": "scalable-target-id",
    "BacklogStepPolicy": (
        f"arn:aws:autoscaling:us-east-1:{PLACEHOLDER_ACCOUNT}:scalingPolicy:00000000-0000-0000-0000-000000000000:"
        "resource/ecs/service/cluster/service-name:policyName/service-name-sqs-backlog-step"
    ),
}


@dataclass(frozen=True)
class EcsStack:
    """deploy/ecs/service.yaml: the template, and each resource's properties resolved and
    spelled as the API takes them (what botocore's models validate)."""

    template: dict[str, Any]
    resources: dict[str, dict[str, Any]]  # by type, the properties as written
    api: dict[str, dict[str, Any]]  # by type, resolved and in API spelling

    @classmethod
    def load(cls, project: Path, region: str) -> EcsStack:
        template = load_cfn(project / "deploy" / "ecs" / "service.yaml")
        names = cfn_names(template, region, ECS_RESOURCES)
        resources: dict[str, dict[str, Any]] = {}
        for resource in template["Resources"].values():
            # Two roles and two log groups (the worker's logs first, then its EMF metrics); two
            # scaling policies (target tracking first, then the step policy).
            repeatable = (
                "AWS::IAM::",
                "AWS::Logs::LogGroup",
                "AWS::CloudWatch::Alarm",
                "AWS::ApplicationAutoScaling::ScalingPolicy",
            )
            assert resource["Type"] not in resources or resource["Type"].startswith(repeatable), resource["Type"]
            resources.setdefault(resource["Type"], resource["Properties"])
        api = {kind: cfn_resolve(props, names) for kind, props in resources.items()}
        api.update({kind: api_shape(props) for kind, props in api.items() if kind.startswith("AWS::ECS::")})
        return cls(template, resources, api)

    def roles(self) -> dict[str, dict[str, Any]]:
        return {
            name: r["Properties"] for name, r in self.template["Resources"].items() if r["Type"] == "AWS::IAM::Role"
        }


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def ecs_task_definition(project: Path, region: str) -> dict[str, Any]:
    return EcsStack.load(project, region).api["AWS::ECS::TaskDefinition"]


@pytest.mark.parametrize("key", ECS_SETS)
def test_ecs_task_definition(projects: dict[str, Path], key: str) -> None:
    project, answers = projects[key], ANSWERS[key]
    stack = EcsStack.load(project, answers.region)
    task = stack.api["AWS::ECS::TaskDefinition"]
    assert ecs_problems(task) == []

    assert task["networkMode"] == "awsvpc" and task["requiresCompatibilities"] == ["FARGATE"]
    fargate_memory = {"256": range(512, 2049, 512), "512": range(1024, 4097, 1024), "1024": range(2048, 8193, 1024)}
    assert int(task["memory"]) in fargate_memory[task["cpu"]], "not a Fargate cpu/memory combination"
    written = stack.resources["AWS::ECS::TaskDefinition"]
    assert written["ExecutionRoleArn"] == {"Fn::GetAtt": ["ExecutionRole", "Arn"]}
    assert written["TaskRoleArn"] == {"Fn::GetAtt": ["TaskRole", "Arn"]}
    containers = {c["name"]: c for c in task["containerDefinitions"]}
    assert set(containers) == {"worker", "otel-collector"}, "the collector: metrics always, traces with tracing"
    container = containers["worker"]
    # Every container's memory within the task's.
    assert sum(c["memory"] for c in containers.values()) <= int(task["memory"])
    assert image_repository(container["image"]) == answers.slug
    suffix = aws_partition(answers.region)[1]
    assert container["image"].startswith(f"{PLACEHOLDER_ACCOUNT}.dkr.ecr.{answers.region}.{suffix}/")
    assert container["essential"] is True and container["command"] == ["run"]
    assert container["stopTimeout"] == answers.grace <= LIMITS.ECS_MAX_STOP_TIMEOUT
    assert container["linuxParameters"]["initProcessEnabled"] is True
    for name, each in containers.items():  # no capability for anything in the task
        assert each.get("linuxParameters", {}).get("capabilities", {}).get("drop") == ["ALL"], name
    assert container["user"] == "10001"
    assert container["readonlyRootFilesystem"] is True
    volumes = {v["name"] for v in task["volumes"]}
    tmp = [m for m in container["mountPoints"] if m["containerPath"] == "/tmp"]
    assert tmp and tmp[0]["sourceVolume"] in volumes and not tmp[0].get("readOnly")
    assert container["memoryReservation"] <= container["memory"] <= int(task["memory"])
    assert [p["containerPort"] for p in container["portMappings"]] == [answers.port]
    assert env_list(container["environment"]) == answers.env(bucket="payloadbucketname-value")

    check = container["healthCheck"]
    assert check["command"] == [
        "CMD",
        "python",
        "-m",
        answers.package,
        "healthcheck",
        f"--stalled-after={answers.stalled_after}",
    ]
    # ECS's documented ranges for container health checks.
    assert 5 <= check["interval"] <= 300 and 2 <= check["timeout"] <= 60
    assert 1 <= check["retries"] <= 10 and 0 <= check["startPeriod"] <= 300

    logs = container["logConfiguration"]
    assert logs["logDriver"] == "awslogs"
    assert logs["options"]["awslogs-region"] == answers.region
    assert written["ContainerDefinitions"][0]["LogConfiguration"]["Options"]["awslogs-group"] == {"Ref": "LogGroup"}
    log_group = stack.resources["AWS::Logs::LogGroup"]
    assert log_group["LogGroupName"] == f"/ecs/{answers.slug}"
    assert stack.template["Parameters"][log_group["RetentionInDays"]["Ref"]]["Default"] >= 1


TRACED = [key for key in CHECKED if ANSWERS[key].tracing]
assert any(ANSWERS[k].ecs for k in TRACED) and any(ANSWERS[k].eks for k in TRACED), "a collector goes unchecked"


@pytest.mark.parametrize("key", TRACED)
def test_collector_sidecar(projects: dict[str, Path], key: str) -> None:
    """tracing=yes: an ADOT collector beside the worker on each platform, started before it
    and stopped after it, OTLP/HTTP in where the worker sends, traces out to X-Ray."""
    project, answers = projects[key], ANSWERS[key]
    endpoint = COLLECTOR_ENV["OTEL_EXPORTER_OTLP_ENDPOINT"].removeprefix("http://")
    if answers.ecs:
        config = ecs_collector_config(project, answers.region)
        assert config["receivers"]["otlp"]["protocols"]["http"]["endpoint"] == endpoint
        assert config["exporters"]["awsxray"]["region"] == answers.region
        assert config["service"]["pipelines"]["traces"]["exporters"] == ["awsxray"]
    if answers.eks:
        objects = load_k8s(project)
        spec = worker_pod(objects)["spec"]
        (sidecar,) = spec["initContainers"]
        assert sidecar["restartPolicy"] == "Always", "a native sidecar: up before the worker, down after it"
        assert sidecar["image"] == COOKIECUTTER["_adot_image"]
        security = sidecar["securityContext"]
        assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
        assert security["runAsNonRoot"] is True and security["capabilities"]["drop"] == ["ALL"]
        assert ("cpu" in sidecar["resources"]["limits"]) is answers.untrusted and "memory" in sidecar["resources"][
            "limits"
        ]
        (mount,) = sidecar["volumeMounts"]
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        config_map = objects[f"ConfigMap/{answers.slug}-otel-collector"]
        assert volume["configMap"]["name"] == config_map["metadata"]["name"]
        (arg,) = sidecar["args"]
        path = arg.removeprefix("--config=")
        assert path.startswith(mount["mountPath"] + "/")
        config = yaml.safe_load(config_map["data"][path.rsplit("/", 1)[1]])
        assert config["receivers"]["otlp"]["protocols"]["http"]["endpoint"] == endpoint
        assert config["exporters"]["awsxray"]["region"] == answers.region
        pipeline = config["service"]["pipelines"]["traces"]
        for kind in ("receivers", "processors", "exporters"):
            assert set(pipeline[kind]) <= set(config[kind]), kind
        health = int(config["extensions"]["health_check"]["endpoint"].rsplit(":", 1)[1])
        ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert ports[sidecar[probe]["httpGet"]["port"]] == health, probe


def ecs_collector_config(project: Path, region: str) -> dict[str, Any]:
    """The ECS collector's configuration (its AOT_CONFIG_CONTENT), parsed."""
    task = EcsStack.load(project, region).api["AWS::ECS::TaskDefinition"]
    collector = next(c for c in task["containerDefinitions"] if c["name"] == "otel-collector")
    config: dict[str, Any] = yaml.safe_load(env_list(collector["environment"])["AOT_CONFIG_CONTENT"])
    return config


@pytest.mark.parametrize("key", ECS_SETS)
def test_ecs_collector(projects: dict[str, Path], key: str) -> None:
    """On ECS the ADOT collector beside the worker scrapes its /metrics into CloudWatch (EMF
    in a log group of the stack's, metrics for what the alert rules read); with tracing it
    also sends the worker's spans to X-Ray. Started before the worker, stopped after it,
    never essential, without a capability, in the answer's region."""
    project, answers = projects[key], ANSWERS[key]
    stack = EcsStack.load(project, answers.region)
    containers = {c["name"]: c for c in stack.api["AWS::ECS::TaskDefinition"]["containerDefinitions"]}
    worker, collector = containers["worker"], containers["otel-collector"]
    assert collector["image"] == COOKIECUTTER["_adot_image"]
    assert re.fullmatch(r"[\w.:/-]+:v[\d.]+@sha256:[0-9a-f]{64}", collector["image"]), "pin by digest"
    assert collector["essential"] is False, "a dead collector must not stop the jobs"
    assert "command" not in collector, "its configuration is AOT_CONFIG_CONTENT"
    assert collector["readonlyRootFilesystem"] is True and collector["user"] != "0"
    assert collector["healthCheck"]["command"] == ["CMD", "/healthcheck"]
    assert worker["dependsOn"] == [{"containerName": "otel-collector", "condition": "START"}]
    assert collector["stopTimeout"] < worker["stopTimeout"]
    logs = collector["logConfiguration"]["options"]
    assert logs["awslogs-group"] == worker["logConfiguration"]["options"]["awslogs-group"]
    assert logs["awslogs-region"] == answers.region

    config = ecs_collector_config(project, answers.region)
    (scrape,) = config["receivers"]["prometheus"]["config"]["scrape_configs"]
    assert scrape["job_name"] == answers.slug, "the job label the alert rules select"
    assert scrape["static_configs"] == [{"targets": [f"127.0.0.1:{answers.port}"]}]
    assert seconds(scrape["scrape_interval"]) <= 60
    emf = config["exporters"]["awsemf"]
    assert emf["region"] == answers.region and emf["namespace"] == answers.slug
    metrics_group = stack.template["Resources"]["MetricsLogGroup"]["Properties"]
    assert emf["log_group_name"] == metrics_group["LogGroupName"]
    # CloudWatch metrics for every worker metric the stack's alarms and dashboard read, only
    # engine metrics, each under the label sets it carries (none: a dimensionless metric).
    template = stack.template["Resources"]
    read = {
        m["MetricStat"]["Metric"]["MetricName"]
        for r in template.values()
        if r["Type"] == "AWS::CloudWatch::Alarm"
        for m in r["Properties"].get("Metrics", [])
        if "MetricStat" in m and m["MetricStat"]["Metric"]["Namespace"] == answers.slug
    }
    read |= {
        name
        for r in template.values()
        if r["Type"] == "AWS::CloudWatch::Alarm"
        for m in r["Properties"].get("Metrics", [])
        for name in re.findall(r"SELECT \w+\((\w+)\)", str(m.get("Expression", "")))
    }
    read |= set(re.findall(r"SELECT \w+\((\w+)\)", json.dumps(template["Dashboard"]["Properties"]["DashboardBody"])))
    read |= set(
        re.findall(
            r'"' + re.escape(answers.slug) + r'", "(\w+)"',
            json.dumps(template["Dashboard"]["Properties"]["DashboardBody"]),
        )
    )
    labelled, plain = emf["metric_declarations"]
    declared = {s.strip("^$") for d in (labelled, plain) for s in d["metric_name_selectors"]}
    assert declared == read and declared <= set(engine_metrics()), declared ^ read
    assert plain["dimensions"] == [[]]
    labels = engine_metric_labels()
    dimension_sets = {tuple(sorted(d)) for d in labelled["dimensions"]}
    for name in declared:
        assert (name in {s.strip("^$") for s in plain["metric_name_selectors"]}) is (not labels[name]), name
        if labels[name]:
            assert tuple(sorted(labels[name])) in dimension_sets, f"{name}: no dimension set for {labels[name]}"
    pipelines = config["service"]["pipelines"]
    assert pipelines["metrics"] == {
        "receivers": ["prometheus"],
        "processors": ["batch/metrics"],
        "exporters": ["awsemf"],
    }
    assert ("traces" in pipelines) is answers.tracing
    for pipeline in pipelines.values():
        for kind in ("receivers", "processors", "exporters"):
            assert set(pipeline[kind]) <= set(config[kind]), kind
    assert config["extensions"]["health_check"]["endpoint"].endswith(":13133"), "what /healthcheck asks"

    # The task role writes the EMF log streams of that group, nothing more.
    policies = {p["PolicyName"]: p["PolicyDocument"] for p in stack.roles()["TaskRole"]["Policies"]}
    (statement,) = policies["collector-metrics"]["Statement"]
    assert statement["Resource"] == {"Fn::GetAtt": ["MetricsLogGroup", "Arn"]}
    assert sorted(statement["Action"]) == ["logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents"]


@pytest.mark.parametrize("key", ECS_SETS)
def test_ecs_service(projects: dict[str, Path], key: str) -> None:
    project, answers = projects[key], ANSWERS[key]
    path = project / "deploy" / "ecs" / "service.yaml"
    assert cfn_problems(path, answers.region) == []
    stack = EcsStack.load(project, answers.region)

    # What CloudFormation would send, against botocore's models of the APIs it calls.
    service = stack.api["AWS::ECS::Service"]
    assert api_problems("ecs", "CreateService", service) == []
    target = stack.api["AWS::ApplicationAutoScaling::ScalableTarget"]
    assert api_problems("application-autoscaling", "RegisterScalableTarget", target) == []
    policy = dict(stack.api["AWS::ApplicationAutoScaling::ScalingPolicy"])
    assert policy.pop("ScalingTargetId") == ECS_RESOURCES["ScalableTarget"]
    policy.update({k: target[k] for k in ("ServiceNamespace", "ResourceId", "ScalableDimension")})
    assert api_problems("application-autoscaling", "PutScalingPolicy", policy) == []

    # The service: private tasks, the roles' tag on every task, no exec, a guarded rollout.
    assert service["launchType"] == "FARGATE" and "desiredCount" not in service, "autoscaling owns the count"
    network = service["networkConfiguration"]["awsvpcConfiguration"]
    assert network["assignPublicIp"] == "DISABLED"
    assert service["propagateTags"] == "SERVICE" and {"key": "service", "value": answers.slug} in service["tags"]
    assert service["enableExecuteCommand"] is False
    deployment = service["deploymentConfiguration"]
    assert deployment["deploymentCircuitBreaker"] == {"enable": True, "rollback": True}

    # Capacity: never more tasks than desired, so tasks x concurrency stays within the
    # budget during a rollout, and a rollout can always make progress (stop one task) at
    # every count autoscaling may set. ECS rounds the maximum down and the minimum up.
    low, high = target["MinCapacity"], target["MaxCapacity"]
    assert 1 <= low <= high == answers.max_replicas
    for desired in range(low, high + 1):
        assert desired * deployment["maximumPercent"] // 100 == desired, f"{desired} tasks surge in a rollout"
        healthy = -(-desired * deployment["minimumHealthyPercent"] // 100)
        assert desired - healthy >= 1, f"a rollout of {desired} tasks can neither start nor stop one"
    assert high * answers.concurrency <= max(LIMITS.FLEET_CONCURRENCY_BUDGET, answers.concurrency)

    # Autoscaling on backlog per task, never on CPU.
    assert target["ScalableDimension"] == "ecs:service:DesiredCount" and target["ServiceNamespace"] == "ecs"
    assert target["ResourceId"] == f"service/CHANGE-ME-cluster/{ECS_RESOURCES['Service.Name']}"
    tracking = policy["TargetTrackingScalingPolicyConfiguration"]
    assert policy["PolicyType"] == "TargetTrackingScaling"
    assert tracking["ScaleInCooldown"] >= 300 > tracking["ScaleOutCooldown"]
    # One round of work per task, visible and in flight.
    assert tracking["TargetValue"] == answers.concurrency
    metrics = {m["Id"]: m for m in tracking["CustomizedMetricSpecification"]["Metrics"]}
    stats = {
        (m["MetricStat"]["Metric"]["Namespace"], m["MetricStat"]["Metric"]["MetricName"]): m
        for m in metrics.values()
        if "MetricStat" in m
    }
    visible = stats[("AWS/SQS", "ApproximateNumberOfMessagesVisible")]
    in_flight = stats[("AWS/SQS", "ApproximateNumberOfMessagesNotVisible")]
    for counted in (visible, in_flight):
        assert counted["MetricStat"]["Metric"]["Dimensions"] == [{"Name": "QueueName", "Value": answers.queue}]
    tasks = stats[("ECS/ContainerInsights", "RunningTaskCount")]
    returned = [m for m in metrics.values() if m.get("ReturnData")]
    assert len(returned) == 1
    assert returned[0]["Expression"].replace(" ", "") == f"({visible['Id']}+{in_flight['Id']})/{tasks['Id']}"

    # Beside it, a step policy on the first minute of more than two rounds of work a task
    # (what target tracking's three datapoints are too slow for): scale-out only, in
    # proportion to the breach; its alarm's one action is the policy.
    step_id, alarm_id = "BacklogStepPolicy", "BacklogRoundsHighAlarm"
    known = cfn_names(stack.template, answers.region, ECS_RESOURCES)
    step = cfn_resolve(stack.template["Resources"][step_id]["Properties"], known)
    assert step.pop("ScalingTargetId") == ECS_RESOURCES["ScalableTarget"]
    step.update({k: target[k] for k in ("ServiceNamespace", "ResourceId", "ScalableDimension")})
    assert api_problems("application-autoscaling", "PutScalingPolicy", step) == []
    assert step["PolicyType"] == "StepScaling"
    config = step["StepScalingPolicyConfiguration"]
    adjustments = config["StepAdjustments"]
    assert all(a["ScalingAdjustment"] > 0 for a in adjustments), "scale-in stays with target tracking"
    assert adjustments[0]["MetricIntervalLowerBound"] == 0 and "MetricIntervalUpperBound" not in adjustments[-1]
    for lower, upper in itertools.pairwise(adjustments):
        assert lower["MetricIntervalUpperBound"] == upper["MetricIntervalLowerBound"], "steps without a gap"
    assert config["Cooldown"] <= tracking["ScaleOutCooldown"]
    alarm = cfn_resolve(stack.template["Resources"][alarm_id]["Properties"], known)
    assert api_problems("cloudwatch", "PutMetricAlarm", {"AlarmName": "rounds", **alarm}) == []
    assert stack.template["Resources"][alarm_id]["Properties"]["AlarmActions"] == [{"Ref": step_id}]
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (1, 1)
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    alarm_metrics = {m["Id"]: m for m in alarm["Metrics"]}
    assert {m["MetricStat"]["Period"] for m in alarm_metrics.values() if "MetricStat" in m} == {60}
    for metric_id, metric in metrics.items():
        if "MetricStat" in metric:  # the same metrics as target tracking's, by the same ids
            assert alarm_metrics[metric_id]["MetricStat"]["Metric"] == metric["MetricStat"]["Metric"]
    (rounds,) = [m["Expression"] for m in alarm_metrics.values() if m.get("ReturnData")]
    assert rounds.replace(" ", "") == f"(visible+in_flight)/(tasks*{answers.concurrency})"

    # Roles: ECS tasks of this account only may assume them. The task role grants exactly
    # the policy file's statements (built by the stack for its partition, region, account
    # and cluster); the execution role pulls this image and writes this log group.
    roles = stack.roles()
    assert set(roles) == {"ExecutionRole", "TaskRole"}
    for role in roles.values():
        (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
        assert trust["Principal"] == {"Service": "ecs-tasks.amazonaws.com"} and trust["Action"] == "sts:AssumeRole"
        assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}
    names = cfn_names(stack.template, answers.region, ECS_RESOURCES)
    if answers.large:  # the bucket the stack is given, as the policy file spells it
        names["PayloadBucketName"] = PAYLOAD_BUCKET_PLACEHOLDER
    task_policies = {p["PolicyName"]: p for p in roles["TaskRole"]["Policies"]}
    assert set(task_policies) == {"worker", "collector-metrics"}  # the collector's: test_ecs_collector
    task_policy = task_policies["worker"]
    file_policy = json.loads((project / "deploy" / "aws" / "worker-policy.json").read_text())
    assert cfn_resolve(task_policy["PolicyDocument"], names) == file_policy
    (execution_policy,) = roles["ExecutionRole"]["Policies"]
    granted = {
        statement["Sid"]: (sorted(as_list(statement["Action"])), statement["Resource"])
        for statement in cfn_resolve(execution_policy["PolicyDocument"], names)["Statement"]
    }
    partition = aws_partition(answers.region)[0]
    assert granted == {
        "RegistryLogin": (["ecr:GetAuthorizationToken"], "*"),
        "PullImage": (
            ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
            f"arn:{partition}:ecr:{answers.region}:{PLACEHOLDER_ACCOUNT}:repository/{answers.slug}",
        ),
        "WriteLogs": (["logs:CreateLogStream", "logs:PutLogEvents"], ECS_RESOURCES["LogGroup.Arn"]),
    }

    # The security group: HTTPS out, nothing in but the optional scrape rule on the port.
    group = stack.resources["AWS::EC2::SecurityGroup"]
    assert "SecurityGroupIngress" not in group
    assert [(r["IpProtocol"], r["FromPort"], r["ToPort"]) for r in group["SecurityGroupEgress"]] == [("tcp", 443, 443)]
    ingress = stack.resources["AWS::EC2::SecurityGroupIngress"]
    assert (ingress["FromPort"], ingress["ToPort"]) == (answers.port, answers.port) and "CidrIp" not in ingress


SECRET_ARNS = [
    "arn:{partition}:secretsmanager:{region}:123456789012:secret:orders/database-url-AbCdEf",
    "arn:{partition}:ssm:{region}:123456789012:parameter/orders/database-url",
]


@pytest.mark.parametrize("key", ECS_SETS)
@pytest.mark.parametrize("secret", SECRET_ARNS, ids=["secretsmanager", "ssm"])
def test_ecs_secrets(projects: dict[str, Path], key: str, secret: str) -> None:
    """Each of the service's secrets (the `secrets` answer) reaches the worker as an ECS
    secret from the ARN the stack is given, and the execution role may read the ARNs given
    and nothing else; one given alone reaches the worker alone; with none, neither exists."""
    project, answers = projects[key], ANSWERS[key]
    assert answers.secrets, "a set without secrets has nothing to check here"
    stack = EcsStack.load(project, answers.region)
    partition = aws_partition(answers.region)[0]
    arns = {
        name: secret.format(partition=partition, region=answers.region).replace("database-url", name.lower())
        for name in answers.secrets
    }
    parameters = {name: local_extensions.secret_parameter(name) for name in answers.secrets}
    for name, parameter in parameters.items():
        rule = stack.template["Parameters"][parameter]["AllowedPattern"]
        assert re.fullmatch(rule, arns[name]) and re.fullmatch(rule, ""), parameter
        assert not re.fullmatch(rule, "arn:aws:s3:::bucket/key"), "only the two secret stores"
    choices = [{}, arns, dict(list(arns.items())[:1])]
    for given in choices:
        names = cfn_names(stack.template, answers.region, ECS_RESOURCES) | {
            parameters[name]: given.get(name, "") for name in answers.secrets
        }
        task = api_shape(cfn_resolve(stack.resources["AWS::ECS::TaskDefinition"], names))
        assert ecs_problems(task) == []
        worker = next(c for c in task["containerDefinitions"] if c["name"] == "worker")
        role = cfn_resolve(stack.roles()["ExecutionRole"]["Policies"][0]["PolicyDocument"], names)
        reads = [s for s in role["Statement"] if s["Sid"] == "ReadSecrets"]
        if not given:
            assert "secrets" not in worker and reads == []
            continue
        assert worker["secrets"] == [{"name": name, "valueFrom": arn} for name, arn in given.items()]
        environment = env_list(worker["environment"])
        assert not set(answers.secrets) & set(environment), "a secret is never a plain value"
        (read,) = reads
        assert read["Resource"] == list(given.values()) and read["Effect"] == "Allow"
        assert sorted(read["Action"]) == ["secretsmanager:GetSecretValue", "ssm:GetParameters"]
    assert set(answers.secrets) <= answers.variables
    # The service tells the engine its secrets: `config` shows them set or unset.
    service, _ = baked_service(project, answers)
    assert service.secrets == answers.secrets


def worker_pod(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The worker's pod template: the Deployment's, or that of the Jobs a ScaledJob starts."""
    if "ScaledJob" in objects:
        return objects["ScaledJob"]["spec"]["jobTargetRef"]["template"]
    return objects["Deployment"]["spec"]["template"]


def scaledjob_job(scaled: dict[str, Any]) -> dict[str, Any]:
    """The batch/v1 Job KEDA creates from a ScaledJob's jobTargetRef."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": scaled["metadata"]["name"], "namespace": scaled["metadata"]["namespace"]},
        "spec": scaled["spec"]["jobTargetRef"],
    }


def check_scaledjob(scaled: dict[str, Any], answers: Answers) -> None:
    """kubernetes_workload=scaledjob: one Job per message, each pod runs one job to its end."""
    spec, job = scaled["spec"], scaled["spec"]["jobTargetRef"]
    pod = job["template"]
    assert (job["parallelism"], job["completions"]) == (1, 1)
    assert pod["spec"]["restartPolicy"] == "Never" and job["backoffLimit"] == 0
    # Its deadline outlives start-up, the idle exit, the job and the drain: it never cuts a job.
    idle = int(SCALEDJOB_ENV["WORKER_IDLE_EXIT_SECONDS"])
    assert job["activeDeadlineSeconds"] >= idle + answers.job_timeout + answers.grace
    # Updating the ScaledJob lets running Jobs finish (the default deletes them).
    assert spec["rollout"] == {"strategy": "gradual"}
    # Messages visible and in flight less the Jobs not finished (`default`): `accurate` counts a
    # message a ready pod has just taken again while SQS's count lags (docs/scaling.md).
    assert spec["scalingStrategy"]["strategy"] == "default"
    assert spec["minReplicaCount"] == 0 and spec["pollingInterval"] <= 60
    assert 1 <= spec["successfulJobsHistoryLimit"] <= spec["failedJobsHistoryLimit"]
    (trigger,) = spec["triggers"]
    # One Job per message; a message in flight has its Job, which the strategy subtracts.
    assert trigger["metadata"]["queueLength"] == "1" and trigger["metadata"]["scaleOnInFlight"] == "true"
    # Cluster Autoscaler and Karpenter leave a running job's pod alone.
    annotations = pod["metadata"]["annotations"]
    assert annotations["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "false"
    assert annotations["karpenter.sh/do-not-disrupt"] == "true"


@pytest.mark.parametrize("key", EKS_SETS)
def test_kubernetes_objects(projects: dict[str, Path], key: str) -> None:
    project, answers = projects[key], ANSWERS[key]
    objects = load_k8s(project)
    assert set(objects) == {
        "ServiceAccount",
        "Service",
        "TriggerAuthentication",
        "NetworkPolicy",
        "Namespace",
        "ServiceMonitor",
        "PrometheusRule",
        f"ConfigMap/{answers.slug}-settings",
    } | ({f"ConfigMap/{answers.slug}-otel-collector"} if answers.tracing else set()) | (
        {"ScaledJob"} if answers.scaledjob else {"Deployment", "ScaledObject", "PodDisruptionBudget"}
    )
    for kind, obj in objects.items():
        if obj["apiVersion"].startswith(CUSTOM_RESOURCE_GROUPS):
            continue
        assert k8s_problems(obj) == [], kind
    if answers.scaledjob:
        # KEDA's schema does not look into the Job template: the Job it makes from it must be valid.
        assert k8s_problems(scaledjob_job(objects["ScaledJob"])) == [], "the ScaledJob's Job"
    # Everything in the service's own namespace, which enforces Pod Security "restricted".
    namespace = objects.pop("Namespace")["metadata"]
    assert namespace["name"] == answers.slug
    assert namespace["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert {kind: obj["metadata"].get("namespace") for kind, obj in objects.items()} == dict.fromkeys(
        objects, answers.slug
    )

    workload = objects["ScaledJob" if answers.scaledjob else "Deployment"]
    pod = worker_pod(objects)
    spec = pod["spec"]
    labels = pod["metadata"]["labels"]
    if answers.scaledjob:
        check_scaledjob(workload, answers)
    else:
        assert "replicas" not in workload["spec"], "KEDA owns the replica count"
        # A rollout never runs more pods than KEDA set (pods x concurrency within the budget),
        # and replaces one at a time (the replaced pod drains while its replacement starts).
        assert workload["spec"]["strategy"] == {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
        }
        assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert spec["terminationGracePeriodSeconds"] == answers.grace
    pod_security = spec["securityContext"]
    assert pod_security["runAsNonRoot"] is True and pod_security["runAsUser"] == 10001
    assert pod_security["seccompProfile"]["type"] == "RuntimeDefault"
    (container,) = spec["containers"]
    assert [c["name"] for c in spec.get("initContainers", [])] == (["otel-collector"] if answers.tracing else [])
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"] and security["runAsNonRoot"] is True
    assert image_repository(container["image"]) == answers.slug
    partition, suffix = aws_partition(answers.region)
    assert container["image"].startswith(f"{PLACEHOLDER_ACCOUNT}.dkr.ecr.{answers.region}.{suffix}/")
    assert container["args"] == ["run"]
    spread = {c["topologyKey"]: c for c in spec["topologySpreadConstraints"]}
    assert set(spread) == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    for constraint in spread.values():
        assert constraint["labelSelector"]["matchLabels"].items() <= labels.items()
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway" and constraint["maxSkew"] == 1
    extra = SCALEDJOB_ENV if answers.scaledjob else {}
    assert env_list(container["env"]) == answers.env(bucket=PAYLOAD_BUCKET_PLACEHOLDER) | extra
    resources = container["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"]) and "memory" in resources["limits"]
    # Untrusted input: CPU capped too (a hostile message must not starve the node).
    assert ("cpu" in resources["limits"]) is answers.untrusted
    healthcheck = ["python", "-m", answers.package, "healthcheck", f"--stalled-after={answers.stalled_after}"]
    assert container["livenessProbe"]["exec"]["command"] == healthcheck
    assert container["startupProbe"]["exec"]["command"] == healthcheck
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": answers.port}
    assert container["readinessProbe"]["httpGet"]["port"] in ("metrics", answers.port)
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(answers.port)
    assert annotations["prometheus.io/path"] == "/metrics"

    account = objects["ServiceAccount"]
    assert spec["serviceAccountName"] == account["metadata"]["name"]
    role = account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert re.fullmatch(rf"arn:{partition}:iam::{PLACEHOLDER_ACCOUNT}:role/CHANGE-ME-[\w+=,.@-]+", role), role

    service = objects["Service"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(answers.port, "metrics")]
    if not answers.scaledjob:  # a Job's pod is never evicted mid-job instead (check_scaledjob)
        budget = objects["PodDisruptionBudget"]["spec"]
        assert budget["selector"]["matchLabels"].items() <= labels.items()
        # Readiness follows SQS: in an SQS outage every pod is unready, and drains must not hang.
        assert budget["unhealthyPodEvictionPolicy"] == "AlwaysAllow"

    # Ingress: the metrics port only; the policy applies to these pods.
    network = objects["NetworkPolicy"]["spec"]
    assert network["podSelector"]["matchLabels"].items() <= labels.items()
    assert "Ingress" in network["policyTypes"]
    (rule,) = network["ingress"]
    # From the monitoring namespace only, never every namespace (an empty selector).
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert [(p["port"], p.get("protocol", "TCP")) for p in rule["ports"]] in (
        [("metrics", "TCP")],
        [(answers.port, "TCP")],
    )
    # Egress: open, or for untrusted input DNS and HTTPS only, never link-local (metadata).
    assert ("Egress" in network["policyTypes"]) is answers.untrusted
    if answers.untrusted:
        allowed = sorted((p["port"], p["protocol"]) for r in network["egress"] for p in r["ports"])
        assert allowed == [(53, "TCP"), (53, "UDP"), (443, "TCP")]
        blocks = [to["ipBlock"] for r in network["egress"] for to in r["to"] if "ipBlock" in to]
        assert blocks and all("169.254.0.0/16" in b.get("except", []) for b in blocks)

    # KEDA objects: structure and cross-references (the CRD schemas are checked below).
    scaled, auth = objects["ScaledJob" if answers.scaledjob else "ScaledObject"], objects["TriggerAuthentication"]
    assert scaled["apiVersion"] == auth["apiVersion"] == "keda.sh/v1alpha1"
    so = scaled["spec"]
    assert so["maxReplicaCount"] == answers.max_replicas
    if not answers.scaledjob:
        assert so["scaleTargetRef"]["name"] == workload["metadata"]["name"]
        assert so["minReplicaCount"] >= 1
        behavior = so["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        scale_down, scale_up = behavior["scaleDown"], behavior["scaleUp"]
        assert scale_down["stabilizationWindowSeconds"] >= 300 and scale_down["policies"]
        # A minute of asking before a pod is added: one jittery read of SQS's counts adds none
        # (docs/scaling.md: the simulated day's scale-ins followed by a scale-out).
        assert 0 < scale_up["stabilizationWindowSeconds"] < scale_down["stabilizationWindowSeconds"]
    assert auth["spec"]["podIdentity"]["provider"] == "aws"
    assert auth["spec"]["podIdentity"]["roleArn"].startswith(f"arn:{partition}:iam::{PLACEHOLDER_ACCOUNT}:role/")
    known_metadata = {
        "aws-sqs-queue": {
            "queueURL",
            "queueURLFromEnv",
            "queueLength",
            "activationQueueLength",
            "awsRegion",
            "awsEndpoint",
            "scaleOnInFlight",
            "scaleOnDelayed",
            "identityOwner",
        },
        "aws-cloudwatch": {
            "namespace",
            "metricName",
            "dimensionName",
            "dimensionValue",
            "expression",
            "metricStat",
            "metricStatPeriod",
            "metricCollectionTime",
            "metricUnit",
            "metricEndTimeOffset",
            "targetMetricValue",
            "activationTargetMetricValue",
            "minMetricValue",
            "ignoreNullValues",
            "awsRegion",
            "awsEndpoint",
            "awsAccountId",
            "identityOwner",
        },
    }
    triggers = {t["type"]: t for t in so["triggers"]}
    # A ScaledJob starts Jobs for messages: the backlog's age says nothing more to it.
    assert set(triggers) == ({"aws-sqs-queue"} if answers.scaledjob else set(known_metadata))
    for kind, trigger in triggers.items():
        assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
        assert set(trigger["metadata"]) <= known_metadata[kind], kind
        assert all(isinstance(v, str) for v in trigger["metadata"].values()), f"{kind}: metadata must be strings"
    sqs = triggers["aws-sqs-queue"]["metadata"]
    assert sqs["queueURL"] == f"https://sqs.{answers.region}.{suffix}/{PLACEHOLDER_ACCOUNT}/{answers.queue}"
    assert int(sqs["queueLength"]) >= 1 and "activationQueueLength" in sqs
    if answers.scaledjob:
        return
    # One round of work per pod, visible and in flight (docs/scaling.md: two rounds thrash).
    assert int(sqs["queueLength"]) == answers.concurrency and sqs["scaleOnInFlight"] == "true"
    age = triggers["aws-cloudwatch"]["metadata"]
    assert (age["namespace"], age["metricName"]) == ("AWS/SQS", "ApproximateAgeOfOldestMessage")
    assert (age["dimensionName"], age["dimensionValue"]) == ("QueueName", answers.queue)
    assert age["metricStat"] == "Maximum" and float(age["targetMetricValue"]) > 0 and "minMetricValue" in age


@pytest.mark.parametrize("key", EKS_SETS)
def test_kubernetes_settings_and_secrets(projects: dict[str, Path], key: str) -> None:
    """The owner's settings (a ConfigMap) and secrets (a Secret, optional, made by hand or by
    External Secrets from Secrets Manager) reach the worker as environment variables; the
    External Secrets objects are valid against their CRD schemas and name that Secret."""
    project, answers = projects[key], ANSWERS[key]
    objects = load_k8s(project)
    settings = objects[f"ConfigMap/{answers.slug}-settings"]
    assert settings["data"] == {}, "the owner's to fill"
    (container,) = worker_pod(objects)["spec"]["containers"]
    secret = f"{answers.slug}-secrets"
    assert container["envFrom"] == [
        {"configMapRef": {"name": settings["metadata"]["name"]}},
        {"secretRef": {"name": secret, "optional": True}},
    ]
    optional = load_k8s(project, "optional")
    assert set(optional) == {"ServiceAccount", "SecretStore", "ExternalSecret"}
    assert {obj["metadata"]["namespace"] for obj in optional.values()} == {answers.slug}
    account, store, external = optional["ServiceAccount"], optional["SecretStore"], optional["ExternalSecret"]
    assert k8s_problems(account) == []
    assert account["automountServiceAccountToken"] is False
    role = account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert role.startswith(f"arn:{aws_partition(answers.region)[0]}:iam::{PLACEHOLDER_ACCOUNT}:role/CHANGE-ME-")
    aws = store["spec"]["provider"]["aws"]
    assert aws["service"] == "SecretsManager" and aws["region"] == answers.region
    assert aws["auth"]["jwt"]["serviceAccountRef"]["name"] == account["metadata"]["name"]
    assert account["metadata"]["name"] != worker_pod(objects)["spec"]["serviceAccountName"]
    assert external["spec"]["secretStoreRef"] == {"kind": "SecretStore", "name": store["metadata"]["name"]}
    assert external["spec"]["target"]["name"] == secret
    # Each of the service's secrets: a Secrets Manager secret of its own (named as on ECS), a
    # key of the Secret, and an entry of the worker's env that names it.
    assert external["spec"]["data"] == [
        {"secretKey": name, "remoteRef": {"key": local_extensions.secret_path({"project_slug": answers.slug}, name)}}
        for name in answers.secrets
    ]
    named = {
        e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert named == {name: {"name": secret, "key": name, "optional": True} for name in answers.secrets}
    schemas = crd_schema_dir("external-secrets")
    for obj in (store, external):
        assert crd_problems(obj, schemas, check_schema=False) == [], obj["kind"]


def test_external_secrets_schemas_reject_defects(projects: dict[str, Path]) -> None:
    schemas = crd_schema_dir("external-secrets")
    optional = load_k8s(projects["defaults"], "optional")
    store = copy.deepcopy(optional["SecretStore"])
    store["spec"]["provider"]["aws"]["service"] = "S3"  # not a store External Secrets reads
    external = copy.deepcopy(optional["ExternalSecret"])
    external["spec"]["target"]["creationPolicy"] = "Sometimes"
    assert crd_problems(store, schemas, check_schema=False)
    assert crd_problems(external, schemas, check_schema=False)


@pytest.mark.parametrize("key", EKS_SETS)
def test_prometheus_operator_objects(projects: dict[str, Path], key: str) -> None:
    """The ServiceMonitor scrapes the worker's Service under the job name the rules select, and
    the PrometheusRule holds exactly the rules of deploy/prometheus/alerts.yaml (its one
    source), both valid against prometheus-operator's CRD schemas."""
    project, answers = projects[key], ANSWERS[key]
    objects = load_k8s(project)
    monitor, rule, service = objects["ServiceMonitor"], objects["PrometheusRule"], objects["Service"]
    alerts = yaml.safe_load((project / "deploy" / "prometheus" / "alerts.yaml").read_text())
    assert rule["spec"] == alerts, "the PrometheusRule is not alerts.yaml"
    # The operator names the job after the Service unless jobLabel says otherwise.
    assert "jobLabel" not in monitor["spec"] and service["metadata"]["name"] == answers.slug
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]} and endpoint["path"] == "/metrics"
    assert seconds(endpoint["scrapeTimeout"]) < seconds(endpoint["interval"])
    schemas = crd_schema_dir("prometheus-operator")
    for obj in (monitor, rule):
        assert crd_problems(obj, schemas, check_schema=False) == [], obj["kind"]


def test_prometheus_operator_schemas_reject_defects(projects: dict[str, Path]) -> None:
    schemas = crd_schema_dir("prometheus-operator")
    objects = load_k8s(projects["defaults"])
    monitor = copy.deepcopy(objects["ServiceMonitor"])
    monitor["spec"]["endpoints"][0]["port"] = 9102  # a port name, not a number
    rule = copy.deepcopy(objects["PrometheusRule"])
    rule["spec"]["groups"][0]["rules"][0]["for"] = "ten minutes"  # not a duration
    assert crd_problems(monitor, schemas, check_schema=False)
    assert crd_problems(rule, schemas, check_schema=False)


@pytest.mark.parametrize("key", EKS_SETS)
def test_keda_objects_match_crd_schemas(projects: dict[str, Path], key: str) -> None:
    schemas = keda_schema_dir()
    objects = load_k8s(projects[key])
    scaler = "ScaledJob" if ANSWERS[key].scaledjob else "ScaledObject"
    for kind in (scaler, "TriggerAuthentication"):
        assert keda_problems(objects[kind], schemas) == [], kind


@pytest.mark.parametrize("key", CHECKED)
def test_queues_template(projects: dict[str, Path], key: str) -> None:
    project, answers = projects[key], ANSWERS[key]
    path = project / "deploy" / "aws" / "queues.yaml"
    assert cfn_problems(path, answers.region) == []

    template = load_cfn(path)
    resources = template["Resources"]
    queues = {
        r["Properties"]["QueueName"]: (name, r["Properties"])
        for name, r in resources.items()
        if r["Type"] == "AWS::SQS::Queue"
    }
    dlq = answers.dlq
    assert set(queues) == {answers.queue, dlq}
    queue_id, queue = queues[answers.queue]
    dlq_id, dead = queues[dlq]
    fifo = answers.queue.endswith(".fifo")
    for props in (queue, dead):
        assert props.get("FifoQueue", False) is fifo
        assert props["SqsManagedSseEnabled"] is True
    # fifo_throughput=high: the queue's limits per message group (its DLQ keeps the standard mode).
    high = fifo and answers.fifo_throughput == "high"
    assert (queue.get("DeduplicationScope"), queue.get("FifoThroughputLimit")) == (
        ("messageGroup", "perMessageGroupId") if high else (None, None)
    )
    assert "FifoThroughputLimit" not in dead
    assert queue["VisibilityTimeout"] == answers.visibility
    assert queue["ReceiveMessageWaitTimeSeconds"] == LIMITS.MAX_WAIT_SECONDS
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
        "maxReceiveCount": answers.max_receive,
    }
    assert dead["MessageRetentionPeriod"] == LIMITS.MAX_RETENTION_SECONDS
    assert queue.get("MessageRetentionPeriod", 345600) <= dead["MessageRetentionPeriod"]
    allow = dead["RedriveAllowPolicy"]
    assert allow["redrivePermission"] == "byQueue"
    (source,) = allow["sourceQueueArns"]
    assert source["Fn::Sub"].endswith(f":{answers.queue}")

    # The alarms on SQS's own metrics: the queue's age and in-flight count, the DLQ's inflow
    # (a rise of its depth: SQS's own moves included).
    alarms = {
        (metric["MetricName"], json.dumps(metric["Dimensions"][0]["Value"])): r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::CloudWatch::Alarm"
        for metric in [r["Properties"]]
        + [m["MetricStat"]["Metric"] for m in r["Properties"].get("Metrics", []) if "MetricStat" in m]
        if "MetricName" in metric
    }
    age = alarms[("ApproximateAgeOfOldestMessage", json.dumps({"Fn::GetAtt": [queue_id, "QueueName"]}))]
    assert age["Namespace"] == "AWS/SQS" and age["ComparisonOperator"] == "GreaterThanThreshold"
    assert template["Parameters"]["OldestMessageAgeThresholdSeconds"]["Default"] == observability.OLDEST_AGE_SECONDS
    inflow = alarms[("ApproximateNumberOfMessagesVisible", json.dumps({"Fn::GetAtt": [dlq_id, "QueueName"]}))]
    assert inflow["Threshold"] == 0 and inflow["ComparisonOperator"] == "GreaterThanThreshold"
    assert [m["Expression"] for m in inflow["Metrics"] if m.get("ReturnData")] == ["DIFF(depth)"]
    inflight = alarms[("ApproximateNumberOfMessagesNotVisible", json.dumps({"Fn::GetAtt": [queue_id, "QueueName"]}))]
    assert inflight["Threshold"] == LIMITS.inflight_alert_threshold(answers.queue)

    # With idempotency: the table the code and the policy name, keyed and expired as
    # Powertools writes it, kept and recoverable.
    tables = [r for r in resources.values() if r["Type"] == "AWS::DynamoDB::Table"]
    assert len(tables) == (1 if answers.table else 0)
    if answers.table:
        (table,) = tables
        props = table["Properties"]
        assert props["TableName"] == answers.table
        assert props["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
        assert props["AttributeDefinitions"] == [{"AttributeName": "id", "AttributeType": "S"}]
        assert props["TimeToLiveSpecification"] == {"AttributeName": "expiration", "Enabled": True}
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert props["BillingMode"] == "PAY_PER_REQUEST"
        assert table["DeletionPolicy"] == table["UpdateReplacePolicy"] == "Retain"

    outputs = {name: out["Value"] for name, out in template["Outputs"].items()}
    assert {"Ref": queue_id} in outputs.values() and {"Ref": dlq_id} in outputs.values()
    assert {"Fn::GetAtt": [queue_id, "Arn"]} in outputs.values()
    assert {"Fn::GetAtt": [dlq_id, "Arn"]} in outputs.values()


@pytest.mark.parametrize("key", CHECKED)
def test_worker_policy(projects: dict[str, Path], key: str) -> None:
    project, answers = projects[key], ANSWERS[key]
    policy = json.loads((project / "deploy" / "aws" / "worker-policy.json").read_text())
    assert answers.policy_problems(policy) == []


@pytest.mark.parametrize("key", CHECKED)
def test_prometheus_rules(projects: dict[str, Path], key: str) -> None:
    project, answers = projects[key], ANSWERS[key]
    path = project / "deploy" / "prometheus" / "alerts.yaml"
    assert check_rules(path) == []

    rules = [rule for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]
    exprs = {rule["alert"]: " ".join(rule["expr"].split()) for rule in rules}
    for name, expr in exprs.items():
        assert unknown_metrics(expr) == set(), f"{name}: {expr}"
        assert f'job="{answers.slug}"' in expr, f"{name} does not select this service"

    def one(pattern: str) -> str:
        found = [expr for expr in exprs.values() if re.search(pattern, expr)]
        assert found, f"no alert matches {pattern!r}"
        return found[0]

    one(r"queue_oldest_message_seconds\{[^}]*\}\)* > \d+")
    one(r"sqs_queue_messages\{[^}]*state=\"visible\"[^}]*\}.*/.*worker_concurrency")
    one(r"increase\(worker_dead_letter_sends_total\{[^}]*\}\[10m\]\)\) > 0")
    one(r"worker_leases_lost_total")
    stalled = one(r"time\(\) - worker_last_progress_timestamp_seconds")
    assert float(stalled.rsplit(">", 1)[1]) == answers.stalled_after
    ratio = one(r"jobs_processed_total\{[^}]*outcome=~\"retry\|dead_letter\|timeout\"")
    assert "/" in ratio


@pytest.mark.parametrize("key", CHECKED)
def test_every_alert_exists_on_each_platform_the_bake_targets(projects: dict[str, Path], key: str) -> None:
    """The one table of alerts: on EKS a rule each (in the PrometheusRule too), on ECS a
    CloudWatch alarm each (SQS's metrics in the queues stack, the worker's in the service
    stack), each with its runbook heading in deploy/README.md; and nothing a bake does not
    render named by its alerts (an ECS-only bake has no deploy/k8s)."""
    project, answers = projects[key], ANSWERS[key]
    table = observability.alerts(context(SUPPORTED[key].answers))
    names = [alert.name for alert in table]
    assert len(set(names)) == len(names)
    rules = yaml.safe_load((project / "deploy" / "prometheus" / "alerts.yaml").read_text())
    by_name = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    assert list(by_name) == names
    readme = (project / "deploy" / "README.md").read_text()
    anchors = {h.strip().lower() for h in re.findall(r"^### (\S+)$", readme, re.MULTILINE)}
    for alert in table:
        assert by_name[alert.name]["annotations"]["runbook_url"] == f"deploy/README.md#{alert.anchor}"
        assert alert.anchor in anchors, f"no runbook heading for {alert.name}"
        assert alert.severity in observability.SEVERITIES
    if answers.eks:
        operator = load_k8s(project)["PrometheusRule"]
        assert [r["alert"] for g in operator["spec"]["groups"] for r in g["rules"]] == names
    if answers.ecs:
        queues = load_cfn(project / "deploy" / "aws" / "queues.yaml")["Resources"]
        service = load_cfn(project / "deploy" / "ecs" / "service.yaml")["Resources"]
        # The alarms that page (not the step scaling policy's, whose action is the policy).
        alarms = {
            name: resource
            for stack in (queues, service)
            for name, resource in stack.items()
            if resource["Type"] == "AWS::CloudWatch::Alarm"
            and not any(
                service.get(action.get("Ref", ""), {}).get("Type") == "AWS::ApplicationAutoScaling::ScalingPolicy"
                for action in resource["Properties"].get("AlarmActions", [])
                if isinstance(action, dict)
            )
        }
        assert sorted(alarms) == sorted(f"{name}Alarm" for name in names)
        topic = "arn:aws:sns:us-east-1:123456789012:alarms"
        for alert in table:
            alarm = alarms[f"{alert.name}Alarm"]["Properties"]
            # What CloudFormation sends, against botocore's model of PutMetricAlarm, with and
            # without a topic to notify.
            for given in ("", topic):
                stack = load_cfn(
                    project / "deploy" / ("aws/queues.yaml" if alert.stack == "queues" else "ecs/service.yaml")
                )
                resources = ECS_RESOURCES | {"Queue.QueueName": answers.queue, "DeadLetterQueue.QueueName": answers.dlq}
                resolved = cfn_resolve(alarm, cfn_names(stack, answers.region, resources) | {"AlarmTopicArn": given})
                assert api_problems("cloudwatch", "PutMetricAlarm", {"AlarmName": alert.name, **resolved}) == []
                assert resolved.get("AlarmActions", []) == ([topic] if given else [])
            assert alert.runbook in alarm["AlarmDescription"]
            assert alarm["AlarmActions"] == alarm["OKActions"]
            assert (f"{alert.name}Alarm" in queues) is (alert.stack == "queues")
            returned = [m for m in alarm.get("Metrics", []) if m.get("ReturnData")]
            assert len(returned) == (1 if "Metrics" in alarm else 0), alert.name
    rendered = {str(p.relative_to(project)) for p in project.rglob("*") if p.is_file()}
    for path in ("deploy/prometheus/alerts.yaml", "deploy/README.md", "deploy/aws/queues.yaml"):
        text = (project / path).read_text()
        for named in set(re.findall(r"deploy/[\w./-]+\.(?:ya?ml|json|md)", text)) | {
            "deploy/" + n for n in re.findall(r"\b(k8s/[\w./-]+\.yaml)", text)
        }:
            assert named in rendered, f"{path} names {named}, which this bake does not render"
    # The in-flight alert: 80 % of SQS's quota for the queue's kind.
    inflight = next(a for a in table if a.name == "SQSInFlightNearLimit")
    if answers.ecs:
        assert alarms["SQSInFlightNearLimitAlarm"]["Properties"]["Threshold"] == LIMITS.inflight_alert_threshold(
            answers.queue
        )
    assert "96000" in inflight.expr and "16000" in inflight.expr


@pytest.mark.parametrize("key", ECS_SETS)
def test_cloudwatch_dashboard_has_the_grafana_panels(projects: dict[str, Path], key: str) -> None:
    """The ECS stack's dashboard: the Grafana dashboard's panels, title for title, each over
    the same metrics, every query against the collector's namespace."""
    project, answers = projects[key], ANSWERS[key]
    grafana = json.loads((project / "deploy" / "grafana" / "dashboard.json").read_text())
    resource = load_cfn(project / "deploy" / "ecs" / "service.yaml")["Resources"]["Dashboard"]["Properties"]
    assert resource["DashboardName"] == answers.slug
    body = json.loads(resource["DashboardBody"]["Fn::Sub"].replace("${AWS::Region}", answers.region))
    assert (
        api_problems("cloudwatch", "PutDashboard", {"DashboardName": answers.slug, "DashboardBody": json.dumps(body)})
        == []
    )
    widgets = {w["properties"]["title"]: w for w in body["widgets"]}
    assert list(widgets) == [p["title"] for p in grafana["panels"]]
    for panel in grafana["panels"]:
        wanted = {
            re.sub(r"_(bucket|sum|count)$", "", n) for t in panel["targets"] for n in promql_metric_names(t["expr"])
        }
        metrics = widgets[panel["title"]]["properties"]["metrics"]
        queries = [m[0]["expression"] for m in metrics if isinstance(m[0], dict)]
        shown = {name for q in queries for name in re.findall(r"SELECT \w+\((\w+)\)", q)}
        shown |= {m[1] for m in metrics if isinstance(m[0], str)}
        assert shown == wanted, (panel["title"], shown, wanted)
        for query in queries:
            assert f'SCHEMA("{answers.slug}"' in query or not query.startswith("SELECT"), query
        assert widgets[panel["title"]]["properties"]["region"] == answers.region


@pytest.mark.parametrize("key", CHECKED)
def test_grafana_dashboard(projects: dict[str, Path], key: str, tmp_path: Path) -> None:
    project, answers = projects[key], ANSWERS[key]
    dashboard = json.loads((project / "deploy" / "grafana" / "dashboard.json").read_text())
    assert dashboard["title"] == answers.name and dashboard["uid"]
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    exprs = [(p["title"], t["expr"]) for p in panels for t in p["targets"]]
    used: set[str] = set()
    for title, expr in exprs:
        assert unknown_metrics(expr) == set(), f"panel {title!r}: {expr}"
        assert f'job="{answers.slug}"' in expr, f"panel {title!r} does not select this service"
        used |= promql_metric_names(expr)
    bases = {re.sub(r"_(bucket|sum|count)$", "", n) for n in used}
    # Every metric but an info metric (labels, not a value to plot) is on a panel.
    plotted = {name for name, kind in engine_metrics().items() if kind != "info"}
    assert bases >= plotted, f"no panel shows {plotted - bases}"
    joined = "\n".join(expr for _, expr in exprs)
    for quantile in ("0.5", "0.95", "0.99"):
        assert f"histogram_quantile({quantile}, sum by (le, queue) (rate(job_duration_seconds_bucket" in joined
    assert re.search(r"by \([^)]*state[^)]*\) \(sqs_queue_messages", joined), "backlog not split by state"
    assert re.search(r"by \([^)]*outcome[^)]*\) \(rate\(jobs_processed_total", joined)
    assert re.search(r"by \([^)]*operation[^)]*outcome[^)]*\) \(rate\(sqs_api_calls_total", joined)

    # Each expression is valid PromQL: promtool parses them as recording rules, with
    # Grafana's variables replaced by values.
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {
                        "record": f"dashboard:expr_{n}",
                        "expr": expr.replace("$__rate_interval", "5m").replace("$queue", ".*"),
                    }
                    for n, (_, expr) in enumerate(exprs)
                ],
            }
        ]
    }
    rules_file = tmp_path / "dashboard-rules.yaml"
    rules_file.write_text(yaml.safe_dump(rules))
    assert check_rules(rules_file) == []


def test_template_workflow() -> None:
    path = ROOT / ".github" / "workflows" / "ci.yml"
    assert jsonschema_cli_problems("vendor.github-workflows", path) == []
    assert jsonschema_cli_problems("vendor.dependabot", ROOT / ".github" / "dependabot.yml") == []
    workflow = load_workflow(path)
    assert_workflow_hygiene(path, workflow)
    # One uv: the template's own lock, its CI, and what generated projects get.
    locked = re.search(r'name = "uv"\nversion = "([^"]+)"', (ROOT / "uv.lock").read_text())
    assert locked and locked.group(1) == UV_VERSION
    runs = [step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"]]
    assert "bash .ci/run" in runs
    matrix = workflow["jobs"]["generated"]["strategy"]["matrix"]["deploy_target"]
    assert sorted(matrix) == sorted(COOKIECUTTER["deploy_target"])
    # Every Python the template offers is installed for the suite's bakes, and the newest is
    # also baked and tested as a user would.
    offered = sorted(COOKIECUTTER["python_version"], key=lambda v: tuple(map(int, v.split("."))))
    assert f"uv python install {' '.join(offered)}" in runs
    include = workflow["jobs"]["generated"]["strategy"]["matrix"]["include"]
    assert {"deploy_target": "ecs-and-eks", "python_version": offered[-1]} in include


@pytest.mark.parametrize("key", CHECKED)
def test_generated_workflow(projects: dict[str, Path], key: str) -> None:
    project, answers = projects[key], ANSWERS[key]
    path = project / ".github" / "workflows" / "ci.yml"
    assert jsonschema_cli_problems("vendor.github-workflows", path) == []
    assert jsonschema_cli_problems("vendor.dependabot", project / ".github" / "dependabot.yml") == []
    workflow = load_workflow(path)
    assert_workflow_hygiene(path, workflow)
    assert "${{ github." in path.read_text(), "GitHub expressions lost in rendering"
    # The actions both workflows use are pinned to the same commits: Dependabot bumps the
    # template's, and this fails until the generated workflow follows.
    template_pins = action_pins(ROOT / ".github" / "workflows" / "ci.yml")
    pins = action_pins(path)
    assert {a: pins[a] for a in template_pins} == template_pins
    jobs = workflow["jobs"]
    runs = {name: " && ".join(step.get("run", "") for step in job["steps"]) for name, job in jobs.items()}
    uses = {name: [step.get("uses", "") for step in job["steps"]] for name, job in jobs.items()}
    assert "make lint" in runs["lint"] and "make typecheck" in runs["typecheck"]
    assert "make test-unit" in runs["unit"]
    assert "pytest -m integration" in runs["integration"]
    assert "pip-audit" in runs["audit"]
    assert any(u.startswith("docker/build-push-action@") for u in uses["image"])
    assert "hadolint" in runs["image"]
    service = jobs["integration"]["services"]["localstack"]
    assert service["image"] == LOCALSTACK_IMAGE
    assert service["env"]["SERVICES"] == "sqs" and "--health-cmd" in service["options"]
    assert jobs["integration"]["env"]["AWS_ENDPOINT_URL"] == "http://localhost:4566"
    # The same end-to-end test on moto's server: a plain step, no service container, no token.
    moto = jobs["integration-moto"]
    assert "pytest -m integration" in runs["integration-moto"] and "services" not in moto
    assert moto["env"]["SQS_EMULATOR"] == "moto" and "AWS_ENDPOINT_URL" not in moto["env"]
    assert workflow["env"]["AWS_REGION"] == answers.region
    build = next(s for s in jobs["image"]["steps"] if s.get("uses", "").startswith("docker/build-push-action@"))
    assert image_repository(build["with"]["tags"]) == answers.slug


def action_pins(path: Path) -> dict[str, str]:
    pins: dict[str, set[str]] = {}
    for action, sha in re.findall(r"uses: ([\w.-]+/[\w./-]+)@([0-9a-f]{40})", path.read_text()):
        pins.setdefault(action, set()).add(sha)
    assert all(len(shas) == 1 for shas in pins.values()), f"{path}: one action at two commits: {pins}"
    return {action: shas.pop() for action, shas in pins.items()}


def assert_pinned(path: Path) -> None:
    """Every action pinned to a full commit SHA, with its release noted."""
    pinned = 0
    for line in path.read_text().splitlines():
        if re.match(r"\s*(-\s+)?uses:", line):
            assert re.fullmatch(r"\s*(-\s+)?uses: [\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+", line), line
            pinned += 1
    assert pinned, "no actions found"


def assert_workflow_hygiene(path: Path, workflow: dict[str, Any]) -> None:
    """Least privilege, one run per ref, every action pinned to a commit with its release
    noted, and setup-uv installing the one pinned uv."""
    assert workflow["permissions"] == {"contents": "read"}
    assert workflow["concurrency"]["group"] and workflow["concurrency"]["cancel-in-progress"] is True
    assert_pinned(path)
    for job in workflow["jobs"].values():
        assert "timeout-minutes" in job
        for step in job["steps"]:
            if step.get("uses", "").startswith("astral-sh/setup-uv@"):
                assert step.get("with", {}).get("version") == UV_VERSION, f"{path}: setup-uv without uv {UV_VERSION}"


@pytest.mark.parametrize("key", CHECKED)
def test_release_workflow(projects: dict[str, Path], key: str) -> None:
    """On a version tag: the image built and pushed with its SBOM and provenance; then its digest deployed to each chosen target behind the production environment's
    approval, each job with only the token rights it uses."""
    project, answers = projects[key], ANSWERS[key]
    path = project / ".github" / "workflows" / "release.yml"
    assert jsonschema_cli_problems("vendor.github-workflows", path) == []
    assert actionlint_problems(path) == []
    assert_pinned(path)
    pins = action_pins(path)
    ci_pins = action_pins(project / ".github" / "workflows" / "ci.yml")
    assert {a: pins[a] for a in pins.keys() & ci_pins.keys()} == {a: ci_pins[a] for a in pins.keys() & ci_pins.keys()}
    workflow = load_workflow(path)
    assert workflow["on"] == {"push": {"tags": ["v*"]}}
    assert workflow["permissions"] == {}, "no token rights but those a job asks for"
    assert workflow["concurrency"]["cancel-in-progress"] is False, "a rollout is never cut off"
    assert workflow["env"]["AWS_REGION"] == answers.region and workflow["env"]["ECR_REPOSITORY"] == answers.slug
    jobs = workflow["jobs"]
    deploys = {f"deploy-{target}" for target, chosen in (("ecs", answers.ecs), ("eks", answers.eks)) if chosen}
    assert set(jobs) == {"image"} | deploys

    image = jobs["image"]
    assert image["permissions"] == {"contents": "read", "id-token": "write"}
    steps = {step.get("uses", "").split("@")[0]: step for step in image["steps"]}
    assert (
        steps["aws-actions/configure-aws-credentials"]["with"]["role-to-assume"]
        == "${{ vars.AWS_IMAGE_PUSH_ROLE_ARN }}"
    )
    build = steps["docker/build-push-action"]["with"]
    assert build["push"] is True and build["sbom"] is True and build["provenance"] == "mode=max"
    assert not {"cache-from", "cache-to"} & set(build), "a release reads no cache a pull request may write"
    built = f"${{{{ steps.{steps['docker/build-push-action']['id']}.outputs.digest }}}}"
    assert image["outputs"]["digest"] == built, "the digest deployed is the one built"
    assert steps["actions/checkout"]["with"]["persist-credentials"] is False

    for name in deploys:
        job = jobs[name]
        assert job["needs"] == "image" and job["environment"] == "production", f"{name}: no manual gate"
        assert job["permissions"] == {"id-token": "write"}, name
        (credentials,) = [s for s in job["steps"] if "configure-aws-credentials" in s.get("uses", "")]
        assert credentials["with"]["role-to-assume"] == "${{ vars.AWS_DEPLOY_ROLE_ARN }}"
        script = "\n".join(step.get("run", "") for step in job["steps"])
        assert "${{" not in script, f"{name}: expressions go through env, never into a script"
    if answers.ecs:
        job = jobs["deploy-ecs"]
        assert job["env"]["IMAGE_DIGEST"] == "${{ needs.image.outputs.digest }}"
        script = "\n".join(step.get("run", "") for step in job["steps"])
        stack = load_cfn(project / "deploy" / "ecs" / "service.yaml")
        given = dict(re.findall(r"ParameterKey=(\w+),(\w+)=", script))
        # The digest changes; every other parameter of the stack keeps its value.
        assert given == {name: "UsePreviousValue" for name in stack["Parameters"]} | {"ImageDigest": "ParameterValue"}
        assert "--use-previous-template" in script and "wait stack-update-complete" in script
        assert "deployments[?status=='PRIMARY'].rolloutState" in script and "= COMPLETED" in script
        assert job["env"]["STACK"] == f"{answers.slug}-service"
    if answers.eks:
        job = jobs["deploy-eks"]
        assert job["env"]["IMAGE"] == "${{ needs.image.outputs.image }}@${{ needs.image.outputs.digest }}"
        script = "\n".join(step.get("run", "") for step in job["steps"])
        objects = load_k8s(project)
        if answers.scaledjob:
            scaled = objects["ScaledJob"]
            (container,) = worker_pod(objects)["spec"]["containers"]
            assert container["name"] == "worker"  # the first container: the patch's /containers/0
            where = f"-n {scaled['metadata']['namespace']}"
            assert f"{where} patch scaledjob/{scaled['metadata']['name']} --type=json" in script
            assert '/spec/jobTargetRef/template/spec/containers/0/image\\", \\"value\\": \\"$IMAGE\\"' in script
            return
        deployment = objects["Deployment"]
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        where = f"-n {deployment['metadata']['namespace']}"
        assert f'{where} set image deployment/{deployment["metadata"]["name"]} {container["name"]}="$IMAGE"' in script
        assert f"{where} rollout status deployment/{deployment['metadata']['name']}" in script
        assert "rollout undo" in script


@pytest.mark.parametrize("key", CHECKED)
def test_release_roles(projects: dict[str, Path], key: str) -> None:
    """The roles the release assumes: pushing for version tags only, deploying for the
    production environment only, each allowed what its job does and no more."""
    project, answers = projects[key], ANSWERS[key]
    path = project / "deploy" / "aws" / "release-roles.yaml"
    assert cfn_problems(path, answers.region) == []
    template = load_cfn(path)
    resources = template["Resources"]
    names = cfn_names(template, answers.region, {"DeployRole.Arn": "deploy-role-arn"})
    names["GitHubRepository"] = "owner/repo"
    partition = aws_partition(answers.region)[0]
    arn = f"{answers.region}:{PLACEHOLDER_ACCOUNT}"

    def role(name: str) -> tuple[dict[str, Any], dict[str, tuple[list[str], Any]]]:
        props = resources[name]["Properties"]
        (trust,) = props["AssumeRolePolicyDocument"]["Statement"]
        (policy,) = props["Policies"]
        granted = {
            s["Sid"]: (sorted(as_list(s["Action"])), cfn_resolve(s["Resource"], names))
            for s in policy["PolicyDocument"]["Statement"]
        }
        return cfn_resolve(trust, names), granted

    token = "token.actions.githubusercontent.com"
    trust, granted = role("ImagePushRole")
    assert trust["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert trust["Principal"] == {"Federated": names["GitHubOidcProviderArn"]}
    assert trust["Condition"] == {
        "StringEquals": {f"{token}:aud": "sts.amazonaws.com"},
        "StringLike": {f"{token}:sub": "repo:owner/repo:ref:refs/tags/v*"},
    }
    assert granted == {
        "RegistryLogin": (["ecr:GetAuthorizationToken"], "*"),
        "PushImage": (
            sorted(
                "ecr:" + a
                for a in (
                    "BatchCheckLayerAvailability",
                    "BatchGetImage",
                    "CompleteLayerUpload",
                    "GetDownloadUrlForLayer",
                    "InitiateLayerUpload",
                    "PutImage",
                    "UploadLayerPart",
                )
            ),
            f"arn:{partition}:ecr:{arn}:repository/{answers.slug}",
        ),
    }

    trust, granted = role("DeployRole")
    assert trust["Condition"] == {
        "StringEquals": {f"{token}:aud": "sts.amazonaws.com", f"{token}:sub": "repo:owner/repo:environment:production"}
    }
    expected: dict[str, tuple[list[str], Any]] = {}
    if answers.ecs:
        expected |= {
            "UpdateServiceStack": (
                ["cloudformation:DescribeStackEvents", "cloudformation:DescribeStacks", "cloudformation:UpdateStack"],
                f"arn:{partition}:cloudformation:{arn}:stack/{answers.slug}-service/*",
            ),
            # RegisterTaskDefinition and its two companions take no resource-level permission.
            "TaskDefinitions": (
                ["ecs:DeregisterTaskDefinition", "ecs:DescribeTaskDefinition", "ecs:RegisterTaskDefinition"],
                "*",
            ),
            "TagTaskDefinitions": (["ecs:TagResource"], f"arn:{partition}:ecs:{arn}:task-definition/{answers.slug}:*"),
            "UpdateService": (
                ["ecs:DescribeServices", "ecs:UpdateService"],
                f"arn:{partition}:ecs:{arn}:service/CHANGE-ME-cluster/{answers.slug}",
            ),
            "PassTaskRoles": (["iam:PassRole"], [names["TaskRoleArn"], names["ExecutionRoleArn"]]),
        }
        statements = resources["DeployRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        (passing,) = [s for s in statements if s["Sid"] == "PassTaskRoles"]
        assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}}
    if answers.eks:
        expected["DescribeCluster"] = (
            ["eks:DescribeCluster"],
            f"arn:{partition}:eks:{arn}:cluster/CHANGE-ME-cluster",
        )
        access = resources["DeployAccess"]["Properties"]
        assert access["PrincipalArn"] == {"Fn::GetAtt": ["DeployRole", "Arn"]}
        (scope,) = access["AccessPolicies"]
        assert scope["AccessScope"] == {"Type": "namespace", "Namespaces": [answers.slug]}
        assert cfn_resolve(scope["PolicyArn"], names).endswith(":cluster-access-policy/AmazonEKSEditPolicy")
    assert granted == expected
    assert ("DeployAccess" in resources) is answers.eks


# --- one answer set, every file: they all say the same thing ----------------------------------


@pytest.mark.parametrize("key", CHECKED)
def test_artifacts_agree(projects: dict[str, Path], key: str) -> None:
    project, answers = projects[key], ANSWERS[key]
    service, served = baked_service(project, answers)
    dlq = answers.dlq

    # The service's defaults are the answers, and its router serves the queue.
    assert service.name == answers.slug
    defaults = dict(service.environ)
    assert defaults.pop("WORKER_HANDLERS") == f"{answers.package}.handlers:router"
    answered = ("WORKER_QUEUES", "WORKER_CONCURRENCY", "WORKER_VISIBILITY_TIMEOUT_SECONDS", "WORKER_JOB_TIMEOUT_MS")
    answered += ("WORKER_SHUTDOWN_TIMEOUT_MS", "WORKER_MAX_RECEIVE_COUNT", "WORKER_METRICS_PORT", "AWS_REGION")
    assert defaults == {var: answers.env()[var] for var in answered}
    assert served == [answers.queue]

    # Every environment the worker gets, from every artifact that starts it.
    envs: dict[str, dict[str, str]] = {}
    compose = yaml.safe_load((project / "docker-compose.yml").read_text())["services"]
    envs["compose"] = {k: str(v) for k, v in compose["worker"]["environment"].items()}
    grace: dict[str, float] = {"compose stop_grace_period": seconds(compose["worker"]["stop_grace_period"])}
    probes: dict[str, list[str]] = {}
    replica_caps: dict[str, int] = {}
    queue_refs = {"compose": envs["compose"]["WORKER_QUEUES"], "service": defaults["WORKER_QUEUES"]}
    regions = {"compose": envs["compose"]["AWS_REGION"], "service": defaults["AWS_REGION"]}
    ports = {
        "compose": int(compose["worker"]["ports"][0].split(":")[-1]),
        "service": int(defaults["WORKER_METRICS_PORT"]),
    }
    images = {"compose": image_repository(compose["worker"]["image"])}

    dockerfile = dockerfile_instructions((project / "Dockerfile").read_text())
    ports["Dockerfile EXPOSE"] = int(next(args for ins, args in dockerfile if ins == "EXPOSE"))
    makefile = (project / "Makefile").read_text()
    images["Makefile"] = image_repository(re.search(r"^IMAGE \?= (\S+)", makefile, re.MULTILINE).group(1))
    workflow = load_workflow(project / ".github" / "workflows" / "ci.yml")
    build = next(s for s in workflow["jobs"]["image"]["steps"] if "docker/build-push-action" in s.get("uses", ""))
    images["CI"] = image_repository(build["with"]["tags"])
    regions["CI"] = workflow["env"]["AWS_REGION"]

    if answers.ecs:
        stack = EcsStack.load(project, answers.region)
        container = next(
            c for c in stack.api["AWS::ECS::TaskDefinition"]["containerDefinitions"] if c["name"] == "worker"
        )
        envs["ecs"] = env_list(container["environment"])
        grace["ECS stopTimeout"] = container["stopTimeout"]
        assert container["stopTimeout"] <= LIMITS.ECS_MAX_STOP_TIMEOUT
        probes["ECS healthCheck"] = container["healthCheck"]["command"]
        ports["ECS portMappings"] = container["portMappings"][0]["containerPort"]
        images["ECS"] = image_repository(container["image"])
        regions["ECS awslogs"] = container["logConfiguration"]["options"]["awslogs-region"]
        regions["ECS collector EMF"] = ecs_collector_config(project, answers.region)["exporters"]["awsemf"]["region"]
        regions["ECS image registry"] = re.search(r"\.ecr\.([a-z0-9-]+)\.", container["image"]).group(1)
        replica_caps["ECS MaxCapacity"] = stack.api["AWS::ApplicationAutoScaling::ScalableTarget"]["MaxCapacity"]
        tracking = stack.api["AWS::ApplicationAutoScaling::ScalingPolicy"]["TargetTrackingScalingPolicyConfiguration"]
        for metric in tracking["CustomizedMetricSpecification"]["Metrics"]:
            for dim in metric.get("MetricStat", {}).get("Metric", {}).get("Dimensions", []):
                if dim["Name"] == "QueueName":
                    queue_refs["ECS autoscaling"] = dim["Value"]

    if answers.eks:
        k8s = load_k8s(project)
        pod = worker_pod(k8s)
        (container,) = pod["spec"]["containers"]
        envs["k8s"] = env_list(container["env"])
        grace["Kubernetes terminationGracePeriodSeconds"] = pod["spec"]["terminationGracePeriodSeconds"]
        probes["k8s livenessProbe"] = container["livenessProbe"]["exec"]["command"]
        probes["k8s startupProbe"] = container["startupProbe"]["exec"]["command"]
        ports["k8s containerPort"] = container["ports"][0]["containerPort"]
        ports["k8s annotation"] = int(pod["metadata"]["annotations"]["prometheus.io/port"])
        ports["k8s Service"] = k8s["Service"]["spec"]["ports"][0]["port"]
        images["k8s"] = image_repository(container["image"])
        regions["k8s image registry"] = re.search(r"\.ecr\.([a-z0-9-]+)\.", container["image"]).group(1)
        so = k8s["ScaledJob" if answers.scaledjob else "ScaledObject"]["spec"]
        replica_caps["KEDA maxReplicaCount"] = so["maxReplicaCount"]
        for trigger in so["triggers"]:
            meta = trigger["metadata"]
            regions[f"KEDA {trigger['type']}"] = meta["awsRegion"]
            if "queueURL" in meta:
                queue_refs["KEDA queueURL"] = meta["queueURL"].rsplit("/", 1)[1]
                regions["KEDA queueURL"] = meta["queueURL"].split(".")[1]
            if meta.get("dimensionName") == "QueueName":
                queue_refs["KEDA aws-cloudwatch"] = meta["dimensionValue"]

    queues = load_cfn(project / "deploy" / "aws" / "queues.yaml")["Resources"]
    sqs_queues = {
        r["Properties"]["QueueName"]: r["Properties"] for r in queues.values() if r["Type"] == "AWS::SQS::Queue"
    }
    assert set(sqs_queues) == {answers.queue, dlq}
    visibility = sqs_queues[answers.queue]["VisibilityTimeout"]
    max_receive = sqs_queues[answers.queue]["RedrivePolicy"]["maxReceiveCount"]
    policy_doc = json.loads((project / "deploy" / "aws" / "worker-policy.json").read_text())
    for statement in policy_doc["Statement"]:
        arn = statement["Resource"]
        if arn != "*" and arn.split(":")[2] != "s3":  # S3 ARNs name no region; X-Ray's is "*"
            regions[f"policy {statement['Sid']}"] = arn.split(":")[3]
        if arn.startswith(f"arn:{aws_partition(answers.region)[0]}:sqs:"):
            assert arn.rsplit(":", 1)[1] in (answers.queue, dlq)
    alerts = yaml.safe_load((project / "deploy" / "prometheus" / "alerts.yaml").read_text())
    stall_alert = next(
        r["expr"] for g in alerts["groups"] for r in g["rules"] if "worker_last_progress_timestamp_seconds" in r["expr"]
    )

    # Timings: job < shutdown < platform grace; the ECS grace within Fargate's maximum.
    assert answers.job_timeout < answers.shutdown
    for where, value in grace.items():
        assert value > answers.shutdown, f"{where} ({value}) must exceed the shutdown timeout {answers.shutdown}"
        if where != "compose stop_grace_period":
            assert value == answers.grace, where
    for where, env in envs.items():
        unread = set(env) - answers.variables
        assert not unread, f"{where}: {unread} are not settings the worker reads"
        # The engine starts with it over the service's defaults, and both say the same.
        load_settings(env, service)
        shared = env.keys() & defaults.keys()
        assert {var: env[var] for var in shared} == {var: defaults[var] for var in shared}, where
        assert int(env["WORKER_JOB_TIMEOUT_MS"]) == answers.job_timeout * 1000, where
        assert int(env["WORKER_SHUTDOWN_TIMEOUT_MS"]) == answers.shutdown * 1000, where
        assert int(env["WORKER_JOB_TIMEOUT_MS"]) < int(env["WORKER_SHUTDOWN_TIMEOUT_MS"]), where
        assert int(env["WORKER_SHUTDOWN_TIMEOUT_MS"]) / 1000 < min(grace.values()), where
        # Visibility: the queue's lease is the one the worker heartbeats against.
        assert int(env["WORKER_VISIBILITY_TIMEOUT_SECONDS"]) == visibility == answers.visibility, where
        assert visibility * float(env["WORKER_HEARTBEAT_FRACTION"]) >= 1, f"{where}: heartbeat under 1 s"
        assert int(env["WORKER_MAX_RECEIVE_COUNT"]) == max_receive == answers.max_receive, where
        # Liveness: stalled means longer than any job may run.
        assert float(env["WORKER_STALLED_AFTER_SECONDS"]) > answers.job_timeout, where
        assert env["WORKER_HEALTH_FILE"].startswith("/tmp/"), f"{where}: health file off the writable /tmp"
        queue_refs[f"{where} env"] = env["WORKER_QUEUES"]
        regions[f"{where} env"] = env["AWS_REGION"]
        ports[f"{where} env"] = int(env["WORKER_METRICS_PORT"])
        if "DB_POOL_SIZE" in env:
            pool = int(env["DB_POOL_SIZE"])
            assert int(env["WORKER_CONCURRENCY"]) <= pool, f"{where}: concurrency above DB_POOL_SIZE"
            for cap in replica_caps.values():
                assert cap * pool <= LIMITS.FLEET_CONCURRENCY_BUDGET, f"{where}: {cap} replicas x DB_POOL_SIZE {pool}"
    for where, command in probes.items():
        flag = next(arg for arg in command if arg.startswith("--stalled-after="))
        assert float(flag.split("=", 1)[1]) == answers.stalled_after > answers.job_timeout, where
    assert float(stall_alert.rsplit(">", 1)[1]) == answers.stalled_after

    # Capacity: the fleet's handlers stay within the downstream budget.
    for where, cap in replica_caps.items():
        assert cap == answers.max_replicas, where
        assert cap * answers.concurrency <= max(LIMITS.FLEET_CONCURRENCY_BUDGET, answers.concurrency), where

    # One queue, one region, one port, one image name, everywhere.
    assert set(queue_refs.values()) == {answers.queue}, queue_refs
    assert set(regions.values()) == {answers.region}, regions
    assert set(ports.values()) == {answers.port}, ports
    assert set(images.values()) == {answers.slug}, images


def test_the_metrics_named_are_the_runtimes() -> None:
    """The dashboard and alerts are checked against engine_metrics(): it must find every
    metric the engine's metrics.py creates (db_pool_in_use, created on demand, included), or
    those checks would call a real metric unknown, or miss one no panel shows."""
    text = (ROOT / "engine" / "src" / "sqs_worker_engine" / "metrics.py").read_text()
    suffix = {"Counter": "_total", "Info": "_info"}
    created = {
        name + suffix.get(kind, ""): kind.lower()
        for kind, name in re.findall(r"\b(Counter|Gauge|Histogram|Info)\(\s*\"([a-z_:]+)\"", text)
    }
    assert engine_metrics() == created


# --- the validators catch what they are there to catch ----------------------------------------


def _mutate_text(rel: str, edit: Callable[[str], str]) -> Callable[[Path], Path]:
    def apply(project: Path) -> Path:
        path = project / rel
        new = edit(path.read_text())
        assert new != path.read_text(), f"mutation of {rel} changed nothing"
        path.write_text(new)
        return path

    return apply


def _defects() -> Iterator[Any]:
    yield pytest.param(
        _mutate_text("Dockerfile", lambda t: re.sub(r"FROM \S+ AS runtime", "FROM python:latest AS runtime", t)),
        lambda path, answers: hadolint_problems(path),
        id="hadolint",
    )
    yield pytest.param(
        _mutate_text(
            "docker-compose.yml", lambda t: t.replace("    init: true", "    init: true\n    restartt: always")
        ),
        lambda path, answers: jsonschema_cli_problems("vendor.compose-spec", path),
        id="compose-spec",
    )
    yield pytest.param(
        _mutate_text(
            ".github/workflows/ci.yml", lambda t: t.replace("runs-on: ubuntu-24.04", "runs_on: ubuntu-24.04", 1)
        ),
        lambda path, answers: jsonschema_cli_problems("vendor.github-workflows", path),
        id="github-workflows",
    )
    yield pytest.param(
        _mutate_text(
            ".github/workflows/release.yml",
            lambda t: t.replace("digest: ${{ steps.build.", "digest: ${{ steps.biuld."),
        ),
        lambda path, answers: actionlint_problems(path),
        id="actionlint",
    )
    yield pytest.param(
        _mutate_text("deploy/ecs/service.yaml", lambda t: re.sub(r"StopTimeout: (\d+)", r'StopTimeout: "\1"', t)),
        lambda path, answers: ecs_problems(ecs_task_definition(path.parents[2], answers.region)),
        id="ecs-botocore",
    )
    yield pytest.param(
        _mutate_text("deploy/ecs/service.yaml", lambda t: t.replace("ScaleInCooldown: 300", "ScaleInCooldown: soon")),
        lambda path, answers: cfn_problems(path, answers.region),
        id="cfn-lint-service",
    )
    yield pytest.param(
        _mutate_text(
            "deploy/aws/queues.yaml",
            lambda t: t.replace("ReceiveMessageWaitTimeSeconds: 20", "ReceiveMessageWaitTimeSeconds: 30"),
        ),
        lambda path, answers: cfn_problems(path, answers.region),
        id="cfn-lint-queues",
    )
    yield pytest.param(
        _mutate_text(
            "deploy/k8s/deployment.yaml",
            lambda t: t.replace("terminationGracePeriodSeconds:", "terminationGracePeriod:"),
        ),
        lambda path, answers: k8s_problems(yaml.safe_load(path.read_text())),
        id="kubernetes-validate",
    )
    yield pytest.param(
        _mutate_text("deploy/aws/worker-policy.json", lambda t: t.replace('"sqs:SendMessage"', '"sqs:*"')),
        lambda path, answers: answers.policy_problems(json.loads(path.read_text())),
        id="policy-wildcard",
    )
    yield pytest.param(
        _mutate_text(
            "deploy/aws/worker-policy.json",
            lambda t: t.replace('"sqs:ReceiveMessage"', '"sqs:ReceiveMessage", "sqs:PurgeQueue"'),
        ),
        lambda path, answers: answers.policy_problems(json.loads(path.read_text())),
        id="policy-extra-action",
    )
    yield pytest.param(
        _mutate_text("deploy/prometheus/alerts.yaml", lambda t: t.replace("[10m])) > 0", "[10m]) > 0", 1)),
        lambda path, answers: check_rules(path),
        id="prometheus-rules",
    )
    yield pytest.param(
        _mutate_text("deploy/grafana/dashboard.json", lambda t: t.replace("worker_inflight_jobs", "worker_busy_jobs")),
        lambda path, answers: sorted(
            name
            for panel in json.loads(path.read_text())["panels"]
            for target in panel["targets"]
            for name in unknown_metrics(target["expr"])
        ),
        id="dashboard-metric-names",
    )


@pytest.mark.parametrize(("mutate", "validate"), list(_defects()))
def test_validators_reject_defects(
    projects: dict[str, Path],
    tmp_path: Path,
    mutate: Callable[[Path], Path],
    validate: Callable[[Path, Answers], list[str]],
) -> None:
    project = tmp_path / "project"
    shutil.copytree(projects["defaults"], project)
    path = mutate(project)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the missing-promtool notice is the rules tests' to give
        assert validate(path, ANSWERS["defaults"]), f"a broken {path.name} passed its validator"


def test_keda_schema_rejects_defects(projects: dict[str, Path]) -> None:
    schemas = keda_schema_dir()
    scaled = copy.deepcopy(load_k8s(projects["defaults"])["ScaledObject"])
    scaled["spec"]["triggers"][0]["metadata"]["queueLength"] = 16  # KEDA wants strings
    scaled["spec"]["maxReplicas"] = 10  # not a ScaledObject field
    assert len(keda_problems(scaled, schemas)) >= 2
    job = copy.deepcopy(load_k8s(projects["eks-scaledjob"])["ScaledJob"])
    job["spec"]["scalingStrategy"]["strategy"] = 1  # a string
    job["spec"]["rollout"]["gradually"] = True  # not a rollout field
    del job["spec"]["jobTargetRef"]
    assert len(keda_problems(job, schemas)) >= 3


def test_promql_metric_names() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, queue) (rate(job_duration_seconds_bucket{job="x", queue=~"$q"}[5m])))'
        " / on (queue) group_left() max without (instance) (worker_concurrency offset 1h) and time() - 1e3"
    )
    assert promql_metric_names(expr) == {"job_duration_seconds_bucket", "worker_concurrency"}
    assert unknown_metrics("rate(not_a_metric_total[5m])") == {"not_a_metric_total"}
    assert unknown_metrics("time() - 5") == {"<no metric at all>"}


def test_promtool_rejects_bad_rules(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: rate(x[5m]\n        labels: {}\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert check_rules(rules)


def test_rules_fallback_is_announced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without promtool the rules get the structure check, with a warning: never a silent pass."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up == 0\n        labels: {severity: info}\n"
    )
    monkeypatch.setattr(shutil, "which", lambda *args, **kwargs: None)
    with pytest.warns(UserWarning, match="promtool is not installed"):
        assert check_rules(rules) == []
