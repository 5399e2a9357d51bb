"""The process pool's tests on every other supported Python: the process pool, the collector
and asyncio differ between them. CPython 3.12 and 3.13 end a broken pool's futures while
holding the pool's own lock, and 3.12 moves immortal objects into the collector's permanent
generation; 3.11, which runs the rest of this suite, does neither. A job that killed its
process alone hung for ever on 3.12 and 3.13 while every test here passed on 3.11.

Each Python found on the machine (doubles/pythons.py) gets an environment of the engine's
locked dev dependencies (`uv sync --frozen`, cached per user and version), in which FILES
run against this session's LocalStack. A Python not found is skipped, saying so and how to
install it; a file that skips a test there fails this one. The template's everyday suite runs
3.12 (the template's default) and 3.13; its nightly run 3.14 too."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sqs_worker_engine.doubles import pythons

from ..support import PROJECT_ROOT

SUPPORTED = ("3.11", "3.12", "3.13", "3.14")
HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"
# Every day, the template's default Python and 3.13 (both end a broken pool's futures under
# its lock) beside the suite's own, the engine's oldest; 3.14 in the nightly run.
EVERYDAY = ("3.11", "3.12", "3.13")
FILES = (
    "tests/unit/test_process_pool.py",
    "tests/unit/test_calls.py",
    "tests/model/test_process_life.py",
    "tests/model/test_heap.py",
    "tests/integration/test_process_pool_life.py",
    "tests/integration/test_shutdown.py::test_process_handlers_end_with_the_worker_and_leave_nothing_running",
)
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sqs-worker-engine-pythons"


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """One environment per version, built by one suite at a time (two may run side by side)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def environment(version: str, python: str) -> Path:
    """The engine's locked dev dependencies on `python`, the engine installed from here."""
    uv = pythons.uv_command()
    assert uv, "uv is needed to build the other Pythons' environments (the template's `make install` puts it in .venv)"
    venv = CACHE / version
    with locked(CACHE / f".{version}.lock"):
        done = subprocess.run(
            [uv, "sync", "--quiet", "--frozen", "--project", str(PROJECT_ROOT), "--python", python],
            env={**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)},
            capture_output=True,
            text=True,
            check=False,
        )
    assert done.returncode == 0, f"uv sync on Python {version} failed:\n{done.stderr[-3000:]}"
    return venv


@pytest.mark.parametrize(
    "version", [pytest.param(v, marks=() if v in EVERYDAY else pytest.mark.nightly) for v in SUPPORTED if v != HERE]
)
def test_the_process_pool_s_tests_pass_on(version: str, localstack_endpoint: str) -> None:
    python, looked = pythons.find(version)
    if python is None:
        pytest.skip(
            f"no Python {version} on this machine (looked at: {'; '.join(looked) or 'pyenv, PATH, uv'}): "
            f"install one (`uv python install {version}` or `pyenv install {version}`) to run the process "
            "pool's tests on it"
        )
    venv = environment(version, python)
    # Bytecode written as modules are imported: the environment is kept between runs, so each
    # module is compiled once, by the first process that imports it. With bytecode off, every
    # process (the pool's handler processes among them) compiled all it imported: half of
    # this test's CPU. Compiling the whole environment at install would cost more than a run.
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=-ra", *FILES],
        cwd=PROJECT_ROOT,
        env={**env, "AWS_ENDPOINT_URL": localstack_endpoint},
        capture_output=True,
        text=True,
        check=False,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, f"on Python {version}:\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    assert re.search(r"\d+ passed", summary) and "skipped" not in summary, f"on Python {version}: {summary}"
    print(f"\nPython {version} ({python}): {summary}")
