"""Tasks that run their first step at once, where the interpreter can (Python 3.12+).

A job's task and an async handler's task are made once per message. Scheduled the usual
way, each waits a turn of the event loop before it runs, and with short jobs that turn is
where ten jobs that ended together queue behind each other's bookkeeping. Started eagerly,
a task runs synchronously up to its first real wait: a no-op handler is done before its
caller looks, and a job whose slot is free starts its handler before the loop runs anything
else. Nothing else changes: the task has its own copy of the context, is the current task
while it runs, and what it awaits is awaited as before. On Python 3.11 (no eager start)
the task is scheduled as usual.

Eager tasks are made directly (`asyncio.Task(..., eager_start=True)`): a task factory
installed on the loop does not see them.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
EAGER = sys.version_info >= (3, 12)
_START: dict[str, Any] = {"eager_start": True} if EAGER else {}


def start_task(coro: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
    """`coro` as a task, run up to its first wait now (3.12+) or on the loop's next turn."""
    loop = asyncio.get_running_loop()
    if EAGER:
        return asyncio.Task(coro, loop=loop, name=name, **_START)
    return loop.create_task(coro, name=name)
