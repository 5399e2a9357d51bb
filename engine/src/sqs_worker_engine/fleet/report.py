"""The simulator's report: what the run assumed (`assumed`), per shape the fleet's figures
beside the oracle's and their ratios, the issue's targets met or not, as JSON
(`report.json`) and Markdown (`report.md`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .autoscalers.deployfiles import Bake, Deployment, EcsService, ScaledJob
from .autoscalers.stepscaling import StepScaling
from .load.traffic import SHAPES

# Figures each shape shows beside the oracle's, as ratios (ours / oracle's).
COMPARED = ("p99_oldest_age_seconds", "replica_minutes", "p99_wait_seconds")
# What the oracle's run contributes to a shape's entry.
ORACLE_KEYS = (
    "p50_oldest_age_seconds",
    "p99_oldest_age_seconds",
    "max_oldest_age_seconds",
    "p99_wait_seconds",
    "replica_minutes",
    "peak_replicas",
    "scale_events",
    "duplicate_runs",
    "messages_lost",
    "cost",
)
SPIKE_RATIO = 1.5
REPLICA_MINUTES_RATIO = 1.3
DAY_SECONDS = 600.0


def combine(ours: dict[str, Any], oracle: dict[str, Any] | None) -> dict[str, Any]:
    """One shape's entry: our figures, the oracle's (prefixed `oracle_`) and the ratios."""
    entry = {k: v for k, v in ours.items() if k != "series"}
    if oracle is None:
        return entry
    entry["oracle"] = {k: oracle[k] for k in ORACLE_KEYS}
    for key in COMPARED:
        entry[f"oracle_{key}"] = oracle[key]
    entry["ratios"] = {key: _ratio(ours[key], oracle[key]) for key in COMPARED}
    return entry


def _ratio(a: float, b: float) -> float | None:
    if b <= 0:
        return None if a > 0 else 1.0
    return round(a / b, 3)


def targets(shapes: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets, each with its figure, on the shapes that measure it."""
    rows: list[dict[str, Any]] = []
    lost = {name: s["messages_lost"] for name, s in shapes.items()}
    rows.append(
        {
            "target": "0 lost in every shape",
            "figure": f"{sum(lost.values())} lost over {len(lost)} shapes",
            "met": all(v == 0 for v in lost.values()),
        }
    )
    over = {n: (s["duplicate_runs"], s["cut_off_by_sigkill"]) for n, s in shapes.items()}
    rows.append(
        {
            "target": "duplicate runs no more than the jobs cut off by SIGKILL",
            "figure": ", ".join(f"{n}: {d} <= {c}" for n, (d, c) in over.items()),
            "met": all(d <= c for d, c in over.values()),
        }
    )
    if "spike" in shapes and "ratios" in shapes["spike"]:
        rows.append(
            _within(
                f"10x spike: p99 oldest-message age within {SPIKE_RATIO}x the oracle's",
                shapes["spike"],
                "p99_oldest_age_seconds",
                SPIKE_RATIO,
                unit=" s",
            )
        )
    if "diurnal" in shapes:
        day = shapes["diurnal"]
        rows.append(
            {
                "target": "diurnal day: no scale-in followed by a scale-out within the stabilization window",
                "figure": f"{day['thrash']} (window {day['thrash_window_seconds']:g} s; {day['scale_events']['out']} out, {day['scale_events']['in']} in)",
                "met": day["thrash"] == 0,
            }
        )
        if "ratios" in day:
            rows.append(
                _within(
                    f"diurnal day: replica-minutes within {REPLICA_MINUTES_RATIO}x the oracle's",
                    day,
                    "replica_minutes",
                    REPLICA_MINUTES_RATIO,
                )
            )
    for name, shape in shapes.items():  # the steady loads of short jobs
        if name != "diurnal" and name in SHAPES and "replica-minutes" in SHAPES[name].targets and "ratios" in shape:
            rows.append(
                _within(
                    f"steady load of {_job(shape['job_seconds'])} jobs: replica-minutes within "
                    f"{REPLICA_MINUTES_RATIO}x the oracle's",
                    shape,
                    "replica_minutes",
                    REPLICA_MINUTES_RATIO,
                )
            )
    rows += _event_targets(shapes)
    if "day-1m" in shapes:
        day = shapes["day-1m"]
        rows.append(
            {
                "target": "a simulated day at a million messages an hour in under 10 minutes of wall time",
                "figure": f"{day['wall_seconds']:g} s wall, {day['cpu_seconds']:g} s CPU ({day['messages']:,} messages, scale {day['scale']})",
                "met": day["wall_seconds"] < DAY_SECONDS,
            }
        )
    return rows


def _event_targets(shapes: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The targets of the Spot interruptions' shape and the bad release's (ECS's rollback)."""
    rows: list[dict[str, Any]] = []
    if "spot" in shapes:
        spot = shapes["spot"]
        duplicates, cut = spot["duplicates_by_cause"].get("spot", 0), spot["cut_off_by_cause"].get("spot", 0)
        rows.append(
            {
                "target": "Spot interruptions: 0 lost, duplicate runs no more than the jobs their SIGKILL cut off",
                "figure": f"{spot['messages_lost']} lost; {duplicates} duplicate runs <= {cut} cut off",
                "met": spot["messages_lost"] == 0 and spot["duplicate_runs"] <= spot["cut_off_by_sigkill"],
            }
        )
    release = shapes.get("bad-release", {}).get("release")
    if release is not None and shapes["bad-release"]["platform"] == "ecs":
        rows.append(
            {
                "target": "bad release on ECS: rolled back automatically, 0 messages dead-lettered",
                "figure": _release(release),
                "met": bool(release["rolled_back"]) and release["dead_lettered"] == 0,
            }
        )
    return rows


def _release(release: dict[str, Any]) -> str:
    """A bad release's course, in one line."""
    cost = f"{release['jobs_failed']:,} jobs failed, {release['dead_lettered']:,} messages dead-lettered"
    if not release["rolled_back"]:
        return f"not rolled back; {cost}"
    return (
        f"rolled back by {release['alarm']} {release['rollback_began_minutes']:g} min after it began "
        f"(every task back on the release before {release['rolled_back_minutes']:g} min after); {cost}"
    )


def _job(seconds: float) -> str:
    return f"{seconds * 1000:g} ms" if seconds < 1 else f"{seconds:g} s"


def _within(target: str, shape: dict[str, Any], key: str, bound: float, unit: str = "") -> dict[str, Any]:
    """A target on one figure's ratio to the oracle's: met when the ratio is at most `bound`."""
    ratio = shape["ratios"][key]
    return {
        "target": target,
        "figure": f"{shape[key]}{unit} vs {shape[f'oracle_{key}']}{unit}: {ratio}x",
        "met": ratio is not None and ratio <= bound,
    }


# The report's terms, defined once (report.md's "What this run assumed", report.json's `assumed`).
TERMS = {
    "oracle": "an autoscaler that knows the traffic to come: the same replicas, start latency and engine, "
    "scaled ahead of the load; every ratio is ours / the oracle's",
    "thrash": "a scale-out within the window (the HPA's scale-down stabilization, ECS's 300 s) after a scale-in",
    "replica-minutes": "the minutes each replica was alive, summed over the shape, draining ones included: "
    "what compute is paid for",
    "duplicate run": "a job run again after its run (or its delete) was cut off: by SIGKILL (a crash, a grace "
    "period or a Spot warning run out), or a lease lost",
    "scale": "how many real messages one simulated message stands for (1: every message simulated)",
}


def assumed(
    *,
    deploy: dict[str, Any],
    jobs: dict[str, tuple[float, str, str]],
    inflight_limit: int,
    alarms: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What the run assumed, for the report: each shape's mean job and where it came from
    (`jobs`: shape -> (seconds, source, the source in words)), the queue as simulated, what
    the concurrency budget counts against SQS's in flight, how replicas are counted, ECS's
    deployment alarms as simulated (`alarms`, releases.describe), and the terms."""
    queue = str(deploy["queue"])
    fifo = queue.endswith(".fifo")
    budget = int(deploy["max_replicas"]) * int(deploy["concurrency"])
    out: dict[str, Any] = {
        "job_seconds": {name: {"seconds": s, "source": src, "from": words} for name, (s, src, words) in jobs.items()},
        "job_seconds_assumed": sorted(name for name, (_, src, _) in jobs.items() if src in ("default", "job-timeout")),
        "queue": {
            "name": queue,
            "fifo": fifo,
            "simulated_as": "a standard queue" + (" with FIFO's in-flight quota" if fifo else ""),
            "inflight_limit": inflight_limit,
            "not_simulated": ["message groups and their order"] if fifo else [],
        },
        "concurrency_budget": {
            "jobs": budget,
            "counts": f"jobs running at once: {deploy['max_replicas']} replicas x {deploy['concurrency']} handlers",
            "in_flight_counts_too": "messages received ahead of the handlers (prefetch) and those whose job "
            "ended and whose delete is on its way",
        },
        "replicas": "alive, draining ones included (desired and draining are given apart)",
        "terms": TERMS,
    }
    if alarms is not None:
        out["deployment_alarms"] = alarms
    return out


def assumed_markdown(assumed: dict[str, Any]) -> list[str]:
    """report.md's section "What this run assumed"."""
    queue, budget = assumed["queue"], assumed["concurrency_budget"]
    by_source: dict[tuple[float, str], list[str]] = {}
    for name, job in assumed["job_seconds"].items():
        by_source.setdefault((job["seconds"], job["from"]), []).append(name)
    lines = ["## What this run assumed", ""]
    jobs = "; ".join(f"{_job(sec)} for {', '.join(names)}: {words}" for (sec, words), names in by_source.items())
    lines.append(f"- **Job time** (the mean of lognormal durations): {jobs}.")
    if assumed["job_seconds_assumed"]:
        lines.append(
            "  The service's files state no job time of their own, so this is an assumption: set "
            "`--job-seconds` to your jobs' mean (`make simulate SIMULATE_ARGS='--job-seconds 0.3'`); "
            "the figures are of these jobs, not yours."
        )
    if queue["fifo"]:
        lines.append(
            f"- **The queue, {queue['name']}, is FIFO and was simulated as a standard queue** with FIFO's "
            f"in-flight quota ({queue['inflight_limit']:,}): message groups and their order are not simulated "
            "(SQS hands a group's messages to one consumer at a time), so these figures hold only for traffic "
            "spread over many groups."
        )
    else:
        lines.append(
            f"- **The queue**, {queue['name']}: a standard queue, SQS's in-flight quota {queue['inflight_limit']:,}."
        )
    lines.append(
        f"- **In flight against the concurrency budget.** The budget is {budget['jobs']} {budget['counts']}: "
        f"what the downstream sees. SQS counts more in flight: {budget['in_flight_counts_too']}. So an in-flight "
        f"peak above {budget['jobs']} is not jobs running beyond the budget: each shape below gives the jobs "
        "running at its in-flight peak, and the most running at once."
    )
    lines.append(
        "- **Replicas** are counted alive, draining ones included (the plots' replicas, the peaks, "
        "replica-minutes): a replica told to stop (a rollout, a scale-in, a Spot interruption) drains its jobs "
        "while its replacement starts. A rollout within maxSurge 0 or ECS's MaximumPercent 100 never runs more "
        "replicas than desired, yet shows more alive while the old ones drain: each shape gives its peak's "
        "desired and draining apart."
    )
    alarms = assumed.get("deployment_alarms")
    if alarms is not None:
        watched = "; ".join(alarms["watched"]) or "none"
        lines.append(
            f"- **ECS's deployment alarms** (a bad release rolled back{'' if alarms['rollback'] else ': off'}): "
            f"{watched}. Not simulated: {'; '.join(alarms['not_simulated']) or 'none'}."
        )
    lines.append(
        "- **Terms.** " + "; ".join(f"*{term}*: {meaning}" for term, meaning in assumed["terms"].items()) + "."
    )
    return [*lines, ""]


def describe(bake: Bake, platform: str) -> dict[str, Any]:
    """What the simulator read from the deploy files, for the report."""
    spec = bake.kubernetes if platform == "kubernetes" else bake.ecs
    assert spec is not None
    worker = spec.worker
    out: dict[str, Any] = {
        "queue": worker.queue,
        "concurrency": worker.concurrency,
        "grace_seconds": worker.grace,
        "job_timeout_seconds": worker.number("WORKER_JOB_TIMEOUT_MS", 60_000) / 1000,
        "shutdown_timeout_seconds": worker.number("WORKER_SHUTDOWN_TIMEOUT_MS", 30_000) / 1000,
        "visibility_timeout_seconds": worker.number("WORKER_VISIBILITY_TIMEOUT_SECONDS", 30),
        "replica_cpu": worker.cpu,
        "replica_memory_gib": round(worker.memory_gib, 3),
    }
    if isinstance(spec, Deployment):
        s = spec.scaling
        out.update(
            kind="Deployment + KEDA ScaledObject",
            min_replicas=s.minimum,
            max_replicas=s.maximum,
            polling_seconds=s.polling,
            scale_up={"stabilization": s.scale_up.stabilization, "policies": [p.__dict__ for p in s.scale_up.policies]},
            scale_down={
                "stabilization": s.scale_down.stabilization,
                "policies": [p.__dict__ for p in s.scale_down.policies],
            },
            sqs_trigger=s.sqs.__dict__ if s.sqs else None,
            age_trigger=s.age.__dict__ if s.age else None,
            max_unavailable=spec.max_unavailable,
        )
    elif isinstance(spec, ScaledJob):
        out.update(
            kind="KEDA ScaledJob",
            min_replicas=spec.minimum,
            max_replicas=spec.maximum,
            polling_seconds=spec.polling,
            strategy=spec.strategy,
            pending_conditions=list(spec.pending_conditions),
            sqs_trigger=spec.sqs.__dict__,
            active_deadline_seconds=spec.deadline,
        )
    else:
        assert isinstance(spec, EcsService)
        policies = []
        if spec.target is not None:
            policies.append("target tracking" + (" (scale-in disabled)" if spec.scale_in_disabled else ""))
        if spec.steps_out or spec.step_in is not None:
            policies.append("step scaling")
        out.update(
            kind="ECS service + Application Auto Scaling " + " and ".join(policies),
            min_replicas=spec.minimum,
            max_replicas=spec.maximum,
        )
        if spec.target is not None:
            out.update(
                target=spec.target,
                scale_out_cooldown=spec.scale_out_cooldown,
                scale_in_cooldown=spec.scale_in_cooldown,
                target_tracking_scale_in=not spec.scale_in_disabled,
            )
        out.update(
            min_healthy_percent=spec.min_healthy_percent,
            max_percent=spec.max_percent,
        )
        if spec.steps_out:
            out["step_scaling"] = [_step(step) for step in spec.steps_out]
        if spec.step_in is not None:
            out["step_scale_in"] = _step(spec.step_in)
    return out


def _step(step: StepScaling) -> dict[str, Any]:
    return {
        "alarm": step.expression,
        "comparison": step.comparison,
        "threshold": step.threshold,
        "datapoints_to_alarm": f"{step.datapoints} of {step.periods}",
        "adjustment_type": step.adjustment_type,
        "steps": [s.__dict__ for s in step.steps],
        "cooldown": step.cooldown,
    }


def _alive_and_running(shape: dict[str, Any]) -> str:
    """A shape's replicas at their peak, desired and draining apart; its jobs running at its
    in-flight peak, against the budget."""
    if "peak_replicas_desired_draining" not in shape:
        return ""
    desired, draining = shape["peak_replicas_desired_draining"]
    return (
        f" Replicas at their peak {shape['peak_replicas']} ({desired} desired, {draining} draining; "
        f"at most {shape['peak_draining']} draining at once); in flight at its peak {shape['inflight_peak']:,} "
        f"with {shape['running_at_inflight_peak']:,} jobs running (budget {shape['concurrency_budget']}; "
        f"at most {shape['running_peak']:,} running at once)."
    )


def write_json(path: Path, report: dict[str, Any]) -> None:
    path.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n")


def _seconds(value: float) -> str:
    if value >= 3600:
        return f"{value / 3600:.1f} h"
    if value >= 120:
        return f"{value / 60:.1f} min"
    return f"{value:.1f} s"


def markdown(report: dict[str, Any], plots: dict[str, str]) -> str:
    """report.md: the settings read, the targets, one table per shape, the plots."""
    deploy = report["deploy"]
    jobs = report["options"]["job_seconds"]
    means = sorted(set(jobs.values()))
    job_means = f"{means[0]:g} s" if len(means) == 1 else ", ".join(f"{n} {s:g} s" for n, s in jobs.items())
    lines = [
        f"# Fleet simulation: {deploy['kind']} ({report['platform']})",
        "",
        f"Engine {report['engine_version']}; the deploy files' settings: concurrency {deploy['concurrency']}, "
        f"{deploy['min_replicas']}-{deploy['max_replicas']} replicas, grace period {deploy['grace_seconds']:g} s, "
        f"job timeout {deploy['job_timeout_seconds']:g} s. Jobs: lognormal, mean {job_means}; "
        f"replicas start in {report['options']['start_seconds']:g} s (+-20%); SQS counts lag up to "
        f"{report['options']['count_lag']:g} s. Each shape is also run under an oracle that knows the traffic to "
        "come (same replicas, start latency and engine): ratios are ours / the oracle's.",
        "",
        *(assumed_markdown(report["assumed"]) if "assumed" in report else []),
        "## Targets",
        "",
        "| target | figure | met |",
        "|---|---|---|",
    ]
    lines += [f"| {t['target']} | {t['figure']} | {'yes' if t['met'] else '**no**'} |" for t in report["targets"]]
    lines += [
        "",
        "## Shapes",
        "",
        "| shape | messages | lost | duplicate runs (cause) | cut off by SIGKILL | oldest age p50 / p99 / max | oracle p99 | "
        "replica-min | oracle | scale out / in | thrash | in-flight peak | $ per million |",
        "|---|---:|---:|---|---:|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for name, s in report["shapes"].items():
        causes = ", ".join(f"{c} {n}" for c, n in s["duplicates_by_cause"].items()) or "-"
        ratio = s.get("ratios", {})
        lines.append(
            f"| {name} | {s['messages']:,} | {s['messages_lost']} | {s['duplicate_runs']} ({causes}) | "
            f"{s['cut_off_by_sigkill']} | {_seconds(s['p50_oldest_age_seconds'])} / "
            f"{_seconds(s['p99_oldest_age_seconds'])} / {_seconds(s['max_oldest_age_seconds'])} | "
            f"{_seconds(s.get('oracle_p99_oldest_age_seconds', 0.0))} ({ratio.get('p99_oldest_age_seconds', '-')}x) | "
            f"{s['replica_minutes']:,.0f} | {s.get('oracle_replica_minutes', 0):,.0f} "
            f"({ratio.get('replica_minutes', '-')}x) | {s['scale_events']['out']} / {s['scale_events']['in']} | "
            f"{s['thrash']} | {s['inflight_peak']:,} ({s['inflight_peak_share_of_limit']:.2%} of SQS's limit) | "
            f"{s['cost']['usd_per_million']:.2f} |"
        )
    lines += ["", "Per shape:", ""]
    for name, s in report["shapes"].items():
        title = SHAPES[name].title if name in SHAPES else s["title"]
        lines.append(
            f"- **{name}**: {title}. Scale {s['scale']} (each simulated message stood for {s['scale']} real ones), "
            f"{s['simulated_messages']:,} simulated; SQS requests {s['sqs_requests']:,} "
            f"({s['requests_per_message']} a message); cost ${s['cost']['total_usd']:.2f} "
            f"(SQS {s['cost']['sqs_usd']:.2f}, compute {s['cost']['compute_usd']:.2f}); "
            f"message wait p99 {_seconds(s['p99_wait_seconds'])}; {s['wall_seconds']:g} s wall."
            + (f" Jobs created {s['jobs']['created']:,}, {s['jobs']['idle']} found nothing." if "jobs" in s else "")
            + _alive_and_running(s)
            + (
                f" Bad release at {s['release']['at_minutes']:g} min: {_release(s['release'])}."
                if "release" in s
                else ""
            )
        )
    if plots:
        lines += ["", "## Over time", ""]
        for name, path in plots.items():
            lines += [f"### {name}", "", f"![{name}]({path})", ""]
    return "\n".join(lines).rstrip() + "\n"
