"""The collector while the worker runs (process/host/heap.py): the start-up heap kept out of its
full passes, the youngest generation collected less often while its garbage holds little
memory and at CPython's pace when it holds much, an owner's threshold kept, and the
process left as the worker found it."""

from __future__ import annotations

import gc
import logging
from typing import Any

import pytest

from sqs_worker_engine.doubles.memory import MemorySQS
from sqs_worker_engine.handlers.job import Job
from sqs_worker_engine.process.host import heap

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
    # Nothing frozen by an owner (3.12's collector keeps a few hundred immortal objects there).
    assert not heap.froze_since(gc.get_freeze_count(), heap._AT_IMPORT), "the test needs nothing frozen"
    seen: dict[str, int] = {}
    _run_one_message(seen)
    # Everything alive at start-up (the modules, the test's own objects) was frozen.
    assert seen["frozen while running"] > 1000, seen
    assert seen["frozen after the stop"] <= heap._AT_IMPORT, seen


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


def _run_jobs(jobs: int, handler: Any, seen: dict[str, int]) -> None:
    """`jobs` messages through a thread handler at concurrency 8; the young threshold seen
    at the end of the run, and after the stop."""

    async def scenario() -> None:
        sqs, router = memory_queue(messages=jobs)
        router.handler(QUEUE, payload=str, executor="thread")(handler)
        worker = await start(sqs, router, WORKER_CONCURRENCY="8")
        assert await until(lambda: sqs.bodies(QUEUE) == [], 600)
        seen["young threshold while running"] = gc.get_threshold()[0]
        await worker.stop()
        seen["young threshold after the stop"] = gc.get_threshold()[0]

    vtime.run(scenario())


def cycle_holding(size: int) -> Any:
    def handler(job: Job[str]) -> None:
        """Holds `size` bytes, and keeps a caught exception in a local: a reference cycle
        (exception, traceback, frame) that holds the buffer until the collector finds it."""
        buffer = bytearray(size)
        try:
            raise ValueError(job.payload)
        except ValueError as exc:
            kept = exc
        assert buffer and kept

    return handler


def small_garbage(job: Job[str]) -> None:
    """Makes tracked objects by the hundred and small cycles, the way a client library's
    parsers do: garbage, but no memory to speak of."""
    for _ in range(200):
        node: dict[str, Any] = {"payload": job.payload}
        node["self"] = node


needs_mallinfo2 = pytest.mark.skipif(
    heap.malloc_in_use() is None, reason="no mallinfo2 here: the threshold is left as found"
)


@needs_mallinfo2
def test_the_youngest_generation_is_collected_less_often_while_its_garbage_is_small() -> None:
    found = gc.get_threshold()
    assert found[0] == heap.CPYTHON_THRESHOLD, "the test needs the collector's default"
    seen: dict[str, int] = {}
    _run_jobs(300, small_garbage, seen)
    assert seen["young threshold while running"] == heap.YOUNG_THRESHOLD, seen
    assert gc.get_threshold() == found, "the threshold the worker found is given back"


@needs_mallinfo2
def test_garbage_that_holds_large_buffers_keeps_the_collector_at_cpython_s_pace() -> None:
    """8 MiB buffers held by reference cycles, concurrency 8: at a fixed 10,000 the garbage
    between passes peaked at 1.4 GiB of RSS where CPython's own threshold held 0.5 GiB."""
    seen: dict[str, int] = {}
    _run_jobs(200, cycle_holding(8 * 2**20), seen)
    assert seen["young threshold while running"] == heap.CPYTHON_THRESHOLD, seen


def test_the_threshold_follows_what_each_pass_freed() -> None:
    budget, floor, top = heap.GARBAGE_BUDGET, 700, heap.YOUNG_THRESHOLD
    assert heap.next_threshold(700, 0, floor) == 1400, "nothing freed: doubled"
    assert heap.next_threshold(8000, 0, floor) == top, "never above the top"
    assert heap.next_threshold(top, budget // 2 - 1, floor) == top
    assert heap.next_threshold(4000, budget // 2, floor) == 4000, "half the budget and more: kept"
    assert heap.next_threshold(4000, budget, floor) == 4000
    assert heap.next_threshold(top, 4 * budget, floor) == top // 4, "four budgets: a quarter"
    assert heap.next_threshold(top, 100 * budget, floor) == floor, "never below CPython's"


@pytest.mark.parametrize("owners", [0, 5_000, 50_000])
def test_an_owners_threshold_is_kept(owners: int) -> None:
    """0 turns automatic collection off; any other than CPython's is tuned already (before,
    one between 1 and 9,999 was raised to 10,000)."""
    found = gc.get_threshold()
    gc.set_threshold(owners, *found[1:])
    try:
        seen: dict[str, int] = {}
        _run_jobs(300, small_garbage, seen)
        assert seen["young threshold while running"] == owners, seen
        assert seen["young threshold after the stop"] == owners, seen
    finally:
        gc.set_threshold(*found)


def test_the_heap_is_frozen_before_the_first_receive(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the worker freezes is start-up's: no message, and no receive, is in it."""
    order: list[str] = []
    hold = heap.hold

    def holding() -> heap.Held:
        order.append("hold")
        return hold()

    receive = MemorySQS.receive_message

    async def receiving(self: MemorySQS, **kwargs: Any) -> Any:
        order.append("receive")
        return await receive(self, **kwargs)

    monkeypatch.setattr(heap, "hold", holding)
    monkeypatch.setattr(MemorySQS, "receive_message", receiving)
    _run_one_message({})
    assert order[:2] == ["hold", "receive"], order


def test_the_start_up_log_names_the_event_loop(caplog: pytest.LogCaptureFixture) -> None:
    """Whether uvloop is in use is a question an owner asks of a slow worker first."""
    with caplog.at_level(logging.INFO, logger="sqs_worker_engine"):
        _run_one_message({})
    started = next(r for r in caplog.records if r.getMessage() == "worker started")
    assert started.__dict__["event_loop"] == "sqs_worker_engine.doubles.vtime.VirtualTimeLoop", started.__dict__
