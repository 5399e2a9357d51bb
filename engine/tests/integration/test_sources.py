"""Messages as they really arrive, through LocalStack's SNS, EventBridge and S3 and through the
SQS extended client, run by a real Worker: the handler gets the inner payload, control
messages are dropped, malformed ones are dead-lettered with the reason."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.parser.models import S3RecordModel
from pydantic import BaseModel

from sqs_worker_engine import Job, Router
from sqs_worker_engine.ops.producer import Message, Producer, open_producer

from ..support import REGION, Queue, Sqs, env_for, metric, running_worker, wait_for


class Order(BaseModel):
    order_id: str


class Aws:
    """boto3 clients for the sources, on LocalStack."""

    def __init__(self, endpoint: str) -> None:
        kw: dict[str, Any] = {"endpoint_url": endpoint, "region_name": REGION}
        self.sns: Any = boto3.client("sns", **kw)
        self.s3: Any = boto3.client("s3", **kw)
        self.events: Any = boto3.client("events", **kw)
        self._cleanup: list[Any] = []

    def topic(self) -> str:
        arn = str(self.sns.create_topic(Name=f"t-{uuid.uuid4().hex[:12]}")["TopicArn"])
        self._cleanup.append(lambda: self.sns.delete_topic(TopicArn=arn))
        return arn

    def bucket(self) -> str:
        name = f"b-{uuid.uuid4().hex[:12]}"
        self.s3.create_bucket(Bucket=name)

        def empty_and_delete() -> None:
            for obj in self.s3.list_objects_v2(Bucket=name).get("Contents", []):
                self.s3.delete_object(Bucket=name, Key=obj["Key"])
            self.s3.delete_bucket(Bucket=name)

        self._cleanup.append(empty_and_delete)
        return name

    def cleanup(self) -> None:
        for step in reversed(self._cleanup):
            with contextlib.suppress(Exception):  # best effort
                step()


@pytest.fixture
def aws(localstack_endpoint: str) -> Iterator[Aws]:
    clients = Aws(localstack_endpoint)
    yield clients
    clients.cleanup()


def queue_arn(sqs: Sqs, queue: Queue) -> str:
    return sqs.attributes(queue.url)["QueueArn"]


def settled_with_a_dead_letter(sqs: Sqs, queue: Queue, seen: list[Any]) -> Callable[[], bool]:
    """Until the handler has run, the queue is empty, and the DLQ holds something."""
    assert queue.dlq_url is not None
    dlq = queue.dlq_url
    return lambda: bool(seen) and sqs.counts(queue.url) == (0, 0) and sqs.counts(dlq) != (0, 0)


def serve(endpoint: str, health_file: str, queue: Queue, router: Router, until: Any, what: str, **env: Any) -> None:
    async def scenario() -> None:
        async with running_worker(env_for(endpoint, queue.name, health_file, **env), router):
            await wait_for(until, what=what)

    asyncio.run(scenario())


def test_sns_notifications_reach_the_handler_as_their_message(
    sqs: Sqs, aws: Aws, localstack_endpoint: str, health_file: str
) -> None:
    """Topic -> queue, raw delivery off: the payload is the Message, the topic and SNS id on
    the job. A subscription confirmation is dropped; a malformed notification is
    dead-lettered with the reason. Signatures are checked (the default): LocalStack signs
    its notifications (SignatureVersion 1) and serves the certificate on its endpoint."""
    queue = sqs.create()
    topic = aws.topic()
    aws.sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn(sqs, queue))
    published = aws.sns.publish(
        TopicArn=topic,
        Message=Order(order_id="o-1").model_dump_json(),
        Subject="new order",
        MessageAttributes={"tenant": {"DataType": "String", "StringValue": "acme"}},
    )["MessageId"]
    confirmation = {"Type": "SubscriptionConfirmation", "TopicArn": topic, "Token": "t", "Message": "confirm"}
    malformed = {"Type": "Notification", "TopicArn": topic, "Message": "{}"}  # no MessageId, Timestamp...
    sqs.send(queue, [confirmation, malformed])
    seen: list[Job[Order]] = []
    router = Router()

    @router.handler(queue.name, payload=Order, envelope="sns")
    async def handle(job: Job[Order]) -> None:
        seen.append(job)

    assert queue.dlq_url is not None
    serve(
        localstack_endpoint,
        health_file,
        queue,
        router,
        settled_with_a_dead_letter(sqs, queue, seen),
        "the notification handled, the rest settled",
    )
    [job] = seen
    assert job.payload == Order(order_id="o-1")
    assert job.envelope is not None and job.envelope.sns is not None
    assert (job.envelope.sns.topic_arn, job.envelope.sns.subject) == (topic, "new order")
    assert job.envelope.sns.attributes == {"tenant": "acme"}
    assert job.envelope.id == published
    assert metric("jobs_processed_total", queue=queue.name, outcome="dropped") == 1
    [dead] = sqs.receive_all(queue.dlq_url)
    assert json.loads(dead["Body"]) == malformed
    assert "malformed SNS notification" in dead["MessageAttributes"]["x-error-message"]["StringValue"]


def test_raw_sns_delivery_reaches_the_handler_as_published(
    sqs: Sqs, aws: Aws, localstack_endpoint: str, health_file: str
) -> None:
    queue = sqs.create()
    topic = aws.topic()
    aws.sns.subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=queue_arn(sqs, queue),
        Attributes={"RawMessageDelivery": "true"},
    )
    aws.sns.publish(
        TopicArn=topic,
        Message=Order(order_id="o-2").model_dump_json(),
        MessageAttributes={"tenant": {"DataType": "String", "StringValue": "acme"}},
    )
    seen: list[Job[Order]] = []
    router = Router()

    @router.handler(queue.name, payload=Order, envelope="sns-raw")
    async def handle(job: Job[Order]) -> None:
        seen.append(job)

    serve(localstack_endpoint, health_file, queue, router, lambda: bool(seen), "the raw message")
    [job] = seen
    assert job.payload == Order(order_id="o-2")
    assert job.envelope is not None and job.envelope.sns is None  # nothing but the message arrived
    assert job.message_attributes["tenant"]["StringValue"] == "acme"  # SNS attributes, as SQS ones


def test_eventbridge_events_reach_the_handler_as_their_detail(
    sqs: Sqs, aws: Aws, localstack_endpoint: str, health_file: str
) -> None:
    queue = sqs.create()
    source = f"shop.orders.{uuid.uuid4().hex[:8]}"
    rule = f"r-{uuid.uuid4().hex[:12]}"
    aws.events.put_rule(Name=rule, EventPattern=json.dumps({"source": [source]}))
    aws.events.put_targets(Rule=rule, Targets=[{"Id": "queue", "Arn": queue_arn(sqs, queue)}])
    try:
        entries = aws.events.put_events(
            Entries=[
                {"Source": source, "DetailType": "Order Placed", "Detail": Order(order_id="o-3").model_dump_json()}
            ]
        )["Entries"]
        seen: list[Job[Order]] = []
        router = Router()

        @router.handler(queue.name, payload=Order, envelope="eventbridge")
        async def handle(job: Job[Order]) -> None:
            seen.append(job)

        serve(localstack_endpoint, health_file, queue, router, lambda: bool(seen), "the event")
    finally:
        aws.events.remove_targets(Rule=rule, Ids=["queue"])
        aws.events.delete_rule(Name=rule)
    [job] = seen
    assert job.payload == Order(order_id="o-3")
    assert job.envelope is not None and job.envelope.event is not None
    assert (job.envelope.event.source, job.envelope.event.detail_type) == (source, "Order Placed")
    assert job.envelope.id == entries[0]["EventId"]


def test_s3_notifications_reach_the_handler_and_the_test_event_is_dropped(
    sqs: Sqs, aws: Aws, localstack_endpoint: str, health_file: str
) -> None:
    """Bucket -> queue: turning notifications on sends s3:TestEvent (dropped), then one
    record per object, its key decoded."""
    queue = sqs.create()
    bucket = aws.bucket()
    aws.s3.put_bucket_notification_configuration(
        Bucket=bucket,
        NotificationConfiguration={
            "QueueConfigurations": [{"QueueArn": queue_arn(sqs, queue), "Events": ["s3:ObjectCreated:*"]}]
        },
    )
    aws.s3.put_object(Bucket=bucket, Key="reports/q3 (final).csv", Body=b"a,b\n")
    seen: list[Job[S3RecordModel]] = []
    router = Router()

    @router.handler(queue.name, payload=S3RecordModel, envelope="s3")
    async def handle(job: Job[S3RecordModel]) -> None:
        seen.append(job)

    serve(
        localstack_endpoint,
        health_file,
        queue,
        router,
        lambda: seen and metric("jobs_processed_total", queue=queue.name, outcome="dropped") == 1,
        "the object's record and the test event",
    )
    [job] = seen
    assert job.envelope is not None and job.envelope.s3 is not None
    assert (job.envelope.s3.bucket, job.envelope.s3.key, job.envelope.s3.size) == (bucket, "reports/q3 (final).csv", 4)
    assert job.payload.eventName == "ObjectCreated:Put"
    assert sqs.counts(queue.dlq_url or "") == (0, 0)


def test_s3_notifications_through_sns_reach_the_handler(
    sqs: Sqs, aws: Aws, localstack_endpoint: str, health_file: str
) -> None:
    queue = sqs.create()
    topic = aws.topic()
    aws.sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn(sqs, queue))
    bucket = aws.bucket()
    aws.s3.put_bucket_notification_configuration(
        Bucket=bucket,
        NotificationConfiguration={"TopicConfigurations": [{"TopicArn": topic, "Events": ["s3:ObjectCreated:*"]}]},
    )
    aws.s3.put_object(Bucket=bucket, Key="in/one.json", Body=b"{}")
    seen: list[Job[Any]] = []
    router = Router()

    @router.handler(queue.name, payload=S3RecordModel, envelope="sns+s3")
    async def handle(job: Job[Any]) -> None:
        seen.append(job)

    serve(localstack_endpoint, health_file, queue, router, lambda: bool(seen), "the object's record")
    [job] = seen
    assert job.envelope is not None and job.envelope.sns is not None and job.envelope.s3 is not None
    assert job.envelope.sns.topic_arn == topic
    assert (job.envelope.s3.bucket, job.envelope.s3.key) == (bucket, "in/one.json")


@pytest.fixture
def extended() -> Iterator[Any]:
    """A maker of SQS extended clients. Importing the library replaces boto3's Session
    for the whole process (every later boto3 SQS client would resolve pointers on receive,
    hiding what the worker got): boto3 is put back afterwards."""
    import boto3.session

    saved = boto3.session.Session, boto3.Session, boto3.DEFAULT_SESSION
    from sqs_extended_client.client import SQSExtendedClientSession

    def make(endpoint: str, bucket: str, delete: bool = False) -> Any:
        client: Any = SQSExtendedClientSession(region_name=REGION).client("sqs", endpoint_url=endpoint)
        client.large_payload_support = bucket
        client.delete_payload_from_s3 = delete
        return client

    try:
        yield make
    finally:
        boto3.session.Session, boto3.Session, boto3.DEFAULT_SESSION = saved  # type: ignore[misc]


def test_large_payloads_from_the_extended_client_are_read_from_s3(
    sqs: Sqs, aws: Aws, localstack_endpoint: str, health_file: str, monkeypatch: pytest.MonkeyPatch, extended: Any
) -> None:
    """The Python extended client offloads a 300 KB payload; the worker reads it from S3
    inside the job, keeps it across a retry, deletes it only once SQS confirmed the delete (with
    WORKER_LARGE_PAYLOAD_DELETE), and a pointer whose object is gone is dead-lettered with
    the pointer kept."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", localstack_endpoint)  # the client's own S3 client
    queue = sqs.create()
    bucket = aws.bucket()
    producer = extended(localstack_endpoint, bucket)
    big = "x" * 300_000
    lost_body = json.dumps({"order_id": "o-gone", "notes": big})
    producer.send_message(QueueUrl=queue.url, MessageBody=json.dumps({"order_id": "o-big", "notes": big}))
    producer.send_message(QueueUrl=queue.url, MessageBody=lost_body)
    keys = [o["Key"] for o in aws.s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert len(keys) == 2
    # One payload's object is lost before the worker sees it.
    gone = next(k for k in keys if "o-gone" in aws.s3.get_object(Bucket=bucket, Key=k)["Body"].read().decode())
    aws.s3.delete_object(Bucket=bucket, Key=gone)
    seen: list[Job[Any]] = []
    objects_while_running: list[int] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        objects_while_running.append(aws.s3.list_objects_v2(Bucket=bucket)["KeyCount"])
        if job.receive_count == 1:
            raise RuntimeError("fails once: a retry must leave the object in place")
        seen.append(job)

    assert queue.dlq_url is not None
    serve(
        localstack_endpoint,
        health_file,
        queue,
        router,
        settled_with_a_dead_letter(sqs, queue, seen),
        "the large payload handled, the missing one dead-lettered",
        WORKER_LARGE_PAYLOAD_DELETE="true",
        WORKER_LARGE_PAYLOAD_BUCKET=bucket,
    )
    assert objects_while_running == [1, 1]  # there on both attempts: a retry does not delete it
    [job] = seen
    assert job.payload == {"order_id": "o-big", "notes": big}
    assert job.large_payload is not None and job.large_payload.bucket == bucket
    assert aws.s3.list_objects_v2(Bucket=bucket).get("KeyCount") == 0  # deleted after SQS's delete
    [dead] = sqs.receive_all(queue.dlq_url)
    assert dead["MessageAttributes"]["ExtendedPayloadSize"]["StringValue"] == str(len(lost_body))
    assert json.loads(dead["Body"])[1] == {"s3BucketName": bucket, "s3Key": gone}
    assert "does not exist" in dead["MessageAttributes"]["x-error-message"]["StringValue"]


def test_the_producer_sends_what_the_extended_client_and_the_worker_read(
    sqs: Sqs, aws: Aws, localstack_endpoint: str, health_file: str, monkeypatch: pytest.MonkeyPatch, extended: Any
) -> None:
    """The engine's producer: a typed batch with attributes, one payload over the threshold
    offloaded to S3; the extended client reads the large one back, and the worker runs them
    all; an invalid entry is refused before anything is sent."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", localstack_endpoint)
    queue = sqs.create()
    bucket = aws.bucket()

    class Note(BaseModel):
        order_id: str
        text: str = ""

    async def send() -> Any:
        async with open_producer(
            queue.name, region=REGION, endpoint_url=localstack_endpoint, model=Note, bucket=bucket
        ) as p:
            with pytest.raises(ValueError, match=r"payload does not match Note: .*order_id"):
                await p.send({"text": "no id"})
            small = await p.send(Note(order_id="n-1"), attributes={"tenant": "acme", "priority": 2})
            batch = await p.send_batch(
                [Message({"order_id": f"n-{i}"}) for i in range(2, 14)]
                + [Message(Note(order_id="n-big", text="y" * 300_000))]
            )
        plain: Producer[Any]
        async with open_producer(other.name, region=REGION, endpoint_url=localstack_endpoint, bucket=bucket) as plain:
            await plain.send(Note(order_id="for-the-client", text="z" * 300_000))
        return small, batch

    other = sqs.create(max_receive=None)
    small, batch = asyncio.run(send())
    assert small and batch.ok and len(batch.message_ids) == 13
    assert aws.s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 2
    # The extended client reads the engine's offloaded message as one of its own.
    reader = extended(localstack_endpoint, bucket)
    [read] = reader.receive_message(QueueUrl=other.url, WaitTimeSeconds=5, MessageAttributeNames=["All"])["Messages"]
    assert Note.model_validate_json(read["Body"]) == Note(order_id="for-the-client", text="z" * 300_000)
    seen: dict[str, Job[Any]] = {}
    router = Router()

    @router.handler(queue.name, payload=Note)
    async def handle(job: Job[Note]) -> None:
        seen[job.payload.order_id] = job

    serve(
        localstack_endpoint,
        health_file,
        queue,
        router,
        lambda: len(seen) == 14,
        "14 notes",
        WORKER_LARGE_PAYLOAD_BUCKET=bucket,
    )
    assert seen["n-1"].message_attributes["priority"] == {"DataType": "Number", "StringValue": "2"}
    assert seen["n-1"].message_attributes["tenant"] == {"DataType": "String", "StringValue": "acme"}
    assert seen["n-big"].large_payload is not None and len(seen["n-big"].payload.text) == 300_000
    assert aws.s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 2  # WORKER_LARGE_PAYLOAD_DELETE is off: kept


def test_the_sync_producer_sends_and_reports_a_partial_batch_failure(sqs: Sqs, localstack_endpoint: str) -> None:
    """For code that is not async; a body SQS refuses fails alone, the rest is sent."""
    from sqs_worker_engine.ops.producer import SyncProducer

    queue = sqs.create()
    fifo = sqs.create(fifo=True)
    with SyncProducer.open(queue.name, region=REGION, endpoint_url=localstack_endpoint) as producer:
        assert producer.send({"n": 0})
        result = producer.send_batch([Message({"n": 1}), Message("not allowed: \x00"), Message({"n": 2})])
    assert sorted(result.message_ids) == [0, 2]
    [failure] = result.failed
    assert (failure.index, failure.code) == (1, "InvalidMessageContents")
    assert sorted(json.loads(m["Body"])["n"] for m in sqs.receive_all(queue.url)) == [0, 1, 2]
    with SyncProducer.open(fifo.name, region=REGION, endpoint_url=localstack_endpoint) as producer:
        sent = producer.send_batch([Message({"n": i}, group_id="g", dedup_id=f"d-{i}") for i in range(3)])
    assert sent.ok
    assert [json.loads(m["Body"])["n"] for m in sqs.receive_all(fifo.url)] == [0, 1, 2]
