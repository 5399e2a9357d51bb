"""Adaptive concurrency at a downstream's knee: fixed concurrency at the knee, fixed far
above it, and adaptive with that ceiling, side by side in one run.

Each handler calls a simulated downstream of capacity 6: a call takes 50 ms while at most
6 calls are in flight, 50 ms x (in flight / 6)^2 beyond (counted as the call starts,
itself included), so throughput peaks at 6 in flight (120 calls/s) and falls past it
(15/s at 48). The real Worker runs a backlog against the engine's in-memory SQS on a
loop with virtual time (`testing.memory_worker` on `doubles.vtime`, as the model tests
run; each receive takes 20 ms, as SQS in-region): the figures are exact and the same on
every run, whatever else the machine does. Reported: messages per second over the run
(from the worker's start to the last completion), the most calls in flight, and the
adaptive limit's path (the worker's own gauge, `worker_concurrency_limit`).

    make bench-adaptive                     # docs/benchmarks-adaptive.{md,json} (seconds)
    python bench/adaptive.py [--messages N] [--knee 6] [--ceiling 48] [--out DIR]
    python bench/adaptive.py --short        # a small backlog: what the test runs

Targets: adaptive at least 0.75 of the best possible rate (the knee's 120/s) and at
least 3x fixed concurrency at the ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY
from sqs_worker_engine import Job, Router, WorkerState
from sqs_worker_engine.doubles import vtime
from sqs_worker_engine.testing import memory_sqs, memory_worker

QUEUE = "knee"
CALL_SECONDS = 0.05  # one call's time while the downstream is within its capacity
RECEIVE_SECONDS = 0.02  # each ReceiveMessage's round trip
SHORT = 1200  # messages in the short run (the test's)
BEST_SHARE = 0.75  # targets: adaptive >= this share of the best possible rate...
OVER_FIXED = 3.0  # ... and >= this many times fixed concurrency at the ceiling


@dataclass
class Downstream:
    """Calls in flight and how long each takes: the knee at `capacity`."""

    capacity: int
    inflight: int = 0
    most: int = 0
    calls: int = 0

    def seconds(self, inflight: int) -> float:
        return CALL_SECONDS * max(1.0, (inflight / self.capacity) ** 2)

    async def call(self) -> None:
        self.inflight += 1
        self.calls += 1
        self.most = max(self.most, self.inflight)
        try:
            await asyncio.sleep(self.seconds(self.inflight))
        finally:
            self.inflight -= 1


@dataclass
class Result:
    name: str
    concurrency: int
    adaptive: bool
    messages: int
    seconds: float  # virtual seconds from the worker's start to the last completion
    rate: float  # messages per second
    most_in_flight: int
    limits: list[int] = field(default_factory=list)  # the adaptive limit, sampled every 0.5 s


def now() -> float:
    """The loop's clock: virtual seconds here, as the worker reads them."""
    return asyncio.get_running_loop().time()


def limit() -> int:
    """The adaptive limit (or the concurrency) as the worker's gauge has it now."""
    return int(REGISTRY.get_sample_value("worker_concurrency_limit", {"queue": QUEUE}) or 0)


def run_one(name: str, concurrency: int, adaptive: bool, messages: int, knee: int) -> Result:
    downstream = Downstream(knee)
    done: list[float] = []
    limits: list[int] = []
    began: list[float] = []

    async def scenario() -> None:
        sqs = memory_sqs(QUEUE, messages=messages)
        sqs.slow("ReceiveMessage", before=RECEIVE_SECONDS)
        router = Router()

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            await downstream.call()
            done.append(now())

        began.append(now())
        running = memory_worker(
            sqs,
            router,
            QUEUE,
            name="bench-adaptive",
            WORKER_CONCURRENCY=str(concurrency),
            WORKER_ADAPTIVE_CONCURRENCY="true" if adaptive else "false",
            WORKER_VISIBILITY_TIMEOUT_SECONDS="60",
            WORKER_JOB_TIMEOUT_MS="30000",
        )
        while len(done) < messages:
            if running.task.done():
                raise RuntimeError(f"the worker exited with {len(done)} of {messages} done")
            if running.worker.state is WorkerState.RUNNING:
                limits.append(limit())
            await asyncio.sleep(0.5)
        await running.stop()

    vtime.run(scenario())
    seconds = max(done) - began[0]
    return Result(name, concurrency, adaptive, messages, round(seconds, 3), messages / seconds, downstream.most, limits)


def measure(messages: int = 3000, knee: int = 6, ceiling: int = 48) -> dict[str, Any]:
    """The three side by side, and the targets' verdicts."""
    at_knee = run_one(f"fixed {knee}", knee, False, messages, knee)
    at_ceiling = run_one(f"fixed {ceiling}", ceiling, False, messages, knee)
    adaptive = run_one(f"adaptive, ceiling {ceiling}", ceiling, True, messages, knee)
    best = knee / CALL_SECONDS
    return {
        "messages": messages,
        "knee": knee,
        "ceiling": ceiling,
        "best_possible_rate": best,
        "runs": [asdict(r) for r in (at_knee, at_ceiling, adaptive)],
        "adaptive_share_of_best": adaptive.rate / best,
        "adaptive_over_fixed_ceiling": adaptive.rate / at_ceiling.rate,
        "targets": {
            f"adaptive >= {BEST_SHARE} of the best possible rate": adaptive.rate >= BEST_SHARE * best,
            f"adaptive >= {OVER_FIXED:g}x fixed {ceiling}": adaptive.rate >= OVER_FIXED * at_ceiling.rate,
        },
    }


def render(result: dict[str, Any]) -> str:
    lines = [
        (
            f"Downstream of capacity {result['knee']} (best possible {result['best_possible_rate']:.0f}/s), "
            f"{result['messages']} messages, virtual time:"
        ),
        "",
        "| run | messages/s | share of best | most in flight | seconds |",
        "|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        share = r["rate"] / result["best_possible_rate"]
        lines.append(f"| {r['name']} | {r['rate']:.1f} | {share:.2f} | {r['most_in_flight']} | {r['seconds']:.1f} |")
    adaptive = result["runs"][-1]["limits"]
    settled = adaptive[len(adaptive) // 2 :]
    lines += [
        "",
        (
            f"adaptive / best possible: {result['adaptive_share_of_best']:.2f}; "
            f"adaptive / fixed {result['ceiling']}: {result['adaptive_over_fixed_ceiling']:.1f}x"
        ),
        (
            f"adaptive limit, every 0.5 s (first 12): {adaptive[:12]}; "
            f"second half: {min(settled, default=0)}..{max(settled, default=0)}"
        ),
        "",
    ]
    lines += [f"- {name}: {'met' if ok else 'NOT met'}" for name, ok in result["targets"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--knee", type=int, default=6)
    parser.add_argument("--ceiling", type=int, default=48)
    parser.add_argument("--short", action="store_true", help="1200 messages: the test's run")
    parser.add_argument("--out", type=Path, help="write benchmarks-adaptive.json and .md here")
    args = parser.parse_args(argv)
    logging.getLogger("sqs_worker_engine").setLevel(logging.ERROR)  # the worker's own lines: not figures
    result = measure(SHORT if args.short else args.messages, args.knee, args.ceiling)
    text = render(result)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        header = "# Adaptive concurrency at a downstream's knee\n\nGenerated by `make bench-adaptive` (`bench/adaptive.py`).\n\n"
        (args.out / "benchmarks-adaptive.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "benchmarks-adaptive.md").write_text(header + text + "\n")
    return 0 if all(result["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
