"""The docs site as it is published: one copy per release of the engine, with Material's
version selector (mkdocs.yml's `extra: version: provider: mike`), built without mike and
without a gh-pages branch, so that the docs workflow can keep publishing one Pages artifact.

Into OUT (the repository's site/ by default, emptied first):

- OUT/<version>/ for each tag `engine-v<version>`, built strictly from that tag's own tree
  (read into a temporary folder through a temporary index: the repository's checkout, index
  and worktree list are left as they are); a tag whose tree has no mkdocs.yml is skipped,
  and named in one printed line;
- OUT/<version>/ for the checkout as it is, at the version of engine/pyproject.toml, when no
  tag names that version: titled "<version> (unreleased)";
- OUT/versions.json, what the version selector reads (the list mike writes: version, title,
  aliases, newest first), the alias `latest` on the newest release (on the checkout's
  version when there is no release yet);
- OUT/latest/, a copy of that version, and OUT/index.html, a redirect to latest/.

    python scripts/docs_versions.py [REPOSITORY] [--out OUT]

REPOSITORY defaults to the repository this script is in. Needs git, and mkdocs with the
site's theme and plugins in the Python that runs it. Exits non-zero when a build fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TAG_PREFIX = "engine-v"
LATEST = "latest"
REDIRECT = """<!DOCTYPE html>
<html>
  <head>
    <meta charset="utf-8">
    <title>Redirecting to {href}</title>
    <meta http-equiv="refresh" content="0; url={href}">
    <link rel="canonical" href="{href}">
    <script>window.location.replace("{href}" + window.location.search + window.location.hash);</script>
  </head>
  <body>
    Redirecting to <a href="{href}">{href}</a>.
  </body>
</html>
"""


@dataclass(frozen=True)
class Version:
    version: str
    title: str
    released: bool


def version_key(version: str) -> tuple[int, tuple[int, ...], tuple[int, int], str]:
    """Orders versions as releases are numbered: 0.10.0 after 0.9.1, 1.0.0rc1 before 1.0.0.
    A version of another shape sorts below every numbered one."""
    found = re.fullmatch(r"(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?", version)
    if not found:
        return (0, (), (0, 0), version)
    release = tuple(int(part) for part in found.group(1).split("."))
    while len(release) > 1 and release[-1] == 0:  # 1.0 and 1.0.0 are one version
        release = release[:-1]
    pre = ({"a": 0, "b": 1, "rc": 2}[found.group(2)], int(found.group(3))) if found.group(2) else (3, 0)
    return (1, release, pre, version)


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env).stdout


def release_tags(repo: Path) -> dict[str, str]:
    """{version: tag} for every `engine-v<version>` tag of the repository."""
    tags = git(repo, "tag", "--list", f"{TAG_PREFIX}*").split()
    return {tag.removeprefix(TAG_PREFIX): tag for tag in tags if tag != TAG_PREFIX}


def checkout_version(repo: Path) -> str:
    with (repo / "engine" / "pyproject.toml").open("rb") as file:
        return str(tomllib.load(file)["project"]["version"])


def has_mkdocs_yml(repo: Path, tag: str) -> bool:
    found = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "-e", f"{tag}^{{commit}}:mkdocs.yml"], check=False, capture_output=True
    )
    return found.returncode == 0


def export_tree(repo: Path, tag: str, into: Path) -> None:
    """The files of the tag's commit, written under `into` as a checkout writes them (unlike
    `git archive`, no export-ignore attribute leaves a file out)."""
    env = {**os.environ, "GIT_INDEX_FILE": str(into.parent / "index")}
    git(repo, "read-tree", f"{tag}^{{commit}}", env=env)
    git(repo, "checkout-index", "--all", f"--prefix={into}/", env=env)


def build(tree: Path, into: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--quiet",
            "-f",
            str(tree / "mkdocs.yml"),
            "-d",
            str(into),
        ],
        check=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def versions_json(built: list[Version], latest: str) -> list[dict[str, object]]:
    ordered = sorted(built, key=lambda v: version_key(v.version), reverse=True)
    return [
        {"version": v.version, "title": v.title, "aliases": [LATEST] if v.version == latest else []} for v in ordered
    ]


def build_site(repo: Path, out: Path) -> list[Version]:
    """Writes the versioned site into `out` (emptied first); returns the versions built."""
    if out == repo or (out / ".git").exists() or repo.is_relative_to(out):
        raise SystemExit(f"refusing to empty {out}: it holds the repository")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    tags, current = release_tags(repo), checkout_version(repo)
    built: list[Version] = []
    for version in sorted(tags, key=version_key, reverse=True):
        tag = tags[version]
        if not has_mkdocs_yml(repo, tag):
            print(f"{tag}: skipped, its tree has no mkdocs.yml")
            continue
        with tempfile.TemporaryDirectory(prefix="docs-versions-") as tmp:
            tree = Path(tmp) / "tree"
            export_tree(repo, tag, tree)
            build(tree, out / version)
        built.append(Version(version, version, released=True))
        print(f"{tag}: built into {version}/")
    if current in tags:
        print(f"the checkout's version {current} is released as {tags[current]}: published from that tag")
    else:
        build(repo, out / current)
        built.append(Version(current, f"{current} (unreleased)", released=False))
        print(f"the checkout: built into {current}/ as {current} (unreleased)")
    if not built:
        raise SystemExit("no version built")
    releases = [v for v in built if v.released]
    newest = max(releases or built, key=lambda v: version_key(v.version))
    if not releases:
        print(f"no {TAG_PREFIX}<version> tag with a site: the checkout's {current} alone, and {LATEST}/")
    listed = versions_json(built, newest.version)
    (out / "versions.json").write_text(json.dumps(listed, indent=2) + "\n")
    shutil.copytree(out / newest.version, out / LATEST)
    (out / "index.html").write_text(REDIRECT.format(href=f"{LATEST}/"))
    print(f"{LATEST}/ is {newest.title}; versions.json lists {', '.join(str(v['version']) for v in listed)}")
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "repository", nargs="?", type=Path, default=ROOT, help="the git repository (default: %(default)s)"
    )
    parser.add_argument("--out", type=Path, help="where the site is written, emptied first (default: REPOSITORY/site)")
    args = parser.parse_args(argv)
    try:
        repo = Path(git(args.repository.resolve(), "rev-parse", "--show-toplevel").strip())
        build_site(repo, (args.out or repo / "site").resolve())
    except subprocess.CalledProcessError as failed:
        print(f"failed ({failed.returncode}): {' '.join(map(str, failed.cmd))}\n{failed.stderr or ''}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
