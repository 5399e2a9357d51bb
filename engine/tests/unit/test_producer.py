"""The producer's decisions (producer.py), against a recording client: what goes in each
call, what is retried, what is refused before sending. LocalStack runs the same producer in
tests/integration/test_sources.py and test_producer_sync below it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from sqs_worker_engine.ops.producer import Message, Producer


class Calls:
    """A client that records SendMessageBatch calls and fails entries as told."""

    def __init__(self, fail: dict[str, list[dict[str, Any]]] | None = None) -> None:
        self.batches: list[list[dict[str, Any]]] = []
        self.fail = fail or {}  # message body -> the Failed entries to answer, one per call

    async def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        self.batches.append(Entries)
        ok, failed = [], []
        for entry in Entries:
            answers = self.fail.get(entry["MessageBody"])
            if answers:
                failed.append({"Id": entry["Id"], **answers.pop(0)})
            else:
                ok.append({"Id": entry["Id"], "MessageId": f"m-{entry['Id']}"})
        return {"Successful": ok, "Failed": failed}

    async def send_message(self, QueueUrl: str, **entry: Any) -> dict[str, Any]:  # noqa: N803
        self.batches.append([entry])
        return {"MessageId": "m"}


def send(producer: Producer[Any], messages: list[Message[Any]]) -> Any:
    return asyncio.run(producer.send_batch(messages))


def test_batches_hold_ten_and_stay_within_the_request_size():
    calls = Calls()
    result = send(Producer(calls, "q"), [Message({"n": i}) for i in range(23)])
    assert [len(b) for b in calls.batches] == [10, 10, 3]
    assert result.ok and sorted(result.message_ids) == list(range(23))
    calls = Calls()
    send(Producer(calls, "q"), [Message("x" * 400_000) for _ in range(5)])
    assert [len(b) for b in calls.batches] == [2, 2, 1]  # 1 MiB to a request


def test_sqs_side_failures_are_retried_and_sender_faults_reported():
    throttled = {"Code": "InternalError", "Message": "try again", "SenderFault": False}
    refused = {"Code": "InvalidMessageContents", "Message": "bad", "SenderFault": True}
    calls = Calls({"a": [throttled], "b": [refused], "c": [throttled, throttled, throttled]})
    result = send(Producer(calls, "q", attempts=3), [Message("a"), Message("b"), Message("c"), Message("d")])
    assert set(result.message_ids) == {0, 3}
    assert [(f.index, f.code, f.sender_fault) for f in result.failed] == [
        (1, "InvalidMessageContents", True),
        (2, "InternalError", False),  # still failing at the third attempt: reported
    ]
    assert [sorted(e["MessageBody"] for e in b) for b in calls.batches] == [
        ["a", "b", "c", "d"],
        ["a", "c"],
        ["c"],
    ]


class Order(BaseModel):
    order_id: str


def test_a_payload_is_validated_against_the_model_before_sending():
    calls = Calls()
    producer: Producer[Order] = Producer(calls, "q", model=Order)
    with pytest.raises(ValueError, match=r"payload does not match Order: .*order_id"):
        send(producer, [Message({"id": 1})])
    send(producer, [Message({"order_id": "o-1"}), Message(Order(order_id="o-2"))])
    assert [e["MessageBody"] for e in calls.batches[0]] == ['{"order_id":"o-1"}', '{"order_id":"o-2"}']


@pytest.mark.parametrize(
    ("url", "message", "match"),
    [
        ("orders.fifo", Message("x"), "needs a group_id"),
        ("orders.fifo", Message("x", group_id="g", delay=5), "no per-message delay"),
        ("orders", Message("x", delay=901), r"delay must be within 0\.\.900"),
        ("orders", Message(""), "empty"),
        ("orders", Message("x", attributes={f"a{i}": "v" for i in range(11)}), "SQS allows 10"),
        ("orders", Message("x", attributes={"ExtendedPayloadSize": "1"}), "reserved for large payloads"),
        ("orders", Message("x", attributes={"a": ""}), "'a' is empty"),
        ("orders", Message("x", attributes={"a": object()}), "'a': object is not"),
        ("orders", Message("x" * 1_048_577), "over the queue's limit of 1048576 bytes"),
    ],
)
def test_what_sqs_would_refuse_is_refused_before_sending(url: str, message: Message[Any], match: str):
    calls = Calls()
    with pytest.raises((ValueError, TypeError), match=match):
        send(Producer(calls, url), [message])
    assert calls.batches == []


def test_attributes_group_and_dedup_ids_and_the_trace_hook_reach_the_entry():
    def inject(attributes: dict[str, Any], system: dict[str, Any]) -> None:
        attributes["traceparent"] = {"DataType": "String", "StringValue": "00-abc-def-01"}
        system["AWSTraceHeader"] = {"DataType": "String", "StringValue": "Root=1-abc"}

    calls = Calls()
    message = Message("x", group_id="tenant-7", dedup_id="d-1", attributes={"n": 2, "ok": True, "raw": b"\x01"})
    send(Producer(calls, "orders.fifo", inject=inject), [message])
    [entry] = calls.batches[0]
    assert entry["MessageGroupId"] == "tenant-7" and entry["MessageDeduplicationId"] == "d-1"
    assert entry["MessageAttributes"] == {
        "n": {"DataType": "Number", "StringValue": "2"},
        "ok": {"DataType": "String", "StringValue": "true"},
        "raw": {"DataType": "Binary", "BinaryValue": b"\x01"},
        "traceparent": {"DataType": "String", "StringValue": "00-abc-def-01"},
    }
    assert entry["MessageSystemAttributes"] == {"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-abc"}}


def test_send_raises_naming_the_code():
    class Refusing(Calls):
        async def send_message(self, QueueUrl: str, **entry: Any) -> dict[str, Any]:  # noqa: N803
            raise RuntimeError("connection refused")

    from sqs_worker_engine.ops.producer import SendError

    with pytest.raises(SendError, match="connection refused") as caught:
        asyncio.run(Producer(Refusing(), "q").send("x"))
    assert caught.value.code == "RuntimeError"


class Store:
    """Records what would go to S3."""

    def __init__(self) -> None:
        self.put_bodies: list[str] = []

    async def put(self, bucket: str, body: str) -> Any:
        from sqs_worker_engine.formats.offload import S3Pointer

        self.put_bodies.append(body)
        return S3Pointer(bucket, f"k{len(self.put_bodies)}", len(body.encode()))


def test_large_bodies_go_to_s3_only_once_every_message_passed_its_checks():
    store = Store()
    calls = Calls()
    producer: Producer[Any] = Producer(calls, "q", payloads=store, bucket="b", threshold=100)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="SQS allows 10"):
        send(producer, [Message("x" * 500), Message("y", attributes={f"a{i}": "v" for i in range(11)})])
    assert store.put_bodies == [] and calls.batches == []  # nothing left behind in S3
    result = send(producer, [Message("x" * 500), Message("small")])
    assert result.ok and store.put_bodies == ["x" * 500]
    large, small = calls.batches[0]
    assert large["MessageAttributes"]["ExtendedPayloadSize"] == {"DataType": "Number", "StringValue": "500"}
    assert '"s3BucketName": "b"' in large["MessageBody"] and small["MessageBody"] == "small"


def test_a_fifo_message_gets_a_deduplication_id_of_its_own_kept_across_resends():
    """Without one SQS refuses the send (unless the queue deduplicates by content). One per
    message, not per payload: the same payload twice is two messages, as on a standard queue;
    an entry SQS failed on its side is sent again with its id, so SQS drops a duplicate."""
    throttled = {"Code": "InternalError", "Message": "try again", "SenderFault": False}
    calls = Calls({'{"n": 1}': [throttled]})
    same = [
        Message({"n": 1}, group_id="g"),
        Message({"n": 1}, group_id="g"),
        Message({"n": 2}, group_id="g", dedup_id="mine"),
    ]
    assert send(Producer(calls, "orders.fifo"), same).ok
    first, second = calls.batches
    ids = [entry["MessageDeduplicationId"] for entry in first]
    assert len(set(ids)) == 3 and ids[2] == "mine", ids
    assert [entry["MessageDeduplicationId"] for entry in second] == ids[:1], "the resend keeps its id"
    asyncio.run(Producer(calls, "orders.fifo").send("x", group_id="g"))
    assert calls.batches[-1][0]["MessageDeduplicationId"] not in ids


def test_no_deduplication_id_where_sqs_needs_none():
    calls = Calls()
    send(Producer(calls, "orders"), [Message("x")])
    send(Producer(calls, "orders.fifo", content_based_deduplication=True), [Message("x", group_id="g")])
    assert ["MessageDeduplicationId" in batch[0] for batch in calls.batches] == [False, False]


def test_the_queues_own_size_limit_is_the_one_kept():
    calls = Calls()
    producer: Producer[Any] = Producer(calls, "q", max_message_bytes=1024)
    with pytest.raises(ValueError, match="1025 bytes, over the queue's limit of 1024 bytes"):
        send(producer, [Message("x" * 1025)])
    store = Store()
    offloading: Producer[Any] = Producer(calls, "q", payloads=store, bucket="b", max_message_bytes=1024)  # type: ignore[arg-type]
    assert send(offloading, [Message("x" * 1025)]).ok
    assert store.put_bodies == ["x" * 1025], "over the queue's limit, under the threshold: through S3"
