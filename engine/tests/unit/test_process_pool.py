"""The process pool with real processes, on whatever Python runs the suite (the suite runs
these on 3.12 and 3.13 too: test_other_pythons.py): a job that kills its process alone
fails its attempt with HandlerProcessDied instead of hanging; its neighbours run again,
once each, and say when each run begins; a job no process had begun is not run alone;
at the worker's exit idle processes exit when asked, one still running a released job is
killed, and no thread of the pool is left for the interpreter's exit to wait for (or,
skipped, to leak the pool's semaphores).

Every wait is bounded by HANG (a hang guard, not a measure of speed): before, on CPython
3.12 and 3.13, a job that killed its process alone never ended."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TypeVar

import pytest

from sqs_worker_engine.runtime.handling.processes import HandlerProcessDied, ProcessPool

T = TypeVar("T")
HANG = 120.0  # seconds: a hang, not a slow machine


def started(before: set[BaseProcess]) -> list[BaseProcess]:
    """This process's children that were not there `before`: the pool's."""
    return [p for p in multiprocessing.active_children() if p not in before]


async def within(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, HANG)


def die() -> None:
    """A handler that kills its process (module level: a handler process imports it by name)."""
    os._exit(1)


def announce_then_sleep(path: str, seconds: float) -> str:
    """A job that says it runs, then runs for `seconds`."""
    Path(path).write_text("running")
    time.sleep(seconds)
    return "slept"


def announce_then_wait(path: str, gate: str) -> str:
    """A job that says it runs, then runs until `gate` exists."""
    Path(path).write_text("running")
    deadline = time.monotonic() + HANG
    while not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return "waited"


def die_once_others_run(paths: list[str]) -> None:
    """A job that kills its process once every file in `paths` exists: its neighbours run."""
    deadline = time.monotonic() + HANG
    while not all(Path(p).exists() for p in paths) and time.monotonic() < deadline:
        time.sleep(0.01)
    os._exit(1)


def runs_into(runs: list[str]) -> Callable[[bool], None]:
    """An `on_run` that notes each run's beginning."""

    def on_run(running: bool) -> None:
        if running:
            runs.append("run")

    return on_run


async def wait_for_file(path: Path) -> None:
    deadline = time.monotonic() + HANG
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        await asyncio.sleep(0.01)


def test_a_job_that_kills_its_process_alone_fails_its_attempt_and_does_not_hang() -> None:
    """Before: the lone run's done-callback shut its pool down on the pool's manager thread,
    which CPython 3.12+ runs under the pool's own lock: the thread deadlocked and the job
    never ended (its lease kept, its slot held, until SIGTERM)."""

    async def main() -> None:
        pool = ProcessPool(2)
        try:
            began: list[str] = []
            call = pool.run(die, key="m-1", on_run=runs_into(began))
            with pytest.raises(HandlerProcessDied):
                await within(call.result)
            await within(call.ended)
            assert began == ["run", "run"], "it began in the shared pool, then alone"
            assert (pool.replacements, pool.reruns) == (1, 1)
            assert await within(pool.run(abs, -3).result) == 3, "the next job runs in a new pool"
        finally:
            await pool.stop(grace=30)

    asyncio.run(main())


def test_neighbours_of_a_crash_run_again_once_and_the_crash_alone_fails(tmp_path: Path) -> None:
    async def main() -> None:
        pool = ProcessPool(3)
        try:
            flags, gate = [tmp_path / "a", tmp_path / "b"], tmp_path / "gate"
            runs: dict[str, list[str]] = {"a": [], "b": [], "killer": []}

            # The neighbours run until the pool has broken under them, and then end.
            neighbours = [
                pool.run(announce_then_wait, str(flag), str(gate), key=flag.name, on_run=runs_into(runs[flag.name]))
                for flag in flags
            ]
            killer = pool.run(
                die_once_others_run, [str(f) for f in flags], key="killer", on_run=runs_into(runs["killer"])
            )
            deadline = time.monotonic() + HANG
            while pool.replacements == 0:
                assert time.monotonic() < deadline, "the pool never broke"
                await asyncio.sleep(0.01)
            gate.write_text("open")
            assert [await within(n.result) for n in neighbours] == ["waited", "waited"]
            with pytest.raises(HandlerProcessDied):
                await within(killer.result)
            assert {name: len(r) for name, r in runs.items()} == {"a": 2, "b": 2, "killer": 2}, (
                "each ran again once, alone"
            )
            assert (pool.replacements, pool.reruns) == (1, 3)
        finally:
            await pool.stop(grace=30)

    asyncio.run(main())


def test_a_job_no_process_had_begun_waits_for_the_new_pool_and_is_not_run_alone() -> None:
    async def main() -> None:
        pool = ProcessPool(1)
        try:
            killer = pool.run(die, key="killer")
            behind: list[str] = []
            queued = pool.run(abs, -5, key="behind", on_run=runs_into(behind))
            assert await within(queued.result) == 5
            assert behind == ["run"], "it ran once, in the new shared pool"
            with pytest.raises(HandlerProcessDied):
                await within(killer.result)
            assert pool.reruns == 1, "only the job that had begun ran alone"
        finally:
            await pool.stop(grace=30)

    asyncio.run(main())


def test_a_job_that_killed_its_process_alone_runs_alone_from_the_start_next_time() -> None:
    """Its next attempt (a new receive of the same message) does not break the shared pool,
    and with it its neighbours, again."""

    async def main() -> None:
        pool = ProcessPool(1)
        try:
            with pytest.raises(HandlerProcessDied):
                await within(pool.run(die, key="m-1").result)
            assert pool.replacements == 1
            with pytest.raises(HandlerProcessDied):
                await within(pool.run(die, key="m-1").result)
            assert pool.replacements == 1, "the shared pool did not break again"
            assert await within(pool.run(abs, -1, key="m-2").result) == 1
        finally:
            await pool.stop(grace=30)

    asyncio.run(main())


def test_stop_asks_idle_processes_to_exit_and_leaves_no_thread() -> None:
    async def main() -> None:
        threads, children = set(threading.enumerate()), set(multiprocessing.active_children())
        pool = ProcessPool(2)
        assert await within(pool.run(abs, -3).result) == 3
        processes = started(children)
        assert processes, "the pool started its processes"
        await pool.stop(grace=30)
        assert [p.exitcode for p in processes] == [0] * len(processes), "asked to exit, not killed"
        assert [t for t in threading.enumerate() if t not in threads] == [], "the pool's manager thread ended"

    asyncio.run(main())


def test_stop_kills_a_process_still_running_a_released_job() -> None:
    async def main() -> None:
        threads, children = set(threading.enumerate()), set(multiprocessing.active_children())
        pool = ProcessPool(1)
        began = asyncio.Event()
        call = pool.run(
            time.sleep, 600, on_run=lambda running: began.set()
        )  # a job the drain cut off: it would run for ten minutes
        await within(began.wait())
        processes = started(children)
        await pool.stop(grace=0.2)
        assert [p.exitcode for p in processes] == [-signal.SIGKILL]
        await within(call.ended)
        assert isinstance(call.result.exception(), BrokenProcessPool)
        assert pool.reruns == 0, "a job the stop ended is not run again alone"
        assert [t for t in threading.enumerate() if t not in threads] == []

    asyncio.run(main())


def test_nothing_runs_after_stop() -> None:
    async def main() -> None:
        pool = ProcessPool(1)
        await pool.stop(grace=30)
        with pytest.raises(RuntimeError, match="stopped"):
            pool.run(abs, -1)

    asyncio.run(main())


def test_a_ctrl_c_at_the_terminal_does_not_reach_a_job_in_a_handler_process(tmp_path: Path) -> None:
    """Ctrl-C signals the terminal's whole process group, the handler processes included;
    the worker drains on it, so the job a process is running goes on and ends as usual.
    Before, the job failed with KeyboardInterrupt."""

    async def main() -> None:
        children = set(multiprocessing.active_children())
        pool = ProcessPool(1)
        try:
            flag = tmp_path / "running"
            call = pool.run(announce_then_sleep, str(flag), 0.5)
            await wait_for_file(flag)
            (process,) = started(children)
            assert process.pid is not None
            os.kill(process.pid, signal.SIGINT)
            try:
                result = await within(call.result)
            except KeyboardInterrupt:  # the job's own, passed back: not this test run's to stop
                pytest.fail("the job failed with KeyboardInterrupt")
            assert result == "slept", "the job ran to its end"
            assert await within(pool.run(abs, -2).result) == 2, "and its process is still there for the next"
            assert pool.replacements == pool.reruns == 0
        finally:
            await pool.stop(grace=30)

    asyncio.run(main())
