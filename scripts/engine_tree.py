"""The engine's tree as a newcomer reads it, for scripts/measure_engine.py: what its top
level holds, how many modules each folder holds, modules, classes and functions past
their caps (in bench/ and scripts/ too), abstract classes with a single subclass, files
that are only a deprecated path, and imports in the repository of engine paths that are
gone or only served by the old paths' table.

Standard library only; it reads files and never imports the engine.
"""

from __future__ import annotations

import ast
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "engine" / "src" / "sqs_worker_engine"
MAX_CLASS = 350
MAX_FUNCTION = 80
MAX_MODULE = 600
MAX_FOLDER_MODULES = 8  # .py files in one folder, its __init__ included (a subfolder counts on its own)
PUBLIC_FACE = ("__init__.py", "__main__.py", "cli.py", "entry.py", "testing.py")
MAX_TOP_LEVEL = 7  # the public face, and room for what a command needs
# Files that name the old paths on purpose: the table that serves them, and its test.
OLD_PATH_TABLE = ("engine/src/sqs_worker_engine/__init__.py", "engine/tests/unit/test_deprecated_paths.py")
# Recorded figures (profiles of earlier runs) and changelogs say what was, not what to import.
NOT_READ = re.compile(r"(^|/)CHANGELOG\.md$|^docs/benchmarks.*|\.json$|\.lock$")
READ_SUFFIXES = (".py", ".md", ".toml", ".yml", ".yaml", ".cfg", ".txt", ".ini", ".sh", "Makefile", "Dockerfile")

ENGINE = r"sqs_worker_engine(?:\.\w+)*"
FROM_IMPORT = re.compile(rf"\bfrom ({ENGINE}) import (?:\(([^)]*)\)|([\w, ]+))")
IMPORT = re.compile(rf"(?<![\w.])import ({ENGINE})")
RUN_MODULE = re.compile(rf"-m\"?,?\s*\"?({ENGINE})")


@dataclass(frozen=True)
class Sized:
    where: str
    lines: int


def engine_modules() -> dict[str, Path]:
    """Every engine module and package by its dotted name in the package ("" is the package)."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def top_level() -> list[str]:
    return sorted(path.name for path in PACKAGE.glob("*.py"))


def folders() -> dict[str, int]:
    """Each engine folder (from the package, "" itself) and the .py files it holds."""
    return {
        folder.relative_to(PACKAGE).as_posix().replace(".", ""): len(list(folder.glob("*.py")))
        for folder in [PACKAGE, *sorted(p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__")]
        if any(folder.glob("*.py"))
    }


def sized(files: dict[str, Path]) -> tuple[list[Sized], list[Sized], list[Sized]]:
    """Modules, classes and functions (methods and nested ones too) with their lines."""
    modules, classes, functions = [], [], []
    for name, path in files.items():
        text = path.read_text()
        modules.append(Sized(name, len(text.splitlines())))
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                (classes if isinstance(node, ast.ClassDef) else functions).append(Sized(f"{name}:{node.name}", lines))
    return modules, classes, functions


def over_caps(files: dict[str, Path]) -> tuple[list[Sized], list[Sized], list[Sized]]:
    """Modules over MAX_MODULE lines, classes over MAX_CLASS, functions over MAX_FUNCTION."""
    modules, classes, functions = sized(files)

    def longest(items: list[Sized], cap: int) -> list[Sized]:
        return sorted((s for s in items if s.lines > cap), key=lambda s: -s.lines)

    return longest(modules, MAX_MODULE), longest(classes, MAX_CLASS), longest(functions, MAX_FUNCTION)


def python_files(*folders: str) -> dict[str, Path]:
    return {
        path.relative_to(ROOT).as_posix(): path for folder in folders for path in sorted((ROOT / folder).rglob("*.py"))
    }


def _is_abstract(node: ast.ClassDef) -> bool:
    bases = {ast.unparse(base) for base in node.bases} | {ast.unparse(k.value) for k in node.keywords}
    methods = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    decorated = {ast.unparse(d).rsplit(".", 1)[-1] for m in methods for d in m.decorator_list}
    return bool(bases & {"ABC", "abc.ABC", "ABCMeta", "abc.ABCMeta"}) or "abstractmethod" in decorated


def abstract_with_one_subclass() -> list[str]:
    """Abstract classes (ABC, or with an abstract method) of the engine that exactly one of
    its classes subclasses: one class spread over two."""
    classes = [
        (name, node)
        for name, path in engine_modules().items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    ]
    found = []
    for name, node in classes:
        if _is_abstract(node):
            subclasses = [f"{m}:{c.name}" for m, c in classes if node.name in {ast.unparse(b) for b in c.bases}]
            if len(subclasses) == 1:
                found.append(f"{name}:{node.name} (only {subclasses[0]})")
    return found


def deprecated_files() -> list[str]:
    return [
        path.relative_to(ROOT).as_posix()
        for path in sorted(PACKAGE.rglob("*.py"))
        if "Deprecated path" in path.read_text()
    ]


def _defines(path: Path) -> set[str]:
    """The names a module binds at its top level (what `from it import name` may take)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if any(isinstance(t, ast.Name) and t.id in ("__all__", "_EXPORTS") for t in targets) and node.value:
                names |= {n for n in ast.literal_eval(node.value) if isinstance(n, str)}
    return names | {"__version__"} if path == PACKAGE / "__init__.py" else names


def _repository_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False).stdout
    found = []
    for rel in listed.splitlines():
        name = re.sub(r"\{%.*?%\}", "", rel.rsplit("/", 1)[-1])  # a conditional file's name, as rendered
        if name.endswith(READ_SUFFIXES) and not NOT_READ.search(rel) and rel not in OLD_PATH_TABLE:
            found.append(ROOT / rel)
    return found


def old_path_imports() -> list[str]:
    """Where the repository imports (or runs with `python -m`) an engine path that no module
    of the engine is: one that is gone, or only served by the old paths' table."""
    modules = engine_modules()
    defined: dict[str, set[str]] = {}
    found = []
    for path in _repository_files():
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        wanted: list[tuple[str, list[str]]] = [
            (m.group(1), []) for m in (*IMPORT.finditer(text), *RUN_MODULE.finditer(text))
        ]
        for m in FROM_IMPORT.finditer(text):
            names = [n.split(" as ")[0].strip() for n in (m.group(2) or m.group(3)).replace("\n", ",").split(",")]
            wanted.append((m.group(1), [n for n in names if n.isidentifier()]))
        for dotted, names in wanted:
            module = dotted.removeprefix("sqs_worker_engine").removeprefix(".")
            if module not in modules:
                found.append(f"{path.relative_to(ROOT)}: {dotted}")
                continue
            if module not in defined:
                defined[module] = _defines(modules[module])
            missing = [n for n in names if f"{module}.{n}".strip(".") not in modules and n not in defined[module]]
            found += [f"{path.relative_to(ROOT)}: from {dotted} import {n}" for n in missing]
    return sorted(set(found))


# -- the report ------------------------------------------------------------------------


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def _listed(title: str, found: list[str] | list[Sized], target: str = "none", met: bool | None = None) -> None:
    met = not found if met is None else met
    print(f"\n== {title}: {len(found)} (target: {target}, {verdict(met)})")
    for item in found:
        print(f"  {item.where}  {item.lines}" if isinstance(item, Sized) else f"  {item}")


def report() -> None:
    """Print each measure of the tree, with its target met or not."""
    top = top_level()
    extra = [name for name in top if name not in PUBLIC_FACE]
    print(f"\n== Files at the engine's top level: {len(top)} (target: at most {MAX_TOP_LEVEL}, ", end="")
    print(f"{verdict(len(top) <= MAX_TOP_LEVEL)})")
    print(f"  {', '.join(top)}" + (f"  (beyond the public face: {', '.join(extra)})" if extra else ""))
    counts = folders()
    crowded = [f"{folder or 'sqs_worker_engine'}/  {n}" for folder, n in counts.items() if n > MAX_FOLDER_MODULES]
    _listed(f"Engine folders over {MAX_FOLDER_MODULES} modules", crowded)
    print(f"   largest: {max(counts.values())} ({len(counts)} folders)")
    modules, _, _ = over_caps({name or "__init__": path for name, path in engine_modules().items()})
    _listed(f"Engine modules over {MAX_MODULE} lines", modules)
    _listed("Abstract classes with exactly one subclass", abstract_with_one_subclass())
    _listed('Files that are a "Deprecated path"', deprecated_files(), target="none (the old paths: one table)")
    _listed("Imports of old engine paths in the repository", old_path_imports())
    for folder in ("bench", "scripts"):
        modules, classes, functions = over_caps(python_files(folder))
        over = [*modules, *classes, *functions]
        _listed(f"{folder}/ past the caps ({MAX_MODULE}-line modules, {MAX_CLASS}, {MAX_FUNCTION})", over)
