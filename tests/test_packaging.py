"""Where a service gets its engine, and how the engine is released.

- `engine_source_for` (sqs_worker_template_jinja/source.py): git by default, the index on request, this
  checkout's engine/ by path when rendered in place (this suite and `make demo`).
- The index route, end to end and offline from any real index: the engine's wheel built here
  and served from a local simple index, a service baked for the index, locked, installed and
  tested from it.
- The git route's credentials: the Dockerfile's BuildKit secret, CI's token, one credential
  helper that git really runs; the Makefile refuses sources an image build cannot reach.
- The workflows: the engine's release (.github/workflows/release-engine.yml) and the
  service's weekly template update, validated and held to the pins and versions used
  elsewhere (zizmor scans both in test_scanners.py).
"""

from __future__ import annotations

import hashlib
import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT, bake, run, seed_mypy_cache
from matrix import COOKIECUTTER
from validators import dockerfile_instructions, jsonschema_cli_problems, load_workflow

from sqs_worker_template_jinja import source as template_source
from sqs_worker_template_jinja.source import (
    ENGINE_INDEX,
    GIT_CREDENTIAL_HELPER,
    INDEX_VARIABLES,
    engine_source_for,
    web_url,
)

ENGINE_VERSION = tomllib.loads((ROOT / "engine" / "pyproject.toml").read_text())["project"]["version"]
SECRET_ID = "template_repo_token"
TOKEN_VARIABLE = "TEMPLATE_REPO_TOKEN"
SHA_PIN = re.compile(r"uses: ([\w.-]+/[\w./-]+)@([0-9a-f]{40}) # (v\d+\.\d+\.\d+)$", re.MULTILINE)


# --- where the engine comes from ---------------------------------------------------------------

ENGINE_DIR = Path("/checkout/engine")
ORIGIN, COMMIT = "https://git.example.com/org/sqs-worker-template.git", "a" * 40
GIT = {"git": ORIGIN, "subdirectory": "engine", "rev": COMMIT}
INDEX_URL = "https://packages.example.com/simple/"
INDEX = {"index": ENGINE_INDEX}


@pytest.mark.parametrize(
    ("answer", "override", "template", "expected"),
    [
        ("index", "", "gh:org/sqs-worker-template", INDEX),
        ("git", "", "gh:org/sqs-worker-template", GIT),
        ("git", "", None, GIT),  # `cruft create` clones and gives no _template
        ("index", "", str(ROOT), {"path": str(ENGINE_DIR)}),
        ("git", "", str(ROOT), {"path": str(ENGINE_DIR)}),
        ("index", "path", "gh:org/sqs-worker-template", {"path": str(ENGINE_DIR)}),
        ("index", "git", "gh:org/sqs-worker-template", GIT),
        ("git", "index", str(ROOT), INDEX),
    ],
    ids=["index", "git", "git-cruft", "in-place", "in-place-git", "override-path", "override-git", "override-index"],
)
def test_the_engine_comes_from_where_the_answer_says_unless_rendered_in_place(
    answer: str, override: str, template: str | None, expected: dict[str, str]
) -> None:
    assert engine_source_for(answer, override, template, ORIGIN, COMMIT, ENGINE_DIR, INDEX_URL) == expected


@pytest.mark.parametrize(("answer", "override"), [("index", ""), ("git", "index")], ids=["index", "override-index"])
def test_the_index_route_without_a_url_is_the_version_pin_alone(answer: str, override: str) -> None:
    """No source at all: the index is named when the service is locked, and the generated
    Makefile refuses to lock until it is (test_the_makefile_refuses_to_resolve_...)."""
    assert engine_source_for(answer, override, "gh:org/sqs-worker-template", ORIGIN, COMMIT, ENGINE_DIR, "") == {}


@pytest.mark.parametrize(
    ("answer", "override", "origin", "index_url", "fragment"),
    [
        ("pypi", "", ORIGIN, INDEX_URL, "engine_source must be one of git, index, got 'pypi'"),
        ("index", "wheel", ORIGIN, INDEX_URL, "_engine_source must be one of path, git, index"),
        ("git", "", None, INDEX_URL, "engine_source=git needs the template to be a git clone"),
    ],
)
def test_an_engine_source_that_cannot_be_honoured_is_refused(
    answer: str, override: str, origin: str | None, index_url: str, fragment: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        engine_source_for(answer, override, "gh:org/t", origin, COMMIT, ENGINE_DIR, index_url)


@pytest.mark.parametrize(
    ("origin", "page"),
    [
        (
            "https://github.com/acme/sqs-worker-template.git",
            f"https://github.com/acme/sqs-worker-template/tree/{COMMIT}/engine",
        ),
        (
            "git@github.com:acme/sqs-worker-template.git",
            f"https://github.com/acme/sqs-worker-template/tree/{COMMIT}/engine",
        ),
        ("ssh://git@git.example.com:2222/team/tpl", f"https://git.example.com/team/tpl/tree/{COMMIT}/engine"),
        ("file:///srv/git/sqs-worker-template", None),
        ("/home/me/sqs-worker-template", None),
    ],
)
def test_the_readme_links_the_engine_where_the_service_was_baked_from(origin: str, page: str | None) -> None:
    """Not a placeholder: the repository the bake came from, at its commit; a local
    checkout has no page, and the README names its path instead."""
    assert web_url(origin, COMMIT) == page


def test_the_readme_links_the_scaling_doc_where_the_service_was_baked_from() -> None:
    """The README's link to docs/scaling.md: the repository the bake came from, at its commit."""
    page = web_url("https://github.com/acme/tpl.git", COMMIT, "docs/scaling.md", "blob")
    assert page == f"https://github.com/acme/tpl/blob/{COMMIT}/docs/scaling.md"


@pytest.mark.parametrize(
    ("origin", "labelled", "plain"),
    [
        (
            "https://github.com/acme/tpl.git",
            f"[Long jobs](https://github.com/acme/tpl/blob/{COMMIT}/docs/service/long-jobs.md#on-ecs)",
            (
                f"[docs/service/long-jobs.md#on-ecs](https://github.com/acme/tpl/blob/{COMMIT}/docs/service/long-jobs.md#on-ecs)"
                " in the template's repository"
            ),
        ),
        (
            "/home/me/tpl",
            "Long jobs (`docs/service/long-jobs.md#on-ecs`)",
            "`docs/service/long-jobs.md#on-ecs` of the template checkout `/home/me/tpl`",
        ),
    ],
)
def test_the_readme_links_a_docs_site_page_by_its_title_and_section(
    monkeypatch: pytest.MonkeyPatch, origin: str, labelled: str, plain: str
) -> None:
    """The README's "Read on" names each page by its title, at the commit baked from (a local
    bake: its path, the checkout named once by a link without a label); a link may lead to a
    section of the page."""
    monkeypatch.setattr(template_source, "template_origin", lambda cookiecutter: origin)
    monkeypatch.setattr(template_source, "git", lambda *args: COMMIT)
    doc, anchor = "docs/service/long-jobs.md", "on-ecs"
    assert template_source.template_doc_link({}, doc, "Long jobs", anchor) == labelled
    assert template_source.template_doc_link({}, doc, anchor=anchor) == plain


# --- the index route, end to end ---------------------------------------------------------------


def local_index(dist: Path, root: Path) -> str:
    """A PEP 503 simple index in a directory, serving what `dist` holds: what PyPI,
    CodeArtifact or Artifactory serve, with nothing listening. Returns its file:// URL."""
    files = root / "files"
    files.mkdir(parents=True)
    links = []
    for built in sorted(dist.iterdir()):
        (files / built.name).write_bytes(built.read_bytes())
        digest = hashlib.sha256(built.read_bytes()).hexdigest()
        links.append(f'<a href="../../files/{built.name}#sha256={digest}">{built.name}</a>')
    project = root / "simple" / "sqs-worker-engine"
    project.mkdir(parents=True)
    (project / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    (root / "simple" / "index.html").write_text(
        '<!DOCTYPE html><html><body><a href="sqs-worker-engine/">sqs-worker-engine</a></body></html>\n'
    )
    return (root / "simple").as_uri()


@pytest.fixture(scope="module")
def engine_index(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The engine's wheel and sdist, built from this checkout, in a simple index of their own."""
    root = tmp_path_factory.mktemp("engine-index")
    built = run(["uv", "build", "--quiet", "--out-dir", str(root / "dist")], ROOT / "engine", timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    return local_index(root / "dist", root / "index")


def assert_locked_from(project: Path, index: str) -> None:
    lock = tomllib.loads((project / "uv.lock").read_text())
    (engine,) = [p for p in lock["package"] if p["name"] == "sqs-worker-engine"]
    assert engine["version"] == ENGINE_VERSION
    assert engine["source"] == {"registry": index.removeprefix("file://")}, engine["source"]
    assert engine["wheels"] and engine["wheels"][0]["hash"].startswith("sha256:"), "the lock pins the wheel by hash"


def assert_installed_from_an_index(project: Path) -> None:
    installed = run([".venv/bin/python", "-c", "import sqs_worker_engine; print(sqs_worker_engine.__file__)"], project)
    assert installed.stdout.startswith(str(project / ".venv")), installed.stdout + installed.stderr
    dist_info = next((project / ".venv").glob("lib/python*/site-packages/sqs_worker_engine-*.dist-info"))
    assert not (dist_info / "direct_url.json").exists(), "installed from the index, not from a path or git"


@pytest.fixture
def no_index_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """No index named by the environment the suite runs in: each test names its own."""
    for name in INDEX_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def engine_pin(pyproject: dict[str, Any]) -> str:
    """The version specifier the service's engine dependency pins (its extras aside)."""
    (pin,) = [d for d in pyproject["project"]["dependencies"] if re.match(r"sqs-worker-engine\b", d)]
    return re.sub(r"^sqs-worker-engine(\[[a-z0-9,]*\])?", "", pin)


@pytest.mark.xdist_group("index-route")
@pytest.mark.usefixtures("no_index_named")
def test_a_service_installs_and_tests_the_engine_from_a_package_index(
    tmp_path: Path, engine_index: str, localstack_endpoint: str
) -> None:
    """The route as documented before the bake could name its index: `engine_source=index`
    alone pins the version, and the owner names the index when locking (UV_INDEX)."""
    env = {"AWS_ENDPOINT_URL": localstack_endpoint}
    project = bake(tmp_path / "out", _engine_source="index", engine_source="index")
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    assert engine_pin(pyproject) == f"=={ENGINE_VERSION}"
    assert "sources" not in pyproject["tool"]["uv"] and "index" not in pyproject["tool"]["uv"], "the pin alone"

    # Never resolved from the default index, where the name could be anyone's.
    refused = run(["make", "lock"], project, timeout=600, **env)
    assert refused.returncode != 0, refused.stdout + refused.stderr
    assert "No index is named for sqs-worker-engine" in refused.stdout, refused.stdout + refused.stderr
    assert "UV_INDEX=engine=" in refused.stdout
    assert not (project / "uv.lock").exists()

    locked = run(["make", "lock"], project, timeout=600, **{**env, "UV_INDEX": f"engine={engine_index}"})
    assert locked.returncode == 0, locked.stdout + locked.stderr
    assert_locked_from(project, engine_index)

    # From the lock, which records where the engine came from, without the index named again.
    seed_mypy_cache(project)
    checks = run(["make", "test"], project, timeout=1200, **env)
    assert checks.returncode == 0, (checks.stdout + checks.stderr)[-4000:]
    assert " passed" in checks.stdout and " failed" not in checks.stdout
    assert_installed_from_an_index(project)


@pytest.mark.xdist_group("index-route")
@pytest.mark.usefixtures("no_index_named")
def test_a_service_baked_with_its_index_installs_the_engine_from_it_alone(tmp_path: Path, engine_index: str) -> None:
    """The index the bake is given, and the only one the engine may come from (uv's explicit
    index); everything else from the default index."""
    project = bake(tmp_path / "out", _engine_source="index", engine_source="index", engine_index_url=engine_index)
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    assert engine_pin(pyproject) == f"=={ENGINE_VERSION}"
    assert pyproject["tool"]["uv"]["index"] == [{"name": "engine", "url": engine_index, "explicit": True}]
    assert pyproject["tool"]["uv"]["sources"] == {"sqs-worker-engine": {"index": "engine"}}
    assert "engine-index" not in (project / "Makefile").read_text(), "named in pyproject.toml: nothing to guard"

    for target in ("lock", "install"):
        done = run(["make", target], project, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
    assert_locked_from(project, engine_index)
    assert_installed_from_an_index(project)
    # An index in a folder on this machine serves `make install`, not an image build.
    guard = run(["make", "engine-source"], project)
    assert guard.returncode != 0 and "a container build cannot reach" in guard.stdout, guard.stdout + guard.stderr


# --- the git route: credentials for the image build and CI ------------------------------------


@pytest.fixture(scope="module")
def bakes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("engine-sources")
    return {
        "index": bake(out / "index", engine_source="index", engine_index_url=INDEX_URL),
        "git": bake(out / "git", engine_source="git"),
        "unnamed": bake(out / "unnamed", engine_source="index", _engine_source="index"),
    }


def dependency_runs(project: Path) -> list[str]:
    return [args for ins, args in dockerfile_instructions((project / "Dockerfile").read_text()) if "uv sync" in args]


def test_the_git_route_mounts_the_token_as_a_buildkit_secret(bakes: dict[str, Path]) -> None:
    runs = dependency_runs(bakes["git"])
    assert len(runs) == 2, runs
    for args in runs:
        assert args.startswith(f"--mount=type=secret,id={SECRET_ID} "), args
        assert f"/run/secrets/{SECRET_ID}" in args and f"export {TOKEN_VARIABLE}" in args
    dockerfile = (bakes["git"] / "Dockerfile").read_text()
    assert "ARG" not in dockerfile.split("FROM")[1], "a token passed as a build argument would stay in the image"
    for args in dependency_runs(bakes["index"]):
        assert "--mount=type=secret" not in args, "the index route needs no secret"

    makefile = (bakes["git"] / "Makefile").read_text()
    assert f"--secret id={SECRET_ID}$(comma)env={TOKEN_VARIABLE}" in makefile
    assert "--secret" not in (bakes["index"] / "Makefile").read_text()


def helper_from_dockerfile(project: Path) -> dict[str, str]:
    for ins, args in dockerfile_instructions((project / "Dockerfile").read_text()):
        if ins == "ENV" and "GIT_CONFIG_COUNT" in args:
            return dict(word.split("=", 1) for word in shlex.split(args))
    raise AssertionError("no credential helper in the Dockerfile")


def git_credential(env: dict[str, str], tmp_path: Path) -> str:
    """What git's credential machinery answers for an https host, with only `env`'s config."""
    result = subprocess.run(
        ["git", "credential", "fill"],
        input="protocol=https\nhost=git.example.com\npath=org/sqs-worker-template.git\n\n",
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "", **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return result.stdout


def test_the_git_route_gives_ci_the_token_through_one_credential_helper(bakes: dict[str, Path], tmp_path: Path) -> None:
    workflow = load_workflow(bakes["git"] / ".github" / "workflows" / "ci.yml")
    helper = {k: v for k, v in workflow["env"].items() if k.startswith("GIT_CONFIG_")}
    assert helper == helper_from_dockerfile(bakes["git"]), "the image build and CI use one helper"
    assert helper["GIT_CONFIG_VALUE_0"] == GIT_CREDENTIAL_HELPER

    # git runs it: with the token, the user and password it answers; without, nothing.
    answer = git_credential({**helper, TOKEN_VARIABLE: "s3cret-token"}, tmp_path)
    assert "username=x-access-token\n" in answer and "password=s3cret-token\n" in answer, answer
    assert "password=" not in git_credential(helper, tmp_path)

    for name, job in workflow["jobs"].items():
        runs = " ".join(step.get("run", "") for step in job["steps"])
        if "make " in runs or "uv " in runs:
            assert job.get("env", {}).get(TOKEN_VARIABLE) == f"${{{{ secrets.{TOKEN_VARIABLE} }}}}", name
    build = next(s for s in workflow["jobs"]["image"]["steps"] if "docker/build-push-action" in s.get("uses", ""))
    assert build["with"]["secrets"].strip() == f"{SECRET_ID}=${{{{ secrets.{TOKEN_VARIABLE} }}}}"

    index = load_workflow(bakes["index"] / ".github" / "workflows" / "ci.yml")
    assert not any(k.startswith("GIT_CONFIG_") for k in index["env"])
    assert TOKEN_VARIABLE not in (bakes["index"] / ".github" / "workflows" / "ci.yml").read_text()


def test_dependabot_moves_the_engine_only_when_it_comes_from_an_index(bakes: dict[str, Path]) -> None:
    for source, project in bakes.items():
        path = project / ".github" / "dependabot.yml"
        assert jsonschema_cli_problems("vendor.dependabot", path) == []
        (uv,) = [u for u in yaml.safe_load(path.read_text())["updates"] if u["package-ecosystem"] == "uv"]
        ignored = {i["dependency-name"] for i in uv.get("ignore", [])}
        assert ("sqs-worker-engine" in ignored) == (source == "git"), (source, ignored)
        audit = load_workflow(project / ".github" / "workflows" / "ci.yml")["jobs"]["audit"]
        export = next(s["run"] for s in audit["steps"] if "uv export" in s.get("run", ""))
        assert ("--no-emit-package sqs-worker-engine" in export) == (source == "git"), "an index engine is audited"


@pytest.mark.parametrize(
    ("source_line", "refused", "fragment"),
    [
        ('sqs-worker-engine = { path = "/somewhere/engine" }', True, "local path"),
        (
            'sqs-worker-engine = { git = "file:///srv/git/sqs-worker-template", subdirectory = "engine", rev = "abc" }',
            True,
            "file:// URL",
        ),
        (f'sqs-worker-engine = {{ git = "{ORIGIN}", subdirectory = "engine", rev = "abc" }}', False, ""),
        (None, False, ""),  # the index
    ],
    ids=["path", "file-git", "hosted-git", "index"],
)
def test_make_refuses_engine_sources_an_image_build_cannot_reach(
    bakes: dict[str, Path], tmp_path: Path, source_line: str | None, refused: bool, fragment: str
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "Makefile").write_text((bakes["index"] / "Makefile").read_text())
    # The bake's own source (a path: it is baked from this checkout) replaced by the case's.
    text = re.sub(
        r"\n\[tool\.uv\.sources\]\n(.*\n)*?sqs-worker-engine = .*\n",
        "\n",
        (bakes["index"] / "pyproject.toml").read_text(),
    )
    assert "sqs-worker-engine = " not in text
    if source_line:
        text += f"\n[tool.uv.sources]\n{source_line}\n"
    (project / "pyproject.toml").write_text(text)
    result = run(["make", "--no-print-directory", "engine-source"], project, timeout=60)
    assert (result.returncode != 0) == refused, result.stdout + result.stderr
    assert fragment in result.stdout


# (target, what names an index, uv.lock present, refused): `echo` stands in for uv and cruft.
NAMED_BY = ["pyproject", *INDEX_VARIABLES]
GUARD_CASES = [
    ("lock", None, False, True),
    ("lock", None, True, True),  # re-resolving is resolving: the lock does not name the index
    *(("lock", named, False, False) for named in NAMED_BY),
    ("install", None, False, True),
    ("install", None, True, False),  # uv.lock records where the engine came from
    *(("install", named, False, False) for named in NAMED_BY),
    ("upgrade", None, True, True),  # refused before cruft runs: it ends in a re-lock
]


@pytest.mark.usefixtures("no_index_named")
@pytest.mark.parametrize(
    ("target", "named", "locked", "refused"),
    GUARD_CASES,
    ids=[f"{t}-{n or 'unnamed'}{'-locked' if locked else ''}" for t, n, locked, _ in GUARD_CASES],
)
def test_the_makefile_refuses_to_resolve_the_engine_until_an_index_is_named(
    bakes: dict[str, Path], tmp_path: Path, target: str, named: str | None, locked: bool, refused: bool
) -> None:
    """A bake pinning the engine with no index named would resolve it from the default index,
    where anyone could publish a package of that name: `make lock`, `make upgrade` and a
    `make install` that has to resolve refuse, in one paragraph saying how to name one."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "Makefile").write_text((bakes["unnamed"] / "Makefile").read_text())
    pyproject = (bakes["unnamed"] / "pyproject.toml").read_text()
    assert not {"index", "sources"} & set(tomllib.loads(pyproject)["tool"]["uv"]), "the version pin alone"
    if named == "pyproject":
        pyproject += (
            '\n[[tool.uv.index]]\nname = "engine"\nurl = "https://packages.example.com/simple/"\nexplicit = true\n'
        )
    (project / "pyproject.toml").write_text(pyproject)
    if locked:
        (project / "uv.lock").write_text("")
    env = {named: "engine=https://packages.example.com/simple/"} if named in INDEX_VARIABLES else {}
    result = run(["make", "--no-print-directory", target, "UV=echo uv", "CRUFT=echo cruft"], project, timeout=60, **env)
    output = result.stdout + result.stderr
    assert (result.returncode != 0) == refused, output
    if refused:
        assert "No index is named for sqs-worker-engine" in result.stdout, output
        assert "anyone could publish a package called sqs-worker-engine" in result.stdout
        assert "UV_INDEX=engine=<the index's simple API URL> make lock install" in result.stdout
        ran = [line for line in result.stdout.splitlines() if line.startswith(("echo ", "uv ", "cruft "))]
        assert not ran, f"nothing runs before the refusal: {ran}"
    else:
        assert f"uv {'sync' if target == 'install' else target}" in result.stdout, output


def test_only_a_bake_with_no_index_named_guards_its_makefile(bakes: dict[str, Path]) -> None:
    for source, project in bakes.items():
        assert ("engine-index" in (project / "Makefile").read_text()) == (source == "unnamed"), source


# --- the workflows -------------------------------------------------------------------------------


def pins(path: Path) -> dict[str, tuple[str, str]]:
    found: dict[str, set[tuple[str, str]]] = {}
    for action, sha, release in SHA_PIN.findall(path.read_text()):
        found.setdefault(action, set()).add((sha, release))
    assert all(len(v) == 1 for v in found.values()), f"{path}: one action at two commits: {found}"
    return {action: v.pop() for action, v in found.items()}


def assert_pinned_like_ci(path: Path) -> None:
    """Every `uses:` pinned to a full SHA with its release in a comment; the actions the
    template's CI also uses, at the same commits (Dependabot moves them together)."""
    uses = re.findall(r"^\s*(?:-\s+)?uses: .*$", path.read_text(), re.MULTILINE)
    assert uses and all(SHA_PIN.search(line.strip().removeprefix("- ")) for line in uses), uses
    ci = pins(ROOT / ".github" / "workflows" / "ci.yml")
    assert {a: sha for a, sha in pins(path).items() if a in ci} == {a: sha for a, sha in ci.items() if a in pins(path)}


def test_the_engine_release_workflow_builds_checks_and_publishes_with_trusted_publishing() -> None:
    path = ROOT / ".github" / "workflows" / "release-engine.yml"
    assert jsonschema_cli_problems("vendor.github-workflows", path) == []
    assert_pinned_like_ci(path)
    workflow = load_workflow(path)
    assert workflow["on"] == {"push": {"tags": ["engine-v*"]}}, "a tag releases, nothing else"
    assert workflow["permissions"] == {}, "no job gets more than it asks for"
    build, publish = workflow["jobs"]["build"], workflow["jobs"]["publish"]
    runs = " && ".join(step.get("run", "") for step in build["steps"])
    assert "uv build" in runs and "twine check --strict" in runs
    assert 'scripts/check_engine_dist.py dist --tag "$TAG"' in runs, "the checks this suite runs on a build"
    assert build["permissions"] == {"contents": "read"}, "the build, which runs tests, gets no OIDC token"
    assert publish["needs"] == "build"
    assert publish["permissions"] == {"id-token": "write", "attestations": "write"}
    assert publish["environment"]["name"], "an environment the index's trusted publisher names"
    uses = [step.get("uses", "").split("@")[0] for step in publish["steps"]]
    assert uses == ["actions/download-artifact", "actions/attest-build-provenance", "pypa/gh-action-pypi-publish"]
    publish_step = publish["steps"][-1]
    assert not {"password", "user"} & set(publish_step.get("with", {})), "trusted publishing: no stored token"
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            if step.get("uses", "").startswith("astral-sh/setup-uv@"):
                assert step["with"]["version"] == COOKIECUTTER["_uv_version"]
                assert step["with"]["enable-cache"] is False, "no cache a pull request wrote may reach a release"


def test_the_template_update_workflow_checks_weekly_and_proposes_the_update(bakes: dict[str, Path]) -> None:
    for source, project in bakes.items():
        path = project / ".github" / "workflows" / "template-update.yml"
        assert jsonschema_cli_problems("vendor.github-workflows", path) == []
        assert_pinned_like_ci(path)
        workflow = load_workflow(path)
        assert workflow["on"]["schedule"] and "workflow_dispatch" in workflow["on"]
        assert workflow["permissions"] == {}
        (job,) = workflow["jobs"].values()
        assert job["permissions"] == {"contents": "write", "pull-requests": "write"}
        cruft = f"uvx --from cruft=={COOKIECUTTER['_cruft_version']} cruft"
        assert job["env"]["CRUFT"] == cruft, "the cruft that `make upgrade` runs"
        assert f"--from cruft=={COOKIECUTTER['_cruft_version']} cruft" in (project / "Makefile").read_text()
        script = " ".join(step.get("run", "") for step in job["steps"])
        assert "$CRUFT check" in script and "$CRUFT update --skip-apply-ask" in script
        assert "gh pr create" in script and "*.rej" in script and "--diff-filter=U" in script
        assert "${{" not in script, "no expression expanded into a shell script"
        checkout = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@"))
        assert checkout["with"]["persist-credentials"] is False
        assert job["env"]["GIT_CONFIG_VALUE_0"] == GIT_CREDENTIAL_HELPER, source


def test_the_readme_says_where_the_engine_comes_from_as_pyproject_does(bakes: dict[str, Path], tmp_path: Path) -> None:
    """A bake from a local checkout installs that checkout's engine/ by path whatever
    `engine_source` says; its README once told an owner (the `git` answer, the default) that
    the engine came from the template's git repository, with a `rev` to move, and that
    `make build` would work with a token."""
    for source in ("git", "index"):
        pyproject = (bakes[source] / "pyproject.toml").read_text()
        assert 'sqs-worker-engine = { path = "' in pyproject, source
        readme = (bakes[source] / "README.md").read_text()
        section = readme.split("### Where the engine comes from", 1)[1].split("\n## ", 1)[0]
        assert "installs that checkout's `engine/` by path" in section, (source, section)
        assert "This service was generated with `engine_source=" not in section, (source, section)
        assert "from the template's git repository (below)" not in readme, source
        assert "installed by path from `engine/` of the template checkout" in readme, source
    # With the source the answer names (forced, as from the hosted repository), its section stays.
    hosted = bake(tmp_path, engine_source="index", _engine_source="index", engine_index_url=INDEX_URL)
    assert "path = " not in (hosted / "pyproject.toml").read_text()
    readme = (hosted / "README.md").read_text()
    assert "This service was generated with `engine_source=index`" in readme
    assert "from the package index, so a new release arrives as a Dependabot pull request" in readme
    assert "installs that checkout's `engine/` by path" not in readme
