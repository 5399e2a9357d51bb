"""How a real user gets the engine and its fixes, proven offline with a `file://` clone of
this repository standing in for its git host:

- baked from a git URL, the service installs the engine from that same URL at the commit
  it was baked from (uv.lock records it), and passes its tests;
- an owner edits `handlers.py`; the template moves on (a new engine version and a template
  change); `cruft update` + `make lock` bring both in, the edit survives, the tests pass.

Both work from this repository's last commit (a clean clone, as CI has it)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from conftest import ROOT, run

pytestmark = pytest.mark.xdist_group("upgrade")


def git(cwd: Path, *args: str) -> str:
    result = run(["git", *args], cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def template_clone(tmp_path: Path) -> tuple[Path, str]:
    """A clone of this repository's HEAD, as a user's git host would serve it."""
    repo = tmp_path / "template.git"
    git(tmp_path, "clone", "--quiet", str(ROOT), str(repo))
    git(repo, "config", "user.email", "test@example.com")
    git(repo, "config", "user.name", "Template Maintainer")
    return repo, git(repo, "rev-parse", "HEAD")


def engine_source(project: Path) -> dict[str, str]:
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    return dict(pyproject["tool"]["uv"]["sources"]["sqs-worker-engine"])


def test_a_git_bake_installs_the_engine_from_the_same_url_at_the_same_commit(tmp_path: Path) -> None:
    repo, commit = template_clone(tmp_path)
    url = repo.as_uri()
    baked = run(
        ["cookiecutter", "--no-input", "-o", str(tmp_path / "out"), url],
        tmp_path,
        SQS_WORKER_TEMPLATE_LOCK="1",
        COOKIECUTTER_CONFIG=str(write_config(tmp_path)),
    )
    assert baked.returncode == 0, baked.stdout + baked.stderr
    project = tmp_path / "out" / "orders-worker"
    assert engine_source(project) == {"git": url, "subdirectory": "engine", "rev": commit}
    lock = (project / "uv.lock").read_text()
    assert f"{url}?subdirectory=engine&rev={commit}#{commit}" in lock, "uv.lock pins the engine's exact commit"
    state = json.loads((project / ".cruft.json").read_text())
    assert (state["template"], state["commit"]) == (url, commit), "the bake records where it came from"

    checks = run(["make", "lint", "typecheck", "test-unit"], project, timeout=900)
    assert checks.returncode == 0, (checks.stdout + checks.stderr)[-4000:]


def test_an_owners_edit_survives_an_engine_upgrade_with_cruft(tmp_path: Path) -> None:
    repo, old = template_clone(tmp_path)
    url = repo.as_uri()
    created = run(["cruft", "create", "--no-input", "--output-dir", str(tmp_path / "out"), url], tmp_path)
    assert created.returncode == 0, created.stdout + created.stderr
    project = tmp_path / "out" / "orders-worker"
    assert engine_source(project)["rev"] == old

    # The owner's edit: a new field in the payload, used by the handler, with its own test.
    handlers = project / "src" / "orders_worker" / "handlers.py"
    handlers.write_text(
        handlers.read_text().replace(
            "    fail: bool = False",
            '    priority: str = "normal"  # added by the owner\n    fail: bool = False',
        )
    )
    tests = project / "tests" / "test_handlers.py"
    tests.write_text(
        tests.read_text()
        + "\n\ndef test_the_owners_priority_field_is_accepted() -> None:\n"
        + '    assert run_handler(router, QUEUE, {"task_id": "p-1", "priority": "high"}).outcome == "success"\n'
    )
    for step in (
        ["init", "--quiet"],
        ["add", "-A"],
        ["-c", "user.email=o@example.com", "-c", "user.name=Owner", "commit", "--quiet", "-m", "the owner's service"],
    ):
        git(project, *step)

    # The template moves on: a new engine version, and a change to a generated file.
    pyproject = repo / "engine" / "pyproject.toml"
    old_version = tomllib.loads(pyproject.read_text())["project"]["version"]
    new_version = old_version + ".post1"
    pyproject.write_text(pyproject.read_text().replace(f'version = "{old_version}"', f'version = "{new_version}"', 1))
    gitignore = repo / "{{cookiecutter.project_slug}}" / ".gitignore"
    gitignore.write_text(gitignore.read_text() + "# a template change\n")
    git(repo, "commit", "--quiet", "-am", "engine fix")
    new = git(repo, "rev-parse", "HEAD")

    updated = run(["cruft", "update", "--skip-apply-ask", "--checkout", new], project, timeout=900)
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert engine_source(project)["rev"] == new, "the service now installs the engine at the new commit"
    assert f'"sqs-worker-engine=={new_version}"' in (project / "pyproject.toml").read_text()
    assert "# a template change" in (project / ".gitignore").read_text()
    assert 'priority: str = "normal"  # added by the owner' in handlers.read_text(), "the owner's edit survives"
    assert "test_the_owners_priority_field_is_accepted" in tests.read_text()
    assert json.loads((project / ".cruft.json").read_text())["commit"] == new

    relock = run(["make", "lock"], project, timeout=600)
    assert relock.returncode == 0, relock.stdout + relock.stderr
    lock = (project / "uv.lock").read_text()
    assert f"rev={new}#{new}" in lock and f'version = "{new_version}"' in lock
    checks = run(["make", "lint", "typecheck", "test-unit"], project, timeout=900)
    assert checks.returncode == 0, (checks.stdout + checks.stderr)[-4000:]


def write_config(tmp_path: Path) -> Path:
    """Cookiecutter keeps its clones and replays here, not in the user's home."""
    config = tmp_path / "cookiecutter-config.yaml"
    config.write_text(
        f"replay_dir: {json.dumps(str(tmp_path / 'replay'))}\ncookiecutters_dir: {json.dumps(str(tmp_path / 'clones'))}\n"
    )
    return config
