"""The engine's one clock: the running event loop's.

asyncio's loop time is `time.monotonic()` in production. Reading it through the loop
(instead of calling `time.monotonic()` directly) keeps every deadline, timer and sleep on
one timeline, so the engine's own tests can run it on a loop with virtual time and play
hours of leases, retries and shutdowns in milliseconds.
"""

from __future__ import annotations

import asyncio


def now() -> float:
    """Seconds on the running loop's monotonic clock."""
    return asyncio.get_running_loop().time()
