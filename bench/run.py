#!/usr/bin/env python3
"""Benchmark the generated worker against the alternatives, on one LocalStack, same handler.

    make bench                     # full run: docs/benchmarks.md, .json and .png
    python bench/run.py --quick    # a small run (minutes), same report
    python bench/run.py --smoke --out DIR   # tiny counts: checks the harness, not the figures

It bakes the default service, installs it (its worker is the engine, engine/, which the
baked service depends on by path), finds or starts LocalStack as the suites do
(sqs_worker_engine.doubles.emulators), and runs every contender as its own process against
fresh queues, behind one counting proxy (the engine's tests/faultproxy.py) that every SQS request
goes through. Contenders take turns within each scenario, so drift on a shared
machine hits them all alike. Every throughput scenario runs twice: at the emulator's own
latency, and with a round trip added to every SQS request at the proxy (--added-latency,
20 ms by default, about SQS in-region; "10-40" for a uniform spread). The generated worker
runs twice too, with its default prefetch and with WORKER_PREFETCH=0, so what prefetch
changes is measured side by side. In the no-op scenarios the CPU target holds (concurrency
8 and 50) the raw batched loop takes a turn as well: the floor those rows' CPU per message
is divided by. bench/README.md describes the method; the report repeats it.

This module holds the run's order (`run`) and its command line; the harness it measures
with is measuring/, a module a job, and the report it writes is bench/report.py's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import report  # bench/report.py, beside this script
from measuring import ENGINE, ROOT
from measuring.baking import bake, machine, package_name
from measuring.harness import Bench
from measuring.lifecycle import drain, idle, loaded_memory
from measuring.plan import (
    CONTENDERS,
    GENERATED,
    LABELS,
    PLANS,
    RAW_BESIDE,
    SPREAD,
    Plan,
    latency_label,
    parse_latency,
    rotation,
)
from measuring.processes import load_module
from measuring.profiling import profile, profile_cases
from reporting.compare import keep_previous
from reporting.results import cpu_vs_raw, raw_cpu_ms
from reporting.targets import CPU_VS_RAW_AT, targets
from sqs_worker_engine.doubles import emulators

Log = Callable[[str], None]


def run(
    plan: Plan,
    out: Path,
    project: Path | None,
    log: Log,
    contenders: tuple[str, ...] = CONTENDERS,
    latencies: tuple[tuple[float, float], ...] = ((0.0, 0.0), (0.02, 0.02)),
) -> dict[str, Any]:
    """Bake (unless given a `project`), find or start LocalStack, measure in the plan's order
    (the ceiling, the throughput passes, the contenders' lives, the profiles) and write the
    report into `out`."""
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sqs-bench-")))
        if project is None:
            log("baking the default service and installing it (make install)")
            project = bake(scratch)
        package = package_name(project)
        faultproxy = load_module("bench_faultproxy", ENGINE / "tests" / "faultproxy.py")
        ls = emulators.ensure()
        stack.callback(ls.stop)  # stops it only if it was started here
        log(f"LocalStack ({ls.mode}) ready")
        work = scratch / "runs"
        work.mkdir()
        bench = Bench(plan, project, package, ls.endpoint, work, faultproxy)
        results: dict[str, Any] = {
            "plan": asdict(plan),
            "contenders": {k: LABELS[k] for k in CONTENDERS},
            "machine": machine(bench.python, ls.endpoint),
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "package": package,
        }
        bench.measure_cpu_handler()
        results["cpu_handler_seconds"] = bench.cpu_seconds
        log("emulator ceiling (raw batched loop)")
        ceiling_runs = bench.measure_ceiling()
        if not bench.ceiling:
            raise SystemExit(f"the raw loop could not run: {ceiling_runs}")
        bench.raw_cpu_ms = raw_cpu_ms({"ceiling": {"runs": ceiling_runs}})
        runs, turn = throughput_passes(bench, results, contenders, latencies, log)
        ceiling(bench, results, runs, ceiling_runs, log)
        lives(bench, results, contenders, turn, log)
        results["targets"] = targets(results)
        results["profiles"] = []
        if plan.profile:
            for handler, concurrency in profile_cases(results, plan):
                log(f"profiling the generated worker: {handler} at concurrency {concurrency}")
                results["profiles"].append(profile(bench, handler, concurrency, 10.0 if plan.name == "full" else 5.0))
        results["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        results["duration_seconds"] = round(time.monotonic() - started, 1)
        scrub(results, [str(scratch), str(project), str(ROOT), str(Path.home()), tempfile.gettempdir()])
        out.mkdir(parents=True, exist_ok=True)
        keep_previous(out, plan.name)
        (out / "benchmarks.json").write_text(json.dumps(results, indent=1) + "\n")
        report.write(results, out)
    return results


def throughput_passes(
    bench: Bench,
    results: dict[str, Any],
    contenders: tuple[str, ...],
    latencies: tuple[tuple[float, float], ...],
    log: Log,
) -> tuple[list[dict[str, Any]], int]:
    """Every throughput scenario at every latency asked (and the spread's pass), each
    contender in turn, the order rotating: its rows, and the turns taken."""
    plan = bench.plan
    runs: list[dict[str, Any]] = []
    turn = 0
    passes = [(added, plan.handlers) for added in latencies]
    if plan.spread and SPREAD not in latencies and len(latencies) > 1:
        passes.append((SPREAD, plan.spread))
    results["added_latencies"] = [latency_label(a) for a, _ in passes]
    # The handlers each latency ran (the spread's pass runs some of them).
    results["latency_handlers"] = {latency_label(a): list(h) for a, h in passes}
    for added, handlers in passes:
        bench.added = added
        log(f"round trip added to every SQS request: {latency_label(added)} ms")
        scenarios = [(h, c, i == 0) for h in handlers for i, c in enumerate(plan.concurrencies)]
        if plan.default_concurrency is not None and "noop" in handlers:
            scenarios.append(("noop", plan.default_concurrency, False))
        for handler, concurrency, first in scenarios:
            for contender in rotation(turn_names(plan, contenders, handler, concurrency, first), turn):
                if contender == "raw":
                    row = bench.raw(RAW_BESIDE, concurrency)
                else:
                    row = bench.throughput(contender, handler, 1 if contender == "handloop" else concurrency)
                runs.append(row)
                log(f"+{row['added_ms']:>2} ms " + describe(row, bench.raw_cpu_ms))
            turn += 1
    bench.added = (0.0, 0.0)  # the other measurements are at the emulator's own latency
    return runs, turn


def turn_names(plan: Plan, contenders: tuple[str, ...], handler: str, concurrency: int, first: bool) -> tuple[str, ...]:
    """Who takes a turn in one scenario. The hand-written loop has one speed: it runs with
    the first concurrency. The template's default concurrency is a row for the worker alone.
    The CPU target's floor: the raw loop takes its turn in the same rotation, at the same
    added latency, as the row of this concurrency (not a contender: the report compares
    every row of the scenario with it, and lists it nowhere else)."""
    names = tuple(c for c in contenders if c != "handloop" or first)
    if concurrency not in plan.concurrencies:
        names = tuple(c for c in names if c in GENERATED)
    if handler == "noop" and concurrency in CPU_VS_RAW_AT:
        names += ("raw",)
    return names


def ceiling(
    bench: Bench, results: dict[str, Any], runs: list[dict[str, Any]], ceiling_runs: list[dict[str, Any]], log: Log
) -> None:
    """The emulator's ceiling (measured again at the end of a full run, the best of both
    counting) and the throughput rows, each with its CPU per message over the raw loop's
    measured in this run (beside the row where it ran in its scenario, else the ceiling's:
    cpu_vs_raw says why)."""
    if bench.plan.name == "full":
        log("emulator ceiling again (the best of both counts)")
        ceiling_runs += bench.measure_ceiling()
        for row in runs:
            if row.get("throughput") is not None and row["contender"] != "raw":  # the floor has no ideal
                row["ideal"] = bench.ideal(row["handler"], row["concurrency"])
                row["efficiency"] = row["throughput"] / row["ideal"]
    results["ceiling"] = {"messages_per_second": bench.ceiling, "runs": ceiling_runs}
    results["runs"] = runs
    results["ceiling"]["cpu_ms_per_message"] = raw_cpu_ms(results)
    for row in runs + ceiling_runs:
        row["cpu_vs_raw"] = cpu_vs_raw(row, results)


def lives(bench: Bench, results: dict[str, Any], contenders: tuple[str, ...], turn: int, log: Log) -> None:
    """Each contender idle, loaded with big messages, drained with SIGTERM and killed, the
    order rotating on from the throughput passes' last turn."""
    measures = (
        ("idle", lambda c: idle(bench, c)),
        ("memory", lambda c: loaded_memory(bench, c)),
        ("drain", lambda c: drain(bench, c)),
        ("kill", lambda c: drain(bench, c, kill=True)),
    )
    for kind, _ in measures:
        results[kind] = []
    for offset, (kind, measure) in enumerate(measures):
        for contender in rotation(contenders, turn + offset):
            results[kind].append(measure(contender))
            log(f"{kind} {contender}: {results[kind][-1]}")


def scrub(value: Any, prefixes: list[str]) -> Any:
    """Replace this machine's paths in error texts with neutral names."""
    if isinstance(value, dict):
        for k, v in value.items():
            value[k] = scrub(v, prefixes)
        return value
    if isinstance(value, list):
        return [scrub(v, prefixes) for v in value]
    if isinstance(value, str):
        for prefix in sorted(prefixes, key=len, reverse=True):
            value = value.replace(prefix, "<local>")
        return value
    return value


def describe(row: dict[str, Any], raw_cpu_ms: float | None = None) -> str:
    head = f"{row['handler']:>8} c={row['concurrency']:<3} {row['contender']:<10}"
    if "error" in row:
        return f"{head} ERROR {row['error'][:300]}"
    eff = f" eff {row['efficiency']:.2f}" if row.get("efficiency") is not None else ""
    # The ceiling's figure: the raw loop run beside a row may not have had its turn yet.
    ratio = f" ({row['cpu_ms_per_message'] / raw_cpu_ms:.2f}x the ceiling's raw loop)" if raw_cpu_ms else ""
    return (
        f"{head} {row['throughput']:8.1f} msg/s{eff}  {row['requests_per_message']:.3f} req/msg  "
        f"{row['cpu_ms_per_message']:.3f} ms CPU/msg{ratio}  ({row['messages']} in {row['window_seconds']} s)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="a small run: fewer scenarios, shorter windows")
    mode.add_argument("--smoke", action="store_true", help="tiny counts: checks the harness, not the figures")
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="where the report goes (default: docs/)")
    parser.add_argument("--project", type=Path, help="an already baked and installed service to use")
    parser.add_argument(
        "--contenders", default=",".join(CONTENDERS), help="comma-separated subset (the report expects all)"
    )
    parser.add_argument(
        "--added-latency",
        type=parse_latency,
        default=(0.02, 0.02),
        metavar="MS",
        help="round trip added to every SQS request in the second pass: 20 (default) or a spread, 10-40; 0: one pass",
    )
    args = parser.parse_args(argv)
    chosen = tuple(c for c in args.contenders.split(",") if c)
    unknown = set(chosen) - set(CONTENDERS)
    if unknown:
        parser.error(f"unknown contender(s) {', '.join(sorted(unknown))}; choose from {', '.join(CONTENDERS)}")
    plan = PLANS["smoke" if args.smoke else "quick" if args.quick else "full"]
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    # Each run ends by killing its contender mid-request: the proxy's server would log
    # every one of those dropped connections as an error.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)

    def log(text: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {text}", flush=True)

    latencies = ((0.0, 0.0), args.added_latency) if args.added_latency[1] > 0 else ((0.0, 0.0),)
    results = run(plan, args.out, args.project.resolve() if args.project else None, log, chosen, latencies)
    log(f"done in {results['duration_seconds']:.0f} s: {args.out / 'benchmarks.md'}")
    for target in results["targets"]:
        verdict = {True: "met    ", False: "NOT MET", None: "n/a    "}[target["met"]]
        log(f"{verdict} {target['name']}: {target['figure']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
