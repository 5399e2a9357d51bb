"""The process pool for `executor="process"` handlers: replaced when one of its processes
dies, and fair to the jobs that shared it.

Python's ProcessPoolExecutor is broken for good once a worker process exits abruptly (a
segfault in a native library, the OOM killer, `os._exit`): every job it held fails with
BrokenProcessPool, and every later submit raises at once. So:

- the next submit starts a new pool (without one the queue would never run another job
  while its leases went on being extended);
- the jobs caught in the break are not charged for it: which of them killed the process
  cannot be told from the break, so each runs again at once, alone, in a fresh process of
  its own (at most `size` such processes at a time), inside the same attempt: no receive
  is spent on it. A job that kills its process alone is the one that did: only its
  attempt fails (`HandlerProcessDied`), and SQS's maxReceiveCount counts it as usual.

While jobs run again alone, the process count may reach twice `size` (the new pool's and
the lone ones).
"""

from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from typing import Any

log = logging.getLogger(__name__)
NewExecutor = Callable[[int], concurrent.futures.Executor]


class HandlerProcessDied(Exception):  # noqa: N818 - what happened, as the DLQ's x-error-type shows it
    """The job's handler process exited abruptly while it ran alone: this job killed it."""


def spawn_executor(size: int) -> concurrent.futures.Executor:
    # spawn: a fork of a process running an event loop and threads is not safe.
    return concurrent.futures.ProcessPoolExecutor(size, mp_context=multiprocessing.get_context("spawn"))


class _Call(concurrent.futures.Future[Any]):
    """One job's call, through the shared pool and, after a break, alone. Cancelling it
    cancels only a call still waiting for a process, as a pool's own future does: a call
    under way keeps running, and its future stays pending until its work has ended."""

    def __init__(self) -> None:
        super().__init__()
        self.inner: concurrent.futures.Future[Any] | None = None

    def cancel(self) -> bool:
        inner = self.inner
        if inner is None or not inner.cancel():
            return False
        return super().cancel()


class ProcessPool(concurrent.futures.Executor):
    def __init__(self, size: int, new_executor: NewExecutor = spawn_executor) -> None:
        self.size = size
        self._new_executor = new_executor
        self._lock = threading.Lock()
        self._executor = new_executor(size)
        self._alone = threading.BoundedSemaphore(size)  # lone processes running at once
        self.replacements = 0
        self.reruns = 0  # jobs run again alone after a break

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        call = _Call()
        call.inner = self._shared(fn, *args, **kwargs)
        call.inner.add_done_callback(lambda inner: self._shared_done(call, inner, fn, args, kwargs))
        return call

    def _shared(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        with self._lock:
            try:
                return self._executor.submit(fn, *args, **kwargs)
            except BrokenProcessPool:
                log.warning("a handler process died: starting a new process pool")
                self._executor.shutdown(wait=False, cancel_futures=True)
                self._executor = self._new_executor(self.size)
                self.replacements += 1
                return self._executor.submit(fn, *args, **kwargs)

    def _shared_done(
        self,
        call: _Call,
        inner: concurrent.futures.Future[Any],
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        if inner.cancelled():
            return  # `call.cancel()` cancelled it, and `call` with it
        error = inner.exception()
        if isinstance(error, BrokenProcessPool):
            # Its pool broke under it: it may be the job that broke it, or a neighbour.
            self.reruns += 1
            threading.Thread(target=self._alone_run, args=(call, fn, args, kwargs), daemon=True).start()
        else:
            _pass_on(call, inner)

    def _alone_run(self, call: _Call, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Run the call once more in a process of its own; its result, or if that process
        dies too, HandlerProcessDied: this job is the one that kills its process."""
        with self._alone:
            executor = self._new_executor(1)
            try:
                inner = executor.submit(fn, *args, **kwargs)
                call.inner = inner
                concurrent.futures.wait([inner])
            finally:
                executor.shutdown(wait=False, cancel_futures=True)
        if inner.cancelled() or call.done():
            return  # cancelled while it waited for a lone process
        if isinstance(inner.exception(), BrokenProcessPool):
            call.set_exception(HandlerProcessDied("the handler's process exited abruptly while running this job alone"))
        else:
            _pass_on(call, inner)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._executor.shutdown(wait=wait, cancel_futures=cancel_futures)


def _pass_on(call: _Call, inner: concurrent.futures.Future[Any]) -> None:
    if call.done():
        return
    error = inner.exception()
    if error is not None:
        call.set_exception(error)
    else:
        call.set_result(inner.result())
