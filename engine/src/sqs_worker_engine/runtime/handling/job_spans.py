"""A job's `process <queue>` span (tracing.py has the conventions, the provider and the
SQS calls' client spans): what the handler's logs and child spans belong to, and what
became of the message, as events, until it is settled."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanKind, Status, StatusCode

from ...base.telemetry.tracing import VENDOR, producer_context, tracer
from ...handlers.outcomes import Ending
from ..settling.decisions import DeadLetter, Release, RetryAfter, RetryInPlace, Settlement

# A job's endings that are failures of its processing (error.type, status ERROR).
FAILED = frozenset({"retry", "dead_letter", "timeout", "lease_lost", "deferred"})


PUBLIC_MODULES = {"sqs_worker_engine.base.errors": "sqs_worker_engine.errors"}


def error_type(error: BaseException | None, outcome: str) -> str:
    """`error.type` of a failed job: its exception's class, fully qualified (builtins by
    name alone), or the outcome itself when nothing was raised (a lost lease)."""
    if error is None:
        return outcome
    cls = type(error)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    # The engine's own errors keep the name spans gave them before the engine had layer
    # folders (sqs_worker_engine.errors.X): dashboards and alerts match on it.
    module = PUBLIC_MODULES.get(cls.__module__, cls.__module__)
    return f"{module}.{cls.__qualname__}"


class JobSpan:
    """One job's `process <queue>` span: started before the handler is called, current
    while it runs (its logs and child spans belong to it), ended once the message is settled,
    so the settlement is on it too."""

    def __init__(
        self,
        queue: str,
        message: Mapping[str, Any],
        worker_id: str,
        attempt: int,
        as_parent: bool = True,
    ) -> None:
        linked = producer_context(message)
        parent = trace.set_span_in_context(NonRecordingSpan(linked)) if linked is not None and as_parent else None
        attributes: dict[str, Any] = {
            "messaging.system": "aws_sqs",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": queue,
            "messaging.message.id": str(message.get("MessageId", "")),
            "messaging.client.id": worker_id,
            f"{VENDOR}.receive_count": attempt,
        }
        group = (message.get("Attributes") or {}).get("MessageGroupId")
        if group:
            attributes[f"{VENDOR}.message_group_id"] = group  # the registry has no SQS group attribute
        self.span: Span = tracer().start_span(
            f"process {queue}",
            context=parent if parent is not None else otel_context.Context(),
            kind=SpanKind.CONSUMER,
            links=[Link(linked)] if linked is not None else None,
            attributes=attributes,
        )
        self._token: object | None = None
        context = self.span.get_span_context()
        # Fixed for the span's life, and asked for on every log binding, exemplar and DLQ copy.
        self.ids: dict[str, str] = (
            {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}
            if context.is_valid and self.span.is_recording()
            else {}
        )

    def __enter__(self) -> JobSpan:
        """Make the span current (for the handler's task, created meanwhile)."""
        self._token = otel_context.attach(trace.set_span_in_context(self.span))
        return self

    def __exit__(self, *_: object) -> None:
        if self._token is not None:
            otel_context.detach(self._token)  # type: ignore[arg-type]
            self._token = None

    def event(self, name: str, **attributes: Any) -> None:
        self.note(name, attributes)

    def note(self, name: str, attributes: Mapping[str, Any]) -> None:
        """A span event (the lease book's observer has this shape)."""
        self.span.add_event(name, {k: v for k, v in attributes.items() if v is not None})

    def log_ids(self) -> dict[str, str | None]:
        """Its trace and span ids for the job's log lines; None for a span not sampled: the
        log formatter drops None, so no earlier job's trace lingers on this one's lines
        (one task runs a FIFO group's jobs in turn)."""
        ids: dict[str, str | None] = {"trace_id": None, "span_id": None}
        return ids | self.ids

    def settled(self, settlement: Settlement, ending: Ending) -> None:
        """What became of the message, as an event; then the span ends."""
        if isinstance(settlement, RetryAfter | RetryInPlace):
            self.event("retry", delay_seconds=settlement.seconds, in_place=isinstance(settlement, RetryInPlace))
        elif isinstance(settlement, DeadLetter):
            self.event("dead_letter", reason=settlement.why[:1024])
        elif isinstance(settlement, Release):
            self.event("released", reason="shutdown" if ending.outcome == "released" else ending.outcome)
        self.end(ending.outcome, ending.error)

    def end(self, outcome: str, error: BaseException | None) -> None:
        self.span.set_attribute(f"{VENDOR}.outcome", outcome)
        if outcome in FAILED:
            self.span.set_attribute("error.type", error_type(error, outcome))
            if error is not None:
                self.span.record_exception(error)
            description = f"{type(error).__name__}: {error}" if error is not None else outcome
            self.span.set_status(Status(StatusCode.ERROR, description[:256]))
        self.span.end()
