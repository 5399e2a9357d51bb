"""The CI and release workflows: the template's own and the generated service's, their pinned
actions, and the roles a release assumes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from artifacts import (
    ANSWERS,
    CHECKED,
    LOCALSTACK_IMAGE,
    UV_VERSION,
    as_list,
    worker_pod,
)
from conftest import ROOT
from matrix import COOKIECUTTER
from validators import (
    PLACEHOLDER_ACCOUNT,
    actionlint_problems,
    aws_partition,
    cfn_names,
    cfn_problems,
    cfn_resolve,
    image_repository,
    jsonschema_cli_problems,
    load_cfn,
    load_k8s,
    load_workflow,
)


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


def test_nightly_workflow() -> None:
    """The nightly run (`make test-full`) on a schedule, on a clean clone with every Python the
    template offers, as the everyday suite runs."""
    path = ROOT / ".github" / "workflows" / "nightly.yml"
    assert jsonschema_cli_problems("vendor.github-workflows", path) == []
    assert actionlint_problems(path) == []
    workflow = load_workflow(path)
    assert_workflow_hygiene(path, workflow)
    assert workflow["on"]["schedule"] and "workflow_dispatch" in workflow["on"]
    runs = [step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"]]
    assert "make test-full" in runs
    offered = sorted(COOKIECUTTER["python_version"], key=lambda v: tuple(map(int, v.split("."))))
    assert f"uv python install {' '.join(offered)}" in runs
    assert "schedule" not in load_workflow(ROOT / ".github" / "workflows" / "ci.yml")["on"], "one nightly run"


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


def test_docs_workflow() -> None:
    """The docs site built strictly on each version tag (and by hand), as `make docs` builds it,
    then once for each engine release (`make docs-versions`), and published to GitHub Pages by a
    job of its own, the only one with Pages rights."""
    path = ROOT / ".github" / "workflows" / "docs.yml"
    assert jsonschema_cli_problems("vendor.github-workflows", path) == []
    assert actionlint_problems(path) == []
    workflow = load_workflow(path)
    assert_workflow_hygiene(path, workflow)
    assert workflow["on"]["push"] == {"tags": ["v*", "engine-v*"]} and "workflow_dispatch" in workflow["on"]
    runs = [step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"]]
    assert "make docs" in runs, "the site is built as `make docs` builds it locally"
    assert "--strict" in (ROOT / "Makefile").read_text().split("\ndocs:", 1)[1].split("\n\n", 1)[0]
    # Then a copy for each engine release, from each engine-v* tag's tree: the whole history
    # and its tags checked out, the token still not kept in the checkout.
    build_runs = [step.get("run", "") for step in workflow["jobs"]["build"]["steps"]]
    assert build_runs.index("make docs-versions") > build_runs.index("make docs"), build_runs
    versions_target = (ROOT / "Makefile").read_text().split("\ndocs-versions:", 1)[1].split("\n\n", 1)[0]
    assert "scripts/docs_versions.py" in versions_target, versions_target
    (checkout,) = [s for s in workflow["jobs"]["build"]["steps"] if s.get("uses", "").startswith("actions/checkout@")]
    assert checkout["with"] == {"fetch-depth": 0, "persist-credentials": False}, checkout
    pins, ci = action_pins(path), action_pins(ROOT / ".github" / "workflows" / "ci.yml")
    shared = pins.keys() & ci.keys()
    assert shared and {a: pins[a] for a in shared} == {a: ci[a] for a in shared}, "an action at another commit"
    for name, job in workflow["jobs"].items():
        assert "permissions" not in job or set(job["permissions"]) <= {"contents", "pages", "id-token"}, name
        if {"pages", "id-token"} & set(job.get("permissions", {})):
            assert any("deploy-pages" in step.get("uses", "") for step in job["steps"]), (
                f"{name}: Pages rights without a deploy-pages step"
            )
    # What `make docs` builds is what is published: the site/ folder, deployed after the build.
    build, deploy = workflow["jobs"]["build"], workflow["jobs"]["deploy"]
    (upload,) = [step for step in build["steps"] if "upload-pages-artifact" in step.get("uses", "")]
    named = re.search(r"^site_dir:\s*(\S+)", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE)
    site_dir = named.group(1) if named else "site"  # mkdocs.yml may hold tags a safe loader refuses
    assert upload["with"]["path"] == site_dir, (upload, site_dir)
    assert deploy["needs"] == "build" and deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
