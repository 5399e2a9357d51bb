"""The loop people write by hand: receive 10, handle each in turn, delete each one.

It long-polls (WaitTimeSeconds 20 unless BENCH_WAIT_SECONDS says otherwise) and, like most
such loops that handle SIGTERM at all, sets a flag and stops between batches: a long poll
in progress and the rest of the batch run to the end first. Concurrency is 1 by nature.
"""

from __future__ import annotations

import os
import signal

import boto3
from common import env_int, handle

stopping = False


def stop(_signum: int, _frame: object) -> None:
    global stopping
    stopping = True


def main() -> None:
    signal.signal(signal.SIGTERM, stop)
    sqs = boto3.client("sqs")  # endpoint and region from AWS_ENDPOINT_URL / AWS_REGION
    url = os.environ["BENCH_QUEUE_URL"]
    wait = env_int("BENCH_WAIT_SECONDS", 20)
    while not stopping:
        resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=wait)
        for message in resp.get("Messages", []):
            handle(message["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


if __name__ == "__main__":
    main()
