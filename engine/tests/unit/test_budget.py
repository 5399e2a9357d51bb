"""The shared budget (budget.py): the pure pick, the budget over stand-in queues, and the
settings that configure it."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field

import pytest

from sqs_worker_engine.process.settings import ConfigError, load_settings
from sqs_worker_engine.runtime.protections.budget import COMING, NOTHING, WAITING, SharedBudget, Want, pick

# -- the pick ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wants", "taker"),
    [
        ((WAITING, WAITING), 0),
        ((NOTHING, WAITING), 1),
        ((COMING, WAITING), None),  # strict keeps the slot for the higher queue's receive
        ((NOTHING, NOTHING), None),
        ((NOTHING, COMING, WAITING), None),
        ((NOTHING, NOTHING, WAITING), 2),
    ],
)
def test_strict_gives_the_slot_to_the_first_queue_with_a_backlog(wants: tuple[Want, ...], taker: int | None) -> None:
    assert pick("strict", wants, [1] * len(wants), [0] * len(wants))[0] == taker


def picks(n: int, weights: list[int], wants: list[Want] | None = None) -> list[int]:
    credit: tuple[int, ...] = (0,) * len(weights)
    taken = []
    for _ in range(n):
        taker, credit = pick("weighted", wants or [WAITING] * len(weights), weights, credit)
        assert taker is not None
        taken.append(taker)
    return taken


@pytest.mark.parametrize("weights", [[3, 1], [1, 1], [5, 2, 1], [1, 9], [2, 3, 5]])
def test_weights_share_every_round_exactly(weights: list[int]) -> None:
    total = sum(weights)
    taken = picks(total * 10, weights)
    assert Counter(taken) == {i: w * 10 for i, w in enumerate(weights)}
    for start in range(0, len(taken), total):  # each round of sum(weights) picks, exactly
        assert Counter(taken[start : start + total]) == {i: w for i, w in enumerate(weights)}


def test_no_queue_waits_longer_than_one_round() -> None:
    taken = picks(400, [9, 1])
    positions = [i for i, t in enumerate(taken) if t == 1]
    gaps = [b - a for a, b in itertools.pairwise(positions)]
    assert positions[0] < 10 and max(gaps) <= 10, gaps


def test_a_queue_without_work_lends_its_share_and_is_owed_nothing() -> None:
    taker, credit = pick("weighted", [NOTHING, WAITING], [3, 1], [5, 0])
    assert taker == 1 and credit == (0, 0)  # the lone queue pays what it earns: no debt either


def test_a_queue_whose_messages_are_on_their_way_lends_the_slot_and_keeps_its_credit() -> None:
    credit: tuple[int, ...] = (0, 0)
    for _ in range(10):
        taker, credit = pick("weighted", [COMING, WAITING], [3, 1], credit)
        assert taker == 1
    assert credit == (4, -4), "owed at most one round"
    taken = []
    for _ in range(8):
        taker, credit = pick("weighted", [WAITING, WAITING], [3, 1], credit)
        taken.append(taker)
    assert taken[:2] == [0, 0] and Counter(taken)[0] >= 6, taken


def test_nobody_waiting_takes_nothing() -> None:
    assert pick("weighted", [COMING, NOTHING], [1, 1], [2, 0]) == (None, (2, 0))


# -- the budget over stand-in queues -----------------------------------------------------


@dataclass(eq=False)
class Line:
    """A queue's admission as the budget sees it: messages waiting, jobs running."""

    budget: SharedBudget
    capacity: int = 4
    waiting: int = 0
    running: int = 0
    coming: bool = False
    given: list[int] = field(default_factory=list)

    def wants(self, now: float) -> Want:
        if self.running >= self.capacity:
            return NOTHING
        return WAITING if self.waiting else COMING if self.coming else NOTHING

    def refresh(self, pollers: bool = True) -> None:
        while self.waiting and self.running < self.capacity and self.budget.may_start(self, 0.0):
            self.waiting -= 1
            self.running += 1
            self.budget.took(self)

    def shared_report(self, in_use: int, given: bool) -> None:
        if given:
            self.given.append(in_use)

    def end_one(self) -> None:
        self.running -= 1
        self.budget.changed(self)


def lines(priority: str, *weights: int) -> tuple[SharedBudget, list[Line]]:
    budget = SharedBudget(4, priority)  # type: ignore[arg-type]
    members = [Line(budget) for _ in weights]
    for member, weight in zip(members, weights, strict=True):
        budget.join(member, weight)
    return budget, members


def test_a_slot_freed_in_one_queue_starts_the_next_queues_line() -> None:
    budget, (a, b) = lines("strict", 1, 1)
    a.waiting, b.waiting = 4, 5
    budget.changed(a)
    assert (a.running, b.running) == (4, 0)
    a.end_one()
    assert (a.running, b.running) == (3, 1), "a has nothing waiting: its freed slot goes to b"
    assert budget.in_use == 4


def test_strict_keeps_a_slot_for_a_backlog_on_its_way_and_never_holds_more_than_the_budget() -> None:
    budget, (a, b) = lines("strict", 1, 1)
    a.waiting, b.waiting, a.coming = 4, 8, True
    budget.changed(a)
    a.end_one()
    assert (a.running, b.running) == (3, 0), "the slot waits for a's receive"
    a.coming = False
    budget.changed(a)  # a's receive came back short
    assert (a.running, b.running) == (3, 1)


def test_weighted_over_the_stand_ins_gives_three_to_one() -> None:
    budget, (a, b) = lines("weighted", 3, 1)
    a.waiting = b.waiting = 1000
    budget.changed(a)
    for i in range(200):  # jobs end in turn, one of the queue running more each time
        (a if a.running > b.running or (i % 2 and a.running) else b).end_one()
    assert len(a.given) + len(b.given) == 204
    assert 2.6 <= len(a.given) / len(b.given) <= 3.4, (len(a.given), len(b.given))


# -- settings ----------------------------------------------------------------------------

BASE = {"WORKER_QUEUES": "high,low"}


def refused(env: dict[str, str]) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        load_settings({**BASE, **env})
    return dict(info.value.problems)


def test_a_shared_budget_is_weighted_by_default_and_caps_each_queue_at_it() -> None:
    config = load_settings({**BASE, "WORKER_SHARED_CONCURRENCY": "6", "WORKER_QUEUE_HIGH_WEIGHT": "3"})
    assert config.priority == "weighted"
    assert [(q.concurrency, q.weight) for q in config.queues] == [(6, 3), (6, 1)]
    assert config.describe()["priority"] == "weighted"


def test_without_a_shared_budget_nothing_changes() -> None:
    config = load_settings(BASE)
    assert config.priority is None
    assert [q.concurrency for q in config.queues] == [8, 8]


def test_a_queues_own_concurrency_still_caps_it_and_may_exceed_the_budget() -> None:
    config = load_settings(
        {
            **BASE,
            "WORKER_SHARED_CONCURRENCY": "4",
            "WORKER_PRIORITY": "strict",
            "WORKER_QUEUE_HIGH_CONCURRENCY": "2",
            "WORKER_QUEUE_LOW_CONCURRENCY": "10",  # the budget caps it at 4 anyway
        }
    )
    assert [q.concurrency for q in config.queues] == [2, 10]
    assert (
        load_settings({**BASE, "WORKER_SHARED_CONCURRENCY": "4", "WORKER_CONCURRENCY": "3"}).queues[1].concurrency == 3
    )


@pytest.mark.parametrize(
    ("env", "variable", "fragment"),
    [
        ({"WORKER_QUEUE_LOW_WEIGHT": "2"}, "WORKER_QUEUE_LOW_WEIGHT", "WORKER_SHARED_CONCURRENCY"),
        ({"WORKER_PRIORITY": "strict"}, "WORKER_PRIORITY", "WORKER_SHARED_CONCURRENCY"),
        ({"WORKER_SHARED_CONCURRENCY": "4", "WORKER_PRIORITY": "fifo"}, "WORKER_PRIORITY", "strict or weighted"),
        ({"WORKER_SHARED_CONCURRENCY": "0"}, "WORKER_SHARED_CONCURRENCY", "greater than or equal to 1"),
        ({"WORKER_SHARED_CONCURRENCY": "4", "WORKER_QUEUE_LOW_WEIGHT": "0"}, "WORKER_QUEUE_LOW_WEIGHT", "1..1000"),
        (
            {"WORKER_SHARED_CONCURRENCY": "4", "WORKER_PRIORITY": "strict", "WORKER_QUEUE_LOW_WEIGHT": "2"},
            "WORKER_QUEUE_LOW_WEIGHT",
            "strict priority reads no weights",
        ),
        ({"WORKER_SHARED_CONCURRENCY": "12", "DB_POOL_SIZE": "10"}, "DB_POOL_SIZE", "WORKER_SHARED_CONCURRENCY"),
    ],
)
def test_bad_budget_settings_are_named(env: dict[str, str], variable: str, fragment: str) -> None:
    found = refused(env)
    assert variable in found and fragment in found[variable], found


def test_the_db_pool_check_counts_the_budget_not_the_sum() -> None:
    load_settings({**BASE, "WORKER_SHARED_CONCURRENCY": "8", "DB_POOL_SIZE": "10"})  # 8 + 8 before, 8 together now
