"""The covering set of tests/matrix.py holds every pair of answer values at least once, and the
pairwise functions it is computed with (tests/pairwise.py) keep their contract: every
required pair covered, pairs no valid set can hold never asked for, the same set on every
run."""

from __future__ import annotations

from collections.abc import Mapping

import matrix
import pytest
from matrix import (
    COOKIECUTTER,
    COVERING,
    NOT_RUN,
    RUN_FACTORS,
    SUPPORTED,
    lockable,
    meaningful,
    names,
    run_row,
)
from pairwise import cover, missing, pairs, required, rows


def anything(row: Mapping[str, str]) -> bool:
    return True


def no_c_with_x(row: Mapping[str, str]) -> bool:
    return not (row["c"] == "x" and row["a"] == "1")


# (factors, valid, seeds, most rows the greedy cover may take)
CASES = {
    "three binary factors": ({"a": ("0", "1"), "b": ("0", "1"), "c": ("0", "1")}, anything, [], 4),
    "a 3x3 pair dominates": ({"a": ("0", "1", "2"), "b": ("0", "1", "2"), "c": ("0", "1")}, anything, [], 9),
    "a constraint removes pairs": ({"a": ("0", "1"), "b": ("0", "1"), "c": ("w", "x")}, no_c_with_x, [], 5),
    "seeds count first": (
        {"a": ("0", "1"), "b": ("0", "1")},
        anything,
        [{"a": "0", "b": "0"}, {"a": "1", "b": "1"}],
        2,
    ),
    "ten binary factors": ({f"f{i}": ("0", "1") for i in range(10)}, anything, [], 8),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_cover_holds_every_pair_a_valid_set_can_hold(case: str) -> None:
    factors, valid, seeds, most = CASES[case]
    chosen = cover(factors, valid, seeds)
    assert missing([*seeds, *chosen], factors, valid) == [], f"{case}: pairs left out"
    assert all(valid(row) for row in chosen), f"{case}: a chosen set is not valid"
    assert len(chosen) <= most, f"{case}: {len(chosen)} sets, at most {most} expected"
    assert cover(factors, valid, seeds) == chosen, f"{case}: a second run chose other sets"


def test_a_pair_no_valid_set_holds_is_never_required() -> None:
    factors = {"a": ("0", "1"), "b": ("0", "1"), "c": ("w", "x")}
    assert (("a", "1"), ("c", "x")) not in required(factors, no_c_with_x)
    assert (("a", "1"), ("c", "w")) in required(factors, no_c_with_x)
    assert len(rows(factors, no_c_with_x)) == 6, "8 sets, 2 of them with a=1 and c=x"


def test_missing_names_the_pairs_a_set_of_rows_leaves_out() -> None:
    factors = {"a": ("0", "1"), "b": ("0", "1")}
    assert missing([{"a": "0", "b": "0"}], factors, anything) == [
        (("a", "0"), ("b", "1")),
        (("a", "1"), ("b", "0")),
        (("a", "1"), ("b", "1")),
    ]
    assert pairs({"a": "0", "b": "1", "c": "x"}) == {
        (("a", "0"), ("b", "1")),
        (("a", "0"), ("c", "x")),
        (("b", "1"), ("c", "x")),
    }


def test_the_covering_set_and_the_full_sets_hold_every_pair_of_answer_values() -> None:
    run = [run_row(SUPPORTED[name].answers) for name in names("full")]
    run += [run_row(combo.answers) for combo in COVERING.values()]
    left_out = missing(run, RUN_FACTORS, meaningful)
    assert left_out == [], f"{len(left_out)} pairs of answer values never run end to end: {left_out[:10]}"
    assert len(required(RUN_FACTORS, meaningful)) > 150, "the pairs of every choice and the queue's kind"


def test_the_scanned_sets_hold_every_pair_of_answer_values_deploy_file_choices_too() -> None:
    def scan_row(answers: Mapping[str, str]) -> dict[str, str]:
        row = {name: answers.get(name, values[0]) for name, values in matrix.SCAN_FACTORS.items() if name != "queue"}
        return row | {"queue": run_row(answers)["queue"]}

    scanned = [scan_row(combo.answers) for combo in matrix.SCANNED.values()]
    left_out = missing(scanned, matrix.SCAN_FACTORS, meaningful)
    assert left_out == [], f"{len(left_out)} pairs of answer values never scanned: {left_out[:10]}"
    assert {"spot-mix", "arm64", "pod-identity"} <= {value for row in scanned for value in row.values()}
    assert "defaults" in matrix.SCANNED, "the broken copy is made of the defaults"


def test_every_choice_of_cookiecutter_json_is_a_factor_of_the_covering_set() -> None:
    choices = {name for name, values in COOKIECUTTER.items() if isinstance(values, list) and not name.startswith("_")}
    assert set(RUN_FACTORS) == choices | {"queue"}, "a new choice joins the covering set by itself"
    for name in choices:
        left = set(COOKIECUTTER[name]) - set(RUN_FACTORS[name])
        assert left == {value for key, value in NOT_RUN if key == name}, f"{name}: {left} left out without a reason"


def test_each_covering_set_is_one_the_hooks_accept_and_the_bakes_can_run() -> None:
    for name, combo in COVERING.items():
        row = run_row(combo.answers)
        assert meaningful(row), f"{name}: {row}"
        assert all(combo.answers.get(key) != value for key, value in NOT_RUN), name
    assert not set(COVERING) & set(SUPPORTED), "a covering set's name is a supported set's"


@pytest.mark.parametrize("full", [False, True], ids=["everyday", "nightly"])
def test_the_full_sets_and_the_covering_set_run_end_to_end_and_nightly_every_lockable_set(
    full: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(matrix, "FULL", full)
    lockable_sets = [name for name in SUPPORTED if lockable(name)]
    assert matrix.end_to_end() == [*(lockable_sets if full else names("full")), *COVERING]
    assert set(SUPPORTED) - set(lockable_sets) == {"py314", "engine-from-index", "engine-from-unnamed-index"}
