"""The ticket book: what each message holds from admission (admission.py), as a phase.

A ticket moves along the edges of `LEGAL` only (an illegal move is a bug and raises), as a
delivery does in delivery.py:

```
 grant --received--> ARRIVING --> READY --start--> RUNNING --work ended--> RETURNED
                                    |                 |                       |
                         in line:   +-> WAITING       | ending read           | ending read
                                    +-> LENT          v                       v
                        (both start, or leave)      DECIDED --work ended--> SETTLING --> SENT
                                                      | closed                | (FIFO: start again)
                                                      v                       v            |
                                                     CUT ---work ended----> CLOSED <-------+
```

Everything admission counts is the size of a set of phases, never a counter kept in step
by hand: "running" is the tickets holding a handler slot, "in use" the places the
prefetch target bounds, "held" the places the hard bound bounds, "arriving" the tickets
whose task has not asked to start yet (the shared budget's backlog on its way).
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum


class Phase(Enum):
    ARRIVING = "arriving"  # received; its task has not asked to start yet
    READY = "ready"  # asked, out of line: behind its FIFO group-mate, or refused a start
    WAITING = "waiting"  # in line for a start, its place counted in use
    LENT = "lent"  # in line, its place lent to others (parked behind its tenant's cap, or a retry)
    RUNNING = "running"  # holds a handler slot: its work goes on, its ending not read yet
    RETURNED = "returned"  # holds a slot: its work ended (a thread's call returned), its ending unread
    DECIDED = "decided"  # holds a slot: its ending read, its work goes on (past its cancellation)
    CUT = "cut"  # closed while its work goes on (cut off at shutdown): the slot until the call returns
    SETTLING = "settling"  # its place only: its slot given back (or it left the line with its place lent)
    SENT = "sent"  # its delete is sent: its place given back before SQS answers (delete_sent)
    CLOSED = "closed"  # holds nothing

    # Members are singletons compared by identity: hash them by identity too. Enum's own
    # __hash__ is a Python-level call (the name's hash), and the sets of these are asked
    # a dozen times a message: 110 ns a lookup, against 34.
    __hash__ = object.__hash__


LEGAL: dict[Phase, frozenset[Phase]] = {
    Phase.ARRIVING: frozenset({Phase.READY}),
    Phase.READY: frozenset({Phase.WAITING, Phase.LENT, Phase.RUNNING, Phase.CLOSED}),
    Phase.WAITING: frozenset({Phase.READY, Phase.RUNNING}),
    Phase.LENT: frozenset({Phase.SETTLING, Phase.RUNNING}),
    Phase.RUNNING: frozenset({Phase.RETURNED, Phase.DECIDED}),
    Phase.RETURNED: frozenset({Phase.SETTLING}),
    Phase.DECIDED: frozenset({Phase.SETTLING, Phase.CUT}),
    Phase.CUT: frozenset({Phase.CLOSED}),
    Phase.SETTLING: frozenset({Phase.RUNNING, Phase.LENT, Phase.SENT, Phase.CLOSED}),  # FIFO: run again in place
    Phase.SENT: frozenset({Phase.CLOSED}),
    Phase.CLOSED: frozenset(),
}
SLOT = frozenset({Phase.RUNNING, Phase.RETURNED, Phase.DECIDED, Phase.CUT})  # hold a handler slot
LINE = frozenset({Phase.WAITING, Phase.LENT})  # wait in line for a start
IN_USE = frozenset({Phase.ARRIVING, Phase.READY, Phase.WAITING}) | SLOT  # what the prefetch target bounds
HELD = frozenset(Phase) - {Phase.SENT, Phase.CUT, Phase.CLOSED}  # hold a place of the hard bound
GONE = frozenset({Phase.CUT, Phase.CLOSED})  # closed: its message has left the pool
# The sets admission asks the size of several times a message: `move` keeps their sizes as
# it moves a ticket, so that asking costs a lookup, not a sum over the phases.
SIZED = (SLOT, IN_USE, HELD)


@dataclass(frozen=True, slots=True)
class _Edge:
    """What a move along one edge of LEGAL changes beside the phase, worked out once: a
    ticket moves half a dozen times a message, and asking each set at each move showed."""

    counts: tuple[tuple[Phase | frozenset[Phase], int], ...]  # (a phase or one of SIZED, +1 or -1)
    line: int  # +1: it joins the line; -1: it leaves it
    slot: int  # +1: it takes a handler slot; -1: it gives one back


def _edge(was: Phase, to: Phase) -> _Edge:
    counts: list[tuple[Phase | frozenset[Phase], int]] = [(was, -1), (to, +1)]
    counts += [(phases, +1 if to in phases else -1) for phases in SIZED if (was in phases) is not (to in phases)]
    return _Edge(tuple(counts), (to in LINE) - (was in LINE), (to in SLOT) - (was in SLOT))


EDGES = {was: {to: _edge(was, to) for to in tos} for was, tos in LEGAL.items()}


class IllegalMoveError(RuntimeError):
    """A bug in the engine: a ticket was moved along an edge its life does not have."""


@dataclass(eq=False, slots=True)  # one a message: no instance dict
class Ticket:
    """What one message holds from admission, released by `Admission.close`."""

    seq: int  # receive order: starts go in this order
    group: str | None = None  # its tenant, when the queue caps tenants (written by Admission.received_group)
    phase: Phase = Phase.ARRIVING  # written by TicketBook.move only
    started_at: float = 0.0  # when its latest attempt started (loop time; written by Admission._take)
    probe: bool = False  # its latest start is the pause's probe (written by Admission._take)
    promised: bool = False  # holds a place of the jobs left (completion.py) until its handler is called
    rate_pending: bool = False  # let go by the rate window, its handler not called yet (throttle.py)
    # Its turn to start, while it waits in line: True once it has started, False if it may
    # not after all (its lease was lost, or the pool stops). Awaited directly: one loop
    # turn from a freed slot to the next job, not two (asyncio.wait adds a callback's).
    _turn: asyncio.Future[bool] | None = field(default=None, repr=False)

    def __lt__(self, other: Ticket) -> bool:  # the line is kept in receive order
        return self.seq < other.seq

    @property
    def running(self) -> bool:
        """It holds a handler slot (and its tenant turn)."""
        return self.phase in SLOT

    @property
    def returned(self) -> bool:
        """Its handler's work is not going on (a thread's call returned, or none was made)."""
        return self.phase not in (Phase.RUNNING, Phase.DECIDED, Phase.CUT)

    @property
    def closed(self) -> bool:
        return self.phase in GONE


@dataclass
class Grant:
    """Places reserved for one receive; `probe`: it asks for the pause's probe."""

    places: int
    probe: bool = False


class TicketBook:
    """Every ticket of one queue by phase, the line in receive order, the grants out."""

    def __init__(self) -> None:
        self.line: list[Ticket] = []  # WAITING and LENT, in receive order (written by move)
        self.late: set[Ticket] = set()  # holding a slot, cancelled and their work goes on (written by overdue)
        self.tenants: dict[str, int] = {}  # group -> its tickets holding a slot (written by move)
        # Places of receives still out: granted, not yet answered (written by grant and issue
        # only; no ticket exists for them yet).
        self.reserved = 0
        self._seq = 0  # the latest ticket's receive order (written by issue)
        # The tickets in each phase and in each of SIZED (written by issue and move).
        self._counts: dict[Phase | frozenset[Phase], int] = dict.fromkeys([*Phase, *SIZED], 0)

    def count(self, phases: frozenset[Phase]) -> int:
        size = self._counts.get(phases)
        if size is not None:
            return size
        return sum(self._counts[phase] for phase in phases if phase is not Phase.CLOSED)

    @property
    def running(self) -> int:
        return self.count(SLOT)

    @property
    def in_use(self) -> int:
        return self.reserved + self.count(IN_USE)

    @property
    def held(self) -> int:
        return self.reserved + self.count(HELD)

    @property
    def sent(self) -> int:
        return self._counts[Phase.SENT]

    @property
    def arriving(self) -> int:
        return self._counts[Phase.ARRIVING]

    def grant(self, places: int, probe: bool) -> Grant:
        self.reserved += places
        return Grant(places, probe)

    def issue(self, grant: Grant, got: int, promised: bool) -> list[Ticket]:
        """The receive for `grant` brought `got` messages: one ticket each; the rest go back."""
        self.reserved -= grant.places
        tickets = []
        for _ in range(got):
            self._seq += 1
            tickets.append(Ticket(self._seq, promised=promised))
        self._counts[Phase.ARRIVING] += got
        for phases in SIZED:
            if Phase.ARRIVING in phases:
                self._counts[phases] += got
        return tickets

    def overdue(self, ticket: Ticket) -> bool:
        """Its job was cancelled and its work goes on: True if this is news."""
        if ticket.phase not in SLOT or ticket in self.late:
            return False
        self.late.add(ticket)
        return True

    def move(self, ticket: Ticket, to: Phase) -> None:
        """The one writer of a ticket's phase, and of what follows from it."""
        was = ticket.phase
        edge = EDGES[was].get(to)
        if edge is None:
            raise IllegalMoveError(f"ticket {ticket.seq}: {was.value} -> {to.value}")
        counts = self._counts
        for phases, by in edge.counts:
            counts[phases] += by
        if edge.line < 0:
            self.line.remove(ticket)
        elif edge.line > 0:
            bisect.insort(self.line, ticket)
        group = ticket.group
        if edge.slot > 0 and group is not None:
            self.tenants[group] = self.tenants.get(group, 0) + 1
        elif edge.slot < 0:
            self.late.discard(ticket)
            if group is not None and group in self.tenants:
                self.tenants[group] -= 1
                if not self.tenants[group]:
                    del self.tenants[group]
        ticket.phase = to

    def __iter__(self) -> Iterator[Ticket]:
        return iter(self.line)
