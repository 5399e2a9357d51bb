"""What a producer that may only send to the queue can make the worker do, tried against
LocalStack's SQS, S3 and SNS as an attacker would: every hostile message is dead-lettered at
once (on its first receive, x-error-type PayloadError, the reason named) and does nothing else;
the legitimate messages beside it are handled."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import REGISTRY, generate_latest

from sqs_worker_engine import Job, Router

from ..support import Queue, Sqs, cli, env_for, running_worker, wait_for
from .test_sources import Aws, queue_arn


@pytest.fixture
def cloud(localstack_endpoint: str) -> Iterator[Aws]:
    clients = Aws(localstack_endpoint)
    yield clients
    clients.cleanup()


POINTER_CLASS = "software.amazon.payloadoffloading.PayloadS3Pointer"
# Where LocalStack serves the certificate it signs notifications with (its SigningCertURL's path).
LOCALSTACK_CERT_PATH = "/_aws/sns/SimpleNotificationService-6c6f63616c737461636b69736e696365.pem"


def pointer(bucket: str, key: str, size: int | str) -> dict[str, Any]:
    """An extended-client message as a producer may write it by hand."""
    return {
        "MessageBody": json.dumps([POINTER_CLASS, {"s3BucketName": bucket, "s3Key": key}]),
        "MessageAttributes": {"ExtendedPayloadSize": {"DataType": "Number", "StringValue": str(size)}},
    }


def dead_letters(sqs: Sqs, queue: Queue) -> list[dict[str, Any]]:
    assert queue.dlq_url is not None
    return sqs.receive_all(queue.dlq_url)


def reason(message: dict[str, Any]) -> tuple[str, str, int]:
    """What the worker recorded on a dead letter: error type, message, receive count."""
    attributes = message.get("MessageAttributes", {})
    context = json.loads(attributes.get("x-error-context", {}).get("StringValue", "{}"))
    return (
        attributes.get("x-error-type", {}).get("StringValue", ""),
        attributes.get("x-error-message", {}).get("StringValue", ""),
        int(context.get("receive_count", 0)),
    )


def run(env: dict[str, str], router: Router, until: Any, what: str) -> None:
    async def scenario() -> None:
        async with running_worker(env, router):
            await wait_for(until, 90, what)

    asyncio.run(scenario())


def test_a_pointer_is_followed_only_into_the_payload_bucket_and_only_as_large_as_declared_and_capped(
    sqs: Sqs, cloud: Aws, localstack_endpoint: str, health_file: str
) -> None:
    """The attacks: a pointer into another bucket (the handler got the victim's object, and
    with deletes on the worker deleted it); a pointer declaring 64 bytes to a 3 MiB object;
    a correctly declared object over the cap; a size of "²" (a ValueError, retried)."""
    queue = sqs.create(max_receive=5)
    payloads, victim = cloud.bucket(), cloud.bucket()
    secret = b'{"password": "hunter2"}'
    cloud.s3.put_object(Bucket=victim, Key="secrets/db.json", Body=secret)
    legit = b'{"n": 1}'
    cloud.s3.put_object(Bucket=payloads, Key="legit", Body=legit)
    bomb = b'"' + b"x" * (3 * 1024 * 1024) + b'"'
    cloud.s3.put_object(Bucket=payloads, Key="bomb", Body=bomb)
    over = b'"' + b"y" * (1024 * 1024) + b'"'
    cloud.s3.put_object(Bucket=payloads, Key="over", Body=over)
    hostile = {
        "another bucket": (pointer(victim, "secrets/db.json", len(secret)), "not a payload bucket"),
        "size lie": (pointer(payloads, "bomb", 64), f"is {len(bomb)} bytes, but the message declares 64"),
        "over the cap": (pointer(payloads, "over", len(over)), "over WORKER_LARGE_PAYLOAD_MAX_BYTES (1048576)"),
        "size not a number": (pointer(payloads, "legit", "²"), "ExtendedPayloadSize attribute is not a size"),
    }
    for message, _ in hostile.values():
        sqs.client.send_message(QueueUrl=queue.url, **message)
    sqs.client.send_message(QueueUrl=queue.url, **pointer(payloads, "legit", len(legit)))
    seen: list[Any] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        seen.append(job.payload)

    assert queue.dlq_url is not None
    dlq = queue.dlq_url
    env = env_for(
        localstack_endpoint,
        queue.name,
        health_file,
        WORKER_LARGE_PAYLOAD_BUCKET=payloads,
        WORKER_LARGE_PAYLOAD_DELETE="true",
        WORKER_LARGE_PAYLOAD_MAX_BYTES=1024 * 1024,
    )
    run(
        env,
        router,
        lambda: bool(seen) and sqs.counts(queue.url) == (0, 0) and sqs.counts(dlq)[0] == len(hostile),
        "the legitimate pointer handled, the hostile ones dead-lettered",
    )
    assert seen == [{"n": 1}], "the handler saw the payload bucket's object only"
    assert cloud.s3.get_object(Bucket=victim, Key="secrets/db.json")["Body"].read() == secret, "never deleted"
    left = {o["Key"] for o in cloud.s3.list_objects_v2(Bucket=payloads).get("Contents", [])}
    assert left == {"bomb", "over"}, "the handled payload deleted, the dead-lettered ones kept with their pointers"
    recorded = {json.dumps(json.loads(m["Body"])[1], sort_keys=True): reason(m) for m in dead_letters(sqs, queue)}
    for name, (message, fragment) in hostile.items():
        key = json.dumps(json.loads(message["MessageBody"])[1], sort_keys=True)
        if name == "size not a number":
            key = json.dumps({"s3BucketName": payloads, "s3Key": "legit"}, sort_keys=True)
        kind, text, receives = recorded[key]
        assert (kind, receives) == ("PayloadError", 1), f"{name}: dead-lettered at once by the worker"
        assert fragment in text, f"{name}: {text}"


def test_a_worker_without_a_payload_bucket_follows_no_pointer(
    sqs: Sqs, cloud: Aws, localstack_endpoint: str, health_file: str
) -> None:
    queue = sqs.create(max_receive=5)
    bucket = cloud.bucket()
    cloud.s3.put_object(Bucket=bucket, Key="k", Body=b'{"n": 2}')
    sqs.client.send_message(QueueUrl=queue.url, **pointer(bucket, "k", 8))
    seen: list[Any] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        seen.append(job.payload)

    assert queue.dlq_url is not None
    dlq = queue.dlq_url
    run(
        env_for(localstack_endpoint, queue.name, health_file),
        router,
        lambda: sqs.counts(queue.url) == (0, 0) and sqs.counts(dlq)[0] == 1,
        "the pointer dead-lettered",
    )
    assert seen == []
    [dead] = dead_letters(sqs, queue)
    kind, text, receives = reason(dead)
    assert (kind, receives) == ("PayloadError", 1)
    assert "follows no pointer: set WORKER_LARGE_PAYLOAD_BUCKET" in text


class Attacker:
    """An HTTP server on the attacker's host: it records every request the worker makes."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(request.path_qs)
        return web.Response(text="-----BEGIN CERTIFICATE-----\n")


@contextlib.asynccontextmanager
async def attacker_host() -> AsyncIterator[Attacker]:
    attacker = Attacker()
    app = web.Application()
    app.router.add_get("/{tail:.*}", attacker.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    attacker.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    try:
        yield attacker
    finally:
        await runner.cleanup()


def forged(topic: str, cert_url: str, **fields: Any) -> dict[str, Any]:
    """A notification naming the trusted topic, in the shape SNS delivers, not signed by SNS."""
    return {
        "Type": "Notification",
        "MessageId": "0f0f0f0f-1111-2222-3333-444444444444",
        "TopicArn": topic,
        "Message": json.dumps({"payment_id": "p-forged", "amount": 1_000_000}),
        "Timestamp": "2026-12-02T07:00:00.000Z",
        "UnsubscribeURL": f"{cert_url}?Action=Unsubscribe",
        "SignatureVersion": "1",
        "Signature": base64.b64encode(b"\x01" * 256).decode(),
        "SigningCertURL": cert_url,
        **fields,
    }


def test_a_forged_sns_notification_is_dead_lettered_and_a_real_one_handled(
    sqs: Sqs, cloud: Aws, localstack_endpoint: str, health_file: str
) -> None:
    """The attack: a body shaped as a notification from the trusted topic, with a bogus
    signature and a certificate on the attacker's host. LocalStack signs what it delivers, so
    the real notification beside it passes the same check. Also: a subscription confirmation
    is dropped and its SubscribeURL never fetched; a body whose Type is a list, and one that
    is no notification at all, are dead-lettered at once."""
    queue = sqs.create(max_receive=5)
    topic = cloud.topic()
    cloud.sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn(sqs, queue))
    cloud.sns.publish(TopicArn=topic, Message=json.dumps({"payment_id": "p-real", "amount": 5}))
    seen: list[Any] = []
    router = Router()

    @router.handler(queue.name, envelope="sns")
    async def handle(job: Job[Any]) -> None:
        seen.append(job.payload)

    assert queue.dlq_url is not None
    dlq = queue.dlq_url

    async def scenario() -> list[str]:
        async with attacker_host() as attacker:
            localstack_cert = f"{localstack_endpoint}{LOCALSTACK_CERT_PATH}"  # a real certificate, wrong key
            bodies = [
                forged(topic, f"{attacker.url}/attacker.pem"),
                forged(topic, localstack_cert, MessageId="forged-second-id"),
                {**forged(topic, attacker.url + "/c.pem"), "Type": ["Notification"]},
                {"payment_id": "p-raw", "amount": 1},
                {
                    "Type": "SubscriptionConfirmation",
                    "TopicArn": topic,
                    "Token": "t",
                    "Message": "confirm",
                    "SubscribeURL": f"{attacker.url}/confirm?Action=ConfirmSubscription",
                },
            ]
            sqs.send(queue, bodies)
            async with running_worker(env_for(localstack_endpoint, queue.name, health_file), router):
                await wait_for(
                    lambda: bool(seen) and sqs.counts(queue.url) == (0, 0) and sqs.counts(dlq)[0] == 4,
                    90,
                    "the real notification handled, the forgeries dead-lettered, the confirmation dropped",
                )
            return attacker.requests

    requests = asyncio.run(scenario())
    assert seen == [{"payment_id": "p-real", "amount": 5}]
    exposed = generate_latest(REGISTRY).decode()
    for content in (topic.rsplit(":", 1)[-1], "p-forged", "0f0f0f0f", "forged-second-id"):
        assert content not in exposed, f"metric labels carry no message content ({content})"
    assert requests == [], "nothing fetched from the attacker's host: no certificate, no SubscribeURL"
    reasons = sorted((reason(m)[0], reason(m)[2], reason(m)[1]) for m in dead_letters(sqs, queue))
    assert [(kind, receives) for kind, receives, _ in reasons] == [("PayloadError", 1)] * 4
    texts = " | ".join(text for _, _, text in reasons)
    for fragment in (
        "no SNS signing certificate at ",  # the forged path, asked of LocalStack only (404)
        "signature does not verify: not sent by SNS",
        "not an SNS notification (no JSON object with Type and TopicArn); for a subscription with raw "
        'message delivery declare envelope="sns-raw"',
    ):
        assert fragment in texts, texts


def test_with_signatures_not_checked_a_queue_policy_is_the_only_guard(
    sqs: Sqs, cloud: Aws, localstack_endpoint: str, health_file: str
) -> None:
    """The documented opt-out (WORKER_SNS_VERIFY_SIGNATURES=false): a forged notification is
    believed, which is why it is only for queues whose policy admits the topic alone."""
    queue = sqs.create()
    topic = cloud.topic()
    sqs.send(queue, [forged(topic, "https://attacker.example/c.pem")])
    seen: list[Any] = []
    router = Router()

    @router.handler(queue.name, envelope="sns")
    async def handle(job: Job[Any]) -> None:
        seen.append(
            (job.payload["payment_id"], job.envelope.sns.topic_arn if job.envelope and job.envelope.sns else None)
        )

    env = env_for(localstack_endpoint, queue.name, health_file, WORKER_SNS_VERIFY_SIGNATURES="false")
    run(env, router, lambda: bool(seen) and sqs.counts(queue.url) == (0, 0), "the forged notification")
    assert seen == [("p-forged", topic)]


def test_redrive_moves_messages_back_to_the_queue_named_never_one_a_message_names(
    sqs: Sqs, localstack_endpoint: str
) -> None:
    """A dead letter whose producer wrote its own x-error-context naming another queue goes
    back to the queue `redrive` was run for: the destination is that queue's own ARN."""
    queue, other = sqs.create(max_receive=2), sqs.create()
    assert queue.dlq_url is not None
    context = {"source_queue": other.name, "source_queue_url": other.url, "receive_count": 1}
    sqs.client.send_message(
        QueueUrl=queue.dlq_url,
        MessageBody=json.dumps({"n": 1}),
        MessageAttributes={
            "x-error-type": {"DataType": "String", "StringValue": "PayloadError"},
            "x-error-context": {"DataType": "String", "StringValue": json.dumps(context)},
        },
    )
    moved = cli("redrive", AWS_ENDPOINT_URL=localstack_endpoint, WORKER_QUEUES=queue.name)
    assert moved.returncode == 0, moved.stderr
    assert [json.loads(m["Body"]) for m in sqs.receive_all(queue.url)] == [{"n": 1}]
    assert sqs.counts(other.url) == (0, 0), "nothing sent where the message said"


def test_a_forged_dead_letter_record_gives_the_handler_nothing_its_producer_could_not_send(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    """The worker unfolds its own record (a move task's redrive brings it back folded), and a
    producer can write one in the same layout: folding past what a message may carry, it is
    not unfolded; within it, it is what the producer could have sent as it is. A folded
    traceparent parents no span, whatever WORKER_TRACE_PARENT says."""
    queue = sqs.create(max_receive=2)
    router = Router()
    seen: dict[str, dict[str, Any]] = {}
    parents: dict[str, Any] = {}

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        from opentelemetry import trace

        seen[job.payload["case"]] = dict(job.message_attributes)
        parents[job.payload["case"]] = trace.get_current_span().get_span_context().trace_id

    def forged(folded: dict[str, Any]) -> dict[str, Any]:
        context = {"written_by": "sqs-worker-engine", "source_queue": "x", "worker_id": "w", "attributes": folded}
        return {
            "x-error-type": {"DataType": "String", "StringValue": "Forged"},
            "x-error-context": {"DataType": "String", "StringValue": json.dumps(context)},
        }

    folded = {"traceparent": {"DataType": "String", "StringValue": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"}}
    too_many = {f"f{i}": {"DataType": "String", "StringValue": "x"} for i in range(500)}
    cases = {"within": forged(folded), "too many": forged(too_many)}
    for case, attributes in cases.items():
        sqs.client.send_message(
            QueueUrl=queue.url, MessageBody=json.dumps({"case": case}), MessageAttributes=attributes
        )

    async def scenario() -> None:
        env = env_for(localstack_endpoint, queue.name, health_file, WORKER_TRACE_PARENT="false")
        async with running_worker(env, router):
            await wait_for(lambda: len(seen) == 2, 60, "both handled")

    asyncio.run(scenario())
    assert seen["within"] == folded, "what its producer could have sent: one attribute"
    assert seen["too many"] == cases["too many"], "500 folded: not unfolded, the attributes as sent"
    assert parents["within"] != int("ab" * 16, 16), "the folded traceparent chose no trace"
