"""Admission (admission.py) alone, on a clock the tests hold: the decisions every start and
receive goes through, and what a ticket gives back. The compositions run through the whole
worker in the model tests (model/test_admission.py, model/test_compositions.py)."""

from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sqs_worker_engine.base import clock
from sqs_worker_engine.runtime.admission.admission import Admission, Grant, Ticket
from sqs_worker_engine.runtime.admission.tickets import LEGAL, SIZED, TicketBook
from sqs_worker_engine.runtime.admission.waking import Ask
from sqs_worker_engine.runtime.protections.throttle import SPACING_MARGIN, StartWindow

# One step: a message of group 0-2 arrives, a running job of it ends, a waiting one leaves.
steps = st.lists(st.tuples(st.sampled_from(["arrive", "end", "leave"]), st.integers(0, 2)), max_size=60)


@given(capacity=st.integers(1, 4), cap=st.one_of(st.none(), st.integers(1, 2)), script=steps)
def test_starts_keep_every_bound_go_in_receive_order_and_every_ticket_gives_all_back(
    capacity: int, cap: int | None, script: list[tuple[str, int]]
) -> None:
    async def play() -> None:
        admission = Admission(capacity, 100, tenant_cap=cap)
        admission.prefetch = 100  # as measured: room to receive ahead of the slots
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        tasks: dict[Ticket, asyncio.Task[bool]] = {}
        started: list[Ticket] = []
        for step, g in script:
            group = f"t{g}"
            if step == "arrive":
                (ticket,) = admission.received(await admission.reserve(1), 1)
                ticket.group = group
                tasks[ticket] = asyncio.ensure_future(admission.line.start(ticket, never))
            elif step == "end":
                mine = [t for t in started if t.group == group and not t.closed]
                if mine:
                    admission.line.work_ended(mine[0])
                    admission.line.decide(mine[0])
                    admission.line.close(mine[0])
            elif step == "leave":
                waiting = [t for t in tasks if not tasks[t].done()]
                if waiting:
                    admission.line.close(waiting[-1])
            for _ in range(5):  # the woken starts run to their end
                await asyncio.sleep(0)
            for ticket, task in tasks.items():
                if task.done() and task.result() and ticket not in started:
                    started.append(ticket)
            running = [t for t in started if not t.closed]
            assert admission.running == len(running) <= capacity
            for name in {t.group for t in running}:
                n = sum(1 for t in running if t.group == name)
                assert cap is None or n <= cap, f"{name} runs {n} over its cap {cap}"
            # Nobody waits who could start: a free slot, and its group below its cap.
            for ticket in admission.tickets():
                assert admission.running == capacity or admission.line.at_cap(ticket), "a startable message waits"
        for ticket in list(tasks):
            admission.line.work_ended(ticket)  # a handler's slot goes once its work has ended
            admission.line.close(ticket)
        await asyncio.sleep(0)
        assert (admission.held, admission.in_use, admission.running, admission.waiting) == (0, 0, 0, 0)
        assert admission.tenants == {}

    asyncio.run(play())


def test_a_ticket_closed_as_the_probe_hands_the_probe_on() -> None:
    """The probe that leaves without an answer (released, lost, given back) must not keep
    the queue paused: the next message may probe."""

    async def play() -> None:
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        admission = Admission(2, 10)
        first, second = admission.received(await admission.reserve(2), 2)
        assert await admission.line.start(first, never)
        admission.line.trouble(first, clock.now(), 0.01)
        await asyncio.sleep(0.02)
        assert await asyncio.wait_for(admission.line.start(second, never), 1), "the pause ran its time: a probe"
        assert second.probe
        third_grant = Grant(0)
        assert admission.receivable(10, clock.now()) == 0, "one probe at a time"
        admission.line.work_ended(second)
        admission.line.close(second)  # left without an answer
        assert admission.receivable(10, clock.now()) == 1, "the next receive may probe"
        admission.received(third_grant, 0)

    asyncio.run(play())


def test_a_leaked_probe_would_wedge_the_queue() -> None:
    """The suite's check of itself: a probe never handed back (the bug this module exists
    to make impossible) leaves nothing receivable and nothing startable for good."""

    async def play() -> None:
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        admission = Admission(2, 10)
        (first,) = admission.received(await admission.reserve(1), 1)
        assert await admission.line.start(first, never)
        admission.line.trouble(first, clock.now(), 0.01)
        admission.gate.probe = Ticket(-1, None)  # leaked on purpose
        await asyncio.sleep(0.05)
        assert admission.receivable(10, clock.now()) == 0

    asyncio.run(play())


@pytest.mark.parametrize(("rate", "count", "seconds"), [(20, 20, 1.0), (2.5, 2, 1.0), (10 / 60, 1, 6.0)])
def test_a_rate_is_a_window_of_starts_never_over(rate: float, count: int, seconds: float) -> None:
    window = StartWindow(rate, burst=count)
    assert window.count == count and window.seconds == pytest.approx(seconds)
    assert window.interval == pytest.approx(seconds * (1 + SPACING_MARGIN) / count)
    for _ in range(count):
        assert window.may_start(100.0)
        window.record(100.0)
    assert window.room(100.0) == 0 and not window.may_start(100.0)
    assert window.wait(100.0) == pytest.approx(window.span)
    assert window.room(100.0 + seconds) == 0, "a start a window (and less than the margin) after counts with it"
    assert window.room(100.0 + window.span) == count


def test_a_start_on_its_way_to_its_handler_counts_as_starting_until_it_gets_there() -> None:
    """Let go at 0 and called at 0.9: it holds its place in the window meanwhile, and then
    from where it was called; one that never reaches its handler gives its place back."""
    window = StartWindow(2, burst=2)
    window.grant(0.0)
    window.grant(0.0)
    assert window.room(5.0) == 0 and window.wait(5.0) == math.inf, "only a call or a drop moves it"
    window.began(5.0)
    assert window.room(5.0) == 0 and window.wait(5.0) == pytest.approx(window.span)
    window.dropped()
    assert window.room(5.0) == 1 and window.may_start(5.0)
    assert window.room(5.0 + window.span) == 2


def test_starts_are_spaced_evenly_unless_a_burst_is_asked_for() -> None:
    """20/s: one start every 51.25 ms (1/20 s and the margin), from a cold start too; with
    WORKER_RATE_BURST=5, five may go together, and never more than 20 in a window."""
    paced = StartWindow(20)
    paced.record(0.0)
    assert not paced.may_start(0.0) and paced.wait(0.0) == pytest.approx(0.05125)
    assert paced.may_start(0.05125)
    bursty = StartWindow(20, burst=5)
    for _ in range(5):
        assert bursty.may_start(0.0)
        bursty.record(0.0)
    assert not bursty.may_start(0.0)


def _paced_starts(window: StartWindow, gaps: list[float]) -> list[float]:
    """Start as often as the window allows while work is there: during each gap, work
    arrives at its start and waits (a backlog); the gaps of 0 are bursts of arrivals."""
    starts: list[float] = []
    now = 0.0
    for gap in gaps:
        until = now + gap
        while now < until or not starts:
            if window.may_start(now):
                window.record(now)
                starts.append(now)
                continue
            wait = window.wait(now)
            if now + wait >= until:
                break
            now = max(now + wait, math.nextafter(now, math.inf))
        now = max(now, until)
    return starts


@settings(deadline=None)
@given(
    rate=st.floats(0.05, 200),
    burst=st.integers(1, 50),
    gaps=st.lists(st.floats(0, 0.2), max_size=100),
    delays=st.lists(st.floats(0, 0.02), min_size=1, max_size=50),
)
def test_no_rolling_window_sees_more_than_the_rate_even_with_starts_a_moment_late(
    rate: float, burst: int, gaps: list[float], delays: list[float]
) -> None:
    """Whenever starts are asked for, and however late each then reaches its handler (up
    to 2% of the window), no closed window of the rate's length holds more than its count."""
    window = StartWindow(rate, burst)
    starts = _paced_starts(window, gaps)
    seen = sorted(t + delays[i % len(delays)] * window.seconds for i, t in enumerate(starts))
    first = 0
    for last, t in enumerate(seen):  # the window ending at each start
        while seen[first] < t - window.seconds:
            first += 1
        assert last - first + 1 <= window.count, f"{last - first + 1} in {window.seconds:g} s under {window.count}"


@settings(deadline=None)
@given(rate=st.floats(0.05, 200), lateness=st.lists(st.floats(0, 0.5), min_size=1, max_size=20))
# Found by the search: every start half an interval late, where the window binds: lateness
# adds up from one window's turn to the next until the grid restarts (see the bound below).
@example(rate=24.0, lateness=[0.5])
def test_a_busy_loop_does_not_slow_the_rate_down(rate: float, lateness: list[float]) -> None:
    """Each start late by up to half an interval, at most 20 ms (a busy loop, not one slower
    than the rate): the grid holds, so over 200 starts the rate kept is the limit less the
    margin, not a lateness lost on every start."""
    window = StartWindow(rate)
    delays = [min(0.02, fraction * window.interval) for fraction in lateness]
    now, starts = 0.0, []
    for i in range(200):
        window.record(now)
        starts.append(now)
        now += window.wait(now) + delays[i % len(delays)]
    achieved = (len(starts) - 1) / (starts[-1] - starts[0])
    # The window bounds the catching up: `count` starts take at least its span and the
    # last one's lateness (at one start a second, none can be caught up). Where the window
    # binds, a start it holds back waits for the one `count` before it, late itself: the two
    # latenesses add up, turn after turn, until the grid restarts past its catch-up.
    cycle = window.span + 2 * max(delays)
    assert achieved >= 0.99 * window.count / cycle, f"{achieved:.3f} a second, paced at {1 / window.interval:.3f}"


class _Looks(Admission):
    """Counts how often a waiting poller looks at the state again (`receivable`)."""

    looks = 0

    def receivable(self, most: int, now: float) -> int:
        self.looks += 1
        return super().receivable(most, now)


def test_a_freed_place_wakes_one_waiting_poller_not_all() -> None:
    """With every place taken, pollers wait; a job that frees its place wakes one of them
    to take it. Waking all had each of them look (and tens race for one place at high
    concurrency): fails on the old code, where all twenty looked."""

    async def play() -> None:
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        admission = _Looks(10, 0)
        tickets = admission.received(await admission.reserve(10), 10)
        for ticket in tickets:
            assert await admission.line.start(ticket, never)
        pollers = [asyncio.ensure_future(admission.reserve(10)) for _ in range(20)]
        await asyncio.sleep(0.01)
        assert not any(p.done() for p in pollers)
        admission.looks = 0
        admission.line.work_ended(tickets[0])
        admission.line.decide(tickets[0])  # its place is free (it settles meanwhile)
        for _ in range(3):
            await asyncio.sleep(0)
        assert admission.looks <= 2, f"{admission.looks} looks for one freed place"
        admission.stop()
        grants = await asyncio.wait_for(asyncio.gather(*pollers), 5)
        assert sum(g.places for g in grants) <= 1

    asyncio.run(play())


class _Waits(Admission):
    """Counts how often a poller goes to wait for a change in `reserve`."""

    waits = 0

    def __init__(self, concurrency: int, prefetch_cap: int) -> None:
        super().__init__(concurrency, prefetch_cap)
        change = self.waker.change

        async def counted(loop: asyncio.AbstractEventLoop, at_most: float | None, ask: Ask) -> None:
            self.waits += 1
            await change(loop, at_most, ask)

        self.waker.change = counted  # type: ignore[method-assign]


def test_a_freed_place_wakes_no_poller_that_would_only_wait_again() -> None:
    """While another receive is out, a poller waits for a whole batch of free places, not
    one: the jobs that end one by one below that wake nobody (each woke a poller to look
    and wait again, a wake-up a job: fails on the old code with ten waits, not one)."""

    async def play() -> None:
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        admission = _Waits(10, 10)
        admission.prefetch = 10  # as measured
        tickets = admission.received(await admission.reserve(10), 10)
        for ticket in tickets:
            assert await admission.line.start(ticket, never)
        out = await admission.reserve(10)  # another receive is out: more are on their way
        poller = asyncio.ensure_future(admission.reserve(10))
        for ticket in tickets[:9]:
            await asyncio.sleep(0.01)
            assert not poller.done()
            admission.line.work_ended(ticket)
            admission.line.decide(ticket)
            admission.line.close(ticket)
        await asyncio.sleep(0.01)
        assert admission.waits == 1, f"{admission.waits} waits for nine places freed one by one"
        assert not poller.done()
        admission.line.work_ended(tickets[9])
        admission.line.decide(tickets[9])
        admission.line.close(tickets[9])
        assert (await asyncio.wait_for(poller, 5)).places == 10
        admission.received(out, 0)
        admission.stop()

    asyncio.run(play())


def test_places_freed_at_once_reach_every_waiting_poller_in_turn() -> None:
    """Once SQS answers again, thirty places are free at once: the poller woken takes a
    receive's worth and wakes the next, until none is left (none waits for a later change)."""

    async def play() -> None:
        admission = Admission(40, 0)
        first = admission.received(await admission.reserve(10), 10)
        admission.sqs_answered("delete", False)  # nothing could be deleted: receive nothing
        pollers = [asyncio.ensure_future(admission.reserve(10)) for _ in range(4)]
        await asyncio.sleep(0.01)
        assert not any(p.done() for p in pollers)
        admission.sqs_answered("delete", True)
        for _ in range(500):  # a hang guard, not a timing: each hand-on is a few loop turns
            await asyncio.sleep(0.01)
            if sum(p.done() for p in pollers) >= 3:
                break
        done = [p for p in pollers if p.done()]
        waiting = [p for p in pollers if not p.done()]
        assert len(done) == 3 and len(waiting) == 1, "three receives of ten; the fourth waits"
        assert all(p.result().places == 10 for p in done)
        admission.stop()
        assert (await asyncio.wait_for(waiting[0], 5)).places == 0
        assert len(first) == 10

    asyncio.run(play())


@pytest.mark.parametrize("leaves", ["lease_lost", "cancelled"])
def test_a_message_that_left_the_line_is_never_started_by_a_slot_freed_before_its_task_runs(leaves: str) -> None:
    """Its turn is settled (its lease went, or its task was cancelled) and its task has not
    run yet when another job's slot comes free: the slot goes to the next message, and the
    one that left neither starts nor breaks the freeing job's step."""

    async def play() -> None:
        admission = Admission(1, 10)
        admission.prefetch = 10
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        first, second, third = admission.received(await admission.reserve(3), 3)
        assert await admission.line.start(first, never)
        lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting = asyncio.ensure_future(admission.line.start(second, lost))
        behind = asyncio.ensure_future(admission.line.start(third, never))
        await asyncio.sleep(0)
        assert [t.seq for t in admission.tickets()] == [second.seq, third.seq]
        if leaves == "lease_lost":
            lost.set_result(None)
        else:
            waiting.cancel()
        await asyncio.sleep(0)  # the lease's callback has run; the waiting task has not
        admission.line.work_ended(first)
        admission.line.decide(first)
        admission.line.close(first)
        assert admission.running == 1 and third.running and not second.running
        if leaves == "lease_lost":
            assert await waiting is False
        else:
            with pytest.raises(asyncio.CancelledError):
                await waiting
        admission.line.close(second)
        assert await behind is True
        assert admission.running == 1 and list(admission.tickets()) == []

    asyncio.run(play())


def test_a_life_cancelled_after_its_turn_came_gives_its_slot_back() -> None:
    """Handed a slot, its task cancelled before it ran (the loop torn down): closing its
    ticket gives everything back."""

    async def play() -> None:
        admission = Admission(1, 10)
        admission.prefetch = 10
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        first, second = admission.received(await admission.reserve(2), 2)
        assert await admission.line.start(first, never)
        waiting = asyncio.ensure_future(admission.line.start(second, never))
        await asyncio.sleep(0)
        admission.line.work_ended(first)
        admission.line.decide(first)
        admission.line.close(first)
        assert second.running  # handed the slot; its task has not run yet
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        admission.line.close(second)  # the life's finally (pool._forget)
        assert (admission.running, admission.held, admission.in_use) == (0, 0, 0)

    asyncio.run(play())


@given(walk=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 10)), max_size=80))
def test_the_book_counts_what_its_phases_hold_after_any_walk_of_legal_moves(walk: list[tuple[int, int]]) -> None:
    """The sizes TicketBook keeps as it moves tickets (running, in use, held) are always the
    sizes of the phases' sets: a walk of legal moves over five tickets, each step one of
    the edges its ticket's phase has (picked by index), checked against a count by hand."""
    book = TicketBook()
    tickets = book.issue(book.grant(5, probe=False), 5, promised=False)
    for which, pick in walk:
        ticket = tickets[which]
        edges = sorted(LEGAL[ticket.phase], key=lambda p: p.value)
        if edges:
            book.move(ticket, edges[pick % len(edges)])
        for phases in SIZED:
            assert book.count(phases) == sum(t.phase in phases for t in tickets), (phases, [t.phase for t in tickets])
    assert book.running == sum(t.running for t in tickets)
