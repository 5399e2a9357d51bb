"""The Kubernetes manifests (deploy/k8s): the objects, their settings and secrets, and the custom
resources (KEDA, the Prometheus operator, External Secrets) held to their CRD schemas."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from artifacts import (
    ANSWERS,
    CUSTOM_RESOURCE_GROUPS,
    EKS_SETS,
    SCALEDJOB_ENV,
    Answers,
    worker_pod,
)
from doc_commands import commands, words
from matrix import LIMITS
from validators import (
    PLACEHOLDER_ACCOUNT,
    aws_partition,
    crd_problems,
    crd_schema_dir,
    env_file,
    env_list,
    image_repository,
    k8s_problems,
    keda_problems,
    keda_schema_dir,
    load_k8s,
    seconds,
)

from sqs_worker_template_jinja.aws import PAYLOAD_BUCKET_PLACEHOLDER, secret_path


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
    placed = objects | load_k8s(project, "monitoring")  # the operator's kinds, applied apart
    assert {kind: obj["metadata"].get("namespace") for kind, obj in placed.items()} == dict.fromkeys(
        placed, answers.slug
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
    # IRSA's role annotation; none with EKS Pod Identity (test_artifacts_platform.py holds
    # each bake to its eks_identity answer).
    if role := (account["metadata"].get("annotations") or {}).get("eks.amazonaws.com/role-arn"):
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
        # But for EKS Pod Identity's agent, its /32 and port (test_artifacts_platform.py).
        agent = {"cidr": f"{LIMITS.EKS_POD_IDENTITY_AGENT_IP}/32"}
        rules = [r for r in network["egress"] if agent not in [to.get("ipBlock") for to in r["to"]]]
        allowed = sorted((p["port"], p["protocol"]) for r in rules for p in r["ports"])
        assert allowed == [(53, "TCP"), (53, "UDP"), (443, "TCP")]
        blocks = [to["ipBlock"] for r in rules for to in r["to"] if "ipBlock" in to]
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
    # One round of work per pod, visible and in flight: what a busy pod holds, its handlers'
    # jobs and what it receives ahead of them (docs/scaling.md: two rounds thrash).
    holds = LIMITS.busy_replica_holds(answers.concurrency)
    assert int(sqs["queueLength"]) == holds and sqs["scaleOnInFlight"] == "true"
    age = triggers["aws-cloudwatch"]["metadata"]
    assert (age["namespace"], age["metricName"]) == ("AWS/SQS", "ApproximateAgeOfOldestMessage")
    assert (age["dimensionName"], age["dimensionValue"]) == ("QueueName", answers.queue)
    assert age["metricStat"] == "Maximum" and float(age["targetMetricValue"]) > 0 and "minMetricValue" in age


@pytest.mark.parametrize("key", EKS_SETS)
def test_kubernetes_settings_and_secrets(projects: dict[str, Path], key: str) -> None:
    """The owner's settings (a ConfigMap made from deploy/settings.env, the file ECS reads too)
    and secrets (a Secret, optional, made by hand or by External Secrets from Secrets Manager)
    reach the worker as environment variables; the External Secrets objects are valid against
    their CRD schemas and name that Secret."""
    project, answers = projects[key], ANSWERS[key]
    objects = load_k8s(project)
    assert not [k for k in objects if k.startswith("ConfigMap/") and k.endswith("-settings")], (
        "a settings manifest in deploy/k8s/ would be reset by every `kubectl apply -f deploy/k8s/`"
    )
    name, namespace, source = settings_configmap_command(project)
    assert (namespace, source) == (answers.slug, "deploy/settings.env"), "deploy/README.md makes it from the file"
    shipped = env_file((project / source).read_text())
    assert shipped == {}, f"the owner's to fill (its examples commented out): {shipped}"
    owned = env_file((project / source).read_text() + "PARTNER_API_URL=https://partner.example.com/v1\n")
    settings = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}}
    assert k8s_problems(settings | {"data": owned}) == [], "what kubectl makes of the file"
    (container,) = worker_pod(objects)["spec"]["containers"]
    secret = f"{answers.slug}-secrets"
    assert container["envFrom"] == [
        {"configMapRef": {"name": name}},
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
        {"secretKey": name, "remoteRef": {"key": secret_path({"project_slug": answers.slug}, name)}}
        for name in answers.secrets
    ]
    named = {
        e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert named == {name: {"name": secret, "key": name, "optional": True} for name in answers.secrets}
    schemas = crd_schema_dir("external-secrets")
    for obj in (store, external):
        assert crd_problems(obj, schemas, check_schema=False) == [], obj["kind"]


def settings_configmap_command(project: Path) -> tuple[str, str, str]:
    """The ConfigMap of the owner's settings as deploy/README.md's steps make it: `kubectl -n
    <namespace> create configmap <name> --from-env-file=<file>` (its name, namespace, file)."""
    made = []
    for command in commands((project / "deploy" / "README.md").read_text()):
        argv = words(command.split("|", 1)[0])
        if argv[:1] == ["kubectl"] and "configmap" in argv and "--from-env-file" in command:
            at = argv.index("configmap")
            source = next(w.split("=", 1)[1] for w in argv if w.startswith("--from-env-file="))
            made.append((argv[at + 1], argv[argv.index("-n") + 1], source))
    assert len(set(made)) == 1, f"one ConfigMap of settings, made one way: {made}"
    return made[0]


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
    objects = load_k8s(project) | load_k8s(project, "monitoring")
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
    objects = load_k8s(projects["defaults"], "monitoring")
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


@pytest.mark.parametrize("key", EKS_SETS)
def test_the_readme_gives_the_jobs_a_scaledjob_runs_at_once(projects: dict[str, Path], key: str) -> None:
    """Each ScaledJob pod runs one job (WORKER_MAX_JOBS=1), so the fleet runs at most
    maxReplicaCount jobs, not replicas x concurrency as the README's budget once implied."""
    project, answers = projects[key], ANSWERS[key]
    readme = (project / "README.md").read_text()
    (budget,) = re.findall(r"^- \*\*The fleet budget\*\*:.*?(?=^- |^$)", readme, re.MULTILINE | re.DOTALL)
    budget = " ".join(budget.split())
    if answers.scaledjob:
        cap = load_k8s(project)["ScaledJob"]["spec"]["maxReplicaCount"]
        assert f"`maxReplicaCount`, {cap}, run at once" in budget, budget
    else:
        assert "ScaledJob" not in budget, budget
