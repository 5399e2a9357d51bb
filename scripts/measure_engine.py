"""Measure the engine's shape against its targets: class and function sizes, import cycles,
imports that climb the layers, long test files, the tree as a newcomer reads it (its top
level, modules per folder, module sizes, abstract classes with one subclass, deprecated
paths and imports of old ones, the caps over bench/ and scripts/: engine_tree.py), and the
way one message takes from its receive to its delete.

    .venv/bin/python scripts/measure_engine.py

Standard library only (the message's way runs the engine itself, installed in the venv).
It reports; it never judges: the exit status is 0 whatever it finds, and each target is
printed as met or not met.
"""

from __future__ import annotations

import ast
import asyncio
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

if __package__:  # imported as scripts.measure_engine (the template's tests do)
    from . import engine_tree
else:  # run as a script: its folder is on sys.path
    import engine_tree  # type: ignore[no-redef]

MAX_CLASS, MAX_FUNCTION = engine_tree.MAX_CLASS, engine_tree.MAX_FUNCTION

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "engine" / "src" / "sqs_worker_engine"
TEST_DIRS = (ROOT / "tests", ROOT / "engine" / "tests")
MAX_TEST_FILE = 800
MAX_WAY_MODULES = 6  # the modules a message passes from receive to settled


def _layer_order() -> tuple[str, ...]:
    """The engine's folders, highest first, as its layer test defines them (one place)."""
    test = ROOT / "engine" / "tests" / "unit" / "test_layers.py"
    for node in ast.parse(test.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "LAYERS" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise SystemExit(f"{test} defines no LAYERS")


# layer -> rank, the lowest 0: a folder ("runtime"), a folder within one
# ("runtime.admission") or a module below the rest of its folder ("runtime.reporting");
# "" is the package's top level, its public face
LAYERS: dict[str, int] = {name: rank for rank, name in enumerate(reversed(_layer_order()))}


@dataclass(frozen=True)
class Sized:
    where: str  # module:name
    lines: int


def modules() -> dict[str, Path]:
    """Every engine module by dotted name relative to the package (`fleet.sqs.queue`, `fleet`)."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts.pop()
        found[".".join(parts)] = path
    return found


def sizes(mods: dict[str, Path]) -> tuple[list[Sized], list[Sized]]:
    """Every class and every function (methods, nested ones too), with its length in lines."""
    classes: list[Sized] = []
    functions: list[Sized] = []
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                end = node.end_lineno or node.lineno
                sized = Sized(f"{name}:{node.name}", end - node.lineno + 1)
                (classes if isinstance(node, ast.ClassDef) else functions).append(sized)
    return classes, functions


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports that run: at module level or in functions, not under `if TYPE_CHECKING:`."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _resolve(importer: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    """The engine modules one import statement names."""
    targets: set[str] = set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.startswith("sqs_worker_engine."):
                targets.add(alias.name.removeprefix("sqs_worker_engine."))
        return targets & known
    if node.level:
        here = [] if importer == "__init__" else importer.split(".")[: None if is_package else -1]
        base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
        if node.level - 1 > len(here):
            return set()
        parts = [*base, *(node.module.split(".") if node.module else [])]
    elif node.module == "sqs_worker_engine" or (node.module or "").startswith("sqs_worker_engine."):
        parts = node.module.split(".")[1:] if node.module else []
    else:
        return set()
    stem = ".".join(parts)
    for alias in node.names:
        child = f"{stem}.{alias.name}" if stem else alias.name
        if child in known:  # `from . import settings`, `from .fleet import queue`
            targets.add(child)
        elif stem:
            targets.add(stem)
    return targets & known


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    known = set(mods)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        uses: set[str] = set()
        for node in _import_nodes(ast.parse(path.read_text(), str(path))):
            uses |= _resolve(name, is_package, node, known)
        graph[name] = uses - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for used in sorted(graph[node]):
            if used not in index:
                visit(used)
                low[node] = min(low[node], low[used])
            elif used in on_stack:
                low[node] = min(low[node], index[used])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


# -- the rest of the repository's Python -------------------------------------------------

# Each folder of Python the repository runs, as the tools that run it put it on sys.path,
# with the folders its imports are also found in. "." is the template's root (its
# local_extensions.py and package, scripts/): cookiecutter and cruft append it, pytest puts
# it first (pyproject.toml's pythonpath). The engine's package is measured above; the
# generated service's Python is Jinja source, measured in each bake by its own tools.
SOURCE_FOLDERS: dict[str, tuple[str, ...]] = {
    ".": (),
    "hooks": (),  # run alone, as cookiecutter renders them
    "tests": (".",),  # the template's suite, the root on its path
    "bench": ("bench/contenders", "."),  # run.py puts the contenders on its path
    "bench/contenders": (),
    "engine/tests": (),  # a package: its modules import each other relatively
}
NOT_MEASURED = ("engine/src", "{{cookiecutter.project_slug}}")
ROOT_PYTHON_LINES = 20  # the template root's Python: local_extensions.py, a re-export


def _folder_modules(root: Path, folder: str, folders: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """A folder's modules by the dotted name its imports use -> their path from `root`; a
    nested source folder's files (and hidden or unmeasured ones) are not the folder's."""
    base = (root / folder).resolve()
    skipped = {(root / other).resolve() for other in [*folders, *NOT_MEASURED] if other != folder}
    found: dict[str, str] = {}
    for here, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")) and Path(here, d).resolve() not in skipped)
        for file in sorted(f for f in files if f.endswith(".py")):
            path = Path(here, file)
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if parts:
                found[".".join(parts)] = path.relative_to(root.resolve()).as_posix()
    return found


def _imported_names(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted names one import statement loads, relative ones made absolute."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    stem = node.module or ""
    if node.level:
        here = module.split(".")[: None if is_package else -1]
        if node.level - 1 > len(here):
            return []
        kept = here[: len(here) - (node.level - 1)]
        stem = ".".join([*kept, *([node.module] if node.module else [])])
    # `from a import b`: the module a.b if there is one, else a (_find falls back to it).
    return [f"{stem}.{alias.name}" if stem else alias.name for alias in node.names]


def _find(dotted: str, visible: list[dict[str, str]]) -> str | None:
    """The module a dotted name loads, from the first folder on the path that has it: `a.b`
    if it is a module, else `a` (`from a import f`, f a name in a)."""
    parts = dotted.split(".")
    for modules in visible:
        for n in range(len(parts), 0, -1):
            if (prefix := ".".join(parts[:n])) in modules:
                return modules[prefix]
    return None


def repository_import_graph(
    root: Path = ROOT, folders: dict[str, tuple[str, ...]] = SOURCE_FOLDERS
) -> dict[str, set[str]]:
    """path -> the paths it imports, for every module of `folders` (module-level and
    function-level imports, not those under `if TYPE_CHECKING:`)."""
    by_folder = {folder: _folder_modules(root, folder, folders) for folder in folders if (root / folder).is_dir()}
    graph: dict[str, set[str]] = {}
    for folder, modules in by_folder.items():
        visible = [modules, *(by_folder.get(extra, {}) for extra in folders[folder])]
        for name, where in modules.items():
            path = root / where
            uses: set[str] = set()
            for node in _import_nodes(ast.parse(path.read_text(), str(path))):
                for dotted in _imported_names(name, path.name == "__init__.py", node):
                    found = _find(dotted, visible)
                    if found:
                        uses.add(found)
            graph[where] = uses - {where}
    return graph


def root_python(root: Path = ROOT) -> dict[str, int]:
    """The template root's Python files and their lines (cookiecutter needs one)."""
    return {path.name: len(path.read_text().splitlines()) for path in sorted(root.glob("*.py"))}


def rank(module: str) -> int | None:
    """A module's layer: the longest layer its name starts with, or the public face's for
    one at the top level."""
    layer = max(
        (name for name in LAYERS if name and (module == name or module.startswith(name + "."))), key=len, default=""
    )
    return LAYERS.get(layer)


def climbing_imports(graph: dict[str, set[str]]) -> tuple[list[str], list[str]]:
    """Imports from a lower layer into a higher one, and the modules no layer names."""
    upward = []
    for importer, used in sorted(graph.items()):
        for target in sorted(used):
            low, high = rank(importer), rank(target)
            if low is not None and high is not None and high > low:
                upward.append(f"{importer} (layer {low}) imports {target} (layer {high})")
    unranked = sorted(m for m in graph if rank(m) is None)
    return upward, unranked


def long_test_files() -> list[Sized]:
    found = []
    for folder in TEST_DIRS:
        for path in sorted(folder.rglob("*.py")):
            count = len(path.read_text().splitlines())
            if count > MAX_TEST_FILE:
                found.append(Sized(str(path.relative_to(ROOT)), count))
    return found


# -- one message's way -----------------------------------------------------------------


class Way:
    """What holds the message, and the engine's calls it is handed to: the stops.

    What holds the message: its dict as SQS answered it, and every engine object found
    holding one of these (its delivery, ticket, job, the pool's run of it...). A stop is a
    call that is handed one of them: the message's hand-offs, not every helper called
    meanwhile (the clock, a metric, the next poll's bookkeeping)."""

    # The world around the engine, not stops on the way: the SQS model, the virtual clock,
    # and the memory worker's set-up.
    OUTSIDE = frozenset(
        {"sqs_worker_engine.doubles.memory", "sqs_worker_engine.doubles.vtime", "sqs_worker_engine.testing"}
    )

    def __init__(self) -> None:
        self.stops: list[str] = []
        self.recording = False
        self.carriers: dict[int, object] = {}
        self.message_ids: set[str] = set()

    def received(self, answer: dict[str, Any]) -> None:
        """SQS's answer to a receive: the first message handed out is the one followed."""
        if answer.get("Messages") and not self.message_ids:
            for message in answer["Messages"]:
                self.carriers[id(message)] = message
                self.message_ids.add(message["MessageId"])
            self.recording = True

    def is_the_message(self, value: object) -> bool:
        """The message's dict, or a copy of it (the poller keeps a copy of SQS's answer)."""
        return isinstance(value, dict) and value.get("MessageId") in self.message_ids

    def holds(self, value: object) -> bool:
        if id(value) in self.carriers or self.is_the_message(value):
            return True
        if isinstance(value, list | tuple):
            return any(id(item) in self.carriers or self.is_the_message(item) for item in value)
        attributes = getattr(value, "__dict__", None)
        if attributes is None and hasattr(type(value), "__slots__"):
            attributes = {n: getattr(value, n, None) for n in getattr(type(value), "__slots__", ())}
        return bool(attributes) and any(id(v) in self.carriers for v in attributes.values())

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        """sys.setprofile's hook: a call into the engine handed what holds the message."""
        if event != "call" or not self.recording:
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("sqs_worker_engine.") or module in self.OUTSIDE:
            return
        code = frame.f_code
        arguments = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        handed = [frame.f_locals.get(name) for name in arguments if name != "self"]
        carried = [value for value in handed if value is not None and self.holds(value)]
        if carried:
            for value in carried:
                self.carriers[id(value)] = value
            self.stops.append(f"{module.removeprefix('sqs_worker_engine.')}.{code.co_name}")


def message_way() -> list[str]:
    """module.function for each call into an engine module that is handed the message (or
    an object carrying it), in order, from the ReceiveMessage that hands it out to the
    DeleteMessageBatch that settles it (`Way`).
    The real Worker on the in-memory SQS, on virtual time (testing.memory_worker)."""
    sys.path.insert(0, str(PACKAGE.parent))
    from sqs_worker_engine import Router
    from sqs_worker_engine.doubles import vtime
    from sqs_worker_engine.doubles.memory import MemorySQS
    from sqs_worker_engine.testing import memory_worker

    way = Way()

    class Watched(MemorySQS):
        """Hands the receive's answer to `way`; the first delete ends the recording."""

        def __init__(self, settled: asyncio.Event) -> None:
            super().__init__()
            self.settled = settled

        async def receive_message(self, **params: Any) -> dict[str, Any]:
            answer = await super().receive_message(**params)
            if not self.settled.is_set():
                way.received(answer)
            return answer

        async def delete_message_batch(self, **params: Any) -> dict[str, Any]:
            way.recording = False
            self.settled.set()
            return await super().delete_message_batch(**params)

    async def run() -> None:
        sqs = Watched(asyncio.Event())
        sqs.create_queue("jobs")
        sqs.put("jobs", '{"n": 1}')
        router = Router()

        @router.handler("jobs")
        async def handle(job: Any) -> None:
            return None

        running = memory_worker(sqs, router, "jobs", name="measure", WORKER_CONCURRENCY="1", WORKER_POLLERS="1")
        sys.setprofile(way.profile)
        try:
            await asyncio.wait_for(sqs.settled.wait(), 600)
        finally:
            sys.setprofile(None)
            await running.stop()

    logging.disable(logging.WARNING)
    vtime.run(run())
    return way.stops


def collapsed(stops: list[str]) -> list[str]:
    """The stops, a run of the same one counted once."""
    return [stop for i, stop in enumerate(stops) if i == 0 or stops[i - 1] != stop]


def climbs(stops: list[str]) -> int:
    """How many times the way returns to a module it had left."""
    left: set[str] = set()
    count = 0
    previous: str | None = None
    for stop in stops:
        module = stop.rsplit(".", 1)[0]
        if module != previous:
            if module in left:
                count += 1
            if previous is not None:
                left.add(previous)
            previous = module
    return count


# -- the report ------------------------------------------------------------------------


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def main() -> int:
    mods = modules()
    classes, functions = sizes(mods)
    big_classes = sorted((c for c in classes if c.lines > MAX_CLASS), key=lambda c: -c.lines)
    big_functions = sorted((f for f in functions if f.lines > MAX_FUNCTION), key=lambda f: -f.lines)
    admission = sorted((c for c in classes if c.where.split(":")[0].endswith("admission")), key=lambda c: -c.lines)

    print(f"== Engine classes over {MAX_CLASS} lines: {len(big_classes)} (target: none, {verdict(not big_classes)})")
    for c in big_classes:
        print(f"  {c.where}  {c.lines}")
    print("   admission's classes: " + ", ".join(f"{c.where.split(':')[1]} {c.lines}" for c in admission))

    print(f"\n== Engine functions over {MAX_FUNCTION} lines: {len(big_functions)} ", end="")
    print(f"(target: none, {verdict(not big_functions)})")
    for f in big_functions:
        print(f"  {f.where}  {f.lines}")

    graph = import_graph(mods)
    found = cycles(graph)
    print(f"\n== Import cycles among engine modules: {len(found)} (target: none, {verdict(not found)})")
    for component in found:
        print("  " + " <-> ".join(component))

    everywhere = cycles(repository_import_graph())
    print(f"\n== Import cycles in the rest of the repository's Python: {len(everywhere)} ", end="")
    print(f"(target: none, {verdict(not everywhere)})")
    for component in everywhere:
        print("  " + " <-> ".join(component))

    at_root = root_python()
    only_entry = list(at_root) == ["local_extensions.py"] and sum(at_root.values()) <= ROOT_PYTHON_LINES
    print(f"\n== Python at the template root: {sum(at_root.values())} lines in {len(at_root)} file(s) ", end="")
    print(f"(target: local_extensions.py alone, at most {ROOT_PYTHON_LINES} lines, {verdict(only_entry)})")
    for name, count in at_root.items():
        print(f"  {name}  {count}")

    upward, unranked = climbing_imports(graph)
    print(f"\n== Imports from a lower layer into a higher one: {len(upward)} (target: none, {verdict(not upward)})")
    for line in upward:
        print("  " + line)
    if unranked:
        print("   modules no layer names (LAYERS in this script): " + ", ".join(unranked))

    engine_tree.report()

    long_tests = long_test_files()
    print(f"\n== Test files over {MAX_TEST_FILE} lines: {len(long_tests)} ", end="")
    print(f"(target: none, {verdict(not long_tests)})")
    for t in long_tests:
        print(f"  {t.where}  {t.lines}")

    print("\n== A message's way from receive to settled")
    try:
        stops = collapsed(message_way())
    except Exception as exc:  # noqa: BLE001 - a report, not a judgement: say what stopped it
        print(f"  not measured: {type(exc).__name__}: {exc}")
        return 0
    distinct = sorted({stop.rsplit(".", 1)[0] for stop in stops})
    print(f"  stops ({len(stops)}, a run of the same stop counted once):")
    for i, stop in enumerate(stops, 1):
        print(f"  {i:4d} {stop}")
    print(
        f"  distinct modules: {len(distinct)} (target: at most {MAX_WAY_MODULES}, {verdict(len(distinct) <= MAX_WAY_MODULES)})"
    )
    print(f"    {', '.join(distinct)}")
    print(f"  climbs back up (returns to a module it had left): {climbs(stops)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
