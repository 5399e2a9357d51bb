"""Every supported answer set renders: nothing is left unrendered, no directory is left
empty, every YAML, JSON and TOML file parses and every Python file compiles, and free text
(hostile but legal: quotes, colons, '#', '&', backslashes, YAML and TOML look-alikes,
unicode) reads back exactly as given. The answer sets are tests/matrix.py's; refusals of
invalid answers are tests/test_hooks.py's business."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import TEMPLATE, bake_cli
from matrix import SUPPORTED

# `{{ cookiecutter.x }}`, `{% if cookiecutter... %}` or `cookiecutter.x }}` left in a file.
UNRENDERED = re.compile(r"\{\{\s*cookiecutter|\{%[^%]*cookiecutter|cookiecutter\.\w+\s*\}\}")


class AnyTagLoader(yaml.SafeLoader):
    """Safe loading that accepts CloudFormation's short forms (!Ref, !Sub, !GetAtt...)."""


def _any_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)  # type: ignore[arg-type]


AnyTagLoader.add_multi_constructor("!", _any_tag)


def parse_everything(project: Path) -> dict[str, int]:
    """Parse every structured file; returns how many of each kind were checked."""
    checked = {"yaml": 0, "json": 0, "toml": 0, "python": 0}
    for path in sorted(p for p in project.rglob("*") if p.is_file() and ".venv" not in p.parts):
        text = path.read_text(encoding="utf-8")
        where = str(path.relative_to(project))
        try:
            if path.suffix in (".yaml", ".yml"):
                list(yaml.load_all(text, Loader=AnyTagLoader))
                checked["yaml"] += 1
            elif path.suffix == ".json":
                json.loads(text)
                checked["json"] += 1
            elif path.suffix == ".toml":
                tomllib.loads(text)
                checked["toml"] += 1
            elif path.suffix == ".py":
                compile(text, where, "exec")
                checked["python"] += 1
        except Exception as exc:
            raise AssertionError(f"{where} does not parse: {exc}") from exc
    return checked


def unrendered(project: Path) -> list[str]:
    return [
        str(path.relative_to(project))
        for path in project.rglob("*")
        if path.is_file() and UNRENDERED.search(path.read_text(errors="ignore"))
    ]


@pytest.mark.parametrize("name", list(SUPPORTED))
def test_supported_answers_generate_a_project_whose_files_parse(name: str, tmp_path: Path) -> None:
    """Baked as a person would (the cookiecutter command), once per supported set."""
    answers = SUPPORTED[name].answers
    result = bake_cli(tmp_path, **answers)
    assert result.returncode == 0, result.stderr
    assert "Cannot generate the project" not in result.stderr
    (project,) = (tmp_path / "out").iterdir()
    package = answers.get("package_name", project.name.replace("-", "_"))
    assert (project / "src" / package).is_dir()
    assert not unrendered(project), f"unrendered template text in {unrendered(project)}"
    assert not [p for p in project.rglob("*") if p.is_dir() and not any(p.iterdir())], "empty directories left"
    assert_deploy_files(project, answers.get("deploy_target", "ecs-and-eks"), result.stdout)
    assert_idempotency_files(project, package, answers.get("use_idempotency", "no"))
    for step in (f"cd {project.resolve()}", "make install", "make test", "make dev", "make up"):
        assert step in result.stdout, result.stdout
    checked = parse_everything(project)
    assert checked["yaml"] and checked["json"] and checked["toml"] == 1 and checked["python"], checked
    if answers.get("use_idempotency", "no") == "no":
        traces = [
            str(path.relative_to(project))
            for path in project.rglob("*")
            # moto is every bake's (its server is the second SQS emulator); its DynamoDB is not.
            if path.is_file()
            and re.search(
                r"IDEMPOTENCY_|idempotency\.py|DYNAMODB|dynamodb\]|ThreadedMotoServer", path.read_text(errors="ignore")
            )
        ]
        assert not traces, f"idempotency is off, yet these files mention it: {traces}"

    pyproject = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    if "description" in answers:
        assert pyproject["description"] == answers["description"]
        dashboard = json.loads((project / "deploy" / "grafana" / "dashboard.json").read_text(encoding="utf-8"))
        assert dashboard["description"] == answers["description"]
        assert answers["description"] in (project / "README.md").read_text(encoding="utf-8")
    if "author_name" in answers:
        assert pyproject["authors"] == [{"name": answers["author_name"]}]
    if "project_name" in answers:
        dashboard = json.loads((project / "deploy" / "grafana" / "dashboard.json").read_text(encoding="utf-8"))
        assert dashboard["title"] == answers["project_name"]


def deprecated_engine_modules() -> set[str]:
    """The engine's old module paths (`sqs_worker_engine.tracing` for
    `...base.telemetry.tracing`): the names its alias table serves, with a warning."""
    import sqs_worker_engine

    return set(sqs_worker_engine.MOVED)


def test_no_generated_file_imports_an_engine_path_the_engine_deprecates() -> None:
    """Every answer's files at once (the template folder, conditional files too): a bake with
    tracing on once imported `sqs_worker_engine.tracing`, so every `make test` of it printed a
    DeprecationWarning, and the path goes in the engine's 1.0."""
    old = deprecated_engine_modules()
    assert {"tracing", "emulators", "limits"} <= old, f"the aliases are no longer recognised: {sorted(old)}"
    alternatives = "|".join(sorted(old))
    dotted = re.compile(rf"\bsqs_worker_engine\.({alternatives})\b")
    named = re.compile(r"from sqs_worker_engine import (?:\(([^)]*)\)|([^\n]*))")
    found = []
    for path in TEMPLATE.rglob("*"):
        name = re.sub(r"\{%.*?%\}", "", path.name)  # a conditional file's name, as rendered
        if not path.is_file() or Path(name).suffix not in (".py", ".md", ".toml", ".cfg", ".txt", ".yml", ".yaml"):
            continue
        text = path.read_text(encoding="utf-8", errors="ignore")
        found += [f"{path.relative_to(TEMPLATE)}: sqs_worker_engine.{m.group(1)}" for m in dotted.finditer(text)]
        for m in named.finditer(text):
            names = {n for n in re.split(r"[,\s]+", m.group(1) or m.group(2)) if n}
            found += [f"{path.relative_to(TEMPLATE)}: from sqs_worker_engine import {n}" for n in sorted(names & old)]
    assert not found, "generated files import deprecated engine paths:\n" + "\n".join(found)


def assert_deploy_files(project: Path, target: str, stdout: str) -> None:
    wanted = {"ecs": target in ("ecs", "ecs-and-eks"), "k8s": target in ("eks", "ecs-and-eks")}
    for name, included in wanted.items():
        generated = project / "deploy" / name
        if not included:
            assert not generated.exists(), f"deploy/{name} generated for deploy_target={target}"
            assert f"deploy/{name}/" not in stdout
            continue
        if any(p.is_file() for p in (TEMPLATE / "deploy" / name).rglob("*")):
            assert any(p.is_file() for p in generated.rglob("*")), f"deploy/{name} missing for {target}"
            assert f"deploy/{name}/" in stdout, stdout


def assert_idempotency_files(project: Path, package: str, use_idempotency: str) -> None:
    optional = [project / "src" / package / "idempotency.py", project / "tests" / "test_idempotency.py"]
    if use_idempotency == "no":
        assert [p for p in optional if p.exists()] == []


def test_partitions_match_botocore() -> None:
    """The template's region -> (partition, DNS suffix) table says what botocore's partition
    data says, for every region botocore knows and for one unknown region per partition."""
    import botocore.loaders

    from sqs_worker_template_jinja.aws import dns_suffix, partition  # the template's root, on the suite's path

    checked = 0
    for part in botocore.loaders.Loader().load_data("partitions")["partitions"]:
        regions = [r for r in part["regions"] if re.match(part["regionRegex"], r)]
        # A region not yet listed, built from the partition's pattern (e.g. "cn-south-7").
        sample = part["regionRegex"].strip("^$").replace("\\-", "-").replace("\\w+", "south").replace("\\d+", "7")
        for region in [*regions, re.sub(r"\(([^|)]+)[^)]*\)", r"\1", sample)]:
            assert re.match(part["regionRegex"], region), region
            got = (partition(region), dns_suffix(region))
            assert got == (part["id"], part["outputs"]["dnsSuffix"]), region
            checked += 1
    assert checked > 30
