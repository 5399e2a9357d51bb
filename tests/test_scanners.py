"""Security scanners over the bakes of every pair of answer values (every shape nightly): checkov (CloudFormation, Kubernetes,
Dockerfile, GitHub Actions) and zizmor (the workflows). Nothing may be found that is not
accepted in place, in the file, with its reason; the accepted findings are listed here so
that a new skip cannot slip in unreviewed. A deliberately broken copy of one bake runs in
the same scan, so a green result shows the scanners looked.

Both come from `make scanners` (scanners/requirements.in), an environment of their own.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT, bake, run
from matrix import COOKIECUTTER, SCANNED
from validators import tool

# Each accepted finding, and where its reason is written.
ACCEPTED = {
    "CKV_AWS_27": "deploy/aws/queues.yaml: SQS-managed encryption, which checkov does not count",
    "CKV_AWS_119": "deploy/aws/queues.yaml: the idempotency table uses the AWS managed key",
    "CKV_AWS_18": "deploy/aws/queues.yaml: no access logging on the transient large-payload bucket",
    "CKV_AWS_158": "deploy/ecs/service.yaml: CloudWatch Logs encrypts log groups; a CMK is the account's choice",
    "CKV_K8S_11": "deploy/k8s/deployment.yaml, scaledjob.yaml: no CPU limit on purpose",
    "CKV_K8S_15": "deploy/k8s/deployment.yaml, scaledjob.yaml: immutable release tags, IfNotPresent",
    "CKV_K8S_43": "deploy/k8s/deployment.yaml, scaledjob.yaml: the image reference is set at deploy time",
    "CKV_K8S_35": "deploy/k8s/deployment.yaml, scaledjob.yaml: the engine reads settings from the environment; the Secret is optional",
}
BROKEN = "broken"  # the defaults, with a privileged container and an unpinned action
# The bakes by deploy target: one scan each, so the three can run on different test workers.
DEFAULT_TARGET = COOKIECUTTER["deploy_target"][0]
TARGETS = sorted({combo.answers.get("deploy_target", DEFAULT_TARGET) for combo in SCANNED.values()})


def write_scaledjob_as_job(project: Path) -> None:
    """checkov knows no KEDA ScaledJob (it finds no resource in one): the Job KEDA makes
    from it, with the ScaledJob's metadata and so its accepted skips, is scanned in its place."""
    path = project / "deploy" / "k8s" / "scaledjob.yaml"
    if not path.is_file():
        return
    scaled = yaml.safe_load(path.read_text())
    metadata = {key: scaled["metadata"][key] for key in ("name", "namespace", "labels", "annotations")}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": scaled["spec"]["jobTargetRef"]}
    (path.parent / "scaledjob-as-job.yaml").write_text(yaml.safe_dump(job))


def bakes(out: Path, target: str) -> dict[str, Path]:
    """The scanned sets of this target (matrix.SCANNED: every pair of choice values; every
    shape nightly), baked; with the defaults, a broken copy of them."""
    projects = {
        key: bake(out / key, **combo.answers)
        for key, combo in SCANNED.items()
        if combo.answers.get("deploy_target", DEFAULT_TARGET) == target
    }
    for project in projects.values():
        write_scaledjob_as_job(project)
    if "defaults" in projects:
        broken = out / BROKEN / projects["defaults"].name
        shutil.copytree(projects["defaults"], broken)
        deployment = broken / "deploy" / "k8s" / "deployment.yaml"
        text = deployment.read_text()
        deployment.write_text(text.replace("allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true", 1))
        workflow = broken / ".github" / "workflows" / "ci.yml"
        lines = workflow.read_text().splitlines(keepends=True)
        first = next(i for i, line in enumerate(lines) if "uses: actions/checkout@" in line)
        lines[first] = lines[first].split("uses:")[0] + "uses: actions/checkout@main\n"
        workflow.write_text("".join(lines))
        projects[BROKEN] = broken
    return projects


def json_documents(text: str) -> list[Any]:
    """checkov prints one JSON document per `-d` directory, one after another."""
    decoder, docs, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        while text[at].isspace():
            at += 1
        doc, at = decoder.raw_decode(text, at)
        docs.append(doc if isinstance(doc, list) else [doc])
    return docs


def checks(report: list[dict[str, Any]], kind: str) -> list[tuple[str, str, str]]:
    return [
        (r["check_type"], check["check_id"], f"{check['file_path']} {check['resource']}")
        for r in report
        for check in r.get("results", {}).get(kind, [])
    ]


def checkov(projects: dict[str, Path], home: Path) -> dict[str, dict[str, list[tuple[str, str, str]]]]:
    """Each project's failed and skipped checks, from one checkov process (it takes seconds
    to start): each JSON document it prints sums up every directory scanned so far, so a
    project's own are what its document adds."""
    keys = list(projects)
    # Not --quiet: it leaves the skipped checks out of the report, and they are checked here.
    cmd = [tool("checkov"), "--compact", "--skip-download", "--output", "json", "--framework"]
    cmd += [*FRAMEWORKS]
    for key in keys:
        cmd += ["--directory", str(projects[key])]
    result = run(cmd, ROOT, timeout=1200, HOME=str(home))
    assert result.returncode in (0, 1), result.stderr[-3000:]  # 1: something was found
    docs = json_documents(result.stdout)
    assert len(docs) == len(keys), result.stderr[-3000:]
    seen: dict[str, list[tuple[str, str, str]]] = {"failed_checks": [], "skipped_checks": []}
    found: dict[str, dict[str, list[tuple[str, str, str]]]] = {}
    for key, doc in zip(keys, docs, strict=True):
        found[key] = {}
        for kind, before in list(seen.items()):
            total = Counter(checks(doc, kind))
            assert not Counter(before) - total, "each document holds what the ones before it did"
            found[key][kind], seen[kind] = sorted((total - Counter(before)).elements()), sorted(total.elements())
        summaries = {r["check_type"]: r.get("summary", {}) for r in doc}
        # Scanned: resources found, or checks passed (checkov counts no resources for workflows).
        scanned = {
            kind for kind, summary in summaries.items() if summary.get("resource_count") or summary.get("passed")
        }
        assert {"cloudformation", "dockerfile", "github_actions"} <= scanned, (key, scanned)
    for skip in (c for report in docs[-1] for c in report.get("results", {}).get("skipped_checks", [])):
        reason = skip.get("check_result", {}).get("suppress_comment", "")
        assert reason.strip(), f"{skip['check_id']} is skipped without a reason"
    # checkov drops a workflow its own (older) copy of GitHub's schema rejects without a
    # word (a permission it does not know, say): every workflow must have been checked.
    checked = {
        Path(check["file_abs_path"]).resolve()
        for report in docs[-1]
        if report["check_type"] == "github_actions"
        for kind in ("passed_checks", "failed_checks", "skipped_checks")
        for check in report.get("results", {}).get(kind, [])
    }
    workflows = {
        path.resolve() for project in projects.values() for path in (project / ".github" / "workflows").glob("*.yml")
    }
    assert workflows <= checked, f"checkov did not check {sorted(map(str, workflows - checked))}"
    return found


def zizmor(workflows: list[Path]) -> set[tuple[str, str]]:
    """(finding, workflow) pairs of zizmor's default persona."""
    cmd = [tool("zizmor"), "--offline", "--no-progress", "--format", "json", *map(str, workflows)]
    result = run(cmd, ROOT, timeout=300)
    return {
        (finding["ident"], location["symbolic"]["key"]["Local"]["verbatim_path"])
        for finding in json.loads(result.stdout)
        for location in finding["locations"]
    }


FRAMEWORKS = ("cloudformation", "kubernetes", "dockerfile", "github_actions")


@pytest.mark.parametrize("target", TARGETS)
def test_scanners_find_nothing_unaccepted(target: str, tmp_path: Path) -> None:
    projects = bakes(tmp_path / "bakes", target)
    found = checkov(projects, tmp_path)
    # Every workflow of every bake: CI, the release (.github/workflows/release.yml), any other.
    workflows = {key: sorted((project / ".github" / "workflows").glob("*.yml")) for key, project in projects.items()}
    assert all({"ci.yml", "release.yml"} <= {path.name for path in files} for files in workflows.values()), workflows
    zizmor_found = zizmor([path for files in workflows.values() for path in files])
    if BROKEN in projects:
        assert {check for _, check, _ in found.pop(BROKEN)["failed_checks"]} >= {"CKV_K8S_20"}, "checkov passed it"
        broken = str(projects[BROKEN] / ".github" / "workflows" / "ci.yml")
        assert any(path == broken for _, path in zizmor_found), "zizmor passed the broken workflow"
        zizmor_found = {(ident, path) for ident, path in zizmor_found if path != broken}
    for key, checked in found.items():
        assert checked["failed_checks"] == [], key
        if (projects[key] / "deploy" / "k8s" / "scaledjob-as-job.yaml").is_file():
            jobs = [where for _, _, where in checked["skipped_checks"] if "scaledjob-as-job.yaml" in where]
            assert jobs, (key, "the ScaledJob's Job was not scanned")
        skipped = {check for _, check, _ in checked["skipped_checks"]}
        assert skipped <= set(ACCEPTED), (key, skipped - set(ACCEPTED))
        # Every bake's queues skip CKV_AWS_27: its absence means the report left skips out.
        assert "CKV_AWS_27" in skipped, (key, "no skipped checks reported")
    assert zizmor_found == set()


def test_zizmor_finds_nothing_in_the_templates_own_workflows() -> None:
    workflows = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
    assert {path.name for path in workflows} >= {"ci.yml", "release-engine.yml"}
    assert zizmor(workflows) == set()
