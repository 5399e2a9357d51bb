"""Prefetch sizing (prefetch.py); the places it sizes are admission's (test_admission.py)."""

from __future__ import annotations

from sqs_worker_engine.runtime.protections.prefetch import Pace, prefetch_target


def test_little_s_law_plus_a_batch_within_the_cap() -> None:
    assert prefetch_target(10, 0, 0.02, 0.01) == 0, "a cap of 0 is off"
    assert prefetch_target(10, 50, None, 0.01) == 0 and prefetch_target(10, 50, 0.02, None) == 0, "not measured yet"
    assert prefetch_target(10, 50, 0.02, 0.01) == 20 + 10
    assert prefetch_target(10, 25, 0.02, 0.01) == 25
    assert prefetch_target(10, 50, 0.005, 1.0) == 1 + 10


def test_slow_jobs_are_not_hoarded_for_the_sake_of_a_full_receive() -> None:
    """The extra receive's worth is held only if that many jobs start within a second: at
    concurrency 8 and 60 s jobs one job starts every 7.5 s, so one message is held, not 11."""
    assert prefetch_target(8, 50, 0.02, 60.0) == 1
    assert prefetch_target(8, 50, 0.02, 2.0) == 1 + 4  # 4 start within a second
    assert prefetch_target(1, 50, 0.02, 0.1) == 1 + 10


def test_the_pace_is_a_running_average_from_its_first_figure() -> None:
    pace = Pace()
    pace.received(0.02)
    pace.ran(1.0)
    pace.ran(2.0)
    assert pace.receive_seconds == 0.02 and abs(pace.job_seconds - 1.2) < 1e-9  # type: ignore[operator]


def test_a_steady_round_trip_is_held_for_as_it_is() -> None:
    pace = Pace()
    for _ in range(50):
        pace.received(0.025)
    assert pace.receive_seconds == 0.025


def test_a_spread_of_round_trips_is_held_for_beyond_its_mean() -> None:
    """Round trips of 10 and 40 ms in turn: the mean alone (25 ms) would leave the slots
    waiting through every slow one; held for the mean plus twice the mean deviation."""
    pace = Pace()
    for _ in range(100):
        pace.received(0.010)
        pace.received(0.040)
    assert pace.receive_mean is not None and abs(pace.receive_mean - 0.025) < 0.004
    assert pace.receive_seconds is not None and 0.05 < pace.receive_seconds < 0.065
    # at 10 ms jobs and concurrency 10: 1,000 starts a second, 50 to 60 in hand, not 35
    assert prefetch_target(10, 200, pace.receive_seconds, 0.01) >= 60
