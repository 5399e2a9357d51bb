"""Traces across the queue after OpenTelemetry's messaging conventions for AWS SQS.

The engine uses the OpenTelemetry API only. Nothing is recorded until a TracerProvider is
installed: `configure()` installs the SDK's, exporting over OTLP/HTTP, when the SDK is
there (the `otlp` extra: a service baked with `tracing=yes`) and the standard environment
does not turn it off (`OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none`). Everything
else is the SDK's own standard environment: `OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_TRACES_SAMPLER`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`... An endpoint on
X-Ray's own OTLP host (`https://xray.<region>.amazonaws.com/v1/traces`) gets its requests
signed with the worker's AWS credentials (xray.py): no collector in between.

On the wire:
- the producer puts W3C `traceparent` / `tracestate` in String message attributes while the
  budget allows (10 attributes, one always left for a large payload's pointer), and the
  X-Ray form in the `AWSTraceHeader` system attribute, which counts against no quota;
- the consumer reads `traceparent` first, then `AWSTraceHeader`.

The spans (names `{messaging.operation.name} {queue}`):
- `receive <queue>`, CLIENT: one per ReceiveMessage, `messaging.batch.message_count` the
  messages it brought;
- `process <queue>`, CONSUMER (job_spans.py): one per job, with the producer's context as its parent and
  as a link (`WORKER_TRACE_PARENT=false`: a link only, a trace of its own per job); the
  job's life as events; `error.type` when it failed;
- `delete <queue>`, `change_visibility <queue>` (a retry's delay, a release) and
  `dead_letter <dlq>` (the copy sent to the DLQ), CLIENT, `messaging.operation.type=settle`.
Lease extensions and queue look-ups are no messaging operations: no span (the extensions
are events on the jobs' spans). Every span carries the registry's `messaging.system`,
`messaging.operation.type`, `messaging.operation.name`, `messaging.destination.name`;
attributes of the engine's own are under `sqs_worker.` (VENDOR), never `messaging.`.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger("sqs_worker_engine.tracing")
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
XRAY_ATTRIBUTE = "AWSTraceHeader"
MAX_ATTRIBUTES = 10
SCOPE = "sqs_worker_engine"
VENDOR = "sqs_worker"  # the prefix of the engine's own span attributes
# SQS operations that are messaging operations: (messaging.operation.type, .name).
OPERATIONS: dict[str, tuple[str, str]] = {
    "ReceiveMessage": ("receive", "receive"),
    "DeleteMessageBatch": ("settle", "delete"),
    "ChangeMessageVisibilityBatch": ("settle", "change_visibility"),
    "SendMessage": ("settle", "dead_letter"),  # the worker's one send: the copy to the DLQ
}
_W3C = TraceContextTextMapPropagator()
_XRAY = re.compile(r"Root=1-([0-9a-f]{8})-([0-9a-f]{24});Parent=([0-9a-f]{16});Sampled=([01])")


def tracer() -> trace.Tracer:
    return _tracer(trace.get_tracer_provider())


@functools.lru_cache(maxsize=4)
def _tracer(provider: trace.TracerProvider) -> trace.Tracer:
    # One per provider: the SDK builds a new tracer (and its scope) on every get_tracer,
    # which was a third of a traced job's cost.
    from .._version import ENGINE_VERSION

    return provider.get_tracer(SCOPE, ENGINE_VERSION)


def enabled() -> bool:
    """Whether a real TracerProvider is installed (else every span is a no-op)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def configure(service_name: str) -> Any | None:
    """Install the SDK's TracerProvider with an OTLP/HTTP exporter, if the SDK is installed
    and the environment does not turn it off; returns the provider (to shut down at exit)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return None
    if enabled():
        return None  # the application installed its own
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        return None  # no SDK: a service baked without tracing
    from . import xray

    resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME") or service_name})
    provider = TracerProvider(resource=resource)  # the sampler comes from OTEL_TRACES_SAMPLER
    region = xray.endpoint_region(traces_endpoint())
    session = xray.signed_session(region) if region else None
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(session=session)))
    trace.set_tracer_provider(provider)
    log.info("tracing: spans exported over OTLP/HTTP%s", f" to X-Ray in {region}, signed" if region else "")
    return provider


def traces_endpoint() -> str:
    """Where the OTLP/HTTP exporter sends spans: the SDK's own rule over its variables."""
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if endpoint:
        return endpoint
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or "http://localhost:4318"
    return base.rstrip("/") + "/v1/traces"


# -- the producer's side -------------------------------------------------------------


def xray_header(context: SpanContext) -> str:
    trace_id = f"{context.trace_id:032x}"
    sampled = 1 if context.trace_flags.sampled else 0
    return f"Root=1-{trace_id[:8]}-{trace_id[8:]};Parent={context.span_id:016x};Sampled={sampled}"


def inject(message_attributes: dict[str, Any], system_attributes: dict[str, Any]) -> None:
    """The producer's hook: the current context onto one outgoing message."""
    current = trace.get_current_span().get_span_context()
    if not current.is_valid:
        return
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    room = MAX_ATTRIBUTES - 1 - len(message_attributes)  # one kept for a large payload's pointer
    for key in (TRACEPARENT, TRACESTATE):
        if key in carrier and key not in message_attributes and room > 0:
            message_attributes[key] = {"DataType": "String", "StringValue": carrier[key]}
            room -= 1
        elif key == TRACEPARENT:
            break  # a tracestate without its traceparent means nothing
    system_attributes[XRAY_ATTRIBUTE] = {"DataType": "String", "StringValue": xray_header(current)}


# -- the consumer's side -------------------------------------------------------------


def producer_context(message: Mapping[str, Any]) -> SpanContext | None:
    """The context a message was sent in: its traceparent, else its AWSTraceHeader."""
    attributes = message.get("MessageAttributes") or {}
    carrier = {
        key: str(attributes[key]["StringValue"])
        for key in (TRACEPARENT, TRACESTATE)
        if key in attributes and "StringValue" in attributes[key]
    }
    if TRACEPARENT in carrier:
        found = trace.get_current_span(_W3C.extract(carrier)).get_span_context()
        if found.is_valid:
            return found
    header = (message.get("Attributes") or {}).get(XRAY_ATTRIBUTE)
    match = _XRAY.search(str(header or ""))
    if match is None:
        return None
    high, low, parent, sampled = match.groups()
    flags = TraceFlags(TraceFlags.SAMPLED if sampled == "1" else TraceFlags.DEFAULT)
    return SpanContext(int(high + low, 16), int(parent, 16), is_remote=True, trace_flags=flags)


def client_span(
    operation: str, params: Mapping[str, Any], client_id: str, start_time: int | None = None
) -> Span | None:
    """The CLIENT span of one SQS call that is a messaging operation (OPERATIONS), started
    now (or at `start_time`, in ns since the epoch); None for the others. The caller ends it
    with `client_span_ended`."""
    kind = OPERATIONS.get(operation)
    if kind is None:
        return None
    operation_type, name = kind
    url = str(params.get("QueueUrl", ""))
    queue = url.rsplit("/", 1)[-1]
    attributes: dict[str, Any] = {
        "messaging.system": "aws_sqs",
        "messaging.operation.type": operation_type,
        "messaging.operation.name": name,
        "messaging.destination.name": queue,
        "aws.sqs.queue.url": url,
        f"{VENDOR}.sqs_operation": operation,  # the API call (the registry's rpc.* is for RPC spans)
    }
    if client_id:
        attributes["messaging.client.id"] = client_id
    entries = params.get("Entries")
    if isinstance(entries, list):
        attributes["messaging.batch.message_count"] = len(entries)
    # Never a child of whatever happens to be current (a job whose settle filled a batch).
    return tracer().start_span(
        f"{name} {queue}",
        context=otel_context.Context(),
        kind=SpanKind.CLIENT,
        attributes=attributes,
        start_time=start_time,
    )


def client_span_ended(span: Span, operation: str, outcome: str, response: Mapping[str, Any] | None) -> None:
    """`outcome`: "ok", SQS's error code, or "cancelled" (abandoned before SQS answered:
    no error for a long poll given up at shutdown, one for anything else). A batch whose
    entries failed carries the first entry's code as its `error.type`."""
    receive = operation == "ReceiveMessage"
    if response is not None:
        if receive:
            span.set_attribute("messaging.batch.message_count", len(response.get("Messages") or []))
        failed = response.get("Failed") or []
        if failed:
            span.set_attribute(f"{VENDOR}.failed_entries", len(failed))
            outcome = str(failed[0].get("Code", "_OTHER"))
    if outcome == "cancelled" and receive:
        span.set_attribute(f"{VENDOR}.cancelled", True)
    elif outcome != "ok":
        span.set_attribute("error.type", outcome)
        span.set_status(Status(StatusCode.ERROR, outcome))
    span.end()
