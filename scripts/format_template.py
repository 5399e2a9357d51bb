"""Format the template's Python files: bake, format the baked copy, carry the changes back.

Files without Jinja syntax are copied back as formatted. For files with Jinja syntax the
formatter's changes are applied to the template as a patch; hunks that touch templated
lines are reported for a person to apply by hand.

    python scripts/format_template.py      # needs cookiecutter, ruff and patch on PATH
"""

from __future__ import annotations

import difflib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cookiecutter.main import cookiecutter

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_DIR = ROOT / "{{cookiecutter.project_slug}}"


def main() -> int:
    with tempfile.TemporaryDirectory() as out:
        # The bake with every optional file, so that each template file is formatted.
        project = Path(cookiecutter(str(ROOT), no_input=True, output_dir=out, extra_context={"use_idempotency": "yes"}))
        package = project.name.replace("-", "_")
        before = Path(out) / "before"
        shutil.copytree(project, before)
        subprocess.run(["ruff", "check", "--fix", "--quiet", "."], cwd=project, check=False)
        subprocess.run(["ruff", "format", "--quiet", "."], cwd=project, check=True)
        manual = 0
        for baked in sorted(project.rglob("*.py")):
            rel = baked.relative_to(project).as_posix()
            source = TEMPLATE_DIR / rel.replace(f"src/{package}/", "src/{{cookiecutter.package_name}}/")
            old, new = (before / rel).read_text(), baked.read_text()
            if not source.exists() or old == new:
                continue
            text = source.read_text()
            if "{{" not in text and "{%" not in text:
                shutil.copyfile(baked, source)
                print(f"formatted {rel}")
                continue
            diff = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "a", "b"))
            result = subprocess.run(
                ["patch", "--no-backup-if-mismatch", "-r", "-", "-F", "1", str(source)],
                input=diff,
                text=True,
                capture_output=True,
                check=False,
            )
            if result.returncode == 0:
                print(f"patched {rel}")
            else:
                manual += 1
                print(f"by hand {rel}:\n{diff}\n{result.stdout}")
        print(f"{manual} templated file(s) need a hand")
    return 1 if manual else 0


if __name__ == "__main__":
    sys.exit(main())
