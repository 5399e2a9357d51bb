"""Security scanners over every supported bake: checkov (CloudFormation, Kubernetes,
Dockerfile, GitHub Actions) and zizmor (the workflows). Nothing may be found that is not
accepted in place, in the file, with its reason; the accepted findings are listed here so
that a new skip cannot slip in unreviewed. A deliberately broken copy of one bake runs in
the same scan, so a green result shows the scanners looked.

Both come from `make scanners` (scanners/requirements.in), an environment of their own.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, bake, run
from matrix import SUPPORTED
from validators import tool

# Each accepted finding, and where its reason is written.
ACCEPTED = {
    "CKV_AWS_27": "deploy/aws/queues.yaml: SQS-managed encryption, which checkov does not count",
    "CKV_AWS_119": "deploy/aws/queues.yaml: the idempotency table uses the AWS managed key",
    "CKV_AWS_158": "deploy/ecs/service.yaml: CloudWatch Logs encrypts log groups; a CMK is the account's choice",
    "CKV_K8S_11": "deploy/k8s/deployment.yaml: no CPU limit on purpose",
    "CKV_K8S_15": "deploy/k8s/deployment.yaml: immutable release tags, IfNotPresent",
    "CKV_K8S_43": "deploy/k8s/deployment.yaml: the image reference is set at deploy time",
}
BROKEN = "broken"  # the defaults, with a privileged container and an unpinned action


@pytest.fixture(scope="module")
def bakes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("scanned")
    projects = {key: bake(out / key, **combo.answers) for key, combo in SUPPORTED.items()}
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
    return {**projects, BROKEN: broken}


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


def test_checkov_finds_nothing_unaccepted(bakes: dict[str, Path], tmp_path: Path) -> None:
    keys = list(bakes)
    cmd = [tool("checkov"), "--compact", "--quiet", "--skip-download", "--output", "json"]
    for key in keys:
        cmd += ["--directory", str(bakes[key])]
    # One process for every bake: checkov takes seconds to start. It exits 1 on a finding.
    result = run(cmd, ROOT, timeout=1200, HOME=str(tmp_path))
    assert result.returncode in (0, 1), result.stderr[-3000:]
    docs = json_documents(result.stdout)
    assert len(docs) == len(keys), result.stderr[-3000:]

    # Each document sums up every directory scanned so far: a bake's own are what it adds.
    seen: dict[str, list[tuple[str, str, str]]] = {"failed_checks": [], "skipped_checks": []}
    found: dict[str, dict[str, list[tuple[str, str, str]]]] = {}
    for key, doc in zip(keys, docs, strict=True):
        found[key] = {}
        for kind, before in list(seen.items()):
            total = checks(doc, kind)
            assert total[: len(before)] == before
            found[key][kind], seen[kind] = total[len(before) :], total
        scanned = {r["check_type"] for r in doc if r.get("summary", {}).get("passed", 0) > 0}
        assert {"cloudformation", "dockerfile", "github_actions"} <= scanned, (key, scanned)

    assert {check for _, check, _ in found[BROKEN]["failed_checks"]} >= {"CKV_K8S_20"}, "the broken bake passed"
    for key in keys[:-1]:
        assert found[key]["failed_checks"] == [], key
        skipped = {check for _, check, _ in found[key]["skipped_checks"]}
        assert skipped <= set(ACCEPTED), (key, skipped - set(ACCEPTED))
    for skip in (c for doc in docs[-1] for c in doc.get("results", {}).get("skipped_checks", [])):
        assert skip.get("suppress_comment", "").strip(), f"{skip['check_id']} is skipped without a reason"


def test_zizmor_finds_nothing(bakes: dict[str, Path]) -> None:
    """The default persona over every workflow, the template's own included; the broken
    bake's unpinned action shows the audit runs."""
    workflows = {key: project / ".github" / "workflows" / "ci.yml" for key, project in bakes.items()}
    workflows["template"] = ROOT / ".github" / "workflows" / "ci.yml"
    cmd = [tool("zizmor"), "--offline", "--no-progress", "--format", "json", *map(str, workflows.values())]
    result = run(cmd, ROOT, timeout=300)
    findings = json.loads(result.stdout)
    where = {
        (finding["ident"], location["symbolic"]["key"]["Local"]["verbatim_path"])
        for finding in findings
        for location in finding["locations"]
    }
    broken = str(workflows.pop(BROKEN))
    assert any(path == broken for _, path in where), "the broken workflow passed"
    assert {(ident, path) for ident, path in where if path != broken} == set(), result.stderr[-2000:]
