"""The rate limit's window and the pause's breaker (throttle.py): pure, on a clock the
tests hold (the window's own tests: test_admission.py). The LocalStack tests run them through the worker (test_throttling.py)."""

from __future__ import annotations

import pytest

from sqs_worker_engine.base.errors import DownstreamUnavailable
from sqs_worker_engine.handlers.outcomes import classify
from sqs_worker_engine.runtime.protections.throttle import Breaker, parse_rate
from sqs_worker_engine.runtime.settling.decisions import DeadLetter, Facts, RetryAfter, RetryInPlace, RetryPolicy, plan


@pytest.mark.parametrize(
    ("text", "per_second"), [("50/s", 50), ("3000/min", 50), ("0.5/s", 0.5), ("7200 / h", 2), ("1/second", 1)]
)
def test_rates_are_read_in_their_units(text: str, per_second: float):
    assert parse_rate(text) == per_second


@pytest.mark.parametrize("text", ["50", "fast", "50/day", "-1/s", "0/s", "/s"])
def test_a_rate_that_is_not_one_is_refused_saying_the_form(text: str):
    with pytest.raises(ValueError, match=r"N/s|above 0"):
        parse_rate(text)


def test_a_pause_ends_only_with_an_answer_from_a_job_started_after_it_began():
    breaker = Breaker()
    assert not breaker.paused
    assert breaker.trouble(1.0, 5.0, started=0.5) is True
    assert breaker.paused and breaker.until == 6.0
    assert breaker.answered(started=6.0, handled=False) is False, "released: still paused"
    assert breaker.answered(started=6.0, handled=True) is True
    assert not breaker.paused


def test_jobs_already_running_neither_end_nor_lengthen_the_pause_beyond_their_ask():
    breaker = Breaker()
    breaker.trouble(1.0, 5.0, started=0.5)
    assert breaker.answered(started=0.9, handled=True) is False  # started before: says nothing now
    assert breaker.paused
    breaker.trouble(2.0, 5.0, started=0.8)  # another in-flight job: same pause, its own ask
    assert breaker.until == 7.0 and breaker.streak == 1


def test_a_failing_probe_doubles_the_pause_up_to_the_cap():
    breaker = Breaker(cap=30)
    breaker.trouble(0.0, 5.0, started=0.0)
    ends = [breaker.until]
    for _ in range(4):
        now = breaker.until  # the probe starts as the pause ends, and meets the same trouble
        breaker.trouble(now, 5.0, started=now)
        ends.append(breaker.until)
    assert [round(b - a, 6) for a, b in zip([0.0, *ends], ends, strict=False)] == [5, 10, 20, 30, 30]


def test_downstream_trouble_is_never_dead_lettered_even_when_attempts_are_spent():
    error = DownstreamUnavailable(30, "partner 429")
    assert classify(error) == "deferred"
    policy = RetryPolicy(10, 300)
    spent = Facts(attempt=9, max_receive=5, has_dlq=True, mates_waiting=False, requested_delay=30)
    assert plan("deferred", spent, policy) == RetryAfter(30)
    assert plan("deferred", Facts(1, 5, True, True, 30), policy) == RetryInPlace(30)
    assert isinstance(plan("retry", spent, policy), DeadLetter)  # an ordinary failure is
