"""The start line of one queue's admission (admission.py): a received message's way to a
handler slot, in receive order, and what it gives back as its attempt ends, read from
the ticket book (tickets.py) and the start gate's rules (gate.py).

Admission owns the line, beside its receive side and the queue's signals, over the same
book and gate; the pool calls the line for each message (start, its handler called, its
attempt's end and what that says of the downstream, its work ended, its delete sent,
close), and the line calls `kick` whenever what it changed may let a waiting message start
or a poller receive."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from ...base import clock
from ...base.errors import DownstreamUnavailable
from ...handlers.outcomes import Ending, Outcome
from ..protections.budget import Member, SharedBudget
from ..protections.completion import Completion
from ..reporting import QueueReport
from .gate import Block, StartGate
from .tickets import SLOT, Phase, Ticket, TicketBook
from .waking import Waker

# What a ticket's slot moves to when its work ends / its ending is read (else: nothing changes).
ON_WORK_ENDED = {Phase.RUNNING: Phase.RETURNED, Phase.DECIDED: Phase.SETTLING, Phase.CUT: Phase.CLOSED}
ON_DECIDED = {Phase.RUNNING: Phase.DECIDED, Phase.RETURNED: Phase.SETTLING}


class StartLine:
    """Starts in receive order and what each ticket gives back; one per queue, its
    admission's `line`."""

    def __init__(
        self,
        book: TicketBook,
        gate: StartGate,
        waker: Waker,
        kick: Callable[[], None],
        *,
        member: Member,
        sent_limit: int,
        report: QueueReport | None = None,
        completion: Completion | None = None,
        budget: SharedBudget | None = None,
    ) -> None:
        self.book = book  # admission's: every ticket by phase
        self.gate = gate  # admission's: the rules a start answers to
        self.waker = waker
        self._kick = kick  # the state changed: admission looks at it again
        self.member = member  # this queue on the shared budget: its admission
        self.sent_limit = sent_limit  # most deletes sent whose places went back (Admission.sent_limit)
        self.report = report
        self.completion = completion
        self.budget = budget

    @property
    def parked(self) -> int:
        """Waiting messages whose tenant runs its cap."""
        return sum(1 for t in self.book.line if self.gate.tenant_full(t.group))

    # -- 2. may this message start -----------------------------------------------------

    def behind_its_group(self, ticket: Ticket) -> None:
        """FIFO: its message waits for the one before it in its group, not for a slot: it is
        no backlog of this queue until its turn (it asks to start then)."""
        if ticket.phase is Phase.ARRIVING:
            self.book.move(ticket, Phase.READY)

    def at_cap(self, ticket: Ticket) -> bool:
        return self.gate.tenant_full(ticket.group)

    def _blocked(self, ticket: Ticket, now: float) -> Block | None:
        """Why `ticket` may not start now, or None: the gate's rules, then the shared
        budget, asked last, once nothing else blocks it."""
        block = self.gate.blocked(ticket, now)
        if block is None and self.budget is not None and not self.budget.may_start(self.member, now):
            return "budget"
        return block

    def _take(self, ticket: Ticket, now: float) -> None:
        self.book.move(ticket, Phase.RUNNING)
        self.gate.take(ticket, now)
        self._show_tenants()
        if self.budget is not None:
            self.budget.took(self.member)

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
                self.budget.changed(self.member)  # at its cap or its rate now, it may leave the free slots to others
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
                    self.leave(ticket)

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
        self.leave(ticket)
        return False

    def leave(self, ticket: Ticket) -> None:
        """Out of the line without a start (its lease went, the pool stops, its task was
        cancelled): its place goes back, or to settling if it had lent it."""
        if ticket._turn is not None:
            if not ticket._turn.done():
                ticket._turn.set_result(False)
            ticket._turn = None
        if ticket.phase is Phase.WAITING or ticket.phase is Phase.LENT:
            self.book.move(ticket, Phase.READY if ticket.phase is Phase.WAITING else Phase.SETTLING)
            self._kick()

    def admit(self, now: float) -> None:
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

    # -- what an attempt's end says of the downstream --------------------------------

    def ended(self, ticket: Ticket, ending: Ending) -> Ending:
        """Its attempt ended: what that says about the downstream (the pause, the adaptive
        limit) is heard, and the slot may go (`decide`). Trouble pauses the queue, and the message waits out the
        whole pause and then as long again as asked (the returned ending's delay): the probe
        that ends the pause is then another message, not this one once more (each receive
        counts toward its maxReceiveCount). An answer from a job started after the pause
        began ends it."""
        error = ending.error
        if isinstance(error, DownstreamUnavailable):
            now = clock.now()
            if self.trouble(ticket, now, error.seconds) and self.report is not None:
                self.report.paused(self.gate.breaker.until - now, error)
            ending = dataclasses.replace(ending, requested_delay=self.gate.breaker.until - now + error.seconds)
        elif (
            # Only a handler that ran to an end answers for the downstream: not a message
            # that never reached it (a body that does not parse), released or lost.
            self.answered(ticket, handled=ending.called and ending.outcome not in ("released", "lease_lost"))
            and self.report is not None
        ):
            self.report.resumed()
        if ending.called:
            self._adapt(ending.duration, ending.outcome)
        self.decide(ticket)
        return ending

    def _adapt(self, duration: float, outcome: Outcome) -> None:
        """A handler that ran (`duration`, 0.0 for one shorter than the loop clock's tick)
        tells the adaptive limit, before its slot may go: a shrunken limit holds this very
        slot back."""
        # The gate's fields read directly, not through the properties: this runs every message.
        adaptive = self.gate.adaptive
        if adaptive is not None:
            limit = adaptive.sample(duration, outcome, clock.now(), self.book.running)
            if limit != self.gate.limit:
                self.gate.set_limit(limit)  # as Admission.set_limit
                self._kick()
                if self.report is not None:
                    self.report.concurrency_limit(adaptive)

    def trouble(self, ticket: Ticket, now: float, seconds: float) -> bool:
        """Its handler said the downstream is unavailable. True when a pause began."""
        began = self.gate.trouble(ticket, now, seconds)
        self._kick()
        return began

    def answered(self, ticket: Ticket, handled: bool) -> bool:
        """Its handler ended otherwise. True when this ended a pause."""
        ended, changed = self.gate.answered(ticket, handled)
        if changed:  # else nothing changed: every job's end comes here
            self._kick()
        return ended

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

    def decide(self, ticket: Ticket) -> None:
        """Its ending was read (the pause's and the adaptive limit's decisions made:
        `ended`): the slot may go once its work ended."""
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
        self.leave(ticket)
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
