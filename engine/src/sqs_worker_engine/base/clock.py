"""The engine's one clock: the running event loop's.

asyncio's loop time is `time.monotonic()` in production. Reading it through the loop
(instead of calling `time.monotonic()` directly) keeps every deadline, timer and sleep on
one timeline, so the engine's own tests can run it on a loop with virtual time and play
hours of leases, retries and shutdowns in milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable


def now() -> float:
    """Seconds on the running loop's monotonic clock."""
    return asyncio.get_running_loop().time()


def from_thread(loop: asyncio.AbstractEventLoop, fn: Callable[[], None]) -> None:
    """Run `fn` on `loop`, from another thread; nothing once the loop has closed: a call cut
    off at shutdown may end after the worker's loop is gone, with nothing left to tell."""
    with contextlib.suppress(RuntimeError):  # "Event loop is closed"
        loop.call_soon_threadsafe(fn)
