"""What the deployment-artifact tests share (tests/test_artifacts_*.py): the answer sets they
check, what each answer means for the files baked, and the readers of artifacts more than one
of them looks into.

Every answer set tests/matrix.py checks at depth "full" or "checked" is baked once per
test process (conftest's `projects`, shared with test_readmes) and every validator runs on every
deploy target it applies to; every supported set is baked to show that the files of a target
that was not chosen do not exist. The validators (tests/validators.py) are shown to reject a
broken artifact (test_artifacts_defects.py), so a green run means the checks looked, not that
they could not fail. Facts come from the engine (`LIMITS`, its settings, its metrics) and the
service's defaults from the baked service itself, imported: nothing is recovered by parsing
rendered code.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import yaml
from conftest import run
from matrix import COOKIECUTTER, LIMITS, SUPPORTED, names
from sqs_worker_engine.process.settings import ServiceDefaults, load_settings
from sqs_worker_engine.process.settings.fields import ALIASES
from validators import (
    PLACEHOLDER_ACCOUNT,
    api_shape,
    cfn_names,
    cfn_resolve,
    env_list,
    load_cfn,
    policy_problems,
)

from sqs_worker_template_jinja.aws import PAYLOAD_BUCKET_PLACEHOLDER
from sqs_worker_template_jinja.aws import secrets as owner_secrets

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
    "deploy/settings.env",
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
    "deploy/k8s/monitoring/servicemonitor.yaml",
    "deploy/k8s/monitoring/prometheusrule.yaml",
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
            secrets=tuple(owner_secrets(c)),
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
            set(ALIASES)
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
                "WORKER_RETRY_BASE_SECONDS": str(LIMITS.retry_base_outlasting(self.max_receive)),
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


# Placeholders for what the ECS stack's own resources resolve to (Ref and GetAtt).
ECS_RESOURCES = {
    "LogGroup": "/ecs/log-group",
    "LogGroup.Arn": f"arn:aws:logs:us-east-1:{PLACEHOLDER_ACCOUNT}:log-group:/ecs/log-group:*",
    "ExecutionRole.Arn": f"arn:aws:iam::{PLACEHOLDER_ACCOUNT}:role/execution",
    "TaskRole.Arn": f"arn:aws:iam::{PLACEHOLDER_ACCOUNT}:role/task",
    "SecurityGroup.GroupId": "sg-0123456789abcdef0",
    "TaskDefinition": f"arn:aws:ecs:us-east-1:{PLACEHOLDER_ACCOUNT}:task-definition/family:1",
    "Service.Name": "service-name",
    # An alarm's Ref is its name (the deployment alarms name it).
    "WorkerJobErrorRatioHighAlarm": "stack-WorkerJobErrorRatioHighAlarm-0123456789AB",
    "WorkerReleaseFailingAlarm": "stack-WorkerReleaseFailingAlarm-0123456789AB",
    "ScalableTarget": "scalable-target-id",
    "DemandStepPolicy": (
        f"arn:aws:autoscaling:us-east-1:{PLACEHOLDER_ACCOUNT}:scalingPolicy:00000000-0000-0000-0000-000000000000:"
        "resource/ecs/service/cluster/service-name:policyName/service-name-sqs-demand-step"
    ),
    "BacklogScaleInPolicy": (
        f"arn:aws:autoscaling:us-east-1:{PLACEHOLDER_ACCOUNT}:scalingPolicy:00000000-0000-0000-0000-000000000001:"
        "resource/ecs/service/cluster/service-name:policyName/service-name-sqs-backlog-scale-in"
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
            # Two roles and two log groups (the worker's logs first, then its EMF metrics); three
            # scaling policies (target tracking, the scale-out step policy, the scale-in one).
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


def ecs_collector_config(project: Path, region: str) -> dict[str, Any]:
    """The ECS collector's configuration (its AOT_CONFIG_CONTENT), parsed."""
    task = EcsStack.load(project, region).api["AWS::ECS::TaskDefinition"]
    collector = next(c for c in task["containerDefinitions"] if c["name"] == "otel-collector")
    config: dict[str, Any] = yaml.safe_load(env_list(collector["environment"])["AOT_CONFIG_CONTENT"])
    return config


def worker_pod(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The worker's pod template: the Deployment's, or that of the Jobs a ScaledJob starts."""
    if "ScaledJob" in objects:
        return objects["ScaledJob"]["spec"]["jobTargetRef"]["template"]
    return objects["Deployment"]["spec"]["template"]
