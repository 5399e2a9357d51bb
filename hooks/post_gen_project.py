"""Tidy the generated project and say what to do next.

Cookiecutter skips a file whose templated name renders empty, but keeps its directory, so
a target left out (ECS or Kubernetes) would leave empty folders behind. Optional modules
whose names are awkward to make conditional are removed here instead. Nothing in this
hook may fail generation: a missing path is simply nothing to do.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

# Rendered by Jinja before it runs; percent-encoded JSON so no answer can alter this code.
# Jinja's tojson sorts a mapping's keys: their order as cookiecutter keeps them (the order
# of cookiecutter.json, which cruft writes .cruft.json in) comes as a list beside it.
ENCODED_ANSWERS = "{{ cookiecutter | tojson | urlencode }}"
ENCODED_ORDER = "{{ cookiecutter.keys() | list | tojson | urlencode }}"

# Where this bake came from, for `cruft update` (rendered by the template's Jinja extension).
TEMPLATE_ORIGIN = unquote("{{ template_origin(cookiecutter) | urlencode }}")
TEMPLATE_COMMIT = "{{ template_commit() }}"
# The index the engine is pinned to ("" when it comes from git or a path, or when the bake
# names none), and its version. ENGINE_INDEX_UNNAMED: the version pin alone, with no index
# named for it; uv may resolve it only once one of INDEX_VARIABLES names one.
ENGINE_INDEX = unquote("{{ engine_index(cookiecutter) | urlencode }}")
ENGINE_INDEX_UNNAMED = json.loads("{{ engine_index_unnamed(cookiecutter) | tojson }}")
INDEX_VARIABLES = json.loads(unquote("{{ index_variables | tojson | urlencode }}"))
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


def in_order(answers: dict[str, object]) -> list[str]:
    """The answers' names in cookiecutter's order, as `cruft update` writes them: in any
    other, the first update rewrote every line of .cruft.json (79 lines for a 2-line change)."""
    try:
        order = [k for k in json.loads(unquote(ENCODED_ORDER)) if k in answers]
    except Exception:  # noqa: BLE001 - the sorted order is still a correct record
        order = []
    return order + [k for k in answers if k not in order]


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
                **{k: answers[k] for k in in_order(answers) if k not in LOCAL_KEYS},
                "_template": TEMPLATE_ORIGIN,  # as `cruft create` records them
                "_commit": TEMPLATE_COMMIT,
            }
        },
        "directory": None,  # no "skip": pyproject.toml's [tool.cruft] lists what updates leave alone
    }
    path.write_text(json.dumps(state, indent=2) + "\n")


def lock_dependencies(root: Path) -> bool | str:
    """Pin every dependency in uv.lock now, so the first build is reproducible (the Dockerfile
    and `make install` then install exactly it). Needs uv and the package index; skipped
    without them (saying so), or with SQS_WORKER_TEMPLATE_LOCK=0. True when uv.lock was
    written; the Python version uv found no interpreter for, when that is why it was not."""
    uv = shutil.which("uv")
    if os.environ.get("SQS_WORKER_TEMPLATE_LOCK") == "0" or not (root / "pyproject.toml").is_file():
        return False
    if ENGINE_INDEX_UNNAMED and not any(os.environ.get(name) for name in INDEX_VARIABLES):
        # Resolved from the default index, sqs-worker-engine would be whatever anyone published
        # there under that name; the closing message says how to name the index first.
        return False
    if uv is None:
        warn("uv is not on PATH, so no uv.lock was written: `make install` installs uv and writes it")
        return False
    result = subprocess.run([uv, "lock", "--quiet"], cwd=root, capture_output=True, text=True, timeout=300, check=False)
    if result.returncode != 0:
        warn(f"`uv lock` failed, so no uv.lock was written: {result.stderr.strip()[-500:]}")
        missing = re.search(r"No interpreter found for Python ([0-9][0-9.]*)", result.stderr)
        return missing.group(1) if missing else False
    return True


def missing_python(version: str) -> list[str]:
    """What to do first when no interpreter of the answered Python was found to lock with:
    `make install` would fail the same way."""
    return [
        f"No Python {version} was found on this machine, so no uv.lock was written and `make install` would fail.",
        "Before the steps below, install it:",
        f"  uv python install {version}   # or: pyenv install {version}, or your system's python{version}",
    ]


def before_install(locked: bool) -> list[str]:
    """What must hold before `make install` can work, when the engine comes from an index and
    no lock has shown it there yet: said first, so the steps after it do not fail. With no
    index named for the engine, that comes first: the Makefile refuses to lock until it is."""
    if locked or not (ENGINE_INDEX or ENGINE_INDEX_UNNAMED):
        return []

    def publish(where: str) -> str:
        return f"  publish sqs-worker-engine=={ENGINE_VERSION} to {where} (the template's docs/engine/development.md, 'Releasing')"

    name = ENGINE_INDEX_NAME.upper()
    credentials = f"  if the index asks for credentials, export UV_INDEX_{name}_USERNAME and UV_INDEX_{name}_PASSWORD"
    if ENGINE_INDEX_UNNAMED:
        return [
            f"pyproject.toml pins sqs-worker-engine=={ENGINE_VERSION} with no index named for it, and `make lock` and",
            "`make install` refuse until one is: the name is not claimed on the public index, where anyone",
            "could publish a package called sqs-worker-engine. Before the steps below:",
            publish("your index"),
            f"  name that index: export UV_INDEX={ENGINE_INDEX_NAME}=<its simple API URL> (for good: [[tool.uv.index]]",
            "  in pyproject.toml, as its README's 'Where the engine comes from' shows)",
            credentials,
        ]
    return [
        f"The engine comes from the index {ENGINE_INDEX} alone (pyproject.toml, [[tool.uv.index]]),",
        "and no uv.lock shows it there yet. Before the steps below:",
        publish("that index"),
        credentials,
    ]


def next_steps(root: Path, answers: dict[str, object], locked: bool | str = True) -> str:
    first = missing_python(locked) if isinstance(locked, str) else before_install(locked)
    lines = [
        "",
        f"Created {answers.get('project_slug', root.name)}.",
        *first,
        "Then:" if first else "Next steps:",
        f"  cd {root}",
        *(["  make lock      # uv.lock, on the Python you installed"] if isinstance(locked, str) else []),
        *(["  make lock      # uv.lock: the engine from that index, by hash"] if first and locked is False else []),
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
    locked: bool | str = False
    try:
        locked = lock_dependencies(root)
    except Exception as exc:  # noqa: BLE001
        warn(f"could not write uv.lock ({exc!r}); `uv lock` in the project does it")
    if os.environ.get("SQS_WORKER_TEMPLATE_QUIET") == "1":
        return 0  # a render `make upgrade` asked cruft for, in a directory of its own: no next steps
    try:
        print(next_steps(root, answers, locked))
    except Exception as exc:  # noqa: BLE001
        warn(f"could not print next steps ({exc!r})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
