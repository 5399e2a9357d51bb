"""The service measured: the template's default service baked (from this checkout, or another
version of it unpacked elsewhere) and installed with its own engine and Celery beside it;
this checkout's revision; the machine and the versions a run's figures were measured on."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from measuring import ROOT


def tool_env() -> dict[str, str]:
    """Our tools first on PATH, every pyenv interpreter visible to uv, one uv cache."""
    env = dict(os.environ)
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("VIRTUAL_ENV", None)
    env.setdefault("UV_CACHE_DIR", str(ROOT / ".venv" / "uv-cache"))
    if "PYENV_VERSION" not in env and shutil.which("pyenv"):
        out = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True, check=False).stdout
        usable = [v for v in out.split() if v.startswith("3.1") and v.replace(".", "").isdigit()]
        if usable:
            env["PYENV_VERSION"] = ":".join(sorted(usable, reverse=True))
    return env


def bake(into: Path, template: Path = ROOT) -> Path:
    """Bake the default service from `template` (this checkout, or another version of it
    unpacked elsewhere) into `into`, and install it with its own engine."""
    if template == ROOT:
        from cookiecutter.main import cookiecutter

        project = Path(cookiecutter(str(ROOT), no_input=True, output_dir=str(into)))
    else:
        # In a process of its own, started in the template: cookiecutter imports the
        # template's Jinja helpers by name (local_extensions, sqs_worker_template_jinja), and
        # this process (or a checkout in the working directory) would hand it this
        # checkout's, whose engine path they name.
        into.mkdir(parents=True, exist_ok=True)
        before = set(into.iterdir())
        subprocess.run(
            [sys.executable, "-m", "cookiecutter", "--no-input", "--output-dir", str(into), str(template)],
            cwd=template,
            env=tool_env(),
            check=True,
            capture_output=True,
        )
        (project,) = set(into.iterdir()) - before
    env = tool_env()
    result = subprocess.run(["make", "install"], cwd=project, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"make install failed in the baked project:\n{result.stdout}{result.stderr}")
    uv = shutil.which("uv", path=env["PATH"]) or "uv"
    # The service installs this checkout's engine/ by path, and uv reuses a wheel it built
    # earlier from that path unless engine/pyproject.toml changed: rebuild it, so that the
    # worker measured is the engine as it is now.
    result = subprocess.run(
        [
            uv,
            "sync",
            "--quiet",
            *(["--locked"] if (project / "uv.lock").exists() else []),
            "--reinstall-package",
            "sqs-worker-engine",
            "--compile-bytecode",  # as the service's image does: no contender compiles at start
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"reinstalling the engine into the baked project failed:\n{result.stdout}{result.stderr}")
    # The contenders all run on the service's interpreter; Celery at the version this
    # repository locks (its bench group), next to the service's own botocore.
    from importlib.metadata import version

    pins = [f"celery[sqs]=={version('celery')}", f"kombu=={version('kombu')}"]
    result = subprocess.run(
        [
            uv,
            "pip",
            "install",
            "--quiet",
            "--compile-bytecode",
            "--python",
            str(project / ".venv" / "bin" / "python"),
            *pins,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"installing Celery next to the service failed:\n{result.stdout}{result.stderr}")
    return project


def package_name(project: Path) -> str:
    found = [p.parent.name for p in (project / "src").glob("*/__main__.py")]
    if len(found) != 1:
        raise SystemExit(f"cannot tell the service's package in {project.name}/src")
    return found[0]


def revision() -> tuple[str, bool]:
    """This checkout's short commit, and whether its template or engine differ from it: what
    a measured worker was built from."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    changed = subprocess.run(
        [*git, "status", "--porcelain", "--", "{{cookiecutter.project_slug}}", "engine/src", "engine/pyproject.toml"],
        capture_output=True,
        text=True,
        check=False,
    )
    return head.stdout.strip() or "unknown", bool(changed.stdout.strip())


def machine(python: str, endpoint: str) -> dict[str, Any]:
    """What the figures were measured on: the machine, the versions of what ran (`python`:
    the contenders' interpreter), LocalStack's at `endpoint`, and this checkout's revision."""
    code = (
        "import sys, json, importlib.metadata as m\n"
        "names = ['sqs-worker-engine', 'boto3', 'botocore', 'aiobotocore', 'celery', 'kombu', 'pycurl']\n"
        "print(json.dumps({'python': sys.version.split()[0], **{n: m.version(n) for n in names}}))\n"
    )
    versions = json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout)
    try:
        with urllib.request.urlopen(f"{endpoint.rstrip('/')}/_localstack/health", timeout=5) as r:
            localstack_version = json.load(r).get("version", "unknown")
    except OSError:
        localstack_version = "unknown"
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    commit, changed = revision()
    return {
        "template": commit + (" with uncommitted changes" if changed else ""),
        "cores": os.cpu_count(),
        "cpu": model,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": f"{platform.system()} {platform.release()}",
        "contender_python": versions.pop("python"),
        "harness_python": platform.python_version(),
        "libraries": versions,
        "localstack": localstack_version,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
