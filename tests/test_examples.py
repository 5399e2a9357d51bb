"""The examples people copy compile: every Python block of a generated service's README, of
the engine's README and of the engine's docs pages (docs/engine/, where most of the engine's
examples are), and of the docs site's pages for a service's owner (docs/service/ and
docs/how-to/, where the service README's long parts went), written into a baked service as
modules of its package, passes the
service's own strict mypy; and the service's mypy configuration gives its tests their
override (untyped helpers allowed) without a warning."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import ROOT, bake, run, seed_mypy_cache

# ```python, or ```python notest for a listing of several files (test_readmes.py runs the rest).
BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
# One bake with the defaults, one with every option that adds an example to the README.
ANSWERS = {
    "defaults": {},
    "options-on": {"use_idempotency": "yes", "large_payloads": "yes", "queue_name": "ledger-updates.fifo"},
}


def python_blocks(readme: Path) -> list[str]:
    return BLOCK.findall(readme.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", list(ANSWERS))
def test_every_readme_example_type_checks_in_the_service(name: str, tmp_path: Path) -> None:
    project = bake(tmp_path, **ANSWERS[name])
    (package,) = [p for p in (project / "src").iterdir() if p.is_dir()]
    examples = package / "readme_examples"
    examples.mkdir()
    (examples / "__init__.py").write_text("")
    written = []
    docs = [("service", project / "README.md"), ("engine", ROOT / "engine" / "README.md")]
    docs += [(f"engine_{p.stem.replace('-', '_')}", p) for p in sorted((ROOT / "docs" / "engine").glob("*.md"))]
    for section in ("service", "how-to"):
        pages = sorted((ROOT / "docs" / section).glob("*.md"))
        docs += [(f"site_{section.replace('-', '_')}_{p.stem.replace('-', '_')}", p) for p in pages]
    for source, readme in docs:
        for i, block in enumerate(python_blocks(readme)):
            path = examples / f"{source}_{i}.py"
            path.write_text(block)
            written.append(path)
    assert len(written) >= 10, f"found only {len(written)} examples"
    installed = run(["make", "install"], project)
    seed_mypy_cache(project)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    checked = run([".venv/bin/mypy", str(examples)], project)
    output = checked.stdout + checked.stderr
    listing = "\n\n".join(f"# {p.name}\n{p.read_text()}" for p in written)
    assert checked.returncode == 0, f"README examples fail the service's mypy:\n{output[-5000:]}\n{listing[:8000]}"

    # The tests' override: a helper without annotations is allowed in tests, and mypy has
    # nothing to say about the configuration itself.
    (project / "tests" / "test_owner_helpers.py").write_text(
        "def helper(value):\n    return value\n\n\ndef test_helper() -> None:\n    assert helper(1) == 1\n"
    )
    whole = run([".venv/bin/mypy"], project)
    output = whole.stdout + whole.stderr
    assert whole.returncode == 0, output[-3000:]
    assert "Patterns must be" not in output and "warning" not in output.lower(), output
