"""The template's root holds only what cookiecutter needs: its Jinja helpers live in a package
with a name of its own (sqs_worker_template_jinja/), and cookiecutter finds them however the
process that bakes is set up.

Cookiecutter (and cruft) append the template's root to sys.path and import what
`_extensions` names: a module the calling process already has under the same name is taken
instead. A harness with its own `observability.py` failed every bake with
`AttributeError: module 'observability' has no attribute 'alerts'`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, tool_env

from scripts import measure_engine

PACKAGE = ROOT / "sqs_worker_template_jinja"
LIMITS = "engine/src/sqs_worker_engine/base/limits.py"

# A scaffolding tool that bakes in its own process, with modules of its own already imported
# (argv: the template, the output directory, then the names); prints the bake's directory
# and which of its modules are no longer its own.
HARNESS = """
import importlib, sys
from cookiecutter.main import cookiecutter

template, out, *names = sys.argv[1:]
mine = {name: importlib.import_module(name) for name in names}
project = cookiecutter(template, no_input=True, output_dir=out)
print(project)
print("replaced:", sorted(name for name, module in mine.items() if sys.modules.get(name) is not module))
"""


def callers_names() -> list[str]:
    """`observability` (the helpers' old name), `local_extensions` (every template's entry by
    cookiecutter's convention: another template's may be loaded already) and each of the
    package's modules."""
    modules = sorted(path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__")
    return ["observability", "local_extensions", *modules]


def harness(tmp_path: Path) -> Path:
    """The tool's directory: its script, and a module of its own under each name."""
    tool = tmp_path / "tool"
    tool.mkdir()
    (tool / "harness.py").write_text(HARNESS, encoding="utf-8")
    for name in callers_names():
        (tool / f"{name}.py").write_text(f'"""The tool\'s own {name}: nothing a template needs."""\n')
    config = tmp_path / "cookiecutter-config.yaml"  # clones and replays stay in tmp_path
    config.write_text(
        f"replay_dir: {json.dumps(str(tmp_path / 'replay'))}\n"
        f"cookiecutters_dir: {json.dumps(str(tmp_path / 'clones'))}\n",
        encoding="utf-8",
    )
    return tool


@pytest.mark.parametrize("source", ["path", "git URL"])
def test_a_bake_works_in_a_process_that_has_modules_of_the_helpers_names(tmp_path: Path, source: str) -> None:
    """From a local path, and from a git URL (a clone of this repository's last commit, as a
    user's git host serves it): cookiecutter imports the helpers from a clone of its own."""
    tool = harness(tmp_path)
    template = str(ROOT)
    if source == "git URL":
        clone = tmp_path / "template.git"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120)
        template = clone.as_uri()
    baked = subprocess.run(
        [sys.executable, "harness.py", template, str(tmp_path / "out"), *callers_names()],
        cwd=tool,  # the tool's directory is first on its sys.path, as a script's is
        env=tool_env(SQS_WORKER_TEMPLATE_LOCK="0", COOKIECUTTER_CONFIG=str(tmp_path / "cookiecutter-config.yaml")),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert baked.returncode == 0, f"the bake failed beside the tool's {callers_names()}:\n{baked.stderr[-3000:]}"
    project = tmp_path / "out" / "orders-worker"
    alerts = (project / "deploy" / "prometheus" / "alerts.yaml").read_text()
    assert "alert: SQSOldestMessageAgeHigh" in alerts, "the alerts table rendered"
    assert "replaced: []" in baked.stdout, f"the bake replaced the tool's own modules: {baked.stdout}"


def test_the_template_root_holds_only_local_extensions_in_python() -> None:
    """Cookiecutter needs one module at the root, the one `_extensions` names or older replay
    files do; everything else is the package's."""
    root_python = sorted(path.name for path in ROOT.glob("*.py"))
    assert root_python == ["local_extensions.py"], f"Python at the template root: {root_python}"
    lines = len((ROOT / "local_extensions.py").read_text().splitlines())
    assert lines <= 20, f"local_extensions.py is {lines} lines; at most 20 (a re-export of the extension)"
    extensions = json.loads((ROOT / "cookiecutter.json").read_text())["_extensions"]
    assert extensions == ["sqs_worker_template_jinja.extension.EngineExtension"], extensions


def test_the_template_s_python_imports_no_module_that_imports_it_back() -> None:
    """The template's root, its hooks, scripts, suite and benchmarks: no import cycle."""
    graph = measure_engine.repository_import_graph()
    assert "local_extensions.py" in graph and "tests/matrix.py" in graph, sorted(graph)[:20]
    assert "sqs_worker_template_jinja/alerts.py" in graph, "the package's modules are measured"
    found = measure_engine.cycles(graph)
    assert found == [], f"{len(found)} import cycle(s): {found}"


def test_the_cycle_check_sees_a_cycle_across_folders(tmp_path: Path) -> None:
    """The check of the check: a suite module importing a root module that imports it back
    through a package's relative import."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "pkg").mkdir()
    (tmp_path / "tests" / "matrix.py").write_text("import entry\n")
    (tmp_path / "entry.py").write_text("from pkg.inner import thing\n")
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "inner.py").write_text("from . import helper\n")
    (tmp_path / "pkg" / "helper.py").write_text("def f():\n    import matrix\n")  # seen in functions too
    folders = {".": (), "tests": (".",)}
    graph = measure_engine.repository_import_graph(tmp_path, folders)
    assert graph["tests/matrix.py"] == {"entry.py"}, graph
    assert graph["pkg/inner.py"] == {"pkg/helper.py"}, graph
    # pkg/helper.py's `import matrix` is not found from the root's folder: no edge, no cycle.
    assert measure_engine.cycles(graph) == [], graph
    (tmp_path / "pkg" / "helper.py").write_text("import entry\n")
    cycle = measure_engine.cycles(measure_engine.repository_import_graph(tmp_path, folders))
    assert cycle == [["entry.py", "pkg/helper.py", "pkg/inner.py"]], cycle


# Two renders of one checkout in one process, the checkout changed between them: what
# `cruft update` (and so `make upgrade`) does, rendering the commit a service was baked from
# and then the newest one in the same clone.
TWO_RENDERS = """
import pathlib, subprocess, sys
from cookiecutter.main import cookiecutter

template, out = sys.argv[1:]
first = cookiecutter(template, no_input=True, output_dir=out + "/first")
alerts = pathlib.Path(template, "sqs_worker_template_jinja", "alerts.py")
# A new size as well as a new time: a .pyc is checked against both, to the second.
alerts.write_text(alerts.read_text().replace("OLDEST_AGE_SECONDS = 600", "OLDEST_AGE_SECONDS = 900  # moved on"))
second = cookiecutter(template, no_input=True, output_dir=out + "/second")
"""


def template_copy(into: Path) -> Path:
    """What a bake reads of this checkout, as it is in the working tree (not a clone of its
    last commit: the helpers under test are the ones being changed)."""
    for name in ("cookiecutter.json", "local_extensions.py", "engine/pyproject.toml", LIMITS):
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, into / name)
    for name in ("hooks", "sqs_worker_template_jinja", "{{cookiecutter.project_slug}}"):
        shutil.copytree(ROOT / name, into / name, ignore=shutil.ignore_patterns("__pycache__"))
    return into


def test_a_second_render_in_the_same_process_uses_the_helpers_as_they_are_now(tmp_path: Path) -> None:
    """cruft renders the old commit, moves its clone to the new one and renders again: the
    second render must read the new commit's helpers, not the modules the first one imported
    (a new alert threshold never reached a service through `make upgrade`)."""
    clone = template_copy(tmp_path / "template")
    assert "OLDEST_AGE_SECONDS = 600" in (clone / "sqs_worker_template_jinja" / "alerts.py").read_text()
    (tmp_path / "renders.py").write_text(TWO_RENDERS, encoding="utf-8")
    harness(tmp_path)  # the cookiecutter configuration: clones and replays in tmp_path
    done = subprocess.run(
        [sys.executable, str(tmp_path / "renders.py"), str(clone), str(tmp_path / "out")],
        cwd=tmp_path,
        env=tool_env(SQS_WORKER_TEMPLATE_LOCK="0", COOKIECUTTER_CONFIG=str(tmp_path / "cookiecutter-config.yaml")),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rules = "deploy/prometheus/alerts.yaml"
    first = (tmp_path / "out" / "first" / "orders-worker" / rules).read_text()
    second = (tmp_path / "out" / "second" / "orders-worker" / rules).read_text()
    assert "queue_oldest_message_seconds" in first and "> 600" in first, "the first render's threshold"
    assert "> 900" in second and "> 600" not in second, "the second render kept the first one's helpers"


def test_cruft_update_brings_in_a_change_of_the_helpers(tmp_path: Path) -> None:
    """End to end, as `make upgrade` runs it: a service created from a clone of this
    repository's last commit; the template moves on with a new alert threshold; `cruft
    update` brings the threshold in."""
    repo = tmp_path / "template.git"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(repo)], check=True, timeout=120)
    harness(tmp_path)
    env = tool_env(SQS_WORKER_TEMPLATE_LOCK="0", COOKIECUTTER_CONFIG=str(tmp_path / "cookiecutter-config.yaml"))

    def run(*cmd: str, cwd: Path) -> str:
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, f"{cmd}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
        return done.stdout

    out, extra = str(tmp_path / "out"), '{"engine_source": "git"}'
    run("cruft", "create", "--no-input", "--output-dir", out, "--extra-context", extra, repo.as_uri(), cwd=tmp_path)
    project = tmp_path / "out" / "orders-worker"
    rules = project / "deploy" / "prometheus" / "alerts.yaml"
    assert 'queue_oldest_message_seconds{job="orders-worker"}) > 600' in rules.read_text()
    identity = ("-c", "user.email=o@example.com", "-c", "user.name=Owner")
    run("git", "init", "--quiet", cwd=project)
    run("git", "add", "-A", cwd=project)
    run("git", *identity, "commit", "--quiet", "-m", "as generated", cwd=project)

    alerts = repo / "sqs_worker_template_jinja" / "alerts.py"
    alerts.write_text(alerts.read_text().replace("OLDEST_AGE_SECONDS = 600", "OLDEST_AGE_SECONDS = 900"))
    run("git", *identity, "commit", "--quiet", "-am", "a new threshold", cwd=repo)
    run("cruft", "update", "--skip-apply-ask", cwd=project)
    assert 'queue_oldest_message_seconds{job="orders-worker"}) > 900' in rules.read_text(), "the update missed it"
