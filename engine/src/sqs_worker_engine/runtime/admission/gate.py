"""The start gate: the rules one queue's starts and receives answer to (admission.py asks
them), and the state they read.

- handler slots: at most the limit in use run (the concurrency, or below it what the
  adaptive limit allows: adaptive.py); work cancelled that goes on holds a slot of the
  concurrency, not of the limit;
- the pause (throttle.Breaker) and its probe: `pause_wait` says when the next start may go;
- the rate limit (throttle.StartWindow): `rate_wait` says when the next start may go;
- tenant caps (tenants.py), the stop;
- SQS answering (reach.py): while its deletes fail nothing starts and nothing is received.

Each rule is said once; `blocked` (may this message start), `receivable` (how many may a
poller ask for) and `wake_at` (when does the state change by itself) ask them.
"""

from __future__ import annotations

import asyncio
import math
from typing import Literal

from ..protections.adaptive import Limit
from ..protections.budget import SharedBudget
from ..protections.reach import Reach
from ..protections.throttle import Breaker, StartWindow
from .tickets import Ticket, TicketBook

Block = Literal["stopping", "slots", "sqs", "tenant", "paused", "rate", "budget"]


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


class StartGate:
    def __init__(
        self,
        book: TicketBook,
        concurrency: int,
        *,
        window: StartWindow | None,
        breaker: Breaker | None,
        tenant_cap: int | None,
        adaptive: Limit | None,
        budget: SharedBudget | None,
    ) -> None:
        self.book = book  # what runs and waits (tickets.py)
        self.capacity = concurrency  # the configured concurrency: the ceiling of `limit`
        self.limit = concurrency if adaptive is None else adaptive.current  # slots in use now (set_limit)
        self.adaptive = adaptive  # WORKER_ADAPTIVE_CONCURRENCY: moves the limit (adaptive.py)
        self.window = window
        self.breaker = breaker or Breaker()
        self.tenant_cap = tenant_cap
        self.budget = budget  # a budget shared with other queues: its stop is every queue's
        # The pool's one stopping fact: no more receives or starts (written by stop only). A
        # plain attribute, asked several times a message; the event is for waiting on it.
        self.stopping = False
        self.stop_signal = asyncio.Event()
        self.reach = Reach()  # the kinds of SQS call that fail now (written by Admission.sqs_answered)
        self.probe: Ticket | None = None  # the probe that runs now (written by take, trouble, answered, let_go)
        self.probe_receive = False  # a receive for the probe is out (written by Admission.reserve, received)

    def stop(self) -> None:
        """No more receives or starts (Admission.stop)."""
        self.stopping = True
        self.stop_signal.set()

    def tenant_full(self, group: str | None) -> bool:
        cap = self.tenant_cap
        return cap is not None and group is not None and self.book.tenants.get(group, 0) >= cap

    def slots_full(self) -> bool:
        """Every slot taken: of the limit in use, by jobs still within their time; of the
        concurrency, by any (work that ignores its cancellation holds its slot until it
        returns, but a hung job must not halt an adaptive limit that only grows from jobs
        that end)."""
        running = self.book.running
        return running - len(self.book.late) >= self.limit or running >= self.capacity

    def blocked(self, ticket: Ticket, now: float) -> Block | None:
        """Why `ticket` may not start now, or None, but for the shared budget's word."""
        if self.stopping or (self.budget is not None and self.budget.stopping):
            return "stopping"
        if self.slots_full():
            return "slots"
        if self.reach.starts_held:
            return "sqs"
        if self.tenant_full(ticket.group):
            return "tenant"
        if pause_wait(self.breaker, now, self.probe is not None) > 0:
            return "paused"
        if rate_wait(self.window, now) > 0:
            return "rate"
        return None

    def receivable(self, most: int, now: float, *, room: int, free: int, entitled: int | None) -> int:
        """How many a poller may ask for now: `room`, places the prefetch target leaves
        beside the slots; `free`, places the hard bound leaves; `entitled`, the slots a
        shared budget may give this queue."""
        if self.stopping:
            return 0
        # Places for the limit in use, not the ceiling: a shrunken limit holds no more waiting;
        # and with a shared budget, for the slots it may give this queue.
        # (A job whose work goes on past its cancellation holds a place beyond the limit.)
        limit = min(self.capacity, self.limit + len(self.book.late))
        slots = limit if entitled is None else min(limit, entitled)
        n = min(most, slots + room, free)
        if self.reach.starts_held:
            return 0  # it could not start, and each receive counts towards its maxReceiveCount
        if self.breaker.paused:
            if pause_wait(self.breaker, now, self.probe is not None or self.probe_receive) > 0:
                return 0
            if any(not self.tenant_full(t.group) for t in self.book.line):
                return 0  # a held message will be the probe: no receive for it
            n = min(n, 1)
        if self.window is not None:
            n = min(n, self.window.count - len(self.book.line))  # at most a window's worth of starts waits
        return max(0, n)

    def wake_at(self, now: float) -> float | None:
        """Seconds until the state changes by itself (a pause ends, a rate window moves)."""
        waits = (pause_wait(self.breaker, now, probe_out=False), rate_wait(self.window, now))
        times = [wait for wait in waits if 0 < wait < math.inf]  # else a job's start or end moves it
        return max(0.001, min(times)) if times else None

    # -- what a start takes of the rules, and gives back ---------------------------------

    def take(self, ticket: Ticket, now: float) -> None:
        if self.window is not None:
            self.window.grant(now)
            ticket.rate_pending = True
        ticket.probe = self.breaker.paused  # past its time: this start is the probe
        if ticket.probe:
            self.probe = ticket
        ticket.started_at = now

    def called(self, ticket: Ticket, now: float) -> bool:
        """Its handler is called: its start counts in the rate window now. True if it moved."""
        if not ticket.rate_pending or self.window is None:
            return False
        ticket.rate_pending = False
        self.window.began(now)
        return True

    def dropped(self, ticket: Ticket) -> None:
        """Its slot went back: a start let go that never reached its handler leaves the window."""
        if ticket.rate_pending and self.window is not None:
            ticket.rate_pending = False
            self.window.dropped()  # let go, never called: no start a partner saw

    def let_go(self, ticket: Ticket) -> bool:
        """It leaves without an answer: the next may probe. True if it was the probe."""
        if self.probe is not ticket:
            return False
        self.probe = None
        return True

    def trouble(self, ticket: Ticket, now: float, seconds: float) -> bool:
        """Its handler said the downstream is unavailable. True when a pause began."""
        self.let_go(ticket)
        return self.breaker.trouble(now, seconds, ticket.started_at)

    def answered(self, ticket: Ticket, handled: bool) -> tuple[bool, bool]:
        """Its handler ended otherwise: (the pause ended, anything changed). A probe that
        left without an answer (released, lease lost) keeps the probe until its ticket closes."""
        probe = handled and self.let_go(ticket)
        ended = self.breaker.answered(ticket.started_at, handled)
        return ended, ended or probe

    def set_limit(self, limit: int) -> None:
        self.limit = max(1, min(limit, self.capacity))
