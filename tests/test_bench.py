"""`make bench`'s harness in smoke mode (in the nightly run, `make test-full`), against the
suite's LocalStack: it bakes the default service, runs every contender through every kind of
measurement with tiny counts, and writes the report. What is checked is the report's shape
(every contender, every figure); the figures themselves are timings on a shared machine and
are never asserted. The other benchmarks' tests below run in the everyday suite."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, run

sys.path.insert(0, str(ROOT / "bench"))
from measuring.plan import CONTENDERS, parse_latency
from measuring.processes import aligned_rate
from reporting.compare import PREVIOUS, against_previous, keep_previous
from reporting.results import cpu_vs_raw, find, latency_handlers, raw_beside, raw_cpu_ms
from reporting.tables import ratio_text, scenario_table, summary_columns, summary_rows
from reporting.targets import targets


# Nightly: the most expensive test of the suite (about two minutes of CPU), and what it holds
# is the maintainers' benchmark harness, which no service runs and `make bench` alone uses.
@pytest.mark.nightly
def test_bench_smoke_reports_every_contender_and_figure(tmp_path: Path, localstack_endpoint: str) -> None:
    out = tmp_path / "report"
    result = run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--smoke", "--out", str(out)],
        ROOT,
        timeout=600,
        AWS_ENDPOINT_URL=localstack_endpoint,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    data = json.loads((out / "benchmarks.json").read_text())
    markdown = (out / "benchmarks.md").read_text()
    assert (out / "benchmarks.png").stat().st_size > 0

    failed = [
        f"{r['contender']} {r.get('handler', '')}: {r['error'][:800]}"
        for r in data["runs"] + data["idle"] + data["memory"] + data["drain"] + data["kill"]
        if "error" in r
    ]
    assert not failed, "\n".join(failed)
    assert data["ceiling"]["messages_per_second"] > 0
    assert data["ceiling"]["cpu_ms_per_message"] > 0
    assert "CPU per message over the raw batched loop's" in (out / "benchmarks.md").read_text()

    # Every contender ran every throughput scenario at both latencies, the spread's handlers
    # at a uniform 10-40 ms too, and every other measurement.
    assert data["added_latencies"] == ["0", "20", "10-40"]
    assert latency_handlers(data, "10-40") == ["noop"]
    for contender in CONTENDERS:
        for added in data["added_latencies"]:
            for handler in latency_handlers(data, added):
                for concurrency in data["plan"]["concurrencies"]:
                    row = find(data, contender, handler, concurrency, added)
                    assert row is not None, f"no {handler} run at c={concurrency} +{added} ms for {contender}"
                    for figure in (
                        "throughput",
                        "efficiency",
                        "requests_per_message",
                        "cpu_ms_per_message",
                        "cpu_vs_raw",
                    ):
                        assert isinstance(row[figure], float), (contender, handler, added, figure)
                    assert row["machine_busy_cores"] > 0, row
        # The proxy held every request for the added round trip.
        slow = find(data, contender, "noop", data["plan"]["concurrencies"][0], "20")
        assert slow is not None and slow["request_ms"]["ReceiveMessage"] >= 20, slow
        for kind in ("idle", "memory", "drain", "kill"):
            assert [r["contender"] for r in data[kind]].count(contender) == 1, (kind, contender)

    # The CPU target's no-op rows (the template's default, 8) have the raw loop run beside them,
    # at each latency, and are divided by it; it is in no table as a contender.
    for added in data["added_latencies"]:
        raw = find(data, "raw", "noop", 8, added)
        worker = find(data, "generated", "noop", 8, added)
        assert raw is not None and worker is not None, added
        assert (raw["processes"], raw["threads"]) == (1, 8) and raw["efficiency"] is None, raw
        assert worker["cpu_vs_raw"] == worker["cpu_ms_per_message"] / raw["cpu_ms_per_message"], added
    assert "over the ceiling's raw loop" not in next(t["figure"] for t in data["targets"] if "no-op CPU" in t["name"])
    assert not [line for line in markdown.splitlines() if line.startswith(("| raw", "| raw batched loop"))]

    # The summary table has a column per figure and a complete row per contender.
    lines = markdown.splitlines()
    header = "| " + " | ".join(summary_columns(data)) + " |"
    assert header in lines, "the summary table's header"
    columns = len(summary_columns(data))
    for label in (data["contenders"][c] for c in CONTENDERS):
        row = next((line for line in lines if line.startswith(f"| {label} | ")), None)
        assert row is not None, f"no summary row for {label}"
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert len(cells) == columns, row
        assert "error" not in cells and "–" not in cells, row

    # Each target is reported with its verdict.
    assert len(data["targets"]) == 10
    for target in data["targets"]:
        assert target["name"] in markdown


def test_tracing_bench_reports_both_sides(tmp_path: Path) -> None:
    """`make bench-tracing` with tiny counts: both columns measured in one run, on the traced
    side one `process` span per job plus a `receive` and a settle span per SQS call, which
    carry up to 10 messages each (the figures are timings and are never asserted)."""
    import tracing

    result = tracing.measure(messages=200, rounds=1, concurrency=4)
    assert result["cpu_us_per_message_off"] > 0 and result["cpu_us_per_message_on"] > 0
    # At most a receive and a settle call of its own per message: 3 spans; batches make fewer.
    assert 1.0 < result["spans_per_message"] <= 3.0 and result["otlp_bytes_per_message"] > 0
    assert "ratio on / off" in tracing.markdown(result)


def test_memory_bench_measures_a_row_in_a_process_of_its_own_and_tables_every_setting() -> None:
    """`make bench-memory`: a row runs in a process of its own (peak RSS is a process's);
    the table puts the engine's pacing beside CPython's threshold for every size (the
    figures are measurements and are never asserted)."""
    import memory

    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "memory.py"), "--row", "1,1,engine,8"],
        capture_output=True,
        text=True,
        check=True,
    )
    row = json.loads(done.stdout.splitlines()[-1])
    assert row["peak_mib"] >= row["base_mib"] > 0 and row["cpu_ms_per_job"] > 0, row
    rows = [
        {
            "size_mib": size,
            "cycle": cycle,
            "setting": setting,
            "peak_mib": 100.0,
            "peak_mib_range": [90, 110],
            "cpu_ms_per_job": 1.0,
        }
        for size in memory.SIZES_MIB
        for cycle in (True, False)
        for setting in memory.SETTINGS
    ]
    table = memory.markdown(rows, jobs=8, rounds=1)
    assert table.count("| 1.00x |") == 2 * len(memory.SIZES_MIB), table


def test_priorities_bench_reports_every_row_side_by_side(tmp_path: Path) -> None:
    """`make bench-priorities`: every priority in one run. Its figures are the engine's
    decisions on virtual time, not timings, so the README's are asserted here."""
    import priorities

    assert priorities.main(["--out", str(tmp_path)]) == 0
    rows = {r["row"]: r for r in json.loads((tmp_path / "benchmarks-priorities.json").read_text())}
    assert len(rows) == 2 * len(priorities.ROWS)
    assert rows["strict"]["high_of_first_80"] == 80
    assert 2.4 <= rows["weighted 3:1"]["ratio_high_to_low_100"] <= 3.6
    assert rows["no shared budget (each queue: concurrency 2)"]["high_of_first_100"] == 50
    assert "| strict |" in (tmp_path / "benchmarks-priorities.md").read_text()


def test_a_wave_rate_needs_half_the_window() -> None:
    """Whole waves are timed (processes.aligned_rate), but a handful of completions a millisecond
    apart is one receive's batch, not a rate: the plain window rate is used then."""
    steady = [i * 0.1 for i in range(81)]
    rate = aligned_rate(steady, 0.0, 8.0, (200, 200, 1))
    assert rate is not None and abs(rate - 10.0) < 1e-6
    burst = [4.0 + i * 0.0002 for i in range(10)]
    assert aligned_rate(burst, 0.0, 8.0, (200, 200, 1)) is None


def test_adaptive_bench_meets_its_targets_in_virtual_time(tmp_path: Path) -> None:
    """`bench/adaptive.py --short`: fixed concurrency at a downstream's knee of 6, fixed 48
    and adaptive with a ceiling of 48, side by side on virtual time (exact on any machine,
    so the targets are asserted): adaptive >= 0.75 of the best possible rate (120/s) and
    >= 3x fixed 48."""
    import adaptive

    assert adaptive.main(["--short", "--out", str(tmp_path)]) == 0, (tmp_path / "benchmarks-adaptive.md").read_text()
    data = json.loads((tmp_path / "benchmarks-adaptive.json").read_text())
    at_knee, at_ceiling, adaptive_run = data["runs"]
    assert at_knee["most_in_flight"] == 6 and at_ceiling["most_in_flight"] == 48
    assert adaptive_run["most_in_flight"] <= 48
    assert data["adaptive_share_of_best"] >= 0.75, data
    assert data["adaptive_over_fixed_ceiling"] >= 3, data
    assert all(data["targets"].values()), data["targets"]


def test_cpu_per_message_is_reported_over_the_raw_loops_of_the_same_run() -> None:
    """Without a raw loop run beside it, a row's CPU per message is divided by the cheapest
    raw-loop run of the ceiling (cpu_vs_raw): the ratio, not either figure, is what
    survives a busy machine. A results file from before the figure was kept gets it from its
    ceiling runs."""
    results = {
        "ceiling": {
            "runs": [
                {"cpu_ms_per_message": 0.30},
                {"cpu_ms_per_message": 0.25},
                {"error": "failed"},
            ]
        }
    }
    assert raw_cpu_ms(results) == 0.25
    row = {"cpu_ms_per_message": 0.375}
    assert cpu_vs_raw(row, results) == 1.5
    results["ceiling"]["cpu_ms_per_message"] = 0.3
    assert abs(cpu_vs_raw(row, results) - 1.25) < 1e-9
    assert cpu_vs_raw({"error": "x"}, results) is None
    assert cpu_vs_raw(row, {"ceiling": {"runs": []}}) is None
    assert ratio_text(1.25) == "1.25x" and ratio_text(None) == "–"


def test_a_full_run_is_compared_with_the_full_run_it_replaces(tmp_path: Path) -> None:
    """`make bench` keeps the report it overwrites (a run of the same plan only) and sets the
    generated worker's rows beside it: what changed since is read from the report itself."""

    def run_of(date: str, plan: str, efficiency: float, cpu_ms: float, left: int) -> dict[str, object]:
        row = {"contender": "generated", "handler": "io10ms", "concurrency": 50, "added_ms": "20"}
        row |= {"efficiency": efficiency, "requests_per_message": 0.2, "cpu_ms_per_message": cpu_ms}
        return {
            "date": date,
            "plan": {"name": plan, "handlers": ["io10ms"], "concurrencies": [50]},
            "added_latencies": ["0", "20"],
            "ceiling": {"cpu_ms_per_message": 0.3, "runs": []},
            "runs": [row],
            "kill": [{"contender": "generated", "left_in_flight": left, "processed_twice": 0}],
            "targets": [{"name": "a target", "met": efficiency >= 0.9}],
        }

    old, new = run_of("day one", "full", 0.48, 0.45, 15), run_of("day two", "full", 0.97, 0.39, 12)
    (tmp_path / "benchmarks.json").write_text(json.dumps(old))
    keep_previous(tmp_path, "smoke")
    assert not (tmp_path / PREVIOUS).exists(), "a smoke run is no measure of a full one"
    keep_previous(tmp_path, "full")
    kept = json.loads((tmp_path / PREVIOUS).read_text())
    assert kept == old

    section = against_previous(new, kept)
    assert "## Against the previous run (day one)" in section
    assert "| I/O 10 ms | 50 | +20 ms | 0.48 → 0.97 | 0.200 → 0.200 | 1.50x → 1.30x |" in section
    assert "Targets met: 0 → 1 of 1" in section and "left in flight: 15 → 12" in section
    assert "runs on a shared machine" in section
    kept["machine"], new["machine"] = {"cpu": "Intel(R) Xeon(R) Processor"}, {"cpu": "AMD EPYC"}
    assert "runs on different machines (Intel(R) Xeon(R) Processor, then AMD EPYC)" in against_previous(new, kept)


def test_versions_runs_every_row_at_each_latency_asked_and_reads_the_spread_s_rows() -> None:
    """bench/versions.py --latencies 0,10-40: every row at both, and the summary reads the
    spread's rows too (it read only the rows of its fixed latencies before)."""
    import versions

    latencies = [parse_latency(t) for t in ("0", "10-40")]
    planned = versions.rows(latencies)
    assert len(planned) == 2 * len(versions.CASES) and {added for *_, added in planned} == {(0.0, 0.0), (0.01, 0.04)}
    measured = [
        {"version": v, "round": 1, "handler": "io10ms", "concurrency": 50, "added_ms": "10-40", "throughput": rate,
         "efficiency": rate / 1000, "requests_per_message": 0.2, "cpu_ms_per_message": 0.3, "cpu_vs_raw": 1.2}
        for v, rate in (("old", 850.0), (versions.NOW, 920.0))
    ]  # fmt: skip
    summary = versions.summarise(measured, ("old", versions.NOW))
    assert [(s["version"], s["added_ms"], s["throughput"]) for s in summary] == [
        ("old", "10-40", 850.0),
        (versions.NOW, "10-40", 920.0),
    ]
    with pytest.raises(SystemExit):  # a spread's low end first: refused before anything is baked
        versions.main(["HEAD", "--latencies", "20-10"])


def test_versions_side_by_side_are_read_as_ratios_within_each_round() -> None:
    """bench/versions.py: a version's figure over this checkout's is taken within each round
    (the machine's drift falls on both alike) and the median of those ratios reported; a run
    that gave no figure is left out of both."""
    import versions

    def row(version: str, round_: int, rate: float, cpu: float) -> dict[str, object]:
        return {
            "version": version,
            "round": round_,
            "handler": "noop",
            "concurrency": 8,
            "added_ms": "0",
            "throughput": rate,
            "efficiency": rate / 1000,
            "requests_per_message": 0.2,
            "cpu_ms_per_message": cpu,
            "cpu_vs_raw": cpu / 0.4,
        }

    measured = [
        row("old", 1, 900, 0.50), row(versions.NOW, 1, 1000, 0.40),
        row("old", 2, 450, 1.00), row(versions.NOW, 2, 500, 0.80),  # a busy round: both slower
        row("old", 3, 990, 0.44), row(versions.NOW, 3, 1100, 0.40),
        {"version": "old", "round": 4, "handler": "noop", "concurrency": 8, "added_ms": "0", "error": "x"},
    ]  # fmt: skip
    summary = {s["version"]: s for s in versions.summarise(measured, ("old", versions.NOW))}
    old, now = summary["old"], summary[versions.NOW]
    assert old["rounds"] == 3 and now["rounds"] == 3
    assert old["throughput"] == 900 and now["throughput"] == 1000
    assert abs(old["throughput_vs_now"] - 0.9) < 1e-9 and abs(old["cpu_vs_now"] - 1.25) < 1e-9
    assert now["throughput_vs_now"] == 1.0 and now["cpu_vs_now"] == 1.0
    text = versions.markdown(
        {
            "versions": [{"ref": "old", "commit": "abc1234"}, {"ref": versions.NOW, "commit": versions.NOW}],
            "date": "today",
            "rounds": 3,
            "duration_seconds": 600,
            "machine": {"cpu": "AMD EPYC", "cores": 2, "load_average_at_start": [0.5, 0.4, 0.3]},
            "load_average_at_end": [1.5, 0.9, 0.4],
            "ceiling": 1000.0,
            "raw_cpu_ms": 0.4,
            "summary": list(summary.values()),
            "runs": measured,
        }
    )
    row = (
        "| no-op | 8 | the emulator's latency | old | 900 | 0.90 | 0.200 | 0.500 | 1.25x | 0.90x | 1.25x (1.10-1.25) |"
    )
    assert row in text, text
    assert "1 run(s) gave no figure" in text and "load average 0.5 when the rounds began, 1.5 at the end" in text


def _row(contender: str, throughput: float, ideal: float) -> dict[str, object]:
    return {
        "contender": contender,
        "handler": "io1s",
        "concurrency": 50,
        "added_ms": "0",
        "throughput": throughput,
        "ideal": ideal,
        "efficiency": throughput / ideal,
    }


def test_a_row_both_contenders_run_at_the_ideal_is_a_tie_not_a_loss() -> None:
    """49.9 against Celery's 50.0 messages a second with 1 s jobs at concurrency 50 is both at
    the handler's pace: the target names it a tie. 45 against 50 is behind."""

    def verdict(generated: float, celery: float) -> dict[str, object]:
        results = {
            "plan": {"concurrencies": [50]},
            "machine": {"cores": 2},
            "ceiling": {"runs": []},
            "runs": [_row("generated", generated, 50.0), _row("celery", celery, 50.0)],
            **{kind: [] for kind in ("idle", "memory", "drain", "kill")},
        }
        return next(t for t in targets(results) if t["name"].startswith("ahead of"))

    tie = verdict(49.9, 50.0)
    assert tie["met"] is True and "tied at the ideal" in str(tie["figure"]) and "behind" not in str(tie["figure"])
    loss = verdict(45.0, 50.0)
    assert loss["met"] is False and "behind: io1s c=50" in str(loss["figure"])
    win = verdict(49.9, 40.0)
    assert win["met"] is True and "ahead in 1 of 1" in str(win["figure"])


def _noop(contender: str, concurrency: int, added: str, cpu_ms: float, throughput: float) -> dict[str, object]:
    row: dict[str, object] = {
        "contender": contender,
        "handler": "noop",
        "concurrency": concurrency,
        "added_ms": added,
        "throughput": throughput,
        "requests_per_message": 0.2,
        "cpu_ms_per_message": cpu_ms,
    }
    if contender == "raw":  # as bench/run.py records the floor beside a scenario
        row |= {"efficiency": None, "processes": 1, "threads": 8}
    else:
        row |= {"ideal": 2000.0, "efficiency": throughput / 2000.0}
    return row


def _beside(runs: list[dict[str, object]]) -> dict[str, object]:
    """A run's results whose ceiling's cheapest raw-loop run (0.25 ms) is far below the raw loop
    run beside the rows (0.36 ms at +20 ms), as on a busy machine."""
    return {
        "plan": {
            "handlers": ["noop"],
            "concurrencies": [50],
            "default_concurrency": 8,
            "rss_concurrency": 200,
            "rss_bytes": 256 * 1024,
        },
        "added_latencies": ["0", "20"],
        "contenders": {c: c for c in CONTENDERS},
        "machine": {"cores": 2},
        "ceiling": {
            "messages_per_second": 2000.0,
            "cpu_ms_per_message": 0.25,
            "runs": [_noop("raw", 8, "0", 0.25, 2000.0), _noop("raw", 18, "0", 0.30, 2100.0)],
        },
        "runs": runs,
        **{kind: [] for kind in ("idle", "memory", "drain", "kill")},
    }


def _cpu_target(results: dict[str, object]) -> dict[str, object]:
    return next(t for t in targets(results) if t["name"].startswith("no-op CPU per message"))


def test_a_noop_row_is_compared_with_the_raw_loop_run_beside_it() -> None:
    """The no-op target's rows are divided by the raw loop's run in their own scenario (same
    concurrency, same added latency, same rotation), not by the cheapest of the ceiling's runs
    at the emulator's latency: 0.40 over the raw loop's 0.36 beside it is 1.11x, not 1.60x."""
    gen = _noop("generated", 50, "20", 0.40, 900.0)
    results = _beside(
        [
            _noop("raw", 50, "0", 0.30, 2000.0),  # the same concurrency at another latency
            _noop("raw", 8, "20", 0.20, 1500.0),  # the same latency at another concurrency
            _noop("generated", 50, "0", 0.33, 1200.0),
            gen,
            _noop("raw", 50, "20", 0.36, 1600.0),
        ]
    )
    assert abs(cpu_vs_raw(gen, results) - 0.40 / 0.36) < 1e-9
    target = _cpu_target(results)
    assert "beside it (same latency, same rotation)" in str(target["name"])
    assert target["met"] is True, target
    assert "noop c=50 +20 ms: 1.11x" in str(target["figure"]) and "ceiling" not in str(target["figure"])


def test_without_a_raw_run_beside_it_a_row_is_compared_with_the_ceiling() -> None:
    """Where the raw loop did not run in a row's scenario (an older results file, or a row the
    target does not hold), the ceiling's figure is the floor, and the target's figure says so;
    the raw loop's own rows are always over the ceiling's."""
    gen = _noop("generated", 8, "20", 0.40, 900.0)
    raw = _noop("raw", 50, "20", 0.36, 1600.0)
    results = _beside([_noop("raw", 8, "0", 0.30, 2000.0), gen, raw])
    assert raw_beside(gen, results) is None
    assert abs(cpu_vs_raw(gen, results) - 1.6) < 1e-9
    assert abs(cpu_vs_raw(raw, results) - 0.36 / 0.25) < 1e-9
    target = _cpu_target(results)
    assert target["met"] is False
    assert "noop c=8 +20 ms: 1.60x (over the ceiling's raw loop)" in str(target["figure"]), target


def test_the_raw_loop_beside_the_rows_is_no_contender() -> None:
    """The raw loop run beside the no-op rows is the floor: faster and cheaper than any
    contender, it is neither the best other contender nor a row of the summary, whose CPU
    column divides the worker's figure by it."""
    results = _beside(
        [
            _noop("generated", 50, "0", 0.33, 1200.0),
            _noop("celery", 50, "0", 1.50, 500.0),
            _noop("raw", 50, "0", 0.30, 2000.0),
        ]
    )
    ahead = next(t for t in targets(results) if t["name"].startswith("ahead of"))
    assert ahead["met"] is True and "ahead in 1 of 1" in str(ahead["figure"]), ahead
    cheaper = next(t for t in targets(results) if t["name"].startswith("less CPU per message"))
    assert cheaper["met"] is True and "raw" not in str(cheaper["figure"]), cheaper
    rows = summary_rows(results)
    assert [row[0] for row in rows] == list(CONTENDERS)
    generated = rows[0]
    cpu_column = summary_columns(results).index("CPU / message over the raw loop's (no-op, c=50)")
    assert generated[cpu_column] == "1.10x", generated
    assert "raw" not in scenario_table(results, lambda r: r["contender"])


def test_instructions_are_read_from_valgrind_and_taken_a_message_between_two_runs() -> None:
    """bench/instructions.py: the count is valgrind's `I refs`, and a message's share is the
    difference of two runs over the difference of their messages, so that the start, the
    imports and the exit, the same in both, fall out."""
    import instructions

    output = "==12== \n==12== I   refs:      1,234,567,890\n"
    assert instructions.instructions(output) == 1_234_567_890
    with pytest.raises(ValueError, match="no instruction count"):
        instructions.instructions("==12== Memcheck, a memory error detector\n")
    first = {
        "messages": 500,
        "instructions": 900_000_000,
        "requests": {"ReceiveMessage": 52.0, "DeleteMessageBatch": 50.0, "GetQueueUrl": 1.0},
    }
    second = {
        "messages": 1500,
        "instructions": 2_000_000_000,
        "requests": {"ReceiveMessage": 152.0, "DeleteMessageBatch": 150.0, "GetQueueUrl": 1.0},
    }
    share = instructions.per_message(first, second)
    assert share["instructions_per_message"] == 1_100_000
    assert share["requests_per_message"] == pytest.approx(0.2)  # the queue's lookups are the start's, not a message's
    with pytest.raises(ValueError, match="more messages"):
        instructions.per_message(second, first)


def test_instructions_side_by_side_are_read_as_ratios_within_each_repeat() -> None:
    import instructions

    def counted(version: str, repeat: int, count: float) -> dict[str, Any]:
        return {"version": version, "repeat": repeat, "handler": "noop", "concurrency": 50,
                "instructions_per_message": count, "requests_per_message": 0.2}  # fmt: skip

    measured = [counted("old", 1, 1100.0), counted(instructions.NOW, 1, 1000.0)]
    measured += [counted("old", 2, 1260.0), counted(instructions.NOW, 2, 1200.0)]
    old, now = instructions.summarise(measured, ("old", instructions.NOW))
    assert (old["instructions_per_message"], now["instructions_per_message"]) == (1180.0, 1100.0)
    assert (old["over_now_low"], old["over_now_high"]) == pytest.approx((1.05, 1.1))
    assert now["over_now"] == 1.0
    report = instructions.markdown(
        {
            "versions": [{"ref": "old", "commit": "abc1234"}, {"ref": instructions.NOW, "commit": "def5678"}],
            "messages": [500, 1500],
            "repeats": 2,
            "date": "2026-12-05 12:00 UTC",
            "duration_seconds": 300,
            "summary": [old, now],
        }
    )
    assert "| no-op | 50 | old | 1,180 | 0.200 | 1.075x (1.050-1.100) |" in report
    assert instructions.parse_rows("noop:50, io10ms:100") == [("noop", 50), ("io10ms", 100)]
    for wrong in ("cpu:50", "noop:0", "noop", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            instructions.parse_rows(wrong)
