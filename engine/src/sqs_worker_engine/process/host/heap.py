"""The garbage collector while the worker runs: the start-up heap kept out of its full
passes, and its youngest generation collected less often.

Start-up leaves a heap of objects that live as long as the process: botocore's service
models, every imported module, the lifespan's clients. Messages keep promoting short-lived
objects into the oldest generation, and each full collection walks that whole heap again.
Against the in-memory SQS with an SQS client loaded, the collector took a quarter of the
worker's CPU a message; with the start-up heap frozen, under a tenth.

`gc.freeze()` moves what exists at that moment to a permanent generation that collections
skip. Reference counting still frees those objects as usual; only a reference cycle among
them is never collected, and that is bounded by the heap start-up left. Each call is a
list splice, cheap enough for a test suite that starts thousands of workers.

A process that froze its own heap (a pre-fork server, the gc module's own advice) is left
as it is: the worker freezes only a process with nothing frozen since the engine was
imported, and gives back what it froze.

"Nothing frozen" is not a count of zero. CPython 3.12's collector moves every immortal
object it meets to the permanent generation (`update_refs` in Modules/gcmodule.c): a bare
3.12.1 interpreter starts with 375 tuples there, and 3.12 is the template's default. A
check for zero never froze a 3.12 worker: each full collection walked its whole start-up
heap, about 140,000 objects, in 45-65 ms a pass with the event loop held.

The youngest generation is collected when the tracked objects made, less those freed,
pass its threshold: 700 by default (2000 from 3.13). A worker at speed keeps the objects of the messages
in flight alive (tasks, futures, frames), so every pass walks them and promotes them, to
be walked again a generation up. In the bench's 10 ms jobs at concurrency 50 (3,000
messages a second), the default gave about 1,000 young passes and 100 middle ones in
24,000 messages, 0.43-0.54 s of the worker's CPU; at YOUNG_THRESHOLD, 17 and 1, 0.05-0.06 s.
The garbage a higher threshold lets wait is what reference cycles made since the last
pass, and that is not bounded by the count of objects: a handler that keeps a caught
exception in a local while it holds an 8 MiB buffer makes a cycle of a few objects that
holds 8 MiB. At a fixed 10,000 such handlers, at concurrency 8, peaked at 1,422 MiB
where CPython's 700 peaked at 549. So the threshold is paced by what the garbage held
(`next_threshold`): each pass, the bytes it freed are read from the C allocator (glibc's
mallinfo2, counting what Python's own small-object arenas do not: buffers, arrays, large
strings). The threshold starts at CPython's and doubles after each pass that found less
than half GARBAGE_BUDGET of garbage, up to YOUNG_THRESHOLD; a pass that found more brings
it down in proportion, never below CPython's. The engine's own cycles (aiobotocore makes a
parser cycle a call) are small objects: its passes free next to nothing, and the threshold
stays at the top. Where mallinfo2 is missing (musl, macOS), or the owner set a threshold
of their own (any but CPython's), the threshold is left as found.
"""

from __future__ import annotations

import ctypes
import gc
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

YOUNG_THRESHOLD = 10_000  # the highest the youngest generation's threshold goes
# CPython's own young threshold (700 to 3.12, 2000 from 3.13): an owner's is any other.
CPYTHON_THRESHOLD = 2000 if sys.version_info >= (3, 13) else 700
GARBAGE_BUDGET = 16 * 2**20  # bytes of garbage a pass may find before the threshold comes down
# The permanent generation as the interpreter left it, before any owner of the process could
# freeze a heap of its own: the worker is imported before it starts.
_AT_IMPORT = gc.get_freeze_count()


@dataclass(frozen=True)
class Held:
    """What `hold` changed, for `give_back` to undo."""

    frozen: bool = False
    thresholds: tuple[int, int, int] | None = None  # the collector's, as the worker found them
    pacer: Callable[[str, dict[str, Any]], None] | None = None  # in gc.callbacks while the worker runs


def froze_since(count: int, at_import: int) -> bool:
    """Did an owner of the process freeze its heap since the engine was imported?"""
    return count > at_import


def next_threshold(current: int, freed: int, floor: int) -> int:
    """The youngest generation's threshold after a pass that freed `freed` bytes: brought
    down in proportion when the garbage held more than GARBAGE_BUDGET, doubled when it held
    less than half of it, between `floor` (CPython's) and YOUNG_THRESHOLD."""
    if freed > GARBAGE_BUDGET:
        return max(floor, current * GARBAGE_BUDGET // freed)
    if 2 * freed < GARBAGE_BUDGET:
        return min(YOUNG_THRESHOLD, current * 2)
    return current


class _Pacer:
    """A gc callback: the bytes each pass frees, read before and after it, set the
    youngest generation's threshold (`next_threshold`)."""

    def __init__(self, in_use: Callable[[], int], floor: int) -> None:
        self.in_use = in_use
        self.floor = floor
        self._before = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._before = self.in_use()
            return
        current, *older = gc.get_threshold()
        paced = next_threshold(current, max(0, self._before - self.in_use()), self.floor)
        if paced != current:
            gc.set_threshold(paced, *older)


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def malloc_in_use() -> Callable[[], int] | None:
    """Bytes the C allocator has handed out and not had back (glibc 2.33+'s mallinfo2:
    in its arenas and in mapped blocks), or None where there is no mallinfo2."""
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (AttributeError, OSError):
        return None
    mallinfo2.restype = _MallInfo2
    mallinfo2.argtypes = []

    def in_use() -> int:
        info = mallinfo2()
        return int(info.uordblks + info.hblkhd)

    return in_use


def hold(in_use: Callable[[], int] | None = None) -> Held:
    """Freeze the heap as it is now, unless something already froze it, and pace the
    youngest generation's threshold by its garbage (the worker has started), unless the
    owner set one or the allocator cannot say what a pass freed. `in_use`: the allocator's
    bytes in use (default: `malloc_in_use()`)."""
    frozen = not froze_since(gc.get_freeze_count(), _AT_IMPORT)
    if frozen:
        gc.freeze()
    found = gc.get_threshold()
    in_use = in_use or malloc_in_use()
    if found[0] != CPYTHON_THRESHOLD or in_use is None:
        return Held(frozen)
    pacer = _Pacer(in_use, floor=found[0])
    gc.callbacks.append(pacer)
    return Held(frozen, found, pacer)


def give_back(held: Held) -> None:
    """Give the collector back what `hold` took (the worker has stopped). On 3.12 the thaw
    includes the interpreter's immortal objects: in the oldest generation they are skipped
    as before, and the next full collection moves them back."""
    if held.frozen:
        gc.unfreeze()
    if held.pacer is not None and held.pacer in gc.callbacks:
        gc.callbacks.remove(held.pacer)
    if held.thresholds is not None:
        gc.set_threshold(*held.thresholds)
