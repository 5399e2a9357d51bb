"""The collector while the worker runs (process/heap.py): the start-up heap kept out of its
full passes, the youngest generation collected less often, and the process left as the
worker found it."""

from __future__ import annotations

import gc
import logging

import pytest

from sqs_worker_engine.handlers.job import Job
from sqs_worker_engine.process import heap

from . import vtime
from .harness import QUEUE, memory_queue, start, until


def _run_one_message(seen: dict[str, int]) -> None:
    async def scenario() -> None:
        sqs, router = memory_queue(messages=1)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            seen["frozen while running"] = gc.get_freeze_count()
            seen["young threshold while running"] = gc.get_threshold()[0]

        worker = await start(sqs, router, WORKER_CONCURRENCY="1")
        assert await until(lambda: "frozen while running" in seen, 30)
        await worker.stop()
        seen["frozen after the stop"] = gc.get_freeze_count()
        seen["young threshold after the stop"] = gc.get_threshold()[0]

    vtime.run(scenario())


def test_the_start_up_heap_is_frozen_while_the_worker_runs_and_given_back_when_it_stops() -> None:
    assert gc.get_freeze_count() == 0, "the test needs a process with nothing frozen"
    seen: dict[str, int] = {}
    _run_one_message(seen)
    # Everything alive at start-up (the modules, the test's own objects) was frozen.
    assert seen["frozen while running"] > 1000, seen
    assert seen["frozen after the stop"] == 0, seen


def test_a_process_that_froze_its_own_heap_is_left_as_it_was() -> None:
    """A pre-fork server freezes before it forks: that is its heap, not the worker's."""
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        seen: dict[str, int] = {}
        _run_one_message(seen)
        # Frozen objects still die of their references (the count falls a little), but a
        # second freeze would have taken in the thousands the test made since.
        assert seen["frozen while running"] <= before, (before, seen)
        assert seen["frozen after the stop"] > before / 2, (before, seen)
    finally:
        gc.unfreeze()


def test_what_the_interpreter_froze_itself_does_not_stop_the_worker_freezing(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPython 3.12's collector moves the immortal objects it meets to the permanent
    generation: a bare 3.12.1 holds 375 tuples there from start-up, with no owner's freeze.
    The worker read that count as a pre-fork server's heap and froze nothing on 3.12, the
    template's default. Here the interpreter's own share is stood in for by what was frozen
    before the engine was imported."""
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        monkeypatch.setattr(heap, "_AT_IMPORT", before)
        seen: dict[str, int] = {}
        _run_one_message(seen)
        # The worker froze what was made since, and gave everything back at its stop.
        assert seen["frozen while running"] > before, (before, seen)
        assert seen["frozen after the stop"] == 0, (before, seen)
    finally:
        gc.unfreeze()


def test_a_freeze_counts_as_an_owners_only_past_what_the_interpreter_kept() -> None:
    assert not heap.froze_since(375, 375)  # 3.12: the immortal objects, at import and at start
    assert not heap.froze_since(0, 0)
    assert heap.froze_since(120_000, 375)  # a pre-fork server froze its heap after the import
    assert heap.froze_since(1, 0)


def test_the_youngest_generation_is_collected_less_often_while_the_worker_runs() -> None:
    found = gc.get_threshold()
    assert found[0] < heap.YOUNG_THRESHOLD, "the test needs the collector's default"
    seen: dict[str, int] = {}
    _run_one_message(seen)
    assert seen["young threshold while running"] == heap.YOUNG_THRESHOLD, seen
    assert gc.get_threshold() == found, "the threshold the worker found is given back"


@pytest.mark.parametrize("owners", [0, 50_000])
def test_an_owners_threshold_is_kept(owners: int) -> None:
    """0 turns automatic collection off; a higher one is tuned already."""
    found = gc.get_threshold()
    gc.set_threshold(owners, *found[1:])
    try:
        seen: dict[str, int] = {}
        _run_one_message(seen)
        assert seen["young threshold while running"] == owners, seen
        assert seen["young threshold after the stop"] == owners, seen
    finally:
        gc.set_threshold(*found)


def test_the_start_up_log_names_the_event_loop(caplog: pytest.LogCaptureFixture) -> None:
    """Whether uvloop is in use is a question an owner asks of a slow worker first."""
    with caplog.at_level(logging.INFO, logger="sqs_worker_engine"):
        _run_one_message({})
    started = next(r for r in caplog.records if r.getMessage() == "worker started")
    assert started.__dict__["event_loop"] == "sqs_worker_engine.doubles.vtime.VirtualTimeLoop", started.__dict__
