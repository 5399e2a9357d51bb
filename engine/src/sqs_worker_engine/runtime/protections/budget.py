"""Priorities across queues on one budget of running jobs (WORKER_SHARED_CONCURRENCY).

Without a shared budget each queue's admission (admission.py) runs its own concurrency.
With one, the queues of a process share n handler slots; each queue is still capped by
its own concurrency, and which queue a free slot goes to is decided here, by `pick`, a
pure function of what each queue wants:

- `strict`: in the order of WORKER_QUEUES. A queue starts a job only while no queue
  above it has a *backlog*: a queue has a backlog when it could start a job now but for
  the shared budget (below its own concurrency, not paused, rate-limited, cut off from
  SQS or stopping) and either a message of it waits to start (not parked behind its
  tenant's cap; received and about to ask counts) or, when none waits, its latest
  receive brought all it asked for (SQS likely holds more) and a receive is out or may go
  out for them: the slot is kept for them meanwhile (`Admission.wants`).
- `weighted`: smooth weighted round robin (nginx's) over the queues with a backlog: each
  pick adds every such queue's weight to its credit and gives the slot to the one with
  the most credit (ties: the first listed), which pays the sum of their weights. Over a
  run of picks among the same queues each gets its weight's share, within a slot. Only a
  queue with a message waiting takes a slot: one whose backlog is still on its way (its
  receive is out) lends the slot to the next in credit order and keeps its credit, at
  most one round's worth, for when its messages arrive. A queue with no backlog earns
  nothing and owes nothing: its share goes to the others.

The slots in use are the queues' own counts of running jobs (`Admission.running`): the
budget keeps no count of its own that could drift from them, so a slot is free exactly
when no job holds it. Whenever a queue's state changes (a slot freed, a message waiting,
a receive answered, a pause begun or ended) its admission tells the budget (`changed`),
which lets every queue admit its line again until no slot can be given: a slot freed in
one queue goes to the queue `pick` names, whichever that is, and no line is left waiting
on a free slot it could take.

Receiving (`entitled`): under strict priority a queue below a backlogged one receives
nothing beyond its prefetch, so what it holds is what it runs plus its prefetch, and
otherwise for the slots the queues above it leave; under weighted priority each queue
receives as without a budget, so that every queue with work has messages waiting when a
slot frees (a line that has run dry lends its turn).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

Priority = Literal["strict", "weighted"]
# What a queue wants of the budget: NOTHING (no backlog), COMING (a backlog on its way:
# received and about to ask, or still in SQS after a full receive), WAITING (a message
# waits that could start now but for the budget).
Want = Literal[0, 1, 2]
NOTHING: Want = 0
COMING: Want = 1
WAITING: Want = 2
PRIORITIES: tuple[Priority, ...] = ("strict", "weighted")


class Member(Protocol):
    """What the budget reads of a queue's admission, and how it lets its line start."""

    @property
    def capacity(self) -> int: ...  # the queue's own concurrency

    @property
    def running(self) -> int: ...  # handler slots its jobs hold: of the shared budget

    def wants(self, now: float) -> Want: ...

    def refresh(self, pollers: bool = True) -> None: ...

    def shared_report(self, in_use: int, given: bool) -> None: ...


def pick(
    priority: Priority, wants: Sequence[Want], weights: Sequence[int], credit: Sequence[int]
) -> tuple[int | None, tuple[int, ...]]:
    """Which queue takes a free shared slot now (its index; None: the slot stays free,
    kept for a backlog on its way under strict priority, or nobody wants one), and the
    weighted credits once it is taken."""
    candidates = [i for i, want in enumerate(wants) if want != NOTHING]
    if not candidates:
        return None, tuple(credit)
    if priority == "strict":
        first = candidates[0]
        return (first if wants[first] == WAITING else None), tuple(credit)
    total = sum(weights[i] for i in candidates)
    # A queue with no backlog starts again from zero: no debt, no hoarded credit.
    after = [credit[i] + weights[i] if wants[i] != NOTHING else 0 for i in range(len(wants))]
    order = sorted(candidates, key=lambda i: (-after[i], i))
    taker = next((i for i in order if wants[i] == WAITING), None)
    if taker is None:
        return None, tuple(credit)
    after[taker] -= total
    # A lender keeps what it was owed, up to one round: it catches up once its messages
    # arrive, and a long wait for them does not buy it a long run of slots later.
    return taker, tuple(max(-total, min(total, c)) for c in after)


@dataclass(eq=False)
class SharedBudget:
    total: int
    priority: Priority = "weighted"
    members: list[Member] = field(default_factory=list)
    weights: list[int] = field(default_factory=list)
    credit: tuple[int, ...] = ()
    _pending: tuple[Member, tuple[int, ...]] | None = None  # the latest pick, applied when taken
    _busy: bool = False  # the lines are admitting: a change meanwhile is seen by this pass
    stopping: bool = False  # the process stops: no queue on the budget starts a job (Admission.stop)

    def join(self, member: Member, weight: int = 1) -> None:
        """A queue's admission joins, in the order of WORKER_QUEUES (strict's order)."""
        self.members.append(member)
        self.weights.append(weight)
        self.credit = (*self.credit, 0)

    @property
    def in_use(self) -> int:
        return sum(m.running for m in self.members)

    def _wants(self, asking: Member, now: float) -> list[Want]:
        """What each queue wants now; the one asking for a message in hand has it waiting."""
        return [WAITING if m is asking else m.wants(now) for m in self.members]

    def may_start(self, member: Member, now: float) -> bool:
        """May `member` start a job now (everything else allowing it)?"""
        if self.in_use >= self.total:
            return False
        chosen, credit = pick(self.priority, self._wants(member, now), self.weights, self.credit)
        if chosen is None or self.members[chosen] is not member:
            return False
        self._pending = (member, credit)
        return True

    def took(self, member: Member) -> None:
        """`member` took the slot `may_start` gave it."""
        if self._pending is not None and self._pending[0] is member:
            self.credit = self._pending[1]
        self._pending = None
        member.shared_report(member.running, True)

    def entitled(self, member: Member, now: float) -> int:
        """The most jobs `member` may count on running, for what it receives. Strict: below
        a queue with a backlog, what it runs now (it receives nothing it could not start
        beyond its prefetch); otherwise what the queues above it do not hold. Weighted:
        its own concurrency, as without a budget, so that a message waits in every line
        the weights choose between (what it holds stays within concurrency + prefetch)."""
        if self.priority == "weighted":
            return member.capacity
        above = self.members[: self.members.index(member)]
        if any(m.wants(now) != NOTHING for m in above):
            return member.running
        return self.total - sum(m.running for m in above)

    def changed(self, source: Member) -> None:
        """`source`'s state changed: let every line admit again until a pass starts nothing
        more (each pass that starts something takes a slot: this ends within `total`
        passes). Pollers are woken where what they may receive can have grown: the
        source's, and under strict priority the queues' below it (`entitled`)."""
        if self._busy:  # the pass under way looks at every line again anyway
            source.refresh()
            return
        below = self.members.index(source) if self.priority == "strict" else len(self.members)
        self._busy = True
        try:
            while True:
                before = self.in_use
                for i, member in enumerate(self.members):
                    member.refresh(pollers=member is source or i > below)
                if self.in_use == before:
                    break
        finally:
            self._busy = False
        source.shared_report(source.running, False)
