"""Which event loop the worker runs on: `WORKER_EVENT_LOOP` = auto (default), uvloop, asyncio.

uvloop (libuv underneath, the `uvloop` extra: `sqs-worker-engine[uvloop]`) runs the loop's
own work, the sockets, timers and callbacks every message goes through, in C. `auto` uses
it when it is installed and the standard loop otherwise; `uvloop` insists on it (refused
at start-up when it is missing), `asyncio` never uses it. What it saved, measured side by
side against a raw receive/delete loop, is in docs/engine/protections.md ("Event loop").

Decisions as pure functions: `loop_problem` says what is wrong with a choice (the settings
refuse to boot on it), `resolve` which loop a choice means here, `new_loop` makes it.
"""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Literal

EventLoop = Literal["auto", "uvloop", "asyncio"]
CHOICES: tuple[EventLoop, ...] = ("auto", "uvloop", "asyncio")


def uvloop_installed() -> bool:
    return importlib.util.find_spec("uvloop") is not None


def resolve(choice: EventLoop, installed: bool) -> Literal["uvloop", "asyncio"]:
    """The loop `choice` means when uvloop is (or is not) `installed`."""
    if choice == "asyncio":
        return "asyncio"
    if choice == "uvloop" or installed:
        return "uvloop"
    return "asyncio"


def loop_problem(choice: EventLoop, installed: bool) -> str | None:
    """Why `choice` cannot run here (None when it can)."""
    if choice == "uvloop" and not installed:
        return "uvloop is not installed: install the engine's uvloop extra (sqs-worker-engine[uvloop]), or use auto"
    return None


def new_loop(choice: EventLoop) -> asyncio.AbstractEventLoop:
    """A new event loop of the kind `choice` resolves to."""
    if resolve(choice, uvloop_installed()) == "uvloop":
        import uvloop

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        return loop
    return asyncio.new_event_loop()
