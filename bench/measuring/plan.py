"""What a run measures: the plans (full, quick, smoke), the contenders and their names, the
round trips added to every SQS request, the order contenders take their turns in, and what
each contender may hold beyond its running jobs (the bound a drain or a kill is held to)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from sqs_worker_engine.base.limits import default_prefetch

REGION = "us-east-1"
SPREAD = (0.01, 0.04)  # seconds, uniform: a third pass of the plan's `spread` handlers (AWS-like)
CONTENDERS = ("generated", "generated-p0", "handloop", "threadpool", "celery")
GENERATED = ("generated", "generated-p0")  # the worker, with its default prefetch and with none
LABELS = {
    "generated": "generated worker",
    "generated-p0": "generated worker, prefetch off",
    "handloop": "hand-written loop",
    "threadpool": "boto3 thread pool",
    "celery": "Celery (SQS broker)",
    "raw": "raw batched loop",
}
IO_HANDLERS = ("io10ms", "io100ms", "io1s")
# The raw loop run beside the worker in each no-op scenario of the CPU target
# (reporting.targets.CPU_VS_RAW_AT), as (processes, threads): one process of 8 threads was
# the cheapest per message of the ceiling's layouts (the full run of 2026-12-04: 0.25-0.30
# ms, against 0.28-0.32 for 3x6 and 0.30-0.37 for 4x4): the floor is the least a loop with
# nothing in it costs, in one process as the worker is.
RAW_BESIDE = (1, 8)


@dataclass(frozen=True)
class Plan:
    name: str
    handlers: tuple[str, ...]
    concurrencies: tuple[int, ...]
    warmup: float  # seconds of processing before the measurement window opens
    window: float  # the measurement window (it closes early if the backlog runs low)
    max_seed: int  # most messages enqueued for one run
    ceiling_loops: tuple[tuple[int, int], ...]  # raw loop (processes, threads) tried; the best counts
    idle_window: float  # seconds of an idle worker counted for requests per minute
    idle_concurrency: int
    rss_concurrency: int
    rss_bytes: int  # body size for the loaded-memory run
    rss_handler: str
    rss_seconds: float
    drain_concurrency: int
    drain_handler: str
    drain_visibility: int
    wait_seconds: int | None  # long-poll wait forced on every contender (smoke only)
    profile: bool
    default_concurrency: int | None = None  # the template's default, run for the worker alone (no-op)
    # Handlers run a third time with SPREAD added: AWS's round trips vary, and a fixed +20 ms
    # hides what a slow request among fast ones costs a pool that waits for its answers.
    spread: tuple[str, ...] = ()


PLANS = {
    "full": Plan(
        "full",
        ("noop", "io10ms", "io100ms", "io1s", "cpu"),
        (1, 10, 50, 100, 200),
        warmup=2.0,
        window=8.0,
        max_seed=30_000,
        ceiling_loops=((1, 8), (3, 6), (4, 4)),
        idle_window=60.0,
        idle_concurrency=10,
        rss_concurrency=200,
        rss_bytes=256 * 1024,
        rss_handler="io1s",
        rss_seconds=4.0,
        drain_concurrency=10,
        drain_handler="io2s",
        drain_visibility=10,
        wait_seconds=None,
        profile=True,
        default_concurrency=8,
        spread=("noop", "io10ms", "io100ms"),
    ),
    "quick": Plan(
        "quick",
        ("noop", "io10ms", "io100ms", "cpu"),
        (1, 10, 100),
        warmup=1.0,
        window=4.0,
        max_seed=12_000,
        ceiling_loops=((3, 6),),
        idle_window=30.0,
        idle_concurrency=10,
        rss_concurrency=100,
        rss_bytes=256 * 1024,
        rss_handler="io1s",
        rss_seconds=3.0,
        drain_concurrency=10,
        drain_handler="io2s",
        drain_visibility=10,
        wait_seconds=None,
        profile=True,
        default_concurrency=8,
        spread=("io10ms",),
    ),
    # Checks that every contender runs and every figure is produced; the figures mean
    # nothing (long polls are cut to 1 s so that stops are quick).
    "smoke": Plan(
        "smoke",
        ("noop", "io100ms"),
        (10,),
        warmup=0.3,
        window=2.0,  # Celery waits its 1 s polling interval whenever its prefetch is full
        max_seed=1_500,
        ceiling_loops=((1, 4),),
        idle_window=2.0,
        idle_concurrency=10,
        rss_concurrency=10,
        rss_bytes=16 * 1024,
        rss_handler="io100ms",
        rss_seconds=0.5,
        drain_concurrency=10,
        drain_handler="io500ms",
        drain_visibility=3,
        wait_seconds=1,
        profile=False,
        default_concurrency=8,  # a scenario of the CPU target, with the raw loop beside the worker
        spread=("noop",),
    ),
}


def latency_label(added: tuple[float, float]) -> str:
    """ "0", "20" or "10-40": milliseconds added to every SQS request."""
    low, high = (round(x * 1000) for x in added)
    return str(low) if low == high else f"{low}-{high}"


def parse_latency(text: str) -> tuple[float, float]:
    """ "20" or "10-40" (milliseconds) to seconds (low, high)."""
    try:
        low, _, high = text.partition("-")
        pair = (float(low) / 1000, float(high or low) / 1000)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give milliseconds, as 20 or 10-40") from None
    if pair[0] < 0 or pair[1] < pair[0]:
        raise argparse.ArgumentTypeError(f"{text!r}: give milliseconds, as 20 or 10-40 (low first)")
    return pair


def rotation(items: tuple[str, ...], turn: int) -> list[str]:
    """The contenders in a different order each scenario, so none always goes first."""
    k = turn % len(items)
    return list(items[k:] + items[:k])


def prefetch_bound(contender: str, concurrency: int) -> int:
    """Messages a contender may hold beyond its running jobs: the worker's default prefetch
    cap (none with WORKER_PREFETCH=0); the rest of a receive of 10 for the loops that take
    10 when one thread is free; Celery's prefetch multiplier of 4, less the running ones."""
    return {
        "generated": default_prefetch(concurrency),
        "generated-p0": 0,
        "celery": 3 * concurrency,
    }.get(contender, 9)


def pollers(contender: str, concurrency: int) -> int:
    """Concurrent receives a contender keeps open (the generated worker: one per 10 places,
    its concurrency plus its prefetch cap)."""
    if contender in GENERATED:
        return math.ceil((concurrency + prefetch_bound(contender, concurrency)) / 10)
    return 1
