"""The engine is a distribution of its own: it builds, it is typed, it lints clean, and it
passes its own unit tests standing alone, in its own environment with only its own
dependencies. (Its integration and chaos tests run in this suite's session, against the
suite's LocalStack: engine/tests.) What its release checks before publishing
(scripts/check_engine_dist.py) passes a fresh build and names each mistake it exists for."""

from __future__ import annotations

import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, run

from scripts import check_engine_dist

ENGINE = ROOT / "engine"
VERSION = tomllib.loads((ENGINE / "pyproject.toml").read_text())["project"]["version"]

pytestmark = pytest.mark.xdist_group("engine-venv")  # one engine/.venv, built once
# A sample of the unit tests that reaches most of the engine (its settings, its layers, its
# parts wired): run alone and from the sdist against the wheel, where the whole unit suite
# again would only repeat what this suite's own run of engine/tests shows.
ALONE_TESTS = ["tests/unit/test_settings.py", "tests/unit/test_layers.py", "tests/unit/test_runtime_parts.py"]


def test_the_engine_lints_types_and_passes_its_unit_tests_alone() -> None:
    steps = [
        ["uv", "sync", "--quiet", "--locked"] if (ENGINE / "uv.lock").exists() else ["uv", "sync", "--quiet"],
        ["uv", "run", "--quiet", "ruff", "check", "."],
        ["uv", "run", "--quiet", "ruff", "format", "--check", "."],
        ["uv", "run", "--quiet", "mypy"],
        # The whole unit suite runs in this suite already (engine/tests); here, that the
        # engine's own environment and pytest configuration run its tests alone.
        ["uv", "run", "--quiet", "pytest", *ALONE_TESTS, "-q", "-p", "no:cacheprovider"],
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
    for module in (
        "__init__",  # with the table of old paths generated services imported before 0.6
        "entry",
        "cli",
        "testing",
        "process/settings/__init__",
        "process/worker",
        "base/limits",
        "handlers/router",
        "doubles/emulators",  # the emulator finder (`localstack` and `emulators` its old paths)
    ):
        assert f"sqs_worker_engine/{module}.py" in names, module
    assert "sqs_worker_engine/py.typed" in names, "type information ships with the wheel"
    for name in names:
        if name.endswith(".py"):
            text = zipfile.ZipFile(wheel).read(name).decode()
            assert "{{" not in text or "cookiecutter" not in text, f"template text in {name}"
    assert sdist.stat().st_size > 0


# --- the release's checks (scripts/check_engine_dist.py, run by .github/workflows/release-engine.yml)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    result = run(["uv", "build", "--quiet", "--out-dir", str(out)], ENGINE, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_the_release_checks_pass_a_fresh_build_and_test_the_installed_wheel(dist: Path) -> None:
    result = run(
        [
            sys.executable,
            str(ROOT / "scripts" / "check_engine_dist.py"),
            str(dist),
            "--tag",
            f"engine-v{VERSION}",
            "--",
            *ALONE_TESTS,
        ],
        ROOT,
        timeout=900,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "metadata: " in output and " passed" in output and " failed" not in output, output[-2000:]


def test_the_release_checks_refuse_a_tag_of_another_version(dist: Path) -> None:
    result = run(
        [sys.executable, str(ROOT / "scripts" / "check_engine_dist.py"), str(dist), "--tag", "engine-v9.9.9"], ROOT
    )
    assert result.returncode == 1
    assert f"the wheel's version is '{VERSION}', the tag says '9.9.9'" in result.stderr


def parts(dist: Path) -> tuple[list[str], str, list[str]]:
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    with tarfile.open(sdist) as tf:
        return names, metadata, tf.getnames()


def _without(names: list[str], fragment: str) -> list[str]:
    return [n for n in names if fragment not in n]


MISTAKES = {
    "untyped": (lambda w, m, s: (_without(w, "py.typed"), m, s), "has no sqs_worker_engine/py.typed"),
    "no-tests-in-sdist": (lambda w, m, s: (w, m, _without(s, "/tests/")), "the sdist has no sqs_worker_engine-"),
    "tests-in-wheel": (lambda w, m, s: ([*w, "tests/__init__.py"], m, s), "installs a top-level tests/ package"),
    "renamed": (
        lambda w, m, s: (w, m.replace("Name: sqs-worker-engine", "Name: sqs-worker"), s),
        "Name is 'sqs-worker'",
    ),
    "no-license": (
        lambda w, m, s: (w, "\n".join(x for x in m.splitlines() if not x.startswith("License-Expression")), s),
        "no License-Expression",
    ),
    "no-readme": (lambda w, m, s: (w, m.split("\n\n", 1)[0] + "\n\n", s), "not the engine's README"),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_the_release_checks_name_each_mistake(dist: Path, mistake: str) -> None:
    mutate, fragment = MISTAKES[mistake]
    wheel_names, metadata, sdist_names = parts(dist)
    assert check_engine_dist.metadata_problems(wheel_names, metadata, sdist_names, VERSION) == []
    problems = check_engine_dist.metadata_problems(*mutate(wheel_names, metadata, sdist_names), VERSION)
    assert any(fragment in p for p in problems), problems


@pytest.mark.parametrize("tag", ["v0.4.0", "engine-v", "0.4.0", "sqs-worker-engine-0.4.0"])
def test_only_an_engine_tag_releases(tag: str) -> None:
    with pytest.raises(ValueError, match="is not an engine release tag: expected engine-v<version>"):
        check_engine_dist.version_of_tag(tag)
    assert check_engine_dist.version_of_tag("engine-v0.4.0") == "0.4.0"
