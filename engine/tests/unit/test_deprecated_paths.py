"""The paths of the modules that moved into layer folders still import, as the same module
object (a patch made through either name holds), with a DeprecationWarning; the emulator's
command keeps its name."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import sqs_worker_engine

PACKAGE = Path(sqs_worker_engine.__file__).parent


def aliases() -> dict[str, str]:
    """old name -> the module it stands for, read from each alias file at the top level."""
    found: dict[str, str] = {}
    for path in PACKAGE.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.names[0].asname == "_moved":
                found[path.stem] = f"{node.module}.{node.names[0].name}"
    return found


def test_the_documented_old_paths_are_aliases() -> None:
    names = aliases()
    assert {"producer", "batches", "memory", "emulators", "settings", "worker", "errors"} <= set(names)
    for old, new in names.items():
        assert new.startswith("sqs_worker_engine.") and new.count(".") >= 2, (old, new)
        assert new.rsplit(".", 1)[1] == old


def test_an_old_path_is_the_moved_module_and_warns() -> None:
    script = (
        "import importlib, warnings\n"
        f"names = {aliases()!r}\n"
        "for old, new in names.items():\n"
        "    with warnings.catch_warnings(record=True) as caught:\n"
        "        warnings.simplefilter('always')\n"
        "        module = importlib.import_module('sqs_worker_engine.' + old)\n"
        "    assert module is importlib.import_module(new), old\n"
        "    assert any(w.category is DeprecationWarning and new in str(w.message) for w in caught), old\n"
        "from sqs_worker_engine.producer import open_producer\n"
        "from sqs_worker_engine.ops.producer import open_producer as moved\n"
        "assert open_producer is moved\n"
        "print(len(names))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == len(aliases())


def test_the_emulator_command_keeps_its_name() -> None:
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
