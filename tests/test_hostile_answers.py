"""Hostile but legal answers: text the hooks accept (quotes, colons, '#', '&', backslashes,
YAML and TOML look-alikes, unicode) must still give a project whose every YAML, JSON and
TOML file parses, whose Python compiles, and whose free text reads back exactly as given.
Refusals of invalid answers are tests/test_hooks.py's business."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import bake

ANSWERS: dict[str, dict[str, str]] = {
    "markup-characters": {
        "description": "Quotes \" ' and: colons # hash & amp * star ! bang | pipe > gt % pct @ at `tick` $HOME {x} [y]",
        "author_name": 'O\'Brien & Søren: #1 "Team" \\ back\\slash',
    },
    "yaml-and-toml-look-alikes": {
        "description": "- a list item?: no, key: value # not a comment",
        "author_name": "null",
        "project_name": "X.y_z 2-0 Worker",
        "project_slug": "x-y-z-2-0-worker",
        "package_name": "x_y_z_2_0_worker",
    },
    "yaml-scalars": {"description": "yes", "author_name": "1e3"},
    "unicode-bmp": {
        "description": "Ünïcödé ✓ 日本語 — naïve façade, «guillemets», ‹›, € and ½",
        "author_name": "Zoë Ñúñez 李",
    },
    "odd-legal-names": {
        "queue_name": "Q_-9.fifo",
        "aws_region": "us-gov-west-1",
        "description": "ends with a backslash \\",
    },
    # Characters beyond the Basic Multilingual Plane: Jinja's tojson writes them as a
    # surrogate pair (\ud83d\ude00), which JSON accepts and TOML does not (an escape must be
    # a Unicode scalar value), so pyproject.toml does not parse.
    "unicode-astral": {"description": "Emoji 😀 in a description", "author_name": "𝒜𝓊𝓉𝒽𝑜𝓇"},
}
KNOWN_BROKEN: dict[str, str] = {}


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


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=KNOWN_BROKEN[name]))
        if name in KNOWN_BROKEN
        else name
        for name in ANSWERS
    ],
)
def test_hostile_but_legal_answers_give_files_that_parse(name: str, tmp_path: Path) -> None:
    answers = ANSWERS[name]
    project = bake(tmp_path, **answers)
    checked = parse_everything(project)
    assert checked["yaml"] >= 3 and checked["json"] >= 2 and checked["toml"] == 1 and checked["python"] >= 20, checked

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
