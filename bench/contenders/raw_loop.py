"""The emulator's ceiling: BENCH_CONCURRENCY threads each receive 10 and delete them in one
DeleteMessageBatch, with no handler and nothing else in the way. Its rate is the most
messages per second this SQS (through the counting proxy, on this machine) can hand out
and take back; efficiency figures divide by it.
"""

from __future__ import annotations

import json
import os
import signal
import threading

import boto3
from botocore.config import Config

from common import env_int, record

stopping = threading.Event()


def loop(url: str, wait: int) -> None:
    sqs = boto3.client("sqs", config=Config(max_pool_connections=2))
    while not stopping.is_set():
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=wait).get("Messages", [])
        if not messages:
            continue
        for message in messages:
            record(json.loads(message["Body"])["id"])
        entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
        sqs.delete_message_batch(QueueUrl=url, Entries=entries)


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    url = os.environ["BENCH_QUEUE_URL"]
    wait = min(1, env_int("BENCH_WAIT_SECONDS", 1))
    threads = [threading.Thread(target=loop, args=(url, wait)) for _ in range(env_int("BENCH_CONCURRENCY", 4))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
