"""Scaffold a service from the template and run it end to end against a local SQS.

    make demo        # or: python scripts/demo.py [--output DIR] [--messages N]

What it shows: the generated project installs; LocalStack starts (Docker if an engine
answers, else LocalStack's runtime on this machine; with SQS_EMULATOR=moto, moto's server
instead); the queue and its DLQ are created;
messages are sent and processed; a SIGTERM arrives while jobs run and the worker drains
them, deletes what it finished and exits 0 with nothing left in flight.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import boto3
from cookiecutter.main import cookiecutter
from sqs_worker_engine.doubles import emulators  # the engine's emulator finder/starter (the suites' too)

ROOT = Path(__file__).resolve().parent.parent


def say(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default=str(ROOT / "demo-output"), help="where to generate the service")
    parser.add_argument("--messages", type=int, default=20, help="messages for the first round")
    args = parser.parse_args()

    out = Path(args.output)
    shutil.rmtree(out, ignore_errors=True)
    say(f"cookiecutter {ROOT.name} --no-input -o {out}")
    project = Path(cookiecutter(str(ROOT), no_input=True, output_dir=str(out)))
    package = project.name.replace("-", "_")
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
    env.pop("VIRTUAL_ENV", None)

    say("make install  (uv sync: the service, the worker engine it runs on, its dev tools)")
    subprocess.run(["make", "install"], cwd=project, env=env, check=True)
    python = str(project / ".venv" / "bin" / "python")

    say(
        "SQS emulator: AWS_ENDPOINT_URL, else LocalStack (a running one, Docker, or its runtime on this machine), "
        "or moto's server with SQS_EMULATOR=moto"
    )
    ls = emulators.ensure()
    print(f"{ls.name} ({ls.mode}) at {ls.endpoint}")
    env["AWS_ENDPOINT_URL"] = ls.endpoint
    env["WORKER_METRICS_HOST"] = "127.0.0.1"
    env["WORKER_HEALTH_FILE"] = str(project / ".demo-progress")
    try:
        return run_demo(python, package, project, env, args.messages)
    finally:
        if ls.started_here:
            say(f"stopping what this demo started: {ls.name}")
            ls.stop()


def run_demo(python: str, package: str, project: Path, env: dict[str, str], count: int) -> int:
    def cli(*argv: str) -> str:
        result = subprocess.run(
            [python, "-m", package, *argv], cwd=project, env=env, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed:\n{result.stderr}")
        return result.stdout.strip()

    say(f"python -m {package} bootstrap  (queue + DLQ with a RedrivePolicy; idempotent)")
    print(cli("bootstrap"))
    config = json.loads(cli("config"))
    region, endpoint, queue = config["aws_region"], env["AWS_ENDPOINT_URL"], config["queues"][0]["name"]
    purge_leftovers(region, endpoint, queue)
    say(f"python -m {package} send --count {count}  (the examples the handler's payload model declares, in turn)")
    print(cli("send", "--count", str(count)))

    say(f"python -m {package} run  (JSON logs, shortened here)")
    worker = subprocess.Popen(
        [python, "-m", package, "run"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    done, stopped = follow(worker)
    wait_until(lambda: len(done) >= count, 120, f"{count} jobs")
    port = config["metrics_port"]
    say(f"curl http://127.0.0.1:{port}/metrics  (the worker's own figures; a few of its series)")
    # A job counts as processed once its delete is sent, a moment after its "task done" line.
    series = f'jobs_processed_total{{outcome="success",queue="{queue}"}}'
    wait_until(lambda: scrape_metrics(port).get(series, 0.0) >= count, 30, "the success counter")
    succeeded = scrape_metrics(port, show=True).get(series, 0.0)
    say(f"all {count} processed; now 6 slower jobs (3 s each), and a SIGTERM while they run")
    slow = json.dumps({"task_id": "slow", "work_ms": 3000})
    say(f"python -m {package} send --count 6 --body '{slow}'")
    print(cli("send", "--count", "6", "--body", slow))
    # SIGTERM once all six run (the worker's own gauge says so), not after a guessed sleep:
    # on a busy machine a fixed pause could let them finish first, or not start yet.
    running = f'worker_inflight_jobs{{queue="{queue}"}}'
    wait_until(lambda: scrape_metrics(port).get(running, 0.0) >= 6, 60, "the 6 slower jobs to run")
    before = len(done)
    print("   (sending SIGTERM to the worker)")
    worker.send_signal(signal.SIGTERM)
    code = worker.wait(120)
    stopped.wait(5)
    finished = len(done) - before
    say(f"worker exited with code {code}; {finished} of 6 running jobs finished during the drain")
    attrs = queue_counts(region, endpoint, queue)
    print(f"   queue {queue}: {attrs['visible']} visible, {attrs['in_flight']} in flight")
    ok = code == 0 and finished == 6 and attrs == {"visible": 0, "in_flight": 0} and succeeded >= count
    say("demo OK: every message processed, nothing stranded" if ok else "demo FAILED")
    return 0 if ok else 1


def purge_leftovers(region: str, endpoint: str, queue: str) -> None:
    """An earlier demo on the same emulator may have left messages: purge them first."""
    leftovers = queue_counts(region, endpoint, queue)
    if not any(leftovers.values()):
        return
    print(f"   (the queue holds {leftovers} from an earlier demo on this emulator: purging it)")
    sqs = local_sqs(region, endpoint)
    sqs.purge_queue(QueueUrl=sqs.get_queue_url(QueueName=queue)["QueueUrl"])
    wait_until(lambda: not any(queue_counts(region, endpoint, queue).values()), 90, "purge")


def follow(worker: subprocess.Popen[str]) -> tuple[list[str], threading.Event]:
    """Print the worker's JSON log lines, shortened, as they come (on a thread of their own):
    the task id of each job done is added to the list, and the event is set once the
    worker says it stopped."""
    done: list[str] = []
    stopped = threading.Event()

    def read() -> None:
        assert worker.stdout is not None
        for line in worker.stdout:
            try:
                record = json.loads(line)
            except ValueError:
                print(f"   {line.rstrip()}")
                continue
            message = record.get("message", "")
            if message == "task done":
                done.append(record.get("task_id", "?"))
            shown = {
                k: record[k] for k in ("task_id", "reason", "drain_seconds", "jobs_cut_off_and_released") if k in record
            }
            print(f"   [{record.get('level', '')}] {message} {json.dumps(shown) if shown else ''}".rstrip(), flush=True)
            if message == "worker stopped":
                stopped.set()

    threading.Thread(target=read, daemon=True).start()
    return done, stopped


SHOWN_SERIES = (
    "jobs_processed_total",
    "job_duration_seconds_count",
    "job_duration_seconds_sum",
    "worker_inflight_jobs",
    "worker_concurrency",
    "sqs_api_calls_total",
    "worker_info",
)


def scrape_metrics(port: int, show: bool = False) -> dict[str, float]:
    """Every sample of the worker's /metrics by its name and labels; prints a few if asked."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        samples[series] = float(value)
        if show and series.split("{")[0] in SHOWN_SERIES:
            print(f"   {line}")
    return samples


def local_sqs(region: str, endpoint: str) -> Any:
    # LocalStack takes any credentials; explicit ones keep the demo working on a machine
    # with no AWS configuration at all (and never touch a real account's).
    return boto3.client(
        "sqs", region_name=region, endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test"
    )


def queue_counts(region: str, endpoint: str, queue: str) -> dict[str, int]:
    sqs = local_sqs(region, endpoint)
    url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return {
        "visible": int(attrs["ApproximateNumberOfMessages"]),
        "in_flight": int(attrs["ApproximateNumberOfMessagesNotVisible"]),
    }


def wait_until(predicate: object, timeout: float, what: str) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
