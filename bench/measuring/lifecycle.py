"""A contender beyond its throughput: idle on an empty queue (requests a minute, memory, the
stop), its peak memory with every slot busy on big messages, and what a SIGTERM or a
SIGKILL with jobs in flight leaves behind (how long the drain took, what SQS delivers
again, what is lost). Each on a fresh queue of the harness's, at the emulator's latency."""

from __future__ import annotations

import base64
import json
import math
import time
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from common import parse_handler  # bench/contenders/, on the path with this package

from measuring.harness import Bench
from measuring.plan import pollers, prefetch_bound
from measuring.processes import Proc, RunError, completions, read_completions


def idle(bench: Bench, contender: str) -> dict[str, Any]:
    """Empty queue: requests per minute and resident memory; then the idle stop."""
    plan = bench.plan
    concurrency = 1 if contender == "handloop" else plan.idle_concurrency
    row: dict[str, Any] = {
        "contender": contender,
        "concurrency": concurrency,
        "pollers": pollers(contender, concurrency),
    }
    queue = bench.new_queue(f"{contender}-idle")
    proc: Proc | None = None
    try:
        with bench.proxy() as proxy:
            proc, log = bench.start(contender, queue, "noop", concurrency, proxy)
            started = time.monotonic()
            bench.wait_for(proc, "a first receive", lambda: proxy.counts["ReceiveMessage"] >= 1)
            # Start-up calls (queue URL, attributes) are over once it polls; let it settle.
            time.sleep(max(0.0, started + 3.0 - time.monotonic()) if plan.name != "smoke" else 0.5)
            a = bench.snapshot(proc, log, proxy)
            bench.wait_for(
                proc, "the idle window", lambda: time.monotonic() >= a.t + plan.idle_window, plan.idle_window + 30
            )
            b = bench.snapshot(proc, log, proxy)
            row["rss_bytes"] = proc.rss()
            row["peak_rss_bytes"] = proc.peak_rss()
            requests = b.requests - a.requests
            minutes = (b.t - a.t) / 60
            row.update(
                window_seconds=round(b.t - a.t, 3),
                requests=dict(requests),
                requests_per_minute=sum(requests.values()) / minutes,
                receives_per_minute=requests["ReceiveMessage"] / minutes,
                cpu_seconds_per_minute=(b.cpu - a.cpu) / minutes,
            )
            row["requests_per_minute_per_poller"] = row["requests_per_minute"] / row["pollers"]
            took = proc.stop(60)
            row["drain_seconds"] = took
            row["killed"] = took is None
            row["exit_code"] = proc.popen.returncode
    except (RunError, BotoCoreError, ClientError, OSError) as exc:  # reported; the other runs go on
        row["error"] = str(exc) if isinstance(exc, RunError) else f"{type(exc).__name__}: {exc}"
    finally:
        if proc is not None and proc.alive():
            proc.kill()
        bench.delete_queue(queue[1])
    return row


def loaded_memory(bench: Bench, contender: str) -> dict[str, Any]:
    """Peak resident memory with big messages and every slot busy."""
    plan = bench.plan
    concurrency = 1 if contender == "handloop" else plan.rss_concurrency
    _, seconds = parse_handler(plan.rss_handler)
    count = min(plan.max_seed, math.ceil(concurrency * (plan.rss_seconds / seconds + 3)))
    row: dict[str, Any] = {
        "contender": contender,
        "concurrency": concurrency,
        "message_bytes": plan.rss_bytes,
        "handler": plan.rss_handler,
        "seeded": count,
    }
    queue = bench.new_queue(f"{contender}-rss")
    proc: Proc | None = None
    try:
        bench.seed(queue, count, contender, size=plan.rss_bytes)
        with bench.proxy() as proxy:
            proc, log = bench.start(contender, queue, plan.rss_handler, concurrency, proxy)
            bench.wait_for(proc, "first completed message", lambda: completions(log) >= 1)
            end = time.monotonic() + plan.rss_seconds
            peak = 0
            while time.monotonic() < end and completions(log) < count and proc.alive():
                peak = max(peak, proc.rss())
                time.sleep(0.05)
            row["peak_rss_bytes"] = max(peak, proc.peak_rss())
            row["completed"] = completions(log)
            proc.stop(60)
    except (RunError, BotoCoreError, ClientError, OSError) as exc:  # reported; the other runs go on
        row["error"] = str(exc) if isinstance(exc, RunError) else f"{type(exc).__name__}: {exc}"
    finally:
        if proc is not None and proc.alive():
            proc.kill()
        bench.delete_queue(queue[1])
    return row


def drain(bench: Bench, contender: str, kill: bool = False) -> dict[str, Any]:
    """SIGTERM with jobs in flight: how long to exit, and what SQS delivers again. With
    `kill`, SIGKILL instead: what is left in flight then is what a crash strands."""
    plan = bench.plan
    concurrency = 1 if contender == "handloop" else plan.drain_concurrency
    _, seconds = parse_handler(plan.drain_handler)
    count = concurrency * 6 + 10
    visibility = plan.drain_visibility
    row: dict[str, Any] = {
        "contender": contender,
        "concurrency": concurrency,
        "handler": plan.drain_handler,
        "seeded": count,
        "visibility_seconds": visibility,
        "signal": "SIGKILL" if kill else "SIGTERM",
        # What the contender may hold beyond its running jobs (the worker's prefetch cap).
        "prefetch_bound": prefetch_bound(contender, concurrency),
        # Deletes sent, not yet answered, whose places went back (the worker's: admission.py).
        "sent_bound": prefetch_bound(contender, concurrency) if contender == "generated" else 0,
    }
    queue = bench.new_queue(f"{contender}-{'kill' if kill else 'drain'}", visibility)
    proc: Proc | None = None
    try:
        bench.seed(queue, count, contender)
        with bench.proxy() as proxy:
            proc, log = bench.start(contender, queue, plan.drain_handler, concurrency, proxy, visibility=visibility)
            first_wave = min(concurrency, 10)
            bench.wait_for(proc, "a first wave of jobs", lambda: completions(log) >= first_wave)
            time.sleep(seconds / 2)  # the next wave is half-way through its jobs
            signalled = time.time()
            if kill:
                proc.kill()
                took = None
            else:
                took = proc.stop(120)
            exited = time.time()
        done = read_completions(log)
        completed = {i for i, _ in done}
        last = max((t for _, t in done), default=signalled)
        visible, hidden = bench.queue_counts(queue[1])
        row.update(
            drain_seconds=took,
            killed=kill or took is None,
            exit_code=proc.popen.returncode,
            jobs_finished_after_signal=sum(1 for _, t in done if t >= signalled),
            after_last_job_seconds=max(0.0, exited - max(signalled, last)),
            completed=len(completed),
            processed_twice=len(done) - len(completed),
            left_visible=visible,
            left_in_flight=hidden,  # held by nobody: back only when their visibility runs out
        )
        # Wait out the visibility timeout, then see which messages SQS delivers again.
        deadline = time.monotonic() + visibility + 15
        while hidden and time.monotonic() < deadline:
            time.sleep(0.5)
            visible, hidden = bench.queue_counts(queue[1])
        again: set[str] = set()
        empty = 0
        while empty < 2:
            msgs = bench.sqs.receive_message(
                QueueUrl=queue[1], MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=120
            ).get("Messages", [])
            empty = 0 if msgs else empty + 1
            for m in msgs:
                again.add(message_id(m["Body"], contender))
        row["redelivered_completed"] = len(again & completed)
        row["redelivered_unfinished"] = len(again - completed)
        row["lost"] = count - len(completed | again)
    except (RunError, BotoCoreError, ClientError, OSError) as exc:  # reported; the other runs go on
        row["error"] = str(exc) if isinstance(exc, RunError) else f"{type(exc).__name__}: {exc}"
    finally:
        if proc is not None and proc.alive():
            proc.kill()
        bench.delete_queue(queue[1])
    return row


def message_id(body: str, contender: str) -> str:
    if contender == "celery":
        envelope = json.loads(base64.b64decode(body))
        args = json.loads(base64.b64decode(envelope["body"]))[0]
        body = args[0]
    return str(json.loads(body)["id"])
