"""How a real user gets the engine and the template's changes, proven offline with a
`file://` clone of this repository standing in for its git host:

- baked from a git URL with `engine_source=git`, the service installs the engine from that
  same URL at the commit it was baked from (uv.lock records it), and passes its tests;
- an owner edits `handlers.py`; the template moves on (a new engine version and a template
  change); `make upgrade` (cruft update, re-lock, the tests) brings both in, the edit
  survives;
- an owner's edit of a generated file that the template changes too stops `make upgrade`
  before it re-locks, naming the file: as conflict markers (the project's history has the
  file as generated, so git merges three ways) or as a `.rej` file (it does not).

All work from this repository's last commit (a clean clone, as CI has it)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from conftest import ROOT, run, seed_mypy_cache

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
        ["cookiecutter", "--no-input", "-o", str(tmp_path / "out"), url, "engine_source=git"],
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

    seed_mypy_cache(project)
    checks = run(["make", "lint", "typecheck", "test-unit"], project, timeout=900)
    assert checks.returncode == 0, (checks.stdout + checks.stderr)[-4000:]


def owners_service(tmp_path: Path, url: str) -> Path:
    """`cruft create` from the template's URL, with the engine from git (no index serves this
    checkout's engine version)."""
    created = run(
        ["cruft", "create", "--no-input", "--output-dir", str(tmp_path / "out"), "--extra-context"]
        + ['{"engine_source": "git"}', url],
        tmp_path,
    )
    assert created.returncode == 0, created.stdout + created.stderr
    return tmp_path / "out" / "orders-worker"


def commit_all(project: Path, message: str) -> None:
    if not (project / ".git").exists():
        git(project, "init", "--quiet")
    git(project, "add", "-A")
    git(project, "-c", "user.email=o@example.com", "-c", "user.name=Owner", "commit", "--quiet", "-m", message)


def move_the_template_on(repo: Path, gitignore: tuple[str, str] | None = None) -> tuple[str, str]:
    """A new engine version and a change to a generated file (.gitignore: a line appended, or
    `gitignore` = (old, new) replaced); returns the new commit and engine version."""
    pyproject = repo / "engine" / "pyproject.toml"
    old_version = tomllib.loads(pyproject.read_text())["project"]["version"]
    new_version = old_version + ".post1"
    pyproject.write_text(pyproject.read_text().replace(f'version = "{old_version}"', f'version = "{new_version}"', 1))
    path = repo / "{{cookiecutter.project_slug}}" / ".gitignore"
    text = path.read_text()
    path.write_text(text.replace(*gitignore, 1) if gitignore else text + "# a template change\n")
    git(repo, "commit", "--quiet", "-am", "engine fix")
    return git(repo, "rev-parse", "HEAD"), new_version


def test_make_upgrade_brings_in_an_engine_upgrade_and_keeps_the_owners_edit(
    tmp_path: Path, localstack_endpoint: str
) -> None:
    repo, old = template_clone(tmp_path)
    project = owners_service(tmp_path, repo.as_uri())
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
    commit_all(project, "the owner's service")

    new, new_version = move_the_template_on(repo)
    seed_mypy_cache(project)
    upgraded = run(["make", "upgrade"], project, timeout=1500, AWS_ENDPOINT_URL=localstack_endpoint)
    output = upgraded.stdout + upgraded.stderr
    assert upgraded.returncode == 0, output[-4000:]
    assert "test_the_owners_priority_field_is_accepted PASSED" in output or " passed" in output, output[-2000:]
    assert engine_source(project)["rev"] == new, "the service now installs the engine at the new commit"
    assert f'"sqs-worker-engine=={new_version}"' in (project / "pyproject.toml").read_text()
    assert "# a template change" in (project / ".gitignore").read_text()
    assert 'priority: str = "normal"  # added by the owner' in handlers.read_text(), "the owner's edit survives"
    assert "test_the_owners_priority_field_is_accepted" in tests.read_text()
    assert json.loads((project / ".cruft.json").read_text())["commit"] == new
    assert f"The template's changes from {old} to {new} are in" in output, output[-3000:]
    # cruft rewrote .cruft.json in its own key order (79 changed lines for a 2-line template
    # change), and appended pyproject's skip list to it at each update: the commit moves alone.
    changed = run(["git", "diff", "--unified=0", ".cruft.json"], project).stdout
    moved = [line for line in changed.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert len(moved) == 4 and all('commit"' in line for line in moved), changed
    lock = (project / "uv.lock").read_text()
    assert f"rev={new}#{new}" in lock and f'version = "{new_version}"' in lock, "re-locked"


@pytest.mark.parametrize("history", ["as-generated", "edited-from-the-start"])
def test_make_upgrade_stops_on_a_conflicting_edit_naming_the_file(tmp_path: Path, history: str) -> None:
    repo, old = template_clone(tmp_path)
    project = owners_service(tmp_path, repo.as_uri())
    gitignore = project / ".gitignore"
    if history == "as-generated":
        commit_all(project, "as generated")  # git has the file as generated: a three-way merge
    gitignore.write_text(gitignore.read_text().replace(".env\n", ".env*  # the owner's\n", 1))
    commit_all(project, "the owner's ignores")
    lock_before = (project / "uv.lock").read_text()

    move_the_template_on(repo, (".env\n", ".env\n.env.local\n"))
    upgraded = run(["make", "upgrade"], project, timeout=900)
    output = upgraded.stdout + upgraded.stderr
    assert upgraded.returncode != 0, output[-3000:]
    assert "The template's update conflicts with your changes in:\n  .gitignore\n" in upgraded.stdout, output[-3000:]
    assert "make lock test" in upgraded.stdout
    # One clear thing per outcome: before, cruft's own "Good work! Project's cruft has been
    # updated" came right before the conflict, and (without the file in git's history) git's
    # "repository lacks the necessary blob to perform 3-way merge".
    for noise in ("Good work", "lacks the necessary blob", "Next steps:"):
        assert noise not in output, output[-3000:]
    assert (project / "uv.lock").read_text() == lock_before, "stopped before re-locking"
    if history == "as-generated":
        assert "<<<<<<<" in gitignore.read_text(), "git's conflict markers show both sides"
    else:
        assert (project / ".gitignore.rej").is_file(), "the hunk that did not apply"
    assert engine_source(project)["rev"] != old, "the rest of the update is applied"


def write_config(tmp_path: Path) -> Path:
    """Cookiecutter keeps its clones and replays here, not in the user's home."""
    config = tmp_path / "cookiecutter-config.yaml"
    config.write_text(
        f"replay_dir: {json.dumps(str(tmp_path / 'replay'))}\ncookiecutters_dir: {json.dumps(str(tmp_path / 'clones'))}\n"
    )
    return config
