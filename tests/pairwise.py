"""Pairwise covering sets: answer sets in which every pair of answer values that can occur
together does so at least once (all-pairs testing). A defect that needs two answers to show
(FIFO with idempotency on Python 3.11, say) is met by some set; a defect that needs three is
not promised, which is why the full matrix still runs nightly.

Pure functions over `factors` (each answer's values, in order) and `valid` (which complete
answer sets the template accepts and gives meaning to): tests/matrix.py builds its covering
set with them, and tests/test_matrix.py holds them to their contract and checks the
coverage of the set it builds.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence

Factors = Mapping[str, Sequence[str]]
Row = dict[str, str]
Pair = tuple[tuple[str, str], tuple[str, str]]
Valid = Callable[[Mapping[str, str]], bool]


def rows(factors: Factors, valid: Valid) -> list[Row]:
    """Every complete answer set `valid` accepts, in the factors' order (the first value of
    each factor first)."""
    names = list(factors)
    every = (dict(zip(names, values, strict=True)) for values in itertools.product(*factors.values()))
    return [row for row in every if valid(row)]


def pairs(row: Mapping[str, str]) -> set[Pair]:
    """The pairs of answer values one answer set holds (each pair in the answers' order)."""
    items = list(row.items())
    return {(a, b) for i, a in enumerate(items) for b in items[i + 1 :]}


def required(factors: Factors, valid: Valid) -> set[Pair]:
    """The pairs some valid answer set holds: the ones a covering set must hold. A pair no
    valid set holds (high FIFO throughput on a standard queue) is not asked for."""
    return set().union(*(pairs(row) for row in rows(factors, valid)))


def missing(chosen: Iterable[Mapping[str, str]], factors: Factors, valid: Valid) -> list[Pair]:
    """The required pairs none of `chosen` holds, sorted (empty: `chosen` covers every pair).
    Only the factors' answers of each chosen set count: its other answers are ignored."""
    held: set[Pair] = set()
    for row in chosen:
        held |= pairs({name: row[name] for name in factors})
    return sorted(required(factors, valid) - held)


def cover(factors: Factors, valid: Valid, seeds: Sequence[Mapping[str, str]] = ()) -> list[Row]:
    """A covering set: after `seeds` (answer sets that run anyway), one at a time, the valid
    answer set that holds the most pairs still missing, until none is missing. Ties go to
    the set whose values take part in the fewest missing pairs (values finished off leave
    the later sets free to place the rest: a set or two fewer, measured on tests/
    test_matrix.py's cases), then to the first in `rows`' order: the result is the same on
    every run. Greedy, so not always the smallest set, but within a few of it."""
    candidates = rows(factors, valid)
    # Each pair as a bit: a row's pairs are an int, the pairs still missing another.
    bit: dict[Pair, int] = {}
    masks = [sum(1 << bit.setdefault(pair, len(bit)) for pair in pairs(row)) for row in candidates]
    by_value: dict[tuple[str, str], int] = {}
    for pair, index in bit.items():
        for value in pair:
            by_value[value] = by_value.get(value, 0) | 1 << index
    unheld = (1 << len(bit)) - 1
    for seed in seeds:
        unheld &= ~sum(1 << bit[pair] for pair in pairs({name: seed[name] for name in factors}) if pair in bit)
    chosen: list[Row] = []
    while unheld:
        gains = [(mask & unheld).bit_count() for mask in masks]
        most = max(gains)
        tied = [i for i, gain in enumerate(gains) if gain == most]
        best = min(tied, key=lambda i: sum((by_value[item] & unheld).bit_count() for item in candidates[i].items()))
        chosen.append(candidates[best])
        unheld &= ~masks[best]
    return chosen
