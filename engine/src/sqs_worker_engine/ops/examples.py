"""A handler's declared examples, as its queue receives them: what `send` sends when given no
body, and what the end-to-end check (end_to_end.py) requires each handler to process.

Examples are declared where pydantic keeps them, on the payload model:
`model_config = ConfigDict(json_schema_extra={"examples": [...]})` (also what its JSON
schema shows). A queue receives each wrapped as the handler's envelope delivers it, in the
shape its parser (formats/envelopes.py) takes apart into the example again:

- "raw", "sns-raw": the example itself (raw delivery is the message as published);
- "eventbridge": an EventBridge event whose `detail` is the example;
- "s3": an S3 event notification whose one record is the example;
- "sns", "sns+s3", "sns+eventbridge": an SNS notification (`Type: Notification`) whose
  `Message` is the example, or that event, from a topic named after the queue.

A worker checks an SNS notification's signature (WORKER_SNS_VERIFY_SIGNATURES, on by
default), and only SNS can sign for AWS. On an emulator (AWS_ENDPOINT_URL) the examples are
signed by a stand-in: a key made for the run, its certificate put in the emulator's S3
(bucket CERTIFICATE_BUCKET, public-read) at the path the notifications name, which is where
a worker under that emulator fetches SNS's certificates (signatures.certificate_source).
Elsewhere they cannot be signed: `signing` says what to do (`send` refuses when the worker
would check; publish to the topic instead).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel

from ..formats.offload import PayloadStore
from ..formats.signatures import Signer, stand_in_certificate
from ..handlers.router import HandlerSpec
from .admin import ensure_bucket

ACCOUNT = "000000000000"  # the account the examples' envelopes name (the emulators' default)
# Where a stand-in's certificates are put on an emulator: each run's under a name of its own.
CERTIFICATE_BUCKET = "sqs-worker-engine-sns-certificates"
Signing = Literal["none", "stand-in", "refused"]


def examples_of(model: type[Any] | None) -> list[Any]:
    """The examples a payload model declares (`json_schema_extra={"examples": [...]}`)."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return []
    extra = model.model_config.get("json_schema_extra")
    # A callable json_schema_extra edits the schema: read what it produced.
    found = extra.get("examples") if isinstance(extra, dict) else model.model_json_schema().get("examples")
    return list(found) if isinstance(found, list) else []


def signing(envelope: str, endpoint_url: str | None, verify: bool) -> Signing:
    """How examples for `envelope` are signed: "none" (no SNS notification, or a worker that
    checks no signature), "stand-in" (on an emulator), "refused" (only SNS could sign them,
    and the worker would dead-letter them unsigned)."""
    if envelope.split("+")[0] != "sns" or not verify:
        return "none"
    return "stand-in" if endpoint_url else "refused"


def message_body(spec: HandlerSpec, example: Any, region: str = "us-east-1", signer: Signer | None = None) -> str:
    """What the queue receives for `example` under the handler's envelope (see the module
    docstring); an SNS notification is signed by `signer` when given."""
    layers = spec.envelope.split("+")
    body = example if isinstance(example, str) else json.dumps(example)
    if layers[-1] == "eventbridge":
        body = json.dumps(eventbridge_event(example, region))
    elif layers[-1] == "s3":
        body = json.dumps({"Records": [example]})
    if layers[0] == "sns":
        body = json.dumps(sns_notification(body, spec.queue, region, signer))
    return body


def eventbridge_event(detail: Any, region: str) -> dict[str, Any]:
    """An EventBridge event carrying `detail`, as a rule that targets the queue delivers it."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "end-to-end example",
        "source": "sqs_worker_engine.testing",
        "account": ACCOUNT,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [],
        "detail": detail,
    }


def sns_notification(message: str, queue: str, region: str, signer: Signer | None = None) -> dict[str, Any]:
    """An SNS notification of `message` from a topic named after `queue` (a FIFO queue's
    topic is FIFO too), as a subscription without raw delivery receives it."""
    topic = f"arn:aws:sns:{region}:{ACCOUNT}:{queue}"
    doc = {
        "Type": "Notification",
        "MessageId": str(uuid.uuid4()),
        "TopicArn": topic,
        "Message": message,
        "Timestamp": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "UnsubscribeURL": f"https://sns.{region}.amazonaws.com/?Action=Unsubscribe&SubscriptionArn={topic}:{uuid.uuid4()}",
    }
    return signer.sign(doc) if signer is not None else doc


def example_bodies(
    spec: HandlerSpec, region: str = "us-east-1", signer: Signer | None = None, count: int | None = None
) -> list[str]:
    """`count` messages taking the examples of the handler's payload model in turn (default:
    each once), as its queue receives them: each wrapped afresh, its envelope's id its own."""
    examples = examples_of(spec.payload)
    if not examples:
        return []
    return [message_body(spec, examples[i % len(examples)], region, signer) for i in range(count or len(examples))]


@dataclass(frozen=True)
class StandIn:
    """SNS's signing stood in for on an emulator (see the module docstring): `signer` signs,
    and `publish` puts its certificate where the emulator's workers fetch it."""

    signer: Signer
    certificate: bytes  # PEM
    bucket: str
    key: str

    @classmethod
    def new(cls, endpoint_url: str, bucket: str = CERTIFICATE_BUCKET) -> StandIn:
        """A key and certificate of their own; nothing is put anywhere until `publish`."""
        private, certificate = stand_in_certificate()
        key = f"SimpleNotificationService-{uuid.uuid4().hex}.pem"
        return cls(Signer(private, f"{endpoint_url.rstrip('/')}/{bucket}/{key}"), certificate, bucket, key)

    async def publish(self, region: str, endpoint_url: str) -> None:
        """Put the certificate in the emulator's S3 (bucket made if need be), readable by
        anyone, as SNS's are: the worker fetches it with no credentials."""
        await ensure_bucket(region, endpoint_url, self.bucket)
        store = PayloadStore(region, endpoint_url)
        try:
            s3 = await store.client()
            await s3.put_object(
                Bucket=self.bucket, Key=self.key, Body=self.certificate, ACL="public-read", ContentType="text/plain"
            )
        finally:
            await store.close()

    async def withdraw(self, region: str, endpoint_url: str) -> None:
        """Delete the certificate (once no worker needs it)."""
        store = PayloadStore(region, endpoint_url)
        try:
            await (await store.client()).delete_object(Bucket=self.bucket, Key=self.key)
        finally:
            await store.close()
