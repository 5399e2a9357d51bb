#!/usr/bin/env python3
"""Benchmark the generated worker against the alternatives, on one LocalStack, same handler.

    make bench                     # full run: docs/benchmarks.md, .json and .png
    python bench/run.py --quick    # a small run (minutes), same report
    python bench/run.py --smoke --out DIR   # tiny counts: checks the harness, not the figures

It bakes the default service, installs it (its worker is the engine, engine/, which the
baked service depends on by path), finds or starts LocalStack as the suites do
(sqs_worker_engine.doubles.emulators), and runs every contender as its own process against
fresh queues, behind one counting proxy (the engine's tests/faultproxy.py) that every SQS request
goes through. Contenders take turns within each scenario, so drift on a shared
machine hits them all alike. Every throughput scenario runs twice: at the emulator's own
latency, and with a round trip added to every SQS request at the proxy (--added-latency,
20 ms by default, about SQS in-region; "10-40" for a uniform spread). The generated worker
runs twice too, with its default prefetch and with WORKER_PREFETCH=0, so what prefetch
changes is measured side by side. In the no-op scenarios the CPU target holds (concurrency
8 and 50) the raw batched loop takes a turn as well: the floor those rows' CPU per message
is divided by. bench/README.md describes the method; the report repeats it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import logging
import math
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import psutil
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ENGINE = ROOT / "engine"  # the worker engine every baked service runs on
CONTENDERS_DIR = HERE / "contenders"
sys.path.insert(0, str(CONTENDERS_DIR))
sys.path.insert(0, str(HERE))

# From bench/ and bench/contenders/, put on the path above.
import report
from common import RECORD_BYTES, parse_handler
from sqs_worker_engine.doubles import emulators
from sqs_worker_engine.runtime.protections.prefetch import default_prefetch

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
# The raw loop run beside the worker in each no-op scenario of the CPU target (report.CPU_VS_RAW_AT),
# as (processes, threads): one process of 8 threads was the cheapest per message of the ceiling's
# layouts (the full run of 2026-12-04: 0.25-0.30 ms, against 0.28-0.32 for 3x6 and 0.30-0.37 for
# 4x4): the floor is the least a loop with nothing in it costs, in one process as the worker is.
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


# -- the proxy every contender talks to ----------------------------------------------


def load_module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def counting_proxy(faultproxy: ModuleType) -> type:
    """The tests' FaultProxy, resending once when LocalStack has dropped a kept-alive
    connection under it (the request is counted once: the contender made one)."""
    import asyncio

    import aiohttp

    class CountingProxy(faultproxy.FaultProxy):  # type: ignore[name-defined,misc]
        """Also times each operation through to LocalStack and back (`seconds`)."""

        def _follow(self, *_args: Any) -> None:
            # The tests' proxy parses every receive and delete to track what each client
            # holds; the bench needs only the counts, and the parsing would tax every
            # contender's requests with the proxy's CPU on a machine they share.
            return None

        async def _handle(self, request: Any) -> Any:
            target = request.headers.get("X-Amz-Target", "")
            operation = target.rsplit(".", 1)[-1] if target else request.path
            started = time.perf_counter()
            low, high = self.added  # seconds added to every request's round trip, as AWS's latency
            if high > 0:
                await asyncio.sleep(random.uniform(low, high))
            try:
                response = await super()._handle(request)
            except aiohttp.ServerDisconnectedError:
                with self._lock:
                    self.counts[operation] -= 1
                    self.resent += 1
                response = await super()._handle(request)
            with self._lock:
                self.seconds[operation] += time.perf_counter() - started
            return response

    return CountingProxy


# -- processes -------------------------------------------------------------------------


class Proc:
    """A contender process: CPU time, memory and a timed stop."""

    def __init__(self, cmd: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with open(log, "ab") as out:
            self.popen = subprocess.Popen(
                cmd, env=env, cwd=CONTENDERS_DIR, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.ps = psutil.Process(self.popen.pid)

    def _tree(self) -> list[psutil.Process]:
        try:
            return [self.ps, *self.ps.children(recursive=True)]
        except psutil.Error:
            return []

    def cpu(self) -> float:
        """User + system seconds of the process and all its children."""
        total = 0.0
        for i, p in enumerate(self._tree()):
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
                if i == 0:
                    total += t.children_user + t.children_system
        return total

    def rss(self) -> int:
        total = 0
        for p in self._tree():
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
        return total

    def peak_rss(self) -> int:
        """High-water mark of resident memory (VmHWM), summed over the process tree."""
        total = 0
        for p in self._tree():
            try:
                status = Path(f"/proc/{p.pid}/status").read_text()
            except OSError:
                continue
            match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
            if match:
                total += int(match.group(1)) * 1024
        return total

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float) -> float | None:
        """SIGTERM, then wait: seconds to exit, or None if it had to be killed."""
        if not self.alive():
            return 0.0
        sent = time.monotonic()
        self.popen.send_signal(signal.SIGTERM)
        while time.monotonic() - sent < timeout:
            if self.popen.poll() is not None:
                return time.monotonic() - sent
            time.sleep(0.005)
        self.kill()
        return None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(10)

    def tail(self, chars: int = 1500) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def completions(log: Path) -> int:
    try:
        return log.stat().st_size // RECORD_BYTES
    except FileNotFoundError:
        return 0


def read_completions(log: Path) -> list[tuple[str, float]]:
    if not log.exists():
        return []
    rows = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            rows.append((parts[0], float(parts[1])))
    return rows


@dataclass
class Snapshot:
    t: float
    wall: float  # the clock the completion log is written in
    done: int
    requests: Counter[str]
    seconds: Counter[str]  # time spent per operation, at the proxy
    cpu: float
    machine_busy: float  # CPU seconds all processes on the machine used (not idle, not waiting)


def machine_busy() -> float:
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


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


def aligned_rate(times: list[float], start: float, end: float, waves: tuple[int, ...]) -> float | None:
    """Messages per second between completions of the same rank in their wave.

    Handlers that start together finish together: completions come in waves (of up to
    `concurrency` messages, or 10 per receive). A fixed window catches a whole number of
    waves plus or minus one, which is a large error when there are few (1 s jobs). Timing
    the k-th and the (k+m)-th completion inside the window, with m a multiple of the wave
    size, measures whole waves exactly; for a steady stream it is the plain rate.
    """
    inside = sorted(t for t in times if start <= t <= end)
    for wave in waves:  # the largest wave size that fits the window at least once
        m = (len(inside) - 1) // wave * wave
        # Over half the window at least: a few completions of one receive, a millisecond
        # apart, are one wave of the contender's own, not a rate.
        if m >= wave and inside[m] - inside[0] >= (end - start) / 2:
            return m / (inside[m] - inside[0])
    return None


class RunError(RuntimeError):
    pass


# -- the bench -------------------------------------------------------------------------


class Bench:
    def __init__(self, plan: Plan, project: Path, package: str, endpoint: str, work: Path, faultproxy: ModuleType):
        self.plan = plan
        self.project = project
        self.package = package
        self.endpoint = endpoint
        self.work = work
        self.proxy_class = counting_proxy(faultproxy)
        self.python = str(project / ".venv" / "bin" / "python")
        self.sqs = boto3.client(
            "sqs",
            endpoint_url=endpoint,
            region_name=REGION,
            aws_access_key_id="test",
            aws_secret_access_key="test",
            config=Config(max_pool_connections=16, retries={"mode": "standard"}),
        )
        import celery_worker

        self.celery_template = celery_worker.envelope_template()
        self.celery_envelope = celery_worker.envelope
        self.ceiling = 0.0
        self.cpu_seconds = 0.0  # one cpu-like handler call, measured in this run
        self.raw_layout = RAW_BESIDE  # the raw loop's (processes, threads) for its next run
        self.raw_cpu_ms: float | None = None  # the raw loop's CPU per message in this run (the floor)
        self.runs = 0
        self.added = (0.0, 0.0)  # the round trip the proxy adds now (seconds, uniform low-high)

    # -- queues --------------------------------------------------------------------

    def new_queue(self, tag: str, visibility: int = 30) -> tuple[str, str]:
        name = f"bench-{tag}-{uuid.uuid4().hex[:8]}"[:80]
        url = self.sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": str(visibility)})["QueueUrl"]
        return name, url

    def delete_queue(self, url: str) -> None:
        with contextlib.suppress(Exception):
            self.sqs.delete_queue(QueueUrl=url)

    def seed(self, queue: tuple[str, str], count: int, contender: str, size: int = 0) -> None:
        """Enqueue `count` messages (ids 0..count-1) straight to LocalStack, not through the
        proxy, before the contender starts: seeding costs no contender anything."""
        name, url = queue

        def body(i: int) -> str:
            text = json.dumps({"id": f"{i:012d}"})
            if size:
                text = json.dumps({"id": f"{i:012d}", "pad": "x" * max(0, size - len(text) - 10)})
            return self.celery_envelope(self.celery_template, text, name) if contender == "celery" else text

        limit = 900_000  # SendMessageBatch takes at most 1 MiB in all
        batches: list[list[str]] = [[]]
        used = 0
        for i in range(count):
            b = body(i)
            if len(batches[-1]) == 10 or used + len(b) > limit:
                batches.append([])
                used = 0
            batches[-1].append(b)
            used += len(b)

        def send(batch: list[str]) -> None:
            entries = [{"Id": str(i), "MessageBody": b} for i, b in enumerate(batch)]
            for _ in range(5):
                failed = self.sqs.send_message_batch(QueueUrl=url, Entries=entries).get("Failed", [])  # type: ignore[arg-type]
                if not failed:
                    return
                ids = {f["Id"] for f in failed}
                entries = [e for e in entries if e["Id"] in ids]
            raise RunError(f"could not seed {len(entries)} message(s)")

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(send, [b for b in batches if b]))

    def queue_counts(self, url: str) -> tuple[int, int]:
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]), int(attrs["ApproximateNumberOfMessagesNotVisible"])

    # -- contenders ----------------------------------------------------------------

    @contextlib.contextmanager
    def proxy(self) -> Iterator[Any]:
        proxy = self.proxy_class(self.endpoint)
        proxy.added = self.added
        proxy.resent = 0
        proxy.seconds = Counter()
        proxy.start()
        try:
            yield proxy
        finally:
            proxy.stop()

    def start(
        self,
        contender: str,
        queue: tuple[str, str],
        handler: str,
        concurrency: int,
        proxy: Any,
        *,
        visibility: int = 30,
    ) -> tuple[Proc, Path]:
        name, url = queue
        self.runs += 1
        log = self.work / f"run-{self.runs:03d}-{contender}.done"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKER_", "BENCH_", "AWS_", "VIRTUAL_ENV"))}
        env.update(
            AWS_ENDPOINT_URL=proxy.url,
            AWS_REGION=REGION,
            AWS_DEFAULT_REGION=REGION,
            AWS_ACCESS_KEY_ID="test",
            AWS_SECRET_ACCESS_KEY="test",
            PYTHONPATH=str(CONTENDERS_DIR),
            BENCH_HANDLER=handler,
            BENCH_LOG=str(log),
            BENCH_QUEUE=name,
            BENCH_QUEUE_URL=url,
            BENCH_CONCURRENCY=str(concurrency),
            BENCH_VISIBILITY=str(visibility),
        )
        if self.plan.wait_seconds is not None:
            env["BENCH_WAIT_SECONDS"] = str(self.plan.wait_seconds)
        py = self.python
        if contender in GENERATED:
            env.update(
                BENCH_PACKAGE=self.package,
                WORKER_QUEUES=name,
                WORKER_CONCURRENCY=str(concurrency),
                WORKER_HANDLERS="generated_handlers:router",
                WORKER_VISIBILITY_TIMEOUT_SECONDS=str(visibility),
                WORKER_METRICS_PORT="0",  # nothing scrapes it here; a fixed port could clash
                WORKER_HEALTH_FILE=str(self.work / f"run-{self.runs:03d}.progress"),
                WORKER_ID=f"bench-{self.runs}",
            )
            if contender == "generated-p0":
                env["WORKER_PREFETCH"] = "0"
            if self.plan.wait_seconds is not None:
                env["WORKER_WAIT_TIME_SECONDS"] = str(self.plan.wait_seconds)
            cmd = [py, "-m", self.package, "run"]
        elif contender == "celery":
            cmd = [py, "-m", "celery", "-A", "celery_worker", "worker", "-P", "threads", "-c", str(concurrency)]
            cmd += ["-Q", name, "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "WARNING"]
        elif contender == "raw":
            env["BENCH_PROCESSES"] = str(self.raw_layout[0])
            env["BENCH_CONCURRENCY"] = str(self.raw_layout[1])
            cmd = [py, str(CONTENDERS_DIR / "raw_loop.py")]
        else:
            script = contender
            cmd = [py, str(CONTENDERS_DIR / f"{script}.py")]
        return Proc(cmd, env, self.work / f"run-{self.runs:03d}-{contender}.log"), log

    def snapshot(self, proc: Proc, log: Path, proxy: Any) -> Snapshot:
        return Snapshot(
            time.monotonic(),
            time.time(),
            completions(log),
            Counter(proxy.counts),
            Counter(proxy.seconds),
            proc.cpu(),
            machine_busy(),
        )

    def wait_for(self, proc: Proc, what: str, check: Callable[[], bool], timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if not proc.alive():
                raise RunError(f"exited (code {proc.popen.returncode}) while waiting for {what}:\n{proc.tail()}")
            if time.monotonic() > deadline:
                raise RunError(f"no {what} after {timeout:.0f} s:\n{proc.tail()}")
            time.sleep(0.02)

    # -- scenarios -----------------------------------------------------------------

    def ideal(self, handler: str, concurrency: int) -> float:
        """What the handler alone allows at this concurrency, capped by the emulator."""
        kind, seconds = parse_handler(handler)
        if kind == "io":
            return min(concurrency / seconds, self.ceiling)
        if kind == "cpu":
            # CPU-bound work cannot run on more cores than there are.
            return min(min(concurrency, os.cpu_count() or 1) / self.cpu_seconds, self.ceiling)
        return self.ceiling

    def throughput(self, contender: str, handler: str, concurrency: int) -> dict[str, Any]:
        plan = self.plan
        # Before the ceiling is known (the raw loop itself), plan for more than any rate seen here.
        expected = self.ideal(handler, concurrency) if self.ceiling else 6000.0
        reserve = 2 * concurrency + 20
        most = plan.max_seed * (2 if contender == "raw" else 1)
        seed = min(most, math.ceil(expected * (plan.warmup + plan.window) * 1.3) + reserve + concurrency)
        row: dict[str, Any] = {
            "contender": contender,
            "handler": handler,
            "concurrency": concurrency,
            "added_ms": latency_label(self.added),
            "seeded": seed,
        }
        queue = self.new_queue(f"{contender}-{handler}-c{concurrency}")
        proc: Proc | None = None
        try:
            self.seed(queue, seed, contender)
            with self.proxy() as proxy:
                proc, log = self.start(contender, queue, handler, concurrency, proxy)
                started = time.monotonic()
                self.wait_for(proc, "first completed message", lambda: completions(log) >= 1)
                row["startup_seconds"] = round(time.monotonic() - started, 3)
                warm_until = time.monotonic() + plan.warmup
                self.wait_for(
                    proc,
                    "warm-up",
                    lambda: time.monotonic() >= warm_until or completions(log) >= seed - reserve,
                    plan.warmup + 60,
                )
                a = self.snapshot(proc, log, proxy)
                end = a.t + plan.window
                self.wait_for(
                    proc,
                    "the window",
                    lambda: time.monotonic() >= end or completions(log) >= seed - reserve,
                    plan.window + 60,
                )
                b = self.snapshot(proc, log, proxy)
                proc.kill()  # the stop is measured on its own (drain); here it would only cost time
            done = b.done - a.done
            elapsed = b.t - a.t
            requests = b.requests - a.requests
            if done <= 0:
                raise RunError(f"no message completed in the {elapsed:.1f} s window")
            finished = read_completions(log)
            ids = [i for i, _ in finished]
            waves = (math.lcm(concurrency, 10), concurrency, 1)
            aligned = aligned_rate([t for _, t in finished], a.wall, b.wall, waves)
            row.update(
                window_seconds=round(elapsed, 3),
                messages=done,
                throughput=aligned or done / elapsed,
                window_throughput=done / elapsed,
                requests=dict(requests),
                requests_per_message=sum(requests.values()) / done,
                cpu_seconds=b.cpu - a.cpu,
                cpu_ms_per_message=1000 * (b.cpu - a.cpu) / done,
                cpu_cores=(b.cpu - a.cpu) / elapsed,
                # Every process's, LocalStack's and the proxy's included: near the core count,
                # the machine, not the contender, set the pace.
                machine_busy_cores=(b.machine_busy - a.machine_busy) / elapsed,
                # Mean round trip per operation through the proxy to LocalStack and back.
                request_ms={
                    op: round(1000 * (b.seconds[op] - a.seconds[op]) / n, 2) for op, n in requests.items() if n > 0
                },
                processed_twice=len(ids) - len(set(ids)),
            )
            if contender == "raw":
                row["efficiency"] = None
            else:
                row["ideal"] = self.ideal(handler, concurrency)
                row["efficiency"] = row["throughput"] / row["ideal"] if row["ideal"] else None
        except (RunError, BotoCoreError, ClientError, OSError) as exc:  # reported; the other runs go on
            row["error"] = str(exc) if isinstance(exc, RunError) else f"{type(exc).__name__}: {exc}"
        finally:
            if proc is not None and proc.alive():
                proc.kill()
            self.delete_queue(queue[1])
        return row

    def raw(self, layout: tuple[int, int], concurrency: int) -> dict[str, Any]:
        """The raw loop with `layout` (processes, threads), no-op, as the row of `concurrency`."""
        self.raw_layout = layout
        row = self.throughput("raw", "noop", concurrency)
        row.update(processes=layout[0], threads=layout[1])
        return row

    def measure_ceiling(self) -> list[dict[str, Any]]:
        rows = []
        for processes, threads in self.plan.ceiling_loops:
            row = self.raw((processes, threads), processes * threads)
            rows.append(row)
            if "error" not in row:
                self.ceiling = max(self.ceiling, row["throughput"])
        return rows

    def measure_cpu_handler(self) -> None:
        """Seconds one cpu-like handler call takes, in the contenders' interpreter."""
        code = (
            "import time, common\n"
            "common.cpu_work(); t = time.perf_counter()\n"
            "for _ in range(50): common.cpu_work()\n"
            "print((time.perf_counter() - t) / 50)\n"
        )
        out = subprocess.run([self.python, "-c", code], cwd=CONTENDERS_DIR, capture_output=True, text=True, check=True)
        self.cpu_seconds = float(out.stdout.strip())

    def idle(self, contender: str) -> dict[str, Any]:
        """Empty queue: requests per minute and resident memory; then the idle stop."""
        plan = self.plan
        concurrency = 1 if contender == "handloop" else plan.idle_concurrency
        row: dict[str, Any] = {
            "contender": contender,
            "concurrency": concurrency,
            "pollers": pollers(contender, concurrency),
        }
        queue = self.new_queue(f"{contender}-idle")
        proc: Proc | None = None
        try:
            with self.proxy() as proxy:
                proc, log = self.start(contender, queue, "noop", concurrency, proxy)
                started = time.monotonic()
                self.wait_for(proc, "a first receive", lambda: proxy.counts["ReceiveMessage"] >= 1)
                # Start-up calls (queue URL, attributes) are over once it polls; let it settle.
                time.sleep(max(0.0, started + 3.0 - time.monotonic()) if plan.name != "smoke" else 0.5)
                a = self.snapshot(proc, log, proxy)
                self.wait_for(
                    proc, "the idle window", lambda: time.monotonic() >= a.t + plan.idle_window, plan.idle_window + 30
                )
                b = self.snapshot(proc, log, proxy)
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
            self.delete_queue(queue[1])
        return row

    def loaded_memory(self, contender: str) -> dict[str, Any]:
        """Peak resident memory with big messages and every slot busy."""
        plan = self.plan
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
        queue = self.new_queue(f"{contender}-rss")
        proc: Proc | None = None
        try:
            self.seed(queue, count, contender, size=plan.rss_bytes)
            with self.proxy() as proxy:
                proc, log = self.start(contender, queue, plan.rss_handler, concurrency, proxy)
                self.wait_for(proc, "first completed message", lambda: completions(log) >= 1)
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
            self.delete_queue(queue[1])
        return row

    def drain(self, contender: str, kill: bool = False) -> dict[str, Any]:
        """SIGTERM with jobs in flight: how long to exit, and what SQS delivers again. With
        `kill`, SIGKILL instead: what is left in flight then is what a crash strands."""
        plan = self.plan
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
        queue = self.new_queue(f"{contender}-{'kill' if kill else 'drain'}", visibility)
        proc: Proc | None = None
        try:
            self.seed(queue, count, contender)
            with self.proxy() as proxy:
                proc, log = self.start(contender, queue, plan.drain_handler, concurrency, proxy, visibility=visibility)
                first_wave = min(concurrency, 10)
                self.wait_for(proc, "a first wave of jobs", lambda: completions(log) >= first_wave)
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
            visible, hidden = self.queue_counts(queue[1])
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
                visible, hidden = self.queue_counts(queue[1])
            again: set[str] = set()
            empty = 0
            while empty < 2:
                msgs = self.sqs.receive_message(
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
            self.delete_queue(queue[1])
        return row

    # -- profile -------------------------------------------------------------------

    def profile(self, handler: str, concurrency: int, seconds: float) -> dict[str, Any]:
        """py-spy on the generated worker at saturation: where its CPU time goes."""
        pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        out = self.work / f"profile-{handler}-c{concurrency}.txt"
        rate = self.ideal(handler, concurrency)
        count = min(self.plan.max_seed * 2, math.ceil(rate * (seconds + 6) * 1.3) + 100)
        queue = self.new_queue(f"profile-{handler}-c{concurrency}")
        info: dict[str, Any] = {"handler": handler, "concurrency": concurrency}
        proc: Proc | None = None
        try:
            self.seed(queue, count, "generated")
            with self.proxy() as proxy:
                proc, log = self.start("generated", queue, handler, concurrency, proxy)
                self.wait_for(proc, "first completed message", lambda: completions(log) >= 1)
                time.sleep(1.0)
                before, cpu_before, t0 = completions(log), proc.cpu(), time.monotonic()
                cmd = [pyspy, "record", "--pid", str(proc.popen.pid), "--duration", str(int(seconds))]
                cmd += ["--rate", "200", "--format", "raw", "--nonblocking", "--output", str(out)]
                result = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=seconds + 60)
                info["messages"] = completions(log) - before
                info["cpu_cores"] = (proc.cpu() - cpu_before) / (time.monotonic() - t0)
                proc.stop(30)
            if result.returncode != 0 or not out.exists():
                raise RunError(f"py-spy failed: {result.stderr.strip()[-500:]}")
            info.update(summarise_profile(out.read_text(), self.package))
        except (RunError, subprocess.TimeoutExpired) as exc:
            info["error"] = str(exc)
        finally:
            if proc is not None and proc.alive():
                proc.kill()
            self.delete_queue(queue[1])
        return info


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


def message_id(body: str, contender: str) -> str:
    if contender == "celery":
        import base64

        envelope = json.loads(base64.b64decode(body))
        args = json.loads(base64.b64decode(envelope["body"]))[0]
        body = args[0]
    return str(json.loads(body)["id"])


AREAS = {
    "aiobotocore": "aiobotocore",
    "botocore": "botocore",
    "aiohttp": "aiohttp",
    "yarl": "aiohttp",
    "multidict": "aiohttp",
    "asyncio": "asyncio",
    "selectors.py": "sockets and polling",
    "socket.py": "sockets and polling",
    "json": "json",
    "logging": "logging",
    "aws_lambda_powertools": "Powertools (logs)",
    "prometheus_client": "prometheus_client",
    "pydantic": "pydantic",
    "pydantic_core": "pydantic",
    "threading.py": "threading",
}


def frame_file(frame: str) -> str:
    """`fn (pkg/mod.py:12)` -> `pkg/mod.py` (py-spy already gives module-relative paths)."""
    match = re.search(r" \(([^()]*?)(?::\d+)?\)$", frame)
    return match.group(1) if match else ""


ENGINE_PACKAGE = "sqs_worker_engine"
# The engine's command line: its frames hold the event loop (every sample of the main
# thread), so inclusive of their calls they say nothing; left out of the worker's own list.
ENGINE_ENTRY = (f"{ENGINE_PACKAGE}/entry.py", f"{ENGINE_PACKAGE}/cli.py")


def frame_area(frame: str, package: str) -> str:
    path = frame_file(frame)
    # The engine is installed into the service's virtualenv (py-spy gives
    # `sqs_worker_engine/...`); were it run from a checkout, its path would hold the same.
    if path.startswith(f"{ENGINE_PACKAGE}/") or f"/{ENGINE_PACKAGE}/" in path:
        return "worker runtime"
    if path.startswith(f"{package}/") or f"/src/{package}/" in path:
        return "service package"
    if path.startswith(("generated_handlers", "common")):
        return "bench handler"
    return AREAS.get(path.split("/", 1)[0], "other (stdlib, libraries)")


def summarise_profile(raw: str, package: str) -> dict[str, Any]:
    """Collapsed stacks -> shares of samples: self time by library, the worker's own
    functions inclusive of the calls they make, the event-loop callbacks, the hottest lines."""
    total = 0
    own: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    runtime: Counter[str] = Counter()
    callbacks: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        count = int(n)
        total += count
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";") if f]
        own[frames[-1]] += count
        areas[frame_area(frames[-1], package)] += count
        for frame in set(frames):
            if frame_area(frame, package) == "worker runtime" and not frame_file(frame).endswith(ENGINE_ENTRY):
                runtime[frame] += count
        # What the event loop was running: the frame under the innermost Handle._run.
        loop = max((i for i, f in enumerate(frames) if f.startswith("Handle._run ")), default=None)
        if loop is not None and loop + 1 < len(frames):
            callbacks[frames[loop + 1]] += count
        elif "select" in frames[-1].lower():
            callbacks["(polling for I/O)"] += count
        else:
            callbacks["(the event loop itself)" if loop is not None or "_run_once" in stack else frames[-1]] += count

    def top(counter: Counter[str], n: int) -> list[dict[str, Any]]:
        return [{"frame": k, "share": v / total} for k, v in counter.most_common(n)] if total else []

    return {
        "samples": total,
        "areas": top(areas, 12),
        "runtime": top(runtime, 15),
        "callbacks": top(callbacks, 12),
        "self": top(own, 12),
    }


# -- setup -----------------------------------------------------------------------------


def tool_env() -> dict[str, str]:
    """Our tools first on PATH, every pyenv interpreter visible to uv, one uv cache."""
    env = dict(os.environ)
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("VIRTUAL_ENV", None)
    env.setdefault("UV_CACHE_DIR", str(ROOT / ".venv" / "uv-cache"))
    if "PYENV_VERSION" not in env and shutil.which("pyenv"):
        out = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True, check=False).stdout
        usable = [v for v in out.split() if v.startswith("3.1") and v.replace(".", "").isdigit()]
        if usable:
            env["PYENV_VERSION"] = ":".join(sorted(usable, reverse=True))
    return env


def bake(into: Path, template: Path = ROOT) -> Path:
    """Bake the default service from `template` (this checkout, or another version of it
    unpacked elsewhere) into `into`, and install it with its own engine."""
    if template == ROOT:
        from cookiecutter.main import cookiecutter

        project = Path(cookiecutter(str(ROOT), no_input=True, output_dir=str(into)))
    else:
        # In a process of its own, started in the template: cookiecutter imports the
        # template's Jinja helpers by name (local_extensions, sqs_worker_template_jinja), and
        # this process (or a checkout in the working directory) would hand it this
        # checkout's, whose engine path they name.
        into.mkdir(parents=True, exist_ok=True)
        before = set(into.iterdir())
        subprocess.run(
            [sys.executable, "-m", "cookiecutter", "--no-input", "--output-dir", str(into), str(template)],
            cwd=template,
            env=tool_env(),
            check=True,
            capture_output=True,
        )
        (project,) = set(into.iterdir()) - before
    env = tool_env()
    result = subprocess.run(["make", "install"], cwd=project, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"make install failed in the baked project:\n{result.stdout}{result.stderr}")
    uv = shutil.which("uv", path=env["PATH"]) or "uv"
    # The service installs this checkout's engine/ by path, and uv reuses a wheel it built
    # earlier from that path unless engine/pyproject.toml changed: rebuild it, so that the
    # worker measured is the engine as it is now.
    result = subprocess.run(
        [
            uv,
            "sync",
            "--quiet",
            *(["--locked"] if (project / "uv.lock").exists() else []),
            "--reinstall-package",
            "sqs-worker-engine",
            "--compile-bytecode",  # as the service's image does: no contender compiles at start
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"reinstalling the engine into the baked project failed:\n{result.stdout}{result.stderr}")
    # The contenders all run on the service's interpreter; Celery at the version this
    # repository locks (its bench group), next to the service's own botocore.
    from importlib.metadata import version

    pins = [f"celery[sqs]=={version('celery')}", f"kombu=={version('kombu')}"]
    result = subprocess.run(
        [
            uv,
            "pip",
            "install",
            "--quiet",
            "--compile-bytecode",
            "--python",
            str(project / ".venv" / "bin" / "python"),
            *pins,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"installing Celery next to the service failed:\n{result.stdout}{result.stderr}")
    return project


def package_name(project: Path) -> str:
    found = [p.parent.name for p in (project / "src").glob("*/__main__.py")]
    if len(found) != 1:
        raise SystemExit(f"cannot tell the service's package in {project.name}/src")
    return found[0]


def revision() -> tuple[str, bool]:
    """This checkout's short commit, and whether its template or engine differ from it: what
    a measured worker was built from."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    changed = subprocess.run(
        [*git, "status", "--porcelain", "--", "{{cookiecutter.project_slug}}", "engine/src", "engine/pyproject.toml"],
        capture_output=True,
        text=True,
        check=False,
    )
    return head.stdout.strip() or "unknown", bool(changed.stdout.strip())


def machine(bench: Bench, endpoint: str) -> dict[str, Any]:
    code = (
        "import sys, json, importlib.metadata as m\n"
        "names = ['sqs-worker-engine', 'boto3', 'botocore', 'aiobotocore', 'celery', 'kombu', 'pycurl']\n"
        "print(json.dumps({'python': sys.version.split()[0], **{n: m.version(n) for n in names}}))\n"
    )
    versions = json.loads(subprocess.run([bench.python, "-c", code], capture_output=True, text=True, check=True).stdout)
    try:
        with urllib.request.urlopen(f"{endpoint.rstrip('/')}/_localstack/health", timeout=5) as r:
            localstack_version = json.load(r).get("version", "unknown")
    except OSError:
        localstack_version = "unknown"
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    commit, changed = revision()
    return {
        "template": commit + (" with uncommitted changes" if changed else ""),
        "cores": os.cpu_count(),
        "cpu": model,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": f"{platform.system()} {platform.release()}",
        "contender_python": versions.pop("python"),
        "harness_python": platform.python_version(),
        "libraries": versions,
        "localstack": localstack_version,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


# -- the run ---------------------------------------------------------------------------


def rotation(items: tuple[str, ...], turn: int) -> list[str]:
    """The contenders in a different order each scenario, so none always goes first."""
    k = turn % len(items)
    return list(items[k:] + items[:k])


def run(
    plan: Plan,
    out: Path,
    project: Path | None,
    log: Callable[[str], None],
    contenders: tuple[str, ...] = CONTENDERS,
    latencies: tuple[tuple[float, float], ...] = ((0.0, 0.0), (0.02, 0.02)),
) -> dict[str, Any]:
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sqs-bench-")))
        if project is None:
            log("baking the default service and installing it (make install)")
            project = bake(scratch)
        package = package_name(project)
        faultproxy = load_module("bench_faultproxy", ENGINE / "tests" / "faultproxy.py")
        ls = emulators.ensure()
        stack.callback(ls.stop)  # stops it only if it was started here
        log(f"LocalStack ({ls.mode}) ready")
        work = scratch / "runs"
        work.mkdir()
        bench = Bench(plan, project, package, ls.endpoint, work, faultproxy)
        results: dict[str, Any] = {
            "plan": asdict(plan),
            "contenders": {k: LABELS[k] for k in CONTENDERS},
            "machine": machine(bench, ls.endpoint),
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "package": package,
        }
        bench.measure_cpu_handler()
        results["cpu_handler_seconds"] = bench.cpu_seconds
        log("emulator ceiling (raw batched loop)")
        ceiling_runs = bench.measure_ceiling()
        if not bench.ceiling:
            raise SystemExit(f"the raw loop could not run: {ceiling_runs}")
        bench.raw_cpu_ms = report.raw_cpu_ms({"ceiling": {"runs": ceiling_runs}})
        runs: list[dict[str, Any]] = []
        turn = 0
        passes = [(added, plan.handlers) for added in latencies]
        if plan.spread and SPREAD not in latencies and len(latencies) > 1:
            passes.append((SPREAD, plan.spread))
        results["added_latencies"] = [latency_label(a) for a, _ in passes]
        # The handlers each latency ran (the spread's pass runs some of them).
        results["latency_handlers"] = {latency_label(a): list(h) for a, h in passes}
        for added, handlers in passes:
            bench.added = added
            log(f"round trip added to every SQS request: {latency_label(added)} ms")
            scenarios = [(h, c, i == 0) for h in handlers for i, c in enumerate(plan.concurrencies)]
            if plan.default_concurrency is not None and "noop" in handlers:
                scenarios.append(("noop", plan.default_concurrency, False))
            for handler, concurrency, first in scenarios:
                # The hand-written loop has one speed: run it with the first concurrency. The
                # template's default concurrency is a row for the worker alone.
                names = tuple(c for c in contenders if c != "handloop" or first)
                if concurrency not in plan.concurrencies:
                    names = tuple(c for c in names if c in GENERATED)
                # The CPU target's floor: the raw loop takes its turn in the same rotation, at the
                # same added latency, as the row of this concurrency (not a contender: the report
                # compares every row of the scenario with it, and lists it nowhere else).
                if handler == "noop" and concurrency in report.CPU_VS_RAW_AT:
                    names += ("raw",)
                for contender in rotation(names, turn):
                    if contender == "raw":
                        row = bench.raw(RAW_BESIDE, concurrency)
                    else:
                        row = bench.throughput(contender, handler, 1 if contender == "handloop" else concurrency)
                    runs.append(row)
                    log(f"+{row['added_ms']:>2} ms " + describe(row, bench.raw_cpu_ms))
                turn += 1
        bench.added = (0.0, 0.0)  # the other measurements are at the emulator's own latency
        if plan.name == "full":
            log("emulator ceiling again (the best of both counts)")
            ceiling_runs += bench.measure_ceiling()
            for row in runs:
                if row.get("throughput") is not None and row["contender"] != "raw":  # the floor has no ideal
                    row["ideal"] = bench.ideal(row["handler"], row["concurrency"])
                    row["efficiency"] = row["throughput"] / row["ideal"]
        results["ceiling"] = {"messages_per_second": bench.ceiling, "runs": ceiling_runs}
        results["runs"] = runs
        # Every row's CPU per message over the raw loop's, measured in this run (beside the row
        # where it ran in its scenario, else the ceiling's): report.cpu_vs_raw says why.
        results["ceiling"]["cpu_ms_per_message"] = report.raw_cpu_ms(results)
        for row in runs + ceiling_runs:
            row["cpu_vs_raw"] = report.cpu_vs_raw(row, results)
        results["idle"] = []
        results["memory"] = []
        results["drain"] = []
        results["kill"] = []
        for contender in rotation(contenders, turn):
            results["idle"].append(bench.idle(contender))
            log(f"idle {contender}: {results['idle'][-1]}")
        for contender in rotation(contenders, turn + 1):
            results["memory"].append(bench.loaded_memory(contender))
            log(f"memory {contender}: {results['memory'][-1]}")
        for contender in rotation(contenders, turn + 2):
            results["drain"].append(bench.drain(contender))
            log(f"drain {contender}: {results['drain'][-1]}")
        for contender in rotation(contenders, turn + 3):
            results["kill"].append(bench.drain(contender, kill=True))
            log(f"kill {contender}: {results['kill'][-1]}")
        results["targets"] = report.targets(results)
        results["profiles"] = []
        if plan.profile:
            for handler, concurrency in profile_cases(results, plan):
                log(f"profiling the generated worker: {handler} at concurrency {concurrency}")
                results["profiles"].append(bench.profile(handler, concurrency, 10.0 if plan.name == "full" else 5.0))
        results["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        results["duration_seconds"] = round(time.monotonic() - started, 1)
        scrub(results, [str(scratch), str(project), str(ROOT), str(Path.home()), tempfile.gettempdir()])
        out.mkdir(parents=True, exist_ok=True)
        report.keep_previous(out, plan.name)
        (out / "benchmarks.json").write_text(json.dumps(results, indent=1) + "\n")
        report.write(results, out)
    return results


def profile_cases(results: dict[str, Any], plan: Plan) -> list[tuple[str, int]]:
    """Concurrency 1 and saturation (where CPU per message and requests per message are
    measured), and the I/O case the generated worker fell furthest short in at the
    emulator's latency (profiles run there), if it fell short."""
    cases = [("noop", 1), ("noop", 10 if 10 in plan.concurrencies else plan.concurrencies[-1])]
    worst = min(
        (
            r
            for r in results["runs"]
            if r["contender"] == "generated"
            and r["handler"] in IO_HANDLERS
            and r.get("efficiency")
            and r["added_ms"] == "0"
        ),
        key=lambda r: r["efficiency"],
        default=None,
    )
    if worst is not None and worst["efficiency"] < 0.9:
        cases.append((worst["handler"], worst["concurrency"]))
    return cases


def scrub(value: Any, prefixes: list[str]) -> Any:
    """Replace this machine's paths in error texts with neutral names."""
    if isinstance(value, dict):
        for k, v in value.items():
            value[k] = scrub(v, prefixes)
        return value
    if isinstance(value, list):
        return [scrub(v, prefixes) for v in value]
    if isinstance(value, str):
        for prefix in sorted(prefixes, key=len, reverse=True):
            value = value.replace(prefix, "<local>")
        return value
    return value


def describe(row: dict[str, Any], raw_cpu_ms: float | None = None) -> str:
    head = f"{row['handler']:>8} c={row['concurrency']:<3} {row['contender']:<10}"
    if "error" in row:
        return f"{head} ERROR {row['error'][:300]}"
    eff = f" eff {row['efficiency']:.2f}" if row.get("efficiency") is not None else ""
    # The ceiling's figure: the raw loop run beside a row may not have had its turn yet.
    ratio = f" ({row['cpu_ms_per_message'] / raw_cpu_ms:.2f}x the ceiling's raw loop)" if raw_cpu_ms else ""
    return (
        f"{head} {row['throughput']:8.1f} msg/s{eff}  {row['requests_per_message']:.3f} req/msg  "
        f"{row['cpu_ms_per_message']:.3f} ms CPU/msg{ratio}  ({row['messages']} in {row['window_seconds']} s)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="a small run: fewer scenarios, shorter windows")
    mode.add_argument("--smoke", action="store_true", help="tiny counts: checks the harness, not the figures")
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="where the report goes (default: docs/)")
    parser.add_argument("--project", type=Path, help="an already baked and installed service to use")
    parser.add_argument(
        "--contenders", default=",".join(CONTENDERS), help="comma-separated subset (the report expects all)"
    )
    parser.add_argument(
        "--added-latency",
        type=parse_latency,
        default=(0.02, 0.02),
        metavar="MS",
        help="round trip added to every SQS request in the second pass: 20 (default) or a spread, 10-40; 0: one pass",
    )
    args = parser.parse_args(argv)
    chosen = tuple(c for c in args.contenders.split(",") if c)
    unknown = set(chosen) - set(CONTENDERS)
    if unknown:
        parser.error(f"unknown contender(s) {', '.join(sorted(unknown))}; choose from {', '.join(CONTENDERS)}")
    plan = PLANS["smoke" if args.smoke else "quick" if args.quick else "full"]
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    # Each run ends by killing its contender mid-request: the proxy's server would log
    # every one of those dropped connections as an error.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)

    def log(text: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {text}", flush=True)

    latencies = ((0.0, 0.0), args.added_latency) if args.added_latency[1] > 0 else ((0.0, 0.0),)
    results = run(plan, args.out, args.project.resolve() if args.project else None, log, chosen, latencies)
    log(f"done in {results['duration_seconds']:.0f} s: {args.out / 'benchmarks.md'}")
    for target in results["targets"]:
        verdict = {True: "met    ", False: "NOT MET", None: "n/a    "}[target["met"]]
        log(f"{verdict} {target['name']}: {target['figure']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
