"""The report's tables: a markdown table, its numbers, the tables by scenario (one column a
contender, one row a handler and concurrency), and the summary, a row a contender."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from measuring.plan import CONTENDERS

from reporting.results import (
    HANDLER_TEXT,
    IO_HANDLERS,
    MiB,
    by_contender,
    concurrencies,
    cpu_vs_raw,
    find,
    kill_bound_text,
    latencies,
    latency_handlers,
    ok_runs,
    reference,
)


def fmt_requests(requests: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(requests.items())) or "none"


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
