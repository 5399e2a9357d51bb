"""The fair-tenant decisions (tenants.py): park or give back, and for how long. The cap
itself is admission's (test_admission.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sqs_worker_engine.runtime.protections.tenants import MAX_GIVE_BACK_SECONDS, Tenants, give_back_delay, when_capped


def test_fairness_spends_at_most_half_the_receives_and_only_when_the_park_is_full() -> None:
    assert when_capped(parked=3, room=4, receive_count=1, max_receive=5) == "park"
    assert when_capped(parked=4, room=4, receive_count=1, max_receive=5) == "give_back"
    assert when_capped(parked=4, room=4, receive_count=2, max_receive=5) == "give_back"
    assert when_capped(parked=4, room=4, receive_count=3, max_receive=5) == "park", "two receives are spent"
    assert when_capped(parked=9, room=4, receive_count=2, max_receive=2) == "park", "no receive to spare at all"
    assert when_capped(parked=9, room=4, receive_count=5, max_receive=None) == "give_back"
    assert when_capped(parked=9, room=4, receive_count=6, max_receive=None) == "park"


@given(
    cap=st.integers(1, 10),
    seconds=st.floats(0.01, 600),
    count=st.integers(1, 200),
    start=st.floats(0, 1e6),
)
def test_a_backlog_is_given_back_at_the_rate_its_group_drains(
    cap: int, seconds: float, count: int, start: float
) -> None:
    line_ends, delays = start, []
    for _ in range(count):
        delay, line_ends = give_back_delay(line_ends, start, seconds, cap)
        delays.append(delay)
    assert delays == sorted(delays), "later in the line, later back"
    assert all(1 <= d <= MAX_GIVE_BACK_SECONDS for d in delays)
    assert abs(line_ends - start - count * seconds / cap) < 1e-6 * max(1.0, line_ends)
    # A line that ran out meanwhile starts again from now, not from its old end.
    assert give_back_delay(start - 1000, start, seconds, cap)[1] == start + seconds / cap


def test_the_average_job_duration_sets_the_delay() -> None:
    tenants = Tenants(2)
    # Before any job ended: the longest running one's time so far.
    assert [tenants.give_back("a", 100.0, None, longest_running=4.0) for _ in range(2)] == [2, 4]
    assert tenants.give_back("b", 100.0, 10.0, longest_running=4.0) == 5, "each group has its own line"
    assert tenants.give_back("c", 100.0, None, longest_running=0.0) == 1, "never under a second"
