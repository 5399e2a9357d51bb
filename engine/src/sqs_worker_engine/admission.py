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
- SQS itself: while deletes and lease extensions cannot reach SQS, nothing held starts
  (it could not be settled, and its lease lapses anyway) and nothing more is received;
- run to completion (completion.py, WORKER_MAX_JOBS): places granted plus messages held
  and not started never exceed the process's jobs left.
- a budget shared with other queues (budget.py, WORKER_SHARED_CONCURRENCY): a message
  starts only when the budget gives this queue the free slot, asked last, once nothing
  else blocks it; receiving asks only for the slots the budget may give it.

Whatever a message holds from admission is one `Ticket` (tickets.py), in one phase: its
place, its handler slot, its rate-window entry, its tenant turn, the probe. `close()` gives
all of it back, once, whichever way the message leaves; the pool calls it in one `finally`.
The handler slot and the tenant turn go back earlier, once the handler's work has really
ended and its ending was read (RUNNING -> RETURNED or DECIDED -> SETTLING), so the next job
starts while this one settles. What is running, held, arriving or in use is counted by
the ticket book from the phases.

The decisions are made by `_blocked` from the state alone; the pause and the rate limit
each say in one function when the next start may happen (`pause_wait`, `rate_wait`), and
the receive side, the start side and the wake-up timer ask them. The waits only wait for
the state to change (a ticket closed or returned, a pause that ends, a rate window that
moves on, SQS answering again: waking.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Iterator
from typing import Literal

from . import clock
from .adaptive import Limit
from .budget import COMING, NOTHING, WAITING, SharedBudget, Want
from .completion import Completion
from .errors import DownstreamUnavailable
from .outcomes import Ending, Outcome
from .reporting import QueueReport
from .throttle import Breaker, StartWindow
from .tickets import SLOT, Grant, Phase, Ticket, TicketBook
from .waking import Waker

__all__ = ["BATCH_WAIT", "Admission", "Block", "Grant", "Ticket", "pause_wait", "rate_wait"]

BATCH_WAIT = 0.002  # seconds a poller waits for a fuller batch of free places (see reserve)
Block = Literal["stopping", "slots", "sqs", "tenant", "paused", "rate", "budget"]
# What a ticket's slot moves to when its work ends / its ending is read (else: nothing changes).
ON_WORK_ENDED = {Phase.RUNNING: Phase.RETURNED, Phase.DECIDED: Phase.SETTLING, Phase.CUT: Phase.CLOSED}
ON_DECIDED = {Phase.RUNNING: Phase.DECIDED, Phase.RETURNED: Phase.SETTLING}


def pause_wait(breaker: Breaker, now: float, probe_out: bool) -> float:
    """The pause's rule: seconds until it lets the next start go (0: now; infinite while
    `probe_out`). Paused, nothing starts until its time has run; then one probe, and
    nothing more while the probe is out."""
    if not breaker.paused:
        return 0.0
    return math.inf if probe_out else max(0.0, breaker.until - now)


def rate_wait(window: StartWindow | None, now: float) -> float:
    """The rate limit's rule: seconds until it lets the next start go (0: now; infinite
    while only starts on their way to a handler fill the window: their call moves it)."""
    return 0.0 if window is None else window.wait(now)


class Admission:
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
        self.capacity = concurrency  # the configured concurrency: the ceiling of `limit`
        self.limit = concurrency if adaptive is None else adaptive.current  # slots in use now (set_limit)
        self.adaptive = adaptive  # WORKER_ADAPTIVE_CONCURRENCY: moves the limit (adaptive.py)
        if adaptive is not None and report is not None:
            report.concurrency_limit(adaptive)
        self.completion = completion  # the process's jobs left, shared by every queue
        if completion is not None:
            completion.listen(self._kick)
        self.prefetch_cap = prefetch_cap
        self.prefetch = 0  # the measured target (prefetch.py), at most the cap (set_prefetch)
        self.window = window
        self.breaker = breaker or Breaker()
        self.tenant_cap = tenant_cap
        self.book = TicketBook()  # every ticket by phase: what runs, waits, is held (tickets.py)
        self.stopping = False  # the pool's one stopping fact (written by stop)
        self.sqs_ok = True  # the latest delete or lease extension reached SQS (written by sqs_answered)
        self._probe: Ticket | None = None  # the probe that runs now (written by _take, close, trouble, answered)
        self._probe_receive = False  # a receive for the probe is out (written by reserve, received)
        self.waker = Waker(self._kick)
        self.budget = budget
        self.full_receive = False  # the latest receive brought all it asked for (budget.py; by received)
        if budget is not None:
            budget.join(self, weight)

    # -- the bound, and what the book counts ------------------------------------------

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
    def running(self) -> int:  # handler slots taken
        return self.book.running

    @property
    def overdue_running(self) -> int:  # of them, held by work cancelled that goes on all the same
        return len(self.book.late)

    @property
    def in_use(self) -> int:  # places reserved, waiting or running: what the prefetch target bounds
        return self.book.in_use

    @property
    def held(self) -> int:  # places held in all, settling included: what the hard bound bounds
        return self.book.held

    @property
    def sent(self) -> int:  # deletes sent and not yet answered whose places were given back
        return self.book.sent

    @property
    def arriving(self) -> int:  # received, not yet asking to start: their tasks are about to (budget.py)
        return self.book.arriving

    @property
    def reserved(self) -> int:  # places of receives still out
        return self.book.reserved

    @property
    def waiting(self) -> int:  # messages received and waiting to start (prefetched, parked or paused)
        return len(self.book.line)

    @property
    def tenants(self) -> dict[str, int]:  # group -> jobs of it holding a slot
        return self.book.tenants

    @property
    def parked(self) -> int:
        """Waiting messages whose tenant runs its cap."""
        return sum(1 for t in self.book.line if self._tenant_full(t.group))

    def tickets(self) -> Iterator[Ticket]:
        return iter(self.book)

    # -- 1. how many may a poller ask for --------------------------------------------

    def receivable(self, most: int, now: float) -> int:
        """How many messages a poller may ask for now (0: wait for a change)."""
        n = self._receivable(most, now)
        return n if self.completion is None else self.completion.room_for(self, n)

    def _receivable(self, most: int, now: float) -> int:
        if self.stopping:
            return 0
        # Places for the limit in use, not the ceiling: a shrunken limit holds no more waiting;
        # and with a shared budget, for the slots it may give this queue.
        # (A job whose work goes on past its cancellation holds a place beyond the limit.)
        limit = min(self.capacity, self.limit + self.overdue_running)
        slots = limit if self.budget is None else min(limit, self.budget.entitled(self, now))
        held = self.held
        n = min(most, slots + self.prefetch - self.in_use, self.held_limit - held)
        if not self.sqs_ok and (held or self.sent):
            return 0  # what is held could not be settled: receive more once SQS answers
        if self.breaker.paused:
            if pause_wait(self.breaker, now, self._probe is not None or self._probe_receive) > 0:
                return 0
            if any(not self._tenant_full(t.group) for t in self.book.line):
                return 0  # a held message will be the probe: no receive for it
            n = min(n, 1)
        if self.window is not None:
            n = min(n, self.window.count - self.waiting)  # at most a window's worth of starts waits
        return max(0, n)

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
            while (n := self.receivable(most, clock.now())) <= 0 or (
                (line or self.book.reserved or self.arriving) and n < min(most, self.prefetch) and not self.breaker.paused
            ):
                if self.stopping:
                    return Grant(0)
                began = loop.time()
                # The rate limit, not the slots, holds the line (it keeps it full).
                rate_bound = bool(line) and self._blocked(line[0], clock.now(), budget=False) == "rate"
                await self.waker.change(loop, self._wake_at())
                if rate_bound and self.report is not None:
                    self.report.throttled(loop.time() - began)
            deadline = loop.time() + BATCH_WAIT
            while 0 < self.receivable(most, clock.now()) < want and (left := deadline - loop.time()) > 0:
                await self.waker.change(loop, left)
            n = self.receivable(most, clock.now())
            if n > 0:  # another poller may have taken them meanwhile
                if self.completion is not None:
                    self.completion.promise(n, self)
                grant = self.book.grant(n, probe=self.breaker.paused)
                self._probe_receive = self._probe_receive or grant.probe
                if self.receivable(most, clock.now()) > 0:
                    self.waker.one()  # room for more than this receive: the next poller looks too
                return grant

    def received(self, grant: Grant, got: int) -> list[Ticket]:
        """The receive brought `got` of the places granted: one ticket each; the rest go back."""
        unused = grant.places - got
        if grant.probe:
            self._probe_receive = False
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
        if self.tenant_cap is not None:
            ticket.group = group

    def _arrive(self, ticket: Ticket) -> None:
        if ticket.phase is Phase.ARRIVING:
            self.book.move(ticket, Phase.READY)

    def behind_its_group(self, ticket: Ticket) -> None:
        """FIFO: its message waits for the one before it in its group, not for a slot: it is
        no backlog of this queue until its turn (it asks to start then)."""
        self._arrive(ticket)

    # -- 2. may this message start -----------------------------------------------------

    def _tenant_full(self, group: str | None) -> bool:
        tenants = self.book.tenants
        return self.tenant_cap is not None and group is not None and tenants.get(group, 0) >= self.tenant_cap

    def at_cap(self, ticket: Ticket) -> bool:
        return self._tenant_full(ticket.group)

    def _slots_full(self) -> bool:
        """Every slot taken: of the limit in use, by jobs still within their time; of the
        concurrency, by any (work that ignores its cancellation holds its slot until it
        returns, but a hung job must not halt an adaptive limit that only grows from jobs
        that end)."""
        running = self.running
        return running - self.overdue_running >= self.limit or running >= self.capacity

    def resting(self, backing_off: bool = False) -> bool:
        """Waiting by design, not stuck (health.py): stopping, or a slot is free and a
        poller waits for admission's word (a pause, the rate limit, the shared budget, SQS
        unreachable, nothing to receive) or, `backing_off`, to ask SQS again after a
        failed receive. Every slot held is the case liveness is for: then only a job's end
        is progress."""
        return self.stopping or (not self._slots_full() and (bool(self.waker.pollers) or backing_off))

    def _blocked(self, ticket: Ticket, now: float, *, budget: bool = True) -> Block | None:
        """Why `ticket` may not start now, or None: the whole decision, from the state.
        `budget=False`: everything but the shared budget (what the budget asks)."""
        if self.stopping or (self.budget is not None and self.budget.stopping):
            return "stopping"
        if self._slots_full():
            return "slots"
        if not self.sqs_ok:
            return "sqs"
        if self._tenant_full(ticket.group):
            return "tenant"
        if pause_wait(self.breaker, now, self._probe is not None) > 0:
            return "paused"
        if rate_wait(self.window, now) > 0:
            return "rate"
        if budget and self.budget is not None and not self.budget.may_start(self, now):
            return "budget"
        return None

    def _take(self, ticket: Ticket, now: float) -> None:
        self.book.move(ticket, Phase.RUNNING)
        if self.window is not None:
            self.window.grant(now)
            ticket.rate_pending = True
        ticket.probe = self.breaker.paused  # past its time: this start is the probe
        if ticket.probe:
            self._probe = ticket
        ticket.started_at = now
        self._show_tenants()
        if self.budget is not None:
            self.budget.took(self)

    async def start(self, ticket: Ticket, lost: asyncio.Future[None]) -> bool:
        """Wait until `ticket` may start and take what it needs; False if it may not after
        all (the pool stops, or `lost`: its lease was lost meanwhile). In receive order:
        a message waits while an earlier one that could start waits too."""
        self._arrive(ticket)
        if ticket.phase in SLOT:
            return True
        if self.stopping:
            return False
        now = clock.now()
        if not self.book.line and self._blocked(ticket, now) is None:
            self._take(ticket, now)
            if self.budget is not None:
                self.budget.changed(self)  # at its cap or its rate now, it may leave the free slots to others
            return True
        turn: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        ticket._turn = turn
        # Parked (its tenant runs its cap): it lends its place to other tenants' messages
        # (taken back when it starts), or the queue would stop receiving them behind a busy
        # tenant. A FIFO head to run again in place had lent its place already.
        lent = ticket.phase is not Phase.READY or self._tenant_full(ticket.group)
        self.book.move(ticket, Phase.LENT if lent else Phase.WAITING)
        self._kick()
        if not turn.done():

            def lease_lost(_: object) -> None:
                if ticket._turn is turn:  # out of line now: a slot freed before its task runs is not its
                    self._leave_line(ticket)

            lost.add_done_callback(lease_lost)
            try:
                await turn
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled() and turn.result():
                    self.work_ended(ticket)  # handed a slot it will never use: close() gives it back
                raise
            finally:
                lost.remove_done_callback(lease_lost)  # the lease's future is shared: leave it clean
        if turn.result():
            if not lost.done():
                return True
            self.work_ended(ticket)  # handed a slot as its lease went: it goes on
            self.decide(ticket)
            return False
        self._leave_line(ticket)
        return False

    def _leave_line(self, ticket: Ticket) -> None:
        if ticket._turn is not None:
            if not ticket._turn.done():
                ticket._turn.set_result(False)
            ticket._turn = None
        if ticket.phase is Phase.WAITING or ticket.phase is Phase.LENT:
            self.book.move(ticket, Phase.READY if ticket.phase is Phase.WAITING else Phase.SETTLING)
            self._kick()

    def _admit_line(self, now: float) -> None:
        """Start whoever in the line may start now, in receive order; a message whose tenant
        runs its cap is passed over, anything else that blocks one blocks the rest."""
        for ticket in list(self.book.line):
            if ticket._turn is None or ticket._turn.done():
                continue  # its task was cancelled while it waited: it leaves the line when that task runs
            block = self._blocked(ticket, now)
            if block == "tenant":
                continue
            if block is not None:
                return
            self._take(ticket, now)
            assert ticket._turn is not None
            ticket._turn.set_result(True)
            ticket._turn = None

    def handler_called(self, ticket: Ticket) -> None:
        """Its handler is called: a job for WORKER_MAX_JOBS, once per message (a FIFO retry
        in place is the same job)."""
        if ticket.promised and self.completion is not None:
            ticket.promised = False
            self.completion.job_started()
        if ticket.rate_pending and self.window is not None:
            ticket.rate_pending = False
            self.window.began(clock.now())
            self._kick()  # the window's next opening is a time now: the line's timer follows it

    # -- 3. what a ticket gives back --------------------------------------------------

    def work_ended(self, ticket: Ticket) -> None:
        """Its handler's work has really ended (a thread's call returned)."""
        to = ON_WORK_ENDED.get(ticket.phase)
        if to is not None:
            self._move_slot(ticket, to)

    def overdue(self, ticket: Ticket) -> None:
        """Its job was cancelled (timeout, lease lost) and its work goes on all the same: it
        keeps its slot of the concurrency, and gives back its place in the limit in use."""
        if self.book.overdue(ticket):
            self._kick()

    def decide(self, ticket: Ticket, duration: float = 0.0, outcome: Outcome | None = None) -> None:
        """Its ending was read (the pause's decisions made): the slot may go once its work
        ended. A handler that ran (`duration`) tells the adaptive limit first, so that a
        shrunken limit holds this very slot back."""
        if self.adaptive is not None and duration and outcome is not None:
            limit = self.adaptive.sample(duration, outcome, clock.now(), self.running)
            if limit != self.limit:
                self.set_limit(limit)
                if self.report is not None:
                    self.report.concurrency_limit(self.adaptive)
        to = ON_DECIDED.get(ticket.phase)
        if to is not None:
            self._move_slot(ticket, to)

    def _move_slot(self, ticket: Ticket, to: Phase) -> None:
        """A move within the slot's phases; out of them, the slot goes back: settling from
        now on (or closed), its place is the next job's."""
        self.book.move(ticket, to)
        if to in SLOT:
            return
        if ticket.rate_pending and self.window is not None:
            ticket.rate_pending = False
            self.window.dropped()  # let go, never called: no start a partner saw
        if ticket.group is not None:
            self._show_tenants()
        self._kick()

    def delete_sent(self, ticket: Ticket) -> None:
        """Its delete's batch call goes out (acker.py; its handler's work has ended): its
        place goes back now, while fewer than `sent_limit` such deletes are out; otherwise
        at its close, once SQS has answered. Its ticket is still closed then (the lease is
        kept until the delete is confirmed, and the jobs left count it only then). A batch
        gives back up to 10 places at once: one look at the state for all of them, so that
        a poller wakes to a whole receive's worth, not to the first of ten."""
        if ticket.phase is not Phase.SETTLING or self.sent >= self.sent_limit:
            return
        self.book.move(ticket, Phase.SENT)
        self.waker.soon()

    def close(self, ticket: Ticket) -> None:
        """Everything the ticket holds goes back: its place, its place in line, the probe;
        its handler slot too unless its work still runs (a thread cut off at shutdown keeps
        it until its call returns)."""
        if ticket.closed:
            return
        # A ticket whose delete was sent gave its place back then: unless it still holds
        # something else, its close changes what a poller may ask for only while SQS cannot
        # be reached (_receivable), and needs no look at the state (one per job is enough).
        changed = ticket.phase is not Phase.SENT or not self.sqs_ok or self._probe is ticket
        self._arrive(ticket)
        self._leave_line(ticket)
        if self._probe is ticket:
            self._probe = None  # it said nothing about the downstream: the next may probe
        self.decide(ticket)
        self.book.move(ticket, Phase.CUT if ticket.phase in SLOT else Phase.CLOSED)
        if changed:
            self._kick()
        if self.completion is not None:
            self.completion.closed(ticket.promised)

    def _show_tenants(self) -> None:
        if self.tenant_cap is not None and self.report is not None:
            cap, tenants = self.tenant_cap, self.book.tenants
            self.report.tenants(len(tenants), sum(1 for n in tenants.values() if n >= cap), self.parked)

    # -- signals ----------------------------------------------------------------------

    def ended(self, ticket: Ticket, ending: Ending) -> Ending:
        """Its attempt ended: what that says about the downstream (the pause) is heard, and
        the slot may go (`decide`). Trouble pauses the queue, and the message waits out the
        whole pause and then as long again as asked (the returned ending's delay): the probe
        that ends the pause is then another message, not this one once more (each receive
        counts toward its maxReceiveCount). An answer from a job started after the pause
        began ends it."""
        error = ending.error
        if isinstance(error, DownstreamUnavailable):
            now = clock.now()
            if self.trouble(ticket, now, error.seconds) and self.report is not None:
                self.report.paused(self.breaker.until - now, error)
            ending = dataclasses.replace(ending, requested_delay=self.breaker.until - now + error.seconds)
        elif (
            # Only a handler that ran to an end answers for the downstream: not a message
            # that never reached it (a body that does not parse), released or lost.
            self.answered(ticket, handled=ending.called and ending.outcome not in ("released", "lease_lost"))
            and self.report is not None
        ):
            self.report.resumed()
        self.decide(ticket, ending.duration, ending.outcome)
        return ending

    def trouble(self, ticket: Ticket, now: float, seconds: float) -> bool:
        """Its handler said the downstream is unavailable. True when a pause began."""
        if self._probe is ticket:
            self._probe = None
        began = self.breaker.trouble(now, seconds, ticket.started_at)
        self._kick()
        return began

    def answered(self, ticket: Ticket, handled: bool) -> bool:
        """Its handler ended otherwise. True when this ended a pause. A probe that left
        without an answer (released, lease lost) keeps the probe until its ticket closes."""
        probe = handled and self._probe is ticket
        if probe:
            self._probe = None
        ended = self.breaker.answered(ticket.started_at, handled)
        if ended or probe:  # else nothing changed: every job's end comes here
            self._kick()
        return ended

    def sqs_answered(self, ok: bool) -> None:
        """A delete or lease extension reached SQS (`ok`), or could not."""
        if ok != self.sqs_ok:
            self.sqs_ok = ok
            self._kick()

    def set_limit(self, limit: int) -> None:
        """Handler slots from now on, at most the concurrency. Below what runs, nothing more
        starts until enough end; above it, whoever waits starts now."""
        self.limit = max(1, min(limit, self.capacity))
        self._kick()

    def set_prefetch(self, target: int) -> None:
        prefetch = min(target, self.prefetch_cap)
        if prefetch != self.prefetch:  # measured after every job: mostly the same
            self.prefetch = prefetch
            self._kick()

    def stop(self) -> None:
        """No more receives or starts: the waits end (their messages are let go). A shared
        budget stops first, for every queue on it: the pools stop one after another, and a
        slot this one leaves must not start another queue's job meanwhile."""
        if self.budget is not None:
            self.budget.stopping = True
        self.stopping = True
        for ticket in list(self.book.line):
            self._leave_line(ticket)
        self._kick()
        self.waker.every()

    # -- waking -------------------------------------------------------------------------

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
        now = clock.now()
        if self.book.line:
            self._admit_line(now)
        if self.report is not None:
            self.report.waiting(self.waiting)
        if pollers:
            self.waker.one()
        if self.book.line and (delay := self._wake_at()) is not None:
            self.waker.at(delay)  # look at the line again when it may unblock by itself

    def _wake_at(self) -> float | None:
        """Seconds until the state changes by itself (a pause ends, a rate window moves)."""
        now = clock.now()
        waits = (pause_wait(self.breaker, now, probe_out=False), rate_wait(self.window, now))
        times = [wait for wait in waits if 0 < wait < math.inf]  # else a job's start or end moves it
        return max(0.001, min(times)) if times else None

    # -- the shared budget (budget.py) ----------------------------------------------------

    def wants(self, now: float) -> Want:
        """What this queue wants of the shared budget: a backlog is a job it could start
        now but for the budget, a message waiting for it (not parked) or, when none waits,
        on its way (received, its task about to ask; or the latest receive brought all it
        asked for, so SQS holds more, and a receive is out or may go out for them)."""
        head = next((t for t in self.book.line if not self._tenant_full(t.group)), None)
        coming = self.arriving or (self.full_receive and (self.book.reserved or self.receivable(1, now)))
        if head is None and not coming:
            return NOTHING
        if self._blocked(head or Ticket(0), now, budget=False) is not None:
            return NOTHING
        return WAITING if head is not None else COMING

    def shared_report(self, in_use: int, given: bool) -> None:
        if self.report is not None:
            self.report.shared_slots(in_use, given)
