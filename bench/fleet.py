"""docs/scaling/: the fleet simulator on the template's own bakes, the figures
docs/scaling.md quotes.

Bakes the default service (a Deployment on EKS and a service on ECS) and the ScaledJob
answer into a temporary directory, then runs `python -m sqs_worker_engine.fleet` on each
bake's deploy files: the standard shapes for every platform, and the day at a million
messages an hour for the Deployment. Each platform's report goes to its own directory
(`report.md`, `report.json`, a plot per shape).

    make simulate                                   # docs/scaling/{kubernetes,ecs,scaledjob,day-1m}/
    .venv/bin/python bench/fleet.py --only ecs --quick
    .venv/bin/python bench/fleet.py --doc-only   # docs/scaling.md's tables from the reports there

docs/scaling.md's measured tables (between `<!-- FIGURES -->` and `<!-- /FIGURES -->`, and
`<!-- COST -->` and `<!-- /COST -->`) are written from the reports' JSON after each run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from cookiecutter.main import cookiecutter

ROOT = Path(__file__).resolve().parent.parent
# (directory, answers, platform, shapes, options): what docs/scaling.md reports. The day at
# a million messages an hour runs at a scale that keeps it near 300,000 simulated messages
# (the target: under 10 minutes on 2 cores), in a report of its own.
RUNS: tuple[tuple[str, dict[str, str], str, str, tuple[str, ...]], ...] = (
    (
        "kubernetes",
        {},
        "kubernetes",
        "steady,diurnal,bursts,spike,spike-within,drip,steady-10ms,steady-100ms,steady-1s",
        (),
    ),
    ("ecs", {}, "ecs", "steady,diurnal,bursts,spike,spike-within,drip,steady-10ms,steady-100ms,steady-1s", ()),
    (
        "scaledjob",
        {"kubernetes_workload": "scaledjob", "deploy_target": "eks"},
        "kubernetes",
        "steady,bursts,spike,drip",
        (),
    ),
    ("day-1m", {}, "kubernetes", "day-1m", ("--budget", "300000")),
)


TARGETS = {
    "kubernetes": "Deployment + ScaledObject",
    "ecs": "ECS service",
    "scaledjob": "ScaledJob",
    "day-1m": "Deployment + ScaledObject, a day at 1M/h",
}


def _age(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _reports(out: Path) -> dict[str, dict[str, Any]]:
    return {
        name: json.loads((out / name / "report.json").read_text())
        for name, *_ in RUNS
        if (out / name / "report.json").is_file()
    }


def figures_section(out: Path) -> str:
    """The targets per platform, then each platform's shapes beside the oracle's."""
    reports = _reports(out)
    lines = ["## The figures", "", "| platform | target | figure | met |", "|---|---|---|---|"]
    for name, report in reports.items():
        for target in report["targets"]:
            met = "yes" if target["met"] else "**no**"
            lines.append(f"| {TARGETS.get(name, name)} | {target['target']} | {target['figure']} | {met} |")
    for name, report in reports.items():
        if name == "day-1m":
            continue
        lines += [
            "",
            (
                f"**{TARGETS.get(name, name)}** ([report](scaling/{name}/report.md)): "
                f"{report['deploy']['min_replicas']}-{report['deploy']['max_replicas']} "
                + (
                    "Jobs of one message each."
                    if name == "scaledjob"
                    else f"replicas of concurrency {report['deploy']['concurrency']}."
                )
            ),
            "",
            (
                "| shape | messages | lost | duplicate runs / cut off by SIGKILL | oldest age p99 (oracle's, ratio) | "
                "replica-minutes (oracle's, ratio) | scale out / in | thrash | in-flight peak |"
            ),
            "|---|---:|---:|---|---|---|---|---:|---:|",
        ]
        for shape, s in report["shapes"].items():
            ratios = s.get("ratios", {})
            causes = ", ".join(f"{c} {n}" for c, n in s["duplicates_by_cause"].items())
            lines.append(
                f"| [{shape}](scaling/{name}/{shape}.png) | {s['messages']:,} | {s['messages_lost']} | "
                f"{s['duplicate_runs']}{f' ({causes})' if causes else ''} / {s['cut_off_by_sigkill']} | "
                f"{_age(s['p99_oldest_age_seconds'])} ({_age(s.get('oracle_p99_oldest_age_seconds', 0.0))}, "
                f"{ratios.get('p99_oldest_age_seconds', '-')}x) | {s['replica_minutes']:,.0f} "
                f"({s.get('oracle_replica_minutes', 0):,.0f}, {ratios.get('replica_minutes', '-')}x) | "
                f"{s['scale_events']['out']} / {s['scale_events']['in']} | {s['thrash']} | {s['inflight_peak']:,} |"
            )
    return "\n".join(lines)


def cost_section(out: Path) -> str:
    """$ per million messages per shape: SQS requests and compute, from the runs."""
    reports = _reports(out)
    lines = [
        "## Cost model",
        "",
        (
            "At list prices (us-east-1; `fleet/sqs/cost.py`): SQS $0.40 per million requests on a standard queue, "
            "compute at Fargate's rates for what a replica reserves ($0.04048 per vCPU-hour, $0.004445 per "
            "GiB-hour). Each run's requests (receives, deletes, visibility changes, the replicas' backlog "
            "sampling, KEDA's reads) and replica-seconds, per million messages:"
        ),
        "",
        "| platform | shape | messages | SQS requests a message | $ SQS | $ compute | $ per million |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, report in reports.items():
        for shape, s in report["shapes"].items():
            c = s["cost"]
            lines.append(
                f"| {TARGETS.get(name, name)} | {shape} | {s['messages']:,} | {s['requests_per_message']} | "
                f"{c['sqs_usd_per_million']:.2f} | {c['compute_usd_per_million']:.2f} | {c['usd_per_million']:.2f} |"
            )
    return "\n".join(lines)


def write_doc(out: Path, doc: Path) -> None:
    """Replace the measured sections of docs/scaling.md with tables from the reports."""
    text = doc.read_text()
    for marker, section in (("FIGURES", figures_section(out)), ("COST", cost_section(out))):
        block = f"<!-- {marker} -->\n{section}\n<!-- /{marker} -->"
        pattern = re.compile(rf"<!-- {marker} -->(?:.*?<!-- /{marker} -->)?", re.DOTALL)
        text = pattern.sub(lambda _, block=block: block, text, count=1)
    doc.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "scaling")
    parser.add_argument("--only", help="one of: " + ", ".join(r[0] for r in RUNS))
    parser.add_argument("--quick", action="store_true", help="a tenth of the simulated messages")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--doc-only", action="store_true", help="only rewrite docs/scaling.md's tables")
    args = parser.parse_args(argv)
    doc = ROOT / "docs" / "scaling.md"
    if args.doc_only:
        write_doc(args.out, doc)
        return 0
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
    if args.out == ROOT / "docs" / "scaling" and not args.quick:
        write_doc(args.out, doc)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
