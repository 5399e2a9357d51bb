"""What a message's content can make the worker do: whoever may send to a queue writes the
body and the attributes. Taking them apart fails only with PayloadError (dead-lettered at once,
the reason recorded), never with an error the pool would retry; pointers lead only into the
payload buckets; SNS notifications are believed only with SNS's signature."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.metrics import MetricWrapperBase

from sqs_worker_engine.base.errors import PayloadError
from sqs_worker_engine.base.telemetry import metrics
from sqs_worker_engine.base.telemetry.logs import LogFormat, configure
from sqs_worker_engine.formats.envelopes import ENVELOPES, ControlMessage, open_envelope, read_payload
from sqs_worker_engine.formats.offload import PayloadStore, S3Pointer, pointer_of, pointer_problem, size_problem

NOTIFICATION = {
    "Type": "Notification",
    "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
    "TopicArn": "arn:aws:sns:us-east-1:123456789012:orders",
    "Message": '{"order_id": "o-1"}',
    "Timestamp": "2026-12-01T10:00:00.000Z",
    "SignatureVersion": "1",
    "Signature": "c2lnbmF0dXJl",
    "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem",
    "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe",
}


def pointer_message(size: str, bucket: str = "payloads") -> dict[str, Any]:
    return {
        "Body": json.dumps(
            ["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3BucketName": bucket, "s3Key": "k"}]
        ),
        "MessageAttributes": {"ExtendedPayloadSize": {"DataType": "Number", "StringValue": size}},
    }


# -- malformed content is a payload error, not a transient one ---------------------------


def test_an_sns_body_whose_type_is_a_list_is_a_payload_error() -> None:
    body = json.dumps({**NOTIFICATION, "Type": ["Notification"]})
    with pytest.raises(PayloadError, match="not an SNS notification"):
        open_envelope("sns", body)


@pytest.mark.parametrize("size", ["²", "٣", "12 bytes", "", "-1", "1e3", "9" * 40])
def test_a_pointer_whose_size_is_not_a_number_is_a_payload_error(size: str) -> None:
    with pytest.raises(PayloadError, match="ExtendedPayloadSize attribute is not a size in bytes"):
        pointer_of(pointer_message(size))


def test_a_pointer_whose_size_attribute_is_binary_is_a_payload_error() -> None:
    message = pointer_message("1")
    message["MessageAttributes"]["ExtendedPayloadSize"] = {"DataType": "Binary", "BinaryValue": b"\x01"}
    with pytest.raises(PayloadError, match="not a size in bytes"):
        pointer_of(message)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
# Envelope-shaped documents with any value in each field: where a parser trusts a type.
SNS_KEYS = st.sampled_from([*NOTIFICATION, "MessageAttributes", "Subject"])
SHAPED = st.one_of(
    st.fixed_dictionaries(
        {"Type": JSON | st.sampled_from(["Notification", "SubscriptionConfirmation"]), "TopicArn": JSON}
    ).flatmap(
        lambda base: st.dictionaries(SNS_KEYS, JSON, max_size=6).map(lambda extra: {**NOTIFICATION, **extra, **base})
    ),
    st.dictionaries(st.sampled_from(["Records", "Event", "Bucket"]), JSON, max_size=3),
    st.dictionaries(
        st.sampled_from(["version", "id", "detail-type", "source", "account", "time", "region", "resources", "detail"]),
        JSON,
        max_size=9,
    ),
    JSON,
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=SHAPED, kind=st.sampled_from(ENVELOPES))
def test_opening_any_envelope_fails_only_with_a_payload_error(doc: Any, kind: Any) -> None:
    with contextlib.suppress(PayloadError, ControlMessage):
        open_envelope(kind, json.dumps(doc))


@settings(max_examples=300, deadline=None)
@given(body=JSON | st.just(json.loads(pointer_message("1")["Body"])), attribute=JSON)
def test_reading_any_pointer_fails_only_with_a_payload_error(body: Any, attribute: Any) -> None:
    message = {"Body": json.dumps(body), "MessageAttributes": {"ExtendedPayloadSize": attribute}}
    with contextlib.suppress(PayloadError):
        pointer_of(message)


# -- pointers only into the payload buckets, sizes bounded --------------------------------


def test_a_pointer_is_followed_only_into_a_payload_bucket() -> None:
    pointer = S3Pointer("victim", "secrets/db.json", 10)
    assert pointer_problem(S3Pointer("payloads", "k", 10), {"payloads"}) is None
    refused = pointer_problem(pointer, {"payloads", "partner"})
    assert refused is not None and "'victim', which is not a payload bucket" in refused
    unconfigured = pointer_problem(pointer, ())
    assert unconfigured is not None and "set WORKER_LARGE_PAYLOAD_BUCKET" in unconfigured


def test_an_object_must_be_the_declared_size_and_within_the_cap() -> None:
    pointer = S3Pointer("payloads", "k", 64)
    assert size_problem(pointer, 64, 1000) is None
    assert "declares 64" in (size_problem(pointer, 50_331_648, 100_000_000) or "")
    assert "over WORKER_LARGE_PAYLOAD_MAX_BYTES (1000)" in (size_problem(S3Pointer("b", "k", 5000), 5000, 1000) or "")


class NoS3:
    """An S3 client that records every call: a refused pointer must make none."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        async def call(**kwargs: Any) -> Any:
            self.calls.append(name)
            raise AssertionError(f"S3 {name} called")

        return call


def test_a_refused_pointer_makes_no_s3_call_and_deletes_happen_only_in_the_payload_bucket() -> None:
    async def scenario() -> list[str]:
        s3 = NoS3()
        store = PayloadStore("us-east-1", None, s3, bucket="payloads", read_buckets=["partner"])
        for buckets_store in (store, PayloadStore("us-east-1", None, s3)):
            with pytest.raises(PayloadError, match=r"not a payload bucket|follows no pointer"):
                await buckets_store.fetch(S3Pointer("victim", "secrets/db.json", 10))
        assert not await store.delete(S3Pointer("victim", "secrets/db.json"))
        assert not await store.delete(S3Pointer("partner", "k")), "a listed bucket is read, never deleted in"
        return s3.calls

    assert asyncio.run(scenario()) == []


# -- checked and safe: kept so ------------------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("kind", ENVELOPES)
def test_deep_json_nesting_in_any_envelope_is_a_payload_error(kind: Any) -> None:
    inner = json.dumps({**NOTIFICATION, "Message": DEEP})  # deep inside a well-formed notification
    for body in (DEEP, "{" * 100_000, *([inner] if kind != "raw" else [])):
        with pytest.raises(PayloadError):
            read_payload(None, kind, body)
    with pytest.raises(PayloadError, match="not an S3 pointer"):
        pointer_of({"Body": DEEP, "MessageAttributes": {"ExtendedPayloadSize": {"StringValue": "1"}}})


def test_metric_labels_are_bounded_none_comes_from_message_content() -> None:
    """Every label is a configured queue, a fixed vocabulary, or SQS's own error code: no
    group, tenant, topic or message label a producer could multiply."""
    bounded = {"queue", "outcome", "state", "action", "operation", "code"}
    labels = {
        name: set(value._labelnames) for name, value in vars(metrics).items() if isinstance(value, MetricWrapperBase)
    }
    assert labels and all(names <= bounded for names in labels.values()), labels


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_content_in_a_log_line_is_escaped(capsys: pytest.CaptureFixture[str], log_format: LogFormat) -> None:
    """A producer's text that looks like a log record of its own stays inside one line's
    message: a topic ARN (logged when its confirmation is dropped) with a newline and JSON,
    and a terminal's escape sequence; JSON-escaped in JSON lines, shown escaped in text ones."""
    forged = 'arn"}\n{"level": "CRITICAL", "message": "forged record"}\x1b[2J'
    with pytest.raises(ControlMessage) as dropped:
        open_envelope("sns", json.dumps({"Type": "SubscriptionConfirmation", "TopicArn": forged}))
    configure("svc", "INFO", log_format)
    # What this checks is the formatter; the engine loggers' levels are other tests' to
    # quieten (the property suites set CRITICAL while they run), so they are pinned here.
    loggers = [logging.getLogger("sqs_worker_engine"), logging.getLogger("sqs_worker_engine.pool")]
    kept = [(logger.level, logger.disabled) for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.NOTSET)
        logger.disabled = False
    try:
        loggers[1].info("dropped: %s", dropped.value)
    finally:
        logging.getLogger().handlers.clear()
        for logger, (level, disabled) in zip(loggers, kept, strict=True):
            logger.setLevel(level)
            logger.disabled = disabled
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, (lines, kept)
    if log_format == "json":
        record = json.loads(lines[0])
        assert record["level"] == "INFO" and forged in record["message"]
    else:
        assert " INFO " in lines[0] and "\x1b" not in lines[0], lines[0]
        assert 'arn"}\\n{"level": "CRITICAL", "message": "forged record"}\\x1b[2J' in lines[0], lines[0]
