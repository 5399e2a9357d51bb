"""docs/scaling/: the fleet simulator on the template's own bakes, the figures
docs/scaling.md quotes.

Bakes the default service (a Deployment on EKS and a service on ECS) and the ScaledJob
answer into a temporary directory, then runs `python -m sqs_worker_engine.fleet` on each
bake's deploy files: the standard shapes for every platform, and the day at a million
messages an hour for the Deployment. Each platform's report goes to its own directory
(`report.md`, `report.json`, a plot per shape).

    make simulate                                   # docs/scaling/{kubernetes,ecs,scaledjob,day-1m}/
    .venv/bin/python bench/fleet.py --only ecs --quick
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from cookiecutter.main import cookiecutter

ROOT = Path(__file__).resolve().parent.parent
# (directory, answers, platform, shapes, options): what docs/scaling.md reports. The day at
# a million messages an hour runs at a scale that keeps it near 300,000 simulated messages
# (the target: under 10 minutes on 2 cores), in a report of its own.
RUNS: tuple[tuple[str, dict[str, str], str, str, tuple[str, ...]], ...] = (
    ("kubernetes", {}, "kubernetes", "steady,diurnal,bursts,spike,spike-within,drip", ()),
    ("ecs", {}, "ecs", "steady,diurnal,bursts,spike,spike-within,drip", ()),
    (
        "scaledjob",
        {"kubernetes_workload": "scaledjob", "deploy_target": "eks"},
        "kubernetes",
        "steady,bursts,spike,drip",
        (),
    ),
    ("day-1m", {}, "kubernetes", "day-1m", ("--budget", "300000")),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "scaling")
    parser.add_argument("--only", help="one of: " + ", ".join(r[0] for r in RUNS))
    parser.add_argument("--quick", action="store_true", help="a tenth of the simulated messages")
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args(argv)
    failed = 0
    os.environ["SQS_WORKER_TEMPLATE_LOCK"] = "0"  # only the deploy files are read: no uv.lock needed
    with tempfile.TemporaryDirectory(prefix="fleet-bakes-") as tmp:
        for name, answers, platform, shapes, extra in RUNS:
            if args.only and name != args.only:
                continue
            project = Path(
                cookiecutter(str(ROOT), no_input=True, output_dir=str(Path(tmp) / name), extra_context=answers)
            )
            command = [
                sys.executable,
                "-m",
                "sqs_worker_engine.fleet",
                "--deploy",
                str(project / "deploy"),
                "--out",
                str(args.out / name),
                "--platform",
                platform,
                "--shapes",
                shapes,
                "--processes",
                str(args.processes),
                *extra,
            ]
            if args.quick:
                command.append("--quick")
            print(f"== {name}: {' '.join(command[3:])}", file=sys.stderr, flush=True)
            failed += subprocess.run(command, check=False).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
