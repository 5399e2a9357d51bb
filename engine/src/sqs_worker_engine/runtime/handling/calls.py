"""Calling a queue's handler in its executor: on the loop (async), in the pool's threads,
in the worker's processes, or gathered into a batch (batches.Collector).

Each call returns the handler's result and a future done once its work has *really*
ended: a thread cannot be interrupted, so a cancelled or timed-out call's thread may run
on, and whatever it holds (a handler slot, the lease) must wait for that, not for the
cancellation. `running` counts the calls whose work has not ended.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import sys
import types
from collections.abc import Callable
from typing import Any

from ...base import clock
from ...base.errors import RetryLater
from ...handlers.batches import Collector
from ...handlers.job import Job
from ...handlers.outcomes import Ending, classify
from ...handlers.router import HandlerSpec, call_sync
from ..reporting import QueueReport
from .job_spans import JobSpan
from .processes import ProcessPool

CUT_GRACE = 0.5  # seconds a job cut off at the shutdown deadline gets to react to its cancellation
Started = tuple[asyncio.Future[Any], asyncio.Future[None]]  # (its result, its work has ended)
Wake = Callable[[], None]  # ends a job's wait for its work (calls.call's `watch`)
# An async handler's task runs its first step at once (Python 3.12+), not on the loop's
# next turn: a job whose slot came free starts its handler before the loop runs the
# bookkeeping of the jobs that ended with it, and a handler that never waits is done
# before its caller looks. Made directly, not through a task factory on the loop.
EAGER: dict[str, Any] = {"eager_start": True} if sys.version_info >= (3, 12) else {}


class HandlerCalls:
    def __init__(
        self,
        spec: HandlerSpec,
        concurrency: int,
        report: QueueReport,
        process_pool: ProcessPool | None,
        lease_held: Callable[[str], bool],
    ) -> None:
        """`lease_held(job_id)`: may a job that waited for company in a batch still run."""
        self.spec = spec
        self.report = report
        self.process_pool = process_pool
        self.lease_held = lease_held
        self.running = 0  # handler calls whose work has not ended, settled or not (written by start only)
        self._ended: asyncio.Future[None] | None = None  # see _ended_already
        report.count_running(lambda: self.running)  # the in-flight gauge reads this count
        self.threads = (
            concurrent.futures.ThreadPoolExecutor(concurrency, thread_name_prefix=f"job-{report.queue}")
            if spec.mode == "thread"
            else None
        )
        self.collector = (
            None
            if spec.batch is None
            else Collector(
                self._call_batch, min(spec.batch.size, concurrency), spec.batch.wait, lambda j: lease_held(j.id)
            )
        )

    def start(self, job: Job[Any], on_ended: Callable[[], None], runs: Runs | None = None) -> Started:
        """Start the handler for `job`; `on_ended` runs once its work has really ended;
        `runs`: told when a process begins it (a process handler's)."""
        loop = asyncio.get_running_loop()
        self.running += 1
        task = None
        if self.spec.mode == "async" and self.collector is None:
            task = self._call_async(job)
            if task.done():  # a handler that never waited (EAGER): its work ended with the call
                self.running -= 1
                on_ended()
                return task, self._ended_already(loop)
        ended: asyncio.Future[None] = loop.create_future()

        def finished(_: object = None) -> None:
            if not ended.done():
                ended.set_result(None)
                self.running -= 1
                on_ended()

        if self.collector is not None:
            result, call_ended = self.collector.submit(job)
            call_ended.add_done_callback(finished)
            return result, ended
        if task is not None:
            task.add_done_callback(finished)
            return task, ended
        if self.spec.mode == "process":
            assert self.process_pool is not None
            call = self.process_pool.run(
                call_sync,
                self.spec.fn,
                job,
                key=job.id,
                may_run_again=lambda: self.lease_held(job.id),
                on_run=runs.running if runs is not None else lambda running: None,
            )
            call.ended.add_done_callback(finished)
            return call.result, ended
        assert self.threads is not None
        cf = self.threads.submit(contextvars.copy_context().run, call_sync, self.spec.fn, job)
        cf.add_done_callback(lambda _f: clock.from_thread(loop, finished))
        return asyncio.wrap_future(cf, loop=loop), ended

    def _ended_already(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """A done "its work has ended", one for every call that ended as it was made: a
        future of its own for each of them (most calls) showed in profiles, and a done
        future is only ever read."""
        if self._ended is None or self._ended.get_loop() is not loop:
            self._ended = loop.create_future()
            self._ended.set_result(None)
        return self._ended

    def _call_async(self, job: Job[Any]) -> asyncio.Future[Any]:
        """The async handler's call as a task (eager where it can be); a handler that fails
        when called (a wrong signature) is a failed call like any other, not a crashed life."""
        loop = asyncio.get_running_loop()
        try:
            called = self.spec.fn(job)
        except Exception as exc:
            failed: asyncio.Future[Any] = loop.create_future()
            failed.set_exception(exc)
            return failed
        # A native coroutine asked first: asyncio.iscoroutine is a Python call, a message each.
        if type(called) is types.CoroutineType or asyncio.iscoroutine(called):
            return asyncio.Task(called, loop=loop, **EAGER)
        awaited: asyncio.Future[Any] = asyncio.ensure_future(called)  # an awaitable, from a decorator
        return awaited

    async def call(
        self,
        job: Job[Any],
        *,
        watch: Callable[[Wake | None], None],
        cut: Callable[[], asyncio.Future[None]],
        job_timeout: float,
        lease_gone: Callable[[], bool],
        span: JobSpan | None,
        on_ended: Callable[[], None],
        on_overdue: Callable[[], None] = lambda: None,
    ) -> Ending:
        """Run the handler until it ends, its `job_timeout`, its lease is lost or the
        shutdown cut. `watch(wake)`: have `wake()` called at the loss or the cut (at once if
        it came already; `watch(None)`: no longer). `cut()`: done once the cut came (asked
        for only once the wait is over: most calls never are). `lease_gone()`: is the lease
        lost now. A job that cannot be interrupted keeps its lease and slot until its work
        returns: released earlier, it could run twice at once. Only the shutdown cut stops
        that wait (its message is released at exit). `on_overdue()`: it was cancelled (its
        timeout, its lease lost) and its work goes on all the same: it holds a slot of the
        concurrency, not one of the adaptive limit."""
        started = clock.now()
        runs = Runs(job_timeout) if self.spec.mode == "process" and self.collector is None else None
        if span is None:  # no context manager to enter (a nullcontext each message showed in profiles)
            work, ended = self.start(job, on_ended, runs)
        else:
            with span:  # the span is current in the handler's task or thread
                work, ended = self.start(job, on_ended, runs)
        if work.done():  # a handler that never waited (EAGER)
            return _returned(work, lease_gone, started)
        await _first_of(work, watch, job_timeout, runs)
        if runs is not None and runs.began_at is not None:
            started = runs.began_at  # its duration is its last run's, as its timeout is
        if work.done():
            return _returned(work, lease_gone, started)
        cut_off = cut()
        reason = "shutdown" if cut_off.done() else "lease_lost" if lease_gone() else "timeout"
        if span is not None:
            span.event("cancelled", reason=reason, job_timeout_seconds=job_timeout)
        job._cancel(reason)
        work.cancel()
        if reason == "shutdown":
            await asyncio.wait({ended}, timeout=CUT_GRACE)
        elif not ended.done():
            await asyncio.wait({ended}, timeout=CUT_GRACE)  # a handler that heeds its cancellation ends here
            if not ended.done():
                on_overdue()
                either: set[asyncio.Future[Any]] = {ended, cut_off}
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                if not ended.done():
                    await asyncio.wait({ended}, timeout=CUT_GRACE)
        duration = clock.now() - started
        if reason == "timeout" and not lease_gone():
            if not ended.done():  # cut off at shutdown while its work still runs
                return Ending("released", None, duration)
            return Ending("timeout", TimeoutError(f"job exceeded its timeout of {job_timeout:g} s"), duration)
        return Ending("lease_lost" if lease_gone() else "released", None, duration)

    def _call_batch(self, jobs: list[Job[Any]]) -> Started:
        """Start a batch handler (batches.Collector calls this). In a context of its own:
        its log lines must not carry the first job's id or span."""
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()
        self.report.batch(len(jobs))

        def done(_: object = None) -> None:
            if not ended.done():
                ended.set_result(None)

        response: asyncio.Future[Any]
        if self.spec.mode == "async":
            response = loop.create_task(self.spec.fn(jobs), context=contextvars.Context())
            response.add_done_callback(done)
        else:
            assert self.threads is not None
            cf = self.threads.submit(contextvars.Context().run, call_sync, self.spec.fn, jobs)
            cf.add_done_callback(lambda _f: clock.from_thread(loop, done))
            response = asyncio.wrap_future(cf, loop=loop)
        return response, ended

    def close(self) -> None:
        """Shutdown: what waits for a batch is called now."""
        if self.collector is not None:
            self.collector.close()

    def shutdown(self) -> None:
        if self.threads is not None:
            self.threads.shutdown(wait=False, cancel_futures=True)


class Runs:
    """A process handler's timeout, counted from the moment a process begins its job, and
    again from each run after a break (processes.py): a pool's start-up, a wait for a free
    process and the wait between a broken run and the next never count against it."""

    __slots__ = ("_timer", "_wake", "began_at", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.began_at: float | None = None  # the loop's time its latest run began
        self._wake: Wake | None = None
        self._timer: asyncio.TimerHandle | None = None

    def running(self, begun: bool) -> None:
        """A process begins the job, or (False) its run broke (the pool tells it, on the loop)."""
        self.began_at = clock.now() if begun else None
        self._arm()

    def watch(self, wake: Wake | None) -> None:
        """Have `wake()` called `seconds` after a run begins (None: no longer)."""
        self._wake = wake
        if wake is None or self.began_at is not None:
            self._arm()

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._wake is not None and self.began_at is not None:  # armed only while a run goes on
            self._timer = asyncio.get_running_loop().call_at(self.began_at + self.seconds, self._wake)


async def _first_of(
    work: asyncio.Future[Any], watch: Callable[[Wake | None], None], seconds: float, runs: Runs | None = None
) -> None:
    """Wait until `work` is done, `seconds` pass (from each run's beginning, with `runs`),
    or `watch`'s wake comes (the lease lost, the shutdown cut): one future and one timer a job. asyncio.wait on the work and a
    future each for the loss and the cut made four futures, a set, three callbacks to add
    and remove, and three isinstance checks against an ABC a job: against the in-memory
    SQS, 10 ms jobs at concurrency 50 took 692,000-698,000 instructions a message with it,
    638,000-654,000 with this."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    work.add_done_callback(wake)
    timer = loop.call_later(seconds, wake) if runs is None else None
    if runs is not None:
        runs.watch(wake)
    watch(wake)
    try:
        await waiter
    finally:
        watch(None)
        if timer is not None:
            timer.cancel()
        if runs is not None:
            runs.watch(None)
        work.remove_done_callback(wake)


def _returned(work: asyncio.Future[Any], lease_gone: Callable[[], bool], started: float) -> Ending:
    """The ending of a handler call whose work is done, started at the loop time `started`."""
    if lease_gone():
        return Ending("lease_lost", None, clock.now() - started)  # whatever it did: not ours now
    error = asyncio.CancelledError() if work.cancelled() else work.exception()
    requested = error.seconds if isinstance(error, RetryLater) else None
    return Ending(classify(error), error, clock.now() - started, requested)
