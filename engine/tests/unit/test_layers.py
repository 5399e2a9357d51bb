"""The engine's modules import one another without a cycle (function-level imports
included): each can be read, and tested, on top of what it uses."""

from __future__ import annotations

import ast
from pathlib import Path

import sqs_worker_engine

PACKAGE = Path(sqs_worker_engine.__file__).parent


def imports() -> dict[str, set[str]]:
    modules = {path.stem for path in PACKAGE.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.glob("*.py"):
        uses: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    uses.add(node.module.split(".")[0])
                else:
                    uses.update(alias.name for alias in node.names if alias.name in modules)
        graph[path.stem] = uses & modules - {path.stem}
    return graph


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = imports()
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        for used in sorted(graph[module]):
            if used in path:
                cycles.append([*path[path.index(used) :], used])
            elif not (len(path) > len(graph)):
                visit(used, [*path, used])

    for module in graph:
        visit(module, [module])
    assert not cycles, f"import cycles: {sorted({' -> '.join(c) for c in cycles})[:5]}"


def test_the_entry_point_and_signals_stay_light() -> None:
    """entry.py keeps SIGTERM before anything heavy loads: at import it may use signals.py only."""
    graph = imports()
    assert graph["signals"] == set()
    tree = ast.parse((PACKAGE / "entry.py").read_text())
    top = {n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.level == 1}
    assert top <= {"signals"}, top
