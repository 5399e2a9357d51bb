"""The rate limit's token bucket and the pause's breaker (throttle.py): pure, on a clock the
tests hold. The LocalStack tests run them through the worker (test_throttling.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sqs_worker_engine.decisions import DeadLetter, Facts, RetryAfter, RetryInPlace, RetryPolicy, plan
from sqs_worker_engine.errors import DownstreamUnavailable
from sqs_worker_engine.outcomes import classify
from sqs_worker_engine.throttle import Breaker, TokenBucket, parse_rate


@pytest.mark.parametrize(
    ("text", "per_second"), [("50/s", 50), ("3000/min", 50), ("0.5/s", 0.5), ("7200 / h", 2), ("1/second", 1)]
)
def test_rates_are_read_in_their_units(text: str, per_second: float):
    assert parse_rate(text) == per_second


@pytest.mark.parametrize("text", ["50", "fast", "50/day", "-1/s", "0/s", "/s"])
def test_a_rate_that_is_not_one_is_refused_saying_the_form(text: str):
    with pytest.raises(ValueError, match=r"N/s|above 0"):
        parse_rate(text)


@given(
    rate=st.floats(min_value=0.5, max_value=500),
    steps=st.lists(st.tuples(st.floats(min_value=0, max_value=2), st.integers(1, 10)), max_size=200),
)
def test_the_bucket_never_grants_more_than_its_rate_allows(rate: float, steps: list[tuple[float, int]]):
    """Over any run: granted <= one bucket of burst + rate x elapsed."""
    bucket = TokenBucket(rate, now=0.0)
    now = granted = 0.0
    for advance, ask in steps:
        now += advance
        granted += bucket.take(ask, now)
        assert granted <= bucket.capacity + rate * now + 1e-9


def test_tokens_of_messages_that_never_came_go_back():
    bucket = TokenBucket(10, now=0.0)
    assert bucket.take(10, 0.0) == 10
    assert bucket.take(1, 0.0) == 0 and bucket.wait(0.0) == pytest.approx(0.1)
    bucket.give_back(7)  # the receive brought 3
    assert bucket.take(10, 0.0) == 7


def test_a_pause_lets_nothing_through_then_one_probe():
    breaker = Breaker()
    assert breaker.allowed(10, 0.0) == 10
    assert breaker.trouble(1.0, 5.0, received=0.5) is True
    assert breaker.allowed(10, 3.0) == 0 and breaker.wait(3.0) == pytest.approx(3.0)
    assert breaker.allowed(10, 6.0) == 1  # the probe
    assert breaker.allowed(10, 6.0) == 0  # one at a time
    assert breaker.answered(received=6.0, handled=True) is True
    assert breaker.allowed(10, 6.1) == 10 and not breaker.paused


def test_jobs_already_running_neither_end_nor_lengthen_the_pause_beyond_their_ask():
    breaker = Breaker()
    breaker.trouble(1.0, 5.0, received=0.5)
    assert breaker.answered(received=0.9, handled=True) is False  # started before: says nothing now
    assert breaker.paused
    breaker.trouble(2.0, 5.0, received=0.8)  # another in-flight job: same pause, its own ask
    assert breaker.until == 7.0 and breaker.streak == 1


def test_a_failing_probe_doubles_the_pause_up_to_the_cap():
    breaker = Breaker(cap=30)
    breaker.trouble(0.0, 5.0, received=0.0)
    ends = [breaker.until]
    for _ in range(4):
        now = breaker.until
        assert breaker.allowed(10, now) == 1
        breaker.trouble(now, 5.0, received=now)
        ends.append(breaker.until)
    assert [round(b - a, 6) for a, b in zip([0.0, *ends], ends, strict=False)] == [5, 10, 20, 30, 30]


def test_an_unanswered_probe_lets_the_next_one_go():
    breaker = Breaker()
    breaker.trouble(0.0, 1.0, received=0.0)
    assert breaker.allowed(10, 2.0) == 1
    breaker.probe_unused()  # its receive brought nothing
    assert breaker.allowed(10, 2.0) == 1
    assert breaker.answered(received=2.0, handled=False) is False  # released: still paused
    assert breaker.allowed(10, 2.0) == 1


def test_downstream_trouble_is_never_dead_lettered_even_when_attempts_are_spent():
    error = DownstreamUnavailable(30, "partner 429")
    assert classify(error) == "deferred"
    policy = RetryPolicy(10, 300)
    spent = Facts(attempt=9, max_receive=5, has_dlq=True, mates_waiting=False, requested_delay=30)
    assert plan("deferred", spent, policy) == RetryAfter(30)
    assert plan("deferred", Facts(1, 5, True, True, 30), policy) == RetryInPlace(30)
    assert isinstance(plan("retry", spent, policy), DeadLetter)  # an ordinary failure is
