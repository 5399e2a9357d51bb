"""The docs site (mkdocs.yml, docs/) says what the code does, builds strictly, and its
examples run.

- The reference pages are what scripts/docs_reference.py writes from the code now, and each
  lists everything its code defines: every setting, metric, event, command and option, and
  cookiecutter variable (counted here from the code by other means than the script's).
- `mkdocs build --strict` exits 0 with no warning: no broken link or anchor, no page left out
  of the nav (mkdocs.yml's `validation`).
- Seen in a real browser: the built site, served over HTTP, rendered by headless Chromium
  (Debian's package, installed when missing and the suite runs as root; Google Chrome where a
  CI runner has it; else a skip that says why): the home page's title, a setting's name in the
  settings reference, and a search for it finding that page. The screenshots are kept in
  .test-reports/screenshots/.
- Every Python block of docs/ runs (pytest-markdown-docs, as the READMEs' do in
  test_readmes.py; a `python notest` fence is left out), against the suite's LocalStack in
  an AWS account of its own, as the engine README's examples ran before they moved to
  docs/engine/; and every command of its shell blocks names what exists: a make target of
  the template's or the generated service's Makefile, a command of the CLI, a cookiecutter
  variable.
- The engine's README is an overview of at most 250 lines that points into docs/engine/:
  it links every page there, each of its links leads to a file that exists (a heading too,
  where it names one), and it links into docs/ by absolute address, since it is also the
  package's description on the index, where a relative link leads nowhere. Its map of the
  engine's layers names every folder and module of the package.
"""

from __future__ import annotations

import argparse
import base64
import functools
import http.server
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from doc_commands import commands, words
from markdown_it import MarkdownIt

from scripts import docs_reference

DOCS = ROOT / "docs"
ENGINE_README = ROOT / "engine" / "README.md"
PACKAGE = ROOT / "engine" / "src" / "sqs_worker_engine"
# Where a file of this repository is read on the web, as the docs and the engine's README link it.
REPOSITORY_FILES = "https://github.com/org/sqs-worker-template/blob/main/"
README_MOST_LINES = 250
METRICS_SOURCE = ROOT / "engine" / "src" / "sqs_worker_engine" / "base" / "telemetry" / "metrics.py"
TEMPLATE_MAKEFILE = ROOT / "{{cookiecutter.project_slug}}" / "Makefile"
SCREENSHOTS = ROOT / ".test-reports" / "screenshots"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# A setting the browser looks for: in the settings reference, and found by the site's search.
SOUGHT = "WORKER_PREFETCH"
# The modules whose `python -m` is the CLI: the engine, a service (as the docs write it, and
# as the defaults name it).
CLI_MODULES = ("sqs_worker_engine", "<package>", "orders_worker")


def page(path: str) -> str:
    return (DOCS / path).read_text()


def section(text: str, heading: str) -> str:
    """A `## heading` section of a page, up to the next `## `."""
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def cli_commands() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every command of the CLI by its words, from the parsers cli.py builds."""
    from sqs_worker_engine.cli import build_parser

    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found[(*path, name)] = sub
                    walk(sub, (*path, name))

    walk(build_parser("python -m sqs_worker_engine"), ())
    return found


def makefile_targets(path: Path) -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", path.read_text(), re.MULTILINE))


def test_each_generated_page_is_what_the_code_says_now() -> None:
    for path, text in docs_reference.pages().items():
        committed = DOCS / path
        assert committed.is_file(), f"docs/{path} is missing: run `make docs-reference`"
        assert committed.read_text() == text, f"docs/{path} differs from the code: run `make docs-reference`"


def test_the_metrics_page_lists_each_metric_once_after_a_worker_in_this_process_registered_them_all() -> None:
    """Its on-demand gauges, already registered by a worker run earlier in the same test
    process, were listed twice: the page then differed from the committed one."""
    from prometheus_client import CollectorRegistry
    from sqs_worker_engine.base.telemetry import metrics

    saved = (metrics._db_pool, metrics._jobs_left)
    try:
        metrics._db_pool = metrics._jobs_left = None
        registry = CollectorRegistry()
        metrics.enable_db_pool_gauge(registry)
        metrics.enable_jobs_left_gauge(registry)
        names = [name for name, *_ in docs_reference.engine_metrics()]
    finally:
        metrics._db_pool, metrics._jobs_left = saved
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert {"db_pool_in_use", "worker_jobs_left"} <= set(names)


def test_the_settings_reference_lists_every_setting_and_its_per_queue_form() -> None:
    from sqs_worker_engine.process.settings.fields import ALIASES
    from sqs_worker_engine.process.settings.queues import QUEUE_OVERRIDES

    text = page("reference/settings.md")
    missing = [name for name in ALIASES if f"`{name}`" not in text]
    missing += [f"WORKER_QUEUE_<KEY>_{s}" for s in QUEUE_OVERRIDES if f"`WORKER_QUEUE_<KEY>_{s}`" not in text]
    assert ALIASES and not missing, f"docs/reference/settings.md leaves out: {missing}"


def test_the_metrics_reference_lists_every_metric_the_engine_registers() -> None:
    # Read from metrics.py's source, not its registry (the script reads that): a metric
    # made anywhere in the module, the on-demand ones included.
    names = re.findall(r"\b(?:Counter|Gauge|Histogram|Info|Summary)\(\s*\"(\w+)\"", METRICS_SOURCE.read_text())
    text = page("reference/metrics.md")
    missing = [name for name in names if f"| `{name}` |" not in text]
    assert len(names) >= 30 and not missing, f"docs/reference/metrics.md leaves out: {missing} (of {names})"
    assert {"db_pool_in_use", "worker_jobs_left"} <= set(names), "the on-demand gauges were not found in metrics.py"


def test_the_events_reference_lists_every_event_and_its_fields() -> None:
    import typing

    from sqs_worker_engine.base.telemetry import events

    text = page("reference/events.md")
    for member in typing.get_args(events.Event):
        fields = typing.get_type_hints(member)
        (name,) = typing.get_args(fields.pop("event"))
        row = next((line for line in text.splitlines() if line.startswith(f"| `{name}` |")), None)
        assert row, f"docs/reference/events.md has no row for the event {name}"
        missing = [field for field in fields if f"`{field}`" not in row]
        assert not missing, f"docs/reference/events.md: {name} leaves out its fields {missing}"
    assert len(events.EVENTS) == len(typing.get_args(events.Event)), "an event without its TypedDict"


def test_the_cli_reference_lists_every_command_and_option() -> None:
    text = page("reference/cli.md")
    found = cli_commands()
    assert {("run",), ("dlq", "peek")} <= set(found), f"the parser walk found {sorted(found)}"
    for words_, parser in found.items():
        heading = " ".join(words_)
        assert f"\n## {heading}\n" in text, f"docs/reference/cli.md has no section for `{heading}`"
        body = section(text, heading)
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}`" in body, f"docs/reference/cli.md: `{heading}` leaves out {flag}"


def test_the_variables_reference_lists_every_cookiecutter_variable_with_its_prompt() -> None:
    context = json.loads((ROOT / "cookiecutter.json").read_text())
    prompts = context["__prompts__"]
    text, how_to = page("reference/variables.md"), page("how-to/index.md")
    for name, value in context.items():
        if name.startswith("_"):
            continue
        row = next((line for line in text.splitlines() if line.startswith(f"| `{name}` |")), "")
        prompt = prompts[name]["__prompt__"] if isinstance(prompts[name], dict) else prompts[name]
        assert prompt.split("(")[0].strip() in row, f"docs/reference/variables.md: {name} without its prompt"
        for choice in value if isinstance(value, list) else []:
            assert f"`{choice}`" in row, f"docs/reference/variables.md: {name} leaves out the choice {choice}"
        assert f"- `{name}`: " in how_to, f"docs/how-to/index.md leaves out {name}"


def build_site(site: Path) -> subprocess.CompletedProcess[str]:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    return subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(site)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "HOME": str(site.parent)},
    )


def test_the_site_builds_strictly_with_no_warning(tmp_path: Path) -> None:
    result = build_site(tmp_path / "site")
    output = result.stdout + result.stderr
    warnings = [line for line in output.splitlines() if "WARNING" in line]
    assert result.returncode == 0 and not warnings, f"mkdocs build --strict:\n{output[-4000:]}"
    # A page's HTML: `a/b.md` is `a/b/index.html`, `a/index.md` is `a/index.html`.
    pages = [p.relative_to(DOCS).with_suffix("") for p in DOCS.rglob("*.md")]
    html = [page.parent if page.name == "index" else page for page in pages]
    missing = [str(p) for p in html if not (tmp_path / "site" / p / "index.html").is_file()]
    assert not missing, f"pages not built: {missing}"


def python_blocks(path: Path) -> int:
    fences = [t for t in MarkdownIt().parse(path.read_text()) if t.type == "fence"]
    return sum(1 for t in fences if t.info.split()[:1] == ["python"] and "notest" not in t.info.split())


def private_account() -> dict[str, str]:
    """Credentials for an account of this test's own on the shared LocalStack (LocalStack
    takes a 12-digit access key id as the account), as test_readmes.py makes them."""
    return {"AWS_ACCESS_KEY_ID": str(secrets.randbelow(9 * 10**11) + 10**11), "AWS_SECRET_ACCESS_KEY": "test"}


def test_every_python_block_of_the_docs_runs(localstack_endpoint: str, tmp_path: Path) -> None:
    pages = sorted(DOCS.rglob("*.md"))
    blocks = sum(python_blocks(p) for p in pages)
    # The engine's examples that moved here from its README: the lifespan, batch handlers,
    # an S3 envelope, sending, proving a service, a handler on the test's loop.
    engine = sum(python_blocks(p) for p in sorted((DOCS / "engine").glob("*.md")))
    assert engine >= 6, f"docs/engine/ has {engine} Python blocks left to run"
    ini = tmp_path / "pytest.ini"  # the suite's own configuration and plugins stay out of it
    ini.write_text("[pytest]\n")
    argv = [sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", str(ROOT), "-p", "no:cacheprovider"]
    argv += ["-p", "readme_examples", "--markdown-docs", "-q", *map(str, pages)]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "tests"), "PYTHONDONTWRITEBYTECODE": "1"}
    env |= {**private_account(), "AWS_ENDPOINT_URL": localstack_endpoint, "AWS_REGION": "us-east-1"}
    result = subprocess.run(argv, check=False, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and f"{blocks} passed" in output, f"{blocks} Python blocks, yet:\n{output[-4000:]}"


def links(markdown: str) -> list[str]:
    """Every link's address, inline or by reference, as markdown-it reads the text."""
    found: list[str] = []

    def walk(tokens: list[Any]) -> None:
        for token in tokens:
            if token.type == "link_open":
                found.append(str(token.attrGet("href")))
            walk(token.children or [])

    walk(MarkdownIt().parse(markdown))
    return found


def anchors(path: Path) -> set[str]:
    """The anchors of a page's headings, as MkDocs' toc and GitHub make them."""
    tokens = MarkdownIt().parse(path.read_text())
    titles = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    return {re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", title.lower()).strip()) for title in titles}


def readme_link_problems(markdown: str) -> tuple[int, list[str]]:
    """(links checked, what is wrong with them) for the engine's README: each relative link
    (read from engine/, as GitHub and a checkout read it) and each address of a file of this
    repository leads to a file that exists, and to its heading where it names one; a link
    into docs/ is the absolute address, the only one that leads anywhere on the index."""
    checked, found = 0, []
    for href in links(markdown):
        target, _, anchor = href.partition("#")
        if href.startswith(REPOSITORY_FILES):
            path = ROOT / target.removeprefix(REPOSITORY_FILES)
        elif re.match(r"[a-z]+:", href):
            continue  # another site's address
        else:
            path = (ENGINE_README.parent / target).resolve() if target else ENGINE_README
            if path.is_relative_to(DOCS):
                found.append(f"{href}: relative, so it leads nowhere on the package index (link {REPOSITORY_FILES}...)")
        checked += 1
        if not path.is_file():
            found.append(f"{href}: there is no file {os.path.relpath(path, ROOT)}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            found.append(f"{href}: {os.path.relpath(path, ROOT)} has no heading #{anchor}")
    return checked, found


def test_the_engine_readme_is_an_overview_that_links_every_engine_page() -> None:
    text = ENGINE_README.read_text()
    lines = len(text.splitlines())
    assert lines <= README_MOST_LINES, f"engine/README.md is {lines} lines: move a section to docs/engine/"
    linked = {href.removeprefix(REPOSITORY_FILES).partition("#")[0] for href in links(text)}
    pages = {p.relative_to(ROOT).as_posix() for p in (DOCS / "engine").glob("*.md")}
    assert len(pages) >= 10 and not pages - linked, f"engine/README.md does not link {sorted(pages - linked)}"


def test_the_template_readme_is_a_front_page_that_links_the_template_pages() -> None:
    """The repository's README: the two commands, the answers, what a service does; the rest
    on docs/template/ pages it links (GitHub renders it: relative links are right there)."""
    text = (ROOT / "README.md").read_text()
    lines = len(text.splitlines())
    assert lines <= README_MOST_LINES, f"README.md is {lines} lines: move a section to docs/template/"
    linked = {href.partition("#")[0] for href in links(text)}
    pages = {p.relative_to(ROOT).as_posix() for p in (DOCS / "template").glob("*.md")}
    assert pages and not pages - linked, f"README.md does not link {sorted(pages - linked)}"
    missing = sorted(href for href in linked if "://" not in href and href and not (ROOT / href).exists())
    assert not missing, f"README.md links files that do not exist: {missing}"


def test_every_link_of_the_engine_readme_leads_to_a_file_that_exists() -> None:
    checked, found = readme_link_problems(ENGINE_README.read_text())
    assert checked >= 15 and not found, "\n".join(found) or f"only {checked} links checked"


@pytest.mark.parametrize(
    ("link", "problem"),
    [
        ("nowhere.md", "there is no file engine/nowhere.md"),
        ("../docs/engine/handlers.md", "relative, so it leads nowhere on the package index"),
        (f"{REPOSITORY_FILES}docs/engine/nowhere.md", "there is no file docs/engine/nowhere.md"),
        (f"{REPOSITORY_FILES}docs/engine/handlers.md#nowhere", "has no heading #nowhere"),
        ("#nowhere", "engine/README.md has no heading #nowhere"),
    ],
)
def test_the_readme_link_check_names_what_leads_nowhere(link: str, problem: str) -> None:
    good = f"[Handlers]({REPOSITORY_FILES}docs/engine/handlers.md#public-api) and [the changelog](CHANGELOG.md)"
    assert readme_link_problems(good) == (2, [])
    checked, found = readme_link_problems(f"{good}, and [this][it].\n\n[it]: {link}\n")
    assert checked == 3 and len(found) == 1 and problem in found[0], found


def layer_map() -> dict[str, str]:
    """The README's map of the engine's layers: each entry's path in the package (a folder,
    `""` for the package itself, or a module that is a layer of its own) -> what its line says."""
    section = ENGINE_README.read_text().split("\n## The engine's layers\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```\n", 2)[1]
    entries: dict[str, str] = {}
    stack: list[str] = []
    for line in block.splitlines():
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name, _, says = line.strip().partition(" ")
        stack[depth:] = [name.rstrip("/")]
        entries["/".join(stack[1:])] = says
    return entries


def test_the_engine_readmes_map_names_every_folder_and_module_of_the_package() -> None:
    entries = layer_map()
    missing = [f"{path}: no such folder or module" for path in entries if not (PACKAGE / path).exists()]
    for module in sorted(PACKAGE.rglob("*.py")):
        folder = module.parent.relative_to(PACKAGE).as_posix().removeprefix(".")
        own_line = module.relative_to(PACKAGE).as_posix() in entries  # reporting.py, sqs.py
        named = re.compile(rf"(?<![\w.]){re.escape(module.stem)}(?!\w)")
        if folder not in entries:
            missing.append(f"{folder}/: not on the map")
        elif not (module.stem.startswith("__") or own_line or named.search(entries[folder])):
            missing.append(f"{folder or 'sqs_worker_engine'}/ does not name {module.stem}")
    problems = "\n".join(sorted(set(missing)))
    assert len(entries) >= 20 and not missing, f"engine/README.md, The engine's layers:\n{problems}"


def command_problems(argv: list[str], targets: set[str], cli: set[tuple[str, ...]], variables: set[str]) -> list[str]:
    """What a docs command names that does not exist."""
    found: list[str] = []
    while argv and re.match(r"[A-Z_]+=", argv[0]):  # VAR=value make ...
        argv = argv[1:]
    if argv[:1] == ["make"]:
        named = [w for w in argv[1:] if not w.startswith("-") and "=" not in w]
        found += [f"no make target {t}" for t in named if t not in targets]
    if "python" in argv and argv[argv.index("python") + 1 : argv.index("python") + 2] == ["-m"]:
        at = argv.index("python") + 2
        if argv[at : at + 1] and argv[at] in CLI_MODULES:
            rest = [w for w in argv[at + 1 :] if not w.startswith("-")]
            if not any(tuple(rest[:n]) in cli for n in (1, 2)) or (rest[:1] == ["dlq"] and tuple(rest[:2]) not in cli):
                found.append(f"no command {' '.join(rest[:2])}")
    if argv[:1] == ["cookiecutter"]:
        given = [w.split("=", 1)[0] for w in argv[1:] if "=" in w and not w.startswith("-")]
        found += [f"no cookiecutter variable {v}" for v in given if v not in variables]
    return found


def test_every_command_of_the_docs_names_what_exists() -> None:
    targets = makefile_targets(ROOT / "Makefile") | makefile_targets(TEMPLATE_MAKEFILE)
    cli = set(cli_commands())
    variables = {k for k in json.loads((ROOT / "cookiecutter.json").read_text()) if not k.startswith("_")}
    found, checked = [], 0
    for path in sorted(DOCS.rglob("*.md")):
        for command in commands(path.read_text()):
            checked += 1
            found += [
                f"{path.relative_to(ROOT)}: `{command}`: {p}"
                for p in command_problems(words(command), targets, cli, variables)
            ]
    assert checked >= 20 and not found, "\n".join(found) or f"only {checked} commands found"


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["make", "no-such-target"], "no make target no-such-target"),
        (["uv", "run", "python", "-m", "orders_worker", "dlq", "nope"], "no command dlq nope"),
        (["python", "-m", "sqs_worker_engine", "runn"], "no command runn"),
        (["cookiecutter", "--no-input", ".", "deploy_targets=ecs"], "no cookiecutter variable deploy_targets"),
    ],
)
def test_the_command_check_names_what_does_not_exist(argv: list[str], problem: str) -> None:
    targets = makefile_targets(ROOT / "Makefile")
    variables = set(json.loads((ROOT / "cookiecutter.json").read_text()))
    assert command_problems(argv, targets, set(cli_commands()), variables) == [problem]


@pytest.fixture(scope="module")
def browser() -> str:
    """A headless Chromium: found, else Debian's package installed when the suite runs as root."""
    found = next(filter(None, map(shutil.which, BROWSERS)), None)
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"]
        if subprocess.run(install, capture_output=True, check=False, timeout=600).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, check=False, timeout=600)
            subprocess.run(install, capture_output=True, check=False, timeout=600)
        found = shutil.which("chromium")
    if found is None:
        pytest.skip(f"no headless browser ({', '.join(BROWSERS)}): apt-get install chromium to see the site rendered")
    return found


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The built site, served over HTTP from a thread: the address of its root."""
    site = tmp_path_factory.mktemp("served") / "site"
    built = build_site(site)
    assert built.returncode == 0, built.stdout + built.stderr
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class Chromium:
    """Headless Chromium driven over its DevTools pipe (`--remote-debugging-pipe`: JSON
    messages ended by NUL on file descriptors 3 and 4), so that the test waits for what the
    page shows rather than for a guessed time; standard library only."""

    def __init__(self, binary: str, profile: Path) -> None:
        to_child, self._out = os.pipe()
        self._in, from_child = os.pipe()

        def as_3_and_4() -> None:  # in the child: dup first, as either pipe end may be 3 or 4 already
            ends = os.dup(to_child), os.dup(from_child)
            os.dup2(ends[0], 3)
            os.dup2(ends[1], 4)

        argv = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe"]
        argv += [f"--user-data-dir={profile}", "--window-size=1280,1000", "about:blank"]
        # preexec_fn, though the site's server thread runs: it only dups descriptors, and no
        # other way puts the pipe's ends at 3 and 4 in the child.
        self.process = subprocess.Popen(
            argv,
            close_fds=False,
            preexec_fn=as_3_and_4,  # noqa: PLW1509
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child)
        os.close(from_child)
        self._buffer, self._id = b"", 0

    def send(self, method: str, session: str | None = None, **params: object) -> dict[str, Any]:
        self._id += 1
        message: dict[str, object] = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        while True:  # events come between the replies: read to this call's
            while b"\0" not in self._buffer:
                chunk = os.read(self._in, 1 << 16)
                assert chunk, f"the browser closed its pipe during {method}"
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                assert "error" not in reply, f"{method}: {reply['error']}"
                return dict(reply["result"])

    def open(self, url: str) -> str:
        """A new tab at `url`; its session."""
        target = self.send("Target.createTarget", url=url)["targetId"]
        return str(self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"])

    def evaluate(self, session: str, expression: str) -> Any:
        return self.send("Runtime.evaluate", session, expression=expression, returnByValue=True)["result"].get("value")

    def wait_for(self, session: str, expression: str, ceiling: float = 60) -> Any:
        """`expression`'s value once truthy, asked every 0.2 s; None at the ceiling (a bound
        for a page that never shows it, not a measure of speed)."""
        deadline = time.monotonic() + ceiling
        while time.monotonic() < deadline:
            value = self.evaluate(session, expression)
            if value:
                return value
            time.sleep(0.2)
        return None

    def screenshot(self, session: str, name: str) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        data = self.send("Page.captureScreenshot", session, format="png")["data"]
        (SCREENSHOTS / name).write_bytes(base64.b64decode(data))

    def close(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)
        os.close(self._in)
        os.close(self._out)


def test_a_reader_sees_the_home_page_a_setting_and_finds_it_by_search(
    browser: str, served: str, tmp_path: Path
) -> None:
    chromium = Chromium(browser, tmp_path / "profile")
    try:
        home = chromium.open(f"{served}/")
        title = chromium.wait_for(home, "document.readyState == 'complete' && document.title")
        assert title == "SQS worker template", f"the home page's title: {title!r}"
        text = chromium.evaluate(home, "document.querySelector('article').innerText")
        assert "This is the owner's manual" in text, f"the home page shows: {text[:500]!r}"
        chromium.screenshot(home, "home.png")

        # Each wait is for what the reader looks for, not for the first of it: a table still
        # being parsed, or search results still being rendered, show some rows before others
        # (on a busy machine the first rows were all a wait for "any" saw).
        settings = chromium.open(f"{served}/reference/settings/")
        codes_js = "Array.from(document.querySelectorAll('article td code')).map(c => c.textContent)"
        shown = chromium.wait_for(settings, f"{codes_js}.includes({json.dumps(SOUGHT)})")
        codes = chromium.evaluate(settings, f"{codes_js}.join(' ')")
        assert shown, f"{SOUGHT} is not in the settings reference's table: {codes!r}"
        chromium.screenshot(settings, "settings.png")

        search = chromium.open(f"{served}/?q={SOUGHT}")  # Material's search, opened with its query
        found_js = "Array.from(document.querySelectorAll('.md-search-result__item a')).map(a => a.pathname)"
        listed = chromium.wait_for(search, f"{found_js}.includes('/reference/settings/')")
        found = chromium.evaluate(search, f"{found_js}.join(' ')")
        chromium.screenshot(search, "search.png")
        assert listed, f"a search for {SOUGHT} found: {found!r}"
    finally:
        chromium.close()
