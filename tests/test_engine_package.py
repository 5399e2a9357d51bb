"""The engine is a distribution of its own: it builds, it is typed, it lints clean, and it
passes its own unit tests standing alone, in its own environment with only its own
dependencies. (Its integration and chaos tests run in this suite's session, against the
suite's LocalStack: engine/tests.)"""

from __future__ import annotations

import tomllib
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, run

ENGINE = ROOT / "engine"
VERSION = tomllib.loads((ENGINE / "pyproject.toml").read_text())["project"]["version"]

pytestmark = pytest.mark.xdist_group("engine-venv")  # one engine/.venv, built once


def test_the_engine_lints_types_and_passes_its_unit_tests_alone() -> None:
    steps = [
        ["uv", "sync", "--quiet", "--locked"] if (ENGINE / "uv.lock").exists() else ["uv", "sync", "--quiet"],
        ["uv", "run", "--quiet", "ruff", "check", "."],
        ["uv", "run", "--quiet", "ruff", "format", "--check", "."],
        ["uv", "run", "--quiet", "mypy"],
        ["uv", "run", "--quiet", "pytest", "tests/unit", "-q", "-p", "no:cacheprovider"],
    ]
    for step in steps:
        result = run(step, ENGINE, timeout=900)
        assert result.returncode == 0, f"{' '.join(step)} failed:\n{(result.stdout + result.stderr)[-4000:]}"
    assert " passed" in result.stdout and " failed" not in result.stdout, result.stdout[-500:]


def test_the_engine_builds_a_typed_wheel_with_its_public_api(tmp_path: Path) -> None:
    result = run(["uv", "build", "--quiet", "--out-dir", str(tmp_path)], ENGINE, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = tmp_path.glob("sqs_worker_engine-*.whl")
    assert wheel.name.startswith(f"sqs_worker_engine-{VERSION}-"), wheel.name
    (sdist,) = tmp_path.glob("sqs_worker_engine-*.tar.gz")
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in ("__init__", "entry", "cli", "settings", "testing", "limits", "localstack", "worker", "router"):
        assert f"sqs_worker_engine/{module}.py" in names, module
    assert "sqs_worker_engine/emulators.py" in names, "the emulator finder ships (localstack.py is its old name)"
    assert "sqs_worker_engine/py.typed" in names, "type information ships with the wheel"
    for name in names:
        if name.endswith(".py"):
            text = zipfile.ZipFile(wheel).read(name).decode()
            assert "{{" not in text or "cookiecutter" not in text, f"template text in {name}"
    assert sdist.stat().st_size > 0
