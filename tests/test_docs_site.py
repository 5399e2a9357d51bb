"""The docs site (mkdocs.yml, docs/) says what the code does, builds strictly, and its
examples run.

- The reference pages are what scripts/docs_reference.py writes from the code now, and each
  lists everything its code defines: every setting, metric, event, command and option, and
  cookiecutter variable (counted here from the code by other means than the script's).
- `mkdocs build --strict` exits 0 with no warning: no broken link or anchor, no page left out
  of the nav (mkdocs.yml's `validation`).
- Every Python block of docs/ runs (pytest-markdown-docs, as the READMEs' do in
  test_readmes.py; a `python notest` fence is left out), and every command of its shell
  blocks names what exists: a make target of the template's or the generated service's
  Makefile, a command of the CLI, a cookiecutter variable.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from doc_commands import commands, words
from markdown_it import MarkdownIt

from scripts import docs_reference

DOCS = ROOT / "docs"
METRICS_SOURCE = ROOT / "engine" / "src" / "sqs_worker_engine" / "base" / "telemetry" / "metrics.py"
TEMPLATE_MAKEFILE = ROOT / "{{cookiecutter.project_slug}}" / "Makefile"
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


def test_the_site_builds_strictly_with_no_warning(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    result = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "HOME": str(tmp_path)},
    )
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


def test_every_python_block_of_the_docs_runs(tmp_path: Path) -> None:
    pages = sorted(DOCS.rglob("*.md"))
    blocks = sum(python_blocks(p) for p in pages)
    assert blocks >= 1, "the docs have no Python block left to run"
    ini = tmp_path / "pytest.ini"  # the suite's own configuration and plugins stay out of it
    ini.write_text("[pytest]\n")
    argv = [sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", str(ROOT), "-p", "no:cacheprovider"]
    argv += ["-p", "readme_examples", "--markdown-docs", "-q", *map(str, pages)]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "tests"), "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run(argv, check=False, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and f"{blocks} passed" in output, f"{blocks} Python blocks, yet:\n{output[-4000:]}"


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
