"""The fair-tenant bookkeeping (tenants.py): caps, lines and give-back delays."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from sqs_worker_engine.tenants import MAX_GIVE_BACK_SECONDS, Tenants, give_back_delay, when_capped

# One step: a message of group 0-2 arrives, or a running job / a parked message of it goes.
steps = st.lists(st.tuples(st.sampled_from(["arrive", "finish", "leave"]), st.integers(0, 2)), max_size=60)


@given(cap=st.integers(1, 3), script=steps)
def test_no_group_ever_runs_more_than_its_cap_and_turns_pass_in_line_order(
    cap: int, script: list[tuple[str, int]]
) -> None:
    async def play() -> None:
        tenants = Tenants("q", cap)
        running: dict[str, int] = {}
        lines: dict[str, list[asyncio.Future[None]]] = {}
        for step, g in script:
            group = f"t{g}"
            line = lines.setdefault(group, [])
            if step == "arrive":
                if tenants.try_start(group):
                    running[group] = running.get(group, 0) + 1
                else:
                    assert running.get(group, 0) == cap
                    line.append(tenants.park(group))
            elif step == "finish" and running.get(group):
                first = line[0] if line else None
                tenants.done(group)
                if first is None:
                    running[group] -= 1
                else:  # the first in line got the turn, nobody else
                    assert first.done() and not any(f.done() for f in line[1:])
                    line.pop(0)
                    tenants.started()
            elif step == "leave" and line:
                tenants.leave(group, line.pop())
            assert tenants.running(group) == running.get(group, 0) <= cap
            assert tenants.parked == sum(len(w) for w in lines.values())

    asyncio.run(play())


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
    async def play() -> None:
        tenants = Tenants("q", 2)
        # Before any job ended: the longest running one's time so far.
        assert [tenants.give_back("a", 100.0, None, longest_running=4.0) for _ in range(2)] == [2, 4]
        assert tenants.give_back("b", 100.0, 10.0, longest_running=4.0) == 5, "each group has its own line"
        assert tenants.give_back("c", 100.0, None, longest_running=0.0) == 1, "never under a second"

    asyncio.run(play())
