"""A handler's declared examples as its queue receives them (ops/examples.py): what `send`
sends without a body and what the end-to-end check sends. Each example, wrapped for its
handler's envelope, is taken apart by that envelope's own parser (envelopes.py) into the
example as declared; the SNS ones carry a signature the worker's check believes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from sqs_worker_engine import Job, Router
from sqs_worker_engine.formats.envelopes import ENVELOPES, open_envelope, read_payload
from sqs_worker_engine.formats.signatures import SnsSignatures
from sqs_worker_engine.handlers.router import HandlerSpec
from sqs_worker_engine.ops.examples import StandIn, example_bodies, examples_of, message_body, signing

REGION = "eu-west-1"
EMULATOR = "http://127.0.0.1:4566"


def s3_record() -> dict[str, Any]:
    """One record as S3 notifies it (the example a handler of S3 events declares)."""
    return {
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "awsRegion": REGION,
        "eventTime": "2026-11-30T12:00:00.000Z",
        "eventName": "ObjectCreated:Put",
        "userIdentity": {"principalId": "AWS:EXAMPLE"},
        "requestParameters": {"sourceIPAddress": "203.0.113.7"},
        "responseElements": {"x-amz-request-id": "C3D13FE58DE4C810", "x-amz-id-2": "FMyUVURIY8/IgAtTv8xRjskZQ"},
        "s3": {
            "s3SchemaVersion": "1.0",
            "configurationId": "uploads",
            "bucket": {"name": "uploads", "ownerIdentity": {"principalId": "EXAMPLE"}, "arn": "arn:aws:s3:::uploads"},
            "object": {"key": "in/report.csv", "size": 1024, "eTag": "d41d8cd98f00b204e9800998ecf8427e"},
        },
    }


class Order(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"order_id": "o-1", "amount": 3}, {"order_id": "o-2", "amount": 0}]}
    )

    order_id: str
    amount: int


class Upload(BaseModel):
    """Stands for Powertools' S3RecordModel: what an "s3" handler validates its record with."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [s3_record()]})

    eventName: str  # noqa: N815 - S3's own field name


def spec_for(envelope: str) -> HandlerSpec:
    router = Router()
    payload = Upload if envelope.endswith("s3") else Order

    @router.handler("orders", payload=payload, envelope=envelope)  # type: ignore[arg-type]
    async def handle(job: Job[Any]) -> None: ...

    spec = router.get("orders")
    assert spec is not None
    return spec


def opened_example(envelope: str, body: str) -> Any:
    """What the envelope's parser hands the payload model, as a JSON value."""
    opened = open_envelope(envelope, body)  # type: ignore[arg-type]
    return json.loads(opened.text) if opened.text is not None else opened.value


@pytest.mark.parametrize("envelope", ENVELOPES)
def test_each_example_is_parsed_back_by_its_envelope_into_the_example_declared(envelope: str) -> None:
    spec = spec_for(envelope)
    examples = examples_of(spec.payload)
    assert len(examples) == (1 if envelope.endswith("s3") else 2), examples
    for example in examples:
        body = message_body(spec, example, REGION)
        assert opened_example(envelope, body) == example, f"{envelope}: the handler would not get {example}: {body}"
        payload, _ = read_payload(spec.payload, spec.envelope, body)
        assert payload == spec.payload.model_validate(example), envelope  # type: ignore[union-attr]


@pytest.mark.parametrize("envelope", [e for e in ENVELOPES if e.startswith("sns+") or e == "sns"])
def test_an_sns_example_signed_by_the_stand_in_is_believed_by_a_worker_under_the_emulator(envelope: str) -> None:
    """The worker's own check (signatures.py), its certificate fetched from where the stand-in
    puts it: the emulator's host, at the path the notification names."""
    stand_in = StandIn.new(EMULATOR)
    fetched: list[str] = []

    async def fetch(url: str) -> bytes:
        fetched.append(url)
        return stand_in.certificate

    async def check(bodies: list[str]) -> None:
        signatures = SnsSignatures(EMULATOR, fetch=fetch)
        for body in bodies:
            opened = open_envelope(envelope, body).envelope  # type: ignore[arg-type]
            assert opened is not None and opened.sns is not None
            await signatures.check(opened.sns.signed, opened.sns.topic_arn)

    spec = spec_for(envelope)
    asyncio.run(check(example_bodies(spec, REGION, stand_in.signer)))
    assert fetched == [f"{EMULATOR}/{stand_in.bucket}/{stand_in.key}"], fetched


def test_an_unsigned_sns_example_is_refused_by_a_worker_that_checks() -> None:
    """Why `send` signs or refuses: a notification with no signature is not believed."""
    from sqs_worker_engine import PayloadError

    [body, _] = example_bodies(spec_for("sns"), REGION)
    opened = open_envelope("sns", body).envelope
    assert opened is not None and opened.sns is not None and opened.sns.signed is None
    with pytest.raises(PayloadError, match="carries no signature"):
        asyncio.run(SnsSignatures(EMULATOR).check(opened.sns.signed, opened.sns.topic_arn))


@pytest.mark.parametrize(
    ("envelope", "endpoint", "verify", "expected"),
    [
        ("raw", EMULATOR, True, "none"),
        ("sns-raw", EMULATOR, True, "none"),  # raw delivery carries no signature
        ("eventbridge", None, True, "none"),
        ("s3", None, True, "none"),
        ("sns", EMULATOR, True, "stand-in"),
        ("sns+s3", EMULATOR, True, "stand-in"),
        ("sns+eventbridge", EMULATOR, True, "stand-in"),
        ("sns", EMULATOR, False, "none"),  # a worker that checks nothing takes them unsigned
        ("sns", None, False, "none"),
        ("sns", None, True, "refused"),  # in AWS only SNS signs, and the worker would refuse
        ("sns+eventbridge", "", True, "refused"),
    ],
)
def test_how_examples_are_signed(envelope: str, endpoint: str | None, verify: bool, expected: str) -> None:
    assert signing(envelope, endpoint, verify) == expected, (envelope, endpoint, verify)


def test_a_count_takes_the_examples_in_turn_each_in_an_envelope_of_its_own() -> None:
    """`send --count`: copies of one notification would share its MessageId (`job.envelope.id`),
    the key an idempotent handler skips repeats by."""
    bodies = example_bodies(spec_for("sns"), REGION, count=5)
    ids = [json.loads(body)["order_id"] for body in (json.loads(b)["Message"] for b in bodies)]
    assert ids == ["o-1", "o-2", "o-1", "o-2", "o-1"], ids
    assert len({json.loads(body)["MessageId"] for body in bodies}) == 5, "each its own MessageId"
    raw = [json.loads(body) for body in example_bodies(spec_for("raw"), REGION, count=3)]
    assert raw == [{"order_id": "o-1", "amount": 3}, {"order_id": "o-2", "amount": 0}, {"order_id": "o-1", "amount": 3}]
