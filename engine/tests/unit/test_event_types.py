"""The event map is typed: mypy (strict, over the tests too) refuses an unknown event name
or a wrong field where an event is emitted or subscribed to. Each refusal below carries a
`type: ignore` for the error it must raise; strict mypy reports an ignore that no longer
silences anything, so a check that stopped working fails the type check."""

from __future__ import annotations

from typing import Literal, assert_type

import pytest

from sqs_worker_engine.base.telemetry.events import EVENTS, Events, JobCompleted


def mistakes_mypy_refuses(events: Events) -> None:  # never called: read by mypy alone
    events.emit("job:exploded", worker_id="w")  # type: ignore[call-overload]  # no such event
    events.emit("job:completed", worker_id="w", job_id="1", queue="q", result=None)  # type: ignore[call-overload]
    events.emit("stopped", worker_id="w", reason=3)  # type: ignore[call-overload]  # a wrong field's type
    events.on("job:exploded", print)  # type: ignore[call-overload]
    events.on("job:completed", lambda e: e["percent"])  # type: ignore[call-overload]  # job:completed has no percent


def what_a_listener_reads(events: Events) -> None:  # never called: read by mypy alone
    def completed(event: JobCompleted) -> None:
        assert_type(event["duration"], float)
        assert_type(event["event"], Literal["job:completed"])

    events.on("job:completed", completed)
    events.on("job:failed", completed)  # type: ignore[call-overload]  # a listener of another event


def test_an_unknown_event_is_refused_naming_the_known_ones() -> None:
    events = Events()
    for call in (lambda: events.emit("job:exploded"), lambda: events.on("job:exploded", print)):  # type: ignore[call-overload]
        with pytest.raises(ValueError, match="unknown event 'job:exploded'; known: started, stopped") as caught:
            call()
        assert all(name in str(caught.value) for name in EVENTS)
