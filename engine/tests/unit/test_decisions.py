"""The engine's decisions, as tables: settlement, retry delay, FIFO hold-back, delivery
transitions, lease extension, DLQ size fitting."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from sqs_worker_engine.formats.dlq import attributes_size, fit_to_size
from sqs_worker_engine.runtime.settling.decisions import (
    DeadLetter,
    Delete,
    Facts,
    Release,
    RetryAfter,
    RetryInPlace,
    RetryPolicy,
    Untouched,
    group_goes_on,
    plan,
    retry_delay,
)
from sqs_worker_engine.runtime.settling.delivery import (
    LEGAL,
    Delivery,
    IllegalTransitionError,
    LeaseBook,
    State,
    due_for_extension,
)

POLICY = RetryPolicy(base=10, cap=300)


def facts(attempt: int = 1, max_receive: int | None = 5, dlq: bool = True, mates: bool = False, asked=None) -> Facts:
    return Facts(attempt=attempt, max_receive=max_receive, has_dlq=dlq, mates_waiting=mates, requested_delay=asked)


@pytest.mark.parametrize(
    ("outcome", "given", "expected"),
    [
        ("success", facts(), Delete()),
        ("success", facts(attempt=5), Delete()),
        ("lease_lost", facts(), Untouched()),
        ("released", facts(), Release()),
        ("dead_letter", facts(), DeadLetter("boom")),
        ("dead_letter", facts(dlq=False, max_receive=None), RetryAfter(10)),  # nowhere to send it: retry
        ("retry", facts(attempt=1), RetryAfter(10)),
        ("retry", facts(attempt=3), RetryAfter(40)),
        ("timeout", facts(attempt=2), RetryAfter(20)),
        ("retry", facts(attempt=5), DeadLetter("gave up after 5 attempts: boom")),  # exhausted: the worker DLQs it
        ("retry", facts(attempt=7), DeadLetter("gave up after 7 attempts: boom")),
        ("retry", facts(attempt=9, max_receive=None, dlq=False), RetryAfter(300)),  # no redrive: retries forever
        ("retry", facts(attempt=1, mates=True), RetryInPlace(10)),  # FIFO: keep the group, retry here
        ("retry", facts(attempt=5, mates=True), DeadLetter("gave up after 5 attempts: boom")),
        ("retry", facts(attempt=1, asked=3), RetryAfter(3)),  # RetryLater(3)
        ("retry", facts(attempt=1, asked=3, mates=True), RetryInPlace(3)),
        ("retry", facts(attempt=5, asked=3), DeadLetter("gave up after 5 attempts: boom")),  # still an attempt
    ],
)
def test_plan(outcome: str, given: Facts, expected: object) -> None:
    assert plan(outcome, given, POLICY, "boom", rand=1.0) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("attempt", "rand", "asked", "expected"),
    [
        (1, 0.0, None, 5),
        (1, 1.0, None, 10),
        (4, 0.0, None, 40),
        (4, 1.0, None, 80),
        (6, 1.0, None, 300),  # capped
        (60, 0.5, None, 225),
        (1, 0.0, 0, 0),
        (1, 0.0, 90_000, 43_200),  # never past SQS's 12-hour visibility limit
    ],
)
def test_retry_delay(attempt: int, rand: float, asked: float | None, expected: int) -> None:
    assert retry_delay(attempt, POLICY, asked, rand) == expected


def test_the_default_schedule_spends_minutes_not_seconds_on_five_receives() -> None:
    low = sum(retry_delay(n, POLICY, rand=0.0) for n in range(1, 5))
    high = sum(retry_delay(n, POLICY, rand=1.0) for n in range(1, 5))
    assert (low, high) == (75, 150)


@pytest.mark.parametrize(
    ("settlement", "goes_on"),
    [
        (Delete(), True),
        (DeadLetter("x"), True),
        (RetryAfter(5), False),
        (RetryInPlace(5), False),
        (Release(), False),
        (Untouched(), False),
    ],
)
def test_a_fifo_group_goes_on_only_past_a_message_gone_for_good(settlement: object, goes_on: bool) -> None:
    assert group_goes_on(settlement) is goes_on  # type: ignore[arg-type]


def test_every_state_has_its_legal_edges_and_the_final_ones_none() -> None:
    assert set(LEGAL) == set(State)
    assert {s for s, to in LEGAL.items() if not to} == {State.SETTLED, State.RELEASED, State.LOST}
    reachable = {State.RECEIVED}
    frontier = [State.RECEIVED]
    while frontier:
        for to in LEGAL[frontier.pop()]:
            if to not in reachable:
                reachable.add(to)
                frontier.append(to)
    assert reachable == set(State)


def _book_and_delivery(state: State) -> tuple[LeaseBook, Delivery]:
    book = LeaseBook("q", visibility=30, fraction=0.5)
    delivery = book.receive({"MessageId": "m", "ReceiptHandle": "h"}, received_at=0.0)
    delivery.state = state
    return book, delivery


@pytest.mark.parametrize("start", list(State))
@pytest.mark.parametrize("to", list(State))
def test_only_legal_transitions_happen(start: State, to: State) -> None:
    book, delivery = _book_and_delivery(start)
    if to in LEGAL[start]:
        book._move(delivery, to)
        assert delivery.state is to
    else:
        with pytest.raises(IllegalTransitionError):
            book._move(delivery, to)


@pytest.mark.parametrize(
    ("state", "action", "now", "due"),
    [
        (State.RECEIVED, None, 14.9, False),  # not yet: extends at half the visibility
        (State.RECEIVED, None, 15.0, True),
        (State.RUNNING, None, 20.0, True),
        (State.SETTLING, "delete", 20.0, True),  # a delete stays covered until confirmed
        (State.SETTLING, "visibility", 20.0, False),  # would overwrite the retry delay / release
        (State.LOST, None, 20.0, False),
        (State.SETTLED, None, 20.0, False),
        (State.RELEASED, None, 20.0, False),
    ],
)
def test_due_for_extension(state: State, action: str | None, now: float, due: bool) -> None:
    _, delivery = _book_and_delivery(state)
    delivery.action = action  # type: ignore[assignment]
    assert due_for_extension(delivery, now, 30, 0.5) is due


def test_one_extension_call_at_a_time_per_lease() -> None:
    async def scenario() -> bool:
        _, delivery = _book_and_delivery(State.RUNNING)
        delivery.extension = asyncio.ensure_future(asyncio.sleep(1))
        try:
            return due_for_extension(delivery, 20.0, 30, 0.5)
        finally:
            delivery.extension.cancel()

    assert asyncio.run(scenario()) is False


@pytest.mark.parametrize(
    ("state", "now", "usable"),
    [
        (State.RECEIVED, 27.9, True),
        (State.RUNNING, 28.0, False),  # within the 2 s safety margin of the 30 s deadline
        (State.SETTLING, 10.0, True),
        (State.LOST, 1.0, False),
        (State.SETTLED, 1.0, False),
    ],
)
def test_may_use_is_the_only_gate_for_a_handle(state: State, now: float, usable: bool) -> None:
    book, delivery = _book_and_delivery(state)
    assert book.may_use(delivery, now) is usable


def test_settling_too_late_loses_the_lease_instead() -> None:
    async def scenario() -> tuple[bool, State, bool]:
        book, delivery = _book_and_delivery(State.RUNNING)
        ok = book.settling(delivery, "delete", now=29.0)
        return ok, delivery.state, delivery.lost().done()

    assert asyncio.run(scenario()) == (False, State.LOST, True)


def _request(body: str, error_message: str, context: str = "{}") -> dict[str, Any]:
    return {
        "QueueUrl": "u",
        "MessageBody": body,
        "MessageAttributes": {
            "tenant": {"DataType": "String", "StringValue": "acme"},
            "x-error-type": {"DataType": "String", "StringValue": "ValueError"},
            "x-error-message": {"DataType": "String", "StringValue": error_message},
            "x-error-context": {"DataType": "String", "StringValue": context},
        },
    }


WORKER_CONTEXT = json.dumps({"written_by": "sqs-worker-engine", "source_queue": "q", "why": "v" * 300})


@pytest.mark.parametrize(
    ("body", "limit", "kept"),
    [
        (100, 10_000, {"tenant", "x-error-type", "x-error-message", "x-error-context"}),
        (800, 1024, {"tenant", "x-error-type", "x-error-message", "x-error-context"}),  # the context shrinks first
        (900, 1024, {"tenant", "x-error-type", "x-error-context"}),  # then the message (too little room for a cut)
        (930, 1024, {"tenant", "x-error-context"}),  # then the type
        (990, 1024, {"tenant"}),  # then the marker: the body and the original attributes never
    ],
)
def test_fit_to_size_gives_way_ours_first(body: int, limit: int, kept: set[str]) -> None:
    fitted = fit_to_size(_request("x" * body, "why " * 30, WORKER_CONTEXT), limit)
    assert fitted is not None
    assert set(fitted["MessageAttributes"]) == kept
    assert fitted["MessageBody"] == "x" * body
    assert len(fitted["MessageBody"]) + attributes_size(fitted["MessageAttributes"]) <= limit
    if "x-error-context" in kept and body > 100:
        assert json.loads(fitted["MessageAttributes"]["x-error-context"]["StringValue"])["written_by"]


def test_fit_to_size_cuts_the_error_message_when_that_is_enough() -> None:
    fitted = fit_to_size(_request("x" * 850, "why " * 40), 1024)
    assert fitted is not None
    message = fitted["MessageAttributes"]["x-error-message"]["StringValue"]
    assert message.endswith("...") and message.startswith("why why")
    assert 850 + attributes_size(fitted["MessageAttributes"]) <= 1024


def test_fit_to_size_refuses_a_body_that_cannot_fit() -> None:
    assert fit_to_size(_request("x" * 1030, "why"), 1024) is None


def test_every_outcome_has_a_plan_and_a_report_from_the_one_list() -> None:
    """The outcome list is written once (outcomes.OUTCOMES, derived from the type): an
    outcome some table lacks fails here, not as a KeyError while a message settles."""
    from typing import get_args

    from sqs_worker_engine.base.telemetry.events import Events
    from sqs_worker_engine.base.telemetry.health import Health
    from sqs_worker_engine.handlers.outcomes import OUTCOMES, Ending, Outcome
    from sqs_worker_engine.runtime.reporting import QueueReport

    assert get_args(Outcome) == OUTCOMES and len(set(OUTCOMES)) == len(OUTCOMES)
    report = QueueReport("outcomes-table", "w-1", Events(), Health(60, None), concurrency=1)
    for outcome in OUTCOMES:
        for facts in (Facts(1, 5, True, False), Facts(5, 5, True, True), Facts(1, None, False, False)):
            plan(outcome, facts, RetryPolicy(1, 10), "why")
        report.ended("m-1", Ending(outcome, RuntimeError("x"), 0.1), will_retry=False)
