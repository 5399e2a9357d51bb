"""The bake's own deploy files, read for what the simulator plays: what ships is what runs.

From `deploy/k8s/`: the Deployment (its worker's environment, grace period, rolling update)
and its KEDA ScaledObject (replica bounds, polling, the HPA's behaviour, the SQS and
CloudWatch triggers), or the KEDA ScaledJob (its strategy, polling, bounds, Job deadline).
From `deploy/ecs/service.yaml`: the task's environment and stop timeout, the service's
deployment configuration, the Application Auto Scaling target, its target tracking policy
if it has one (and whether its scale-in is disabled), and its step scaling policies: those
that scale out, each on a high alarm, and one that scales in on a low alarm, each with the
CloudWatch alarm that invokes it. The generated stack has no target tracking policy since
its scale-out is sized on what the tasks clear; a service's own may add one.

Defaults a manifest leaves out are the platforms' own (KEDA's, the HPA's, ECS's), so a
service whose owner deleted a line is simulated as it would run. Needs PyYAML (the
engine's `fleet` extra).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...base.limits import FIFO_SUFFIX
from ..sqs import metricmath
from ..sqs.counts import DATAPOINT_METRICS
from .stepscaling import HIGH_COMPARISONS, LOW_COMPARISONS, Step, StepScaling


class DeployFileError(Exception):
    """A deploy file is missing, does not parse, or lacks what the simulator needs."""


@dataclass(frozen=True)
class Policy:
    kind: str  # Pods or Percent
    value: int
    period: int  # seconds


@dataclass(frozen=True)
class Rules:
    """One direction of the HPA's `behavior`."""

    stabilization: int
    select: str  # Max, Min or Disabled
    policies: tuple[Policy, ...]


# The HPA's defaults (Kubernetes' autoscaling/v2 `behavior`, unset).
DEFAULT_SCALE_UP = Rules(0, "Max", (Policy("Percent", 100, 15), Policy("Pods", 4, 15)))
DEFAULT_SCALE_DOWN = Rules(300, "Max", (Policy("Percent", 100, 15),))


@dataclass(frozen=True)
class SqsTrigger:
    """KEDA's aws-sqs-queue scaler."""

    queue_length: int = 5
    activation: int = 0
    in_flight: bool = True
    delayed: bool = False


@dataclass(frozen=True)
class AgeTrigger:
    """KEDA's aws-cloudwatch scaler on AWS/SQS ApproximateAgeOfOldestMessage."""

    target: float
    activation: float = 0.0


@dataclass(frozen=True)
class Worker:
    """The worker container's settings, as its environment gives them."""

    env: dict[str, str]
    grace: float  # seconds from SIGTERM to SIGKILL
    cpu: float = 0.25  # vCPU a replica is billed for (requests on Kubernetes, the task's on ECS)
    memory_gib: float = 0.5

    @property
    def queue(self) -> str:
        return self.env.get("WORKER_QUEUES", "jobs").split(",")[0]

    @property
    def fifo(self) -> bool:
        return self.queue.endswith(FIFO_SUFFIX)

    def number(self, name: str, default: float) -> float:
        return float(self.env.get(name, default))

    @property
    def concurrency(self) -> int:
        return int(self.number("WORKER_CONCURRENCY", 8))


@dataclass(frozen=True)
class ScaledObject:
    minimum: int
    maximum: int
    polling: int
    cooldown: int
    scale_up: Rules
    scale_down: Rules
    sqs: SqsTrigger | None
    age: AgeTrigger | None


@dataclass(frozen=True)
class Deployment:
    worker: Worker
    max_surge: int
    max_unavailable: int
    scaling: ScaledObject


@dataclass(frozen=True)
class ScaledJob:
    worker: Worker
    minimum: int
    maximum: int
    polling: int
    strategy: str
    pending_conditions: tuple[str, ...]
    sqs: SqsTrigger
    deadline: float  # activeDeadlineSeconds


@dataclass(frozen=True)
class EcsService:
    worker: Worker
    minimum: int
    maximum: int
    target: float | None  # target tracking's messages per running task (None: the stack has no such policy)
    scale_out_cooldown: int
    scale_in_cooldown: int
    min_healthy_percent: int
    max_percent: int
    # Target tracking's metric math, as the stack writes it: its metrics by id, and the
    # expression whose value is held at the target (empty: visible messages / running tasks).
    tracking_metrics: tuple[tuple[str, str], ...] = ()
    tracking_expression: str = ""
    steps_out: tuple[StepScaling, ...] = ()  # step scaling policies that scale out, each on a high alarm of its own
    step_in: StepScaling | None = None  # a step scaling policy that scales in, on a low alarm of its own
    scale_in_disabled: bool = False  # target tracking's DisableScaleIn: it only scales out


@dataclass(frozen=True)
class Bake:
    """What a bake deploys, per platform (None where it does not)."""

    kubernetes: Deployment | ScaledJob | None = None
    ecs: EcsService | None = None
    files: tuple[str, ...] = field(default=())

    def platforms(self) -> list[str]:
        return [name for name, spec in (("kubernetes", self.kubernetes), ("ecs", self.ecs)) if spec is not None]


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:  # pragma: no cover - the extra is missing
        raise DeployFileError(
            "reading deploy files needs PyYAML: install the engine's `fleet` extra (sqs-worker-engine[fleet])"
        ) from None
    return yaml


def _documents(path: Path) -> list[dict[str, Any]]:
    yaml = _yaml()
    try:
        return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    except yaml.YAMLError as exc:
        raise DeployFileError(f"{path}: not YAML ({exc})") from None


def cloudformation(path: Path) -> dict[str, Any]:
    """A CloudFormation template, its short-form functions (!Ref, !Sub...) kept as
    {"Ref": ...} and the like so the values they name can be looked up."""
    yaml = _yaml()

    class Loader(yaml.SafeLoader):  # type: ignore[misc,name-defined]
        pass

    def function(loader: Any, suffix: str, node: Any) -> dict[str, Any]:
        name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
        if isinstance(node, yaml.ScalarNode):
            value: Any = loader.construct_scalar(node)
        elif isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        else:
            value = loader.construct_mapping(node, deep=True)
        return {name: value}

    Loader.add_multi_constructor("!", function)
    try:
        document = yaml.load(path.read_text(), Loader=Loader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise DeployFileError(f"{path}: not YAML ({exc})") from None
    if not isinstance(document, dict):
        raise DeployFileError(f"{path}: not a CloudFormation template")
    return document


def _int(value: Any, where: str) -> int:
    try:
        return int(str(value))
    except ValueError:
        raise DeployFileError(f"{where}: {value!r} is not a whole number") from None


def _bool(value: Any) -> bool:
    return str(value).strip().lower() == "true"


def _rules(raw: dict[str, Any] | None, default: Rules) -> Rules:
    if not raw:
        return default
    policies = tuple(
        Policy(str(p["type"]), _int(p["value"], "policy value"), _int(p["periodSeconds"], "policy period"))
        for p in raw.get("policies", [])
    )
    return Rules(
        _int(raw.get("stabilizationWindowSeconds", default.stabilization), "stabilizationWindowSeconds"),
        str(raw.get("selectPolicy", "Max")),
        policies or default.policies,
    )


def _sqs(metadata: dict[str, Any], *, in_flight_default: bool = True) -> SqsTrigger:
    return SqsTrigger(
        queue_length=_int(metadata.get("queueLength", 5), "queueLength"),
        activation=_int(metadata.get("activationQueueLength", 0), "activationQueueLength"),
        in_flight=_bool(metadata.get("scaleOnInFlight", str(in_flight_default))),
        delayed=_bool(metadata.get("scaleOnDelayed", "false")),
    )


def _pod_worker(pod_spec: dict[str, Any], where: str) -> Worker:
    """The worker container of a pod template: its environment, grace period and requests."""
    for container in pod_spec.get("containers", []):
        if container.get("name") == "worker":
            env = {str(e["name"]): str(e.get("value", "")) for e in container.get("env", []) if "value" in e}
            requests = container.get("resources", {}).get("requests", {})
            return Worker(
                env,
                float(pod_spec.get("terminationGracePeriodSeconds", 30)),
                cpu=_cpu(requests.get("cpu", "250m")),
                memory_gib=_memory(requests.get("memory", "512Mi")),
            )
    raise DeployFileError(f"{where}: no container named worker")


def _cpu(value: Any) -> float:
    text = str(value)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _memory(value: Any) -> float:
    text = str(value)
    for suffix, gib in (("Gi", 1.0), ("Mi", 1 / 1024), ("G", 1e9 / 2**30), ("M", 1e6 / 2**30)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * gib
    return float(text) / 2**30


def read_kubernetes(directory: Path) -> Deployment | ScaledJob | None:
    documents: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.yaml")):
        for document in _documents(path):
            documents.setdefault(str(document.get("kind")), document)
    if "ScaledJob" in documents:
        return _scaled_job(documents["ScaledJob"])
    if "Deployment" not in documents:
        return None
    if "ScaledObject" not in documents:
        raise DeployFileError(f"{directory}: a Deployment without a KEDA ScaledObject: nothing scales it")
    return _deployment(documents["Deployment"], documents["ScaledObject"])


def _deployment(manifest: dict[str, Any], scaled: dict[str, Any]) -> Deployment:
    worker = _pod_worker(manifest["spec"]["template"]["spec"], "Deployment")
    rolling = manifest["spec"].get("strategy", {}).get("rollingUpdate", {})
    spec = scaled["spec"]
    behavior = spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior", {})
    sqs, age = None, None
    for trigger in spec.get("triggers", []):
        metadata = trigger.get("metadata", {})
        if trigger.get("type") == "aws-sqs-queue":
            sqs = _sqs(metadata)
        elif trigger.get("type") == "aws-cloudwatch" and metadata.get("metricName") == "ApproximateAgeOfOldestMessage":
            age = AgeTrigger(
                float(metadata.get("targetMetricValue", 0)), float(metadata.get("activationTargetMetricValue", 0))
            )
    if sqs is None and age is None:
        raise DeployFileError("ScaledObject: no aws-sqs-queue or SQS age trigger to simulate")
    return Deployment(
        worker,
        _percent_or_int(rolling.get("maxSurge", "25%")),
        _percent_or_int(rolling.get("maxUnavailable", "25%")),
        ScaledObject(
            minimum=_int(spec.get("minReplicaCount", 0), "minReplicaCount"),
            maximum=_int(spec.get("maxReplicaCount", 100), "maxReplicaCount"),
            polling=_int(spec.get("pollingInterval", 30), "pollingInterval"),
            cooldown=_int(spec.get("cooldownPeriod", 300), "cooldownPeriod"),
            scale_up=_rules(behavior.get("scaleUp"), DEFAULT_SCALE_UP),
            scale_down=_rules(behavior.get("scaleDown"), DEFAULT_SCALE_DOWN),
            sqs=sqs,
            age=age,
        ),
    )


def _percent_or_int(value: Any) -> int:
    """maxSurge/maxUnavailable: a count, or a percentage (taken as one pod: the simulator's
    rollouts replace pods one batch at a time)."""
    text = str(value)
    return 1 if text.endswith("%") and text != "0%" else (0 if text == "0%" else int(text))


def _scaled_job(manifest: dict[str, Any]) -> ScaledJob:
    spec = manifest["spec"]
    target = spec["jobTargetRef"]
    worker = _pod_worker(target["template"]["spec"], "ScaledJob")
    strategy = spec.get("scalingStrategy", {})
    sqs = next(
        (
            _sqs(t.get("metadata", {}), in_flight_default=True)
            for t in spec.get("triggers", [])
            if t.get("type") == "aws-sqs-queue"
        ),
        None,
    )
    if sqs is None:
        raise DeployFileError("ScaledJob: no aws-sqs-queue trigger to simulate")
    return ScaledJob(
        worker,
        minimum=_int(spec.get("minReplicaCount", 0), "minReplicaCount"),
        maximum=_int(spec.get("maxReplicaCount", 100), "maxReplicaCount"),
        polling=_int(spec.get("pollingInterval", 30), "pollingInterval"),
        strategy=str(strategy.get("strategy", "default")),
        pending_conditions=tuple(str(c) for c in strategy.get("pendingPodConditions", [])),
        sqs=sqs,
        deadline=float(target.get("activeDeadlineSeconds", 1e9)),
    )


def read_ecs(path: Path) -> EcsService:
    template = cloudformation(path)
    parameters = template.get("Parameters", {})
    resources = template.get("Resources", {})

    def resolve(value: Any) -> Any:
        if isinstance(value, dict) and "Ref" in value and value["Ref"] in parameters:
            return parameters[value["Ref"]].get("Default")
        if isinstance(value, dict) and isinstance(value.get("Fn::Sub"), str):
            # ${Parameter} as its default; anything else is kept as written.
            return re.sub(
                r"\$\{(\w+)\}",
                lambda m: str(parameters[m[1]].get("Default")) if m[1] in parameters else m[0],
                value["Fn::Sub"],
            )
        return value

    def kind(name: str) -> dict[str, Any]:
        for resource in resources.values():
            if resource.get("Type") == name:
                return dict(resource.get("Properties", {}))
        raise DeployFileError(f"{path}: no {name}")

    task = kind("AWS::ECS::TaskDefinition")
    container = next((c for c in task.get("ContainerDefinitions", []) if c.get("Name") == "worker"), None)
    if container is None:
        raise DeployFileError(f"{path}: no container named worker")
    env = {str(e["Name"]): str(resolve(e["Value"])) for e in container.get("Environment", []) if "Value" in e}
    # ECS's default stopTimeout is 30 s; a Fargate task is billed for its Cpu (1024 units a
    # vCPU) and Memory (MiB).
    worker = Worker(
        env,
        float(container.get("StopTimeout", 30)),
        cpu=float(resolve(task.get("Cpu", "256"))) / 1024,
        memory_gib=float(resolve(task.get("Memory", "512"))) / 1024,
    )
    deployment = kind("AWS::ECS::Service").get("DeploymentConfiguration", {})
    target = kind("AWS::ApplicationAutoScaling::ScalableTarget")
    policies = {
        name: dict(r.get("Properties", {}))
        for name, r in resources.items()
        if r.get("Type") == "AWS::ApplicationAutoScaling::ScalingPolicy"
    }
    policy: dict[str, Any] = next(
        (
            p["TargetTrackingScalingPolicyConfiguration"]
            for p in policies.values()
            if p.get("TargetTrackingScalingPolicyConfiguration")
        ),
        {},
    )
    tracking_metrics, tracking_expression = _tracking_math(path, policy, resolve)
    steps_out, step_in = _step_policies(path, policies, resources, resolve)
    if not policy and not steps_out:
        raise DeployFileError(f"{path}: no scaling policy scales the service out (target tracking or step scaling)")
    return EcsService(
        worker,
        minimum=_int(resolve(target.get("MinCapacity", 1)), "MinCapacity"),
        maximum=_int(resolve(target.get("MaxCapacity", 1)), "MaxCapacity"),
        target=float(resolve(policy["TargetValue"])) if policy else None,
        # Application Auto Scaling's defaults for ECS: 300 s both ways.
        scale_out_cooldown=_int(resolve(policy.get("ScaleOutCooldown", 300)), "ScaleOutCooldown"),
        scale_in_cooldown=_int(resolve(policy.get("ScaleInCooldown", 300)), "ScaleInCooldown"),
        min_healthy_percent=_int(resolve(deployment.get("MinimumHealthyPercent", 100)), "MinimumHealthyPercent"),
        max_percent=_int(resolve(deployment.get("MaximumPercent", 200)), "MaximumPercent"),
        tracking_metrics=tracking_metrics,
        tracking_expression=tracking_expression,
        steps_out=steps_out,
        step_in=step_in,
        # Without target tracking, nothing but the step policies scales in.
        scale_in_disabled=_bool(resolve(policy.get("DisableScaleIn", False))) if policy else True,
    )


STEP_ADJUSTMENT_TYPES = ("ChangeInCapacity", "PercentChangeInCapacity", "ExactCapacity")


def _tracking_math(
    path: Path, policy: dict[str, Any], resolve: Callable[[Any], Any]
) -> tuple[tuple[tuple[str, str], ...], str]:
    """Target tracking's metrics by id and the expression it tracks (none without a policy)."""
    metrics, expression, _ = _metric_math(policy.get("CustomizedMetricSpecification", {}).get("Metrics", []), resolve)
    counted = {name for _, name in metrics}
    if policy and not counted & {"ApproximateNumberOfMessagesVisible", "ApproximateNumberOfMessagesNotVisible"}:
        raise DeployFileError(f"{path}: the target tracking policy counts neither visible messages nor those in flight")
    problem = metricmath.check(expression, {metric_id for metric_id, _ in metrics}) if expression != "" else None
    unknown = [name for _, name in metrics if name not in DATAPOINT_METRICS]
    if unknown or problem:
        raise DeployFileError(
            f"{path}: the target tracking policy's metric math is not simulated: {problem or ', '.join(unknown)}"
        )
    return metrics, expression


def _metric_math(
    entries: list[dict[str, Any]], resolve: Callable[[Any], Any]
) -> tuple[tuple[tuple[str, str], ...], str, list[int]]:
    """A policy's or an alarm's metric math: (its metrics as (id, name), the expression it
    returns, each metric's period)."""
    metrics, expression, periods = [], "", []
    for metric in entries:
        if "MetricStat" in metric:
            metrics.append((str(metric["Id"]), str(metric["MetricStat"]["Metric"].get("MetricName"))))
            periods.append(_int(metric["MetricStat"].get("Period", 60), "Period"))
            if metric.get("ReturnData", True) and "Expression" not in metric:
                expression = str(metric["Id"])
        elif metric.get("ReturnData", True) and "Expression" in metric:
            expression = str(resolve(metric["Expression"]))
    return tuple(metrics), expression, periods


def _step_policies(
    path: Path, policies: dict[str, dict[str, Any]], resources: dict[str, Any], resolve: Callable[[Any], Any]
) -> tuple[tuple[StepScaling, ...], StepScaling | None]:
    """The step scaling policies, each with the alarm whose action invokes it: (those that
    scale out, the one that scales in)."""
    steps = {
        name: p["StepScalingPolicyConfiguration"]
        for name, p in policies.items()
        if p.get("StepScalingPolicyConfiguration")
    }
    read = [_step_scaling(path, name, config, resources, resolve) for name, config in steps.items()]
    out = [s for s in read if not s.scales_in]
    in_ = [s for s in read if s.scales_in]
    if len(in_) > 1:
        raise DeployFileError(
            f"{path}: {len(in_)} step scaling policies on low alarms: the simulator plays one that scales in"
        )
    return tuple(out), (in_[0] if in_ else None)


def _step_scaling(
    path: Path, name: str, config: dict[str, Any], resources: dict[str, Any], resolve: Callable[[Any], Any]
) -> StepScaling:
    """One step scaling policy, with the alarm whose action invokes it."""
    alarm = next(
        (
            dict(r.get("Properties", {}))
            for r in resources.values()
            if r.get("Type") == "AWS::CloudWatch::Alarm"
            and {"Ref": name} in r.get("Properties", {}).get("AlarmActions", [])
        ),
        None,
    )
    if alarm is None:
        raise DeployFileError(f"{path}: no CloudWatch alarm invokes the step scaling policy {name}")
    comparison = str(alarm.get("ComparisonOperator", ""))
    if comparison not in HIGH_COMPARISONS + LOW_COMPARISONS:
        raise DeployFileError(
            f"{path}: the alarm of the step scaling policy {name} compares with {comparison!r}: "
            f"the simulator plays {', '.join(HIGH_COMPARISONS + LOW_COMPARISONS)}"
        )
    single = [{"Id": "m", "ReturnData": True, "MetricStat": {"Metric": alarm, "Period": alarm.get("Period", 60)}}]
    metrics, expression, periods = _metric_math(alarm.get("Metrics", single), resolve)
    unknown = [m for _, m in metrics if m not in DATAPOINT_METRICS]
    if unknown or any(p != 60 for p in periods) or not expression:
        raise DeployFileError(
            f"{path}: the step scaling alarm is simulated on one-minute SQS and ECS metrics "
            f"({', '.join(DATAPOINT_METRICS)}) only"
        )
    problem = metricmath.check(expression, {metric_id for metric_id, _ in metrics})
    if problem:
        raise DeployFileError(f"{path}: the step scaling alarm's expression {expression!r}: {problem}")
    adjustment_type = str(config.get("AdjustmentType"))
    if adjustment_type not in STEP_ADJUSTMENT_TYPES:
        raise DeployFileError(
            f"{path}: the step scaling policy's AdjustmentType {adjustment_type!r} is not one of {', '.join(STEP_ADJUSTMENT_TYPES)}"
        )
    periods_to_alarm = _int(resolve(alarm.get("EvaluationPeriods", 1)), "EvaluationPeriods")
    adjustments = [
        Step(
            _bound(step.get("MetricIntervalLowerBound")),
            _bound(step.get("MetricIntervalUpperBound")),
            float(resolve(step["ScalingAdjustment"])),
        )
        for step in config.get("StepAdjustments", [])
    ]
    scales_in = comparison in LOW_COMPARISONS
    if adjustment_type != "ExactCapacity" and any(
        (s.adjustment > 0) if scales_in else (s.adjustment < 0) for s in adjustments
    ):
        raise DeployFileError(
            f"{path}: the step scaling policy {name} "
            + ("adds capacity on a low alarm" if scales_in else "removes capacity on a high alarm")
            + ": the simulator plays a high alarm's policy scaling out and a low alarm's scaling in"
        )
    return StepScaling(
        metrics=tuple(metrics),
        expression=expression,
        threshold=float(resolve(alarm.get("Threshold", 0))),
        periods=periods_to_alarm,
        datapoints=_int(resolve(alarm.get("DatapointsToAlarm", periods_to_alarm)), "DatapointsToAlarm"),
        adjustment_type=adjustment_type,
        steps=tuple(adjustments),
        # Application Auto Scaling's default cooldown for ECS: 300 s.
        cooldown=_int(resolve(config.get("Cooldown", 300)), "Cooldown"),
        min_magnitude=_int(resolve(config.get("MinAdjustmentMagnitude", 0)), "MinAdjustmentMagnitude"),
        comparison=comparison,
    )


def _bound(value: Any) -> float | None:
    return None if value is None else float(value)


def read(deploy: Path) -> Bake:
    """Every platform `deploy/` (a bake's deploy directory) has files for."""
    if not deploy.is_dir():
        raise DeployFileError(f"{deploy}: no such directory (a service's deploy/)")
    k8s = deploy / "k8s"
    ecs = deploy / "ecs" / "service.yaml"
    kubernetes = read_kubernetes(k8s) if k8s.is_dir() else None
    service = read_ecs(ecs) if ecs.is_file() else None
    if kubernetes is None and service is None:
        raise DeployFileError(f"{deploy}: neither k8s/ (a Deployment or ScaledJob) nor ecs/service.yaml")
    files = [f"k8s/{p.name}" for p in sorted(k8s.glob("*.yaml"))]
    if service is not None:
        files.append("ecs/service.yaml")
    return Bake(kubernetes, service, tuple(files))
