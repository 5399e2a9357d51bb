"""The measuring harness: fresh queues seeded straight to LocalStack, each contender started
as its own process behind the counting proxy (the environment each one reads), snapshots of
its completions, requests and CPU, and its throughput in one scenario, after a warm-up, over
a window, between waves of completions (processes.aligned_rate). The raw batched loop's runs
give the emulator's ceiling, which every ideal is capped by, and the CPU floor."""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from common import parse_handler  # bench/contenders/, on the path with this package

from measuring import CONTENDERS_DIR
from measuring.plan import GENERATED, RAW_BESIDE, REGION, Plan, latency_label
from measuring.processes import (
    Proc,
    RunError,
    Snapshot,
    aligned_rate,
    completions,
    counting_proxy,
    machine_busy,
    read_completions,
)


class Bench:
    """The harness a run measures with: fresh queues on LocalStack, seeded straight to it;
    each contender started as its own process behind a counting proxy; snapshots of what it
    did; and its throughput in a scenario, against the raw batched loop's ceiling."""

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
