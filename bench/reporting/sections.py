"""The report's sections of the measures, each a list of the markdown parts it adds (a part
ends with its own line break; report.markdown joins them): the machine, the tables at each
added latency, idle, memory under load, the drain and the kill, the profiles, and the notes
and errors of single rows."""

from __future__ import annotations

from typing import Any

from measuring.plan import CONTENDERS

from reporting.results import (
    HANDLER_TEXT,
    MiB,
    cpu_vs_raw,
    kill_bound_text,
    latencies,
    latency_text,
    ok_runs,
    raw_cpu_ms,
    where,
)
from reporting.tables import drain_text, fmt_requests, num, ratio_text, round_trips, scenario_table, table


def in_contender_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A section's rows in the order the report lists contenders (measuring.plan.CONTENDERS)."""
    return sorted(rows, key=lambda r: CONTENDERS.index(r["contender"]))


def machine(results: dict[str, Any]) -> list[str]:
    """The machine and the versions the figures were measured on."""
    m = results["machine"]
    libs = m["libraries"]
    parts: list[str] = []
    add = parts.append
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
    return parts


def by_latency(results: dict[str, Any]) -> list[str]:
    """For each added latency: throughput, efficiency, requests and CPU per message, and CPU
    over the raw batched loop's, a table each."""
    parts: list[str] = []
    add = parts.append
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
    return parts


def idle(results: dict[str, Any]) -> list[str]:
    """The contenders on an empty queue: requests, memory, the stop."""
    plan = results["plan"]
    labels = results["contenders"]
    parts: list[str] = []
    add = parts.append
    add("\n## Idle\n")
    rows = []
    for r in in_contender_order(results["idle"]):
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
    return parts


def memory(results: dict[str, Any]) -> list[str]:
    """Peak memory with every slot busy."""
    labels = results["contenders"]
    parts: list[str] = []
    add = parts.append
    add("\n## Memory with every slot busy\n")
    rows = []
    for r in in_contender_order(results["memory"]):
        peak = num(r["peak_rss_bytes"] / MiB) if "peak_rss_bytes" in r else "error"
        rows.append([labels[r["contender"]], str(r["concurrency"]), f"{r['message_bytes'] // 1024} KiB", peak])
    add(table(["contender", "concurrency", "payload", "peak RSS (MiB)"], rows) + "\n")
    return parts


def drain(results: dict[str, Any]) -> list[str]:
    """SIGTERM with jobs in flight: the drain and what it left."""
    labels = results["contenders"]
    parts: list[str] = []
    add = parts.append
    add("\n## Drain with jobs in flight\n")
    rows = []
    for r in in_contender_order(results["drain"]):
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
    return parts


def kill(results: dict[str, Any]) -> list[str]:
    """SIGKILL with jobs in flight: what it stranded."""
    labels = results["contenders"]
    parts: list[str] = []
    add = parts.append
    add("\n## SIGKILL with jobs in flight\n")
    rows = []
    for r in in_contender_order(results.get("kill", [])):
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
    return parts


def profiles(results: dict[str, Any]) -> list[str]:
    """Where the generated worker spends its CPU, by profile."""
    parts: list[str] = []
    add = parts.append
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
    return parts


def notes_and_errors(results: dict[str, Any]) -> list[str]:
    """Notes on single rows, and every run that gave no figure."""
    labels = results["contenders"]
    parts: list[str] = []
    add = parts.append
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
    return parts
