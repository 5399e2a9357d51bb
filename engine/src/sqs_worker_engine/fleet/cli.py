"""`python -m sqs_worker_engine.fleet`: simulate a service's fleet under the standard traffic
shapes, with its own deploy files, and write the report (a generated service's
`make simulate`).

Each shape runs twice, under the platform's autoscaler and under the oracle, in worker
processes (`--processes`, default 2); progress goes to stderr as each run advances.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import logging
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..base._version import ENGINE_VERSION
from . import plots, releases, report
from .autoscalers import deployfiles
from .load.traffic import SHAPES, STANDARD
from .simulation import simulate
from .sizing import (
    JOB_SOURCES,
    Options,
    Run,
    capacity,
    choose_scale,
    inflight_limit,
    job_seconds,
    job_source,
    start_seconds,
)
from .sqs import cost

PROGRESS_EVERY = 5.0  # wall seconds between a run's progress lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sqs_worker_engine.fleet",
        description="Simulate the service's fleet (the real engine, many replicas, on virtual time) under "
        "standard traffic shapes with the autoscaling its deploy files set, beside an oracle that knows "
        "the traffic to come. Writes report.md, report.json and a plot per shape.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--deploy", type=Path, default=Path("deploy"), help="the service's deploy directory")
    parser.add_argument("--out", type=Path, default=Path("simulation"), help="where the report goes")
    parser.add_argument(
        "--platform", choices=["kubernetes", "ecs"], help="which deploy files (default: kubernetes if the bake has it)"
    )
    parser.add_argument("--shapes", default=",".join(STANDARD), help=f"comma-separated, of: {', '.join(SHAPES)}")
    parser.add_argument(
        "--job-seconds",
        type=float,
        help="your jobs' mean duration (default 5 s, an assumption the report names; a ScaledJob: job timeout / 4)",
    )
    parser.add_argument("--start-seconds", type=float, help="replica start latency (default 30 s pods, 60 s ECS tasks)")
    parser.add_argument("--scale", type=int, help="real messages per simulated one (default: chosen per shape)")
    parser.add_argument("--budget", type=int, default=Options.budget, help="simulated messages a shape aims at")
    parser.add_argument("--processes", type=int, default=min(2, os.cpu_count() or 1), help="runs in parallel")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-oracle", action="store_true", help="skip the oracle's runs (no ratios)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a tenth of the budget: a first look (minutes for the standard shapes; --shapes for fewer)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    names = [n.strip() for n in args.shapes.split(",") if n.strip()]
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        print(f"unknown shape(s): {', '.join(unknown)}; known: {', '.join(SHAPES)}", file=sys.stderr)
        return 2
    try:
        bake = deployfiles.read(args.deploy)
        alarms = releases.read(args.deploy)  # ECS's deployment alarms (a bad release's rollback)
    except deployfiles.DeployFileError as exc:
        print(f"cannot read the deploy files: {exc}", file=sys.stderr)
        return 2
    platform = args.platform or bake.platforms()[0]
    if platform not in bake.platforms():
        print(f"{args.deploy} has no {platform} deploy files (it has: {', '.join(bake.platforms())})", file=sys.stderr)
        return 2
    options = Options(
        job_seconds=args.job_seconds,
        start_seconds=args.start_seconds,
        scale=args.scale,
        seed=args.seed,
        budget=max(1000, args.budget // 10 if args.quick else args.budget),
        deployment_alarms=alarms,
    )
    runs = [Run(SHAPES[n], platform, bake, options) for n in names]
    return run_all(runs, args.out, processes=args.processes, oracle=not args.no_oracle)


def _work(run: Run) -> dict[str, Any]:
    engine = logging.getLogger("sqs_worker_engine")
    level = engine.level
    engine.setLevel(logging.CRITICAL)  # hundreds of workers' logs
    try:
        return _simulate(run)
    finally:
        engine.setLevel(level)  # run in the caller's process too (processes=1): leave its logs as they were


def _simulate(run: Run) -> dict[str, Any]:
    label = f"{run.shape.name}{' (oracle)' if run.oracle else ''}"
    last = [0.0]

    def progress(done: float, line: str) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY or done >= 1.0:
            last[0] = now
            print(
                f"  {label}: {done:4.0%} of {run.shape.seconds / 3600:g} h simulated; {line}",
                file=sys.stderr,
                flush=True,
            )

    return simulate(run, progress)


def run_all(runs: list[Run], out: Path, *, processes: int, oracle: bool = True) -> int:
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    jobs = [r for run in runs for r in ((run, replace(run, oracle=True)) if oracle else (run,))]
    for run in runs:
        print(
            f"{run.shape.name}: {run.shape.title}; capacity {capacity(run):.1f} messages/s, "
            f"jobs of {job_seconds(run):g} s, scale {choose_scale(run).k} (width {choose_scale(run).width})",
            file=sys.stderr,
        )
    results: dict[str, dict[str, Any]] = {run.shape.name: {} for run in runs}
    if processes > 1 and len(jobs) > 1:
        with concurrent.futures.ProcessPoolExecutor(processes) as pool:
            futures = {pool.submit(_work, job): job for job in jobs}
            for future in concurrent.futures.as_completed(futures):
                job = futures[future]
                results[job.shape.name]["oracle" if job.oracle else "ours"] = future.result()
    else:
        for job in jobs:
            results[job.shape.name]["oracle" if job.oracle else "ours"] = _work(job)
    first = runs[0]
    shapes = {name: report.combine(pair["ours"], pair.get("oracle")) for name, pair in results.items()}
    document: dict[str, Any] = {
        "engine_version": ENGINE_VERSION,
        "platform": first.platform,
        "deploy": report.describe(first.bake, first.platform),
        "options": {
            "job_seconds": {r.shape.name: job_seconds(r) for r in runs},
            "start_seconds": start_seconds(first),
            "count_lag": first.options.count_lag,
            "cloudwatch_delay": first.options.cloudwatch_delay,
            "sqs_latency": first.options.sqs_latency,
            "seed": first.options.seed,
        },
        "assumed": report.assumed(
            deploy=report.describe(first.bake, first.platform),
            jobs={r.shape.name: (job_seconds(r), job_source(r), JOB_SOURCES[job_source(r)]) for r in runs},
            inflight_limit=inflight_limit(first),
            alarms=releases.describe(first.options.deployment_alarms) if first.platform == "ecs" else None,
        ),
        "shapes": shapes,
        "targets": report.targets(shapes),
        "wall_seconds": round(time.perf_counter() - began, 1),
    }
    rates = {}
    for run in runs:
        ours = results[run.shape.name]["ours"]
        per_request = (
            (cost.SQS_FIFO_PER_MILLION if run.spec().worker.fifo else cost.SQS_STANDARD_PER_MILLION)
            / 1e6
            * ours["sqs_requests"]
            / max(1, ours["sqs_requests_simulated"])
        )
        rates[run.shape.name] = (
            cost.replica_hour(run.spec().worker.cpu, run.spec().worker.memory_gib) / 3600,
            per_request,
        )
    made = plots.plot_all(out, results, rates)
    if not made:
        print("matplotlib is not installed: no plots (install the engine's `fleet` extra)", file=sys.stderr)
    report.write_json(out / "report.json", document)
    (out / "report.md").write_text(report.markdown(document, made))
    for target in document["targets"]:
        print(f"{'met    ' if target['met'] else 'NOT MET'}  {target['target']}: {target['figure']}", file=sys.stderr)
    print(f"wrote {out / 'report.md'} and {out / 'report.json'} in {document['wall_seconds']:g} s", file=sys.stderr)
    return 0
