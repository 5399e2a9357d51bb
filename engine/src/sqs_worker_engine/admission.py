"""Admission: the one owner of "how many may a poller ask for now" and "may this message
start now", for one queue's pool.

Every protection that limits what is received or started answers here, from one state:

- places: what the pool holds (reserved for a receive, waiting, running, settling) never
  exceeds the concurrency plus the prefetch cap (prefetch.py); receiving asks only for free
  places, and while fewer than the measured prefetch target wait ahead of the slots;
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

Whatever a message holds from admission is one `Ticket`: its place, its handler slot, its
rate-window entry, its tenant turn, the probe. `close()` gives all of it back, once,
whichever way the message leaves; the pool calls it in one `finally`. The handler slot
and the tenant turn go back earlier, once the handler's work has really ended and its
ending was read (`returned` and `decided`), so the next job starts while this one settles.

The decisions are made by `_blocked` from the state alone; the waits only wait for the
state to change (a ticket closed or returned, a pause that ends, a rate window that
moves on, SQS answering again).
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from . import clock
from .adaptive import Limit
from .budget import COMING, NOTHING, WAITING, SharedBudget, Want
from .completion import Completion
from .errors import DownstreamUnavailable
from .outcomes import Ending, Outcome
from .reporting import QueueReport
from .throttle import Breaker, StartWindow

BATCH_WAIT = 0.002  # seconds a poller waits for a fuller batch of free places (see reserve)
Block = Literal["stopping", "slots", "sqs", "tenant", "paused", "rate", "budget"]


@dataclass(eq=False)
class Ticket:
    """What one message holds from admission, released by `Admission.close`."""

    seq: int  # receive order: starts go in this order
    group: str | None  # its tenant, when the queue caps tenants
    started_at: float = 0.0  # when its latest attempt started (loop time)
    running: bool = False  # holds a handler slot (and its tenant turn)
    returned: bool = True  # its handler's work has really ended (a thread's call returned)
    decided: bool = True  # its latest ending was read: the slot may go
    probe: bool = False  # its latest start is the pause's probe
    counted: bool = True  # counts in `in_use` (received, waiting or running; not parked or settling)
    late: bool = False  # cancelled past its timeout, its work still going (`overdue`)
    closed: bool = False
    promised: bool = False  # holds a place of the jobs left (completion.py) until its handler is called
    arrived: bool = True  # False from its receive until it first asks to start (or closes)
    # Its turn to start, while it waits in line: True once it has started, False if it may
    # not after all (its lease was lost, or the pool stops). Awaited directly: one loop
    # turn from a freed slot to the next job, not two (asyncio.wait adds a callback's).
    _turn: asyncio.Future[bool] | None = field(default=None, repr=False)

    def __lt__(self, other: Ticket) -> bool:  # the line is kept in receive order
        return self.seq < other.seq


@dataclass
class Grant:
    """Places reserved for one receive; `probe`: it asks for the pause's probe."""

    places: int
    probe: bool = False


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
        self.limit = concurrency  # handler slots in use now (set_limit)
        self.adaptive = adaptive  # WORKER_ADAPTIVE_CONCURRENCY: moves the limit (adaptive.py)
        if adaptive is not None:
            self.limit = adaptive.current
            if report is not None:
                report.concurrency_limit(adaptive)
        self.completion = completion  # the process's jobs left, shared by every queue
        if completion is not None:
            completion.listen(self._kick)
        self.prefetch_cap = prefetch_cap
        self.prefetch = 0  # the measured target (prefetch.py), at most the cap
        self.window = window
        self.breaker = breaker or Breaker()
        self.tenant_cap = tenant_cap
        self.in_use = 0  # places reserved, waiting or running: what the prefetch target bounds
        self.held = 0  # places held in all, settling included: what the hard bound bounds
        self.running = 0  # handler slots taken
        self.overdue_running = 0  # of them, held by work cancelled that goes on all the same
        self.tenants: dict[str, int] = {}  # group -> jobs of it holding a slot
        self.stopping = False
        self.sqs_ok = True  # the latest delete or lease extension reached SQS
        self._line: list[Ticket] = []  # waiting to start, in receive order
        self._probe: Ticket | None = None  # the probe that runs now
        self._probe_receive = False  # a receive for the probe is out
        self._pollers: list[asyncio.Future[None]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._seq = 0
        self.budget = budget
        self.full_receive = False  # the latest receive brought all it asked for (budget.py: backlog)
        self.arriving = 0  # received, not yet asking to start: their tasks are about to (budget.py)
        self.reserved = 0  # places of receives still out
        if budget is not None:
            budget.join(self, weight)

    # -- the bound ----------------------------------------------------------------

    @property
    def held_limit(self) -> int:
        """What a worker may hold of this queue, and strand on SIGKILL: concurrency + prefetch."""
        return self.capacity + self.prefetch_cap

    @property
    def waiting(self) -> int:
        """Messages received and waiting to start (prefetched, parked or paused)."""
        return len(self._line)

    @property
    def parked(self) -> int:
        """Waiting messages whose tenant runs its cap."""
        return sum(1 for t in self._line if self._tenant_full(t.group))

    def tickets(self) -> Iterator[Ticket]:
        return iter(self._line)

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
        n = min(most, slots + self.prefetch - self.in_use, self.held_limit - self.held)
        if not self.sqs_ok and self.held:
            return 0  # what is held could not be settled: receive more once SQS answers
        if self.breaker.paused:
            if now < self.breaker.until or self._probe is not None or self._probe_receive:
                return 0
            if any(not self._tenant_full(t.group) for t in self._line):
                return 0  # a held message will be the probe: no receive for it
            n = min(n, 1)
        if self.window is not None:
            n = min(n, self.window.count - len(self._line))  # at most a window's worth of starts waits
        return max(0, n)

    async def reserve(self, most: int) -> Grant:
        """Wait for places and take between 1 and `most` of them for one receive.

        Jobs that started together end together, but their places come back one at a
        time, spread over a millisecond or two: waiting up to BATCH_WAIT for a full batch
        lets one receive serve the whole wave (SQS bills per request). While messages wait
        for a slot anyway, it waits for a whole batch of the prefetch."""
        loop = asyncio.get_running_loop()
        want = min(most, self.limit)
        while True:
            while (n := self.receivable(most, clock.now())) <= 0 or (
                self._line and n < min(most, self.prefetch) and not self.breaker.paused
            ):
                if self.stopping:
                    return Grant(0)
                began = loop.time()
                # The rate limit, not the slots, holds the line (it keeps it full).
                rate_bound = bool(self._line) and self._blocked(self._line[0], clock.now(), budget=False) == "rate"
                await self._change(loop, self._wake_at())
                if rate_bound and self.report is not None:
                    self.report.throttled(loop.time() - began)
            deadline = loop.time() + BATCH_WAIT
            while 0 < self.receivable(most, clock.now()) < want and (left := deadline - loop.time()) > 0:
                await self._change(loop, left)
            n = self.receivable(most, clock.now())
            if n > 0:  # another poller may have taken them meanwhile
                self.in_use += n
                self.held += n
                if self.completion is not None:
                    self.completion.promise(n, self)
                self.reserved += n
                probe = self.breaker.paused
                self._probe_receive = self._probe_receive or probe
                if self.receivable(most, clock.now()) > 0:
                    self._wake_poller()  # room for more than this receive: the next poller looks too
                return Grant(n, probe)

    def received(self, grant: Grant, got: int) -> list[Ticket]:
        """The receive brought `got` of the places granted: one ticket each; the rest go back."""
        unused = grant.places - got
        self.in_use -= unused
        self.held -= unused
        self.reserved -= grant.places
        if grant.probe:
            self._probe_receive = False
        tickets = []
        for _ in range(got):
            self._seq += 1
            tickets.append(Ticket(self._seq, None, promised=self.completion is not None, arrived=False))
        if self.completion is not None:
            self.completion.unpromise(unused)
            self.completion.received(got)
        self.arriving += got  # before the kick: they are this queue's backlog (budget.py)
        full = 0 < got == grant.places
        if unused or grant.probe or full != self.full_receive:
            self.full_receive = full
            self._kick()
        return tickets

    def _arrive(self, ticket: Ticket) -> None:
        if not ticket.arrived:
            ticket.arrived = True
            self.arriving -= 1

    def behind_its_group(self, ticket: Ticket) -> None:
        """FIFO: its message waits for the one before it in its group, not for a slot: it is
        no backlog of this queue until its turn (it asks to start then)."""
        self._arrive(ticket)

    # -- 2. may this message start -----------------------------------------------------

    def _tenant_full(self, group: str | None) -> bool:
        return self.tenant_cap is not None and group is not None and self.tenants.get(group, 0) >= self.tenant_cap

    def at_cap(self, ticket: Ticket) -> bool:
        return self._tenant_full(ticket.group)

    def _slots_full(self) -> bool:
        """Every slot taken: of the limit in use, by jobs still within their time; of the
        concurrency, by any (work that ignores its cancellation holds its slot until it
        returns, but a hung job must not halt an adaptive limit that only grows from jobs
        that end)."""
        return self.running - self.overdue_running >= self.limit or self.running >= self.capacity

    def resting(self, backing_off: bool = False) -> bool:
        """Waiting by design, not stuck (health.py): stopping, or a slot is free and a
        poller waits for admission's word (a pause, the rate limit, the shared budget, SQS
        unreachable, nothing to receive) or, `backing_off`, to ask SQS again after a
        failed receive. Every slot held is the case liveness is for: then only a job's end
        is progress."""
        return self.stopping or (not self._slots_full() and (bool(self._pollers) or backing_off))

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
        if self.breaker.paused and (now < self.breaker.until or self._probe is not None):
            return "paused"
        if self.window is not None and not self.window.may_start(now):
            return "rate"
        if budget and self.budget is not None and not self.budget.may_start(self, now):
            return "budget"
        return None

    def _take(self, ticket: Ticket, now: float) -> None:
        self.running += 1
        if not ticket.counted:  # parked until now, or a FIFO head run again in place
            ticket.counted = True
            self.in_use += 1
        if ticket.group is not None and self.tenant_cap is not None:
            self.tenants[ticket.group] = self.tenants.get(ticket.group, 0) + 1
        if self.window is not None:
            self.window.record(now)
        ticket.probe = self.breaker.paused  # past its time: this start is the probe
        if ticket.probe:
            self._probe = ticket
        ticket.running, ticket.returned, ticket.decided = True, False, False
        ticket.started_at = now
        self._show_tenants()
        if self.budget is not None:
            self.budget.took(self)

    async def start(self, ticket: Ticket, lost: asyncio.Future[None]) -> bool:
        """Wait until `ticket` may start and take what it needs; False if it may not after
        all (the pool stops, or `lost`: its lease was lost meanwhile). In receive order:
        a message waits while an earlier one that could start waits too."""
        self._arrive(ticket)
        if ticket.running:
            return True
        if self.stopping:
            return False
        now = clock.now()
        if not self._line and self._blocked(ticket, now) is None:
            self._take(ticket, now)
            if self.budget is not None:
                self.budget.changed(self)  # at its cap or its rate now, it may leave the free slots to others
            return True
        if self._tenant_full(ticket.group) and ticket.counted:
            # Parked: it lends its place to other tenants' messages (taken back when it
            # starts), or the queue would stop receiving them behind a busy tenant.
            ticket.counted = False
            self.in_use -= 1
        turn: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        ticket._turn = turn
        bisect.insort(self._line, ticket)
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
        if ticket in self._line:
            self._line.remove(ticket)
            self._kick()

    def _admit_line(self, now: float) -> None:
        """Start whoever in the line may start now, in receive order; a message whose tenant
        runs its cap is passed over, anything else that blocks one blocks the rest."""
        for ticket in list(self._line):
            if ticket._turn is None or ticket._turn.done():
                continue  # its task was cancelled while it waited: it leaves the line when that task runs
            block = self._blocked(ticket, now)
            if block == "tenant":
                continue
            if block is not None:
                return
            self._line.remove(ticket)
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

    # -- 3. what a ticket gives back --------------------------------------------------

    def work_ended(self, ticket: Ticket) -> None:
        """Its handler's work has really ended (a thread's call returned)."""
        ticket.returned = True
        self._free_slot(ticket)

    def overdue(self, ticket: Ticket) -> None:
        """Its job was cancelled (timeout, lease lost) and its work goes on all the same: it
        keeps its slot of the concurrency, and gives back its place in the limit in use."""
        if ticket.running and not ticket.late:
            ticket.late = True
            self.overdue_running += 1
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
        ticket.decided = True
        self._free_slot(ticket)

    def _free_slot(self, ticket: Ticket) -> None:
        if not (ticket.running and ticket.returned and ticket.decided):
            return
        ticket.running = False
        self.running -= 1
        if ticket.late:
            ticket.late = False
            self.overdue_running -= 1
        if ticket.counted:  # settling from now on: the next job's place
            ticket.counted = False
            self.in_use -= 1
        if ticket.group is not None and ticket.group in self.tenants:
            self.tenants[ticket.group] -= 1
            if not self.tenants[ticket.group]:
                del self.tenants[ticket.group]
            self._show_tenants()
        self._kick()

    def close(self, ticket: Ticket) -> None:
        """Everything the ticket holds goes back: its place, its place in line, the probe;
        its handler slot too unless its work still runs (a thread cut off at shutdown keeps
        it until its call returns)."""
        if ticket.closed:
            return
        ticket.closed = True
        self._arrive(ticket)
        self._leave_line(ticket)
        if self._probe is ticket:
            self._probe = None  # it said nothing about the downstream: the next may probe
        self.decide(ticket)
        if ticket.counted and not ticket.running:
            ticket.counted = False
            self.in_use -= 1
        self.held -= 1
        self._kick()
        if self.completion is not None:
            self.completion.closed(ticket.promised)

    def _show_tenants(self) -> None:
        if self.tenant_cap is not None and self.report is not None:
            cap = self.tenant_cap
            self.report.tenants(len(self.tenants), sum(1 for n in self.tenants.values() if n >= cap), self.parked)

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
        for ticket in list(self._line):
            self._leave_line(ticket)
        self._kick()
        while self._pollers:  # every poller, to see that it is done
            self._wake_poller()

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
        if self._line:
            self._admit_line(now)
        if self.report is not None:
            self.report.waiting(len(self._line))
        if pollers:
            self._wake_poller()
        self._schedule(now)

    def _wake_poller(self) -> None:
        """Wake the poller that has waited longest. One, not all: pollers are alike (what
        one may ask for, any may), and a place freed by a job is one receive's worth at most;
        a poller that takes places while more are left wakes the next (`reserve`). Waking all
        of them for every freed place had tens race for it at high concurrency."""
        while self._pollers:
            waiter = self._pollers.pop(0)
            if not waiter.done():  # else its wait timed out: it looks anyway
                waiter.set_result(None)
                return

    # -- the shared budget (budget.py) ----------------------------------------------------

    def wants(self, now: float) -> Want:
        """What this queue wants of the shared budget: a backlog is a job it could start
        now but for the budget, a message waiting for it (not parked) or, when none waits,
        on its way (received, its task about to ask; or the latest receive brought all it
        asked for, so SQS holds more, and a receive is out or may go out for them)."""
        head = next((t for t in self._line if not self._tenant_full(t.group)), None)
        coming = self.arriving or (self.full_receive and (self.reserved or self.receivable(1, now)))
        if head is None and not coming:
            return NOTHING
        if self._blocked(head or Ticket(0, None), now, budget=False) is not None:
            return NOTHING
        return WAITING if head is not None else COMING

    def shared_report(self, in_use: int, given: bool) -> None:
        if self.report is not None:
            self.report.shared_slots(in_use, given)

    def _wake_at(self) -> float | None:
        """Seconds until the state changes by itself (a pause ends, a rate window moves)."""
        now = clock.now()
        times = []
        if self.breaker.paused and now < self.breaker.until:
            times.append(self.breaker.until - now)
        if self.window is not None and not self.window.may_start(now):
            times.append(self.window.wait(now))
        return max(0.001, min(times)) if times else None

    def _schedule(self, now: float) -> None:
        """Look at the line again when it may unblock by itself."""
        if not self._line:
            return
        delay = self._wake_at()
        if delay is None:
            return
        if self._timer is not None:
            if self._timer.when() <= asyncio.get_running_loop().time() + delay:
                return
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._kick()

    async def _change(self, loop: asyncio.AbstractEventLoop, at_most: float | None) -> None:
        """Until the state changes, or at most `at_most` seconds."""
        waiter = loop.create_future()
        self._pollers.append(waiter)
        timer = None if at_most is None else loop.call_later(at_most, _wake, waiter)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            if waiter in self._pollers:
                self._pollers.remove(waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
