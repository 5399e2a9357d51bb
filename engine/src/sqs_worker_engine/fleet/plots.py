"""Plots over time, one PNG per shape: oldest-message age, replicas (alive, and the fleet's
desired and draining apart), messages in flight and cost, the fleet's beside the oracle's.
Needs matplotlib (the engine's `fleet` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .simulation import Sample

POINTS = 1500  # per line: enough for a day at one point a minute


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _thin(series: list[Sample], field: str, peak: bool) -> tuple[list[float], list[float]]:
    """At most POINTS points; each the bucket's largest value (`peak`) or its last."""
    step = max(1, len(series) // POINTS)
    xs, ys = [], []
    for i in range(0, len(series), step):
        bucket = series[i : i + step]
        xs.append(bucket[-1].t / 60)
        values = [float(getattr(s, field)) for s in bucket]
        ys.append(max(values) if peak else values[-1])
    return xs, ys


def shape_plot(
    path: Path,
    title: str,
    ours: list[Sample],
    oracle: list[Sample] | None,
    *,
    replica_dollars_per_second: float,
    dollars_per_request: float,
    seconds: float,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ours = [s for s in ours if s.t <= seconds]
    fig, axes = plt.subplots(4, 1, figsize=(9, 10), sharex=True)
    runs: list[tuple[str, list[Sample], str]] = [("autoscaler", ours, "#1b6ac9")]
    if oracle is not None:
        runs.append(("oracle", [s for s in oracle if s.t <= seconds], "#e08214"))
    for label, series, colour in runs:
        xs, age = _thin(series, "oldest_age", peak=True)
        axes[0].plot(xs, age, color=colour, lw=1.3, label=label)
        xs, pods = _thin(series, "pods", peak=True)
        axes[1].plot(xs, pods, color=colour, lw=1.3, label=label, drawstyle="steps-post")
        if label == "autoscaler":  # alive counts draining replicas: what was desired, and what drained, apart
            xs, desired = _thin(series, "desired", peak=True)
            axes[1].plot(xs, desired, color=colour, lw=0.9, ls="--", label="desired", drawstyle="steps-post")
            xs, draining = _thin(series, "draining", peak=True)
            axes[1].plot(xs, draining, color="#888888", lw=0.9, label="draining", drawstyle="steps-post")
        xs, inflight = _thin(series, "inflight", peak=True)
        axes[2].plot(xs, inflight, color=colour, lw=1.0, label=label)
        # Cost so far: replica-seconds at the replica's rate, requests at SQS's.
        spent, total, last_requests = [], 0.0, 0
        for s in series:
            total += s.pods * replica_dollars_per_second + (s.requests - last_requests) * dollars_per_request
            last_requests = s.requests
            spent.append(total)
        step = max(1, len(series) // 1500)
        axes[3].plot([s.t / 60 for s in series[::step]], spent[::step], color=colour, lw=1.3, label=label)
    axes[0].set_ylabel("oldest message (s)")
    axes[1].set_ylabel("replicas alive")
    axes[1].legend(loc="upper right", fontsize=8)
    axes[2].set_ylabel("in flight")
    axes[3].set_ylabel("cost so far ($)")
    axes[3].set_xlabel("minutes")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(loc="upper right")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_all(out: Path, results: dict[str, dict[str, Any]], costs: dict[str, tuple[float, float]]) -> dict[str, str]:
    """A PNG per shape in `out`; {shape: file name}."""
    if not available():
        return {}
    made = {}
    for name, pair in results.items():
        ours, oracle = pair["ours"], pair.get("oracle")
        replica_rate, request_rate = costs[name]
        file = f"{name}.png"
        shape_plot(
            out / file,
            f"{name}: {ours['title']}",
            ours["series"],
            oracle["series"] if oracle else None,
            replica_dollars_per_second=replica_rate,
            dollars_per_request=request_rate,
            seconds=ours["seconds"],
        )
        made[name] = file
    return made
