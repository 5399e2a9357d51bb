"""The start line of one queue's admission (admission.py): a received message's way to a
handler slot, in receive order, and what it gives back as its attempt ends, read from
the ticket book (tickets.py) and the start gate's rules (gate.py). `Admission` is this
line with its receive side, its signals and its wake-ups."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Iterator

from ..base import clock
from ..handlers.outcomes import Outcome
from .adaptive import Limit
from .budget import SharedBudget, Want
from .completion import Completion
from .gate import Block, StartGate
from .reach import Reach
from .reporting import QueueReport
from .throttle import Breaker
from .tickets import SLOT, Phase, Ticket, TicketBook
from .waking import Waker

# What a ticket's slot moves to when its work ends / its ending is read (else: nothing changes).
ON_WORK_ENDED = {Phase.RUNNING: Phase.RETURNED, Phase.DECIDED: Phase.SETTLING, Phase.CUT: Phase.CLOSED}
ON_DECIDED = {Phase.RUNNING: Phase.DECIDED, Phase.RETURNED: Phase.SETTLING}


class StartLine(ABC):
    """Starts and their endings; what a ticket holds, counted by the book (set up by `Admission`)."""

    book: TicketBook  # every ticket by phase: what runs, waits, is held
    gate: StartGate  # the rules a start answers to
    waker: Waker
    report: QueueReport | None
    completion: Completion | None
    budget: SharedBudget | None
    prefetch_cap: int

    @abstractmethod
    def _kick(self) -> None: ...  # the state changed: look at it again

    @abstractmethod
    def set_limit(self, limit: int) -> None: ...

    @abstractmethod
    def wants(self, now: float) -> Want: ...  # with refresh and shared_report: a budget's Member

    @abstractmethod
    def refresh(self, pollers: bool = True) -> None: ...

    @abstractmethod
    def shared_report(self, in_use: int, given: bool) -> None: ...

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

    @property
    def _probe(self) -> Ticket | None:  # the probe that runs now (the gate's)
        return self.gate.probe

    @_probe.setter
    def _probe(self, ticket: Ticket | None) -> None:
        self.gate.probe = ticket

    @property
    def parked(self) -> int:
        """Waiting messages whose tenant runs its cap."""
        return sum(1 for t in self.book.line if self.gate.tenant_full(t.group))

    def tickets(self) -> Iterator[Ticket]:
        return iter(self.book)

    # -- 2. may this message start -----------------------------------------------------

    def behind_its_group(self, ticket: Ticket) -> None:
        """FIFO: its message waits for the one before it in its group, not for a slot: it is
        no backlog of this queue until its turn (it asks to start then)."""
        if ticket.phase is Phase.ARRIVING:
            self.book.move(ticket, Phase.READY)

    def at_cap(self, ticket: Ticket) -> bool:
        return self.gate.tenant_full(ticket.group)

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

    def _blocked(self, ticket: Ticket, now: float) -> Block | None:
        """Why `ticket` may not start now, or None: the gate's rules, then the shared
        budget, asked last, once nothing else blocks it."""
        block = self.gate.blocked(ticket, now)
        if block is None and self.budget is not None and not self.budget.may_start(self, now):
            return "budget"
        return block

    def _take(self, ticket: Ticket, now: float) -> None:
        self.book.move(ticket, Phase.RUNNING)
        self.gate.take(ticket, now)
        self._show_tenants()
        if self.budget is not None:
            self.budget.took(self)

    async def start(self, ticket: Ticket, lost: asyncio.Future[None]) -> bool:
        """Wait until `ticket` may start and take what it needs; False if it may not after
        all (the pool stops, or `lost`: its lease was lost meanwhile). In receive order:
        a message waits while an earlier one that could start waits too."""
        started = self.start_at_once(ticket)
        return started if started is not None else await self.wait_to_start(ticket, lost)

    def start_at_once(self, ticket: Ticket) -> bool | None:
        """`start` when it needs no wait: True, it took what it needs; False, it may not
        start (the pool stops); None, it must wait in line (`wait_to_start`). Most
        messages start at once: they need neither the lease's future nor a coroutine."""
        self.behind_its_group(ticket)  # it asks now
        if ticket.phase in SLOT:
            return True
        if self.gate.stopping:
            return False
        now = clock.now()
        if not self.book.line and self._blocked(ticket, now) is None:
            self._take(ticket, now)
            if self.budget is not None:
                self.budget.changed(self)  # at its cap or its rate now, it may leave the free slots to others
            return True
        return None

    async def wait_to_start(self, ticket: Ticket, lost: asyncio.Future[None]) -> bool:
        """`start` once `start_at_once` said it must wait: in line until its turn."""
        turn: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        ticket._turn = turn
        # Parked (its tenant runs its cap): it lends its place to other tenants' messages
        # (taken back when it starts), or the queue would stop receiving them behind a busy
        # tenant. A FIFO head to run again in place had lent its place already.
        lent = ticket.phase is not Phase.READY or self.gate.tenant_full(ticket.group)
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
        # Only a start the rate window let go is counted in it now: the clock only for those.
        if ticket.rate_pending and self.gate.called(ticket, clock.now()):
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

    def decide(self, ticket: Ticket, duration: float | None = None, outcome: Outcome | None = None) -> None:
        """Its ending was read (the pause's decisions made): the slot may go once its work
        ended. A handler that ran (`duration`, 0.0 for one shorter than the loop clock's
        tick) tells the adaptive limit first, so that a shrunken limit holds this very slot
        back."""
        # The gate's fields read directly, not through the properties: decide runs twice a message.
        adaptive = self.gate.adaptive
        if adaptive is not None and duration is not None and outcome is not None:
            limit = adaptive.sample(duration, outcome, clock.now(), self.running)
            if limit != self.gate.limit:
                self.set_limit(limit)
                if self.report is not None:
                    self.report.concurrency_limit(adaptive)
        to = ON_DECIDED.get(ticket.phase)
        if to is not None:
            self._move_slot(ticket, to)

    def _move_slot(self, ticket: Ticket, to: Phase) -> None:
        """A move within the slot's phases; out of them, the slot goes back: settling from
        now on (or closed), its place is the next job's."""
        self.book.move(ticket, to)
        if to not in SLOT:
            self.gate.dropped(ticket)
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
        if ticket.phase is Phase.SETTLING and self.book.sent < self.sent_limit:
            self.book.move(ticket, Phase.SENT)
            self.waker.soon()

    def close(self, ticket: Ticket) -> None:
        """Everything the ticket holds goes back: its place, its place in line, the probe;
        its handler slot too unless its work still runs (a thread cut off at shutdown keeps
        it until its call returns)."""
        if ticket.closed:
            return
        # A ticket whose delete was sent gave its place back then: unless it still holds
        # something else, its close changes nothing a poller or the line asks, and needs
        # no look at the state (one per job is enough).
        changed = ticket.phase is not Phase.SENT or self.gate.probe is ticket
        self.behind_its_group(ticket)  # no longer arriving
        self._leave_line(ticket)
        self.gate.let_go(ticket)  # it said nothing about the downstream: the next may probe
        self.decide(ticket)
        self.book.move(ticket, Phase.CUT if ticket.phase in SLOT else Phase.CLOSED)
        if changed:
            self._kick()
        if self.completion is not None:
            self.completion.closed(ticket.promised)

    def _show_tenants(self) -> None:
        cap, tenants = self.gate.tenant_cap, self.book.tenants
        if cap is not None and self.report is not None:
            self.report.tenants(len(tenants), sum(1 for n in tenants.values() if n >= cap), self.parked)
