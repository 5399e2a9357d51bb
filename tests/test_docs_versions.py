"""scripts/docs_versions.py, the published docs site: one copy per engine release, each built
from its own tag's tree, the checkout beside them while its version is unreleased, and what
Material's version selector reads (versions.json), on a repository made here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

from scripts import docs_versions

SCRIPT = ROOT / "scripts" / "docs_versions.py"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def new_repository(path: Path) -> Path:
    path.mkdir()
    git(path, "init", "--quiet", "--initial-branch=main")
    for key, value in (("user.name", "Docs"), ("user.email", "docs@example.com"), ("commit.gpgsign", "false")):
        git(path, "config", key, value)
    git(path, "config", "tag.gpgsign", "false")
    return path


def release(repo: Path, version: str, page: str | None, tag: bool = True, commit: bool = True) -> None:
    """engine/pyproject.toml at `version`, and the site's one page saying `page` (no site at
    all when None); committed and tagged engine-v<version> as asked."""
    (repo / "engine").mkdir(exist_ok=True)
    (repo / "engine" / "pyproject.toml").write_text(f'[project]\nname = "engine"\nversion = "{version}"\n')
    if page is not None:
        (repo / "docs").mkdir(exist_ok=True)
        (repo / "mkdocs.yml").write_text("site_name: Versioned\nnav:\n  - Home: index.md\n")
        (repo / "docs" / "index.md").write_text(f"# Home\n\n{page}\n")
    if commit:
        git(repo, "add", "--all")
        git(repo, "commit", "--quiet", "-m", f"version {version}")
    if tag:  # one annotated tag, the others lightweight: the script reads both
        git(repo, "tag", *(["-a", "-m", version] if version == "0.2.0" else []), f"engine-v{version}")


def run_script(repo: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(repo)], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def page_text(site: Path, version: str) -> str:
    return (site / version / "index.html").read_text()


def test_each_release_is_its_own_tag_s_site_and_the_checkout_is_the_unreleased_one(tmp_path: Path) -> None:
    repo = new_repository(tmp_path / "repo")
    release(repo, "0.0.1", page=None)  # a release from before the site: no mkdocs.yml
    release(repo, "0.1.0", "The page of the first release.")
    release(repo, "0.2.0", "The page of the second release.")
    release(repo, "0.3.0", "The page as committed after the second release.", tag=False)
    # The checkout as it stands, an edit not yet committed included, is the unreleased version.
    (repo / "docs" / "index.md").write_text("# Home\n\nThe page being written.\n")
    status = git(repo, "status", "--porcelain")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    done = run_script(repo, cwd=elsewhere)
    assert done.returncode == 0, done.stdout + done.stderr
    site = repo / "site"
    assert "The page of the first release." in page_text(site, "0.1.0")
    assert "The page of the second release." in page_text(site, "0.2.0")
    assert "The page being written." in page_text(site, "0.3.0")
    for version, other in (("0.1.0", "second release"), ("0.2.0", "first release"), ("0.3.0", "release.")):
        assert other not in page_text(site, version), version
    assert json.loads((site / "versions.json").read_text()) == [
        {"version": "0.3.0", "title": "0.3.0 (unreleased)", "aliases": []},
        {"version": "0.2.0", "title": "0.2.0", "aliases": ["latest"]},
        {"version": "0.1.0", "title": "0.1.0", "aliases": []},
    ]
    assert "The page of the second release." in page_text(site, "latest")
    index = (site / "index.html").read_text()
    assert re.search(r'<meta http-equiv="refresh" content="0; url=latest/">', index), index
    assert 'window.location.replace("latest/"' in index
    assert not (site / "0.0.1").exists()
    skipped = [line for line in done.stdout.splitlines() if "engine-v0.0.1" in line]
    assert skipped == ["engine-v0.0.1: skipped, its tree has no mkdocs.yml"], done.stdout
    # The repository is left as it was: its working tree (site/ aside), index and worktrees.
    assert git(repo, "status", "--porcelain", "--", ":!site") == status
    assert len(git(repo, "worktree", "list").splitlines()) == 1


def test_with_no_release_the_checkout_alone_is_built_and_is_latest(tmp_path: Path) -> None:
    repo = new_repository(tmp_path / "repo")
    release(repo, "0.1.0", "Nothing released yet.", tag=False)
    (repo / "site" / "stale").mkdir(parents=True)  # what an earlier `make docs` left

    done = run_script(repo, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    site = repo / "site"
    assert sorted(path.name for path in site.iterdir()) == ["0.1.0", "index.html", "latest", "versions.json"]
    assert json.loads((site / "versions.json").read_text()) == [
        {"version": "0.1.0", "title": "0.1.0 (unreleased)", "aliases": ["latest"]}
    ]
    assert "Nothing released yet." in page_text(site, "latest")
    assert "no engine-v<version> tag with a site" in done.stdout

    # Once a tag names the checkout's version, that tag is the one copy of it.
    git(repo, "tag", "engine-v0.1.0")
    done = run_script(repo, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((site / "versions.json").read_text()) == [
        {"version": "0.1.0", "title": "0.1.0", "aliases": ["latest"]}
    ]


def test_versions_are_ordered_as_releases_are_numbered() -> None:
    versions = ["0.9.1", "0.10.0", "1.0.0rc1", "1.0.0", "1.0.0a2", "1.0.0b1", "0.2", "unnumbered"]
    assert sorted(versions, key=docs_versions.version_key) == [
        "unnumbered",
        "0.2",
        "0.9.1",
        "0.10.0",
        "1.0.0a2",
        "1.0.0b1",
        "1.0.0rc1",
        "1.0.0",
    ]
