"""The benchmark's report: targets, tables, the chart. Pure functions of the results JSON,
so `python bench/report.py docs/benchmarks.json` re-renders docs/ without re-running."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqs_worker_engine.base.limits import MAX_RECEIVE_BATCH
from sqs_worker_engine.process.settings import load_settings
from sqs_worker_engine.runtime.protections.prefetch import default_prefetch

CONTENDERS = ("generated", "generated-p0", "handloop", "threadpool", "celery")
OTHERS = ("handloop", "threadpool", "celery")  # the alternatives (generated-p0 is the worker itself)
IO_HANDLERS = ("io10ms", "io100ms", "io1s")
HANDLER_TEXT = {
    "noop": "no-op",
    "io10ms": "I/O 10 ms",
    "io100ms": "I/O 100 ms",
    "io1s": "I/O 1 s",
    "cpu": "CPU (sha256, 1 MiB)",
}
IO_SECONDS = {"io10ms": 0.01, "io100ms": 0.1, "io1s": 1.0}
MiB = 1024 * 1024


# -- lookups ---------------------------------------------------------------------------


def ok_runs(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in results.get("runs", []) if "error" not in r]


def find(
    results: dict[str, Any], contender: str, handler: str, concurrency: int, added: str = "0"
) -> dict[str, Any] | None:
    """A throughput run with `added` ms on every request's round trip (bench/run.py's
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
    no-op scenarios of CPU_VS_RAW_AT. The raw loop's own rows have none."""
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


# -- targets ---------------------------------------------------------------------------

# A row ran on a saturated machine when every process together (LocalStack, the proxy, the
# harness, the contender) kept this share of its cores busy: the machine set the pace, and
# the efficiency target does not count it (the report lists those rows).
SATURATED = 0.85
EFFICIENCY_UP_TO = 100  # the efficiency target's rows: every I/O-like one up to this concurrency
CPU_VS_RAW_TARGET = 1.2
CPU_VS_RAW_AT = (8, 50)  # the no-op concurrencies the CPU target holds (the raw loop runs beside them)


# Two contenders that both run at this share of the ideal (concurrency / handler latency) or
# more are tied: the handler set the pace, and what is left between them is the clock's noise
# over a window (49.9 against 50.0 messages a second), not a difference between workers.
TIED_AT_IDEAL = 0.99


def tied_at_ideal(row: dict[str, Any], other: dict[str, Any]) -> bool:
    return min(row["efficiency"], other["efficiency"]) >= TIED_AT_IDEAL


def saturated(row: dict[str, Any], results: dict[str, Any]) -> bool:
    busy = row.get("machine_busy_cores")
    return busy is not None and busy >= SATURATED * results["machine"]["cores"]


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The generated worker's targets (issue-level promises), met, not met, or not
    measured (None). Never fatal."""
    out: list[dict[str, Any]] = []

    def add(name: str, met: bool | None, figure: str) -> None:
        out.append({"name": name, "met": met, "figure": figure})

    runs = ok_runs(results)
    gen = [r for r in runs if r["contender"] == "generated"]
    gen_io = [r for r in gen if r["handler"] in IO_HANDLERS]
    name = (
        f"efficiency >= 0.9 in every I/O-like row up to concurrency {EFFICIENCY_UP_TO}, at both latencies, "
        f"where the machine is not saturated ({SATURATED:.0%} of its cores busy or more)"
    )
    counted = [r for r in gen_io if r["concurrency"] <= EFFICIENCY_UP_TO and not saturated(r, results)]
    busy = [where(r) for r in gen_io if r["concurrency"] <= EFFICIENCY_UP_TO and saturated(r, results)]
    if counted:
        worst = min(counted, key=lambda r: r["efficiency"])
        below = [f"{where(r)}: {r['efficiency']:.2f}" for r in counted if r["efficiency"] < 0.9]
        figure = f"lowest {worst['efficiency']:.2f} ({where(worst)})"
        figure += f"; below: {', '.join(below)}" if below else ""
        figure += f"; machine saturated, not counted: {', '.join(busy)}" if busy else ""
        add(name, not below, figure)
    else:
        add(name, None, "no I/O-like run" if not gen_io else f"every row saturated: {', '.join(busy)}")

    name = (
        f"no-op CPU per message <= {CPU_VS_RAW_TARGET}x the raw loop's beside it (same latency, same rotation) "
        f"at concurrency {' and '.join(map(str, CPU_VS_RAW_AT))}, at every latency"
    )
    cheap = [
        (r, ratio)
        for r in gen
        if r["handler"] == "noop"
        and r["concurrency"] in CPU_VS_RAW_AT
        and (ratio := cpu_vs_raw(r, results)) is not None
    ]
    if cheap:
        each = ", ".join(
            f"{where(r)}: {ratio:.2f}x" + ("" if raw_beside(r, results) else " (over the ceiling's raw loop)")
            for r, ratio in cheap
        )
        add(name, all(ratio <= CPU_VS_RAW_TARGET for _, ratio in cheap), each)
    else:
        add(name, None, "not run")

    name = "ahead of the best other contender in every row where they are not tied at the ideal, at both latencies"
    behind, tied, ratios = [], [], []
    for r in gen:
        if r["concurrency"] not in results["plan"]["concurrencies"]:
            continue
        others = [o for c in OTHERS if (o := find(results, c, r["handler"], r["concurrency"], r["added_ms"]))]
        if not others:
            continue
        best = max(others, key=lambda o: o["throughput"])
        ratios.append(r["throughput"] / best["throughput"])
        versus = f"{where(r)}: {r['throughput']:.1f} vs {best['contender']} {best['throughput']:.1f}"
        if tied_at_ideal(r, best):
            tied.append(versus)
        elif r["throughput"] <= best["throughput"]:
            behind.append(versus)
    add(
        name,
        (not behind) if ratios else None,
        (
            f"ahead in {len(ratios) - len(behind) - len(tied)} of {len(ratios)}; "
            f"ratio {min(ratios):.2f}x to {max(ratios):.2f}x"
            if ratios
            else "not run"
        )
        + (f"; behind: {', '.join(behind)}" if behind else "")
        + (f"; tied at the ideal (both >= {TIED_AT_IDEAL}): {', '.join(tied)}" if tied else ""),
    )

    g, h = find(results, "generated", "io100ms", 10), find(results, "handloop", "io100ms", 1)
    name = ">= 3x the hand-written loop at concurrency 10, 100 ms handlers"
    if g and h:
        ratio = g["throughput"] / h["throughput"]
        add(name, ratio >= 3, f"{ratio:.1f}x ({g['throughput']:.1f} vs {h['throughput']:.1f} msg/s)")
    else:
        add(name, None, "not run")

    name = "<= 0.205 SQS requests per message at saturation, every concurrency"
    sat = [r for r in gen if r["handler"] == "noop"]
    if sat:
        worst = max(sat, key=lambda r: r["requests_per_message"])
        each = ", ".join(f"{where(r)}: {r['requests_per_message']:.3f}" for r in sat)
        add(name, worst["requests_per_message"] <= 0.205, each)
    else:
        add(name, None, "not run")

    idle = by_contender(r for r in results["idle"] if "error" not in r).get("generated")
    name = "<= 3 requests per minute per poller when idle"
    if idle:
        add(
            name,
            idle["requests_per_minute_per_poller"] <= 3,
            f"{idle['requests_per_minute_per_poller']:.2f} per poller ({idle['pollers']} poller(s); "
            f"{idle['receives_per_minute'] / idle['pollers']:.2f} of them receives; {fmt_requests(idle['requests'])})",
        )
    else:
        add(name, None, "not run")

    name = "less CPU per message than every other contender at every concurrency (no-op handler)"
    losses = []
    compared = 0
    for r in sat:
        for other in OTHERS:
            o = find(results, other, "noop", r["concurrency"], r["added_ms"])
            if o and r["concurrency"] in results["plan"]["concurrencies"]:
                compared += 1
                if o["cpu_ms_per_message"] <= r["cpu_ms_per_message"]:
                    losses.append(
                        f"{other} at {where(o)}: {o['cpu_ms_per_message']:.3f} vs {r['cpu_ms_per_message']:.3f} ms"
                    )
    gen_cpu = ", ".join(f"{where(r)}: {r['cpu_ms_per_message']:.3f}" for r in sat)
    add(
        name,
        (not losses) if compared else None,
        f"generated, CPU s per 1,000 messages: {gen_cpu}" + (f"; not lower than {'; '.join(losses)}" if losses else ""),
    )

    name = "idle drain under 1 s"
    if idle:
        d = idle["drain_seconds"]
        add(name, d is not None and d < 1, f"{d:.2f} s" if d is not None else "killed after 60 s")
    else:
        add(name, None, "not run")

    name = "nothing left in flight and nothing run twice after a SIGTERM drain"
    drain = by_contender(r for r in results["drain"] if "error" not in r).get("generated")
    if drain:
        redone = drain["redelivered_completed"] + drain["processed_twice"]
        add(
            name,
            redone == 0 and drain["left_in_flight"] == 0 and drain["lost"] == 0,
            f"{drain['left_in_flight']} left in flight, {drain['redelivered_completed']} redelivered after completing, "
            f"{drain['processed_twice']} run twice, {drain['lost']} lost",
        )
    else:
        add(name, None, "not run")

    name = "after a SIGKILL, no more stranded than the running jobs and the prefetch bound; nothing run twice"
    kill = by_contender(r for r in results.get("kill", []) if "error" not in r).get("generated")
    if kill:
        bound = kill_bound(kill)
        redone = kill["redelivered_completed"] + kill["processed_twice"]
        add(
            name,
            kill["left_in_flight"] <= bound and redone == 0 and kill["lost"] == 0,
            f"{kill['left_in_flight']} left in flight (bound {kill_bound_text(kill)} = {bound}), "
            f"{kill['redelivered_completed']} redelivered after "
            f"completing, {kill['processed_twice']} run twice, {kill['lost']} lost",
        )
    else:
        add(name, None, "not run")
    return out


def fmt_requests(requests: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(requests.items())) or "none"


# -- markdown --------------------------------------------------------------------------


def num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def ratio_text(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}x"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def scenario_table(
    results: dict[str, Any], cell: Any, added: str = "0", handlers: Iterable[str] | None = None, ideal: bool = False
) -> str:
    labels = results["contenders"]
    header = ["handler", "concurrency", *(labels[c] for c in CONTENDERS)]
    if ideal:
        header.append("ideal")
    rows = []
    for handler in handlers or latency_handlers(results, added):
        for concurrency in concurrencies(results, handler):
            row = [HANDLER_TEXT.get(handler, handler), str(concurrency)]
            ideal_value = None
            for contender in CONTENDERS:
                r = find(results, contender, handler, concurrency, added)
                if (
                    contender not in ("generated", "generated-p0")
                    and concurrency not in results["plan"]["concurrencies"]
                ):
                    r = None  # the template's default concurrency is run for the worker alone
                failed = next(
                    (
                        x
                        for x in results["runs"]
                        if "error" in x
                        and x["contender"] == contender
                        and x["handler"] == handler
                        and x.get("added_ms", "0") == added
                        and (contender == "handloop" or x["concurrency"] == concurrency)
                    ),
                    None,
                )
                text = cell(r) if r else ("error" if failed else "–")
                if contender == "handloop" and r and text != "–":
                    text += " (c=1)"
                row.append(text)
                if r and r.get("ideal") and contender == "generated":
                    ideal_value = r["ideal"]
            if ideal:
                row.append(num(ideal_value))
            rows.append(row)
    return table(header, rows)


def summary_columns(results: dict[str, Any]) -> list[str]:
    plan = results["plan"]
    handler, concurrency = reference(results)
    slow = next((a for a in latencies(results) if a != "0"), None)
    return [
        "contender",
        f"msg/s ({HANDLER_TEXT[handler]}, c={concurrency})",
        "efficiency, I/O-like (min–max)",
        *([f"efficiency, I/O-like, +{slow} ms (min–max)"] if slow else []),
        f"SQS requests / message (no-op, c={concurrency})",
        "idle requests / min (per poller)",
        f"CPU s / 1,000 messages (no-op, c={concurrency})",
        f"CPU / message over the raw loop's (no-op, c={concurrency})",
        "peak RSS idle (MiB)",
        f"peak RSS, c={plan['rss_concurrency']}, {plan['rss_bytes'] // 1024} KiB messages (MiB)",
        "idle drain (s)",
        "drain with jobs in flight (s): SIGTERM to exit / after the last job",
        "redelivered completed / left in flight on exit",
        "left in flight after SIGKILL (running + prefetch bound)",
    ]


def summary_rows(results: dict[str, Any]) -> list[list[str]]:
    handler, concurrency = reference(results)
    idle = by_contender(results["idle"])
    memory = by_contender(results["memory"])
    drain = by_contender(results["drain"])
    kill = by_contender(results.get("kill", []))
    slow = next((a for a in latencies(results) if a != "0"), None)
    rows = []
    for contender in CONTENDERS:
        ref = find(results, contender, handler, concurrency)
        noop = find(results, contender, "noop", concurrency)

        def span(added: str, contender: str = contender) -> str:
            effs = [
                r["efficiency"]
                for r in ok_runs(results)
                if r["contender"] == contender and r["handler"] in IO_HANDLERS and r.get("added_ms", "0") == added
            ]
            return f"{min(effs):.2f}–{max(effs):.2f}" if effs else "–"

        i, m, d = idle.get(contender, {}), memory.get(contender, {}), drain.get(contender, {})
        k = kill.get(contender, {})
        row = [
            results["contenders"][contender],
            num(ref["throughput"]) + (" (c=1)" if contender == "handloop" else "") if ref else "–",
            span("0"),
            *([span(slow)] if slow else []),
            num(noop["requests_per_message"], 3) if noop else "–",
            (
                f"{num(i['requests_per_minute'])} ({num(i['requests_per_minute_per_poller'])})"
                if "requests_per_minute" in i
                else "error"
            ),
            num(noop["cpu_ms_per_message"], 2) if noop else "–",
            ratio_text(cpu_vs_raw(noop, results)) if noop else "–",
            num(i["peak_rss_bytes"] / MiB) if "peak_rss_bytes" in i else "error",
            num(m["peak_rss_bytes"] / MiB) if "peak_rss_bytes" in m else "error",
            drain_text(i) if "drain_seconds" in i else "error",
            (f"{drain_text(d)} / {num(d['after_last_job_seconds'], 2)}" if "after_last_job_seconds" in d else "error"),
            (
                f"{d['redelivered_completed'] + d['processed_twice']} / {d['left_in_flight']}"
                if "redelivered_completed" in d
                else "error"
            ),
            (f"{k['left_in_flight']} ({kill_bound_text(k)})" if "left_in_flight" in k else "error"),
        ]
        rows.append(row)
    return rows


def round_trips(results: dict[str, Any]) -> str:
    runs = [r for r in results["ceiling"]["runs"] if "error" not in r]
    if not runs:
        return "–"
    best = max(runs, key=lambda r: r["throughput"])
    ms = best.get("request_ms", {})
    return ", ".join(f"{op} {value:.1f} ms" for op, value in sorted(ms.items()))


def drain_text(row: dict[str, Any]) -> str:
    return "killed" if row.get("drain_seconds") is None else num(row["drain_seconds"], 2)


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


def why_missed(results: dict[str, Any]) -> str:
    """For each missed throughput target, what this run measured in its rows: how busy the
    machine was (every process: LocalStack, the proxy, the contender), the worker's own
    CPU, the receive round trip, and the same row with prefetch off. A reader should not
    have to take a reason on trust."""
    missed = {t["name"] for t in results["targets"] if t["met"] is False}
    if not any(n.startswith(("efficiency", "ahead of")) for n in missed):
        return ""
    cores = results["machine"]["cores"]
    rows = []
    for r in ok_runs(results):
        if r["contender"] != "generated" or r["handler"] not in IO_HANDLERS + ("noop",):
            continue
        others = [o for c in OTHERS if (o := find(results, c, r["handler"], r["concurrency"], r["added_ms"]))]
        best = max(others, key=lambda o: o["throughput"], default=None)
        short = r["handler"] in IO_HANDLERS and r["efficiency"] < 0.9
        behind = best is not None and r["throughput"] <= best["throughput"] and not tied_at_ideal(r, best)
        if not (short or behind):
            continue
        off = find(results, "generated-p0", r["handler"], r["concurrency"], r["added_ms"])
        busy = r.get("machine_busy_cores")
        seconds = IO_SECONDS.get(r["handler"])
        beyond = 1000 * (r["concurrency"] / r["throughput"] - seconds) if seconds else None
        ms = r.get("request_ms", {})
        trip = ms.get("ReceiveMessage", 0.0) / 1000 + (seconds or 0.0)
        places = r["concurrency"] + default_prefetch(r["concurrency"])
        # Messages whose delete call is out at the ideal rate (Little's law again), and those calls.
        deleting = r["ideal"] * ms.get("DeleteMessageBatch", 0.0) / 1000 if r.get("ideal") else None
        rows.append(
            [
                HANDLER_TEXT.get(r["handler"], r["handler"]),
                str(r["concurrency"]),
                latency_text(r["added_ms"]),
                num(r["efficiency"], 2),
                num(off["efficiency"], 2) if off else "–",
                f"{best['contender']} {num(best['throughput'] / r['ideal'], 2)}" if best and r.get("ideal") else "–",
                f"{num(busy, 2)} of {cores}" if busy is not None else "–",
                num(r["cpu_cores"], 2),
                num(beyond, 1),
                num(ms.get("ReceiveMessage"), 1),
                f"{num(r['ideal'] * trip, 0)} / {places}" if r.get("ideal") else "–",
                f"{num(deleting, 0)} / {default_prefetch(r['concurrency'])}, "
                f"{num(deleting / MAX_RECEIVE_BATCH, 0)} / {worker_connections(r['concurrency'])}"
                if deleting is not None
                else "–",
            ]
        )
    text = (
        "Where the generated worker fell short of 0.9 or was not ahead, the figures of the row itself. "
        "*Machine busy* is every process's CPU over the window (LocalStack, the proxy and the harness "
        "share the cores with the contender): near the core count, the machine set the pace, and the "
        "emulator's ceiling, measured with nothing else running, overstates what was left for the "
        "worker. *Worker CPU* is the worker's own process: its jobs share one event loop, so near 1 core "
        "a job that ends waits for the loop before the next one starts. *Beyond the handler* is what "
        "that costs each job: concurrency / throughput, less the handler's own time. *ReceiveMessage* "
        "is its mean round trip through the proxy, the added latency included. *Held at the ideal rate / "
        "bound*: by Little's law, the messages a worker must hold to run at the ideal rate (a place is "
        "taken when its receive is sent and given back when its delete call goes out: ideal rate x "
        "(ReceiveMessage round trip + handler)), against what the worker may hold with its default "
        "prefetch cap (concurrency + `WORKER_PREFETCH`); where the first is larger, the bound set the "
        "pace, and a larger `WORKER_PREFETCH` raises it. *Deletes out at the ideal rate*: the messages "
        "whose delete call is out (ideal rate x DeleteMessageBatch round trip) against the prefetch cap, "
        "past which a message keeps its place until its delete is answered; and those calls (a tenth as "
        "many) against the connections of the worker's client for deletes and heartbeats (one for each "
        "poller, and 10), past which a delete waits for a connection.\n\n"
    )
    return (
        text
        + table(
            [
                "handler",
                "concurrency",
                "latency",
                "efficiency",
                "prefetch off",
                "best other",
                "machine busy (cores)",
                "worker CPU (cores)",
                "per job beyond the handler (ms)",
                "ReceiveMessage (ms)",
                "held at the ideal rate / bound",
                "deletes out at the ideal rate: messages / cap, calls / connections",
            ],
            rows,
        )
        + "\n"
    )


def worker_connections(concurrency: int) -> int:
    """The control client's connections of a one-queue worker at `concurrency`, its other
    settings the defaults the bench runs with, as the engine sizes them."""
    return load_settings({"WORKER_QUEUES": "bench", "WORKER_CONCURRENCY": str(concurrency)}).control_connections


def prefetch_section(results: dict[str, Any]) -> str:
    """The worker with its default prefetch against WORKER_PREFETCH=0, row by row, from
    this one run (their turns alternate with the other contenders')."""
    rows = []
    for added, handler, concurrency in scenarios(results):
        on = find(results, "generated", handler, concurrency, added)
        off = find(results, "generated-p0", handler, concurrency, added)
        if not (on and off):
            continue
        rows.append(
            [
                latency_text(added),
                HANDLER_TEXT.get(handler, handler),
                str(concurrency),
                f"{num(off['throughput'])} → {num(on['throughput'])}",
                f"{num(on['throughput'] / off['throughput'], 2)}x" if off["throughput"] else "–",
                f"{num(off['efficiency'], 2)} → {num(on['efficiency'], 2)}"
                if on.get("efficiency") is not None and off.get("efficiency") is not None
                else "–",
                f"{num(off['requests_per_message'], 3)} → {num(on['requests_per_message'], 3)}",
                f"{num(off['cpu_ms_per_message'], 3)} → {num(on['cpu_ms_per_message'], 3)}",
            ]
        )
    if not rows:
        return ""
    return (
        "\n## Prefetch: off → on (the default), side by side in this run\n\n"
        "`WORKER_PREFETCH=0` (the worker before prefetch: it receives only for free slots) → the default "
        "(up to three times the concurrency, at least 50 and at most 200, held beyond the running jobs, sized "
        "within that by Little's law; a place given back when its delete is sent, up to as many deletes out).\n\n"
        + table(
            [
                "latency",
                "handler",
                "concurrency",
                "msg/s",
                "ratio",
                "efficiency",
                "SQS requests / message",
                "CPU ms / message",
            ],
            rows,
        )
        + "\n"
    )


def floor_method(results: dict[str, Any]) -> str:
    """The Method's entry on the CPU floor: what each row's CPU per message is divided by."""
    beside = [r for r in ok_runs(results) if r["contender"] == "raw"]
    raw = results["ceiling"].get("cpu_ms_per_message") or raw_cpu_ms(results)
    ceiling = f"the cheapest of the ceiling's runs ({num(raw, 3)} ms)"
    if not beside:
        return f"- **CPU over the raw loop's** = a row's CPU per message / {ceiling}.\n"
    at = " and ".join(str(c) for c in sorted({r["concurrency"] for r in beside}))
    processes, threads = beside[0]["processes"], beside[0]["threads"]
    layout = f"{threads} threads" + (" in one process" if processes == 1 else f" in each of {processes} processes")
    return f"""- **CPU over the raw loop's** = a row's CPU per message / the raw batched loop's, the floor. In
  the no-op scenarios at concurrency {at}, at every latency, the raw loop ({layout}, the
  layout cheapest per message in the full plan's ceiling runs) takes its turn in the rotation
  beside the others, with the same latency added, and those rows are divided by that run: two
  figures taken side by side at the same latency drift least with the machine's load, and the
  added latency changes what the loop itself costs. The other rows are divided by {ceiling},
  taken at the emulator's latency. The raw loop is the floor, not a contender: no other table
  lists it.
"""


def markdown(
    results: dict[str, Any], baseline: dict[str, Any] | None = None, previous: dict[str, Any] | None = None
) -> str:
    plan = results["plan"]
    m = results["machine"]
    labels = results["contenders"]
    libs = m["libraries"]
    parts: list[str] = []
    add = parts.append
    add("# Benchmarks: the generated worker against the alternatives\n")
    add(
        f"Run of {results['date']} (`{plan['name']}` plan, {results['duration_seconds'] / 60:.0f} min), regenerated by "
        "`make bench`. Every contender ran as its own process against fresh queues on the same LocalStack, "
        "with the same handler, and every SQS request went through one counting proxy. The raw figures are in "
        "[benchmarks.json](benchmarks.json); the method is below.\n"
    )
    if plan["name"] == "smoke":
        add("> A smoke run: tiny counts and 1 s long polls. It checks the harness; its figures mean nothing.\n")
    add("## Targets for the generated worker\n")
    add(
        table(
            ["target", "", "figure"],
            [
                [t["name"], {True: "met", False: "**not met**", None: "not measured"}[t["met"]], t["figure"]]
                for t in results["targets"]
            ],
        )
        + "\n"
    )
    missed = why_missed(results)
    if missed:
        add(missed)
    add("## Summary\n")
    add(table(summary_columns(results), summary_rows(results)) + "\n")
    add(
        "\n![Throughput against concurrency for the I/O-like handlers](benchmarks.png)\n\n"
        "Throughput against concurrency, I/O-like handlers, log scales. The dotted line is the ideal: "
        "concurrency / handler latency, capped by the emulator's ceiling (the grey band). The hand-written "
        "loop has one concurrency (1) and is drawn flat.\n"
    )
    add("## Method\n")
    add(
        f"""- **Contenders.** {labels["generated"]}: `python -m {results["package"]} run`, settings from the environment
  (concurrency via `WORKER_CONCURRENCY`, its default prefetch and pollers, 20 s long polls, batched
  deletes), the handler module given by `WORKER_HANDLERS` (`bench/contenders/generated_handlers.py`).
  {labels["generated-p0"]}: the same with `WORKER_PREFETCH=0`.
  {labels["handloop"]}: boto3, receive 10, handle each in turn, `DeleteMessage` each; stops between
  batches on SIGTERM. {labels["threadpool"]}: one boto3 receiver (10 at a time, whenever a thread is
  free) feeding a `ThreadPoolExecutor` of *concurrency* threads, each deleting its message when done.
  {labels["celery"]}: Celery {libs.get("celery")} with kombu {libs.get("kombu")}'s SQS transport, threads pool of
  *concurrency* threads, `task_acks_late` (delete after the handler, like the others); Celery's
  defaults otherwise: prefetch multiplier 4, 10 s long polls, one `DeleteMessage` per message, and
  kombu's `polling_interval` of 1 s, which it also waits whenever its prefetch is full (so at low
  concurrency Celery fetches at most *4 x concurrency* messages a second).
  Celery consumes its own message format: its queues get the same payloads wrapped in the envelope
  Celery itself produces.
- **Same handler.** `bench/contenders/common.py`, for all: parse the JSON body, do the work, append
  the id and time to a completion log. No-op; I/O-like: wait 10 ms, 100 ms or 1 s (`asyncio.sleep`
  in the generated worker's `async def` handler, `time.sleep` in the threaded ones); CPU-like:
  sha256 over 1 MiB ({results["cpu_handler_seconds"] * 1000:.2f} ms here; the generated worker runs it as a plain
  `def`, in its thread pool, as the others run every handler).
- **Counting.** Every contender's endpoint is the engine's `engine/tests/faultproxy.py` proxy
  in front of LocalStack (with its per-client message tracking off, so that it parses nothing);
  SQS requests are the proxy's per-operation counts. Messages processed
  are read from the completion log. No figure comes from a contender's own account.
- **Latency.** Every throughput scenario runs {" and ".join(latency_text(a) for a in latencies(results))}: the
  proxy holds every request for the added round trip (a uniform draw where a spread is given)
  before it forwards it, as SQS in-region takes about 20 ms where LocalStack takes a few.
  The other measurements run at the emulator's latency.
- **Throughput.** For each handler and concurrency, each contender in turn (the order rotates
  every scenario) gets a fresh queue seeded beforehand, straight to LocalStack, with enough
  messages for the whole run; after {plan["warmup"]:g} s of warm-up, a {plan["window"]:g} s window counts
  completions, proxy requests and the process's CPU time (user + system, psutil). The window
  closes early if the backlog runs low, so the queue never runs dry inside it.
- **Efficiency** = throughput / min(concurrency / handler latency, the emulator's ceiling); for the
  CPU-like handler, min(concurrency, cores) / latency. The **ceiling** is a raw batched loop
  (`bench/contenders/raw_loop.py`: processes of threads that receive 10 and `DeleteMessageBatch`
  them, nothing else) through the same proxy in the same run: {num(results["ceiling"]["messages_per_second"])} msg/s, the best of
  {len(results["ceiling"]["runs"])} measurement(s).
{floor_method(results)}- **SQS requests per message** = all requests in the window / messages completed in it (0.2 is
  the floor: one receive of 10 and one batch delete of 10). "At saturation" is the no-op handler.
- **Idle.** An empty queue, concurrency {plan["idle_concurrency"]} (its pollers as listed), {plan["idle_window"]:g} s after start-up
  calls are over: requests per minute, and per poller; resident memory; then SIGTERM and the
  seconds to exit (**idle drain**).
- **Memory under load.** Concurrency {plan["rss_concurrency"]}, {plan["rss_bytes"] // 1024} KiB payloads, {HANDLER_TEXT.get(plan["rss_handler"], plan["rss_handler"])} handler: peak RSS
  (VmHWM) over {plan["rss_seconds"]:g} s of processing.
- **Drain.** Concurrency {plan["drain_concurrency"]}, {plan["drain_handler"]} handler, visibility timeout {plan["drain_visibility"]} s: after the first
  wave completes and the next is half-way, SIGTERM. Reported: seconds from SIGTERM to exit, and
  from the last job's end to exit (the drain's own cost, without the remaining job time);
  messages left in flight on exit (hidden until their visibility timeout although no one works
  on them); and, after waiting that timeout out, messages SQS delivers again although they had
  completed (**redelivered completed**: the handler would run twice), plus any lost.
  **Kill**: the same with SIGKILL, as a crash or an OOM kill; what is left in flight then waits
  out the visibility timeout, and the bound is the running jobs plus what the contender holds
  beyond them (the worker's prefetch cap; 9 of a receive of 10 for the loops; 3 x concurrency
  for Celery's prefetch multiplier of 4).
- **Profile.** py-spy samples the generated worker at concurrency 1 and at saturation, no-op
  handler (and at its worst I/O-like case if one fell short of 0.9): the share of samples by
  function and file.
"""
    )
    add("## Machine\n")
    add(
        table(
            ["", ""],
            [
                ["template revision (the service measured)", m.get("template", "–")],
                ["cores", str(m["cores"])],
                ["CPU", m["cpu"]],
                ["memory", f"{m['memory_gib']} GiB"],
                ["OS", m["os"]],
                ["Python (contenders)", m["contender_python"]],
                ["Python (harness, proxy)", m["harness_python"]],
                ["LocalStack", m["localstack"]],
                ["SQS round trip (raw loop at the ceiling, via the proxy)", round_trips(results)],
                ["libraries", ", ".join(f"{k} {v}" for k, v in libs.items())],
                ["load average (start, end)", f"{m['load_average_at_start']}, {m.get('load_average_at_end', '–')}"],
                ["date", results["date"]],
            ],
        )
        + "\n"
    )
    add(
        "\nLocalStack, the proxy, the harness and the contender share the cores: on a small machine the "
        "ceiling is the emulator's and the proxy's CPU, not SQS's. Compare contenders within this run; "
        "absolute rates on AWS differ.\n"
    )
    add(prefetch_section(results))
    for added in latencies(results):
        at = latency_text(added)
        add(f"\n## Throughput (messages per second), {at}\n")
        add(scenario_table(results, lambda r: num(r["throughput"]), added, ideal=True) + "\n")
        add(f"\n## Efficiency (throughput / ideal), {at}\n")
        add(
            scenario_table(
                results, lambda r: num(r["efficiency"], 2) if r.get("efficiency") is not None else "–", added
            )
            + "\n"
        )
        add(f"\n## SQS requests per processed message, {at}\n")
        add(scenario_table(results, lambda r: num(r["requests_per_message"], 3), added) + "\n")
        add(f"\n## CPU seconds per 1,000 messages, {at}\n")
        add(
            "The contender's own process (user + system); the no-op rows are the cost of the machinery alone.\n\n"
            + scenario_table(results, lambda r: num(r["cpu_ms_per_message"], 2), added)
            + "\n"
        )
        raw = results["ceiling"].get("cpu_ms_per_message") or raw_cpu_ms(results)
        if raw:
            add(f"\n## CPU per message over the raw batched loop's, {at}\n")
            beside = [r for r in ok_runs(results) if r["contender"] == "raw" and r["added_ms"] == added]
            by = f"by the cheapest of its ceiling runs ({num(raw, 3)} ms, at the emulator's latency)"
            if beside:
                figures = ", ".join(f"c={r['concurrency']}: {num(r['cpu_ms_per_message'], 3)} ms" for r in beside)
                by = f"in the no-op rows it ran beside, by that run ({figures}); in the others, {by}"
            add(
                f"Each row's CPU per message divided by the raw batched loop's in this run, {by}. 1.00x is a "
                "loop that receives 10 and deletes them in one batch call and does nothing else. Two figures "
                "measured side by side drift far less with the machine's load than either one alone.\n\n"
                + scenario_table(results, lambda r: ratio_text(cpu_vs_raw(r, results)), added)
                + "\n"
            )
    add("\n## Idle\n")
    rows = []
    for r in sorted(results["idle"], key=lambda r: CONTENDERS.index(r["contender"])):
        if "error" in r:
            rows.append([labels[r["contender"]], "error", "", "", "", "", ""])
            continue
        rows.append(
            [
                labels[r["contender"]],
                f"{r['concurrency']} / {r['pollers']}",
                num(r["requests_per_minute"], 2),
                num(r["requests_per_minute_per_poller"], 2),
                fmt_requests(r["requests"]),
                num(r["peak_rss_bytes"] / MiB),
                drain_text(r),
            ]
        )
    add(
        table(
            [
                "contender",
                "concurrency / pollers",
                "requests / min",
                "per poller",
                f"requests in {plan['idle_window']:g} s",
                "peak RSS (MiB)",
                "idle drain (s)",
            ],
            rows,
        )
        + "\n"
    )
    add("\n## Memory with every slot busy\n")
    rows = []
    for r in sorted(results["memory"], key=lambda r: CONTENDERS.index(r["contender"])):
        peak = num(r["peak_rss_bytes"] / MiB) if "peak_rss_bytes" in r else "error"
        rows.append([labels[r["contender"]], str(r["concurrency"]), f"{r['message_bytes'] // 1024} KiB", peak])
    add(table(["contender", "concurrency", "payload", "peak RSS (MiB)"], rows) + "\n")
    add("\n## Drain with jobs in flight\n")
    rows = []
    for r in sorted(results["drain"], key=lambda r: CONTENDERS.index(r["contender"])):
        if "error" in r:
            rows.append([labels[r["contender"]], "error", "", "", "", "", "", ""])
            continue
        rows.append(
            [
                labels[r["contender"]],
                str(r["concurrency"]),
                drain_text(r),
                num(r["after_last_job_seconds"], 2),
                str(r["jobs_finished_after_signal"]),
                str(r["left_in_flight"]),
                str(r["redelivered_completed"] + r["processed_twice"]),
                str(r["lost"]),
            ]
        )
    add(
        table(
            [
                "contender",
                "concurrency",
                "SIGTERM to exit (s)",
                "after the last job (s)",
                "jobs finished after SIGTERM",
                "left in flight",
                "redelivered completed",
                "lost",
            ],
            rows,
        )
        + "\n"
    )
    add("\n## SIGKILL with jobs in flight\n")
    rows = []
    for r in sorted(results.get("kill", []), key=lambda r: CONTENDERS.index(r["contender"])):
        if "error" in r:
            rows.append([labels[r["contender"]], "error", "", "", "", ""])
            continue
        rows.append(
            [
                labels[r["contender"]],
                str(r["concurrency"]),
                str(r["left_in_flight"]),
                kill_bound_text(r),
                str(r["redelivered_completed"] + r["processed_twice"]),
                str(r["lost"]),
            ]
        )
    add(
        table(
            [
                "contender",
                "concurrency",
                "left in flight",
                "bound: running + held beyond",
                "redelivered completed",
                "lost",
            ],
            rows,
        )
        + "\n"
    )
    if previous:
        add(against_previous(results, previous))
    if baseline and plan["name"] == "full":
        add(before_after(results, baseline))
    if results.get("profiles"):
        add("\n## Where the generated worker spends its CPU\n")
        for p in results["profiles"]:
            add(f"\n### {HANDLER_TEXT.get(p['handler'], p['handler'])}, concurrency {p['concurrency']}\n")
            if "error" in p:
                add(f"Profile failed: {p['error']}\n")
                continue
            add(
                f"{p['samples']} samples (py-spy, 200 Hz, busy threads only) over {p.get('messages', 0)} messages; "
                f"the worker used {p.get('cpu_cores', 0):.2f} cores meanwhile.\n"
            )
            for title, key, rows in (
                ("self time, by library", "areas", 10),
                ("what the event loop was running (inclusive)", "callbacks", 10),
                ("the worker's own functions (inclusive of the calls they make)", "runtime", 12),
                ("hottest functions (self)", "self", 10),
            ):
                add(table([title, "share"], [[f"`{x['frame']}`", f"{x['share']:.0%}"] for x in p[key][:rows]]) + "\n")
    notes = [r for r in results["runs"] if r.get("note")]
    if notes:
        add("\n## Notes on single rows\n")
        for r in notes:
            add(f"- {labels[r['contender']]}, {where(r)}: {r['note']}.\n")
    kinds = ("runs", "idle", "memory", "drain", "kill")
    errors = [r for kind in kinds for r in results.get(kind, []) if "error" in r]
    if errors:
        add("\n## Errors\n")
        for r in errors:
            add(f"- {r['contender']} {r.get('handler', '')} c={r.get('concurrency', '')}: {r['error'][:400]}\n")
    return "\n".join(p.rstrip("\n") + "\n" for p in parts)


# -- the chart -------------------------------------------------------------------------

COLOURS = {
    "generated": "#1b6ac9",
    "generated-p0": "#8fb8ea",
    "handloop": "#7f7f7f",
    "threadpool": "#e08214",
    "celery": "#2ca25f",
}


def chart(results: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    handlers = [h for h in results["plan"]["handlers"] if h in IO_HANDLERS]
    if not handlers:
        return False
    concurrencies = results["plan"]["concurrencies"]
    ceiling = results["ceiling"]["messages_per_second"]
    lats = latencies(results)
    fig, axes = plt.subplots(
        len(lats), len(handlers), figsize=(max(9.0, 4.6 * len(handlers)), 4.3 * len(lats) + 0.6), squeeze=False
    )
    for ax, (added, handler) in zip(axes.flat, [(a, h) for a in lats for h in handlers], strict=True):
        if handler not in latency_handlers(results, added):
            ax.set_visible(False)  # the spread's pass runs some handlers only
            continue
        ideal = [
            r["ideal"] for c in concurrencies if (r := find(results, "generated", handler, c, added)) and r.get("ideal")
        ]
        if len(ideal) == len(concurrencies):
            ax.plot(concurrencies, ideal, ":", color="#444444", lw=1.2, label="ideal")
        ax.axhspan(ceiling * 0.97, ceiling, color="#dddddd", zorder=0)
        for contender in CONTENDERS:
            if contender == "handloop":
                r = find(results, contender, handler, 1, added)
                if r:
                    ax.axhline(
                        r["throughput"],
                        ls="--",
                        color=COLOURS[contender],
                        lw=1.2,
                        label=results["contenders"][contender],
                    )
                continue
            xs, ys = [], []
            for c in concurrencies:
                r = find(results, contender, handler, c, added)
                if r:
                    xs.append(c)
                    ys.append(r["throughput"])
            if xs:
                ax.plot(
                    xs,
                    ys,
                    "o-",
                    color=COLOURS[contender],
                    lw=2.6 if contender == "generated" else 1.5,
                    ms=5,
                    zorder=4 if contender == "generated" else 3,  # on top where lines meet
                    label=results["contenders"][contender],
                )
        if len(concurrencies) > 1:
            ax.set_xscale("log")
            ax.set_xticks(concurrencies)
            ax.set_xticklabels([str(c) for c in concurrencies])
        ax.set_yscale("log")
        ax.set_title(f"{HANDLER_TEXT[handler]}, {latency_text(added)}", fontsize=10)
        ax.set_xlabel("concurrency")
        ax.grid(True, which="major", alpha=0.3)
    for row in axes:
        row[0].set_ylabel("messages / s")
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(len(names), 6), frameon=False)
    m = results["machine"]
    fig.suptitle(
        f"SQS workers on LocalStack {m['localstack']}, {m['cores']} cores, Python {m['contender_python']} ({results['date']})",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write(results: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    chart(results, out / "benchmarks.png")
    # The figures from before the profile's fixes, kept beside the report (see before_after).
    stored = out / "benchmarks-baseline.json"
    baseline = json.loads(stored.read_text()) if stored.exists() else None
    kept = out / PREVIOUS
    previous = json.loads(kept.read_text()) if kept.exists() else None
    (out / "benchmarks.md").write_text(markdown(results, baseline, previous))


if __name__ == "__main__":
    source = Path(
        sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "docs" / "benchmarks.json"
    )
    data = json.loads(source.read_text())
    data["targets"] = targets(data)
    write(data, source.parent)
