"""The container artifacts: the files each deploy target gets, the Dockerfile, and the compose
files (LocalStack's, and moto's server in its place)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from artifacts import (
    ANSWERS,
    CHECKED,
    COMMON_FILES,
    ECS_FILES,
    K8S_DEPLOYMENT_FILES,
    K8S_FILES,
    K8S_SCALEDJOB_FILES,
    K8S_TRACING_FILES,
    LOCALSTACK_IMAGE,
    UV_VERSION,
)
from conftest import ROOT
from matrix import COOKIECUTTER, SUPPORTED
from sqs_worker_engine.doubles import emulators as engine_emulators
from validators import (
    dockerfile_stages,
    hadolint_problems,
    image_repository,
    jsonschema_cli_problems,
    seconds,
)


@pytest.mark.parametrize("key", list(SUPPORTED))
def test_files_follow_deploy_target(projects: dict[str, Path], key: str) -> None:
    project, answers = projects[key], ANSWERS[key]
    assert project.name == answers.slug
    expected = set(COMMON_FILES)
    if answers.ecs:
        expected |= ECS_FILES
    if answers.eks:
        expected |= answers.k8s_files | (K8S_TRACING_FILES if answers.tracing else set())
    for rel in expected:
        assert (project / rel).is_file(), f"{rel} missing for deploy_target={answers.target}"
    absent = (ECS_FILES | K8S_FILES | K8S_TRACING_FILES | K8S_DEPLOYMENT_FILES | K8S_SCALEDJOB_FILES) - expected
    for rel in absent:
        assert not (project / rel).exists(), f"{rel} generated for deploy_target={answers.target}"
    deploy_files = {p.relative_to(project).as_posix() for p in (project / "deploy").rglob("*") if p.is_file()}
    assert deploy_files == {rel for rel in expected if rel.startswith("deploy/")}
    for rel in expected:
        text = (project / rel).read_text()
        for leftover in ("cookiecutter", "{%", "%}", "{#"):
            assert leftover not in text, f"{rel}: unrendered template syntax {leftover!r}"


@pytest.mark.parametrize("key", CHECKED)
def test_dockerfile(projects: dict[str, Path], key: str) -> None:
    project, answers = projects[key], ANSWERS[key]
    dockerfile = project / "Dockerfile"
    assert hadolint_problems(dockerfile) == []

    stages = dockerfile_stages(dockerfile.read_text())
    assert len(stages) >= 2, "multi-stage build expected"
    bases = [stage[0][1].split()[0] for stage in stages]
    # Every base image pinned by digest (a tag can be moved; a digest cannot), the tag kept
    # beside it for readers and for Dependabot.
    for base in bases:
        assert re.fullmatch(r"[\w.:/-]+@sha256:[0-9a-f]{64}", base), f"{base} is not pinned by digest"
    dependabot = yaml.safe_load((project / ".github" / "dependabot.yml").read_text())
    assert {"package-ecosystem": "docker", "directory": "/"}.items() <= next(
        u for u in dependabot["updates"] if u["package-ecosystem"] == "docker"
    ).items(), "Dependabot keeps the digests current"
    tags = [base.split("@", 1)[0] for base in bases]
    assert set(tags) <= {f"python:{answers.python}", f"python:{answers.python}-slim"}, tags
    assert tags[-1] == f"python:{answers.python}-slim", "the runtime stage is the slim image"
    assert (project / ".python-version").read_text().strip() == answers.python
    final = stages[-1]
    by_kind: dict[str, list[str]] = {}
    for instruction, args in final:
        by_kind.setdefault(instruction, []).append(args)
    # Nothing is built or installed in the runtime stage: it only receives the venv.
    # The build stage's uv is the one CI runs (cookiecutter.json's _uv_version, everywhere).
    (build_uv,) = re.findall(r"\buv==(\S+)", " ".join(args for stage in stages for _, args in stage))
    assert build_uv == UV_VERSION
    runs = " ".join(by_kind.get("RUN", []))
    assert not re.search(r"\b(uv|pip|apt-get|gcc|make)\b", runs), f"build tooling in the final stage: {runs}"
    copies = by_kind.get("COPY", [])
    assert copies and all(c.startswith("--from=") for c in copies), copies
    assert by_kind["USER"] == ["10001:10001"]
    assert json.loads(by_kind["ENTRYPOINT"][-1]) == ["python", "-m", answers.package]
    assert json.loads(by_kind["CMD"][-1]) == ["run"]
    healthcheck = by_kind["HEALTHCHECK"][-1]
    command = json.loads(healthcheck.split(" CMD ", 1)[1])
    assert command == ["python", "-m", answers.package, "healthcheck"]
    env = " ".join(by_kind.get("ENV", []))
    for setting in (
        "PYTHONDONTWRITEBYTECODE=1",
        "PYTHONUNBUFFERED=1",
        f"WORKER_HEALTH_FILE=/tmp/{answers.slug}.progress",
    ):
        assert setting in env, f"ENV {setting} missing"
    assert f"WORKER_METRICS_PORT={answers.port}" in env
    assert by_kind["EXPOSE"] == [str(answers.port)]
    assert json.loads(by_kind["VOLUME"][-1]) == ["/tmp"]

    # The build context: everything is ignored except what the Dockerfile copies in.
    ignore = [
        line.strip()
        for line in (project / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ignore[0] == "**"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for stage in stages:
        for instruction, args in stage:
            if instruction == "COPY" and not args.startswith("--from="):
                for source in args.split()[:-1]:
                    assert source.rstrip("*/") in allowed, f"COPY {source} is excluded by .dockerignore"


def compose_defaults(value: Any) -> Any:
    """`value` as docker compose reads it from a shell that sets nothing: each
    `${NAME:-default}` its default (the forms this template writes)."""
    if isinstance(value, dict):
        return {k: compose_defaults(v) for k, v in value.items()}
    if isinstance(value, list):
        return [compose_defaults(v) for v in value]
    if isinstance(value, str):
        return re.sub(r"\$\{[A-Z_][A-Z0-9_]*:-([^}]*)\}", r"\1", value)
    return value


@pytest.mark.parametrize("key", CHECKED)
def test_compose(projects: dict[str, Path], key: str) -> None:
    project, answers = projects[key], ANSWERS[key]
    path = project / "docker-compose.yml"
    assert jsonschema_cli_problems("vendor.compose-spec", path) == []
    services = yaml.safe_load(path.read_text())["services"]

    localstack = services["localstack"]
    # A licensed team's image and token come from the shell; unset, the pinned image and no token.
    assert localstack["image"] == f"${{LOCALSTACK_IMAGE:-{LOCALSTACK_IMAGE}}}"
    assert localstack["environment"]["LOCALSTACK_AUTH_TOKEN"] == "${LOCALSTACK_AUTH_TOKEN:-}", "never a value here"
    defaults = compose_defaults(localstack)
    assert defaults["image"] == LOCALSTACK_IMAGE == engine_emulators.IMAGE
    assert defaults["environment"]["LOCALSTACK_AUTH_TOKEN"] == ""
    assert re.fullmatch(r"localstack/localstack:[\d.]+@sha256:[0-9a-f]{64}", LOCALSTACK_IMAGE), "pin by digest"
    assert "sqs" in localstack["environment"]["SERVICES"].split(",")
    assert localstack["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL")

    bootstrap, worker = services["bootstrap"], services["worker"]
    assert bootstrap["command"] == ["bootstrap"]
    assert bootstrap["depends_on"]["localstack"]["condition"] == "service_healthy"
    assert worker["depends_on"]["bootstrap"]["condition"] == "service_completed_successfully"
    assert worker["init"] is True
    assert seconds(worker["stop_grace_period"]) > answers.shutdown
    # Published for this machine only, never for every interface of the host.
    assert [str(p) for p in worker["ports"]] == [f"127.0.0.1:{answers.port}:{answers.port}"]
    assert [str(p) for p in localstack["ports"]] == ["127.0.0.1:${LOCALSTACK_PORT:-4566}:4566"]
    assert worker["read_only"] is True and "/tmp" in worker["tmpfs"]
    for service in (bootstrap, worker):
        assert image_repository(service["image"]) == answers.slug
        env = {k: str(v) for k, v in service["environment"].items()}
        assert env.pop("AWS_ENDPOINT_URL") == "http://localstack:4566"
        assert env.pop("AWS_ACCESS_KEY_ID") == "test" and env.pop("AWS_SECRET_ACCESS_KEY") == "test"
        assert env == answers.env(bucket="local-payloads", collector=False)


@pytest.mark.parametrize("key", CHECKED)
def test_compose_takes_motos_server_in_localstacks_place(projects: dict[str, Path], key: str) -> None:
    """`SQS_EMULATOR=moto make up` adds docker-compose.moto.yml: moto's server under
    LocalStack's service name and port (bootstrap and the worker unchanged), built from PyPI
    at the version the suite's own moto is locked at."""
    project = projects[key]
    path = project / "docker-compose.moto.yml"
    assert jsonschema_cli_problems("vendor.compose-spec", path) == []
    (name,) = yaml.safe_load(path.read_text())["services"]
    moto = yaml.safe_load(path.read_text())["services"][name]
    assert name == "localstack", "the worker's AWS_ENDPOINT_URL and depends_on name this service"
    assert moto["command"][:1] == ["moto_server"] and moto["command"][-2:] == ["-p", "4566"]
    assert "@sha256:" not in moto["image"], "a local tag: LocalStack's digest must not name a moto build"
    locked = tomllib.loads((ROOT / "uv.lock").read_text())["package"]
    (version,) = [p["version"] for p in locked if p["name"] == "moto"]
    assert f'"moto[server]=={COOKIECUTTER["_moto_version"]}"' in moto["build"]["dockerfile_inline"]
    assert COOKIECUTTER["_moto_version"] == version, "the compose file's moto is the one the suite tests"
    assert "moto-api" in " ".join(moto["healthcheck"]["test"])
    makefile = (project / "Makefile").read_text()
    assert "-f docker-compose.yml -f docker-compose.moto.yml" in makefile and "SQS_EMULATOR" in makefile
