"""Self-benchmark: this worker against the emulator's own ceiling, on LocalStack.

    make bench                                 # or: uv run python scripts/bench.py
    uv run python scripts/bench.py --quick     # shorter windows
    uv run python scripts/bench.py --json out.json

LocalStack is found or started as the tests do (tests/localstack.py) and stopped if it was
started here. Every SQS request goes through tests/faultproxy.py, which counts them by
operation: no figure comes from the worker's own metrics. Figures:

- ceiling: a raw batched loop (receive 10, DeleteMessageBatch, nothing else) through the
  same proxy: the most messages per second this emulator hands out on this machine;
- throughput, and efficiency = achieved / min(concurrency / handler latency, ceiling), for
  a no-op and a 100 ms handler at concurrency 10 and 100;
- SQS requests per message at saturation (0.2 is the floor: a receive and a delete batch
  per 10 messages);
- requests per minute with an empty queue, per poller;
- drain: seconds from SIGTERM to exit when idle, and with jobs in flight (and after the
  last job ended, which is what the drain itself costs).

The worker runs as `python -m <package> run` with this file as its handler module
(WORKER_HANDLERS=bench:router); each measurement uses a fresh queue.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3

from {{ cookiecutter.package_name }}.runtime import Job, Router

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.faultproxy import FaultProxy  # noqa: E402 - the project root, on the path above
from tests.localstack import ensure  # noqa: E402

PACKAGE = Router.__module__.split(".")[0]
REGION = os.environ.get("AWS_REGION", "us-east-1")
RECORD = "{:>12} {:17.6f}\n"  # one completed message: its id and the time it finished
RECORD_BYTES = 31

# -- the handler, when the worker imports this module -----------------------------------

router = Router()
_QUEUE = os.environ.get("BENCH_QUEUE")
_SLEEP = float(os.environ.get("BENCH_SLEEP_MS", "0")) / 1000
_LOG = os.environ.get("BENCH_LOG")
_FD = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if _LOG else -1


def record(message_id: str) -> None:
    # One short write to an O_APPEND file is atomic: no lock between threads or processes.
    os.write(_FD, RECORD.format(message_id, time.time()).encode())


if _QUEUE:

    @router.handler(_QUEUE, payload=str)
    async def handle(job: Job[str]) -> None:
        if _SLEEP:
            await asyncio.sleep(_SLEEP)
        record(json.loads(job.payload)["id"])


# -- the raw loop (the ceiling), run as its own processes -------------------------------


def raw_loop(threads: int) -> None:
    """Receive 10, DeleteMessageBatch them, in `threads` threads, until SIGTERM."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    url = os.environ["BENCH_QUEUE_URL"]
    clients = [boto3.client("sqs") for _ in range(threads)]  # not thread-safe to create

    def loop(sqs: Any) -> None:
        while not stop.is_set():
            resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
            messages = resp.get("Messages", [])
            if not messages:
                continue
            for message in messages:
                record(json.loads(message["Body"])["id"])
            entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
            sqs.delete_message_batch(QueueUrl=url, Entries=entries)

    workers = [threading.Thread(target=loop, args=(c,)) for c in clients]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


# -- measuring ---------------------------------------------------------------------------


class BenchError(RuntimeError):
    pass


class Procs:
    """The processes of one measurement (the worker, or the raw loop's processes)."""

    def __init__(self, procs: list[subprocess.Popen[bytes]], log: Path, out: Path) -> None:
        self.procs = procs
        self.log = log
        self.out = out

    def done(self) -> int:
        with contextlib.suppress(FileNotFoundError):
            return self.log.stat().st_size // RECORD_BYTES
        return 0

    def times(self) -> list[float]:
        if not self.log.exists():
            return []
        return [float(line.split()[1]) for line in self.log.read_text().splitlines() if line.strip()]

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def stop(self, timeout: float) -> float | None:
        """SIGTERM; seconds until every process exited, or None if they had to be killed."""
        sent = time.monotonic()
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        while time.monotonic() - sent < timeout:
            if not any(p.poll() is None for p in self.procs):
                return time.monotonic() - sent
            time.sleep(0.005)
        self.kill()
        return None

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)

    def wait_for(self, what: str, check: Callable[[], bool], timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if not self.alive():
                tail = self.out.read_text(errors="replace")[-1500:]
                raise BenchError(f"the process exited while waiting for {what}:\n{tail}")
            if time.monotonic() > deadline:
                raise BenchError(f"no {what} after {timeout:.0f} s")
            time.sleep(0.02)


def aligned_rate(times: list[float], start: float, end: float, waves: tuple[int, ...]) -> float | None:
    """Messages per second between completions of the same rank in their wave.

    Jobs that start together end together; a fixed window catches a whole number of waves,
    plus or minus one. Timing the k-th and the (k+m)-th completion, m a multiple of the
    wave size, measures whole waves; for a steady stream it is the plain rate.
    """
    inside = sorted(t for t in times if start <= t <= end)
    for wave in waves:  # the largest wave size that fits the window at least once
        m = (len(inside) - 1) // wave * wave
        if m >= wave and inside[m] > inside[0]:
            return m / (inside[m] - inside[0])
    return None


class Bench:
    def __init__(self, endpoint: str, work: Path, window: float, idle_window: float) -> None:
        self.endpoint = endpoint
        self.work = work
        self.window = window
        self.idle_window = idle_window
        self.runs = 0
        self.sqs = boto3.client(
            "sqs",
            endpoint_url=endpoint,
            region_name=REGION,
            aws_access_key_id="test",
            aws_secret_access_key="test",  # noqa: S106 - LocalStack takes any credentials
        )

    def queue(self, visibility: int = 30) -> tuple[str, str]:
        name = f"bench-{uuid.uuid4().hex[:12]}"
        url = self.sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": str(visibility)})["QueueUrl"]
        return name, url

    def seed(self, url: str, count: int) -> None:
        """Enqueue straight to LocalStack, before the worker starts: it costs the worker nothing."""

        def send(start: int) -> None:
            ids = range(start, min(start + 10, count))
            entries = [{"Id": str(i), "MessageBody": json.dumps({"id": f"{i:012d}"})} for i in ids]
            if self.sqs.send_message_batch(QueueUrl=url, Entries=entries).get("Failed"):  # type: ignore[arg-type]
                raise BenchError("could not enqueue")

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(send, range(0, count, 10)))

    def env(self, proxy: FaultProxy, queue: tuple[str, str], log: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKER_", "BENCH_", "AWS_"))}
        env.update(
            AWS_ENDPOINT_URL=proxy.url,
            AWS_REGION=REGION,
            AWS_DEFAULT_REGION=REGION,  # the name boto3 reads
            AWS_ACCESS_KEY_ID="test",
            AWS_SECRET_ACCESS_KEY="test",  # noqa: S106 - LocalStack takes any credentials
            BENCH_QUEUE=queue[0],
            BENCH_QUEUE_URL=queue[1],
            BENCH_LOG=str(log),
        )
        return env

    def start_worker(
        self, proxy: FaultProxy, queue: tuple[str, str], concurrency: int, sleep_ms: int, visibility: int = 30
    ) -> Procs:
        self.runs += 1
        log, out = self.work / f"{self.runs}.done", self.work / f"{self.runs}.log"
        env = self.env(proxy, queue, log)
        env.update(
            PYTHONPATH=str(ROOT / "scripts"),
            BENCH_SLEEP_MS=str(sleep_ms),
            WORKER_QUEUES=queue[0],
            WORKER_HANDLERS="bench:router",
            WORKER_CONCURRENCY=str(concurrency),
            WORKER_VISIBILITY_TIMEOUT_SECONDS=str(visibility),
            WORKER_METRICS_PORT="0",
            WORKER_HEALTH_FILE=str(self.work / f"{self.runs}.progress"),
        )
        with open(out, "wb") as sink:
            cmd = [sys.executable, "-m", PACKAGE, "run"]
            proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT)  # noqa: S603
        return Procs([proc], log, out)

    def start_raw(self, proxy: FaultProxy, queue: tuple[str, str], processes: int, threads: int) -> Procs:
        self.runs += 1
        log, out = self.work / f"{self.runs}.done", self.work / f"{self.runs}.log"
        env = self.env(proxy, queue, log)
        cmd = [sys.executable, __file__, "--raw-loop", str(threads)]
        with open(out, "wb") as sink:
            procs = [
                subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT)  # noqa: S603
                for _ in range(processes)
            ]
        return Procs(procs, log, out)

    def saturate(self, rate: float, concurrency: int, start: Callable[..., Procs]) -> dict[str, Any]:
        """Seed enough for the window, start, warm up, measure; rate is what to plan for."""
        reserve = 2 * concurrency + 20
        count = min(40_000, math.ceil(rate * (self.window + 1) * 1.3) + reserve)
        queue = self.queue()
        self.seed(queue[1], count)
        proxy = FaultProxy(self.endpoint).start()
        procs = start(proxy, queue)
        try:
            procs.wait_for("first message", lambda: procs.done() >= 1)
            warm = time.monotonic() + 1.0
            procs.wait_for("warm-up", lambda: time.monotonic() >= warm or procs.done() >= count - reserve)
            t0, w0, d0, r0 = time.monotonic(), time.time(), procs.done(), Counter(proxy.counts)
            end = t0 + self.window
            procs.wait_for("the window", lambda: time.monotonic() >= end or procs.done() >= count - reserve)
            t1, w1, d1, r1 = time.monotonic(), time.time(), procs.done(), Counter(proxy.counts)
        finally:
            procs.kill()
            proxy.stop()
            self.sqs.delete_queue(QueueUrl=queue[1])
        done = d1 - d0
        if done <= 0:
            raise BenchError("nothing completed in the window")
        requests = r1 - r0
        waves = (math.lcm(concurrency, 10), concurrency, 1)
        rate_aligned = aligned_rate(procs.times(), w0, w1, waves)
        return {
            "messages": done,
            "seconds": round(t1 - t0, 3),
            "throughput": rate_aligned or done / (t1 - t0),
            "requests_per_message": sum(requests.values()) / done,
            "requests": dict(requests),
        }

    def ceiling(self) -> dict[str, Any]:
        """The best of a few raw-loop shapes (threads in one process share one GIL)."""
        best: dict[str, Any] = {}
        for processes, threads in ((1, 8), (3, 6)):
            result = self.saturate(
                6000, processes * threads, lambda p, q, n=processes, t=threads: self.start_raw(p, q, n, t)
            )
            result.update(processes=processes, threads=threads)
            if result["throughput"] > best.get("throughput", 0):
                best = result
        return best

    def throughput(self, concurrency: int, sleep_ms: int, ceiling: float) -> dict[str, Any]:
        ideal = min(concurrency / (sleep_ms / 1000), ceiling) if sleep_ms else ceiling
        result = self.saturate(ideal, concurrency, lambda p, q: self.start_worker(p, q, concurrency, sleep_ms))
        result.update(concurrency=concurrency, sleep_ms=sleep_ms, ideal=ideal)
        result["efficiency"] = result["throughput"] / ideal
        return result

    def idle(self, concurrency: int = 10) -> dict[str, Any]:
        """Empty queue: requests per minute; then SIGTERM and the seconds to exit."""
        queue = self.queue()
        proxy = FaultProxy(self.endpoint).start()
        procs = self.start_worker(proxy, queue, concurrency, 0)
        try:
            procs.wait_for("a first receive", lambda: proxy.counts["ReceiveMessage"] >= 1)
            time.sleep(2)  # start-up calls are over once it polls
            t0, r0 = time.monotonic(), Counter(proxy.counts)
            time.sleep(self.idle_window)
            t1, r1 = time.monotonic(), Counter(proxy.counts)
            drain = procs.stop(60)
        finally:
            procs.kill()
            proxy.stop()
            self.sqs.delete_queue(QueueUrl=queue[1])
        requests = r1 - r0
        per_minute = sum(requests.values()) / ((t1 - t0) / 60)
        pollers = math.ceil(concurrency / 10)
        return {
            "concurrency": concurrency,
            "pollers": pollers,
            "requests": dict(requests),
            "requests_per_minute": per_minute,
            "requests_per_minute_per_poller": per_minute / pollers,
            "drain_seconds": drain,
        }

    def drain(self, concurrency: int = 10, sleep_ms: int = 2000) -> dict[str, Any]:
        """SIGTERM with jobs half-way: seconds to exit, and after the last job ended."""
        queue = self.queue(visibility=10)
        self.seed(queue[1], concurrency * 5)
        proxy = FaultProxy(self.endpoint).start()
        procs = self.start_worker(proxy, queue, concurrency, sleep_ms, visibility=10)
        try:
            procs.wait_for("a first wave", lambda: procs.done() >= concurrency)
            time.sleep(sleep_ms / 2000)
            signalled = time.time()
            drain = procs.stop(120)
            exited = time.time()
            hidden = self.sqs.get_queue_attributes(
                QueueUrl=queue[1], AttributeNames=["ApproximateNumberOfMessagesNotVisible"]
            )["Attributes"]["ApproximateNumberOfMessagesNotVisible"]
        finally:
            procs.kill()
            proxy.stop()
            self.sqs.delete_queue(QueueUrl=queue[1])
        last = max(procs.times(), default=signalled)
        return {
            "concurrency": concurrency,
            "sleep_ms": sleep_ms,
            "drain_seconds": drain,
            "after_last_job_seconds": exited - max(signalled, last),
            "left_in_flight": int(hidden),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter windows (a rougher figure)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--raw-loop", type=int, metavar="THREADS", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.raw_loop:
        raw_loop(args.raw_loop)
        return 0
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    # Each measurement ends by killing the worker mid-request; the proxy would log every
    # dropped connection as an error.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    window, idle_window = (3.0, 20.0) if args.quick else (8.0, 60.0)
    ls = ensure()
    print(f"LocalStack ({ls.mode}) at {ls.endpoint}", file=sys.stderr)
    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-") as work:
            bench = Bench(ls.endpoint, Path(work), window, idle_window)
            results["ceiling"] = bench.ceiling()
            ceiling = results["ceiling"]["throughput"]
            print(f"emulator ceiling (raw batched loop): {ceiling:,.0f} msg/s")
            results["throughput"] = []
            for sleep_ms in (0, 100):
                for concurrency in (10, 100):
                    r = bench.throughput(concurrency, sleep_ms, ceiling)
                    results["throughput"].append(r)
                    handler = f"{sleep_ms} ms handler" if sleep_ms else "no-op handler"
                    print(
                        f"{handler:>15}, concurrency {concurrency:>3}: {r['throughput']:8,.1f} msg/s, "
                        f"efficiency {r['efficiency']:.2f}, {r['requests_per_message']:.3f} SQS requests/message"
                    )
            idle = results["idle"] = bench.idle()
            print(
                f"idle: {idle['requests_per_minute']:.1f} requests/min, "
                f"{idle['requests_per_minute_per_poller']:.1f} per poller ({idle['requests']})"
            )
            drain = idle["drain_seconds"]
            print(f"idle drain: {'killed' if drain is None else f'{drain:.2f} s'}")
            busy = results["drain"] = bench.drain()
            took = busy["drain_seconds"]
            print(
                f"drain with {busy['concurrency']} jobs in flight: "
                f"{'killed' if took is None else f'{took:.2f} s'} from SIGTERM to exit, "
                f"{busy['after_last_job_seconds']:.2f} s after the last job; "
                f"{busy['left_in_flight']} message(s) left in flight"
            )
    finally:
        ls.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
