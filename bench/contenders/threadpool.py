"""A boto3 thread-pool consumer: receive 10, run each in a pool of BENCH_CONCURRENCY
threads, delete each message when its handler returns.

One receiving thread asks for more as soon as a thread is free (a semaphore keeps at most
`concurrency` messages taken at a time). The client's connection pool is sized to the
threads, as it must be or deletes queue for connections. SIGTERM stops receiving after the
poll in progress, then waits for the running handlers and their deletes.
"""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
from botocore.config import Config
from common import env_int, handle

stopping = threading.Event()


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    concurrency = env_int("BENCH_CONCURRENCY", 10)
    wait = env_int("BENCH_WAIT_SECONDS", 20)
    sqs = boto3.client("sqs", config=Config(max_pool_connections=concurrency + 1))
    url = os.environ["BENCH_QUEUE_URL"]
    free = threading.Semaphore(concurrency)

    def run(message: dict[str, Any]) -> None:
        try:
            handle(message["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        finally:
            free.release()

    with ThreadPoolExecutor(concurrency) as pool:
        while not stopping.is_set():
            free.acquire()  # wait for a free thread before taking more work
            free.release()
            resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=wait)
            for message in resp.get("Messages", []):
                free.acquire()
                pool.submit(run, message)


if __name__ == "__main__":
    main()
