"""Every image pinned by digest is proposed for update by exactly one bot, in the template and
in every bake: Dependabot where it reads the file (a Dockerfile's FROM, docker compose),
Renovate's regex manager (renovate.json) where it does not (cookiecutter.json, the engine's
emulator starter, the ECS stack, the Kubernetes manifests, CI's service container).

Renovate's patterns are JavaScript regular expressions; the ones used here mean the same in
Python once `(?<name>` is written `(?P<name>`."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from matrix import names
from validators import jsonschema_cli_problems

PINNED = re.compile(r"[a-z0-9][a-z0-9./_-]*:[A-Za-z0-9][A-Za-z0-9._-]*@sha256:[0-9a-f]{64}")
VERSION_UPDATES = {"version-update:semver-major", "version-update:semver-minor", "version-update:semver-patch"}


def source_files(root: Path) -> list[Path]:
    """Every file under `root` but environments and git's: pruned, not filtered afterwards,
    since a tool's temporary files under .venv come and go while the walk runs."""
    files = []
    for top, dirs, found in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".venv", ".git")]
        files += [Path(top) / name for name in found]
    return files


def renovate_tracked(root: Path) -> set[tuple[str, str]]:
    """(file, image) for every image renovate.json's regex managers find under `root`."""
    config = json.loads((root / "renovate.json").read_text())
    assert config["enabledManagers"] == ["custom.regex"], "Renovate only where Dependabot cannot read"
    found: set[tuple[str, str]] = set()
    files = source_files(root)
    for manager in config["customManagers"]:
        patterns = [re.compile(p.strip("/")) for p in manager["managerFilePatterns"]]
        matchers = [re.compile(m.replace("(?<", "(?P<")) for m in manager["matchStrings"]]
        for path in files:
            rel = path.relative_to(root).as_posix()
            if not any(p.search(rel) for p in patterns):
                continue
            for matcher in matchers:
                for match in matcher.finditer(path.read_text(errors="replace")):
                    image = f"{match['depName']}:{match['currentValue']}@{match['currentDigest']}"
                    found.add((rel, image))
    return found


def pinned(root: Path, rels: list[str]) -> set[tuple[str, str]]:
    # Bytes that are not text (compiled modules other tests leave in a shared bake) pin nothing.
    return {(rel, image) for rel in rels for image in PINNED.findall((root / rel).read_text(errors="replace"))}


def test_the_templates_pinned_images_are_tracked_by_renovate() -> None:
    assert jsonschema_cli_problems("vendor.renovate", ROOT / "renovate.json") == []
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    rels = [rel for rel in listed.split() if not rel.startswith(("docs/", "{{")) and not rel.endswith(".lock")]
    everywhere = pinned(ROOT, [rel for rel in rels if (ROOT / rel).is_file()])
    images = {image for _, image in everywhere}
    assert len(images) >= 9, images  # two per Python, the collector, LocalStack
    assert everywhere <= renovate_tracked(ROOT), f"pinned, not tracked: {everywhere - renovate_tracked(ROOT)}"
    config = json.loads((ROOT / "renovate.json").read_text())
    frozen = {n for rule in config["packageRules"] if rule.get("enabled") is False for n in rule["matchPackageNames"]}
    assert frozen == {"python", "localstack/localstack"}, "a service keeps its Python; LocalStack stays tokenless"


@pytest.mark.parametrize("key", names("full", "checked", "artifacts"))
def test_a_bakes_pinned_images_are_each_tracked_by_one_bot(projects: dict[str, Path], key: str) -> None:
    project = projects[key]
    assert jsonschema_cli_problems("vendor.renovate", project / "renovate.json") == []
    # .cruft.json records the template's context (every image it offers): what `make upgrade`
    # reads, never what the service runs.
    files = [p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file() and p.name != ".cruft.json"]
    everywhere = pinned(project, files)

    dependabot = yaml.safe_load((project / ".github" / "dependabot.yml").read_text())["updates"]
    ecosystems = {u["package-ecosystem"]: u for u in dependabot}
    by_dependabot = {(rel, image) for rel, image in everywhere if rel == "Dockerfile"}
    by_dependabot |= {(rel, image) for rel, image in everywhere if rel == "docker-compose.yml"}
    assert ecosystems["docker"]["directory"] == "/" and ecosystems["docker-compose"]["directory"] == "/"
    # LocalStack in compose: its rebuilt digests proposed, no other version.
    (localstack,) = [
        i for i in ecosystems["docker-compose"]["ignore"] if i["dependency-name"] == "localstack/localstack"
    ]
    assert set(localstack["update-types"]) == VERSION_UPDATES

    by_renovate = renovate_tracked(project)
    assert not by_renovate & by_dependabot, "one bot per image"
    untracked = everywhere - by_renovate - by_dependabot
    assert not untracked, f"pinned by digest, proposed by no bot: {sorted(untracked)}"
    expected = {".github/workflows/ci.yml"} | (
        {"deploy/ecs/service.yaml"} if (project / "deploy" / "ecs").is_dir() else set()
    )
    assert {rel for rel, _ in by_renovate} >= expected, by_renovate
