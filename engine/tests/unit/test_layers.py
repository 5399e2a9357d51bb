"""The engine's folders are its layers, and so are the folders within them; imports only
point down: each layer can be read, and tested, on top of the ones below it. No module
imports one that imports it back (function-level and type-checking imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

import sqs_worker_engine

PACKAGE = Path(sqs_worker_engine.__file__).parent

# Highest first. A module may import its own layer and any layer after it in this list,
# never one before it. A layer is a folder ("runtime"), a folder within one
# ("runtime.admission"), or a module that sits below the rest of its folder
# ("runtime.reporting", what the runtime's folders report through; "base.sqs", the client
# seam that telemetry observes): a module is in the longest of these its name starts with.
# The package's top level is its public face: the paths services import.
LAYERS = (
    "",
    "fleet",
    "fleet.autoscalers",
    "fleet.load",
    "fleet.sqs",
    "doubles",
    "ops",
    "process",
    "process.settings",
    "process.platform",
    "process.host",
    "runtime",
    "runtime.admission",
    "runtime.handling",
    "runtime.settling",
    "runtime.reporting",
    "runtime.protections",
    "handlers",
    "formats",
    "base.sqs",
    "base.telemetry",
    "base",
)
RANK = {name: rank for rank, name in enumerate(LAYERS)}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> str:
    """sqs_worker_engine.runtime.pool -> runtime; ...runtime.admission.gate ->
    runtime.admission; ...runtime.reporting -> runtime.reporting; sqs_worker_engine.cli ->
    "" (the face)."""
    name = module.removeprefix("sqs_worker_engine").removeprefix(".")
    return max((entry for entry in LAYERS if name == entry or name.startswith(entry + ".")), key=len, default="")


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
    """Every layer holds a module; the test would pass vacuously otherwise."""
    folders = {layer(name) for name in imports()}
    assert folders == set(LAYERS), folders ^ set(LAYERS)


def test_every_folder_is_a_layer_of_its_own() -> None:
    """A new folder is named in LAYERS, where its imports say it belongs: otherwise its
    modules would count as its parent's, and an import between them would go unchecked."""
    folders = {module_name(path).removeprefix("sqs_worker_engine.") for path in PACKAGE.rglob("*/__init__.py")}
    assert folders <= set(LAYERS), sorted(folders - set(LAYERS))


def test_no_import_climbs_to_a_higher_layer() -> None:
    upward = sorted(
        f"{name} -> {used}"
        for name, uses in imports().items()
        for used in uses
        if RANK[layer(used)] < RANK[layer(name)]
    )
    assert not upward, f"{len(upward)} imports from a lower layer into a higher one: {upward[:10]}"


def test_the_layer_check_sees_an_upward_import() -> None:
    """The check of the check: base importing the runtime is caught, and within the runtime
    the protections importing admission, or reporting importing settling; within the fleet
    simulator, its SQS importing an autoscaler."""
    assert RANK[layer("sqs_worker_engine.runtime.pool")] < RANK[layer("sqs_worker_engine.base.clock")]
    assert layer("sqs_worker_engine.cli") == "" and layer("sqs_worker_engine.fleet.cli") == "fleet"
    assert RANK[layer("sqs_worker_engine.fleet.autoscalers.keda")] < RANK[layer("sqs_worker_engine.fleet.sqs.queue")]
    assert layer("sqs_worker_engine.runtime.admission.gate") == "runtime.admission"
    assert RANK["runtime.admission"] < RANK[layer("sqs_worker_engine.runtime.protections.throttle")]
    assert RANK[layer("sqs_worker_engine.runtime.settling.acker")] < RANK[layer("sqs_worker_engine.runtime.reporting")]
    assert layer("sqs_worker_engine.runtime.reporting") == "runtime.reporting"
    assert layer("sqs_worker_engine.runtime.reportings") == "runtime", "a name that only begins like a layer's"


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
    """A folder's __init__ is a docstring: importing sqs_worker_engine.process.host.signals
    (what entry.py does before SIGTERM is handled) must not load the rest of the process
    layer. The settings are a package whose face is `load_settings` and its types."""
    for path in PACKAGE.rglob("*/__init__.py"):
        if path.parent == PACKAGE / "process" / "settings":
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
