"""The generated worker beside earlier runs: the figures from before the profile's fixes
(docs/benchmarks-baseline.json) and the run this one replaced (PREVIOUS). Two runs on a
shared machine: efficiency and CPU over each run's own raw loop are the figures to read;
`make bench-versions` runs versions side by side in one run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reporting.results import HANDLER_TEXT, MiB, by_contender, cpu_vs_raw, find, latency_text, scenarios
from reporting.tables import num, ratio_text, table


def before_after(results: dict[str, Any], base: dict[str, Any]) -> str:
    """The generated worker now against its figures before the profile's fixes (a stored
    earlier run). Two runs, so machine drift applies; efficiency is each run's throughput
    over its own ceiling, which is why it is the figure to compare."""
    parts = [
        "\n## Before and after the profile's fixes\n",
        (
            f"The profile of the run of {base['date']} (revision {base['template']}) led to these changes "
            "in the worker runtime:\n"
        ),
        "\n".join(f"- {change}" for change in base["changes"]) + "\n",
        (
            f"Below, that run (**before**; ceiling {num(base['ceiling']['messages_per_second'], 0)} msg/s) against "
            f"this one (**after**; ceiling {num(results['ceiling']['messages_per_second'], 0)} msg/s). They are two "
            "runs on a shared machine: compare efficiency (throughput over each run's own ceiling or handler "
            "bound), requests and CPU per message rather than raw rates, and even those drift with the "
            "machine's load (the other contenders' figures move between runs too). A change is established "
            "only by measuring both versions side by side in one run, as the last change above was.\n"
        ),
    ]
    rows = []
    for before in base["runs"]:
        after = find(results, "generated", before["handler"], before["concurrency"])
        if after is None or "error" in before:
            continue
        eff = [r.get("efficiency") for r in (before, after)]
        rows.append(
            [
                HANDLER_TEXT.get(before["handler"], before["handler"]),
                str(before["concurrency"]),
                f"{num(before['throughput'])} → {num(after['throughput'])}",
                f"{num(eff[0], 2)} → {num(eff[1], 2)}" if None not in eff else "–",
                f"{num(before['requests_per_message'], 3)} → {num(after['requests_per_message'], 3)}",
                f"{num(before['cpu_ms_per_message'], 3)} → {num(after['cpu_ms_per_message'], 3)}",
            ]
        )
    parts.append(
        table(["handler", "concurrency", "msg/s", "efficiency", "SQS requests / message", "CPU ms / message"], rows)
        + "\n"
    )
    other = []
    for title, key, field, scale, digits in (
        ("idle requests / min", "idle", "requests_per_minute", 1, 1),
        ("idle receives / min", "idle", "receives_per_minute", 1, 1),
        ("idle drain (s)", "idle", "drain_seconds", 1, 2),
        ("peak RSS idle (MiB)", "idle", "peak_rss_bytes", MiB, 1),
        ("peak RSS at the memory scenario (MiB)", "memory", "peak_rss_bytes", MiB, 1),
        ("drain with jobs in flight: after the last job (s)", "drain", "after_last_job_seconds", 1, 2),
        ("drain: redelivered completed", "drain", "redelivered_completed", 1, 0),
    ):
        b = by_contender(base[key]).get("generated", {})
        a = by_contender(results[key]).get("generated", {})
        if field in b and field in a:
            other.append([title, num(b[field] / scale, digits), num(a[field] / scale, digits)])
    if other:
        parts.append(table(["figure", "before", "after"], other) + "\n")
    return "\n".join(parts)


PREVIOUS = "benchmarks-previous.json"  # the run this one replaced, kept beside it


def keep_previous(out: Path, plan: str) -> None:
    """Before a run overwrites `out`'s report, keep the run it replaces (same plan only: a
    smoke run is no measure of a full one) as PREVIOUS, for against_previous."""
    current = out / "benchmarks.json"
    if current.exists() and json.loads(current.read_text())["plan"]["name"] == plan:
        (out / PREVIOUS).write_text(current.read_text())


def against_previous(results: dict[str, Any], previous: dict[str, Any]) -> str:
    """The generated worker's rows against the same rows of the run before this one: what
    the engine's changes since did. Two runs, so the machine's drift is in every pair:
    efficiency and CPU over each run's own raw loop are the figures to read."""
    rows = []
    for added, handler, concurrency in scenarios(results):
        after = find(results, "generated", handler, concurrency, added)
        before = find(previous, "generated", handler, concurrency, added)
        if after is None or before is None:
            continue
        cpu = [cpu_vs_raw(before, previous), cpu_vs_raw(after, results)]
        rows.append(
            [
                HANDLER_TEXT.get(handler, handler),
                str(concurrency),
                latency_text(added),
                f"{num(before.get('efficiency'), 2)} → {num(after.get('efficiency'), 2)}",
                f"{num(before['requests_per_message'], 3)} → {num(after['requests_per_message'], 3)}",
                f"{ratio_text(cpu[0])} → {ratio_text(cpu[1])}",
            ]
        )
    kills = [by_contender(run["kill"]).get("generated", {}) for run in (previous, results)]
    met = [sum(1 for t in run.get("targets", []) if t["met"]) for run in (previous, results)]
    cpus = [run.get("machine", {}).get("cpu", "unknown") for run in (previous, results)]
    where = (
        "runs on a shared machine"
        if cpus[0] == cpus[1]
        else f"runs on different machines ({cpus[0]}, then {cpus[1]}), so not a measure of the engine"
    )
    return "\n".join(
        [
            f"\n## Against the previous run ({previous['date']})\n",
            (
                f"The generated worker's rows in the run this report replaced and in this one. They are two "
                f"{where}: read efficiency and CPU over each run's own raw loop, not raw rates, and expect a "
                "pair to move a few points with the machine alone. `make bench-versions` runs two versions "
                "side by side in one run.\n"
            ),
            table(
                ["handler", "concurrency", "latency", "efficiency", "SQS requests / message", "CPU / raw loop's"],
                rows,
            )
            + "\n",
            (
                f"Targets met: {met[0]} → {met[1]} of {len(results.get('targets', []))}. After a SIGKILL, left in "
                f"flight: {kills[0].get('left_in_flight', '–')} → {kills[1].get('left_in_flight', '–')}; run twice: "
                f"{kills[0].get('processed_twice', '–')} → {kills[1].get('processed_twice', '–')}.\n"
            ),
        ]
    )
