"""The event loop the worker runs on (loops.py, WORKER_EVENT_LOOP)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from sqs_worker_engine import Job, Router
from sqs_worker_engine.cli import run_until_stopped
from sqs_worker_engine.process.host import loops
from sqs_worker_engine.testing import memory_sqs, memory_worker


@pytest.mark.parametrize(
    ("choice", "installed", "loop", "problem"),
    [
        ("auto", True, "uvloop", False),
        ("auto", False, "asyncio", False),
        ("uvloop", True, "uvloop", False),
        ("uvloop", False, "uvloop", True),
        ("asyncio", True, "asyncio", False),
        ("asyncio", False, "asyncio", False),
    ],
)
def test_each_choice_resolves_to_one_loop(choice: loops.EventLoop, installed: bool, loop: str, problem: bool) -> None:
    assert loops.resolve(choice, installed) == loop
    assert (loops.loop_problem(choice, installed) is not None) == problem


@pytest.mark.parametrize("choice", loops.CHOICES)
def test_the_worker_runs_its_jobs_on_the_loop_chosen(choice: loops.EventLoop) -> None:
    """A worker on each loop the choice resolves to here takes messages through to their
    deletes (run the way `run` runs it: cli.run_until_stopped)."""
    if choice == "uvloop" and not loops.uvloop_installed():
        pytest.skip("uvloop is not installed here")
    seen: dict[str, Any] = {}

    async def main() -> None:
        sqs = memory_sqs("jobs", messages=30, body=lambda i: json.dumps({"n": i}))
        router = Router()
        done = asyncio.Event()

        @router.handler("jobs")
        async def handle(job: Job[Any]) -> None:
            await asyncio.sleep(0)
            seen["count"] = seen.get("count", 0) + 1
            if seen["count"] == 30:
                done.set()

        running = memory_worker(sqs, router, "jobs", name="loops", WORKER_CONCURRENCY="4")
        await asyncio.wait_for(done.wait(), 30)
        await running.stop("done")
        seen["loop"] = type(asyncio.get_running_loop()).__module__
        seen["left"] = sqs.bodies("jobs")

    run_until_stopped(main(), choice)
    assert seen["count"] == 30 and seen["left"] == [], "every message ran and was deleted"
    expected = loops.resolve(choice, loops.uvloop_installed())
    assert seen["loop"].startswith("uvloop") == (expected == "uvloop"), seen["loop"]


def test_a_task_left_behind_that_ignores_cancellation_does_not_keep_the_process() -> None:
    """What the worker left behind (a lifespan's close that swallows its cancellation) is
    cancelled at exit and waited for briefly, never for ever."""
    import threading

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue

    async def main() -> None:
        asyncio.get_running_loop().create_task(stubborn())
        await asyncio.sleep(0)

    finished = threading.Event()

    def run() -> None:
        run_until_stopped(main())
        finished.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    assert finished.is_set(), "run_until_stopped waited for a task that ignores cancellation"
