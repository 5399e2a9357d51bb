"""Envelopes taken apart (envelopes.py) and offload pointers read (offload.py): pure, from
bodies shaped as AWS documents them. The integration tests send the same through
LocalStack's SNS, EventBridge and S3 (tests/integration/test_sources.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser.models import S3RecordModel
from pydantic import BaseModel

from sqs_worker_engine import NonRetryableError, PayloadError, Router
from sqs_worker_engine.formats.dlq import dead_letter_request
from sqs_worker_engine.formats.envelopes import ControlMessage, open_envelope, read_payload
from sqs_worker_engine.formats.offload import S3Pointer, pointer_body, pointer_of
from sqs_worker_engine.testing import run_handler

TOPIC = "arn:aws:sns:us-east-1:123456789012:orders"


class Order(BaseModel):
    order_id: str


def sns(message: str, **extra: Any) -> str:
    doc = {
        "Type": "Notification",
        "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
        "TopicArn": TOPIC,
        "Subject": "new order",
        "Message": message,
        "Timestamp": "2026-11-30T12:00:00.000Z",
        "SignatureVersion": "1",
        "Signature": "EXAMPLE",
        "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0000.pem",
        "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=x",
        "MessageAttributes": {"tenant": {"Type": "String", "Value": "acme"}},
    }
    doc.update(extra)
    return json.dumps(doc)


def event(detail: Any, **extra: Any) -> str:
    doc = {
        "version": "0",
        "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
        "detail-type": "Order Placed",
        "source": "shop.orders",
        "account": "123456789012",
        "time": "2026-11-30T12:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": detail,
    }
    doc.update(extra)
    return json.dumps(doc)


def s3_record(key: str = "incoming/my+report%282%29.csv") -> dict[str, Any]:
    return {
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "awsRegion": "us-east-1",
        "eventTime": "2026-11-30T12:00:00.000Z",
        "eventName": "ObjectCreated:Put",
        "userIdentity": {"principalId": "AWS:EXAMPLE"},
        "requestParameters": {"sourceIPAddress": "203.0.113.7"},
        "responseElements": {
            "x-amz-request-id": "C3D13FE58DE4C810",
            "x-amz-id-2": "FMyUVURIY8/IgAtTv8xRjskZQpcIZ9KG4V",
        },
        "s3": {
            "s3SchemaVersion": "1.0",
            "configurationId": "uploads",
            "bucket": {"name": "uploads", "ownerIdentity": {"principalId": "EXAMPLE"}, "arn": "arn:aws:s3:::uploads"},
            "object": {
                "key": key,
                "size": 1024,
                "eTag": "d41d8cd98f00b204e9800998ecf8427e",
                "sequencer": "0055AED6DCD90281E5",
            },
        },
    }


def test_sns_notification_gives_its_message_and_metadata():
    payload, envelope = read_payload(Order, "sns", sns('{"order_id": "o-1"}'))
    assert payload == Order(order_id="o-1")
    assert envelope is not None and envelope.sns is not None
    assert envelope.sns.topic_arn == TOPIC
    assert envelope.sns.subject == "new order"
    assert envelope.sns.attributes == {"tenant": "acme"}
    assert envelope.id == "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324"


def test_raw_sns_delivery_is_the_message_as_published():
    payload, envelope = read_payload(Order, "sns-raw", '{"order_id": "o-2"}')
    assert payload == Order(order_id="o-2")
    assert envelope is not None and envelope.sns is None and envelope.id is None
    _, notified = read_payload(Order, "sns-raw", sns('{"order_id": "o-3"}'))  # a notification is still one
    assert notified is not None and notified.sns is not None and notified.sns.topic_arn == TOPIC


def test_a_body_that_is_not_a_notification_is_a_payload_error_unless_raw_delivery_is_declared():
    for kind in ("sns", "sns+s3", "sns+eventbridge"):
        with pytest.raises(PayloadError, match=r'not an SNS notification.*declare envelope="sns-raw"'):
            open_envelope(kind, '{"order_id": "o-2"}')


@pytest.mark.parametrize("kind", ["SubscriptionConfirmation", "UnsubscribeConfirmation"])
def test_sns_confirmations_are_control_messages(kind: str):
    with pytest.raises(ControlMessage, match=kind):
        open_envelope("sns", sns("You have chosen to subscribe", Type=kind, Token="secret-token"))


def test_a_malformed_sns_notification_is_a_payload_error_naming_the_field():
    body = json.dumps({"Type": "Notification", "TopicArn": TOPIC, "Message": "x"})
    with pytest.raises(PayloadError, match=r"malformed SNS notification: .*MessageId"):
        open_envelope("sns", body)


def test_eventbridge_gives_detail_and_metadata():
    payload, envelope = read_payload(Order, "eventbridge", event({"order_id": "o-3"}))
    assert payload == Order(order_id="o-3")
    assert envelope is not None and envelope.event is not None
    assert (envelope.event.source, envelope.event.detail_type) == ("shop.orders", "Order Placed")
    assert envelope.id == "6a7e8feb-b491-4cf7-a9f1-bf3703467718"


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ('{"order_id": "o-1"}', "malformed EventBridge event"),
        ("[1, 2]", "not an EventBridge event"),
        ("not json", "not an EventBridge event"),
    ],
)
def test_what_is_not_an_eventbridge_event_is_a_payload_error(body: str, match: str):
    with pytest.raises(PayloadError, match=match):
        open_envelope("eventbridge", body)


def test_eventbridge_detail_that_fails_the_model_names_the_field():
    with pytest.raises(PayloadError, match=r"payload does not match Order: .*order_id"):
        read_payload(Order, "eventbridge", event({"id": 7}))


def test_s3_notification_gives_the_record_and_a_decoded_key():
    payload, envelope = read_payload(S3RecordModel, "s3", json.dumps({"Records": [s3_record()]}))
    assert isinstance(payload, S3RecordModel)
    assert envelope is not None and envelope.s3 is not None
    assert envelope.s3.bucket == "uploads"
    assert envelope.s3.key == "incoming/my report(2).csv"
    assert envelope.s3.size == 1024
    assert envelope.id == "s3://uploads/incoming/my report(2).csv#0055AED6DCD90281E5"


def test_s3_test_event_is_a_control_message():
    body = json.dumps(
        {"Service": "Amazon S3", "Event": "s3:TestEvent", "Time": "2026-11-30T12:00:00Z", "Bucket": "uploads"}
    )
    with pytest.raises(ControlMessage, match="s3:TestEvent"):
        open_envelope("s3", body)


def test_s3_notification_with_two_records_is_refused_not_half_done():
    with pytest.raises(PayloadError, match="2 records"):
        open_envelope("s3", json.dumps({"Records": [s3_record(), s3_record("b")]}))


def test_sns_wrapped_layers_open_in_turn():
    payload, envelope = read_payload(Order, "sns+eventbridge", sns(event({"order_id": "o-4"})))
    assert payload == Order(order_id="o-4")
    assert envelope is not None and envelope.sns is not None and envelope.event is not None
    assert envelope.id == envelope.event.id  # the innermost id
    _, wrapped = read_payload(None, "sns+s3", sns(json.dumps({"Records": [s3_record()]})))
    assert wrapped is not None and wrapped.s3 is not None and wrapped.sns is not None
    test_event = json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "uploads"})
    with pytest.raises(ControlMessage):
        open_envelope("sns+s3", sns(test_event))


def test_raw_leaves_an_sns_shaped_body_alone():
    body = sns("x")
    payload, envelope = read_payload(None, "raw", body)
    assert payload == json.loads(body) and envelope is None


def test_an_unknown_envelope_is_refused_at_registration():
    with pytest.raises(ValueError, match="envelope must be one of"):
        Router().handler("q", envelope="kinesis")  # type: ignore[arg-type]


def test_run_handler_sees_the_envelope_and_drops_control_messages():
    router = Router()
    seen: list[Any] = []

    @router.handler("orders", payload=Order, envelope="sns")
    def handle(job: Any) -> None:
        seen.append((job.payload, job.envelope.id))
        if job.payload.order_id == "bad":
            raise NonRetryableError("bad order")

    assert run_handler(router, "orders", sns('{"order_id": "o-5"}')).outcome == "success"
    assert seen == [(Order(order_id="o-5"), "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324")]
    assert run_handler(router, "orders", sns("hi", Type="SubscriptionConfirmation")).outcome == "dropped"
    assert run_handler(router, "orders", sns('{"order_id": 5}')).outcome == "dead_letter"
    assert run_handler(router, "orders", sns('{"order_id": "bad"}')).outcome == "dead_letter"


def test_pointer_of_reads_both_extended_client_formats():
    for cls, attribute in [
        ("software.amazon.payloadoffloading.PayloadS3Pointer", "ExtendedPayloadSize"),
        ("com.amazon.sqs.javamessaging.MessageS3Pointer", "SQSLargePayloadSize"),
    ]:
        message = {
            "Body": json.dumps([cls, {"s3BucketName": "b", "s3Key": "k"}]),
            "MessageAttributes": {attribute: {"DataType": "Number", "StringValue": "300000"}},
        }
        assert pointer_of(message) == S3Pointer("b", "k", 300000)
    assert pointer_of({"Body": pointer_body(S3Pointer("b", "k"))}) is None  # no attribute: an ordinary body


def test_a_size_attribute_without_a_pointer_is_a_payload_error():
    message = {
        "Body": '{"a": 1}',
        "MessageAttributes": {"ExtendedPayloadSize": {"DataType": "Number", "StringValue": "9"}},
    }
    with pytest.raises(PayloadError, match="ExtendedPayloadSize attribute but its body is not an S3 pointer"):
        pointer_of(message)


def test_the_dlq_copy_keeps_the_pointer_and_its_attribute_among_many():
    attributes = {f"a{i}": {"DataType": "String", "StringValue": str(i)} for i in range(9)}
    attributes["ExtendedPayloadSize"] = {"DataType": "Number", "StringValue": "300000"}
    message = {
        "MessageId": "m-1",
        "Body": pointer_body(S3Pointer("b", "k")),
        "MessageAttributes": attributes,
        "Attributes": {"ApproximateReceiveCount": "1"},
    }
    request = dead_letter_request(message, "dlq-url", "q", ValueError("x"), "w", fifo=False)
    assert request["MessageBody"] == message["Body"]
    assert "ExtendedPayloadSize" in request["MessageAttributes"]
    assert pointer_of({"Body": request["MessageBody"], "MessageAttributes": request["MessageAttributes"]}) == S3Pointer(
        "b", "k", 300000
    )
