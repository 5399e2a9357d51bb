"""Admission: the one owner of "how many may a poller ask for now" and "may this message
start now", for one queue's pool.

Every protection that limits what is received or started answers here, from one state:

- places: what the pool holds (reserved for a receive, waiting, running, settling) never
  exceeds the concurrency plus the prefetch cap (prefetch.py); receiving asks only for free
  places, and while fewer than the measured prefetch target wait ahead of the slots. A
  message whose delete is sent (its batch call goes out) gives its place back then, not when
  SQS answers, while fewer than the prefetch cap of such deletes are out (`delete_sent`):
  by Little's law a place then lasts a receive and a job, not a delete's round trip too,
  and what a SIGKILL may strand is still bounded (`strand_limit`);
- handler slots: at most the limit in use run (the concurrency, or below it what the
  adaptive limit allows: adaptive.py), started in the order they were received;
- the rate limit (throttle.StartWindow): starts spaced on its grid, never more than its
  count in a window; receiving keeps at most a window's worth of starts waiting;
- the pause (throttle.Breaker) and its probe: while paused nothing starts and nothing is
  received; once the pause has run its time exactly one message starts as the probe, a
  held one first, received for the purpose only when none is held;
- tenant caps (tenants.py): a message whose group runs its cap waits in line without
  blocking the others (parked), or is given back (the pool asks `when_capped`);
- SQS itself, per kind of call (reach.py): while deletes fail, whatever else SQS answers,
  nothing starts (it could not be deleted) and nothing more is received;
- run to completion (completion.py, WORKER_MAX_JOBS): places granted plus messages held
  and not started never exceed the process's jobs left.
- a budget shared with other queues (budget.py, WORKER_SHARED_CONCURRENCY): a message
  starts only when the budget gives this queue the free slot, asked last, once nothing
  else blocks it; receiving asks only for the slots the budget may give it.

Whatever a message holds from admission is one `Ticket` (tickets.py), in one phase: its
place, its handler slot, its rate-window entry, its tenant turn, the probe. Its way from
there is the start line's (line.py, `Admission.line`): it starts in receive order, and
`close()` gives all it holds back, once, whichever way the message leaves; the pool calls
it in one `finally`. The handler slot and the tenant turn go back earlier, once the
handler's work has really ended and its ending was read (RUNNING -> RETURNED or DECIDED ->
SETTLING), so the next job starts while this one settles. What is running, held, arriving
or in use is counted by the ticket book from the phases; this class holds the receive
side, the queue's signals and the wake-ups.

The decisions are made by the start gate's rules from the state alone (gate.py); the pause
and the rate limit each say in one function when the next start may happen (`pause_wait`,
`rate_wait`), and the receive side, the start side and the wake-up timer ask them. The waits only wait for
the state to change (a ticket closed or returned, a pause that ends, a rate window that
moves on, SQS answering again: waking.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from ...base import clock
from ..protections.adaptive import Limit
from ..protections.budget import COMING, NOTHING, WAITING, SharedBudget, Want
from ..protections.completion import Completion
from ..protections.reach import Kind, Reach
from ..protections.throttle import Breaker, StartWindow
from ..reporting import QueueReport
from .gate import Block, StartGate, pause_wait, rate_wait
from .line import StartLine
from .tickets import Grant, Ticket, TicketBook
from .waking import Ask, Waker

__all__ = ["BATCH_WAIT", "Admission", "Block", "Grant", "Ticket", "pause_wait", "rate_wait"]

BATCH_WAIT = 0.002  # seconds a poller waits for a fuller batch of free places (see reserve)


class Admission:
    """One queue's admission: how many each poller may ask for, what an attempt's end
    says of the downstream, the limit, the prefetch and the stop, and the wake-ups, over
    one state; its `line` starts the messages (line.py)."""

    def __init__(
        self,
        concurrency: int,
        prefetch_cap: int,
        *,
        window: StartWindow | None = None,
        breaker: Breaker | None = None,
        tenant_cap: int | None = None,
        report: QueueReport | None = None,
        completion: Completion | None = None,
        budget: SharedBudget | None = None,
        weight: int = 1,
        adaptive: Limit | None = None,
    ) -> None:
        self.report = report
        self.book = TicketBook()  # every ticket by phase: what runs, waits, is held (tickets.py)
        self.gate = StartGate(
            self.book,
            concurrency,
            window=window,
            breaker=breaker,
            tenant_cap=tenant_cap,
            adaptive=adaptive,
            budget=budget,
        )
        if report is not None:
            report.count_waiting(lambda: len(self.book.line))  # the waiting gauge reads the line
            if adaptive is not None:
                report.concurrency_limit(adaptive)
        self.completion = completion  # the process's jobs left, shared by every queue
        if completion is not None:
            completion.listen(self._kick)
        self.prefetch_cap = prefetch_cap
        self.prefetch = 0  # the measured target (prefetch.py), at most the cap (written by set_prefetch)
        self.waker = Waker(self._kick, self._goes_on)
        self.budget = budget
        self.full_receive = False  # the latest receive brought all it asked for (budget.py; by received)
        self.line = StartLine(
            self.book,
            self.gate,
            self.waker,
            self._kick,
            member=self,
            sent_limit=prefetch_cap,
            report=report,
            completion=completion,
            budget=budget,
        )
        if budget is not None:
            budget.join(self, weight)

    # -- what the book counts, and the gate's state -------------------------------------

    @property
    def held_limit(self) -> int:
        """Places: what the pool may hold of this queue, settling included, but for the
        deletes sent (`sent_limit`): concurrency + prefetch cap."""
        return self.capacity + self.prefetch_cap

    @property
    def sent_limit(self) -> int:
        """Most deletes sent and not yet answered whose places were given back: the prefetch
        cap (none without prefetch: then a place comes back once its message is settled)."""
        return self.prefetch_cap

    @property
    def strand_limit(self) -> int:
        """What a worker may hold of this queue, and strand on SIGKILL: its places, and the
        deletes sent that SQS has not answered (concurrency + twice the prefetch cap)."""
        return self.held_limit + self.sent_limit

    @property
    def capacity(self) -> int:  # the configured concurrency
        return self.gate.capacity

    @property
    def limit(self) -> int:  # handler slots in use now
        return self.gate.limit

    @property
    def adaptive(self) -> Limit | None:  # WORKER_ADAPTIVE_CONCURRENCY
        return self.gate.adaptive

    @property
    def breaker(self) -> Breaker:  # the pause
        return self.gate.breaker

    @property
    def stopping(self) -> bool:  # no more receives or starts
        return self.gate.stopping

    @property
    def reach(self) -> Reach:  # the kinds of SQS call that fail now (reach.py)
        return self.gate.reach

    @property
    def sqs_ok(self) -> bool:  # SQS answers the calls a start needs: its deletes
        return not self.gate.reach.starts_held

    @property
    def running(self) -> int:  # handler slots taken
        return self.book.running

    @property
    def overdue_running(self) -> int:  # of them, held by work cancelled that goes on
        return len(self.book.late)

    @property
    def in_use(self) -> int:  # places reserved, waiting or running: the prefetch bound's
        return self.book.in_use

    @property
    def held(self) -> int:  # places held, settling included: the hard bound's
        return self.book.held

    @property
    def sent(self) -> int:  # deletes sent, unanswered, whose places went back
        return self.book.sent

    @property
    def arriving(self) -> int:  # received, their tasks about to ask to start
        return self.book.arriving

    @property
    def reserved(self) -> int:  # places of receives still out
        return self.book.reserved

    @property
    def waiting(self) -> int:  # received and waiting to start
        return len(self.book.line)

    @property
    def tenants(self) -> dict[str, int]:  # group -> jobs of it holding a slot
        return self.book.tenants

    def tickets(self) -> Iterator[Ticket]:
        return iter(self.book)

    def resting(self, backing_off: bool = False) -> bool:
        """Waiting by design, not stuck (health.py): stopping, or a slot is free and a
        poller waits for admission's word (a pause, the rate limit, the shared budget, SQS
        unreachable, nothing to receive) or, `backing_off`, to ask SQS again after a
        failed receive. Every slot held is the case liveness is for: then only a job's end
        is progress."""
        return self.stopping or (self.slot_free() and (bool(self.waker.pollers) or backing_off))

    def slot_free(self) -> bool:
        """A handler slot is free: a poll's answer is then progress (health.py). With every
        slot held it is not: the pollers go on filling the prefetch, and answering while a
        job that will not end holds each slot (an idle queue answers every long poll)."""
        return not self.gate.slots_full()

    # -- 1. how many may a poller ask for --------------------------------------------

    def receivable(self, most: int, now: float) -> int:
        """How many messages a poller may ask for now (0: wait for a change)."""
        entitled = None if self.budget is None or self.stopping else self.budget.entitled(self, now)
        room, free = self.prefetch - self.in_use, self.held_limit - self.held
        n = self.gate.receivable(most, now, room=room, free=free, entitled=entitled)
        return n if self.completion is None else self.completion.room_for(self, n)

    async def reserve(self, most: int) -> Grant:
        """Wait for places and take between 1 and `most` of them for one receive.

        Jobs that started together end together, but their places come back one at a
        time, spread over a millisecond or two: waiting up to BATCH_WAIT for a full batch
        lets one receive serve the whole wave (SQS bills per request). While messages wait
        for a slot anyway, or are on their way (another receive is out, or brought them and
        their tasks are about to ask), it waits for a whole batch of the prefetch: on a
        busy loop places come back one by one, slower than BATCH_WAIT, and receives of
        eight or nine cost requests for nothing while more are coming anyway."""
        loop = asyncio.get_running_loop()
        want = min(most, self.limit)
        line = self.book.line
        while True:
            while not self._asks_for(n := self.receivable(most, clock.now()), most):
                if self.stopping:
                    return Grant(0)
                began = loop.time()
                # The rate limit, not the slots, holds the line (it keeps it full).
                rate_bound = bool(line) and self.gate.blocked(line[0], clock.now()) == "rate"
                await self.waker.change(loop, self.gate.wake_at(clock.now()), (most, False))
                if rate_bound and self.report is not None:
                    self.report.throttled(loop.time() - began)
            deadline = loop.time() + BATCH_WAIT
            while 0 < self.receivable(most, clock.now()) < want and (left := deadline - loop.time()) > 0:
                await self.waker.change(loop, left, (most, True))
            n = self.receivable(most, clock.now())
            if n > 0:  # another poller may have taken them meanwhile
                if self.completion is not None:
                    self.completion.promise(n, self)
                grant = self.book.grant(n, probe=self.breaker.paused)
                self.gate.probe_receive = self.gate.probe_receive or grant.probe
                self.waker.one()  # room for more than this receive: the next poller looks too
                return grant

    def _asks_for(self, n: int, most: int) -> bool:
        """Whether a poller that may ask for `n` of the `most` it wants asks now: some are
        free, and a whole batch of the prefetch is while messages wait for a slot anyway or
        are on their way (see reserve)."""
        coming = self.book.line or self.reserved or self.arriving
        return n > 0 and not (coming and n < min(most, self.prefetch) and not self.breaker.paused)

    def _goes_on(self, ask: Ask) -> bool:
        """Whether to wake a poller waiting in `reserve` with this ask (waking.py wakes only
        one it should): not while some places are free but fewer than it waits for (a
        batch's worth). With none free it is woken as before: it looks, and waits again
        with a timer for whatever ends by itself (a pause that began since it slept)."""
        most, batching = ask
        n = self.receivable(most, clock.now())
        if n <= 0:
            return True
        return n >= min(most, self.limit) if batching else self._asks_for(n, most)

    def received(self, grant: Grant, got: int) -> list[Ticket]:
        """The receive brought `got` of the places granted: one ticket each; the rest go back."""
        unused = grant.places - got
        if grant.probe:
            self.gate.probe_receive = False
        tickets = self.book.issue(grant, got, promised=self.completion is not None)
        if self.completion is not None:
            self.completion.unpromise(unused)
            self.completion.received(got)
        full = 0 < got == grant.places  # the tickets arriving are this queue's backlog before the kick (budget.py)
        if unused or grant.probe or full != self.full_receive:
            self.full_receive = full
            self._kick()
        return tickets

    def received_group(self, ticket: Ticket, group: str | None) -> None:
        """Its message's group, when the queue caps tenants (their turns are counted by it)."""
        if self.gate.tenant_cap is not None:
            ticket.group = group

    # -- signals ---------------------------------------------------------------------

    def sqs_answered(self, kind: Kind, ok: bool) -> None:
        """SQS answered a call of `kind` (`ok`), or did not (reach.py)."""
        reach = self.gate.reach
        held = reach.starts_held
        if reach.answered(kind, ok) and reach.starts_held != held:
            self._kick()

    def set_limit(self, limit: int) -> None:
        """Handler slots from now on, at most the concurrency. Below what runs, nothing more
        starts until enough end; above it, whoever waits starts now."""
        self.gate.set_limit(limit)
        self._kick()

    def set_prefetch(self, target: int) -> None:
        prefetch = min(target, self.prefetch_cap)
        if prefetch != self.prefetch:  # measured after every job: mostly the same
            self.prefetch = prefetch
            self._kick()

    async def stopped(self) -> None:
        """Until the stop."""
        await self.gate.stop_signal.wait()

    def stop(self) -> None:
        """No more receives or starts: the waits end (their messages are let go). A shared
        budget stops first, for every queue on it: the pools stop one after another, and a
        slot this one leaves must not start another queue's job meanwhile."""
        if self.budget is not None:
            self.budget.stopping = True
        self.gate.stop()
        for ticket in list(self.book.line):
            self.line.leave(ticket)
        self._kick()
        self.waker.every()

    # -- waking, and the shared budget (budget.py) ------------------------------------------

    def _kick(self) -> None:
        """The state changed: start whoever may start, wake a poller to look again; with a
        shared budget, in every queue that shares it."""
        if self.budget is None:
            self.refresh()
        else:
            self.budget.changed(self)

    def refresh(self, pollers: bool = True) -> None:
        """Start whoever in this queue may start; wake a poller of it to look again (the
        shared budget leaves them asleep when what they may receive cannot have grown)."""
        if self.book.line:  # the clock only when someone waits: after most jobs nobody does
            self.line.admit(clock.now())
        if pollers:
            self.waker.one()
        if self.book.line and (delay := self.gate.wake_at(clock.now())) is not None:
            self.waker.at(delay)  # look at the line again when it may unblock by itself

    def wants(self, now: float) -> Want:
        """What this queue wants of the shared budget: a backlog is a job it could start
        now but for the budget, a message waiting for it (not parked) or, when none waits,
        on its way (received, its task about to ask; or the latest receive brought all it
        asked for, so SQS holds more, and a receive is out or may go out for them)."""
        head = next((t for t in self.book.line if not self.gate.tenant_full(t.group)), None)
        coming = self.arriving or (self.full_receive and (self.reserved or self.receivable(1, now)))
        if head is None and not coming:
            return NOTHING
        if self.gate.blocked(head or Ticket(0), now) is not None:
            return NOTHING
        return WAITING if head is not None else COMING

    def shared_report(self, in_use: int, given: bool) -> None:
        if self.report is not None:
            self.report.shared_slots(in_use, given)
