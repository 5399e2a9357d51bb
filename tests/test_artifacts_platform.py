"""The 2026 platform choices a bake answers: the capacity its workers run on (Fargate Spot,
Spot nodes), their CPU architecture (Graviton, and a release image for both), and how EKS
pods get their role (IRSA or EKS Pod Identity). Each is read back from the rendered files,
parsed; the validators of the other artifact tests (cfn-lint, botocore's models,
kubernetes-validate, actionlint and zizmor, checkov) hold the same files to their schemas."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

import pytest
from artifacts import ANSWERS, CHECKED, ECS_SETS, EKS_SETS, context, worker_pod
from matrix import LIMITS, SUPPORTED
from validators import load_cfn, load_k8s, load_workflow

ROLE_ANNOTATION = "eks.amazonaws.com/role-arn"


def choices(key: str) -> dict[str, str]:
    """The bake's answers, cookiecutter.json's defaults filled in."""
    return context(SUPPORTED[key].answers)


def test_each_new_choice_is_validated_by_some_artifact_set() -> None:
    given = {(name, choices(key)[name]) for key in CHECKED for name in ("capacity", "cpu_architecture", "eks_identity")}
    for wanted in [
        ("capacity", "spot-mix"),
        ("cpu_architecture", "arm64"),
        ("eks_identity", "pod-identity"),
    ]:
        assert wanted in given, f"no checked set answers {wanted[0]}={wanted[1]}"
    assert any(choices(key)["eks_identity"] == "pod-identity" and ANSWERS[key].untrusted for key in EKS_SETS), (
        "Pod Identity through the untrusted-input NetworkPolicy goes unchecked"
    )


@pytest.mark.parametrize("key", EKS_SETS)
def test_pod_identity_drops_the_role_annotation_and_opens_only_the_agent(projects: dict[str, Path], key: str) -> None:
    """IRSA: the role annotation on the ServiceAccount. Pod Identity: none (the association
    names the service account), and the untrusted-input NetworkPolicy lets the pods reach the
    Pod Identity agent's one address and port while the rest of 169.254.0.0/16 stays cut off."""
    project, answers = projects[key], ANSWERS[key]
    pod_identity = choices(key)["eks_identity"] == "pod-identity"
    objects = load_k8s(project)
    annotations = objects["ServiceAccount"]["metadata"].get("annotations") or {}
    if pod_identity:
        assert ROLE_ANNOTATION not in annotations, f"{key}: Pod Identity needs no role annotation: {annotations}"
    else:
        assert annotations[ROLE_ANNOTATION].endswith(f"role/CHANGE-ME-{answers.slug}-worker"), annotations
    # Pod Identity's webhook mounts its own token, like IRSA's: the pod needs no API token.
    assert worker_pod(objects)["spec"]["automountServiceAccountToken"] is False
    # KEDA's aws provider takes the operator's credentials from the SDK's chain: both routes.
    assert objects["TriggerAuthentication"]["spec"]["podIdentity"]["provider"] == "aws"

    policy = objects["NetworkPolicy"]["spec"]
    egress: list[dict[str, Any]] = policy.get("egress", [])
    agent = ipaddress.ip_network(f"{LIMITS.EKS_POD_IDENTITY_AGENT_IP}/32")
    to_agent = [
        rule
        for rule in egress
        for peer in rule.get("to", [])
        if "ipBlock" in peer and ipaddress.ip_network(peer["ipBlock"]["cidr"]) == agent
    ]
    if not answers.untrusted:
        assert "Egress" not in policy["policyTypes"] and egress == [], f"{key}: egress is open without untrusted input"
        return
    assert "Egress" in policy["policyTypes"]
    link_local = ipaddress.ip_network("169.254.0.0/16")
    for rule in egress:
        for peer in rule.get("to", []):
            if "ipBlock" not in peer or rule in to_agent:
                continue
            # Every other address block leaves link-local out.
            block = ipaddress.ip_network(peer["ipBlock"]["cidr"])
            if block.overlaps(link_local):
                excepted = [ipaddress.ip_network(e) for e in peer["ipBlock"].get("except", [])]
                assert any(link_local.subnet_of(e) for e in excepted), f"{key}: {peer} reaches link-local addresses"
    if pod_identity:
        assert len(to_agent) == 1, f"{key}: no egress rule (or several) to the Pod Identity agent: {egress}"
        assert to_agent[0]["ports"] == [{"port": LIMITS.EKS_POD_IDENTITY_AGENT_PORT, "protocol": "TCP"}], to_agent
        assert [peer["ipBlock"] for peer in to_agent[0]["to"]] == [{"cidr": str(agent)}], to_agent
    else:
        assert to_agent == [], f"{key}: IRSA needs no way to the Pod Identity agent"


@pytest.mark.parametrize("key", CHECKED)
def test_the_release_builds_an_image_for_each_architecture_the_tasks_run_on(
    projects: dict[str, Path], key: str
) -> None:
    """arm64 (Graviton): one image index for linux/amd64 and linux/arm64, so an x86_64 and an
    arm64 task or node both find their image; x86_64: the runner's own platform, as before."""
    project = projects[key]
    workflow = load_workflow(project / ".github" / "workflows" / "release.yml")
    (build,) = [step for step in workflow["jobs"]["image"]["steps"] if step.get("id") == "build"]
    assert build["uses"].startswith("docker/build-push-action@"), build
    platforms = build["with"].get("platforms")
    steps = workflow["jobs"]["image"]["steps"]
    qemu = [step for step in steps if str(step.get("uses", "")).startswith("docker/setup-qemu-action@")]
    if choices(key)["cpu_architecture"] == "arm64":
        assert sorted(str(platforms).split(",")) == ["linux/amd64", "linux/arm64"], platforms
        # The amd64 runner runs the arm64 build's RUN steps under QEMU, registered before the
        # build; its binfmt image not cached (a release builds from nothing a PR could write).
        (step,) = qemu
        assert steps.index(step) < steps.index(build), "QEMU is registered before the build"
        assert step["with"] == {"platforms": "arm64", "cache-image": False}, step
    else:
        assert platforms is None, f"{key}: an x86_64 bake builds the runner's platform only"
        assert qemu == [], f"{key}: no emulator for a build of the runner's own platform"
    # `make build` (the first deploy's step 3) builds what the tasks and pods run, whatever the
    # host: an x86 laptop's image pushed for Graviton tasks would not start (and the reverse).
    makefile = (project / "Makefile").read_text()
    build_lines = [line for line in makefile.splitlines() if line.lstrip().startswith("docker build")]
    assert build_lines and all("--platform $(IMAGE_PLATFORM)" in line for line in build_lines), build_lines
    (platform,) = re.findall(r"^IMAGE_PLATFORM \?= (\S+)$", makefile, re.MULTILINE)
    assert platform == f"linux/{'arm64' if choices(key)['cpu_architecture'] == 'arm64' else 'amd64'}", platform


@pytest.mark.parametrize("key", EKS_SETS)
def test_pods_go_to_nodes_of_their_architecture_and_prefer_spot_with_spot_mix(
    projects: dict[str, Path], key: str
) -> None:
    """The worker's pods (the Deployment's, or the ScaledJob's Jobs'): a node selector of the
    image's architecture, and with spot-mix a preference, never a requirement, for Karpenter's
    Spot nodes (on-demand nodes still take them); the PodDisruptionBudget stays as it is."""
    project = projects[key]
    answered = choices(key)
    spec = worker_pod(load_k8s(project))["spec"]
    arch = {"x86_64": "amd64", "arm64": "arm64"}[answered["cpu_architecture"]]
    assert spec["nodeSelector"] == {"kubernetes.io/arch": arch}, spec.get("nodeSelector")
    if answered["capacity"] == "spot-mix":
        affinity = spec["affinity"]["nodeAffinity"]
        assert "requiredDuringSchedulingIgnoredDuringExecution" not in affinity, "Spot is a preference only"
        (preferred,) = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
        assert preferred["preference"]["matchExpressions"] == [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}
        ], preferred
    else:
        assert "affinity" not in spec, f"{key}: on-demand pods need no node affinity"


@pytest.mark.parametrize("key", ECS_SETS)
def test_ecs_runs_on_the_capacity_and_architecture_answered(projects: dict[str, Path], key: str) -> None:
    """spot-mix: a capacity provider strategy of FARGATE (an on-demand base, weight 1) and
    FARGATE_SPOT, with no LaunchType (ECS takes one or the other); the stop timeout within
    ECS's cap, so the drain fits Spot's two-minute warning. arm64: Graviton tasks."""
    project, answers = projects[key], ANSWERS[key]
    answered = choices(key)
    resources = load_cfn(project / "deploy" / "ecs" / "service.yaml")["Resources"]
    service = resources["Service"]["Properties"]
    task = resources["TaskDefinition"]["Properties"]
    if answered["capacity"] == "spot-mix":
        assert "LaunchType" not in service, "LaunchType and CapacityProviderStrategy are exclusive"
        strategy = {item["CapacityProvider"]: item for item in service["CapacityProviderStrategy"]}
        assert set(strategy) == {"FARGATE", "FARGATE_SPOT"}, strategy
        assert strategy["FARGATE"]["Weight"] == 1 and strategy["FARGATE"]["Base"] >= 1, strategy
        assert strategy["FARGATE_SPOT"]["Weight"] >= 1 and "Base" not in strategy["FARGATE_SPOT"], strategy
        # The on-demand base stays within the service's fewest tasks.
        assert strategy["FARGATE"]["Base"] <= resources["ScalableTarget"]["Properties"]["MinCapacity"]
    else:
        assert service["LaunchType"] == "FARGATE" and "CapacityProviderStrategy" not in service, service
    (worker,) = [c for c in task["ContainerDefinitions"] if c["Name"] == "worker"]
    assert worker["StopTimeout"] == answers.shutdown + LIMITS.GRACE_MARGIN_SECONDS
    assert worker["StopTimeout"] <= min(LIMITS.ECS_MAX_STOP_TIMEOUT, LIMITS.SPOT_WARNING_SECONDS)
    architecture = {"x86_64": "X86_64", "arm64": "ARM64"}[answered["cpu_architecture"]]
    assert task["RuntimePlatform"] == {"CpuArchitecture": architecture, "OperatingSystemFamily": "LINUX"}
