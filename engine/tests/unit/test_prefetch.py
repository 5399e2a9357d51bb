"""Prefetch sizing and the handler slots it hands out in order (prefetch.py, slots.py)."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from sqs_worker_engine.prefetch import Pace, prefetch_target
from sqs_worker_engine.slots import Slots


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


@given(script=st.lists(st.sampled_from(["ask", "end", "leave"]), max_size=80), capacity=st.integers(1, 4))
def test_handler_slots_go_in_the_order_they_were_asked_for_and_never_beyond_the_capacity(
    script: list[str], capacity: int
) -> None:
    async def play() -> None:
        slots = Slots(capacity, held=1000, prefetch=100)
        running = 0
        line: list[asyncio.Future[None]] = []
        for step in script:
            if step == "ask":
                slots.in_use += 1  # a place, as a poller's reservation takes it
                if slots.try_start():
                    running += 1
                else:
                    assert running == capacity or line, "a slot was free and nobody waited"
                    line.append(slots.queue_start())
            elif step == "end" and running:
                first = line[0] if line else None
                slots.handler_done(started=True)
                if first is None:
                    running -= 1
                else:
                    assert first.done() and not any(t.done() for t in line[1:]), "the first in line, only"
                    line.pop(0)
            elif step == "leave" and line:
                slots.leave_start(line.pop())
                slots.handler_done(started=False)
            assert slots.running == running <= capacity
            assert slots.waiting == len(line)

    asyncio.run(play())
