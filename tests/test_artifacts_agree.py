"""One answer set, every file: they all say the same thing, and the metrics they name are the
engine's."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from artifacts import (
    ANSWERS,
    CHECKED,
    EcsStack,
    baked_service,
    ecs_collector_config,
    worker_pod,
)
from conftest import ROOT
from matrix import LIMITS
from sqs_worker_engine.process.settings import load_settings
from validators import (
    aws_partition,
    dockerfile_instructions,
    engine_metrics,
    env_list,
    image_repository,
    load_cfn,
    load_k8s,
    load_workflow,
    seconds,
)

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
    answered += ("WORKER_SHUTDOWN_TIMEOUT_MS", "WORKER_MAX_RECEIVE_COUNT", "WORKER_RETRY_BASE_SECONDS")
    answered += ("WORKER_METRICS_PORT", "AWS_REGION")
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
    text = (ROOT / "engine" / "src" / "sqs_worker_engine" / "base" / "telemetry" / "metrics.py").read_text()
    suffix = {"Counter": "_total", "Info": "_info"}
    created = {
        name + suffix.get(kind, ""): kind.lower()
        for kind, name in re.findall(r"\b(Counter|Gauge|Histogram|Info)\(\s*\"([a-z_:]+)\"", text)
    }
    assert engine_metrics() == created


@pytest.mark.parametrize("key", CHECKED)
def test_the_service_asks_for_uvloop_as_the_engine_s_extra_does(projects: dict[str, Path], key: str) -> None:
    """The service depends on uvloop itself (its engine pin stays `sqs-worker-engine==<version>`,
    as the README documents it): with the requirement the engine's `uvloop` extra names, so
    that a change to the one is a change to the other."""
    engine = tomllib.loads((ROOT / "engine" / "pyproject.toml").read_text())
    wanted = engine["project"]["optional-dependencies"]["uvloop"]
    service = tomllib.loads((projects[key] / "pyproject.toml").read_text())
    asked = [d for d in service["project"]["dependencies"] if re.match(r"uvloop\b", d)]
    assert asked == wanted, (asked, wanted)
