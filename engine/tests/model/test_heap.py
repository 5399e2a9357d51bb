"""The start-up heap is kept out of the collector's full passes while the worker runs
(process/heap.py), and the process is left as the worker found it."""

from __future__ import annotations

import gc
import logging

import pytest

from sqs_worker_engine.handlers.job import Job

from . import vtime
from .harness import QUEUE, memory_queue, start, until


def _run_one_message(seen: dict[str, int]) -> None:
    async def scenario() -> None:
        sqs, router = memory_queue(messages=1)

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            seen["frozen while running"] = gc.get_freeze_count()

        worker = await start(sqs, router, WORKER_CONCURRENCY="1")
        assert await until(lambda: "frozen while running" in seen, 30)
        await worker.stop()
        seen["frozen after the stop"] = gc.get_freeze_count()

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


def test_the_start_up_log_names_the_event_loop(caplog: pytest.LogCaptureFixture) -> None:
    """Whether uvloop is in use is a question an owner asks of a slow worker first."""
    with caplog.at_level(logging.INFO, logger="sqs_worker_engine"):
        _run_one_message({})
    started = next(r for r in caplog.records if r.getMessage() == "worker started")
    assert started.__dict__["event_loop"] == "sqs_worker_engine.doubles.vtime.VirtualTimeLoop", started.__dict__
