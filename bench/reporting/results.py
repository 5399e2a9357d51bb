"""Lookups over a run's results (the JSON bench/run.py writes): its rows by contender,
handler, concurrency and added latency, the scenarios in report order, and each row's CPU
per message over the raw batched loop's, the figure that drifts least with the machine."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from measuring.plan import IO_HANDLERS

OTHERS = ("handloop", "threadpool", "celery")  # the alternatives (generated-p0 is the worker itself)
HANDLER_TEXT = {
    "noop": "no-op",
    "io10ms": "I/O 10 ms",
    "io100ms": "I/O 100 ms",
    "io1s": "I/O 1 s",
    "cpu": "CPU (sha256, 1 MiB)",
}
IO_SECONDS = {"io10ms": 0.01, "io100ms": 0.1, "io1s": 1.0}
MiB = 1024 * 1024


def ok_runs(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in results.get("runs", []) if "error" not in r]


def find(
    results: dict[str, Any], contender: str, handler: str, concurrency: int, added: str = "0"
) -> dict[str, Any] | None:
    """A throughput run with `added` ms on every request's round trip (measuring.plan's
    latency_label); the hand-written loop has one run per handler, shown at every row."""
    for r in ok_runs(results):
        same = r["contender"] == contender and r["handler"] == handler and r.get("added_ms", "0") == added
        if same and (contender == "handloop" or r["concurrency"] == concurrency):
            return r
    return None


def latencies(results: dict[str, Any]) -> list[str]:
    return list(results.get("added_latencies", ["0"]))


def kill_bound(row: dict[str, Any]) -> int:
    """What a SIGKILL may strand: the running jobs, the prefetch, and the deletes sent and
    not yet answered whose places were given back (`sent_bound`, the worker's)."""
    return int(row["concurrency"] + row["prefetch_bound"] + row.get("sent_bound", 0))


def kill_bound_text(row: dict[str, Any]) -> str:
    text = f"{row['concurrency']} running + {row['prefetch_bound']} prefetch"
    return text + (f" + {row['sent_bound']} deletes sent" if row.get("sent_bound") else "")


def latency_handlers(results: dict[str, Any], added: str) -> list[str]:
    """The handlers run with `added` ms (the spread's pass runs some of the plan's)."""
    return list(results.get("latency_handlers", {}).get(added, results["plan"]["handlers"]))


def latency_text(added: str) -> str:
    return "the emulator's latency" if added == "0" else f"+{added} ms"


def where(r: dict[str, Any]) -> str:
    return f"{r['handler']} c={r['concurrency']} {latency_text(r.get('added_ms', '0'))}"


def concurrencies(results: dict[str, Any], handler: str) -> list[int]:
    """The plan's concurrencies, and the template's default for the no-op handler."""
    plan = results["plan"]
    extra = plan.get("default_concurrency")
    return sorted({*plan["concurrencies"], extra}) if handler == "noop" and extra else list(plan["concurrencies"])


def scenarios(results: dict[str, Any]) -> Iterable[tuple[str, str, int]]:
    """Every throughput row of a run as (added latency, handler, concurrency), in report order."""
    for added in latencies(results):
        for handler in latency_handlers(results, added):
            for concurrency in concurrencies(results, handler):
                yield added, handler, concurrency


def by_contender(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["contender"]: r for r in rows}


def reference(results: dict[str, Any]) -> tuple[str, int]:
    """The scenario the summary quotes: 100 ms I/O at concurrency 10 when it was run."""
    plan = results["plan"]
    handler = (
        "io100ms"
        if "io100ms" in plan["handlers"]
        else next((h for h in plan["handlers"] if h in IO_HANDLERS), plan["handlers"][0])
    )
    concurrency = 10 if 10 in plan["concurrencies"] else plan["concurrencies"][-1]
    return handler, concurrency


def raw_cpu_ms(results: dict[str, Any]) -> float | None:
    """The raw batched loop's CPU per message in this run's ceiling: the cheapest of those
    runs (all at the emulator's latency), None if none completed."""
    figures = [r["cpu_ms_per_message"] for r in results["ceiling"]["runs"] if r.get("cpu_ms_per_message")]
    return min(figures, default=None)


def raw_beside(row: dict[str, Any], results: dict[str, Any]) -> dict[str, Any] | None:
    """The raw loop's run in a row's own scenario (same handler, concurrency and added
    latency, a turn of the same rotation), if it ran there: bench/run.py runs it in the
    no-op scenarios of targets.CPU_VS_RAW_AT. The raw loop's own rows have none."""
    if row.get("contender") == "raw" or "handler" not in row:
        return None
    return find(results, "raw", row["handler"], row["concurrency"], row.get("added_ms", "0"))


def cpu_vs_raw(row: dict[str, Any], results: dict[str, Any]) -> float | None:
    """A row's CPU per message over the raw batched loop's (None without either): over the
    raw loop's run beside it in its scenario where there is one, else over the ceiling's
    figure (the cheapest of the ceiling's runs: older results files, the other rows).

    A ratio of two figures taken side by side, at the same latency, drifts least: the
    machine's load falls on both alike, and the added latency changes what the loop
    itself costs. The ceiling's figure is the cheapest of several runs (other layouts, the
    start and the end of the run, the emulator's latency only): one row's single sample
    over it reads high."""
    beside = raw_beside(row, results)
    raw = beside["cpu_ms_per_message"] if beside else results["ceiling"].get("cpu_ms_per_message")
    if raw is None:  # a results file from before the figure was kept
        raw = raw_cpu_ms(results)
    mine = row.get("cpu_ms_per_message")
    return mine / raw if raw and mine is not None else None
