"""The emulator's ceiling: threads that each receive 10 and delete them in one
DeleteMessageBatch, with no handler and nothing else in the way. Its rate is the most
messages per second this SQS (through the counting proxy, on this machine) can hand out
and take back; efficiency figures divide by it.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from typing import Any

import boto3
from botocore.config import Config
from common import env_int, record

stopping = threading.Event()


def loop(sqs: Any, url: str, wait: int) -> None:
    while not stopping.is_set():
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=wait).get("Messages", [])
        if not messages:
            continue
        for message in messages:
            record(json.loads(message["Body"])["id"])
        entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
        sqs.delete_message_batch(QueueUrl=url, Entries=entries)


def run_threads() -> None:
    url = os.environ["BENCH_QUEUE_URL"]
    wait = min(1, env_int("BENCH_WAIT_SECONDS", 1))
    # Clients are made here, not in the threads: creating them is not thread-safe.
    clients = [
        boto3.client("sqs", config=Config(max_pool_connections=2)) for _ in range(env_int("BENCH_CONCURRENCY", 4))
    ]
    threads = [threading.Thread(target=loop, args=(sqs, url, wait)) for sqs in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def main() -> None:
    """BENCH_PROCESSES processes of BENCH_CONCURRENCY threads each: one process's threads
    share a GIL, and the ceiling must be the emulator's, not one client's."""
    children = []
    for _ in range(env_int("BENCH_PROCESSES", 1) - 1):
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, lambda *_: stopping.set())
            run_threads()
            os._exit(0)
        children.append(pid)

    def stop(_signum: int, _frame: object) -> None:
        stopping.set()
        for pid in children:
            os.kill(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    run_threads()
    for pid in children:
        os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
