"""Where a bake gets its engine, and where its documents point: the template repository it
was baked from.

- `engine_source(cookiecutter)`: the `[tool.uv.sources]` entry the service installs the
  engine from (`engine_source_for` decides; see its docstring), or "" for the version pin
  alone; `engine_index`, the index it is pinned to when the bake names one; and
  `engine_index_unnamed`, true for the pin alone (an index the owner names at install time).
- `template_origin(cookiecutter)`: where `cruft update` finds the template again.
- `engine_link(cookiecutter)`: the engine named in the generated README, linked to the
  repository the service was baked from (or the checkout's path, for a local bake);
  `template_doc_link(cookiecutter, doc, label, anchor)` the same for one of its documents
  (the docs site's pages: the generated README's "Read on").
- `GIT_CREDENTIAL_HELPER`: the git credential helper the Dockerfile and CI of a service with
  the engine as a git source use to read the template repository with a token.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .checkout import ENGINE_DIR, ROOT, git


def as_url(origin: str) -> str:
    """A git remote as a URL uv accepts: a plain path (a clone of a local repository)
    becomes file://, scp-like `git@host:org/repo` becomes ssh://."""
    if "://" in origin:
        return origin
    if ":" in origin.split("/", 1)[0] and not os.path.exists(origin):
        host, path = origin.split(":", 1)
        return f"ssh://{host}/{path}"
    return Path(origin).resolve().as_uri()


def rendered_in_place(template: str | None, root: Path = ROOT) -> bool:
    """True when cookiecutter renders straight from the checkout this module is in, not from
    a clone it (or cruft) made of a repository."""
    return template is not None and Path(os.path.expanduser(template)).resolve() == root


ENGINE_SOURCES = ("git", "index")  # the `engine_source` answer (cookiecutter.json; the first is the default)
OVERRIDES = ("path", "git", "index")  # the `_engine_source` extra-context answer


# The name of the index the engine is pinned to (`[[tool.uv.index]]`): uv reads its
# credentials from UV_INDEX_ENGINE_USERNAME and UV_INDEX_ENGINE_PASSWORD.
ENGINE_INDEX = "engine"
# The environment variables by which uv is told of an index: with one set, a service pinning
# the engine with no index named for it may lock (the generated Makefile and the
# post-generation hook both ask).
INDEX_VARIABLES = ("UV_INDEX", "UV_DEFAULT_INDEX", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL")


def engine_source_for(
    answer: str,
    override: str,
    template: str | None,
    origin: str | None,
    commit: str | None,
    engine_dir: Path,
    index_url: str = "",
) -> dict[str, str]:
    """Where the baked service installs its engine from: its `[tool.uv.sources]` entry.

    - `override` (the `_engine_source` extra-context answer) wins: "path" (this checkout's
      engine/), "index" or "git".
    - Rendered in place from a local checkout (`cookiecutter ./checkout`, this repository's
      own tests and demo): that checkout's engine/, by path, whatever `answer` says: its
      version may not be on any index yet, and the checkout is what the files were
      generated from.
    - Otherwise the `engine_source` answer: "index" (the version pin, moved by Dependabot
      and Renovate: from the index `index_url` names and from no other, written as uv's
      explicit index; without `index_url`, {}: the pin alone, the index named at install
      time, which the generated Makefile insists on), or "git" (the template's repository
      at the exact commit baked from, for forks without an index).
    """
    if override and override not in OVERRIDES:
        raise ValueError(f"_engine_source must be one of {', '.join(OVERRIDES)} (or empty), got {override!r}")
    if not override and answer not in ENGINE_SOURCES:
        raise ValueError(f"engine_source must be one of {', '.join(ENGINE_SOURCES)}, got {answer!r}")
    choice = override or ("path" if rendered_in_place(template) else answer)
    if choice == "index":
        # Without a URL, no source: the owner names the index when installing (UV_INDEX).
        return {"index": ENGINE_INDEX} if index_url else {}
    if choice == "path":
        return {"path": str(engine_dir)}
    if not (origin and commit):
        raise ValueError("engine_source=git needs the template to be a git clone with an origin remote")
    return {"git": as_url(origin), "subdirectory": "engine", "rev": commit}


def toml_inline(table: dict[str, str]) -> str:
    return "{ " + ", ".join(f"{key} = {json.dumps(value)}" for key, value in table.items()) + " }"


def _engine_source_table(cookiecutter: dict[str, Any]) -> dict[str, str]:
    return engine_source_for(
        str(cookiecutter.get("engine_source") or ""),
        str(cookiecutter.get("_engine_source") or ""),
        cookiecutter.get("_template"),
        git("remote", "get-url", "origin"),
        git("rev-parse", "HEAD"),
        ENGINE_DIR,
        str(cookiecutter.get("engine_index_url") or ""),
    )


def engine_source(cookiecutter: dict[str, Any]) -> str:
    """The TOML for `sqs-worker-engine = ...` under [tool.uv.sources], or "" for the pin alone."""
    table = _engine_source_table(cookiecutter)
    return toml_inline(table) if table else ""


def engine_index_unnamed(cookiecutter: dict[str, Any]) -> bool:
    """True when the service pins the engine with no index named for it (engine_source=index
    without engine_index_url): the bake the Makefile keeps from locking or installing until
    pyproject.toml or the environment names one. False when the answers cannot say (the
    post-generation hook renders this too, and must not fail)."""
    try:
        return _engine_source_table(cookiecutter) == {}
    except ValueError:
        return False


def engine_index(cookiecutter: dict[str, Any]) -> str:
    """The URL of the index the service installs its engine from, or "" when the engine comes
    from git or a path (the post-generation hook says what must be published there first),
    or when the answers cannot say (the hook renders this too, and must not fail)."""
    try:
        table = _engine_source_table(cookiecutter)
    except ValueError:
        return ""
    if table.get("index") != ENGINE_INDEX:
        return ""
    return str(cookiecutter.get("engine_index_url") or "")


# How git, asked for the template repository's credentials (a git source of the engine, a
# private template for `cruft`), gets them from the environment: TEMPLATE_REPO_TOKEN, with
# TEMPLATE_REPO_USER as the user name (GitHub takes any for a token; x-access-token is the
# one its app tokens use). Set through GIT_CONFIG_* variables, so it is written to no file.
GIT_CREDENTIAL_HELPER = (
    '!f() { test "$1" = get && test -n "$TEMPLATE_REPO_TOKEN" && '
    'echo "username=${TEMPLATE_REPO_USER:-x-access-token}" && echo "password=$TEMPLATE_REPO_TOKEN"; }; f'
)


def template_origin(cookiecutter: dict[str, Any]) -> str:
    """Where `cruft update` finds this template again: the repository it was cloned from,
    or the local checkout it was generated from."""
    template = cookiecutter.get("_template")
    if rendered_in_place(template):
        return str(ROOT)
    origin = git("remote", "get-url", "origin")
    return as_url(origin) if origin else str(template or ROOT)


def web_url(origin: str, commit: str, page: str = "engine", kind: str = "tree") -> str | None:
    """The page of the template's `page` (engine/ by default; `kind` "blob" for a file) at
    `commit`, for a repository on a host that serves one (https, or ssh to the same host);
    None for a checkout or a file:// clone on this machine, which has no page."""
    url = as_url(origin)
    scheme, _, rest = url.partition("://")
    if scheme not in ("https", "http", "ssh") or "/" not in rest:
        return None
    host, path = rest.split("/", 1)
    host = host.rsplit("@", 1)[-1].split(":", 1)[0]  # no user, no port (ssh's is not the web's)
    path = path.removesuffix("/").removesuffix(".git")
    if not host or not path:
        return None
    # GitHub's and Gitea's page of a folder at a commit; GitLab takes the same with a `/-`.
    return f"https://{host}/{path}/{kind}/{commit or 'HEAD'}/{page}"


def engine_link(cookiecutter: dict[str, Any]) -> str:
    """Markdown naming the engine where its source is: a link to the template repository's
    engine/ at the commit baked from, or, for a bake from a checkout on this machine, the
    checkout's path (a README must not point at a repository the service was not made from)."""
    origin = template_origin(cookiecutter)
    page = web_url(origin, git("rev-parse", "HEAD") or "")
    if page:
        return f"[`sqs-worker-engine`]({page})"
    return f"`sqs-worker-engine` (`engine/` of the template checkout `{origin.removeprefix('file://')}`)"


def template_doc_link(cookiecutter: dict[str, Any], doc: str, label: str = "", anchor: str = "") -> str:
    """Markdown naming one of the template repository's documents (docs/scaling.md) where it
    is: a link at the commit baked from, or its path in the checkout for a local bake. The
    commit's page is the one that matches the engine the service pins.

    `label`: the link's text instead of the path, for a list of pages (a local bake's then
    names the path after it, not the checkout: say once where the checkout is, with a link
    without a label); `anchor`: a section of the document (a heading's slug)."""
    origin = template_origin(cookiecutter)
    page = web_url(origin, git("rev-parse", "HEAD") or "", doc, "blob")
    target = f"{doc}#{anchor}" if anchor else doc
    if page:
        url = f"{page}#{anchor}" if anchor else page
        return f"[{label}]({url})" if label else f"[{target}]({url}) in the template's repository"
    if label:
        return f"{label} (`{target}`)"
    return f"`{target}` of the template checkout `{origin.removeprefix('file://')}`"
