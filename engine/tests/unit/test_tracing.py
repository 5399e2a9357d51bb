"""The trace context on the wire (tracing.py): what the producer puts on a message within
SQS's attribute budget, and what the consumer reads back, W3C first, then X-Ray."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from sqs_worker_engine.base.telemetry.tracing import inject, producer_context, xray_header

CONTEXT = SpanContext(
    0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, is_remote=False, trace_flags=TraceFlags(1)
)


def injected(attributes: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    system: dict[str, Any] = {}
    with trace.use_span(NonRecordingSpan(CONTEXT)):
        inject(attributes, system)
    return attributes, system


def test_the_xray_header_is_amazons_format_and_reads_back():
    header = xray_header(CONTEXT)
    assert header == "Root=1-4bf92f35-77b34da6a3ce929d0e0e4736;Parent=00f067aa0ba902b7;Sampled=1"
    read = producer_context({"Attributes": {"AWSTraceHeader": header}})
    assert read is not None and (read.trace_id, read.span_id, read.is_remote) == (
        CONTEXT.trace_id,
        CONTEXT.span_id,
        True,
    )


def test_inject_puts_traceparent_and_the_xray_header_on_a_message():
    attributes, system = injected({})
    assert attributes["traceparent"]["StringValue"] == "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert system["AWSTraceHeader"]["StringValue"] == xray_header(CONTEXT)
    read = producer_context({"MessageAttributes": attributes})
    assert read is not None and read.span_id == CONTEXT.span_id


def test_inject_keeps_within_the_attribute_budget_and_a_slot_for_a_pointer():
    full = {f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(9)}
    attributes, system = injected(dict(full))
    assert attributes == full  # nine already: the tenth is a large payload's
    assert "AWSTraceHeader" in system  # the system attribute counts against no quota
    eight = {f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(8)}
    attributes, _ = injected(dict(eight))
    assert set(attributes) - set(eight) == {"traceparent"}


def test_no_span_no_context():
    attributes: dict[str, Any] = {}
    system: dict[str, Any] = {}
    inject(attributes, system)
    assert attributes == {} and system == {}


def test_traceparent_wins_over_the_xray_header_and_garbage_is_no_context():
    other = SpanContext(0x1, 0x2, is_remote=False, trace_flags=TraceFlags(1))
    attributes, _ = injected({})
    message = {"MessageAttributes": attributes, "Attributes": {"AWSTraceHeader": xray_header(other)}}
    read = producer_context(message)
    assert read is not None and read.trace_id == CONTEXT.trace_id
    assert producer_context({"MessageAttributes": {"traceparent": {"StringValue": "00-zz"}}}) is None
    assert producer_context({"Attributes": {"AWSTraceHeader": "Root=nonsense"}}) is None
