"""DLQ copies and the tools that read them back: what a copy carries, what `redrive`
restores, how `redrive --copy` sizes its batches, and why `dlq peek` never takes a
producer's attribute for the worker's record."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sqs_worker_engine import NonRetryableError
from sqs_worker_engine.base.limits import MAX_MESSAGE_BYTES
from sqs_worker_engine.cli import build_parser
from sqs_worker_engine.formats.dlq import (
    ERROR_ATTRIBUTES,
    MAX_ATTRIBUTES,
    MOVED_BY_SQS,
    attributes_size,
    dead_letter_request,
    encode_attribute,
    fit_to_size,
    original_attributes,
    worker_record,
)
from sqs_worker_engine.ops.producer import _batches
from sqs_worker_engine.ops.redrive import Journal, copy_entry, describe, send_copies

XRAY = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


def ten_attributes() -> dict[str, Any]:
    attributes: dict[str, Any] = {f"s{i}": {"DataType": "String", "StringValue": f"v{i}"} for i in range(7)}
    attributes["amount"] = {"DataType": "Number", "StringValue": "12.50"}
    attributes["blob"] = {"DataType": "Binary", "BinaryValue": b"\x00\xffbytes"}
    attributes["kind"] = {"DataType": "String.custom", "StringValue": "order"}
    return attributes


def received(attributes: dict[str, Any], **system: str) -> dict[str, Any]:
    return {
        "MessageId": "m-1",
        "ReceiptHandle": "rh",
        "Body": '{"n": 1}',
        "Attributes": {"ApproximateReceiveCount": "3", "SentTimestamp": "1700000000000", **system},
        "MessageAttributes": attributes,
    }


def as_received_from_the_dlq(request: dict[str, Any], message_id: str = "d-1") -> dict[str, Any]:
    """What a ReceiveMessage on the DLQ returns for the copy `request` sent."""
    system = {"ApproximateReceiveCount": "1", "SentTimestamp": "1700000001000"}
    if "MessageGroupId" in request:
        system["MessageGroupId"] = request["MessageGroupId"]
    for name, value in (request.get("MessageSystemAttributes") or {}).items():
        system[name] = value["StringValue"]
    return {
        "MessageId": message_id,
        "ReceiptHandle": "rh-dlq",
        "Body": request["MessageBody"],
        "Attributes": system,
        "MessageAttributes": request["MessageAttributes"],
    }


def test_a_fair_queue_message_keeps_its_tenant_in_the_dlq() -> None:
    message = received({}, MessageGroupId="tenant-a")
    request = dead_letter_request(message, "dlq-url", "orders", ValueError("x"), "w", fifo=False)
    assert request.get("MessageGroupId") == "tenant-a", "the standard queue's MessageGroupId is its tenant"
    assert "MessageDeduplicationId" not in request, "a standard queue takes no deduplication id"
    assert "MessageGroupId" not in dead_letter_request(received({}), "dlq-url", "orders", ValueError(), "w", False)


def test_redrive_restores_every_attribute_the_trace_header_and_the_group() -> None:
    originals = ten_attributes()
    message = received(originals, AWSTraceHeader=XRAY, MessageGroupId="tenant-a")
    copy = dead_letter_request(message, "dlq-url", "orders", NonRetryableError("no"), "w", fifo=False)
    assert len(copy["MessageAttributes"]) == 10
    entry = copy_entry(0, as_received_from_the_dlq(copy), fifo=False)
    assert entry["MessageAttributes"] == originals, "all ten, each with its type and value"
    assert entry["MessageSystemAttributes"] == {"AWSTraceHeader": {"DataType": "String", "StringValue": XRAY}}
    assert entry["MessageGroupId"] == "tenant-a"
    assert entry["MessageBody"] == message["Body"]


def test_a_copy_sqs_moved_back_and_dead_lettered_again_restores_the_same() -> None:
    """StartMessageMoveTask brings the DLQ copy back as it is, worker's record included."""
    originals = ten_attributes()
    first = dead_letter_request(received(originals), "dlq-url", "orders", ValueError("first"), "w", fifo=False)
    moved_back = received(first["MessageAttributes"])
    second = dead_letter_request(moved_back, "dlq-url", "orders", ValueError("second"), "w", fifo=False)
    assert original_attributes(as_received_from_the_dlq(second)["MessageAttributes"]) == originals
    context = json.loads(second["MessageAttributes"]["x-error-context"]["StringValue"])
    assert context["previous_error"] == {"type": "ValueError", "message": "first"}
    assert second["MessageAttributes"]["x-error-message"]["StringValue"] == "second"


def forged() -> dict[str, Any]:
    return {
        "x-error-type": {"DataType": "String", "StringValue": "Handled"},
        "x-error-message": {"DataType": "String", "StringValue": "handled: safe to purge"},
        "x-error-context": {"DataType": "String", "StringValue": "{not json"},
        "tenant": {"DataType": "String", "StringValue": "acme"},
    }


def test_a_producers_reserved_attributes_are_moved_aside_and_come_back_on_redrive() -> None:
    copy = dead_letter_request(received(forged()), "dlq-url", "orders", ValueError("real reason"), "w", fifo=False)
    attributes = copy["MessageAttributes"]
    assert attributes["x-error-message"]["StringValue"] == "real reason"
    assert attributes["x-error-type"]["StringValue"] == "ValueError"
    context = json.loads(attributes["x-error-context"]["StringValue"])
    assert set(context["attributes"]) == set(ERROR_ATTRIBUTES), "kept, under the worker's context"
    dlq_message = as_received_from_the_dlq(copy)
    shown = describe(dlq_message)
    assert shown["dead_lettered_by"] == "worker" and shown["x-error-message"] == "real reason"
    assert shown["receive_count"] == 3, "the source queue's count, from the record"
    assert copy_entry(0, dlq_message, fifo=False)["MessageAttributes"] == forged(), "the message as it was sent"


def test_peek_shows_a_message_sqs_moved_as_the_producers_and_never_crashes() -> None:
    dlq_message = received(forged(), **{MOVED_BY_SQS: "arn:aws:sqs:us-east-1:1:orders"})
    assert worker_record(dlq_message) is None
    shown = describe(dlq_message, max_receive_count=5)
    assert shown["dead_lettered_by"] == "sqs" and shown["receive_count"] == 5
    assert not set(ERROR_ATTRIBUTES) & set(shown), "no producer attribute passes for the worker's"
    assert shown["producer_attributes"]["x-error-message"] == "handled: safe to purge"
    # Even a context in the worker's layout is the producer's when SQS moved the message.
    genuine = dead_letter_request(received({}), "dlq-url", "orders", ValueError("x"), "w", fifo=False)
    forged_well = received(genuine["MessageAttributes"], **{MOVED_BY_SQS: "arn:aws:sqs:us-east-1:1:orders"})
    assert describe(forged_well)["dead_lettered_by"] == "sqs"
    assert copy_entry(0, received(forged(), **{MOVED_BY_SQS: "arn"}), False)["MessageAttributes"] == forged()


def test_peek_survives_anything_in_the_attributes() -> None:
    for value in ("null", "[]", '{"written_by": "sqs-worker-engine", "attributes": {"a": 1}}', "1e999999", "[" * 5000):
        message = received({"x-error-context": {"DataType": "String", "StringValue": value}})
        shown = describe(message)
        assert shown["dead_lettered_by"] == "unknown" and "x-error-context" not in shown
    binary = received({"x-error-context": {"DataType": "Binary", "BinaryValue": b"\x00"}})
    assert describe(binary)["producer_attributes"]["x-error-context"] == "<1 bytes, Binary>"


def test_a_copy_from_the_previous_engine_is_still_read_and_restored() -> None:
    legacy = {
        "a": {"DataType": "String", "StringValue": "1"},
        "x-error-type": {"DataType": "String", "StringValue": "ValueError"},
        "x-error-message": {"DataType": "String", "StringValue": "old"},
        "x-error-context": {
            "DataType": "String",
            "StringValue": json.dumps({"source_queue": "q", "worker_id": "w", "receive_count": 2,
                                       "overflow_attributes": {"b": "2"}}),
        },
    }  # fmt: skip
    message = received(legacy)
    assert describe(message)["x-error-message"] == "old"
    assert original_attributes(message["MessageAttributes"]) == {
        "a": {"DataType": "String", "StringValue": "1"},
        "b": {"DataType": "String", "StringValue": "2"},
    }


def test_copies_of_near_limit_messages_are_split_by_size_as_well_as_by_ten() -> None:
    big = "x" * 250_000
    messages = [
        dict(received({"tenant": {"DataType": "String", "StringValue": "a"}}), MessageId=f"m{i}") for i in range(10)
    ]
    for m in messages:
        m["Body"] = big
    entries = {i: copy_entry(i, m, fifo=False) for i, m in enumerate(messages)}
    batches = list(_batches(entries))
    assert sorted(i for b in batches for i in b) == list(range(10)), "every message, once"
    for batch in batches:
        total = sum(len(e["MessageBody"]) + attributes_size(e.get("MessageAttributes") or {}) for e in batch.values())
        assert len(batch) <= 10 and total <= MAX_MESSAGE_BYTES, (len(batch), total)


def test_fit_to_size_never_drops_the_attributes_the_context_holds() -> None:
    copy = dead_letter_request(received(ten_attributes()), "dlq-url", "orders", ValueError("x" * 500), "w", False)
    full = len(copy["MessageBody"]) + attributes_size(copy["MessageAttributes"])
    smaller = fit_to_size(copy, full - 400)
    assert (
        smaller is not None
        and original_attributes(as_received_from_the_dlq(smaller)["MessageAttributes"]) == ten_attributes()
    )
    assert fit_to_size(copy, full - 1000) is None, "no copy rather than one without three attributes"


class RefusesBatches:
    """An SQS client that refuses any request of more than one entry as too long, as SQS
    does when a request's total passes its limit; single entries go through."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        if len(Entries) > 1:
            response: Any = {
                "Error": {"Code": "AWS.SimpleQueueService.BatchRequestTooLong", "Message": "too long"},
                "ResponseMetadata": {"HTTPStatusCode": 400},
            }
            raise ClientError(response, "SendMessageBatch")
        self.sent += [e["MessageBody"] for e in Entries]
        return {"Successful": [{"Id": e["Id"]} for e in Entries], "Failed": []}


def test_a_batch_sqs_refuses_as_a_whole_is_sent_one_by_one(tmp_path: Path) -> None:
    messages = [dict(received({}), MessageId=f"m{i}", Body=f"b{i}") for i in range(3)]
    client = RefusesBatches()
    journal = Journal(tmp_path / "journal")
    refused = asyncio.run(send_copies(client, "dest", False, journal, messages))  # type: ignore[arg-type]
    assert refused == {} and client.sent == ["b0", "b1", "b2"]
    assert journal.sent == {"m0", "m1", "m2"}


def test_operator_help_says_what_each_option_does_and_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    for command, expected in (
        (["dlq", "peek"], ["default: 10", "dead_lettered_by", "empty"]),
        (["dlq", "purge"], ["terminal", "--yes"]),
        (["dlq", "delete"], ["--id MESSAGE_ID"]),
        (["redrive"], ["--id MESSAGE_ID", "default: the first of WORKER_QUEUES", "1-500", "AWSTraceHeader"]),
    ):
        with pytest.raises(SystemExit):
            build_parser("svc").parse_args([*command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert all(e in text for e in expected), (command, text)


def test_the_journal_lives_where_it_is_told_else_in_state_else_in_a_private_temp_directory(tmp_path: Path) -> None:
    """Never the working directory: under the image's read-only root it cannot be written."""
    from sqs_worker_engine.ops.redrive import journal_place

    name = ".redrive-orders-dlq.journal"
    assert journal_place("orders-dlq", {"REDRIVE_JOURNAL_DIR": "/data", "XDG_STATE_HOME": "/s"}) == (
        Path("/data") / name,
        False,
    )
    assert journal_place("orders-dlq", {"XDG_STATE_HOME": "/s", "TMPDIR": "/t"}) == (
        Path("/s/sqs-worker-engine") / name,
        False,
    )
    uid = os.geteuid()
    assert journal_place("orders-dlq", {"TMPDIR": "/t"}) == (Path(f"/t/sqs-worker-engine-{uid}") / name, True)
    assert journal_place("orders-dlq", {}) == (Path(f"/tmp/sqs-worker-engine-{uid}") / name, True)


def test_a_journal_in_a_temp_directory_others_can_write_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    """What the journal holds decides what is deleted from the DLQ: in a shared temp dir,
    its directory must be this user's alone (not another's, not a link to elsewhere)."""
    from sqs_worker_engine.ops.redrive import JournalError

    mine = tmp_path / "mine" / "sqs-worker-engine-1"
    journal = Journal.ready(mine / "j", private=True)
    assert journal.sent == set() and mine.stat().st_mode & 0o777 == 0o700 and not (mine / "j").exists()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    for directory in (shared, link):
        with pytest.raises(JournalError, match="this user's alone"):
            Journal.ready(directory / "j", private=True)
    Journal.ready(shared / "j")  # a directory the operator named is theirs to choose


def test_an_unreadable_journal_is_a_journal_error_not_a_traceback(tmp_path: Path) -> None:
    from sqs_worker_engine.ops.redrive import JournalError

    (tmp_path / "j").write_bytes(b"\xff\xfe not text")
    with pytest.raises(JournalError, match="REDRIVE_JOURNAL_DIR"):
        Journal.ready(tmp_path / "j")
    resumed = tmp_path / "k"
    resumed.write_text("m-1\nm-2\n")
    assert Journal.ready(resumed).sent == {"m-1", "m-2"} and resumed.exists(), "an interrupted run's, kept"


def string(value: str) -> dict[str, Any]:
    return {"DataType": "String", "StringValue": value}


def with_record(folded: dict[str, Any], kept: dict[str, Any] | None = None) -> dict[str, Any]:
    """A message bearing a record in the worker's layout, folding `folded`: one the worker
    wrote, or one a producer forged (the two look alike)."""
    context = {"written_by": "sqs-worker-engine", "source_queue": "q", "worker_id": "w", "attributes": folded}
    return received(
        {
            **(kept or {}),
            "x-error-type": string("NonRetryableError"),
            "x-error-message": string("no"),
            "x-error-context": string(json.dumps(context)),
        }
    )


TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_record_folding_what_no_message_could_carry_is_not_unfolded() -> None:
    """A producer writes any record it likes: unfolded, it would hand the handler more than
    SQS lets a message carry. Such a record is not the worker's: the attributes stay as sent."""
    cases = {
        "eleven in all": with_record(
            {f"f{i}": encode_attribute(string("x")) for i in range(4)}, {f"k{i}": string("x") for i in range(7)}
        ),
        "a thousand folded": with_record({f"f{i}": encode_attribute(string("x")) for i in range(1000)}),
        "a name of AWS's": with_record({"AWS.Trace": encode_attribute(string("x"))}),
        "a name of Amazon's": with_record({"amazon.x": encode_attribute(string("x"))}),
        "two dots": with_record({"a..b": encode_attribute(string("x"))}),
        "a trailing dot": with_record({"a.": encode_attribute(string("x"))}),
        "a name too long": with_record({"n" * 257: encode_attribute(string("x"))}),
        "a space in the name": with_record({"a b": encode_attribute(string("x"))}),
        "a type SQS has not": with_record({"a": {"DataType": "Evil", "StringValue": "x"}}),
        "a type too long": with_record({"a": {"DataType": "String." + "x" * 250, "StringValue": "x"}}),
    }
    for name, message in cases.items():
        assert original_attributes(message["MessageAttributes"]) == message["MessageAttributes"], name
        assert worker_record(message) is None, name
        assert len(copy_entry(0, message, False)["MessageAttributes"]) <= MAX_ATTRIBUTES, name


def test_a_forged_record_within_the_limits_gives_the_handler_only_what_its_producer_could_set() -> None:
    """Unfolded, a forged record is attributes its producer could have sent as they are; the
    worker's own reading (trace parent, payload pointer) is of what the message carries."""
    from sqs_worker_engine.base.telemetry.tracing import producer_context
    from sqs_worker_engine.formats.offload import pointer_of

    folded = {
        "traceparent": encode_attribute(string(TRACEPARENT)),
        "ExtendedPayloadSize": encode_attribute({"DataType": "Number", "StringValue": "10"}),
        "tenant": encode_attribute(string("acme")),
    }
    message = with_record(folded, {"kept": string("k")})
    message["Body"] = '["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3BucketName": "b", "s3Key": "k"}]'
    unfolded = original_attributes(message["MessageAttributes"])
    assert set(unfolded) == {"kept", "traceparent", "ExtendedPayloadSize", "tenant"}
    assert producer_context(message) is None, "a folded traceparent never parents the job's span"
    assert pointer_of(message) is None, "a folded size attribute never makes the body a pointer"
