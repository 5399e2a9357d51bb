"""Traces across the queue against LocalStack, with the SDK's in-memory exporter: the
producer's span parents (and is linked from) each job's `process` span; the job's life is
on it as events; log lines and the DLQ copy carry the context; tracing leaves leases alone.
The last test exports a real worker process's spans over OTLP/HTTP to a receiver it runs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.util._once import Once

from sqs_worker_engine import Job, NonRetryableError, Router
from sqs_worker_engine.base.telemetry.logs import get_logger
from sqs_worker_engine.base.telemetry.tracing import producer_context, xray_header
from sqs_worker_engine.doubles.emulators import free_port
from sqs_worker_engine.ops.producer import Producer, open_producer

from ..support import PACKAGE, PROJECT_ROOT, REGION, Sqs, env_for, metric, running_worker, wait_for


def _reset_provider() -> None:
    # The API sets its provider once per process; tests install one each and take it back.
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _reset_provider()
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()
    _reset_provider()


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def events(span: ReadableSpan) -> list[tuple[str, dict[str, Any]]]:
    return [(e.name, dict(e.attributes or {})) for e in span.events]


def test_the_producers_span_parents_and_links_each_job(
    sqs: Sqs, localstack_endpoint: str, health_file: str, spans: InMemorySpanExporter
) -> None:
    queue = sqs.create()
    seen: list[dict[str, Any]] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        current = trace.get_current_span().get_span_context()
        seen.append({"span": current, "log_keys": dict(get_logger().thread_safe_get_current_keys())})

    async def scenario() -> None:
        with trace.get_tracer("test").start_as_current_span("http request"):
            producer: Producer[Any]
            async with open_producer(queue.name, region=REGION, endpoint_url=localstack_endpoint) as producer:
                await producer.send({"n": 1}, attributes={"tenant": "acme"})
        async with running_worker(env_for(localstack_endpoint, queue.name, health_file), router):
            await wait_for(lambda: len(named(spans, f"process {queue.name}")) == 1, what="the job's span")

    asyncio.run(scenario())
    [request] = named(spans, "http request")
    [send] = named(spans, f"send {queue.name}")
    [process] = named(spans, f"process {queue.name}")
    assert send.kind is SpanKind.PRODUCER and send.parent is not None
    assert send.parent.span_id == request.context.span_id
    assert process.kind is SpanKind.CONSUMER
    assert process.context.trace_id == request.context.trace_id  # one trace, request to job
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    attributes = dict(process.attributes or {})
    assert attributes["messaging.system"] == "aws_sqs"
    assert attributes["messaging.operation.type"] == "process"
    assert attributes["messaging.destination.name"] == queue.name
    assert attributes["messaging.client.id"] == "test-worker"
    assert attributes["messaging.message.id"]
    # Inside the job: the span is current, and every log line names it.
    [inside] = seen
    assert inside["span"].span_id == process.context.span_id
    assert inside["log_keys"]["trace_id"] == f"{process.context.trace_id:032x}"
    assert inside["log_keys"]["span_id"] == f"{process.context.span_id:016x}"
    # CLIENT spans for the SQS calls that are messaging operations, after the conventions.
    clients = {s.name: s for s in spans.get_finished_spans() if s.kind is SpanKind.CLIENT}
    receive, delete = clients[f"receive {queue.name}"], clients[f"delete {queue.name}"]
    assert dict(receive.attributes or {}) | dict(delete.attributes or {}) and all(
        (s.attributes or {})["messaging.system"] == "aws_sqs"
        and (s.attributes or {})["messaging.destination.name"] == queue.name
        and (s.attributes or {})["messaging.client.id"] == "test-worker"
        for s in (receive, delete)
    )
    assert (receive.attributes or {})["messaging.operation.type"] == "receive"
    received = [s for s in spans.get_finished_spans() if s.name == f"receive {queue.name}"]
    # A long poll that brings nothing is no trace of its own: an idle worker would start a
    # root trace every 20 s per poller, and X-Ray bills per trace.
    assert [(s.attributes or {})["messaging.batch.message_count"] for s in received] == [1], received
    assert (delete.attributes or {})["messaging.operation.type"] == "settle"
    assert (delete.attributes or {})["messaging.operation.name"] == "delete"
    assert (delete.attributes or {})["messaging.batch.message_count"] == 1
    assert "error.type" not in (process.attributes or {}) and "error.type" not in (delete.attributes or {})
    # The registry's names only under messaging.*; the engine's own under its prefix.
    assert attributes["sqs_worker.receive_count"] == 1
    assert not [key for key in attributes if key.startswith("messaging.sqs.")]


def test_a_jobs_life_is_on_its_span_and_the_dlq_copy_keeps_the_context(
    sqs: Sqs, localstack_endpoint: str, health_file: str, spans: InMemorySpanExporter
) -> None:
    queue = sqs.create(visibility=2, max_receive=2)
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        kind = job.payload["kind"]
        if kind == "slow":
            await asyncio.sleep(3.5)  # outlives its 2 s lease: extended meanwhile
        elif kind == "flaky" and job.receive_count == 1:
            raise RuntimeError("fails once")
        elif kind == "bad":
            raise NonRetryableError("never valid")
        elif kind == "stuck":
            await asyncio.sleep(30)  # past the job timeout

    async def scenario() -> None:
        with trace.get_tracer("test").start_as_current_span("enqueue"):
            producer: Producer[Any]
            async with open_producer(queue.name, region=REGION, endpoint_url=localstack_endpoint) as producer:
                for kind in ("slow", "flaky", "bad", "stuck"):
                    await producer.send({"kind": kind})
        env = env_for(
            localstack_endpoint,
            queue.name,
            health_file,
            WORKER_JOB_TIMEOUT_MS=5000,
            WORKER_VISIBILITY_TIMEOUT_SECONDS=2,
        )
        async with running_worker(env, router):
            await wait_for(
                lambda: (
                    {"success", "dead_letter", "retry", "timeout"} <= set(outcomes())
                    and outcomes().count("success") == 2
                ),
                timeout=90,
                what="every kind of ending",
            )

    def outcomes() -> list[str]:
        return [str((s.attributes or {})["sqs_worker.outcome"]) for s in named(spans, f"process {queue.name}")]

    asyncio.run(scenario())
    everything = [e for s in named(spans, f"process {queue.name}") for e in events(s)]
    names = [name for name, _ in everything]
    assert "lease extended" in names
    assert any(n == "retry" and a["delay_seconds"] >= 0 for n, a in everything)
    assert any(n == "cancelled" and a["reason"] == "timeout" for n, a in everything)
    assert any(n == "dead_letter" for n, _ in everything)
    failed = [s for s in named(spans, f"process {queue.name}") if s.status.status_code.name == "ERROR"]
    assert failed and all(s.events for s in failed)
    # A failed job's span names the class of its failure (OTel's error.type); a success none.
    kinds = {(s.attributes or {})["sqs_worker.outcome"]: (s.attributes or {}).get("error.type") for s in failed}
    assert kinds == {
        "retry": "RuntimeError",
        "dead_letter": "sqs_worker_engine.errors.NonRetryableError",
        "timeout": "TimeoutError",
    }, kinds
    succeeded = [s for s in named(spans, f"process {queue.name}") if s.status.status_code.name != "ERROR"]
    assert succeeded and not any("error.type" in (s.attributes or {}) for s in succeeded)
    # Settling, one CLIENT span per call: the retry's delay, the DLQ copy, the deletes;
    # the lease extensions of the slow job make none (they are events on its span).
    settles = {
        s.name: s
        for s in spans.get_finished_spans()
        if (s.attributes or {}).get("messaging.operation.type") == "settle"
    }
    assert {f"delete {queue.name}", f"change_visibility {queue.name}", f"dead_letter {queue.dlq_name}"} <= set(
        settles
    ), sorted(settles)
    assert all(s.kind is SpanKind.CLIENT for s in settles.values())
    assert (settles[f"dead_letter {queue.dlq_name}"].attributes or {})["messaging.operation.name"] == "dead_letter"
    changes = [s for s in spans.get_finished_spans() if s.name == f"change_visibility {queue.name}"]
    assert len(changes) < sum(n == "lease extended" for n in names), "an extension made a settle span"
    # The DLQ copy: the producer's context travels on, and the error names the job's trace.
    assert queue.dlq_url is not None
    [dead] = [m for m in sqs.receive_all(queue.dlq_url) if json.loads(m["Body"])["kind"] == "bad"]
    assert "traceparent" in dead["MessageAttributes"]
    assert producer_context(dead) is not None
    [enqueue] = named(spans, "enqueue")
    assert producer_context(dead).trace_id == enqueue.context.trace_id  # type: ignore[union-attr]
    xray = producer_context({"Attributes": {"AWSTraceHeader": dead["Attributes"]["AWSTraceHeader"]}})
    assert xray is not None and xray.trace_id == enqueue.context.trace_id
    context = json.loads(dead["MessageAttributes"]["x-error-context"]["StringValue"])
    assert context["trace"]["trace_id"] == f"{enqueue.context.trace_id:032x}"


def test_without_trace_parent_a_job_starts_its_own_trace_linked_to_the_producer(
    sqs: Sqs, localstack_endpoint: str, health_file: str, spans: InMemorySpanExporter
) -> None:
    queue = sqs.create()
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        pass

    async def scenario() -> None:
        with trace.get_tracer("test").start_as_current_span("enqueue"):
            producer: Producer[Any]
            async with open_producer(queue.name, region=REGION, endpoint_url=localstack_endpoint) as producer:
                await producer.send({"n": 1})
        env = env_for(localstack_endpoint, queue.name, health_file, WORKER_TRACE_PARENT="false")
        async with running_worker(env, router):
            await wait_for(lambda: bool(named(spans, f"process {queue.name}")), what="the job's span")

    asyncio.run(scenario())
    [send] = named(spans, f"send {queue.name}")
    [process] = named(spans, f"process {queue.name}")
    assert process.parent is None and process.context.trace_id != send.context.trace_id
    assert [link.context.span_id for link in process.links] == [send.context.span_id]


def test_an_xray_header_alone_is_the_producers_context(
    sqs: Sqs, localstack_endpoint: str, health_file: str, spans: InMemorySpanExporter
) -> None:
    """A producer that sets only AWSTraceHeader (X-Ray SDKs, API Gateway, Lambda)."""
    queue = sqs.create()
    with trace.get_tracer("test").start_as_current_span("x-ray producer") as producer:
        header = xray_header(producer.get_span_context())
    sqs.client.send_message(
        QueueUrl=queue.url,
        MessageBody="{}",
        MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": header}},
    )
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        pass

    async def scenario() -> None:
        async with running_worker(env_for(localstack_endpoint, queue.name, health_file), router):
            await wait_for(lambda: bool(named(spans, f"process {queue.name}")), what="the job's span")

    asyncio.run(scenario())
    [process] = named(spans, f"process {queue.name}")
    assert process.context.trace_id == producer.get_span_context().trace_id
    assert process.parent is not None and process.parent.span_id == producer.get_span_context().span_id


def lease_run(sqs: Sqs, endpoint: str, health_file: str) -> tuple[float, float]:
    """Extensions and lost leases for three jobs of 5 s on a 2 s lease."""
    queue = sqs.create(visibility=2)
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        await asyncio.sleep(5)

    sqs.send(queue, [{"n": i} for i in range(3)])
    done = lambda: metric("jobs_processed_total", queue=queue.name, outcome="success") == 3  # noqa: E731

    async def scenario() -> None:
        env = env_for(endpoint, queue.name, health_file, WORKER_VISIBILITY_TIMEOUT_SECONDS=2)
        async with running_worker(env, router):
            await wait_for(done, timeout=90, what="three jobs")

    asyncio.run(scenario())
    return (
        metric("worker_lease_extensions_total", queue=queue.name),
        metric("worker_leases_lost_total", queue=queue.name),
    )


def test_tracing_leaves_lease_extension_alone(sqs: Sqs, localstack_endpoint: str, health_file: str) -> None:
    """The same jobs with tracing off and on: every lease kept, and each job extended at
    least as often as a 5 s job on 2 s leases must be (twice), each extension an event on
    its span. How many more a job gets depends on the machine's timing, not on tracing:
    under load the counts of the two runs differed by 3 of 15, so they are not compared."""
    extended_off, lost_off = lease_run(sqs, localstack_endpoint, health_file)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _reset_provider()
    trace.set_tracer_provider(provider)
    try:
        extended_on, lost_on = lease_run(sqs, localstack_endpoint, health_file)
    finally:
        provider.shutdown()
        _reset_provider()
    assert lost_off == lost_on == 0
    assert extended_off >= 6 and extended_on >= 6
    jobs = [s for s in exporter.get_finished_spans() if s.name.startswith("process ")]
    per_job = [sum(name == "lease extended" for name, _ in events(s)) for s in jobs]
    assert len(per_job) == 3 and min(per_job) >= 2
    assert sum(per_job) == extended_on


def test_a_worker_process_exports_its_spans_over_otlp_http(sqs: Sqs, localstack_endpoint: str, tmp_path: Path) -> None:
    """The real service: `run` configures the SDK from the OTEL_* environment and exports
    each job's span to the collector's OTLP/HTTP endpoint (here a receiver of the test's)."""
    queue = sqs.create()
    sqs.send(queue, [{"id": "traced"}])
    received: list[str] = []
    port = free_port()

    async def traces(request: web.Request) -> web.Response:
        export = ExportTraceServiceRequest()
        export.ParseFromString(await request.read())
        for resource in export.resource_spans:
            service = next(a.value.string_value for a in resource.resource.attributes if a.key == "service.name")
            received.extend(f"{service}: {span.name}" for scope in resource.scope_spans for span in scope.spans)
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def scenario() -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", traces)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "WORKER_"))},
            **env_for(localstack_endpoint, queue.name, str(tmp_path / "progress")),
            "TEST_QUEUE": queue.name,
            "TEST_RECORD_FILE": str(tmp_path / "records.jsonl"),
            "OTEL_SERVICE_NAME": "traced-worker",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
        worker = subprocess.Popen(
            [sys.executable, "-m", PACKAGE, "run"],
            env=env,
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            await wait_for(lambda: f"traced-worker: process {queue.name}" in received, timeout=120, what="the span")
        finally:
            worker.send_signal(signal.SIGTERM)
            out, _ = await asyncio.to_thread(worker.communicate, timeout=120)
            await runner.cleanup()
        assert worker.returncode == 0, out.decode()[-3000:]

    asyncio.run(scenario())
    assert f"traced-worker: receive {queue.name}" in received


def test_job_durations_carry_their_trace_as_an_exemplar(
    sqs: Sqs, localstack_endpoint: str, health_file: str, spans: InMemorySpanExporter
) -> None:
    """OpenMetrics, when the scraper asks for it (Prometheus with exemplar storage does)."""
    import aiohttp

    queue = sqs.create()
    sqs.send(queue, [{"n": 1}])
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        pass

    port = free_port()
    scraped: dict[str, str] = {}

    async def scenario() -> None:
        env = env_for(
            localstack_endpoint, queue.name, health_file, WORKER_METRICS_PORT=port, WORKER_METRICS_HOST="127.0.0.1"
        )
        async with running_worker(env, router):
            await wait_for(lambda: bool(named(spans, f"process {queue.name}")), what="the job's span")
            async with aiohttp.ClientSession() as session:
                for accept in ("application/openmetrics-text; version=1.0.0", "text/plain"):
                    async with session.get(f"http://127.0.0.1:{port}/metrics", headers={"Accept": accept}) as r:
                        scraped[accept.split(";")[0]] = await r.text()

    asyncio.run(scenario())
    [process] = named(spans, f"process {queue.name}")
    trace_id = f"{process.context.trace_id:032x}"
    lines = [line for line in scraped["application/openmetrics-text"].splitlines() if f'queue="{queue.name}"' in line]
    assert any(line.startswith("job_duration_seconds_bucket") and f'trace_id="{trace_id}"' in line for line in lines)
    assert trace_id not in scraped["text/plain"]  # the classic format has no exemplars


def test_a_job_given_back_at_shutdown_says_so_on_its_span(
    sqs: Sqs, localstack_endpoint: str, health_file: str, spans: InMemorySpanExporter
) -> None:
    queue = sqs.create()
    sqs.send(queue, [{"n": 1}])
    started = asyncio.Event()
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        started.set()
        await job.wait_stopping()
        job.raise_if_stopping()  # save progress, give the message back for another worker

    async def scenario() -> None:
        async with running_worker(env_for(localstack_endpoint, queue.name, health_file), router):
            await asyncio.wait_for(started.wait(), 60)

    asyncio.run(scenario())
    [process] = named(spans, f"process {queue.name}")
    assert ("released", {"reason": "shutdown"}) in events(process)
    assert (process.attributes or {})["sqs_worker.outcome"] == "released"
    assert sqs.counts(queue.url) == (1, 0)  # visible again at once


def test_a_job_not_sampled_carries_no_earlier_jobs_trace_on_its_log_lines(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    """A FIFO group's jobs run one after another in one task: when the first is sampled and
    the second is not, the second's log lines must not name the first's trace."""
    from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

    queue = sqs.create(fifo=True)
    first, _ = sqs.send(queue, [{"n": 1}, {"n": 2}], group="g")

    class FirstOnly(Sampler):
        def should_sample(self, parent_context: Any, trace_id: int, name: str, *args: Any, **kwargs: Any) -> Any:
            attributes = kwargs.get("attributes") or (args[1] if len(args) > 1 else {}) or {}
            keep = attributes.get("messaging.message.id") == first
            return SamplingResult(Decision.RECORD_AND_SAMPLE if keep else Decision.DROP)

        def get_description(self) -> str:
            return "the first message only"

    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=FirstOnly())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _reset_provider()
    trace.set_tracer_provider(provider)
    keys: dict[int, dict[str, Any]] = {}
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        keys[job.payload["n"]] = dict(get_logger().thread_safe_get_current_keys())

    async def scenario() -> None:
        async with running_worker(env_for(localstack_endpoint, queue.name, health_file), router):
            await wait_for(lambda: len(keys) == 2, what="both jobs")

    try:
        asyncio.run(scenario())
    finally:
        provider.shutdown()
        _reset_provider()
    [process] = named(exporter, f"process {queue.name}")
    assert keys[1]["trace_id"] == f"{process.context.trace_id:032x}"
    assert keys[2].get("trace_id") is None and keys[2].get("span_id") is None
