"""Stop signals that arrive before the worker listens: kept, then handed to it.

What `entry.py` (the process entry point, which keeps them first thing) shares with
`worker.py` (which acts on a kept one) and `cli.py` (which lets any other command act on it
as usual). Standard library only: imported before anything heavy.
"""

from __future__ import annotations

import signal
from types import FrameType

_early: list[int] = []


def _keep(signum: int, _frame: FrameType | None) -> None:
    _early.append(signum)


def keep_stop_signals() -> None:
    """Hold SIGTERM/SIGINT until the worker installs its own handlers."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _keep)


def take_early_signal() -> int | None:
    """The first stop signal that arrived before the worker listened, if any (once)."""
    if not _early:
        return None
    first = _early[0]
    _early.clear()
    return first


def restore_default_signals() -> None:
    """For commands other than `run`: signals act as usual again (a kept one now)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    early = take_early_signal()
    if early is not None:
        signal.raise_signal(early)
