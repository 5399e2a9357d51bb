"""A FIFO receive that failed, sent again with its ReceiveRequestAttemptId: when the
receiver sends it again (receiving.retried), and what SQS answers it, as the in-memory
model plays it (SQS's rule; the emulators ignore attempt ids)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sqs_worker_engine.base.limits import RECEIVE_ATTEMPT_SECONDS
from sqs_worker_engine.doubles import vtime
from sqs_worker_engine.doubles.memory import MemorySQS
from sqs_worker_engine.runtime.admission.tickets import Grant
from sqs_worker_engine.runtime.receiving import RETRY_WITHIN, Attempt, retried


@pytest.mark.parametrize(
    ("attempt_id", "age", "again"),
    [
        ("r-1", 0.5, True),  # a FIFO receive, failed at once: sent again as it was
        ("r-1", RETRY_WITHIN - 1, True),
        ("r-1", RETRY_WITHIN, False),  # SQS may have forgotten its id: its places go back
        (None, 0.5, False),  # a standard queue's receive: its places go back
    ],
)
def test_a_failed_fifo_receive_is_sent_again_while_sqs_knows_its_attempt_id(
    attempt_id: str | None, age: float, again: bool
) -> None:
    assert RETRY_WITHIN + 20 + 20 < RECEIVE_ATTEMPT_SECONDS, "a backoff and a long poll fit in SQS's window"
    assert retried(Attempt(Grant(3), attempt_id, first_sent=100.0), 100.0 + age) is again


def test_a_receive_sent_again_gets_the_first_ones_messages_however_many_it_asks_for() -> None:
    """SQS's rule, which the engine must not trip over: the same messages and receipt
    handles, their visibility timeout started again; a fault fails the retry as it would
    any receive."""
    seen: dict[str, Any] = {}

    async def play() -> None:
        sqs = MemorySQS()
        url = sqs.create_queue("q.fifo", FifoQueue="true", VisibilityTimeout="30")
        for body in ("a", "b", "c"):
            sqs.put("q.fifo", body, group=body)
        first = await sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, ReceiveRequestAttemptId="r-1")
        await asyncio.sleep(20)
        sqs.fail("ReceiveMessage", "ServiceUnavailable", times=1)
        with pytest.raises(ClientError):
            await sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, ReceiveRequestAttemptId="r-1")
        again = await sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, ReceiveRequestAttemptId="r-1")
        await asyncio.sleep(20)  # 40 s after the first receive, 20 s after the retry
        seen["first"] = [(m["Body"], m["ReceiptHandle"]) for m in first["Messages"]]
        seen["again"] = [(m["Body"], m["ReceiptHandle"]) for m in again["Messages"]]
        seen["visible"] = sqs.visible("q.fifo")

    vtime.run(play())
    assert seen["again"] == seen["first"] and len(seen["first"]) == 2, seen
    assert seen["visible"] == ["c"], f"the retry started the visibility timeout again: {seen['visible']} visible"
