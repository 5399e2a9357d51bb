"""The start-up heap, kept out of the garbage collector's full passes while the worker runs.

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
as it is: the worker freezes only a process with nothing frozen, and gives back only what
it froze."""

from __future__ import annotations

import gc


def freeze() -> bool:
    """Freeze the heap as it is now, unless something already froze it; True if frozen here."""
    if gc.get_freeze_count():
        return False
    gc.freeze()
    return True


def thaw(frozen_here: bool) -> None:
    """Give the collector back what `freeze` froze (the worker has stopped)."""
    if frozen_here:
        gc.unfreeze()
