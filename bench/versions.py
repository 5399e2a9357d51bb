#!/usr/bin/env python3
"""The generated worker on two or more versions of the engine, side by side in one run.

    python bench/versions.py REF [REF ...] [--rounds N] [--latencies 0,20,10-40] [--out DIR]
    make bench-versions REFS="REF [REF ...]" [LATENCIES=0,20,10-40]

Two full `make bench` runs on a shared machine differ by more than most engine changes do
(docs/benchmarks.md, "Against the previous run"), and two runs on different machines say
nothing at all. This runs the versions against each other instead: each REF (a commit, tag
or branch of this repository) is unpacked from git and baked from its own template with its
own engine; this checkout's working tree comes last, as "now". One LocalStack, one counting
proxy, the run.py bench for every run, and in each round every version takes its turn at
every row, the order rotating, so the machine's drift falls on all of them alike.

The rows are the ones the short-jobs targets live in: no-op at concurrency 8 and 50 and
I/O 10 ms at 50 and 100, at the emulator's latency and with 20 ms added to every request
(--latencies: each a pass of every row; 10-40 draws each request's from that spread).
For each version and row: msg/s, efficiency (over the handler's bound or, for no-op, the
raw batched loop measured in this run), SQS requests and CPU per message, and CPU over the
raw loop's; the median over the rounds, and each version's msg/s and CPU per message over
now's in the same round (median of those ratios). Writes benchmarks-versions.md and .json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path
from typing import Any

from measuring import ENGINE, ROOT
from measuring.baking import bake, machine, package_name, revision
from measuring.harness import Bench
from measuring.plan import PLANS, parse_latency, rotation
from measuring.processes import load_module
from reporting.results import HANDLER_TEXT, raw_cpu_ms
from run import describe, scrub  # bench/run.py: the bench itself (its directory is first on sys.path)
from sqs_worker_engine.doubles import emulators

NOW = "now"
CASES = (("noop", 8), ("noop", 50), ("io10ms", 50), ("io10ms", 100))
LATENCIES: tuple[tuple[float, float], ...] = ((0.0, 0.0), (0.02, 0.02))  # --latencies: 0,20


def rows(latencies: Sequence[tuple[float, float]] = LATENCIES) -> list[tuple[str, int, tuple[float, float]]]:
    """Every case at every added latency (seconds, uniform low-high), latency by latency."""
    return [(handler, concurrency, added) for added in latencies for handler, concurrency in CASES]


def unpack(ref: str, into: Path) -> tuple[Path, str]:
    """This repository at `ref`, as files (git archive), and its short commit."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if commit.returncode != 0:
        raise SystemExit(f"{ref!r} is not a commit of this repository: {commit.stderr.strip()}")
    tree = into / f"src-{commit.stdout.strip()}"
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")
    return tree, commit.stdout.strip()


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def _over(rows: list[dict[str, Any]], now: dict[int, dict[str, Any]], key: str) -> list[float]:
    """A row's figure over now's in the same round, one ratio a round."""
    return [r[key] / now[r["round"]][key] for r in rows if r["round"] in now and now[r["round"]].get(key)]


def _spread(ratios: list[float]) -> dict[str, float | None]:
    """The median of the rounds' ratios, and their lowest and highest: how far the machine
    moved one version against the other from one round to the next."""
    if not ratios:
        return {"": None, "_low": None, "_high": None}
    return {"": statistics.median(ratios), "_low": min(ratios), "_high": max(ratios)}


def summarise(measured: list[dict[str, Any]], versions: Sequence[str]) -> list[dict[str, Any]]:
    """Per row and version: medians over the rounds, and ratios to now's run of the same round.
    The rows are those measured, in the order they first ran."""
    out = []
    for handler, concurrency, label in dict.fromkeys((r["handler"], r["concurrency"], r["added_ms"]) for r in measured):
        rows = [
            r
            for r in measured
            if (r["handler"], r["concurrency"], r["added_ms"]) == (handler, concurrency, label) and r.get("throughput")
        ]
        now = {r["round"]: r for r in rows if r["version"] == NOW}
        for version in versions:
            mine = [r for r in rows if r["version"] == version]
            if mine:
                out.append(
                    {
                        "handler": handler,
                        "concurrency": concurrency,
                        "added_ms": label,
                        "version": version,
                        "rounds": len(mine),
                        **{k: _median(mine, k) for k in ("throughput", "efficiency", "requests_per_message")},
                        **{k: _median(mine, k) for k in ("cpu_ms_per_message", "cpu_vs_raw")},
                        **{
                            f"{name}_vs_now{part}": value
                            for name, key in (("throughput", "throughput"), ("cpu", "cpu_ms_per_message"))
                            for part, value in _spread(_over(mine, now, key)).items()
                        },
                    }
                )
    return out


def load(averages: list[float] | None) -> str:
    return "unknown" if not averages else f"{averages[0]:.1f}"


def markdown(results: dict[str, Any]) -> str:
    versions = results["versions"]
    names = ", ".join(
        f"`{v['ref']}` ({v['commit']})" if v["ref"] != NOW else f"now (this checkout, {v['commit']})" for v in versions
    )
    lines = [
        "# The generated worker on versions of the engine, side by side",
        "",
        (
            f"Run of {results['date']} ({results['rounds']} rounds, {results['duration_seconds'] / 60:.0f} min), "
            f"by `bench/versions.py`: {names}. Each version baked from its own template with its own engine; "
            "in every round each version ran every row in turn, the order rotating. Medians over the rounds; "
            "*over now* is each version's figure over now's in the same round (median of those ratios)."
        ),
        "",
        (
            f"Machine: {results['machine']['cpu']}, {results['machine']['cores']} cores; load average "
            f"{load(results['machine'].get('load_average_at_start'))} when the rounds began, "
            f"{load(results.get('load_average_at_end'))} at the end. Raw batched loop, "
            f"this run: {results['ceiling']:.0f} msg/s, {results['raw_cpu_ms']:.3f} ms CPU per message. "
            "In brackets, the lowest and highest of the rounds' ratios: a difference inside that spread "
            "is the machine's as much as the engine's."
        ),
        "",
        (
            "| handler | concurrency | latency | version | msg/s | efficiency | SQS requests / message "
            "| CPU ms / message | CPU / raw loop's | msg/s over now | CPU over now |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(value: float | None, spec: str, suffix: str = "") -> str:
        return "" if value is None else f"{value:{spec}}{suffix}"

    def over(row: dict[str, Any], name: str) -> str:
        median, low, high = (row.get(f"{name}_vs_now{part}") for part in ("", "_low", "_high"))
        if median is None:
            return ""
        return f"{median:.2f}x" if low == high else f"{median:.2f}x ({low:.2f}-{high:.2f})"

    for row in results["summary"]:
        latency = "the emulator's latency" if row["added_ms"] == "0" else f"+{row['added_ms']} ms"
        lines.append(
            f"| {HANDLER_TEXT.get(row['handler'], row['handler'])} | {row['concurrency']} | {latency} | {row['version']} "
            f"| {f(row['throughput'], '.0f')} | {f(row['efficiency'], '.2f')} | {f(row['requests_per_message'], '.3f')} "
            f"| {f(row['cpu_ms_per_message'], '.3f')} | {f(row['cpu_vs_raw'], '.2f', 'x')} "
            f"| {over(row, 'throughput')} | {over(row, 'cpu')} |"
        )
    failed = [r for r in results["runs"] if not r.get("throughput")]
    if failed:
        lines += ["", f"{len(failed)} run(s) gave no figure:"]
        lines += [
            f"- {r['version']} {r['handler']} c={r['concurrency']} +{r['added_ms']} ms: {r.get('error')}"
            for r in failed
        ]
    return "\n".join(lines) + "\n"


def measure(
    refs: Sequence[str],
    rounds: int,
    out: Path,
    log: Callable[[str], None],
    latencies: Sequence[tuple[float, float]] = LATENCIES,
) -> dict[str, Any]:
    plan = PLANS["quick"]
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sqs-bench-versions-")))
        benches: dict[str, Bench] = {}
        versions = []
        ls = emulators.ensure()
        stack.callback(ls.stop)  # stops it only if it was started here
        faultproxy = load_module("bench_faultproxy", ENGINE / "tests" / "faultproxy.py")
        for i, ref in enumerate([*refs, NOW]):
            if ref == NOW:
                head, changed = revision()
                template, commit = ROOT, head + ("+changes" if changed else "")
            else:
                template, commit = unpack(ref, scratch)
            log(f"baking and installing {ref} ({commit})")
            project = bake(scratch / f"bake-{i}", template)
            work = scratch / f"runs-{i}"
            work.mkdir()
            benches[ref] = Bench(plan, project, package_name(project), ls.endpoint, work, faultproxy)
            versions.append({"ref": ref, "commit": commit})
        first = benches[NOW]
        where = machine(first.python, ls.endpoint)  # its load average: as the rounds begin
        log("raw batched loop (the emulator's ceiling and the CPU floor)")
        ceiling_runs = first.measure_ceiling()
        raw_cpu = raw_cpu_ms({"ceiling": {"runs": ceiling_runs}})
        if not first.ceiling or raw_cpu is None:
            raise SystemExit(f"the raw loop could not run: {ceiling_runs}")
        for bench in benches.values():
            bench.ceiling, bench.raw_cpu_ms = first.ceiling, raw_cpu
        names = tuple(benches)
        measured: list[dict[str, Any]] = []
        turn = 0
        for round_ in range(1, rounds + 1):
            for handler, concurrency, added in rows(latencies):
                for ref in rotation(names, turn):
                    bench = benches[ref]
                    bench.added = added
                    row = bench.throughput("generated", handler, concurrency)
                    row.update(version=ref, round=round_)
                    if row.get("throughput"):
                        row["efficiency"] = row["throughput"] / bench.ideal(handler, concurrency)
                        row["cpu_vs_raw"] = row["cpu_ms_per_message"] / raw_cpu
                    measured.append(row)
                    log(f"round {round_} {ref:>10} +{row['added_ms']:>2} ms " + describe(row, raw_cpu))
                turn += 1
        results: dict[str, Any] = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": where,
            "versions": versions,
            "rounds": rounds,
            "ceiling": first.ceiling,
            "raw_cpu_ms": raw_cpu,
            "ceiling_runs": ceiling_runs,
            "runs": measured,
            "summary": summarise(measured, names),
        }
        results["duration_seconds"] = round(time.monotonic() - started, 1)
        results["load_average_at_end"] = list(os.getloadavg())
        scrub(results, [str(scratch), str(ROOT), str(Path.home()), tempfile.gettempdir()])
    out.mkdir(parents=True, exist_ok=True)
    (out / "benchmarks-versions.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "benchmarks-versions.md").write_text(markdown(results))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("refs", nargs="+", help="commits, tags or branches to set beside this checkout")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every row on every version (default 3)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="where the report goes (default: docs/)")
    parser.add_argument(
        "--latencies",
        default="0,20",
        metavar="MS,...",
        help="round trips added to every SQS request, each a pass of every row: 0, 20, or a spread 10-40 (default 0,20)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    try:
        latencies = [parse_latency(text) for text in args.latencies.split(",") if text.strip()]
    except argparse.ArgumentTypeError as exc:
        parser.error(f"--latencies: {exc}")
    if not latencies:
        parser.error("--latencies: name at least one, e.g. 0,20")

    def log(text: str) -> None:
        print(f"[versions {time.strftime('%H:%M:%S')}] {text}", flush=True)

    # Each run ends by killing its worker mid-request: the proxy would log every dropped
    # connection as an error.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    results = measure(args.refs, args.rounds, args.out, log, latencies)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
