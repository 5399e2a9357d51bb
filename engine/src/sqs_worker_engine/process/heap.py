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
pass its threshold: 700 by default. A worker at speed keeps the objects of the messages
in flight alive (tasks, futures, frames), so every pass walks them and promotes them, to
be walked again a generation up. In the bench's 10 ms jobs at concurrency 50 (3,000
messages a second), the default gave about 1,000 young passes and 100 middle ones in
24,000 messages, 0.43-0.54 s of the worker's CPU; at YOUNG_THRESHOLD, 17 and 1, 0.05-0.06 s.
The garbage a higher threshold lets wait is what reference cycles made since the last
pass: a bounded heap.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

YOUNG_THRESHOLD = 10_000
# The permanent generation as the interpreter left it, before any owner of the process could
# freeze a heap of its own: the worker is imported before it starts.
_AT_IMPORT = gc.get_freeze_count()


@dataclass(frozen=True)
class Held:
    """What `hold` changed, for `give_back` to undo."""

    frozen: bool = False
    thresholds: tuple[int, int, int] | None = None  # the collector's, as the worker found them


def froze_since(count: int, at_import: int) -> bool:
    """Did an owner of the process freeze its heap since the engine was imported?"""
    return count > at_import


def young_threshold(current: int) -> int:
    """The youngest generation's threshold while the worker runs. 0 (automatic collection
    off) and a higher one are the owner's choice, and kept."""
    return current if current == 0 or current >= YOUNG_THRESHOLD else YOUNG_THRESHOLD


def hold() -> Held:
    """Freeze the heap as it is now, unless something already froze it, and raise the
    youngest generation's threshold (the worker has started)."""
    frozen = not froze_since(gc.get_freeze_count(), _AT_IMPORT)
    if frozen:
        gc.freeze()
    found = gc.get_threshold()
    young = young_threshold(found[0])
    if young == found[0]:
        return Held(frozen)
    gc.set_threshold(young, *found[1:])
    return Held(frozen, found)


def give_back(held: Held) -> None:
    """Give the collector back what `hold` took (the worker has stopped). On 3.12 the thaw
    includes the interpreter's immortal objects: in the oldest generation they are skipped
    as before, and the next full collection moves them back."""
    if held.frozen:
        gc.unfreeze()
    if held.thresholds is not None:
        gc.set_threshold(*held.thresholds)
