"""The process pool for `executor="process"` handlers: replaced when one of its processes
dies, fair to the jobs that shared it, and driven from the event loop.

Python's ProcessPoolExecutor is broken for good once a worker process exits abruptly (a
segfault in a native library, the OOM killer, `os._exit`): every job it held fails with
BrokenProcessPool, and every later submit raises at once. So:

- the next job starts a new pool;
- the jobs caught in the break are not charged for it (`after_break`). Which of them
  killed the process cannot be told from the break, so each that a process had begun runs
  again, alone, in a fresh process of its own (at most `size` such processes at a time),
  inside the same attempt: no receive is spent on it; unless its lease went meanwhile
  (`may_run_again`), for then another delivery of it may run. One that no process had
  begun waits for the new pool (a second break and it runs alone too);
- a job that kills its process alone is the one that did: only its attempt fails
  (`HandlerProcessDied`), SQS's maxReceiveCount counts it as usual, and its later attempts
  in this worker run alone from the start, so it breaks the shared pool once, not once an
  attempt;
- a job's timeout counts from the moment a process begins it (`ProcessCall.on_run`):
  each process says so on a pipe before it calls the handler. A pool's start-up (a spawned
  process imports the handler's modules: seconds), a wait for a free process, and the wait
  between a broken run and its run alone never count against it.

Every pool starts all its processes at once, each with a first call that imports the
handlers' modules (`_warm`), before any job: a lone process too, which runs its job only
once its first call has answered. Python's pool spawns a process on demand after it has
woken its manager thread, and that thread watches only the processes it knew when it
woke: a process spawned on demand that died before the pool next answered anything went
unseen, and its job hung (seen on 3.11 with three processes started by three jobs).
Once every process has started, and one call has answered, the manager watches them all.

Everything here runs on the event loop. A pool's futures end on its manager thread, and
CPython 3.12 and later end a broken pool's futures while that thread holds the pool's
non-reentrant shutdown lock: a done-callback that touched the pool (a shutdown, a submit)
deadlocked the thread, and every job it held hung with its lease kept for ever. The only
callback on those futures here is asyncio's own (`wrap_future`: a wake-up of the loop).

While jobs run again alone, the process count may reach twice `size` (the new pool's and
the lone ones).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import multiprocessing
import os
import signal
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Literal

from ...base import clock
from ...base.telemetry import logs

log = logging.getLogger("sqs_worker_engine.processes")
# After killing what still runs, how long `stop` waits for the pools' threads to end.
STOP_AFTER_KILL_SECONDS = 5.0
# Jobs (by key: the message id) that killed their process alone, the most recent kept: their
# later attempts run alone from the start.
DIED_ALONE_REMEMBERED = 1_000
# A job's number as its process announces it: 8 bytes in one write. Writes to a pipe of up
# to PIPE_BUF bytes are atomic, so the processes share one pipe without a lock (a process
# killed while holding a lock would leave it held for every other).
_NUMBER = struct.Struct("<Q")
NewExecutor = Callable[[int, Connection], concurrent.futures.Executor]
AfterBreak = Literal["again", "alone", "fail"]


class HandlerProcessDied(Exception):  # noqa: N818 - what happened, as the DLQ's x-error-type shows it
    """The job's handler process exited abruptly while it ran alone: this job killed it."""


def after_break(begun: bool, breaks: int, stopped: bool) -> AfterBreak:
    """What a job caught in its pool's break does next. After the pool's stop it fails (the
    worker is exiting; its message was released). One a process had begun may be the one
    that broke the pool, and so may one caught in a second break: each runs alone, where
    its own death is told apart. One no process had begun waits for the new pool."""
    if stopped:
        return "fail"
    return "alone" if begun or breaks > 1 else "again"


def spawn_executor(size: int, announce: Connection) -> concurrent.futures.Executor:
    # spawn: a fork of a process running an event loop and threads is not safe.
    return concurrent.futures.ProcessPoolExecutor(
        size,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_in_process,
        initargs=(announce, logs.configuration()),
    )


_announce: Connection | None = None  # in a handler process: where it says it begins a job


def _in_process(announce: Connection, logging_as: tuple[str, str, logs.LogFormat] | None = None) -> None:
    """In each handler process, before its first job. Ctrl-C signals the terminal's whole
    process group: the worker drains on it, and its handler processes must not fail the
    jobs they run with KeyboardInterrupt (or die waiting for the next). Its log lines go out
    as the worker's do (`logging_as`: the worker's `logs.configure`): a spawned process
    starts with Python's defaults, which drop INFO lines and format none."""
    global _announce
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if logging_as is not None:
        logs.configure(*logging_as)
    _announce = announce


def _warm(*handlers: Callable[..., Any]) -> None:
    """A process's first call: passing the handlers imported their modules."""


def _begin(number: int, fn: Callable[..., Any], *args: Any) -> Any:
    """A job's call, in its process: say that it begins, then call it."""
    if _announce is not None:
        os.write(_announce.fileno(), _NUMBER.pack(number))
    return fn(*args)


class ProcessCall:
    """One job's call. `result`: its answer (cancelling it drops a call no process has
    begun; one under way runs on, as a pool's own future does). `ended`: its work has ended,
    in whatever process. `on_run(True)`: a process begins it; `on_run(False)`: its run
    broke, and it waits to run again (on the loop, while its answer is awaited)."""

    def __init__(
        self,
        number: int,
        key: str,
        work: tuple[Any, ...],
        may_run_again: Callable[[], bool],
        on_run: Callable[[bool], None],
    ) -> None:
        loop = asyncio.get_running_loop()
        self.number = number
        self.key = key
        self.work = work  # the function and its arguments
        self.may_run_again = may_run_again
        self.on_run = on_run
        self.result: asyncio.Future[Any] = loop.create_future()
        self.ended: asyncio.Future[None] = loop.create_future()
        self.begun = False  # by a process, in its current run
        self.breaks = 0  # pool breaks it was caught in
        self.inner: concurrent.futures.Future[Any] | None = None  # its current run's future
        self.result.add_done_callback(self._dropped)

    def _dropped(self, result: asyncio.Future[Any]) -> None:
        if result.cancelled() and not self.begun and self.inner is not None:
            self.inner.cancel()  # still waiting for a process: it never runs (the future's lock only)

    def began(self) -> None:
        self.begun = True
        if not self.result.done():
            self.on_run(True)

    def broke(self) -> None:
        self.breaks += 1
        if not self.result.done():
            self.on_run(False)


class ProcessPool:
    def __init__(
        self, size: int, new_executor: NewExecutor | None = None, handlers: tuple[Callable[..., Any], ...] = ()
    ) -> None:
        """`new_executor(n, announce)` makes a pool of n processes that write each job's
        number to `announce` as they begin it (default: `spawn_executor`, looked up when the
        pool is made, so that a test can stand in for processes); `handlers`: what its
        processes import as they start."""
        self.size = size
        self.handlers = handlers
        self._new_executor = new_executor or spawn_executor
        self._executor: concurrent.futures.Executor | None = None  # the shared pool; None: make one
        self._lone: set[concurrent.futures.Executor] = set()  # lone processes' pools, until each run ends
        self._lone_slots = asyncio.Semaphore(size)
        self._calls: dict[int, ProcessCall] = {}  # by number, until each call's work has ended
        self._drivers: set[asyncio.Task[None]] = set()
        self._numbers = itertools.count(1)
        self._died_alone: OrderedDict[str, None] = OrderedDict()
        self._announcements: tuple[Connection, Connection] | None = None  # (read end, write end)
        self._unread = b""
        self._stopped = False  # by `stop`: nothing starts again, a break included
        self.replacements = 0
        self.reruns = 0  # jobs run again alone after a break

    def start(self) -> None:
        """Start the shared pool's processes now (the worker's start), not with the first job."""
        self._listen()
        self._shared()

    def run(
        self,
        fn: Callable[..., Any],
        /,
        *args: Any,
        key: str = "",
        may_run_again: Callable[[], bool] = lambda: True,
        on_run: Callable[[bool], None] = lambda running: None,
    ) -> ProcessCall:
        """Call `fn(*args)` in a process. `key` names the job (its message id);
        `may_run_again()`: may it run again alone after a break, now (the worker's answer:
        its lease is still held); `on_run(running)`: a process begins it (its timeout starts), or
        its run broke (its timeout stops until it begins again)."""
        if self._stopped:
            raise RuntimeError("the handler process pool is stopped")
        self._listen()
        call = ProcessCall(next(self._numbers), key, (fn, *args), may_run_again, on_run)
        self._calls[call.number] = call
        driver = asyncio.get_running_loop().create_task(self._drive(call), name=f"handler-process-{call.number}")
        self._drivers.add(driver)
        driver.add_done_callback(self._drivers.discard)
        return call

    async def _drive(self, call: ProcessCall) -> None:
        """A call's life: in the shared pool, then, caught in a break, alone or again."""
        try:
            alone = call.key in self._died_alone
            while not alone:
                executor = self._shared()
                try:
                    inner = await self._in(executor, call)
                except BrokenProcessPool:  # it broke before this call reached it
                    self._broken(executor)
                    continue
                if inner is None or not _broke(inner):
                    _pass_on(call, inner)
                    return
                self._broken(executor)
                call.broke()
                next_step = after_break(call.begun, call.breaks, self._stopped)
                if next_step == "fail":
                    _pass_on(call, inner)
                    return
                alone = next_step == "alone"
            if call.breaks:
                self.reruns += 1
            await self._alone(call)
        except Exception as exc:  # a pool that cannot start a process: the attempt fails, nothing hangs
            if not call.result.done():
                call.result.set_exception(exc)
        finally:
            del self._calls[call.number]
            if not call.result.done():
                call.result.cancel()  # the pool stopped while it waited for a lone process
            call.ended.set_result(None)

    async def _alone(self, call: ProcessCall) -> None:
        async with self._lone_slots:
            if call.result.cancelled():
                return
            if not call.may_run_again():  # its lease went meanwhile: another delivery may run it
                call.result.set_exception(
                    BrokenProcessPool("its process pool broke, and its lease went before it could run again")
                )
                return
            executor = self._new_executor(1, self._writer())
            self._lone.add(executor)
            try:
                await _answered(executor.submit(_warm, *self.handlers))  # see the module's docstring
                inner = await self._in(executor, call)
            finally:
                self._lone.discard(executor)
            if inner is not None and _broke(inner) and not self._stopped:
                self._remember(call.key)
                call.result.set_exception(
                    HandlerProcessDied("the handler's process exited abruptly while running this job alone")
                )
                return
            if inner is not None and not _broke(inner):
                executor.shutdown(wait=False)  # on the loop: no lock of the pool is held here
                self._died_alone.pop(call.key, None)
            _pass_on(call, inner)

    async def _in(
        self, executor: concurrent.futures.Executor, call: ProcessCall
    ) -> concurrent.futures.Future[Any] | None:
        """Run `call` in `executor` until its work ends; its future, or None if the call was
        dropped before it was submitted."""
        if call.result.cancelled():
            return None
        call.begun = False
        inner = call.inner = executor.submit(_begin, call.number, *call.work)
        await _answered(inner)
        if _broke(inner):
            self._read()  # a process that began it and died had said so: read that first
        return inner

    def _shared(self) -> concurrent.futures.Executor:
        if self._stopped:
            raise RuntimeError("the handler process pool is stopped")
        if self._executor is None:
            self._executor = self._new_executor(self.size, self._writer())
            for _ in range(self.size):  # every process at once: see the module's docstring
                self._executor.submit(_warm, *self.handlers)
        return self._executor

    def _broken(self, executor: concurrent.futures.Executor) -> None:
        """The shared pool `executor` broke: the next call makes a new one (once, however
        many of its calls say so). Nothing is asked of the broken one: its manager thread
        has ended its futures, stopped its processes and closed its queues, and may still
        hold its lock."""
        if executor is self._executor and not self._stopped:
            log.warning("a handler process died: starting a new process pool")
            self._executor = None
            self.replacements += 1

    def _remember(self, key: str) -> None:
        if key:
            self._died_alone[key] = None
            self._died_alone.move_to_end(key)
            while len(self._died_alone) > DIED_ALONE_REMEMBERED:
                self._died_alone.popitem(last=False)

    # -- the processes' announcements ------------------------------------------------

    def _listen(self) -> None:
        if self._announcements is None:
            read, write = multiprocessing.Pipe(duplex=False)
            os.set_blocking(read.fileno(), False)
            self._announcements = (read, write)
            asyncio.get_running_loop().add_reader(read.fileno(), self._read)

    def _writer(self) -> Connection:
        assert self._announcements is not None
        return self._announcements[1]

    def _read(self) -> None:
        """Each job number a process wrote as it began the job: that call has begun."""
        if self._announcements is None:
            return
        with contextlib.suppress(BlockingIOError):
            self._unread += os.read(self._announcements[0].fileno(), 64 * _NUMBER.size)
        whole = len(self._unread) - len(self._unread) % _NUMBER.size
        for (number,) in _NUMBER.iter_unpack(self._unread[:whole]):
            call = self._calls.get(number)
            if call is not None:
                call.began()
        self._unread = self._unread[whole:]

    # -- the worker's exit -------------------------------------------------------------

    async def stop(self, grace: float) -> None:
        """The worker's exit, after its drain: the jobs still running in a process were
        released, and another worker may now run them. Idle processes are asked to exit
        and given `grace` seconds; whatever still runs then is killed, which a thread could
        not be. Shutting down without waiting left each pool's manager thread alive
        (the CLI's exit then reported it as a thread still running, and skipped the pools'
        cleanup: leaked semaphores) and a released job running on in an orphaned process."""
        self._stopped = True
        executors = [e for e in (self._executor, *self._lone) if e is not None]
        processes = [p for executor in executors for p in _processes(executor)]
        loop = asyncio.get_running_loop()
        closing = dict(_in_thread(loop, executor) for executor in executors)
        if closing:
            await asyncio.wait(closing, timeout=grace)
        for process in processes:
            if process.is_alive():
                process.kill()  # SIGKILL: a handler's own SIGTERM handler cannot keep it
        if closing:
            await asyncio.wait(closing, timeout=STOP_AFTER_KILL_SECONDS)  # its manager thread sees it gone, ends
        for done, thread in closing.items():
            if done.done():
                thread.join()  # it has said so: it is returning
        for driver in self._drivers:
            driver.cancel()  # a call waiting for a lone process: it never began
        await asyncio.gather(*self._drivers, return_exceptions=True)
        if self._announcements is not None:
            loop.remove_reader(self._announcements[0].fileno())
            for end in self._announcements:
                end.close()
            self._announcements = None


def _in_thread(
    loop: asyncio.AbstractEventLoop, executor: concurrent.futures.Executor
) -> tuple[asyncio.Future[None], threading.Thread]:
    """The pool's shutdown, waiting, in a thread of its own: done once its manager thread
    has ended, which is when its processes have."""
    done: asyncio.Future[None] = loop.create_future()

    def close() -> None:
        try:
            executor.shutdown(cancel_futures=True)
        finally:
            clock.from_thread(loop, lambda: _finish(done))

    thread = threading.Thread(target=close, name="handler-processes-stop")
    thread.start()
    return done, thread


async def _answered(inner: concurrent.futures.Future[Any]) -> None:
    """Until `inner` has ended. It ends on its pool's manager thread, perhaps under the pool's
    lock: the callback only wakes the loop."""
    loop = asyncio.get_running_loop()
    over: asyncio.Future[None] = loop.create_future()
    inner.add_done_callback(lambda _: clock.from_thread(loop, lambda: _finish(over)))
    await over


def _finish(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _processes(executor: concurrent.futures.Executor) -> list[BaseProcess]:
    """A ProcessPoolExecutor's processes. CPython keeps them in `_processes` (3.11 to 3.14;
    3.14 adds terminate_workers() for this), dropped by shutdown: read before it. A pool a
    test stands in with has none."""
    held = getattr(executor, "_processes", None) or {}
    return list(held.values())


def _broke(inner: concurrent.futures.Future[Any]) -> bool:
    return not inner.cancelled() and isinstance(inner.exception(), BrokenProcessPool)


def _pass_on(call: ProcessCall, inner: concurrent.futures.Future[Any] | None) -> None:
    if call.result.done():
        return
    if inner is None or inner.cancelled():
        call.result.cancel()
        return
    error = inner.exception()
    if error is not None:
        call.result.set_exception(error)
    else:
        call.result.set_result(inner.result())
