"""What wraps a payload on its way to the queue: SNS, EventBridge, S3 event notifications.

A handler declares its envelope (`Router.handler(..., envelope="sns")`); `open_envelope`
takes the body apart into the inner payload, still to be validated against the handler's
model, and the envelope's metadata (`job.envelope`). Pure functions of the body: the pool
and `testing.run_handler` share them, so a unit test sees what the worker does.

- "raw": the body is the payload (the default).
- "sns": an SNS notification (`Type: Notification`); the payload is its `Message`. A body
  that is not shaped like one is a PayloadError: anyone who may send to the queue could
  send it. The worker checks the notification's signature before the handler runs
  (signatures.py); `job.envelope.sns` is what SNS signed.
- "sns-raw": a subscription with raw message delivery (`RawMessageDelivery=true`: the
  message as published, SNS attributes as SQS message attributes, no signature); a body
  shaped like a notification is still opened (and checked) as one.
- "eventbridge": an EventBridge event; the payload is its `detail`.
- "s3": an S3 event notification; the payload is its one record (`S3RecordModel` from
  Powertools' parser models validates it whole).
- "sns+s3", "sns+eventbridge": those, published to a topic first (a notification each;
  under raw delivery the body is the inner event: declare "s3" or "eventbridge").

Every failure to take a body apart is a PayloadError: opening is a pure function of the
body, so what fails once fails on every retry.

Control messages (an SNS subscription or unsubscribe confirmation, S3's `s3:TestEvent`)
raise `ControlMessage`: the worker logs and deletes them; they are nobody's work. A body
that is not the declared envelope raises `PayloadError` (dead-lettered with the reason).
The envelopes are validated with Powertools' parser models (`SnsNotificationModel`,
`EventBridgeModel`, `S3Model`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, get_args
from urllib.parse import unquote_plus

from aws_lambda_powertools.utilities.parser.models import EventBridgeModel, S3Model, SnsNotificationModel
from pydantic import ValidationError

from ..base.errors import PayloadError
from .payload import parse_payload, validate_value, validation_problems
from .signatures import Signed, signed_of

EnvelopeKind = Literal["raw", "sns", "sns-raw", "eventbridge", "s3", "sns+s3", "sns+eventbridge"]
ENVELOPES: tuple[str, ...] = get_args(EnvelopeKind)
SNS_CONTROL_TYPES = frozenset({"SubscriptionConfirmation", "UnsubscribeConfirmation"})
SNS_TYPES = SNS_CONTROL_TYPES | {"Notification"}


class ControlMessage(Exception):  # noqa: N818 - an event, not a failure
    """The message is the transport talking, not work: log it and delete it."""


@dataclass(frozen=True)
class SnsNotification:
    topic_arn: str
    message_id: str
    subject: str | None
    timestamp: datetime
    attributes: dict[str, str]  # the notification's message attributes: name -> value
    # What SNS signed, for the worker's check (signatures.py); None: no signature on it.
    signed: Signed | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class EventBridgeEvent:
    id: str
    source: str
    detail_type: str
    account: str
    region: str
    time: datetime
    resources: list[str]


@dataclass(frozen=True)
class S3Event:
    event_name: str  # e.g. ObjectCreated:Put
    bucket: str
    key: str  # decoded (S3 URL-encodes keys in notifications)
    size: int | None
    etag: str | None
    version_id: str | None
    sequencer: str | None
    event_time: datetime
    region: str


@dataclass(frozen=True)
class Envelope:
    """What the layers around the payload said. `sns` is None under raw delivery."""

    kind: EnvelopeKind
    sns: SnsNotification | None = None
    event: EventBridgeEvent | None = None
    s3: S3Event | None = None

    @property
    def id(self) -> str | None:
        """The innermost envelope's own id: stable across SNS fan-out and producer retries,
        unlike the SQS message id, so the one to key idempotency on. None under raw SNS
        delivery (no envelope reached the queue)."""
        if self.event is not None:
            return self.event.id
        if self.s3 is not None:
            # An object event is the object's version, or its place in S3's order of events.
            return f"s3://{self.s3.bucket}/{self.s3.key}#{self.s3.version_id or self.s3.sequencer or self.s3.etag}"
        if self.sns is not None:
            return self.sns.message_id
        return None


@dataclass(frozen=True)
class Opened:
    """The inner payload, as text (to parse) or as an already decoded JSON value."""

    text: str | None
    value: Any = None
    envelope: Envelope | None = field(default=None)


def open_envelope(kind: EnvelopeKind, body: str) -> Opened:
    """Take `body` apart as `kind` says (see the module docstring). Raises ControlMessage or
    PayloadError, nothing else."""
    try:
        return _open(kind, body)
    except (ControlMessage, PayloadError):
        raise
    except Exception as exc:  # a shape the checks missed: it would fail the same way on every retry
        raise PayloadError(f"malformed {kind} envelope ({type(exc).__name__})") from None


def _open(kind: EnvelopeKind, body: str) -> Opened:
    if kind == "raw":
        return Opened(body)
    layers = kind.split("+")
    sns: SnsNotification | None = None
    text = body
    if layers[0] in ("sns", "sns-raw"):
        sns, text = _sns(body, raw=layers[0] == "sns-raw")
        layers = layers[1:]
    if not layers:
        return Opened(text, envelope=Envelope(kind, sns=sns))
    inner = layers[0]
    if inner == "eventbridge":
        event, detail = _eventbridge(text)
        return Opened(None, detail, Envelope(kind, sns=sns, event=event))
    s3, record = _s3(text)
    return Opened(None, record, Envelope(kind, sns=sns, s3=s3))


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _sns(body: str, raw: bool) -> tuple[SnsNotification | None, str]:
    doc = _json_object(body)
    kind = doc.get("Type") if doc is not None else None
    if doc is None or not isinstance(kind, str) or kind not in SNS_TYPES or "TopicArn" not in doc:
        if raw:
            return None, body  # raw delivery: the message as it was published
        raise PayloadError(
            "not an SNS notification (no JSON object with Type and TopicArn); "
            'for a subscription with raw message delivery declare envelope="sns-raw"'
        )
    if doc["Type"] in SNS_CONTROL_TYPES:
        raise ControlMessage(
            f"SNS {doc['Type']} from {str(doc.get('TopicArn'))[:256]}: not work; "
            "confirm subscriptions with SNS Subscribe (the queue's subscription confirms itself)"
        )
    signed = signed_of(doc)  # first: the model renames keys of the dict it validates
    try:
        model = SnsNotificationModel.model_validate(doc)
    except ValidationError as exc:
        raise PayloadError(f"malformed SNS notification: {validation_problems(exc)}") from None
    message = model.Message
    if not isinstance(message, str):  # the model allows a nested model; JSON gives a string
        message = json.dumps(message)
    attributes = {name: attr.Value for name, attr in (model.MessageAttributes or {}).items()}
    notification = SnsNotification(model.TopicArn, model.MessageId, model.Subject, model.Timestamp, attributes, signed)
    return notification, message


def _eventbridge(text: str) -> tuple[EventBridgeEvent, Any]:
    doc = _json_object(text)
    if doc is None:
        raise PayloadError("not an EventBridge event: the body is not a JSON object")
    try:
        model = EventBridgeModel.model_validate(doc)
    except ValidationError as exc:
        raise PayloadError(f"malformed EventBridge event: {validation_problems(exc)}") from None
    event = EventBridgeEvent(
        model.id, model.source, model.detail_type, model.account, model.region, model.time, list(model.resources)
    )
    return event, doc.get("detail")


def _s3(text: str) -> tuple[S3Event, dict[str, Any]]:
    doc = _json_object(text)
    if doc is None:
        raise PayloadError("not an S3 event notification: the body is not a JSON object")
    if doc.get("Event") == "s3:TestEvent":
        raise ControlMessage(f"s3:TestEvent from bucket {doc.get('Bucket')}: S3 checking that it can notify the queue")
    try:
        model = S3Model.model_validate(doc)
    except ValidationError as exc:
        raise PayloadError(f"malformed S3 event notification: {validation_problems(exc)}") from None
    if len(model.Records) != 1:
        # S3 sends one record per notification; a message that holds several cannot be
        # settled one record at a time, so it is dead-lettered (redrive it once handled).
        raise PayloadError(f"S3 event notification holds {len(model.Records)} records; one is expected")
    record = model.Records[0]
    obj = record.s3.object
    size = None if obj is None or obj.size is None else int(obj.size)
    event = S3Event(
        event_name=record.eventName,
        bucket=record.s3.bucket.name,
        key=unquote_plus(obj.key) if obj is not None else "",
        size=size,
        etag=obj.eTag if obj is not None else None,
        version_id=obj.versionId if obj is not None else None,
        sequencer=obj.sequencer if obj is not None else None,
        event_time=record.eventTime,
        region=record.awsRegion,
    )
    return event, doc["Records"][0]


def read_payload(model: type[Any] | None, kind: EnvelopeKind, body: str) -> tuple[Any, Envelope | None]:
    """The handler's payload and the envelope's metadata: `body` opened as `kind`, its
    content validated against `model` (see payload.py). Raises ControlMessage or PayloadError."""
    opened = open_envelope(kind, body)
    if opened.text is not None:
        return parse_payload(model, opened.text), opened.envelope
    return validate_value(model, opened.value), opened.envelope
