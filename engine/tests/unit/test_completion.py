"""Run to completion's decisions (completion.py) and counts, without a worker: the room a
poller may be granted, when the jobs are done, when the idle spell ends."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from sqs_worker_engine.runtime.admission.admission import Admission, Ticket
from sqs_worker_engine.runtime.protections.completion import UNLIMITED, Completion, idle_left, jobs_done, room, turn


def test_room_is_the_jobs_left_less_what_is_promised() -> None:
    assert room(None, 10**6, 10**6) == UNLIMITED
    assert room(5, 0, 0) == 5
    assert room(5, 2, 2) == 1
    assert room(5, 3, 2) == 0
    assert room(1, 1, 0) == 0


def test_the_jobs_are_done_once_all_started_and_nothing_is_held() -> None:
    assert not jobs_done(None, 100, 0)
    assert not jobs_done(2, 1, 0)
    assert not jobs_done(2, 2, 1)  # the last job still runs or settles
    assert jobs_done(2, 2, 0)


def test_the_idle_spell_runs_only_while_nothing_is_held() -> None:
    assert idle_left(None, 0.0, 100.0) is None
    assert idle_left(30.0, None, 100.0) is None  # something is held
    assert idle_left(30.0, 80.0, 100.0) == 10.0
    assert idle_left(30.0, 60.0, 100.0) == -10.0


def test_the_jobs_left_go_to_the_queues_in_turn() -> None:
    """An empty queue's poll gives its places back and would take them again at once: the
    queue that waited for them is first in line and gets them."""
    assert turn(3, 2, first=True) == 2 and turn(3, 2, first=False) == 0 and turn(0, 2, first=True) == 0
    kicks: list[str] = []
    completion = Completion(2, None, lambda reason: None)
    completion.listen(lambda: kicks.append("kick"))
    a, b = object(), object()
    assert completion.room_for(a, 10) == 2
    completion.promise(2, a)
    assert completion.room_for(b, 10) == 0  # b waits in line
    completion.unpromise(2)  # a's long poll answered empty
    assert kicks, "the pollers waiting for room were woken"
    assert completion.room_for(a, 10) == 0, "a took the room back before b"
    assert completion.room_for(b, 1) == 1
    completion.promise(1, b)
    assert completion.room_for(a, 10) == 1, "a is first now"
    assert completion.room_for(b, 0) == 0  # b wants nothing: it stays out of the line


# A step: a poller is granted places (some of which come back unused), a held message's
# handler is called, or a held message leaves.
steps = st.lists(st.tuples(st.sampled_from(["receive", "start", "leave"]), st.integers(1, 10)), max_size=80)


@given(cap=st.integers(1, 6), concurrency=st.integers(1, 8), script=steps)
def test_admission_never_grants_more_than_the_jobs_left(
    cap: int, concurrency: int, script: list[tuple[str, int]]
) -> None:
    """Whatever the order of receives, starts and departures: granted + held and not
    started + started never exceed WORKER_MAX_JOBS, and the stop is asked for exactly when
    the last job has left."""

    async def play() -> None:
        stops: list[str] = []
        completion = Completion(cap, None, stops.append)
        admission = Admission(concurrency, 50, completion=completion)
        admission.prefetch = 50
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        held: list[Ticket] = []  # tickets received, not closed
        tasks: list[asyncio.Task[bool]] = []
        for step, n in script:
            if step == "receive":
                most = admission.receivable(10, 0.0)
                if most <= 0:
                    continue
                grant = await admission.reserve(most)
                assert completion.promised + completion.started <= cap
                for ticket in admission.received(grant, min(n, grant.places)):
                    tasks.append(asyncio.ensure_future(admission.line.start(ticket, never)))
                    held.append(ticket)
            elif step == "start":
                fresh = [t for t in held if t.promised and t.running]
                if fresh:
                    admission.line.handler_called(fresh[0])
            elif held:
                ticket = held.pop(n % len(held))
                admission.line.work_ended(ticket)
                admission.line.decide(ticket)
                admission.line.close(ticket)
            for _ in range(3):  # the woken starts run
                await asyncio.sleep(0)
            unstarted = sum(1 for t in held if t.promised)
            assert unstarted == completion.promised
            assert completion.started + unstarted <= cap
            assert stops == (["max jobs reached"] if completion.started == cap and not held else []), stops
        assert completion.holding == len(held)
        for task in tasks:
            task.cancel()

    asyncio.run(play())
