"""Calling a handler (calls.py): an async handler's task runs its first step when it is
called where the interpreter can start a task eagerly (3.12+), on the loop's next turn
before; either way its work is counted until it has ended, and `on_ended` runs once."""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from typing import Any

import pytest

from sqs_worker_engine.base.telemetry.events import Events
from sqs_worker_engine.base.telemetry.health import Health
from sqs_worker_engine.handlers.router import HandlerSpec
from sqs_worker_engine.runtime.handling.calls import HandlerCalls
from sqs_worker_engine.runtime.reporting import QueueReport

EAGER = sys.version_info >= (3, 12)


def _calls(handler: Any) -> HandlerCalls:
    report = QueueReport("calls", "w-1", Events(), Health(60, None), concurrency=2)
    return HandlerCalls(HandlerSpec("calls", handler, None, "async"), 2, report, None, lambda _id: True)


def test_a_handler_that_never_waits_is_done_when_called_where_tasks_start_eagerly() -> None:
    steps: list[str] = []

    async def handler(job: Any) -> str:
        steps.append(job)
        return "ok"

    async def main() -> None:
        ended: list[str] = []
        calls = _calls(handler)
        work, done = calls.start("job-1", lambda: ended.append("ended"))  # type: ignore[arg-type]
        # Eagerly: ran to its end already, slot and count given back before the caller looks.
        assert (work.done(), steps, ended, calls.running) == (
            (True, ["job-1"], ["ended"], 0) if EAGER else (False, [], [], 1)
        )
        assert await work == "ok"
        await asyncio.sleep(0)
        assert (done.done(), ended, calls.running) == (True, ["ended"], 0)

    asyncio.run(main())


def test_a_handler_that_waits_runs_up_to_its_wait_and_ends_once() -> None:
    steps: list[str] = []

    async def handler(job: Any) -> None:
        steps.append("before")
        await asyncio.sleep(0.01)
        steps.append("after")

    async def main() -> None:
        ended: list[str] = []
        calls = _calls(handler)
        work, done = calls.start("job-1", lambda: ended.append("ended"))  # type: ignore[arg-type]
        assert (steps, calls.running) == ((["before"] if EAGER else []), 1)
        await done
        assert (steps, ended, calls.running, work.done()) == (["before", "after"], ["ended"], 0, True)

    asyncio.run(main())


async def _work(job: Any) -> str:
    await asyncio.sleep(0)
    return "ok"


@functools.wraps(_work)
def _scheduled(job: Any) -> asyncio.Future[str]:  # a decorator that schedules the coroutine itself
    return asyncio.ensure_future(_work(job))


async def _no_job() -> None:  # a wrong signature: fails when called, before any await
    return None


@pytest.mark.parametrize(
    ("handler", "result"), [(_scheduled, "ok"), (_no_job, TypeError)], ids=["returns-a-future", "wrong-signature"]
)
def test_an_async_handler_that_is_no_plain_coroutine_ends_as_a_call_and_gives_its_slot_back(
    handler: Any, result: Any
) -> None:
    async def main() -> None:
        ended: list[str] = []
        calls = _calls(handler)
        work, done = calls.start("job-1", lambda: ended.append("ended"))  # type: ignore[arg-type]
        if result is TypeError:
            with pytest.raises(TypeError):
                await work
        else:
            assert await work == result
        await done
        assert (ended, calls.running) == (["ended"], 0)

    asyncio.run(main())


def test_a_thread_that_returns_after_the_loop_closed_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """A job cut off at shutdown keeps its thread, which may return after the worker's loop
    has closed: nothing is left to tell, and its end must not be logged as an error
    ("exception calling callback ... Event loop is closed") on every deploy."""
    import threading

    release = threading.Event()

    def handler(job: Any) -> None:
        release.wait(30)

    report = QueueReport("calls", "w-1", Events(), Health(60, None), concurrency=1)
    calls = HandlerCalls(HandlerSpec("calls", handler, None, "thread"), 1, report, None, lambda _id: True)

    async def main() -> None:
        calls.start("job-1", lambda: None)  # type: ignore[arg-type]
        await asyncio.sleep(0)

    loop = asyncio.new_event_loop()
    loop.run_until_complete(main())
    loop.close()
    with caplog.at_level(logging.ERROR, logger="concurrent.futures"):
        release.set()
        assert calls.threads is not None
        calls.threads.shutdown(wait=True)
    assert not [r for r in caplog.records if r.name == "concurrent.futures"], caplog.text
