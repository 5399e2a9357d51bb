"""What the collector's pacing costs in memory, beside what it saves in CPU (engine
process/host/heap.py): the worker's peak RSS and CPU a message, for jobs that hold a buffer of
1, 4 or 8 MiB, with and without a reference cycle holding it (a caught exception kept in a
local), under three settings side by side in one run:

- `engine`: the worker's own pacing (the young threshold between CPython's and 10,000, by
  the bytes each pass frees);
- `cpython`: CPython's own threshold, fixed (set one above it before the worker starts: an
  owner's threshold, which the worker leaves as it found it);
- `fixed-10000`: the threshold the engine set before the pacing, fixed (as an owner's).

Each row runs in a process of its own (peak RSS is a process's), a thread handler at
concurrency 8 against the in-memory SQS, JOBS messages; ROUNDS rounds, rows interleaved.
Writes docs/benchmarks-memory.{md,json}. About 3 minutes on 2 cores (`--quick`: seconds).

    python bench/memory.py --out docs [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SIZES_MIB = (1, 4, 8)
SETTINGS = ("engine", "cpython", "fixed-10000")
CONCURRENCY = 8


def one_row(size_mib: int, cycle: bool, setting: str, jobs: int) -> dict[str, Any]:
    """In this process: run `jobs` messages through a worker; its peak RSS and CPU."""
    from sqs_worker_engine import Job, Router
    from sqs_worker_engine.testing import memory_sqs, memory_worker

    young, *older = gc.get_threshold()  # CPython's own, in this fresh process
    if setting == "cpython":
        gc.set_threshold(young + 1, *older)  # one above: an owner's threshold, left as found, not paced
    elif setting == "fixed-10000":
        gc.set_threshold(10_000, *older)

    def handler(job: Job[str]) -> None:
        buffer = bytearray(size_mib * 2**20)
        buffer[:: 2**12] = b"x" * len(buffer[:: 2**12])  # touched: resident, as real work's would be
        if cycle:
            try:
                raise ValueError(job.payload)
            except ValueError as exc:
                kept = exc  # the exception's traceback holds this frame, and so the buffer
            assert kept

    async def run() -> float:
        sqs = memory_sqs("jobs", messages=jobs, attributes={"VisibilityTimeout": "60"})
        router = Router()
        router.handler("jobs", payload=str, executor="thread")(handler)
        running = memory_worker(sqs, router, "jobs", name="memory-bench", WORKER_CONCURRENCY=str(CONCURRENCY))
        began = time.process_time()
        while sqs.bodies("jobs"):
            await asyncio.sleep(0.02)
        cpu = time.process_time() - began
        await running.stop("requested")
        return cpu

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cpu = asyncio.run(run())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"peak_mib": round(peak), "base_mib": round(base), "cpu_ms_per_job": round(cpu / jobs * 1000, 3)}


def measure(jobs: int, rounds: int) -> list[dict[str, Any]]:
    rows = [(size, cycle, setting) for size in SIZES_MIB for cycle in (True, False) for setting in SETTINGS]
    runs: dict[tuple[int, bool, str], list[dict[str, Any]]] = {row: [] for row in rows}
    for _ in range(rounds):
        for size, cycle, setting in rows:
            done = subprocess.run(
                [sys.executable, __file__, "--row", f"{size},{int(cycle)},{setting},{jobs}"],
                capture_output=True,
                text=True,
                check=True,
            )
            runs[(size, cycle, setting)].append(json.loads(done.stdout.splitlines()[-1]))
    return [
        {
            "size_mib": size,
            "cycle": cycle,
            "setting": setting,
            "peak_mib": statistics.median(r["peak_mib"] for r in found),
            "peak_mib_range": [min(r["peak_mib"] for r in found), max(r["peak_mib"] for r in found)],
            "cpu_ms_per_job": round(statistics.median(r["cpu_ms_per_job"] for r in found), 3),
        }
        for (size, cycle, setting), found in runs.items()
    ]


def markdown(rows: list[dict[str, Any]], jobs: int, rounds: int) -> str:
    by = {(r["size_mib"], r["cycle"], r["setting"]): r for r in rows}
    lines = [
        "# The collector's pacing: memory beside CPU",
        "",
        f"`make bench-memory` (bench/memory.py): a thread handler at concurrency {CONCURRENCY}, {jobs} jobs a",
        f"row against the in-memory SQS, medians of {rounds} rounds (lowest-highest in brackets), each row a",
        f"process of its own, on Python {sys.version.split()[0]}. Peak RSS is the whole process's.",
        "",
        (
            "| job's buffer | held by a cycle | engine peak MiB | CPython's peak MiB | engine over CPython's |"
            " fixed 10,000 peak MiB | engine CPU ms/job | CPython's CPU ms/job |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for size in SIZES_MIB:
        for cycle in (True, False):
            engine, cpython, fixed = (by[(size, cycle, s)] for s in SETTINGS)
            lines.append(
                f"| {size} MiB | {'yes' if cycle else 'no'} | {engine['peak_mib']:.0f} ({_range(engine)}) | "
                f"{cpython['peak_mib']:.0f} ({_range(cpython)}) | {engine['peak_mib'] / cpython['peak_mib']:.2f}x | "
                f"{fixed['peak_mib']:.0f} ({_range(fixed)}) | {engine['cpu_ms_per_job']} | {cpython['cpu_ms_per_job']} |"
            )
    return "\n".join(lines) + "\n"


def _range(row: dict[str, Any]) -> str:
    low, high = row["peak_mib_range"]
    return f"{low}-{high}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("docs"))
    parser.add_argument("--quick", action="store_true", help="few jobs, one round: a smoke run")
    parser.add_argument("--row", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        size, cycle, setting, jobs = args.row.split(",")
        print(json.dumps(one_row(int(size), cycle == "1", setting, int(jobs))))
        return
    jobs, rounds = (40, 1) if args.quick else (600, 3)
    rows = measure(jobs, rounds)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "benchmarks-memory.json").write_text(
        json.dumps({"jobs": jobs, "rounds": rounds, "rows": rows}, indent=2)
    )
    (args.out / "benchmarks-memory.md").write_text(markdown(rows, jobs, rounds))
    print(markdown(rows, jobs, rounds))


if __name__ == "__main__":
    main()
