"""Tidy the generated project and say what to do next.

Cookiecutter skips a file whose templated name renders empty, but keeps its directory, so
a target left out (ECS or Kubernetes) would leave empty folders behind. Optional modules
whose names are awkward to make conditional are removed here instead. Nothing in this
hook may fail generation: a missing path is simply nothing to do.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

# Rendered by Jinja before it runs; percent-encoded JSON so no answer can alter this code.
ENCODED_ANSWERS = "{{ cookiecutter | tojson | urlencode }}"

# Where this bake came from, for `cruft update` (rendered by the template's Jinja extension).
TEMPLATE_ORIGIN = unquote("{{ template_origin(cookiecutter) | urlencode }}")
TEMPLATE_COMMIT = "{{ template_commit() }}"
# The index the engine is pinned to ("" when it comes from git or a path), and its version.
ENGINE_INDEX = unquote("{{ engine_index(cookiecutter) | urlencode }}")
ENGINE_INDEX_NAME = "{{ engine_index_name }}"
ENGINE_VERSION = "{{ engine_version }}"
# Answers that describe this machine, not the service: kept out of .cruft.json.
LOCAL_KEYS = ("_output_dir", "_repo_dir", "_checkout", "_template")

# Files that only make sense with Powertools idempotency (DynamoDB).
IDEMPOTENCY_FILES = ("src/{package}/idempotency.py", "tests/test_idempotency.py")
DEPLOY_DIRS = {"ecs": "deploy/ecs", "eks": "deploy/k8s"}


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def remove_optional_files(root: Path, answers: dict[str, object]) -> None:
    if answers.get("use_idempotency") != "no":
        return
    package = str(answers.get("package_name", ""))
    for pattern in IDEMPOTENCY_FILES:
        path = root / pattern.format(package=package)
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            warn(f"could not remove {path.relative_to(root)}: {exc}")


def prune_empty_dirs(root: Path) -> None:
    """Remove empty directories bottom-up, so parents emptied by their children go too."""
    for current, _dirs, _files in os.walk(root, topdown=False):
        path = Path(current)
        if path == root or path.is_symlink():
            continue
        try:
            if not any(path.iterdir()):
                path.rmdir()
        except OSError as exc:
            warn(f"could not remove empty directory {path.relative_to(root)}: {exc}")


def record_origin(root: Path, answers: dict[str, object]) -> None:
    """Write .cruft.json (answers, template and commit), so `cruft update` can bring template
    changes in later. `cruft create` writes its own; this covers plain `cookiecutter`."""
    path = root / ".cruft.json"
    if path.exists() or not TEMPLATE_COMMIT:
        return
    state = {
        "template": TEMPLATE_ORIGIN,
        "commit": TEMPLATE_COMMIT,
        "checkout": None,
        "context": {
            "cookiecutter": {
                **{k: v for k, v in answers.items() if k not in LOCAL_KEYS},
                "_template": TEMPLATE_ORIGIN,  # as `cruft create` records them
                "_commit": TEMPLATE_COMMIT,
            }
        },
        "directory": None,
        "skip": [],  # pyproject.toml's [tool.cruft] lists what updates leave alone
    }
    path.write_text(json.dumps(state, indent=2) + "\n")


def lock_dependencies(root: Path) -> bool:
    """Pin every dependency in uv.lock now, so the first build is reproducible (the Dockerfile
    and `make install` then install exactly it). Needs uv and the package index; skipped
    without them (saying so), or with SQS_WORKER_TEMPLATE_LOCK=0. True when uv.lock was written."""
    uv = shutil.which("uv")
    if os.environ.get("SQS_WORKER_TEMPLATE_LOCK") == "0" or not (root / "pyproject.toml").is_file():
        return False
    if uv is None:
        warn("uv is not on PATH, so no uv.lock was written: `make install` installs uv and writes it")
        return False
    result = subprocess.run([uv, "lock", "--quiet"], cwd=root, capture_output=True, text=True, timeout=300, check=False)
    if result.returncode != 0:
        warn(f"`uv lock` failed, so no uv.lock was written: {result.stderr.strip()[-500:]}")
        return False
    return True


def before_install(locked: bool) -> list[str]:
    """What must hold before `make install` can work, when the engine comes from a named index
    and no lock has shown it there yet: said first, so the steps after it do not fail."""
    if not ENGINE_INDEX or locked:
        return []
    name = ENGINE_INDEX_NAME.upper()
    return [
        f"The engine comes from the index {ENGINE_INDEX} alone (pyproject.toml, [[tool.uv.index]]),",
        "and no uv.lock shows it there yet. Before the steps below:",
        f"  publish sqs-worker-engine=={ENGINE_VERSION} to that index (the template's engine/README.md, 'Releasing')",
        f"  if the index asks for credentials, export UV_INDEX_{name}_USERNAME and UV_INDEX_{name}_PASSWORD",
    ]


def next_steps(root: Path, answers: dict[str, object], locked: bool = True) -> str:
    first = before_install(locked)
    lines = [
        "",
        f"Created {answers.get('project_slug', root.name)}.",
        *first,
        "Then:" if first else "Next steps:",
        f"  cd {root}",
        *(["  make lock      # uv.lock: the engine from that index, by hash"] if first else []),
        "  make install   # .venv with the service and its dev tools (installs uv if it is missing)",
        "  make test      # lint, types, unit and integration tests (LocalStack is started automatically)",
        "  make dev       # LocalStack + queue bootstrap + the worker",
        "  make up        # the same with Docker Compose",
    ]
    target = answers.get("deploy_target")
    wanted = ("ecs", "eks") if target == "ecs-and-eks" else (target,)
    found = [DEPLOY_DIRS[t] for t in wanted if t in DEPLOY_DIRS and (root / DEPLOY_DIRS[t]).is_dir()]
    if found:
        guide = "; deploy/README.md explains them" if (root / "deploy" / "README.md").is_file() else ""
        lines.append(f"Deploy files for {target}: {', '.join(d + '/' for d in found)}{guide}")
    return "\n".join(lines)


def main() -> int:
    root = Path.cwd()  # cookiecutter runs this hook inside the generated project
    # A failing post-generation hook makes cookiecutter delete the project, so every step
    # reports its problem and the hook still succeeds.
    answers: dict[str, object] = {}
    try:
        loaded = json.loads(unquote(ENCODED_ANSWERS))
        if not isinstance(loaded, dict):
            raise TypeError("the answers are not a mapping")
        answers = loaded
    except Exception as exc:  # noqa: BLE001
        warn(f"could not read the answers ({exc!r}); optional files kept")
    try:
        remove_optional_files(root, answers)
    except Exception as exc:  # noqa: BLE001
        warn(f"could not remove optional files ({exc!r})")
    try:
        prune_empty_dirs(root)
    except Exception as exc:  # noqa: BLE001
        warn(f"could not prune empty directories ({exc!r})")
    try:
        record_origin(root, answers)
    except Exception as exc:  # noqa: BLE001
        warn(f"could not write .cruft.json ({exc!r}); `cruft link` can add it later")
    locked = False
    try:
        locked = lock_dependencies(root)
    except Exception as exc:  # noqa: BLE001
        warn(f"could not write uv.lock ({exc!r}); `uv lock` in the project does it")
    try:
        print(next_steps(root, answers, locked))
    except Exception as exc:  # noqa: BLE001
        warn(f"could not print next steps ({exc!r})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
