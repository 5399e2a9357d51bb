"""Find a CPython of a given minor version on this machine (standard library only).

LocalStack's own runtime needs Python 3.13 (emulators.py), and the engine's suite runs its
process-pool tests on every supported Python it finds (tests/integration/test_other_pythons.py):
the process pool, the collector and asyncio differ between them.

Where each is looked for, in order: pyenv's versions, `python<version>` on PATH, and the
Pythons uv knows (the ones it installed, then the system's). Each is run to be sure: under
a project pinned to another version, pyenv's `python3.13` shim is on PATH and runs nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator


def find(version: str) -> tuple[str | None, list[str]]:
    """A Python `version` ("3.12") runs as: its path, or None; and what was tried (for a
    message naming where it looked)."""
    looked: list[str] = []
    for candidate in candidates(version):
        found = python_version(candidate)
        if found == version:
            return candidate, looked
        looked.append(f"{candidate} ({'Python ' + found if found else 'does not run'})")
    return None, looked


def candidates(version: str) -> Iterator[str]:
    if shutil.which("pyenv"):
        out = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True, check=False).stdout
        for installed in sorted(out.split(), reverse=True):
            if installed.startswith(version + ".") and installed.replace(".", "").isdigit():
                prefix = subprocess.run(
                    ["pyenv", "prefix", installed], capture_output=True, text=True, check=False
                ).stdout.strip()
                if prefix:
                    yield os.path.join(prefix, "bin", "python")
    on_path = shutil.which(f"python{version}")
    if on_path:
        yield on_path
    uv = uv_command()
    if uv:
        for preference in ("only-managed", "only-system"):
            found = uv_find(uv, preference, version)
            if found:
                yield found


def uv_find(uv: str, preference: str, version: str) -> str:
    return subprocess.run(
        [uv, "python", "find", "--python-preference", preference, version],
        capture_output=True,
        text=True,
        check=False,
        cwd=tempfile.gettempdir(),
    ).stdout.strip()


def python_version(python: str) -> str | None:
    """`python`'s major.minor ("3.13"), None if it does not run."""
    try:
        done = subprocess.run(
            [python, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = done.stdout.strip()
    return version if done.returncode == 0 and re.fullmatch(r"\d+\.\d+", version) else None


def uv_command() -> str | None:
    """uv: on PATH, or the one running us (`uv run` sets UV), or the one a Makefile names."""
    found = shutil.which("uv")
    if found:
        return found
    named = os.environ.get("UV", "")
    return named if named and os.access(named, os.X_OK) else None
