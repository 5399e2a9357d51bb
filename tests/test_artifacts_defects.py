"""The validators catch what they are there to catch: each shown to reject a broken artifact,
so that a green run of the other artifact tests means the checks looked."""

from __future__ import annotations

import copy
import json
import re
import shutil
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from artifacts import (
    ANSWERS,
    Answers,
    ecs_task_definition,
)
from validators import (
    actionlint_problems,
    cfn_problems,
    check_rules,
    ecs_problems,
    hadolint_problems,
    jsonschema_cli_problems,
    k8s_problems,
    keda_problems,
    keda_schema_dir,
    load_k8s,
    promql_metric_names,
    unknown_metrics,
)

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
        _mutate_text("deploy/ecs/service.yaml", lambda t: t.replace("ScaleOutCooldown: 60", "ScaleOutCooldown: soon")),
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
            if "expr" in target  # Prometheus's; SQS's own metrics come from CloudWatch
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
