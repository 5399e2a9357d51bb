"""This checkout of the template, as a bake reads it: where it is, the engine facts it
holds, and what git says of it.

- `load_limits()`: the engine's `limits.py` (SQS's 12-hour cap, ECS's 120 s stop timeout,
  the fleet concurrency budget, the DLQ naming rule...), loaded from this very checkout, so
  that what is generated and what runs state each fact once. The hooks load the same file
  through `limits_file` (LIMITS_FILE).
- `engine_version()`: the engine's version, the pin a service is baked with.
- `git(...)`: a git command's answer about this checkout (its origin, its commit), or None.

Standard library only: every other module of the package reads the checkout through this one.
"""

from __future__ import annotations

import functools
import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent  # the template's root: cookiecutter.json, engine/
ENGINE_DIR = ROOT / "engine"
LIMITS_FILE = ENGINE_DIR / "src" / "sqs_worker_engine" / "base" / "limits.py"


@functools.cache
def load_limits() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sqs_worker_engine_limits", LIMITS_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def engine_version() -> str:
    """The engine's version, from its pyproject (the pin the service is baked with)."""
    for line in (ENGINE_DIR / "pyproject.toml").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "version":
            return value.strip().strip('"')
    raise LookupError("no version in engine/pyproject.toml")


def git(*args: str) -> str | None:
    """What `git -C <this checkout> args...` prints, or None when git fails or says nothing
    (not a clone, no origin, no git at all)."""
    try:
        result = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 and result.stdout.strip() else None
