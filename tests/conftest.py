"""Shared fixtures for the template's suite: baking, tool environment, one LocalStack.

One LocalStack serves the whole run (started before the test processes, stopped after);
every generated project's `make test` reuses it through AWS_ENDPOINT_URL, and every test
creates queues with unique names, so bakes can run in parallel.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from cookiecutter.main import cookiecutter
from sqs_worker_engine.doubles import emulators

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "{{cookiecutter.project_slug}}"
_STATE: dict[str, Any] = {}
# SQS for the worker; the rest for deploying the CloudFormation stacks (tests/test_deploy.py).
LOCALSTACK_SERVICES = "sqs,sns,s3,events,cloudformation,iam,sts,logs,cloudwatch,ec2"


def tool_env(**extra: str) -> dict[str, str]:
    """Environment for commands run on baked projects: our tools first on PATH, every
    installed pyenv interpreter visible to uv, and uv's own cache (UV_CACHE_DIR, else the
    user's), the one `make install` and the engine's other-Python environments fill: a
    fresh clone's bakes link what is already there rather than download it again."""
    env = dict(os.environ)
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("VIRTUAL_ENV", None)
    # A baked project's tools start several Python processes on one fresh environment: each
    # module is compiled by the first and read back by the rest (compiling all of it at
    # install costs more than it saves; the image does that, for the processes it will run).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("AWS_ACCESS_KEY_ID", "test")
    env.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    if "PYENV_VERSION" not in env and shutil.which("pyenv"):
        versions = subprocess.run(
            ["pyenv", "versions", "--bare"], capture_output=True, text=True, check=False
        ).stdout.split()
        usable = [v for v in versions if v.startswith("3.1") and v.replace(".", "").isdigit()]
        if usable:
            env["PYENV_VERSION"] = ":".join(sorted(usable, reverse=True))
    env.update(extra)
    return env


# One warm mypy cache per Python version, shared by the bakes a session type-checks: a cold
# strict run over the service's dependencies costs about seven times a warm one. Copied into
# a bake before its checks (never shared while written: each bake writes its own copy); mypy
# checks every entry against the sources and options it was made from, so a seed from
# another bake, another session, another clone or an older engine is as safe as the bake's
# own cache. Kept per user, beside uv's cache, so a fresh clone's first run starts warm.
MYPY_SEEDS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sqs-worker-template" / "mypy-seeds"


def seed_mypy_cache(project: Path) -> None:
    """Give a bake the warm mypy cache of its Python, if a bake has shared one."""
    seed = MYPY_SEEDS / (project / ".python-version").read_text().strip()
    try:
        shutil.copytree(seed, project / ".mypy_cache", dirs_exist_ok=True)  # mtimes kept
    except (FileNotFoundError, shutil.Error):
        pass  # none yet, or replaced while copied: mypy fills in what is missing


def share_mypy_cache(project: Path) -> None:
    """After a bake type-checked clean, its cache becomes its Python's seed (the newest wins,
    so a long-lived .venv keeps a seed of today's dependencies)."""
    cache = project / ".mypy_cache"
    if not cache.is_dir():
        return
    version = (project / ".python-version").read_text().strip()
    MYPY_SEEDS.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=MYPY_SEEDS))
    shutil.copytree(cache, fresh, dirs_exist_ok=True)
    stale = Path(tempfile.mkdtemp(prefix=f".{version}-old-", dir=MYPY_SEEDS))
    with contextlib.suppress(FileNotFoundError):
        (MYPY_SEEDS / version).rename(stale / "seed")
    try:
        fresh.rename(MYPY_SEEDS / version)  # atomic: a bake copying the seed sees all of it or none
    except OSError:
        shutil.rmtree(fresh, ignore_errors=True)  # another bake's seed went in between: as good
    shutil.rmtree(stale, ignore_errors=True)


def bake(output_dir: Path, lock: bool = False, **context: str) -> Path:
    """Generate a project with the defaults plus `context`; returns its directory.
    `lock`: let the post-generation hook write uv.lock (it needs the package index)."""
    previous = os.environ.get("SQS_WORKER_TEMPLATE_LOCK")
    os.environ["SQS_WORKER_TEMPLATE_LOCK"] = "1" if lock else "0"
    try:
        return Path(cookiecutter(str(ROOT), no_input=True, output_dir=str(output_dir), extra_context=context))
    finally:
        if previous is None:
            os.environ.pop("SQS_WORKER_TEMPLATE_LOCK", None)
        else:
            os.environ["SQS_WORKER_TEMPLATE_LOCK"] = previous


def cookiecutter_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run cookiecutter into tmp_path/out; replay files stay inside tmp_path, not in $HOME."""
    config = tmp_path / "cookiecutter-config.yaml"
    config.write_text(
        f"replay_dir: {json.dumps(str(tmp_path / 'replay'))}\n"
        f"cookiecutters_dir: {json.dumps(str(tmp_path / 'cookiecutters'))}\n",
        encoding="utf-8",
    )
    cmd = [sys.executable, "-m", "cookiecutter", "--config-file", str(config), "-o", str(tmp_path / "out")]
    return subprocess.run(
        [*cmd, *args],
        env={**os.environ, "SQS_WORKER_TEMPLATE_LOCK": "0"},  # locking is tested by the bakes
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=120,
        check=False,
    )


def bake_cli(tmp_path: Path, **answers: str) -> subprocess.CompletedProcess[str]:
    return cookiecutter_cli(tmp_path, "--no-input", str(ROOT), *(f"{k}={v}" for k, v in answers.items()))


def run(cmd: list[str], cwd: Path, timeout: float = 900, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, cwd=cwd, env=tool_env(**env), capture_output=True, text=True, timeout=timeout, check=False
    )


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or os.environ.get("TEMPLATE_TESTS_NO_LOCALSTACK"):
        return  # xdist workers inherit the endpoint from the controller
    # LocalStack whatever SQS_EMULATOR says: the deploy tests need its CloudFormation.
    ls = emulators.ensure(services=LOCALSTACK_SERVICES, emulator=emulators.LOCALSTACK)
    _STATE["localstack"] = ls
    os.environ["AWS_ENDPOINT_URL"] = ls.endpoint
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    print(f"LocalStack ({ls.mode}) at {ls.endpoint}", file=sys.stderr)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `nightly` run in the nightly run alone (`make test-full`): the everyday
    suite deselects them, and says how many in its summary line."""
    from matrix import FULL  # the template's root must be on the path first

    if FULL:
        return
    nightly = [item for item in items if item.get_closest_marker("nightly")]
    if nightly:
        config.hook.pytest_deselected(items=nightly)
        items[:] = [item for item in items if not item.get_closest_marker("nightly")]


def pytest_unconfigure(config: pytest.Config) -> None:
    ls = _STATE.pop("localstack", None)
    if ls is not None:
        ls.stop()


class Baked(dict[str, Path]):
    """Projects by supported answer set (tests/matrix.py), each baked on first use and then
    shared by every test of the session in this process (test_artifacts_*, test_readmes)."""

    def __init__(self, out: Path) -> None:
        super().__init__()
        self.out = out

    def __missing__(self, key: str) -> Path:
        from matrix import SUPPORTED  # the template's root must be on the path first

        path = bake(self.out / key, **SUPPORTED[key].answers)
        self[key] = path
        return path


@pytest.fixture(scope="session")
def projects(tmp_path_factory: pytest.TempPathFactory) -> Baked:
    return Baked(tmp_path_factory.mktemp("bakes"))


@pytest.fixture(scope="session")
def localstack_endpoint() -> str:
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if not endpoint:
        pytest.fail("no LocalStack: AWS_ENDPOINT_URL is not set (TEMPLATE_TESTS_NO_LOCALSTACK was given?)")
    return endpoint
