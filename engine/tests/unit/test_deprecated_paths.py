"""The engine's front door: its top level holds only the public face, and the old paths
that services baked before 0.6 import are served by one alias table (`MOVED`), as the
moved module itself (a patch made through either name holds), with a DeprecationWarning
naming the new path and the release that removes the old one; the emulator's command
keeps its names. Any other old path is gone."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import sqs_worker_engine

PACKAGE = Path(sqs_worker_engine.__file__).parent
# Imported by the generated services of the released templates (0.3 to 0.6): their tests,
# Makefiles and READMEs.
RELEASED = {"batches", "emulators", "limits", "localstack", "producer", "tracing"}


def run(script: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *flags, "-c", script], capture_output=True, text=True, timeout=120)


def test_the_top_level_holds_only_the_public_face() -> None:
    files = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert files == ["__init__.py", "__main__.py", "cli.py", "entry.py", "testing.py"], files


def test_the_table_serves_what_released_services_import_and_names_modules_that_exist() -> None:
    assert set(sqs_worker_engine.MOVED) >= RELEASED, sorted(RELEASED - set(sqs_worker_engine.MOVED))
    for old, new in sqs_worker_engine.MOVED.items():
        assert new.startswith("sqs_worker_engine.") and importlib.util.find_spec(new) is not None, (old, new)
        assert not (PACKAGE / f"{old}.py").exists(), f"{old}.py: the table serves this path"
    assert sqs_worker_engine.REMOVED_IN == "1.0"


def test_an_old_path_is_the_moved_module_and_warns_where_it_is_imported() -> None:
    script = (
        "import importlib, sys, warnings\n"
        "import sqs_worker_engine\n"
        "for old, new in sqs_worker_engine.MOVED.items():\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        exec(f'import sqs_worker_engine.{old}', {})  # an import statement, as a service's\n"
        "    assert sys.modules['sqs_worker_engine.' + old] is importlib.import_module(new), old\n"
        "    said = [w for w in caught if w.category is DeprecationWarning]\n"
        "    assert len(said) == 1 and new in str(said[0].message) and '1.0' in str(said[0].message), old\n"
        "    assert said[0].filename == '<string>', (old, said[0].filename)  # the importer's line, not importlib's\n"
        "from sqs_worker_engine.producer import open_producer\n"
        "from sqs_worker_engine.ops.producer import open_producer as moved\n"
        "from sqs_worker_engine import tracing\n"
        "from sqs_worker_engine.base.telemetry import tracing as moved_tracing\n"
        "assert open_producer is moved and tracing is moved_tracing\n"
        "print(len(sqs_worker_engine.MOVED))\n"
    )
    done = run(script)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == len(sqs_worker_engine.MOVED)


def test_an_old_path_the_table_does_not_name_is_gone() -> None:
    """`settings` was an alias of process.settings until this change: no service imported it."""
    done = run("import sqs_worker_engine.settings")
    assert done.returncode == 1 and "ModuleNotFoundError: No module named 'sqs_worker_engine.settings'" in done.stderr


def test_the_emulator_command_keeps_its_names() -> None:
    for name in ("emulators", "localstack", "doubles.emulators"):
        done = subprocess.run(
            [sys.executable, "-W", "error::DeprecationWarning", "-m", f"sqs_worker_engine.{name}", "run"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        # `run` without a command: the module's own usage line, so its main ran
        assert done.returncode == 2, (name, done.stderr)
        assert "usage: python -m sqs_worker_engine" in done.stderr, (name, done.stderr)


def test_an_old_path_that_is_no_command_says_so() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sqs_worker_engine.producer"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and "sqs_worker_engine.producer" in done.stderr, done.stderr
