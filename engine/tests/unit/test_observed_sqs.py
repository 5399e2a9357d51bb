"""Every SQS call through one place (sqs.ObservedSqs): counted and timed by operation and
outcome, and, with tracing, a CLIENT span only for the calls that are messaging operations."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.util._once import Once
from prometheus_client import REGISTRY

from sqs_worker_engine.base.sqs import ObservedSqs, lease_client, observed
from sqs_worker_engine.doubles.memory import MemorySQS
from sqs_worker_engine.runtime.handling.job_spans import error_type

if TYPE_CHECKING:
    from types_aiobotocore_sqs.type_defs import DeleteMessageBatchRequestEntryTypeDef


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


class Slow:
    """An SQS whose receive never answers (a long poll), and whose delete fails."""

    async def receive_message(self, **_: Any) -> Any:
        await asyncio.sleep(3600)

    async def delete_message_batch(self, **_: Any) -> Any:
        from botocore.exceptions import ClientError

        raise ClientError({"Error": {"Code": "RequestThrottled", "Message": "slow down"}}, "DeleteMessageBatch")


def test_each_call_is_counted_and_timed_by_operation_and_outcome() -> None:
    sqs = MemorySQS()
    url = sqs.create_queue("timed")
    before = {
        key: sample(name, operation=operation, outcome=outcome)
        for key, (name, operation, outcome) in {
            "calls": ("sqs_api_calls_total", "GetQueueAttributes", "ok"),
            "timed": ("sqs_request_duration_seconds_count", "GetQueueAttributes", "ok"),
            "throttled": ("sqs_request_duration_seconds_count", "DeleteMessageBatch", "RequestThrottled"),
            "cancelled": ("sqs_api_calls_total", "ReceiveMessage", "cancelled"),
        }.items()
    }
    fast = sample("sqs_request_duration_seconds_bucket", operation="ReceiveMessage", outcome="cancelled", le="0.025")

    async def scenario() -> None:
        client = ObservedSqs(sqs)
        await client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
        slow = ObservedSqs(Slow())  # type: ignore[arg-type]
        with pytest.raises(Exception, match="slow down"):
            await slow.delete_message_batch(QueueUrl=url, Entries=[])
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(slow.receive_message(QueueUrl=url), 0.05)

    asyncio.run(scenario())
    assert sample("sqs_api_calls_total", operation="GetQueueAttributes", outcome="ok") == before["calls"] + 1
    assert (
        sample("sqs_request_duration_seconds_count", operation="GetQueueAttributes", outcome="ok")
        == before["timed"] + 1
    )
    throttled = sample("sqs_request_duration_seconds_count", operation="DeleteMessageBatch", outcome="RequestThrottled")
    assert throttled == before["throttled"] + 1
    # A call given up before SQS answered (the caller's deadline, a poll at shutdown).
    assert sample("sqs_api_calls_total", operation="ReceiveMessage", outcome="cancelled") == before["cancelled"] + 1
    # ...timed until it was given up (50 ms here): not in the buckets below that.
    assert (
        sample("sqs_request_duration_seconds_bucket", operation="ReceiveMessage", outcome="cancelled", le="0.025")
        == fast
    )


def test_spans_only_for_messaging_operations_and_none_for_lease_extensions(spans: InMemorySpanExporter) -> None:
    sqs = MemorySQS()
    url = sqs.create_queue("spans")

    async def scenario() -> None:
        client = observed(sqs, "worker-1")
        assert observed(client, "other") is client  # observed once
        await client.send_message(QueueUrl=url, MessageBody="{}")
        await client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
        got = await client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30)
        [message] = got["Messages"]
        entry = [{"Id": "0", "ReceiptHandle": message["ReceiptHandle"], "VisibilityTimeout": 60}]
        await lease_client(client).change_message_visibility_batch(QueueUrl=url, Entries=entry)
        entry[0]["VisibilityTimeout"] = 0
        await client.change_message_visibility_batch(QueueUrl=url, Entries=entry)
        got = await client.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
        gone = [{"Id": "0", "ReceiptHandle": "not-a-handle"}]
        await client.delete_message_batch(QueueUrl=url, Entries=gone)

    asyncio.run(scenario())
    finished = spans.get_finished_spans()
    assert [s.name for s in finished] == [
        "dead_letter spans",  # SendMessage: on a worker's client, only ever the copy to the DLQ
        "receive spans",
        "change_visibility spans",  # the release; the lease extension made none
        "receive spans",
        "delete spans",
    ]
    assert {s.kind for s in finished} == {SpanKind.CLIENT}
    receive = dict(finished[1].attributes or {})
    assert receive["messaging.operation.type"] == "receive" and receive["messaging.batch.message_count"] == 1
    assert receive["messaging.client.id"] == "worker-1" and receive["aws.sqs.queue.url"] == url
    assert receive["sqs_worker.sqs_operation"] == "ReceiveMessage"
    assert not [key for span in finished for key in (span.attributes or {}) if key.startswith("rpc.")]
    settle = dict(finished[2].attributes or {})
    assert (settle["messaging.operation.type"], settle["messaging.operation.name"]) == ("settle", "change_visibility")
    delete = dict(finished[4].attributes or {})
    assert delete["sqs_worker.failed_entries"] == 1 and delete["error.type"], delete
    assert finished[4].status.status_code.name == "ERROR"


def test_error_type_is_the_failures_class_or_the_outcome() -> None:
    from sqs_worker_engine.base.errors import NonRetryableError

    assert error_type(ValueError("x"), "retry") == "ValueError"
    assert error_type(NonRetryableError("x"), "dead_letter") == "sqs_worker_engine.errors.NonRetryableError"
    assert error_type(None, "lease_lost") == "lease_lost"


def test_the_user_agent_cleaning_is_remembered_and_unchanged() -> None:
    """botocore cleans every User-Agent component twice a request; the engine's client
    remembers the cleaned strings (sqs._cache_user_agent), with botocore's own answers."""
    import botocore.config
    import botocore.useragent

    from sqs_worker_engine.base import sqs

    sqs._cache_user_agent()
    cleaned = botocore.useragent.sanitize_user_agent_string_component
    samples = [("Botocore/1.43", True), ("md/arch#x86_64", True), ("md/arch#x86_64", False), ("é ü/(x)", False)]
    for raw, allow_hash in samples:
        assert cleaned(raw, allow_hash) == sqs._sanitize(raw, allow_hash)
    before = sqs._sanitized.cache_info().hits
    cleaned("Botocore/1.43", True)
    assert sqs._sanitized.cache_info().hits == before + 1
    # botocore passes the app id's component by keyword (AWS_SDK_UA_APP_ID, user_agent_appid):
    # taken by another name, every request of such a client raised TypeError.
    assert cleaned(raw_str="my app#1", allow_hash=True) == sqs._sanitize("my app#1", True)
    config = botocore.config.Config(user_agent_appid="orders worker")  # type: ignore[call-arg]  # not in the stubs
    agent = botocore.useragent.UserAgentString.from_environment().with_client_config(config)
    assert "app/orders-worker" in agent.to_string()


def test_a_clients_user_agent_is_built_once_for_each_set_of_features(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore builds every request's User-Agent header twice; the engine's client builds
    it once for each set of features its requests used (the header's `m/` part), and sends
    what botocore would have built."""
    import botocore.useragent
    from botocore.context import start_as_current_context

    from sqs_worker_engine.base import sqs

    build = botocore.useragent.UserAgentString.to_string
    builds: list[str] = []

    def counted(self: botocore.useragent.UserAgentString) -> str:
        builds.append(build(self))
        return builds[-1]

    monkeypatch.setattr(botocore.useragent.UserAgentString, "to_string", counted)

    async def scenario() -> tuple[list[str], list[str], str, str]:
        async with sqs.create_client("eu-west-1", "http://127.0.0.1:9", 2) as client:
            creator = client._user_agent_creator  # type: ignore[attr-defined]  # botocore's own
            builds.clear()  # the client's creation may build one
            plain = [creator.to_string() for _ in range(5)]
            with start_as_current_context():
                botocore.useragent.register_feature_id("RETRY_MODE_ADAPTIVE")
                featured = [creator.to_string() for _ in range(5)]
                featured_fresh = build(creator)
            return plain, featured, build(creator), featured_fresh

    def same(header: str) -> str:  # botocore joins the features from a set: in any order
        return " ".join(",".join(sorted(p.split(","))) if p.startswith("m/") else p for p in header.split())

    plain, featured, plain_fresh, featured_fresh = asyncio.run(scenario())
    assert len(builds) == 2  # once without features, once with
    assert {same(h) for h in plain} == {same(plain_fresh)}
    assert {same(h) for h in featured} == {same(featured_fresh)}
    assert plain_fresh != featured_fresh  # the feature is in the header: a different one
    assert botocore.useragent.UserAgentString.to_string is counted  # botocore's class is left alone


def test_the_in_memory_sqs_holds_every_request_to_the_service_model() -> None:
    """The worker's own clients skip botocore's parameter check (assembly.open_clients);
    the double makes it instead, so a request the worker builds wrong fails in the tests."""
    from botocore.exceptions import ParamValidationError

    sqs = MemorySQS()
    url = sqs.create_queue("checked")

    async def scenario() -> None:
        with pytest.raises(ParamValidationError, match="MaxNumberOfMessages"):
            await sqs.receive_message(QueueUrl=url, MaxNumberOfMessages="10")  # type: ignore[arg-type]
        with pytest.raises(ParamValidationError, match="ReceiptHandle"):
            await sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": "0"}])
        with pytest.raises(ParamValidationError, match="Unknown parameter"):
            await sqs.send_message(QueueUrl=url, MessageBody="m", Delay=5)  # type: ignore[call-arg]
        assert await sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0) == {}

    asyncio.run(scenario())


def test_the_worker_clients_skip_the_parameter_check_and_others_keep_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request the model refuses: the checking client refuses it before sending; the
    worker's sends it (to a port where nothing listens, so it fails to connect instead)."""
    from botocore.exceptions import EndpointConnectionError, ParamValidationError

    from sqs_worker_engine.base.sqs import create_client

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    nobody = "http://127.0.0.1:9"

    async def refused(validate: bool) -> type[Exception]:
        async with create_client("eu-west-1", nobody, 1, attempts=1, validate=validate) as client:
            try:
                await client.receive_message(QueueUrl=f"{nobody}/000000000000/q", MaxNumberOfMessages="10")  # type: ignore[arg-type]
            except (ParamValidationError, EndpointConnectionError) as exc:
                return type(exc)
        raise AssertionError("the request was answered")

    assert asyncio.run(refused(validate=True)) is ParamValidationError
    assert asyncio.run(refused(validate=False)) is EndpointConnectionError


@pytest.mark.parametrize(
    ("env", "pollers", "connections"),
    [
        ({"WORKER_QUEUES": "a", "WORKER_CONCURRENCY": "8"}, [6], 16),  # prefetch 50: (8 + 50) / 10 pollers
        ({"WORKER_QUEUES": "a", "WORKER_CONCURRENCY": "8", "WORKER_PREFETCH": "0"}, [1], 11),
        ({"WORKER_QUEUES": "a", "WORKER_CONCURRENCY": "50"}, [20], 30),
        ({"WORKER_QUEUES": "a", "WORKER_CONCURRENCY": "100"}, [30], 40),
        ({"WORKER_QUEUES": "a,b", "WORKER_CONCURRENCY": "50", "WORKER_QUEUE_B_POLLERS": "2"}, [20, 2], 42),
    ],
)
def test_the_control_client_has_a_connection_for_each_poller_and_ten_a_queue(
    env: dict[str, str], pollers: list[int], connections: int
) -> None:
    """WorkerConfig.control_connections: the size the worker gives its control client, and
    the figure the bench reads (one place for it)."""
    from sqs_worker_engine.process.settings import load_settings

    config = load_settings(env)
    assert [q.pollers for q in config.queues] == pollers, "the pollers the connections are counted from"
    assert config.control_connections == connections, f"{pollers} pollers and 10 a queue"


def test_the_control_client_can_have_a_delete_out_for_every_pollers_receive(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every poller's receive brings up to 10 messages, and every 10 settled need a
    DeleteMessageBatch of about the same round trip (WorkerConfig.control_connections). An SQS
    that answers only once it holds that many calls at once, the queue's pollers plus the
    10 its heartbeats keep: the control client gets them all out together.
    With the fixed 10 connections it had before, the 11th waited for a connection, and at
    +20 ms a request that held short jobs to about 3,300 a second."""
    from contextlib import AsyncExitStack

    from aiohttp import web

    from sqs_worker_engine.process.assembly import CONTROL_READ_TIMEOUT, open_clients
    from sqs_worker_engine.process.settings import load_settings

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    # Only a pool too small waits this out (the calls all go out at once otherwise); within
    # the client's read timeout, so that the held calls are answered, not failed.
    patience = CONTROL_READ_TIMEOUT / 2

    async def scenario() -> tuple[int, int]:
        held, most, everyone = 0, 0, asyncio.Event()
        wanted = 0

        async def answer(request: web.Request) -> web.Response:
            nonlocal held, most
            held += 1
            most = max(most, held)
            if held >= wanted:
                everyone.set()
            try:
                await asyncio.wait_for(everyone.wait(), patience)
            except TimeoutError:
                everyone.set()  # the pool held the rest back: answer, so that they come in
            held -= 1
            body = await request.json()
            ok = [{"Id": e["Id"]} for e in body["Entries"]]
            return web.json_response({"Successful": ok, "Failed": []}, content_type="application/x-amz-json-1.0")

        app = web.Application()
        app.router.add_post("/", answer)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        endpoint = f"http://127.0.0.1:{port}"
        config = load_settings({"WORKER_QUEUES": "q", "WORKER_CONCURRENCY": "50", "AWS_ENDPOINT_URL": endpoint})
        wanted = config.control_connections
        try:
            async with AsyncExitStack() as stack:
                _, control = await open_clients(stack, config, None)
                entries: list[DeleteMessageBatchRequestEntryTypeDef] = [{"Id": "0", "ReceiptHandle": "r"}]
                await asyncio.gather(
                    *(
                        control.delete_message_batch(QueueUrl=f"{endpoint}/000000000000/q", Entries=entries)
                        for _ in range(wanted)
                    )
                )
        finally:
            await runner.cleanup()
        return most, wanted

    most, wanted = asyncio.run(scenario())
    assert wanted == 20 + 10  # concurrency 50, prefetch 150: 20 pollers, and 10 for the queue
    assert most == wanted
