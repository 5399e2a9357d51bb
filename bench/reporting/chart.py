"""The chart of a run (benchmarks.png): throughput against concurrency for the I/O-like
handlers, a panel for each handler and added latency, the ideal and the emulator's ceiling
drawn in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from measuring.plan import CONTENDERS, IO_HANDLERS

from reporting.results import HANDLER_TEXT, find, latencies, latency_handlers, latency_text

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
