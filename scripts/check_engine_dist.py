"""Check the engine's built distributions before they are published.

The release workflow (.github/workflows/release-engine.yml) runs this on what `uv build`
wrote, and tests/test_engine_package.py runs it on a fresh build, so a release is checked
the way the suite proves it works:

- metadata: exactly one wheel and one sdist of sqs-worker-engine, at one version (the tag's,
  `engine-v<version>`, when one is given), with the README as its description, a license
  and requires-python; the wheel ships `py.typed` and no tests; the sdist carries the
  tests;
- the engine's own tests, from the sdist, against the wheel installed in a fresh
  environment with the engine's locked dependencies: what users install is what was tested,
  not the checkout beside it.

    python scripts/check_engine_dist.py DIST [--tag engine-v0.4.0] [-- PYTEST ARGS]

Exits 1 naming every problem found. Needs uv on PATH.
"""

from __future__ import annotations

import argparse
import email.parser
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from email.message import Message
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "engine"
NAME = "sqs-worker-engine"
PACKAGE = "sqs_worker_engine"
TAG_PREFIX = "engine-v"
DEFAULT_PYTEST_ARGS = ["tests/unit"]


def version_of_tag(tag: str) -> str:
    """`engine-v0.4.0` -> `0.4.0`; anything else is not an engine release tag."""
    if not tag.startswith(TAG_PREFIX) or len(tag) == len(TAG_PREFIX):
        raise ValueError(
            f"{tag!r} is not an engine release tag: expected {TAG_PREFIX}<version>, e.g. {TAG_PREFIX}0.4.0"
        )
    return tag[len(TAG_PREFIX) :]


def _metadata(text: str) -> Message:
    return email.parser.Parser().parsestr(text)


def metadata_problems(
    wheel_names: list[str], wheel_metadata: str, sdist_names: list[str], expected: str | None
) -> list[str]:
    """What is wrong with a wheel and an sdist, from their file lists and the wheel's METADATA
    (a pure function of what is read, so its table of mistakes is tested directly)."""
    problems: list[str] = []
    meta = _metadata(wheel_metadata)
    if meta.get("Name") != NAME:
        problems.append(f"the wheel's Name is {meta.get('Name')!r}, not {NAME!r}")
    version = meta.get("Version", "")
    if expected is not None and version != expected:
        problems.append(f"the wheel's version is {version!r}, the tag says {expected!r}")
    for field in ("Requires-Python", "License-Expression", "Description-Content-Type", "Summary"):
        if not meta.get(field):
            problems.append(f"the wheel's metadata has no {field}")
    if meta.get("Description-Content-Type", "").split(";")[0] != "text/markdown" or len(meta.get_payload() or "") < 200:
        problems.append("the wheel's long description is not the engine's README (markdown)")
    if f"{PACKAGE}/py.typed" not in wheel_names:
        problems.append(f"the wheel has no {PACKAGE}/py.typed: type checkers would ignore its annotations")
    if f"{PACKAGE}/__init__.py" not in wheel_names:
        problems.append(f"the wheel has no {PACKAGE}/__init__.py")
    if any(name.startswith("tests/") for name in wheel_names):
        problems.append("the wheel installs a top-level tests/ package")
    top = f"{PACKAGE}-{version}/"
    if not any(name.startswith(top + "tests/unit/") for name in sdist_names):
        problems.append(f"the sdist has no {top}tests/unit/: its tests could not be run from it")
    if not any(name == top + "pyproject.toml" for name in sdist_names):
        problems.append(f"the sdist has no {top}pyproject.toml (or is not version {version})")
    return problems


def one(dist: Path, pattern: str) -> Path:
    found = sorted(dist.glob(pattern))
    if len(found) != 1:
        raise SystemExit(f"expected exactly one {pattern} in {dist}, found {[p.name for p in found]}")
    return found[0]


def check_metadata(wheel: Path, sdist: Path, expected: str | None) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta_name = next((n for n in names if n.endswith(".dist-info/METADATA")), None)
        metadata = zf.read(meta_name).decode() if meta_name else ""
    with tarfile.open(sdist) as tf:
        sdist_names = tf.getnames()
    return metadata_problems(names, metadata, sdist_names, expected)


def run(cmd: list[str], cwd: Path | None = None) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=cwd, check=True)


def test_installed_wheel(wheel: Path, sdist: Path, pytest_args: list[str]) -> int:
    """The sdist's tests against the wheel in a fresh environment; pytest's exit code."""
    with tempfile.TemporaryDirectory(prefix="engine-dist-") as tmp:
        work = Path(tmp)
        venv = work / "venv"
        python = venv / "bin" / "python"
        run(["uv", "venv", "--quiet", "--python", sys.executable, str(venv)])
        # The engine's locked dependencies, extras and dev tools, without the engine itself.
        requirements = work / "requirements.txt"
        run(
            ["uv", "export", "--quiet", "--frozen", "--all-extras", "--no-emit-project", "--no-hashes"]
            + ["--format", "requirements-txt", "--output-file", str(requirements)],
            cwd=ENGINE,
        )
        run(["uv", "pip", "install", "--quiet", "--python", str(python), "-r", str(requirements)])
        run(["uv", "pip", "install", "--quiet", "--python", str(python), "--no-deps", str(wheel)])
        with tarfile.open(sdist) as tf:
            tf.extractall(work, filter="data")
        source = work / sdist.name.removesuffix(".tar.gz")
        # The sdist's src/ must not shadow the installed wheel: pytest puts only the sdist's
        # root on sys.path (for the tests package), and the check below proves it.
        where = subprocess.run(
            [str(python), "-c", f"import {PACKAGE}; print({PACKAGE}.__file__)"],
            cwd=source,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if str(venv) not in where:
            print(f"{PACKAGE} was imported from {where}, not from the installed wheel", file=sys.stderr)
            return 1
        cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args]
        print("+", " ".join(cmd), flush=True)
        return subprocess.run(cmd, cwd=source, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist", type=Path, help="the directory `uv build` wrote")
    parser.add_argument("--tag", help=f"the release tag, {TAG_PREFIX}<version>: the distributions must be that version")
    parser.add_argument("pytest_args", nargs="*", help=f"what to run from the sdist (default: {DEFAULT_PYTEST_ARGS})")
    # Intermixed: the release workflow passes `dist --tag T -- tests/unit tests/model`, which
    # plain parse_args refuses (the positionals after an option are "unrecognized").
    args = parser.parse_intermixed_args(argv)
    try:
        expected = version_of_tag(args.tag) if args.tag else None
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 1
    wheel = one(args.dist, f"{PACKAGE}-*.whl")
    sdist = one(args.dist, f"{PACKAGE}-*.tar.gz")
    problems = check_metadata(wheel, sdist, expected)
    if problems:
        print(f"{wheel.name} / {sdist.name}:", *(f"  - {p}" for p in problems), sep="\n", file=sys.stderr)
        return 1
    print(f"metadata: {wheel.name} and {sdist.name} are fine")
    return test_installed_wheel(wheel, sdist, args.pytest_args or DEFAULT_PYTEST_ARGS)


if __name__ == "__main__":
    sys.exit(main())
