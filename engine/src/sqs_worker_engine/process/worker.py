"""The worker's lifecycle: start, run one pool per queue, and drain on SIGTERM.

Shutdown sequence (SIGTERM or SIGINT; a second signal flushes decided deletes for up to
FINAL_FLUSH_SECONDS and exits, a third exits at once; the same signal again within
SIGNAL_ECHO_SECONDS is one signal, see `is_echo`):
1. stop fetching: no new receive is sent, and running jobs see `job.stopping`;
2. what is given back (received but not started, handed back at a checkpoint, a poll's
   late answer) is released at once, unless a long poll of ours is still out: then once
   it has answered, at the latest RELEASE_MARGIN_SECONDS past the shutdown timeout (see
   pool.py for the delay used if it still has not);
3. running jobs get up to WORKER_SHUTDOWN_TIMEOUT_MS to finish; whatever still runs then
   is cancelled and released, so another worker takes it immediately;
4. pending deletes and visibility changes are flushed; polls still waiting on an empty
   queue are cancelled (with WORKER_DRAIN_POLLS=true they are waited out instead, see
   settings/fields.py), and the process exits 0.

Run to completion (completion.py): with WORKER_MAX_JOBS or WORKER_IDLE_EXIT_SECONDS the
worker asks itself to stop (`stop("max jobs reached")`, `stop("idle")`) once nothing is
held any more, and drains the same way, with nothing left to wait for.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from enum import StrEnum
from typing import Any

from ..base import clock
from ..base._version import ENGINE_VERSION
from ..base.sqs import SqsApi, SQSClient, observed
from ..base.telemetry import metrics
from ..base.telemetry.events import EventName, Events, Listener, Subscribe
from ..base.telemetry.health import Health
from ..formats.offload import PayloadStore
from ..formats.signatures import SnsSignatures
from ..handlers import job
from ..handlers.router import Router
from ..runtime.backlog import BacklogSampler
from ..runtime.handling.processes import ProcessPool
from ..runtime.pool import QueuePool
from ..runtime.protections.completion import Completion
from . import assembly
from .assembly import StartupError as StartupError  # where it always was: cli.py and tests import it
from .host import heap, signals
from .platform.ecs import ScaleInProtection
from .settings import ConfigError, WorkerConfig

log = logging.getLogger("sqs_worker_engine.worker")
# How far past the shutdown timeout the worker may wait for its last long polls before it
# gives messages back: within the platform's grace period, which keeps a margin above it.
RELEASE_MARGIN_SECONDS = 10.0
# A second signal means now: pending deletes get this long to go out, then the process exits.
FINAL_FLUSH_SECONDS = 2.0
# Ctrl-C signals the terminal's whole process group, and a wrapper in it (`uv run`, a
# shell, a process manager) may pass the same signal on a moment later: that echo is not
# an operator asking to exit without draining. A second Ctrl-C takes longer than this.
SIGNAL_ECHO_SECONDS = 1.0
# The lifespan's close has at least this long, even after a drain that used the whole
# shutdown timeout; then, cancelled, this long to unwind before it is left behind.
LIFESPAN_CLOSE_SECONDS = 2.0
LIFESPAN_CANCEL_GRACE = 0.5
# After the drain, idle handler processes have this long to exit when asked; whatever still
# runs then (a job the drain cut off and released) is killed (runtime/handling/processes.py).
PROCESS_EXIT_GRACE = 2.0


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """uvloop.Loop, or asyncio.unix_events._UnixSelectorEventLoop: which loop runs the jobs."""
    return f"{type(loop).__module__}.{type(loop).__qualname__}"


class WorkerState(StrEnum):
    IDLE = "idle"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    ERROR = "error"


class StoppedWhileStarting(Exception):  # noqa: N818 - an event, like asyncio.CancelledError
    """A stop came before the worker received anything: it exits cleanly, holding nothing."""


class Worker:
    def __init__(
        self,
        config: WorkerConfig,
        router: Router,
        *,
        on_client: Callable[[SQSClient], None] | None = None,
        client: SqsApi | None = None,
        payloads: PayloadStore | None = None,
    ) -> None:
        """`on_client` is called with each SQS client before first use: register botocore
        event handlers there (tracing, request accounting). `client` replaces the
        aiobotocore clients (the in-memory model in tests); `payloads`, the S3 store of
        offloaded payloads (made from the settings by default)."""
        check_handlers(config, router)
        self.config = config
        self.settings = config.settings
        self.router = router
        self.events = Events()
        self.state = WorkerState.IDLE
        self.worker_id = self.settings.worker_id
        self.health = Health(config.stalled_after, config.health_file, clock.now)
        self.pools: list[QueuePool] = []
        self.released_at_shutdown = 0
        self._stop_requested: asyncio.Event | None = None
        self._stop_reason = ""
        self._signals = 0
        self._last_signal: tuple[signal.Signals, float] | None = None  # the last one counted, and when
        self._exit_task: asyncio.Task[None] | None = None  # the second signal's final flush
        self._tasks: list[asyncio.Task[Any]] = []
        self._stack = AsyncExitStack()
        self._process_pool: ProcessPool | None = None
        self._on_client = on_client
        self._protection: ScaleInProtection | None = None
        self._deadline: float | None = None  # loop time the drain ends, once stopped (_halt)
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop `run` runs on
        self._close_by = 0.0  # loop time by which releases and the lifespan's close must be over
        self._client: SqsApi | None = client
        self.payloads = payloads or PayloadStore(
            self.settings.aws_region,
            self.settings.aws_endpoint_url,
            bucket=self.settings.large_payload_bucket,
            read_buckets=self.settings.large_payload_read_buckets,
            max_bytes=self.settings.large_payload_max_bytes,
        )
        self._control: SqsApi | None = None
        self.signatures = SnsSignatures(self.settings.aws_endpoint_url) if self.settings.sns_verify_signatures else None
        self.resources: Any = None  # what the router's lifespan yielded, once started
        self._heap = heap.Held()  # heap.py: the collector while the worker runs
        self.completion: Completion | None = None  # WORKER_MAX_JOBS, WORKER_IDLE_EXIT_SECONDS

    # -- the SDK-style surface -------------------------------------------------

    @property
    def on(self) -> Subscribe:
        """`on(event, listener)`: subscribe; returns a function that unsubscribes."""
        return self.events.on

    def off(self, event: EventName, listener: Listener) -> None:
        self.events.off(event, listener)

    @property
    def active_job_count(self) -> int:
        return sum(pool.active for pool in self.pools)

    def stop(self, reason: str = "requested") -> None:
        """Ask the worker to drain and stop (safe to call more than once). From the moment
        this returns no queue receives or starts anything: the pools stop polling now, not
        when the run loop wakes to its shutdown (a slot freed meanwhile, or a receive
        answered, would start one more job after the signal)."""
        self._stop_reason = self._stop_reason or reason
        if self._stop_requested is not None:
            self._stop_requested.set()
        if self.state is WorkerState.RUNNING and self._loop is not None and not self._loop.is_closed():
            try:
                here = asyncio.get_running_loop()
            except RuntimeError:
                here = None
            if here is self._loop:
                self._halt()
            else:  # called from outside the worker's loop: it halts as soon as the loop runs
                self._loop.call_soon_threadsafe(self._halt)

    def _halt(self) -> None:
        """Stop receiving and starting, once: the drain's deadline counts from here."""
        if self._deadline is not None:
            return
        self._deadline = clock.now() + self.settings.shutdown_timeout
        # Releases wait for any poll still out, but never past the platform's grace period;
        # the lifespan's close too (_close_lifespan).
        self._close_by = self._deadline + RELEASE_MARGIN_SECONDS
        self.health.stopping = True
        for pool in self.pools:
            pool.stop_polling(self._close_by)

    # -- lifecycle -------------------------------------------------------------

    async def run(self, *, handle_signals: bool = False) -> None:
        """Start, serve until stop() or a signal, then drain. Returns when stopped."""
        self._stop_requested = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if self._stop_reason:
            self._stop_requested.set()
        if handle_signals:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
            # A platform may stop a task that is still importing; the entry point kept the signal.
            early = signals.take_early_signal()
            if early is not None:
                self._on_signal(signal.Signals(early))
        try:
            await self._start_unless_stopped()
            await self._stop_requested.wait()
        except StoppedWhileStarting:
            log.info("stopped while starting (%s): nothing was received", self._stop_reason)
        finally:
            await self.shutdown()

    async def _start_unless_stopped(self) -> None:
        """Start, unless a stop comes first: then the start is cancelled wherever it is
        (resolving a queue, opening the lifespan: a database slow to answer gets a
        CancelledError), nothing has been received, and StoppedWhileStarting is raised.
        A start that will not unwind (a lifespan that swallows the cancellation) is left
        behind after the shutdown timeout: the platform would kill the process anyway."""
        assert self._stop_requested is not None
        starting = asyncio.ensure_future(self.start())
        stopped = asyncio.ensure_future(self._stop_requested.wait())
        try:
            await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            starting.cancel()
            raise
        finally:
            stopped.cancel()
        if not starting.done():
            starting.cancel()
            await asyncio.wait({starting}, timeout=self.settings.shutdown_timeout)
            if not starting.done():
                log.error(
                    "the start did not end within %g s of the stop (a lifespan that ignores cancellation?): "
                    "exiting without it",
                    self.settings.shutdown_timeout,
                )
                raise StoppedWhileStarting
        if starting.cancelled():
            raise StoppedWhileStarting
        starting.result()

    def _on_signal(self, sig: signal.Signals) -> None:
        now = clock.now()
        if is_echo(self._last_signal, sig, now):
            log.info("%s again within %g s: the same stop, still draining", sig.name, SIGNAL_ECHO_SECONDS)
            return
        self._last_signal = (sig, now)
        self._signals += 1
        if self._signals == 2:
            # Running jobs are abandoned (their messages come back after their visibility
            # timeout), but what is already decided still goes out: a delete of a finished
            # job that waits in its batch would otherwise be a redelivery.
            log.warning("second %s: exiting now without draining", sig.name)
            self._exit_task = asyncio.get_running_loop().create_task(self._exit_now(sig))
        elif self._signals > 2:
            self._exit(sig)
        else:
            log.info("%s received: draining", sig.name)
            self.stop(sig.name)

    async def _exit_now(self, sig: signal.Signals) -> None:
        try:
            await asyncio.wait_for(asyncio.gather(*(pool.flush_deletes() for pool in self.pools)), FINAL_FLUSH_SECONDS)
        except Exception:
            log.warning("could not send every pending delete before exiting", exc_info=True)
        self._exit(sig)

    @staticmethod
    def _exit(sig: signal.Signals) -> None:
        logging.shutdown()
        os._exit(128 + sig.value)

    async def start(self) -> None:
        self.state = WorkerState.STARTING
        try:
            if self._stop_requested is not None and self._stop_requested.is_set():
                raise StoppedWhileStarting
            await self._start()
        except StoppedWhileStarting:
            raise
        except asyncio.CancelledError:
            if self._stop_requested is not None and self._stop_requested.is_set():
                raise StoppedWhileStarting from None  # the stop came first: nothing was received
            raise
        except BaseException as exc:
            self.state = WorkerState.ERROR
            self.events.emit("error", worker_id=self.worker_id, error=exc, where="start")
            raise
        self.state = WorkerState.RUNNING
        self._heap = heap.hold()
        metrics.WORKER_INFO.info(
            {"version": self.config.service.version, "engine_version": ENGINE_VERSION, "worker_id": self.worker_id}
        )
        log.info(
            "worker started",
            extra={
                "version": self.config.service.version,
                "engine_version": ENGINE_VERSION,
                "worker_id": self.worker_id,
                "event_loop": loop_name(asyncio.get_running_loop()),
                "config": self.config.summary(),
            },
        )
        self.events.emit("started", worker_id=self.worker_id, queues=[p.name for p in self.pools])

    async def _start(self) -> None:
        s = self.settings
        if self._client is None:
            self._client, self._control = await assembly.open_clients(self._stack, self.config, self._on_client)
        # Every SQS call through one place: counted, timed and, with tracing, a span (sqs.py).
        self._client = observed(self._client, self.worker_id)
        self._control = observed(self._control, self.worker_id) if self._control is not None else None
        self._stack.push_async_callback(self.payloads.close)
        if self.signatures is not None:
            self._stack.push_async_callback(self.signatures.close)
        client = self._client
        control_client = self._control or client
        shared = assembly.shared_parts(self.config, self.router, self.stop)
        self._process_pool, self.completion = shared.process_pool, shared.completion
        if self._process_pool is not None:
            self._process_pool.start()  # its processes import the handlers while the queues are resolved
        for q in self.config.queues:
            info = await assembly.describe(control_client, q.name, q.url, self.health, s)
            spec = self.router.get(q.name)
            assert spec is not None
            pool = assembly.build_pool(
                client,
                info,
                spec,
                assembly.pool_options(q, s),
                worker_id=self.worker_id,
                events=self.events,
                health=self.health,
                shared=shared,
                control=control_client,
                payloads=self.payloads,
                signatures=self.signatures,
            )
            self.pools.append(pool)
        await self._open_resources()
        self.health.track({pool.name: pool.resting for pool in self.pools})
        self._tasks.append(asyncio.create_task(self.health.write_file_forever(), name="health-file"))
        sampler = BacklogSampler(self.pools, self._sampler, self.health, s.backlog_sample_seconds)
        self._tasks.append(asyncio.create_task(sampler.run(), name="backlog-sampler"))
        await assembly.serve_metrics(self._stack, self.health, self.router, self.resources, s)
        if s.ecs_agent_uri:
            self._protection = ScaleInProtection(
                s.ecs_agent_uri, s.scale_in_protection_minutes, lambda: self.active_job_count
            )
            self.events.on("job:claimed", self._protection.job_claimed)
            self._tasks.append(asyncio.create_task(self._protection.run(), name="scale-in-protection"))
        if self.completion is not None:
            self.completion.idle_since = clock.now()  # the idle spell begins as the pollers start
            self._tasks.append(asyncio.create_task(self.completion.watch_idle(), name="idle-exit"))
        for pool in self.pools:
            pool.start()

    def _sampler(self) -> SqsApi:
        sampler = self._control or self._client
        assert sampler is not None
        return sampler

    async def _open_resources(self) -> None:
        # The service's shared resources: opened before the first receive, closed by the
        # stack after the drain (after the pools, before the SQS clients it was opened after).
        lifespan = self.router.open_resources()
        try:
            self.resources = await lifespan.__aenter__()
        except Exception as exc:
            log.error("the lifespan failed to open the resources", exc_info=True)
            raise StartupError(f"the lifespan failed: {type(exc).__name__}: {exc}") from exc
        self._stack.push_async_callback(self._close_lifespan, lifespan)
        job.RESOURCES.set(self.resources)

    async def _close_lifespan(self, lifespan: AbstractAsyncContextManager[Any]) -> None:
        """Leave the lifespan, within what is left of the shutdown (the drain's deadline and
        the release margin, at least LIFESPAN_CLOSE_SECONDS): a close that hangs is
        cancelled, and left behind if it ignores that; one that fails is logged. Either way
        the worker goes on to exit within the platform's grace period."""
        closing = asyncio.ensure_future(lifespan.__aexit__(None, None, None))
        bound = max(LIFESPAN_CLOSE_SECONDS, self._close_by - clock.now())
        done, _ = await asyncio.wait({closing}, timeout=bound)
        if not done:
            closing.cancel()
            await asyncio.wait({closing}, timeout=LIFESPAN_CANCEL_GRACE)
            if not closing.done():
                log.error("the lifespan did not close within %.1f s: exiting without it", bound)
                return
        if not closing.cancelled() and (error := closing.exception()) is not None:
            log.error("the lifespan failed to close the resources", exc_info=error)

    async def shutdown(self) -> None:
        if self.state in (WorkerState.STOPPED, WorkerState.IDLE):
            return
        failed = self.state == WorkerState.ERROR
        self.state = WorkerState.STOPPING
        started = clock.now()
        active = self.active_job_count
        log.info("stopping: %d job(s) running", active, extra={"reason": self._stop_reason or "shutdown"})
        self._halt()
        deadline, release_cap = self._deadline, self._close_by
        assert deadline is not None
        cut = await asyncio.gather(*(pool.drain(deadline) for pool in self.pools))
        self.released_at_shutdown = sum(cut)
        if self.settings.drain_polls:
            await asyncio.gather(*(pool.wait_polls(release_cap) for pool in self.pools))
        await asyncio.gather(*(pool.cancel_polls() for pool in self.pools))
        await asyncio.gather(*(pool.close() for pool in self.pools))
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.health.write_file()
        if self._protection is not None:
            await self._protection.release()
        await self._stack.aclose()  # the lifespan's exit among them: after the drain
        job.RESOURCES.set(None)
        if self._process_pool is not None:
            await self._process_pool.stop(PROCESS_EXIT_GRACE)
        self.state = WorkerState.ERROR if failed else WorkerState.STOPPED
        self.health.remove_file()  # this process's own: a stopped worker leaves none behind
        heap.give_back(self._heap)
        self._heap = heap.Held()
        log.info(
            "worker stopped",
            extra={
                "version": self.config.service.version,
                "worker_id": self.worker_id,
                "reason": self._stop_reason or "shutdown",
                "drain_seconds": round(clock.now() - started, 3),
                "jobs_cut_off_and_released": self.released_at_shutdown,
                "config": self.config.summary(),
            },
        )
        self.events.emit("stopped", worker_id=self.worker_id, reason=self._stop_reason or "shutdown")

    def stuck_threads(self) -> int:
        return sum(pool.active for pool in self.pools)


def is_echo(last: tuple[signal.Signals, float] | None, sig: signal.Signals, now: float) -> bool:
    """Is `sig` at `now` the same stop as the last signal counted (the same signal, within
    SIGNAL_ECHO_SECONDS of it)? A different signal, or one later, always counts."""
    return last is not None and last[0] == sig and now - last[1] < SIGNAL_ECHO_SECONDS


def check_handlers(config: WorkerConfig, router: Router) -> None:
    """Refuse a configuration naming a queue the router has no handler for (`run` and `config`)."""
    missing = [q.name for q in config.queues if router.get(q.name) is None]
    if missing:
        served = ", ".join(router.queues) or "none"
        raise ConfigError(
            [
                (
                    "WORKER_QUEUES",
                    f"no handler registered for {', '.join(missing)} in {config.settings.handlers} "
                    f"(it serves: {served})",
                )
            ]
        )


def load_router(path: str) -> Router:
    """Import `package.module:attribute` and check it is a Router."""
    import importlib

    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError([("WORKER_HANDLERS", f"cannot import {module_name!r}: {exc}")]) from None
    router = getattr(module, attr, None)
    if not isinstance(router, Router):
        raise ConfigError([("WORKER_HANDLERS", f"{path!r} is not a Router (got {type(router).__name__})")])
    return router
