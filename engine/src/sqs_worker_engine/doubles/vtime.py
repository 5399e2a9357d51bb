"""An event loop with virtual time: sleeps and timeouts take no wall-clock time.

When nothing is ready to run, the loop jumps its clock straight to the next timer instead
of waiting for it, so an hour of leases and retries plays in milliseconds, and the same
schedule always plays the same way. Real I/O still works (the loop polls its selector
without waiting); a thread that wakes the loop (`call_soon_threadsafe`) is waited for in
real time only when no timer is due at all.
"""

from __future__ import annotations

import asyncio
import math
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
IDLE_LIMIT = 30.0  # real seconds with nothing scheduled and no thread waking the loop: a hang


class _Selector(selectors.DefaultSelector):
    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualTimeLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready:
            return ready
        if timeout is None:  # nothing scheduled: only a thread can wake us
            ready = super().select(IDLE_LIMIT)
            if not ready:
                raise RuntimeError("virtual-time loop: nothing scheduled and nothing woke it (a hang)")
            return ready
        assert self.loop is not None
        self.loop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """Time is whole nanoseconds, and every timer is rounded up onto that grid: a timer
    then fires exactly when the clock reaches it, never a hair early (floating-point sums
    otherwise leave a deadline 1e-16 s ahead of a clock that never moves on)."""

    def __init__(self) -> None:
        selector = _Selector()
        super().__init__(selector)
        selector.loop = self
        self._ns = 0
        self._clock_resolution = 1e-10  # below the grid: "due" means the clock reached it

    def time(self) -> float:
        return self._ns / 1e9

    def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> asyncio.TimerHandle:  # type: ignore[override]
        ns = math.ceil(when * 1e9)
        while ns / 1e9 < when:  # the product can round down: when it fires, time() >= when
            ns += 1
        return super().call_at(ns / 1e9, callback, *args, context=context)

    def advance(self, seconds: float) -> None:
        self._ns += max(0, round(seconds * 1e9))


def run(coro: Coroutine[Any, Any, T]) -> T:
    """asyncio.run, on virtual time."""
    loop = VirtualTimeLoop()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(coro)
    finally:
        try:
            cancel_leftovers(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel and reap what a scenario left running, so that closing the loop is quiet."""
    leftovers = asyncio.all_tasks(loop)
    for task in leftovers:
        task.cancel()
    if leftovers:
        loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
