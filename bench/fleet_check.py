"""The fleet simulator checked once against reality: one small shape run with real worker
processes against LocalStack, then the same shape in the simulator, and the two compared.

The real run: a producer sends the shape's messages (the simulator's own arrivals, same
seed) to a queue of its own on LocalStack; an autoscaler every 15 s reads LocalStack's
counts and decides with the simulator's HPA and KEDA code (fleet/autoscalers/hpa.py and
keda.py), starting worker processes (`python bench/fleet_service.py run`, after a start
delay) and stopping the newest with SIGTERM (SIGKILL after the grace period). Each
completion is one line in a file. The simulated run: the same fleet on virtual time, with
LocalStack's round trip, counts that do not lag (LocalStack's are exact) and the start
latency the real processes showed. Compared minute by minute: completions and replicas.

    .venv/bin/python bench/fleet_check.py              # about 20 minutes; writes docs/scaling-localstack.json
    .venv/bin/python bench/fleet_check.py --minutes 8  # a shorter shape

It uses the LocalStack AWS_ENDPOINT_URL names, or the one on 127.0.0.1:4566 (it never stops
it); its queues are its own and deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from sqs_worker_engine.doubles import emulators
from sqs_worker_engine.fleet.autoscalers.deployfiles import Bake, Deployment, Policy, Rules, ScaledObject, SqsTrigger
from sqs_worker_engine.fleet.autoscalers.deployfiles import Worker as WorkerSpec
from sqs_worker_engine.fleet.autoscalers.hpa import SYNC_SECONDS, Hpa, proposal
from sqs_worker_engine.fleet.autoscalers.keda import queue_length
from sqs_worker_engine.fleet.load.traffic import Shape, Spike, arrivals
from sqs_worker_engine.fleet.load.work import Durations
from sqs_worker_engine.fleet.simulation import simulate
from sqs_worker_engine.fleet.sizing import Options, Run

ROOT = Path(__file__).resolve().parent.parent
CONCURRENCY = 4
MAX_REPLICAS = 4
JOB_SECONDS = 2.0
START_DELAY = 5.0  # scheduling and image pull, before the process itself starts
GRACE = 30.0
SHUTDOWN_MS = 20_000
VISIBILITY = 30
UP = Rules(0, "Max", (Policy("Percent", 100, 30), Policy("Pods", 4, 30)))
# A shorter scale-down window than the template's 300 s, so that scale-in shows within the run.
DOWN = Rules(120, "Min", (Policy("Pods", 1, 60),))
SEED = 7
TOLERANCE = 0.10  # the target: within 10% on completions over time and on replicas


def shape(minutes: float) -> Shape:
    seconds = minutes * 60
    return Shape(
        "check",
        "15% of capacity, 5x that for a third of the run, 15% again",
        seconds,
        Spike(0.15, 5.0, seconds * 0.2, seconds / 3),
    )


def env(endpoint: str, queue: str, completions: Path, port: int) -> dict[str, str]:
    return {
        **os.environ,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "WORKER_QUEUES": queue,
        "WORKER_CONCURRENCY": str(CONCURRENCY),
        "WORKER_JOB_TIMEOUT_MS": "15000",
        "WORKER_SHUTDOWN_TIMEOUT_MS": str(SHUTDOWN_MS),
        "WORKER_VISIBILITY_TIMEOUT_SECONDS": str(VISIBILITY),
        "WORKER_MAX_RECEIVE_COUNT": "5",
        "WORKER_METRICS_HOST": "127.0.0.1",
        "WORKER_METRICS_PORT": str(port),
        "WORKER_HEALTH_FILE": str(completions.parent / f"health-{port}"),
        "LOG_LEVEL": "WARNING",
        "OTEL_TRACES_EXPORTER": "none",  # the SDK is installed here; nothing collects
        "FLEET_COMPLETIONS": str(completions),
        "PYTHONPATH": str(ROOT / "bench"),
    }


@dataclass(eq=False)
class Pod:
    created: float
    process: subprocess.Popen[bytes] | None = None
    port: int = 0
    ready: float | None = None
    term: float | None = None
    ended: float | None = None


@dataclass
class Fleet:
    """Worker processes as a Deployment's pods: started after START_DELAY, scaled in newest
    first with SIGTERM, SIGKILLed after the grace period."""

    endpoint: str
    queue: str
    completions: Path
    logs: Path
    pods: list[Pod] = field(default_factory=list)
    desired: int = 1
    lock: threading.Lock = field(default_factory=threading.Lock)

    def alive(self) -> list[Pod]:
        return [p for p in self.pods if p.ended is None]

    def scale_to(self, desired: int) -> None:
        with self.lock:
            self.desired = desired
            active = [p for p in self.alive() if p.term is None]
            for _ in range(desired - len(active)):
                pod = Pod(time.time())
                self.pods.append(pod)
                threading.Timer(START_DELAY, self._start, (pod,)).start()
            for pod in sorted(active, key=lambda p: -p.created)[: max(0, len(active) - desired)]:
                self._terminate(pod)

    def _start(self, pod: Pod) -> None:
        with self.lock:
            if pod.term is not None:
                pod.ended = time.time()
                return
            pod.port = emulators.free_port()
            with open(self.logs / f"worker-{pod.port}.log", "ab") as log:
                pod.process = subprocess.Popen(
                    [sys.executable, str(ROOT / "bench" / "fleet_service.py"), "run"],
                    env=env(self.endpoint, self.queue, self.completions, pod.port),
                    stdout=log,
                    stderr=log,
                )

    def _terminate(self, pod: Pod) -> None:
        pod.term = time.time()
        if pod.process is not None:  # not started yet: _start sees the term and never starts it
            pod.process.send_signal(signal.SIGTERM)
            threading.Timer(GRACE, self._kill, (pod,)).start()

    @staticmethod
    def _kill(pod: Pod) -> None:
        if pod.process is not None and pod.process.poll() is None:
            pod.process.kill()

    def watch(self) -> None:
        """Once a second: which pods answer /livez (ready), which exited."""
        now = time.time()
        with self.lock:
            for pod in self.alive():
                if pod.process is None:
                    continue
                if pod.process.poll() is not None:
                    pod.ended = now
                elif pod.ready is None and _answers(pod.port):
                    pod.ready = now

    def stop(self) -> None:
        with self.lock:
            for pod in self.alive():
                if pod.process is not None and pod.process.poll() is None:
                    pod.process.send_signal(signal.SIGTERM)
        for pod in self.pods:
            if pod.process is not None:
                try:
                    pod.process.wait(GRACE)
                except subprocess.TimeoutExpired:
                    pod.process.kill()


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def create_queue(sqs: Any) -> tuple[str, str, str]:
    """A queue of the run's own, and its DLQ after 5 receives: its name, its URL, the DLQ's."""
    queue = f"fleet-check-{uuid.uuid4().hex[:8]}"
    dlq_url = sqs.create_queue(QueueName=queue + "-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(
        QueueName=queue,
        Attributes={
            "VisibilityTimeout": str(VISIBILITY),
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5"}),
        },
    )["QueueUrl"]
    return queue, url, dlq_url


def autoscale(sqs: Any, url: str, fleet: Fleet, t0: float, done: threading.Event) -> None:
    """KEDA's aws-sqs-queue scaler and the HPA, as the simulator has them, until `done`:
    every sync LocalStack's counts, read as the scaler reads SQS's, decide the fleet's size."""
    hpa = Hpa(1, MAX_REPLICAS, UP, DOWN)
    trigger = SqsTrigger(queue_length=2 * CONCURRENCY, in_flight=True)
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    while not done.is_set():
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        value = queue_length({k: int(v) for k, v in attrs.items()}, trigger)
        fleet.scale_to(
            hpa.decide(time.time() - t0, [proposal(value, trigger.queue_length, fleet.desired)], fleet.desired)
        )
        done.wait(SYNC_SECONDS)


def real_run(endpoint: str, minutes: float, workdir: Path) -> dict[str, Any]:
    # LocalStack takes any credentials; never real ones.
    sqs = boto3.client(
        "sqs", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test"
    )
    queue, url, dlq_url = create_queue(sqs)
    completions = workdir / "completions.log"
    completions.touch()
    fleet = Fleet(endpoint, queue, completions, workdir)
    the_shape = shape(minutes)
    capacity = MAX_REPLICAS * CONCURRENCY / JOB_SECONDS
    durations, rng = Durations(JOB_SECONDS, longest=13.5), random.Random(SEED)
    sent: list[float] = []
    samples: list[tuple[float, int, int, int]] = []  # (t, pods alive, ready, desired)
    done = threading.Event()

    fleet.scale_to(1)
    while not any(p.ready for p in fleet.pods):
        time.sleep(0.5)
        fleet.watch()
    t0 = time.time()

    def produce() -> None:
        number = 0
        for at, groups in arrivals(the_shape, capacity, 1, SEED):
            delay = t0 + at - time.time()
            if delay > 0:
                time.sleep(delay)
            entries = []
            for _ in groups:
                number += 1
                body = {"id": f"m{number}", "seconds": round(durations.total(rng, 1), 3)}
                entries.append({"Id": str(len(entries)), "MessageBody": json.dumps(body)})
            for i in range(0, len(entries), 10):
                sqs.send_message_batch(QueueUrl=url, Entries=entries[i : i + 10])
                sent.extend([time.time() - t0] * len(entries[i : i + 10]))

    def sample() -> None:
        while not done.is_set():
            fleet.watch()
            alive = fleet.alive()
            samples.append(
                (time.time() - t0, len(alive), sum(1 for p in alive if p.ready and p.term is None), fleet.desired)
            )
            done.wait(1.0)

    threads = [
        threading.Thread(target=produce, daemon=True),
        threading.Thread(target=autoscale, args=(sqs, url, fleet, t0, done), daemon=True),
        threading.Thread(target=sample, daemon=True),
    ]
    for thread in threads:
        thread.start()
    threads[0].join()
    deadline = time.time() + 600
    while time.time() < deadline and len(completions.read_text().splitlines()) < len(sent):
        time.sleep(2)
    end = time.time() - t0
    done.set()
    for thread in threads[1:]:
        thread.join()
    fleet.stop()
    for queue_url in (url, dlq_url):
        sqs.delete_queue(QueueUrl=queue_url)
    lines = [line.split() for line in completions.read_text().splitlines() if line.strip()]
    ids = [line[1] for line in lines]
    starts = [p.ready - p.created - START_DELAY for p in fleet.pods if p.ready is not None and p.process is not None]
    return {
        "sent": len(sent),
        "completed": len(set(ids)),
        "duplicates": len(ids) - len(set(ids)),
        "completion_times": sorted(float(line[0]) - t0 for line in lines),
        "samples": samples,
        "seconds": end,
        "process_start_seconds": round(sum(starts) / len(starts), 2) if starts else 0.0,
        "pods_started": sum(1 for p in fleet.pods if p.process is not None),
    }


def simulated_run(minutes: float, process_start: float) -> dict[str, Any]:
    worker = WorkerSpec(
        {
            "WORKER_QUEUES": "fleet-check",
            "WORKER_CONCURRENCY": str(CONCURRENCY),
            "WORKER_JOB_TIMEOUT_MS": "15000",
            "WORKER_SHUTDOWN_TIMEOUT_MS": str(SHUTDOWN_MS),
            "WORKER_VISIBILITY_TIMEOUT_SECONDS": str(VISIBILITY),
            "WORKER_MAX_RECEIVE_COUNT": "5",
        },
        GRACE,
    )
    scaling = ScaledObject(1, MAX_REPLICAS, 15, 300, UP, DOWN, SqsTrigger(2 * CONCURRENCY, 0, True), None)
    bake = Bake(kubernetes=Deployment(worker, 0, 1, scaling))
    options = Options(
        scale=1,
        job_seconds=JOB_SECONDS,
        start_seconds=START_DELAY + process_start,
        count_lag=0.0,  # LocalStack's counts are exact
        sqs_latency=0.005,  # LocalStack on this machine answers in a few milliseconds
        seed=SEED,
    )
    logging.getLogger("sqs_worker_engine").setLevel(logging.CRITICAL)
    result = simulate(Run(shape(minutes), "kubernetes", bake, options))
    series = result.pop("series")
    return {"figures": result, "series": [(s.t, s.pods, s.ready, s.desired, s.completed) for s in series]}


def per_minute(times: list[float], minutes: int) -> list[int]:
    counts = [0] * minutes
    for t in times:
        if 0 <= t < minutes * 60:
            counts[int(t // 60)] += 1
    return counts


def compare(real: dict[str, Any], sim: dict[str, Any], minutes: float) -> dict[str, Any]:
    whole = int(minutes)
    real_done = per_minute(real["completion_times"], whole)
    series = sim["series"]
    sim_cumulative = [max((s[4] for s in series if s[0] < (m + 1) * 60), default=0) for m in range(whole)]
    sim_done = [b - a for a, b in zip([0, *sim_cumulative], sim_cumulative, strict=False)]
    real_cumulative = [sum(real_done[: m + 1]) for m in range(whole)]
    real_pods = [_mean([s[1] for s in real["samples"] if m * 60 <= s[0] < (m + 1) * 60]) for m in range(whole)]
    sim_pods = [_mean([s[1] for s in series if m * 60 <= s[0] < (m + 1) * 60]) for m in range(whole)]
    gap = [abs(a - b) / a for a, b in zip(real_cumulative, sim_cumulative, strict=True) if a >= 50]
    per_minute_gap = sum(abs(a - b) for a, b in zip(real_done, sim_done, strict=True)) / max(1, sum(real_done))
    real_replica_minutes, sim_replica_minutes = sum(real_pods), sum(sim_pods)
    return {
        "minutes": whole,
        "completions_per_minute": {"localstack": real_done, "simulated": sim_done},
        "replicas_per_minute": {
            "localstack": [round(x, 2) for x in real_pods],
            "simulated": [round(x, 2) for x in sim_pods],
        },
        "cumulative_completions_largest_gap": round(max(gap, default=0.0), 4),
        "completions_per_minute_gap": round(per_minute_gap, 4),
        "replica_minutes": {"localstack": round(real_replica_minutes, 1), "simulated": round(sim_replica_minutes, 1)},
        "replica_minutes_gap": round(abs(sim_replica_minutes - real_replica_minutes) / real_replica_minutes, 4),
        "within_tolerance": max(gap, default=0.0) <= TOLERANCE
        and per_minute_gap <= TOLERANCE
        and abs(sim_replica_minutes - real_replica_minutes) / real_replica_minutes <= TOLERANCE,
    }


def _mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    args = parser.parse_args(argv)
    endpoint = emulators.ensure(emulator=emulators.LOCALSTACK).endpoint
    with tempfile.TemporaryDirectory(prefix="fleet-check-") as tmp:
        print(f"real run: {args.minutes:g} min against {endpoint}", file=sys.stderr)
        real = real_run(endpoint, args.minutes, Path(tmp))
    print(f"real run done: {real['completed']} of {real['sent']} completed; simulating", file=sys.stderr)
    sim = simulated_run(args.minutes, real["process_start_seconds"])
    comparison = compare(real, sim, args.minutes)
    report = {
        "shape": shape(args.minutes).title,
        "fleet": {
            "concurrency": CONCURRENCY,
            "max_replicas": MAX_REPLICAS,
            "job_seconds": JOB_SECONDS,
            "start_delay_seconds": START_DELAY,
            "process_start_seconds": real["process_start_seconds"],
            "grace_seconds": GRACE,
            "queue_length": 2 * CONCURRENCY,
            "scale_down_window_seconds": DOWN.stabilization,
        },
        "localstack": {k: real[k] for k in ("sent", "completed", "duplicates", "pods_started", "seconds")},
        "simulated": {
            k: sim["figures"][k]
            for k in ("messages", "messages_lost", "duplicate_runs", "replica_minutes", "peak_replicas", "scale_events")
        },
        **comparison,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaling-localstack.json").write_text(json.dumps(report, indent=2) + "\n")
    lists = ("completions_per_minute", "replicas_per_minute")
    print(json.dumps({k: v for k, v in report.items() if k not in lists}, indent=2))
    return 0 if comparison["within_tolerance"] else 1


if __name__ == "__main__":
    sys.exit(main())
