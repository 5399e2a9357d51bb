"""The engine's folders are its layers, and imports only point down: each folder can be read,
and tested, on top of the ones below it. No module imports one that imports it back
(function-level and type-checking imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

import sqs_worker_engine

PACKAGE = Path(sqs_worker_engine.__file__).parent

# Highest first. A module may import its own folder and any folder after it in this list,
# never one before it. The package's top level is its public face: the paths generated
# services import (and the deprecated aliases of modules that moved).
LAYERS = ("", "fleet", "doubles", "ops", "process", "runtime", "handlers", "formats", "base")
RANK = {name: rank for rank, name in enumerate(LAYERS)}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> str:
    """sqs_worker_engine.runtime.pool -> runtime; sqs_worker_engine.cli -> "" (the face)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in RANK) else ""


def imports() -> dict[str, set[str]]:
    """module -> the engine modules it imports (absolute names)."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        uses: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                candidates = [target, *(f"{target}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            else:
                continue
            uses.update(c for c in candidates if c in modules and c != name)
        graph[name] = uses
    return graph


def test_the_engine_has_its_layers() -> None:
    """Every module sits in a known folder; the test would pass vacuously otherwise."""
    folders = {layer(name) for name in imports()}
    assert folders == set(LAYERS), folders ^ set(LAYERS)


def test_no_import_climbs_to_a_higher_layer() -> None:
    upward = sorted(
        f"{name} -> {used}"
        for name, uses in imports().items()
        for used in uses
        if RANK[layer(used)] < RANK[layer(name)]
    )
    assert not upward, f"{len(upward)} imports from a lower layer into a higher one: {upward[:10]}"


def test_the_layer_check_sees_an_upward_import() -> None:
    """The check of the check: base importing the runtime is caught."""
    assert RANK[layer("sqs_worker_engine.runtime.pool")] < RANK[layer("sqs_worker_engine.base.clock")]
    assert layer("sqs_worker_engine.cli") == "" and layer("sqs_worker_engine.fleet.cli") == "fleet"


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


def test_the_layer_folders_import_nothing_themselves() -> None:
    """A folder's __init__ is a docstring: importing sqs_worker_engine.process.host.signals (what
    entry.py does before SIGTERM is handled) must not load the rest of the process layer."""
    for path in PACKAGE.glob("*/__init__.py"):
        if path.parent.name == "fleet":
            continue
        tree = ast.parse(path.read_text())
        assert not [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)], path


def test_the_entry_point_and_signals_stay_light() -> None:
    """entry.py keeps SIGTERM before anything heavy loads: at import it may use signals only."""
    graph = imports()
    assert graph["sqs_worker_engine.process.host.signals"] == set()
    tree = ast.parse((PACKAGE / "entry.py").read_text())
    top: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level:
            top.add(f"{node.module}")
    assert top <= {"process.host.signals", "process.host", "process"}, top
