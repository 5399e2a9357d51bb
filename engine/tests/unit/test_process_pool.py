"""The process pool's stop at the worker's exit, with real processes: idle ones exit when
asked, one still running a released job is killed, and no thread of the pool is left
for the interpreter's exit to wait for (or, skipped, to leak the pool's semaphores)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.process import BaseProcess
from pathlib import Path

import pytest

from sqs_worker_engine.runtime.processes import ProcessPool


def started(before: set[BaseProcess]) -> list[BaseProcess]:
    """This process's children that were not there `before`: the pool's."""
    return [p for p in multiprocessing.active_children() if p not in before]


def test_stop_asks_idle_processes_to_exit_and_leaves_no_thread() -> None:
    threads, children = set(threading.enumerate()), set(multiprocessing.active_children())
    pool = ProcessPool(2)
    assert pool.run(abs, -3).result(60) == 3
    processes = started(children)
    assert processes, "the pool started its processes"
    pool.stop(grace=30)
    assert [p.exitcode for p in processes] == [0] * len(processes), "asked to exit, not killed"
    assert [t for t in threading.enumerate() if t not in threads] == [], "the pool's manager thread ended"


def test_stop_kills_a_process_still_running_a_released_job() -> None:
    threads, children = set(threading.enumerate()), set(multiprocessing.active_children())
    pool = ProcessPool(1)
    call = pool.run(time.sleep, 600)  # a job the drain cut off: it would run on for ten minutes
    processes = started(children)
    pool.stop(grace=0.2)
    assert [p.exitcode for p in processes] == [-signal.SIGKILL]
    assert isinstance(call.exception(0), BrokenProcessPool)
    assert pool.reruns == 0, "a job the stop ended is not run again alone"
    assert [t for t in threading.enumerate() if t not in threads] == []


def test_nothing_runs_after_stop() -> None:
    pool = ProcessPool(1)
    pool.stop(grace=30)
    with pytest.raises(RuntimeError, match="stopped"):
        pool.run(abs, -1)


def announce_then_sleep(path: str, seconds: float) -> str:
    """A job that says it runs (module level: a handler process imports it by name)."""
    Path(path).write_text("running")
    time.sleep(seconds)
    return "slept"


def test_a_ctrl_c_at_the_terminal_does_not_reach_a_job_in_a_handler_process(tmp_path: Path) -> None:
    """Ctrl-C signals the terminal's whole process group, the handler processes included;
    the worker drains on it, so the job a process is running goes on and ends as usual.
    Before, the job failed with KeyboardInterrupt."""
    children = set(multiprocessing.active_children())
    pool = ProcessPool(1)
    try:
        flag = tmp_path / "running"
        call = pool.run(announce_then_sleep, str(flag), 0.5)
        (process,) = started(children)
        assert process.pid is not None
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.01)
        os.kill(process.pid, signal.SIGINT)
        try:
            result = call.result(60)
        except KeyboardInterrupt:  # the job's own, passed back: not this test run's to stop
            pytest.fail("the job failed with KeyboardInterrupt")
        assert result == "slept", "the job ran to its end"
        assert pool.run(abs, -2).result(60) == 2, "and its process is still there for the next"
        assert pool.replacements == pool.reruns == 0
    finally:
        pool.stop(grace=30)
