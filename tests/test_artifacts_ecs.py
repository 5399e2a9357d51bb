"""The ECS stack (deploy/ecs/service.yaml): its task definition, the collector beside the worker
(on Kubernetes too), the service and its scaling, and the secrets it hands the worker."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
import yaml
from artifacts import (
    ANSWERS,
    CHECKED,
    COLLECTOR_ENV,
    ECS_RESOURCES,
    ECS_SETS,
    EcsStack,
    as_list,
    baked_service,
    ecs_collector_config,
    worker_pod,
)
from matrix import COOKIECUTTER, LIMITS
from sqs_worker_engine.fleet.sqs import metricmath
from validators import (
    PLACEHOLDER_ACCOUNT,
    api_problems,
    api_shape,
    aws_partition,
    cfn_names,
    cfn_problems,
    cfn_resolve,
    ecs_problems,
    engine_metric_labels,
    engine_metrics,
    env_list,
    image_repository,
    load_cfn,
    load_k8s,
    seconds,
)

from sqs_worker_template_jinja.aws import PAYLOAD_BUCKET_PLACEHOLDER, secret_parameter


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

    # The service: private tasks, the roles' tag on every task, no exec, a guarded rollout.
    # Fargate, or with capacity=spot-mix Fargate Spot beside it (test_artifacts_platform.py).
    fargate = [service.get("launchType")] + [s["capacityProvider"] for s in service.get("capacityProviderStrategy", [])]
    assert fargate in (["FARGATE"], [None, "FARGATE", "FARGATE_SPOT"]), fargate
    assert "desiredCount" not in service, "autoscaling owns the count"
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

    # Autoscaling on the queue's work, never on CPU.
    assert target["ScalableDimension"] == "ecs:service:DesiredCount" and target["ServiceNamespace"] == "ecs"
    assert target["ResourceId"] == f"service/CHANGE-ME-cluster/{ECS_RESOURCES['Service.Name']}"
    policies = {n: r for n, r in stack.template["Resources"].items() if r["Type"].endswith("::ScalingPolicy")}
    assert set(policies) == {"InFlightPerTaskPolicy", "DemandStepPolicy", "BacklogScaleInPolicy"}
    known = cfn_names(stack.template, answers.region, ECS_RESOURCES)
    policy = cfn_resolve(policies["InFlightPerTaskPolicy"]["Properties"], known)
    assert policy.pop("ScalingTargetId") == ECS_RESOURCES["ScalableTarget"]
    policy.update({k: target[k] for k in ("ServiceNamespace", "ResourceId", "ScalableDimension")})
    assert api_problems("application-autoscaling", "PutScalingPolicy", policy) == []
    tracking = policy["TargetTrackingScalingPolicyConfiguration"]
    assert policy["PolicyType"] == "TargetTrackingScaling"
    # Target tracking scales out only; scale-in is the step policy's on a lasting low alarm.
    assert tracking["DisableScaleIn"] is True and tracking["ScaleOutCooldown"] < 300
    # Headroom: one round of work per task in flight, what a busy task holds, its handlers'
    # jobs and what it receives ahead of them (the engine's prefetch sizing). In flight
    # alone: a backlog of short jobs counted in messages took the service to its maximum.
    holds = LIMITS.busy_replica_holds(answers.concurrency)
    assert tracking["TargetValue"] == 1, "one round of work"
    assert stack.template["Parameters"]["BacklogPerTaskTarget"]["Default"] == holds
    metrics = {m["Id"]: m for m in tracking["CustomizedMetricSpecification"]["Metrics"]}
    stats = {m["MetricStat"]["Metric"]["MetricName"]: m for m in metrics.values() if "MetricStat" in m}
    assert set(stats) == {"ApproximateNumberOfMessagesNotVisible", "RunningTaskCount"}, "in flight, not visible"
    in_flight, running = stats["ApproximateNumberOfMessagesNotVisible"], stats["RunningTaskCount"]
    assert in_flight["MetricStat"]["Metric"]["Dimensions"] == [{"Name": "QueueName", "Value": answers.queue}]
    (returned,) = [m for m in metrics.values() if m.get("ReturnData")]
    assert returned["Expression"].replace(" ", "") == f"{in_flight['Id']}/({running['Id']}*{holds})"

    # Scale-out: a step policy on the first minute in which, with a backlog of more than a
    # round of work a task, the queue asked for more than the tasks cleared (messages sent,
    # and those visible over five minutes, over messages deleted: sums of the whole minute),
    # in proportion to that ratio; its alarm's one action is the policy.
    step_id, alarm_id = "DemandStepPolicy", "DemandHighAlarm"
    step = cfn_resolve(stack.template["Resources"][step_id]["Properties"], known)
    assert step.pop("ScalingTargetId") == ECS_RESOURCES["ScalableTarget"]
    step.update({k: target[k] for k in ("ServiceNamespace", "ResourceId", "ScalableDimension")})
    assert api_problems("application-autoscaling", "PutScalingPolicy", step) == []
    assert step["PolicyType"] == "StepScaling"
    config = step["StepScalingPolicyConfiguration"]
    assert config["AdjustmentType"] == "PercentChangeInCapacity"
    adjustments = config["StepAdjustments"]
    assert all(a["ScalingAdjustment"] > 0 for a in adjustments), "this one scales out only"
    assert adjustments[0]["MetricIntervalLowerBound"] == 0 and "MetricIntervalUpperBound" not in adjustments[-1]
    for lower, upper in itertools.pairwise(adjustments):
        assert lower["MetricIntervalUpperBound"] == upper["MetricIntervalLowerBound"], "steps without a gap"
        assert lower["ScalingAdjustment"] < upper["ScalingAdjustment"], "the larger the ratio, the larger the step"
    alarm = cfn_resolve(stack.template["Resources"][alarm_id]["Properties"], known)
    assert api_problems("cloudwatch", "PutMetricAlarm", {"AlarmName": "demand", **alarm}) == []
    assert stack.template["Resources"][alarm_id]["Properties"]["AlarmActions"] == [{"Ref": step_id}]
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (1, 1)
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold" and alarm["Threshold"] > 1, "beyond the tasks' pace"
    # Each step adds at least the share of capacity at the top of its interval, so that one
    # scale-out meets the demand its datapoint showed (the last, x8, is the most it adds).
    for a in adjustments[:-1]:
        assert a["ScalingAdjustment"] >= (alarm["Threshold"] + a["MetricIntervalUpperBound"] - 1) * 100 - 1e-9
    assert alarm["TreatMissingData"] == "notBreaching", "nothing deleted: no datapoint, no scale-out"
    alarm_metrics = {m["Id"]: m for m in alarm["Metrics"]}
    assert {m["MetricStat"]["Period"] for m in alarm_metrics.values() if "MetricStat" in m} == {60}
    queue = {"Namespace": "AWS/SQS", "Dimensions": [{"Name": "QueueName", "Value": answers.queue}]}
    for metric_id, name in (
        ("sent", "NumberOfMessagesSent"),
        ("deleted", "NumberOfMessagesDeleted"),
        ("visible", "ApproximateNumberOfMessagesVisible"),
    ):
        stat = alarm_metrics[metric_id]["MetricStat"]
        assert stat["Metric"] == {**queue, "MetricName": name}
        assert stat["Stat"] == "Sum", "the whole minute's count (one read a minute for the visible messages)"
    tasks = alarm_metrics["tasks"]["MetricStat"]
    assert tasks["Metric"] == running["MetricStat"]["Metric"] and tasks["Stat"] == "Average"
    (demand,) = [m["Expression"] for m in alarm_metrics.values() if m.get("ReturnData")]
    backlog = f"visible>tasks*{holds}ORsent-deleted>tasks*{holds}"
    assert demand.replace(" ", "") == f"IF({backlog},(sent+visible/5)/deleted*tasks/desired,0)"
    desired = alarm_metrics["desired"]["MetricStat"]
    assert desired["Metric"] == {**tasks["Metric"], "MetricName": "DesiredTaskCount"}, "the tasks asked for"
    assert metricmath.check(demand, set(alarm_metrics)) is None, "what the fleet simulator plays"

    # Scale-in: a step policy on a low alarm over the same rounds of work, which must hold for
    # many minutes (a dip between bursts removes nothing), one task at a time, one per cooldown.
    quiet_id, low_id = "BacklogScaleInPolicy", "BacklogRoundsLowAlarm"
    quiet = cfn_resolve(stack.template["Resources"][quiet_id]["Properties"], known)
    assert quiet.pop("ScalingTargetId") == ECS_RESOURCES["ScalableTarget"]
    quiet.update({k: target[k] for k in ("ServiceNamespace", "ResourceId", "ScalableDimension")})
    assert api_problems("application-autoscaling", "PutScalingPolicy", quiet) == []
    quiet_config = quiet["StepScalingPolicyConfiguration"]
    assert quiet_config["AdjustmentType"] == "ChangeInCapacity"
    assert [a["ScalingAdjustment"] for a in quiet_config["StepAdjustments"]] == [-1], "one task at a time"
    assert quiet_config["StepAdjustments"][0]["MetricIntervalUpperBound"] == 0
    assert quiet_config["Cooldown"] >= 300
    low = cfn_resolve(stack.template["Resources"][low_id]["Properties"], known)
    assert api_problems("cloudwatch", "PutMetricAlarm", {"AlarmName": "quiet", **low}) == []
    assert stack.template["Resources"][low_id]["Properties"]["AlarmActions"] == [{"Ref": quiet_id}]
    assert low["ComparisonOperator"] == "LessThanThreshold" and 0 < low["Threshold"] < 1
    assert low["DatapointsToAlarm"] == low["EvaluationPeriods"] >= 10, "a quiet spell that lasts"
    assert low["TreatMissingData"] == "notBreaching"
    low_metrics = {m["Id"]: m for m in low["Metrics"]}
    assert low_metrics["tasks"]["MetricStat"] == tasks
    assert low_metrics["visible"]["MetricStat"] == alarm_metrics["visible"]["MetricStat"]
    assert low_metrics["in_flight"]["MetricStat"]["Metric"] == {
        **queue,
        "MetricName": "ApproximateNumberOfMessagesNotVisible",
    }
    (rounds,) = [m["Expression"] for m in low_metrics.values() if m.get("ReturnData")]
    assert rounds.replace(" ", "") == f"(visible+in_flight)/(tasks*{holds})", "rounds of work a task"

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
    parameters = {name: secret_parameter(name) for name in answers.secrets}
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


@pytest.mark.parametrize("key", ECS_SETS)
def test_ecs_releases_roll_back_on_the_alarms_that_say_the_release_is_bad(projects: dict[str, Path], key: str) -> None:
    """Besides the circuit breaker (tasks that cannot start), the service's deployment alarms
    roll back a release whose tasks start and then fail their jobs: the job error ratio's
    alarm of this stack and, when given, the queues stack's dead-letter alarm. Never an alarm
    a load spike trips, nor one that breaches on missing data (a first deploy has none)."""
    project, answers = projects[key], ANSWERS[key]
    stack = EcsStack.load(project, answers.region)
    queues = load_cfn(project / "deploy" / "aws" / "queues.yaml")
    dead_letter = queues["Outputs"]["DeadLetterAlarmName"]["Value"]["Ref"]
    assert queues["Resources"][dead_letter]["Type"] == "AWS::CloudWatch::Alarm", "the output names an alarm"
    alarms = {
        name: r["Properties"]
        for name, r in stack.template["Resources"].items()
        if r["Type"] == "AWS::CloudWatch::Alarm"
    }
    for given in ("", "stack-queues-DeadLetterQueueInflowAlarm-0123456789AB"):
        names = cfn_names(stack.template, answers.region, ECS_RESOURCES) | {"DeadLetterAlarmName": given}
        service = api_shape(cfn_resolve(stack.resources["AWS::ECS::Service"], names))
        assert api_problems("ecs", "CreateService", service) == []
        deployment = service["deploymentConfiguration"]
        assert deployment["deploymentCircuitBreaker"] == {"enable": True, "rollback": True}, "kept"
        rollback = deployment["alarms"]
        assert rollback["enable"] is True and rollback["rollback"] is True, rollback
        # Each name is the Ref of an alarm this stack defines, or the dead-letter alarm's name.
        written = stack.resources["AWS::ECS::Service"]["DeploymentConfiguration"]["Alarms"]["AlarmNames"]
        refs = [item["Ref"] for branch in written["Fn::If"][1:] for item in as_list(branch) if "Ref" in item]
        assert set(refs) <= set(alarms) | {"DeadLetterAlarmName"}, refs
        ours = {name for name in alarms if ECS_RESOURCES.get(name) in rollback["alarmNames"]}
        expected = {"WorkerReleaseFailingAlarm", "WorkerJobErrorRatioHighAlarm"}
        assert ours == expected, f"the service's alarms it rolls back on: {ours}"
        assert (given in rollback["alarmNames"]) is bool(given), rollback["alarmNames"]
        assert len(rollback["alarmNames"]) == len(expected) + bool(given)
        # The release alarm pages no one: deployments act on it, and WorkerJobErrorRatioHigh
        # pages for the same failures when they last.
        fast = alarms["WorkerReleaseFailingAlarm"]
        assert "AlarmActions" not in fast and fast["EvaluationPeriods"] == fast["DatapointsToAlarm"] == 2
        assert {m.get("MetricStat", m).get("Period") for m in fast["Metrics"]} == {60}
        for name in ours:
            alarm = alarms[name]
            assert alarm["TreatMissingData"] == "notBreaching", f"{name}: a first deploy has no datapoint yet"
            read = {m["MetricStat"]["Metric"]["Namespace"] for m in alarm["Metrics"] if "MetricStat" in m}
            assert read == {answers.slug}, f"{name} reads {read}: the worker's own signals, not SQS's backlog"
    assert queues["Resources"][dead_letter]["Properties"]["TreatMissingData"] == "notBreaching"


@pytest.mark.parametrize("key", ECS_SETS)
def test_ecs_reads_the_owners_settings_file_from_the_object_it_is_given(projects: dict[str, Path], key: str) -> None:
    """deploy/settings.env, uploaded to S3 and named by SettingsFileArn, is the worker's
    environment file; the execution role may read that object and locate its bucket, nothing
    more. Without it, neither exists."""
    project, answers = projects[key], ANSWERS[key]
    stack = EcsStack.load(project, answers.region)
    partition = aws_partition(answers.region)[0]
    arn = f"arn:{partition}:s3:::acme-settings/{answers.slug}/settings.env"
    rule = stack.template["Parameters"]["SettingsFileArn"]["AllowedPattern"]
    assert re.fullmatch(rule, arn) and re.fullmatch(rule, ""), rule
    assert not re.fullmatch(rule, f"arn:{partition}:s3:::acme-settings/settings.txt"), "ECS reads .env files only"
    assert not re.fullmatch(rule, "arn:aws:ssm:us-east-1:123456789012:parameter/x.env"), "an S3 object only"
    for given in ("", arn):
        names = cfn_names(stack.template, answers.region, ECS_RESOURCES) | {"SettingsFileArn": given}
        task = api_shape(cfn_resolve(stack.resources["AWS::ECS::TaskDefinition"], names))
        assert ecs_problems(task) == []
        worker = next(c for c in task["containerDefinitions"] if c["name"] == "worker")
        role = cfn_resolve(stack.roles()["ExecutionRole"]["Policies"][0]["PolicyDocument"], names)
        reads = {s["Sid"]: (s["Action"], s["Resource"]) for s in role["Statement"] if "Settings" in s["Sid"]}
        if not given:
            assert "environmentFiles" not in worker and reads == {}
            continue
        assert worker["environmentFiles"] == [{"type": "s3", "value": arn}]
        assert reads == {
            "ReadSettingsFile": ("s3:GetObject", arn),
            "LocateSettingsBucket": ("s3:GetBucketLocation", f"arn:{partition}:s3:::acme-settings"),
        }
