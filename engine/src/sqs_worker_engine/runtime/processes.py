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
  is spent on it; unless its lease went meanwhile (`may_run_again`), for then another
  delivery of it may run. A job that kills its process alone is the one that did: only its
  attempt fails (`HandlerProcessDied`), and SQS's maxReceiveCount counts it as usual.

While jobs run again alone, the process count may reach twice `size` (the new pool's and
the lone ones).
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import multiprocessing
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.process import BaseProcess
from typing import Any

log = logging.getLogger("sqs_worker_engine.processes")
# After killing what still runs, how long `stop` waits for the pools' threads to end.
STOP_AFTER_KILL_SECONDS = 5.0
NewExecutor = Callable[[int], concurrent.futures.Executor]
_Work = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]  # a call: fn, args, kwargs


class HandlerProcessDied(Exception):  # noqa: N818 - what happened, as the DLQ's x-error-type shows it
    """The job's handler process exited abruptly while it ran alone: this job killed it."""


def spawn_executor(size: int) -> concurrent.futures.Executor:
    # spawn: a fork of a process running an event loop and threads is not safe.
    return concurrent.futures.ProcessPoolExecutor(
        size, mp_context=multiprocessing.get_context("spawn"), initializer=_ignore_interrupts
    )


def _ignore_interrupts() -> None:
    """In each handler process, before its first job. Ctrl-C signals the terminal's whole
    process group: the worker drains on it, and its handler processes must not fail the
    jobs they run with KeyboardInterrupt (or die waiting for the next)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _Call(concurrent.futures.Future[Any]):
    """One job's call, through the shared pool and, after a break, alone. Cancelling it
    cancels only a call still waiting for a process, as a pool's own future does: a call
    under way keeps running, and its future stays pending until its work has ended."""

    def __init__(self, may_run_again: Callable[[], bool]) -> None:
        super().__init__()
        self.inner: concurrent.futures.Future[Any] | None = None  # None: waiting for a lone process
        self.may_run_again = may_run_again

    def cancel(self) -> bool:
        inner = self.inner
        if inner is not None and not inner.cancel():
            return False
        return super().cancel()


class ProcessPool(concurrent.futures.Executor):
    def __init__(self, size: int, new_executor: NewExecutor | None = None) -> None:
        """`new_executor(n)` makes a pool of n processes (default: `spawn_executor`, looked
        up when the pool is made, so that a test can stand in for processes)."""
        self.size = size
        self._new_executor = new_executor or spawn_executor
        self._lock = threading.RLock()  # callbacks run on the executors' threads, and re-enter
        self._executor = self._new_executor(size)
        self._waiting: deque[tuple[_Call, _Work]] = deque()  # caught in a break, for a lone process
        self._lone: set[concurrent.futures.Executor] = set()  # lone processes' pools, until each run ends
        self._stopped = False  # by `stop`: nothing starts again, a break included
        self.replacements = 0
        self.reruns = 0  # jobs run again alone after a break

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        return self.run(fn, *args, **kwargs)

    def run(
        self, fn: Callable[..., Any], /, *args: Any, may_run_again: Callable[[], bool] = lambda: True, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        """`submit`, and `may_run_again()`: may the job run again alone after a break, now
        (the worker's answer: its lease is still held; asked just before its lone run, on
        whatever thread ends the broken pool's futures)."""
        call = _Call(may_run_again)
        call.inner = self._shared(fn, *args, **kwargs)
        call.inner.add_done_callback(functools.partial(self._shared_done, call, (fn, args, kwargs)))
        return call

    def _shared(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        with self._lock:
            if self._stopped:
                raise RuntimeError("the handler process pool is stopped")
            try:
                return self._executor.submit(fn, *args, **kwargs)
            except BrokenProcessPool:
                log.warning("a handler process died: starting a new process pool")
                self._executor.shutdown(wait=False, cancel_futures=True)
                self._executor = self._new_executor(self.size)
                self.replacements += 1
                return self._executor.submit(fn, *args, **kwargs)

    def _shared_done(self, call: _Call, work: _Work, inner: concurrent.futures.Future[Any]) -> None:
        if inner.cancelled():
            return  # `call.cancel()` cancelled it, and `call` with it
        if self._stopped or not isinstance(inner.exception(), BrokenProcessPool):
            _pass_on(call, inner)  # after `stop`, a job it ended is not run again
            return
        # Its pool broke under it: it may be the job that broke it, or a neighbour.
        with self._lock:
            self.reruns += 1
            call.inner = None
            self._waiting.append((call, work))
            self._start_alone()

    def _start_alone(self) -> None:
        """Start the jobs waiting to run alone, `size` lone processes at a time."""
        with self._lock:
            while len(self._lone) < self.size and self._waiting and not self._stopped:
                call, work = self._waiting.popleft()
                if call.cancelled():
                    continue
                if not call.may_run_again():  # its lease went meanwhile: another delivery may run it
                    call.set_exception(
                        BrokenProcessPool("its process pool broke, and its lease went before it could run again")
                    )
                    continue
                executor = self._new_executor(1)
                self._lone.add(executor)
                fn, args, kwargs = work
                call.inner = inner = executor.submit(fn, *args, **kwargs)
                inner.add_done_callback(functools.partial(self._alone_done, call, executor))

    def _alone_done(
        self, call: _Call, executor: concurrent.futures.Executor, inner: concurrent.futures.Future[Any]
    ) -> None:
        """Its lone run ended: its result, or if its process died too, HandlerProcessDied:
        this job is the one that kills its process."""
        executor.shutdown(wait=False)
        with self._lock:
            self._lone.discard(executor)
            self._start_alone()
        if inner.cancelled() or call.done():
            return
        if isinstance(inner.exception(), BrokenProcessPool):
            call.set_exception(HandlerProcessDied("the handler's process exited abruptly while running this job alone"))
        else:
            _pass_on(call, inner)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._executor.shutdown(wait=wait, cancel_futures=cancel_futures)

    def stop(self, grace: float) -> None:
        """The worker's exit, after its drain: the jobs still running in a process were
        released, and another worker may now run them. Idle processes are asked to exit
        and given `grace` seconds; whatever still runs then is killed, which a thread could
        not be. Shutting down without waiting left each pool's manager thread alive
        (the CLI's exit then reported it as a thread still running, and skipped the pools'
        cleanup: leaked semaphores) and a released job running on in an orphaned process."""
        with self._lock:
            self._stopped = True
            executors = [self._executor, *self._lone]
            waiting, self._waiting = list(self._waiting), deque()
        for call, _work in waiting:
            call.cancel()  # it waited for a lone process: it never started
        processes = [p for executor in executors for p in _processes(executor)]
        # A pool's shutdown that waits returns once its manager thread has ended, which is
        # when its processes have: each waits in a thread of its own, for `grace`.
        closing = [
            threading.Thread(target=executor.shutdown, kwargs={"cancel_futures": True}, name="handler-processes-stop")
            for executor in executors
        ]
        for thread in closing:
            thread.start()
        deadline = time.monotonic() + grace
        for thread in closing:
            thread.join(max(0.0, deadline - time.monotonic()))
        for process in processes:
            if process.is_alive():
                process.kill()  # SIGKILL: a handler's own SIGTERM handler cannot keep it
        for thread in closing:
            thread.join(STOP_AFTER_KILL_SECONDS)  # its manager thread sees it gone, fails its job, ends


def _processes(executor: concurrent.futures.Executor) -> list[BaseProcess]:
    """A ProcessPoolExecutor's processes. CPython keeps them in `_processes` (3.11 to 3.14;
    3.14 adds terminate_workers() for this), dropped by shutdown: read before it. A pool a
    test stands in with has none."""
    held = getattr(executor, "_processes", None) or {}
    return list(held.values())


def _pass_on(call: _Call, inner: concurrent.futures.Future[Any]) -> None:
    if call.done():
        return
    error = inner.exception()
    if error is not None:
        call.set_exception(error)
    else:
        call.set_result(inner.result())
