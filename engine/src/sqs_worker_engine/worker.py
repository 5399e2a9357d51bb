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
   settings.py), and the process exits 0.

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

from . import clock, job, metrics, reporting, signals
from ._version import ENGINE_VERSION
from .backoff import Backoff
from .budget import SharedBudget
from .completion import Completion
from .ecs import ScaleInProtection
from .events import EventName, Events, Listener, Subscribe
from .health import Health, database_check
from .offload import PayloadStore
from .pool import PoolOptions, QueuePool
from .processes import ProcessPool
from .router import Router
from .server import make_app, start_server
from .settings import ConfigError, WorkerConfig
from .signatures import SnsSignatures
from .sqs import (
    CONNECT_TIMEOUT,
    NOT_FOUND_CODES,
    QueueInfo,
    SqsApi,
    SQSClient,
    create_client,
    describe_queue,
    error_code,
    observed,
)

log = logging.getLogger(__name__)
# How far past the shutdown timeout the worker may wait for its last long polls before it
# gives messages back: within the platform's grace period, which keeps a margin above it.
RELEASE_MARGIN_SECONDS = 10.0
# A second signal means now: pending deletes get this long to go out, then the process exits.
FINAL_FLUSH_SECONDS = 2.0
# Ctrl-C signals the terminal's whole process group, and a wrapper in it (`uv run`, a
# shell, a process manager) may pass the same signal on a moment later: that echo is not
# an operator asking to exit without draining. A second Ctrl-C takes longer than this.
SIGNAL_ECHO_SECONDS = 1.0
POLL_READ_MARGIN = 10  # seconds past WaitTimeSeconds before the client gives up on a poll
CONTROL_READ_TIMEOUT = 10.0  # heartbeats, deletes, DLQ sends: also bounded by each lease
# The lifespan's close has at least this long, even after a drain that used the whole
# shutdown timeout; then, cancelled, this long to unwind before it is left behind.
LIFESPAN_CLOSE_SECONDS = 2.0
LIFESPAN_CANCEL_GRACE = 0.5


class WorkerState(StrEnum):
    IDLE = "idle"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    ERROR = "error"


class StartupError(Exception):
    """The worker cannot start (e.g. its queue does not exist)."""


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
            await asyncio.wait_for(
                asyncio.gather(*(pool.settler.acker.close() for pool in self.pools)), FINAL_FLUSH_SECONDS
            )
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
        metrics.WORKER_INFO.info(
            {"version": self.config.service.version, "engine_version": ENGINE_VERSION, "worker_id": self.worker_id}
        )
        log.info(
            "worker started",
            extra={
                "version": self.config.service.version,
                "engine_version": ENGINE_VERSION,
                "worker_id": self.worker_id,
                "config": self.config.summary(),
            },
        )
        self.events.emit("started", worker_id=self.worker_id, queues=[p.name for p in self.pools])

    async def _start(self) -> None:
        s = self.settings
        poll_timeout = s.wait_time_seconds + POLL_READ_MARGIN
        if self._client is None:
            # Two clients, neither retrying on its own (see sqs.create_client): one for the
            # long polls, one for everything else, so that heartbeats and deletes never wait
            # behind a poll for a connection.
            polls: SQSClient = await self._stack.enter_async_context(
                create_client(
                    s.aws_region,
                    s.aws_endpoint_url,
                    sum(q.pollers for q in self.config.queues) + 1,
                    read_timeout=poll_timeout,
                    attempts=1,
                )
            )
            control: SQSClient = await self._stack.enter_async_context(
                create_client(
                    s.aws_region,
                    s.aws_endpoint_url,
                    10 * len(self.config.queues),
                    read_timeout=CONTROL_READ_TIMEOUT,
                    attempts=1,
                )
            )
            for aws in (polls, control):
                if self._on_client is not None:
                    self._on_client(aws)
            self._client, self._control = polls, control
        # Every SQS call through one place: counted, timed and, with tracing, a span (sqs.py).
        self._client = observed(self._client, self.worker_id)
        self._control = observed(self._control, self.worker_id) if self._control is not None else None
        self._stack.push_async_callback(self.payloads.close)
        if self.signatures is not None:
            self._stack.push_async_callback(self.signatures.close)
        client = self._client
        control_client = self._control or client
        if any(spec.mode == "process" for q in self.config.queues if (spec := self.router.get(q.name))):
            self._process_pool = ProcessPool(s.process_pool_size or os.cpu_count() or 1)
        if s.db_pool_size is not None:
            metrics.enable_db_pool_gauge()
        completion = None
        if s.max_jobs is not None or s.idle_exit_seconds is not None:
            completion = Completion(s.max_jobs, s.idle_exit_seconds, self.stop)
            if s.max_jobs is not None:
                completion.show_left(metrics.enable_jobs_left_gauge().set)
            self.completion = completion
        budget = None
        if s.shared_concurrency is not None and self.config.priority is not None:
            budget = SharedBudget(s.shared_concurrency, self.config.priority)
            reporting.shared_budget(s.shared_concurrency)
        for q in self.config.queues:
            if budget is not None and q.concurrency > budget.total:
                log.info(
                    "queue %s: concurrency %d above the shared budget of %d: it may take the whole budget, never more",
                    q.name,
                    q.concurrency,
                    budget.total,
                )
            info = await self._describe(control_client, q.name, q.url)
            spec = self.router.get(q.name)
            assert spec is not None
            options = PoolOptions(
                concurrency=q.concurrency,
                pollers=q.pollers,
                job_timeout=q.job_timeout,
                visibility=q.visibility_timeout_seconds,
                heartbeat_fraction=s.heartbeat_fraction,
                wait_time=s.wait_time_seconds,
                retry_base=s.retry_base_seconds,
                retry_max=s.retry_max_seconds,
                ack_flush=s.ack_flush_ms / 1000,
                log_payloads=s.log_payloads,
                poll_timeout=CONNECT_TIMEOUT + poll_timeout,
                delete_large_payloads=s.large_payload_delete,
                trace_parent=s.trace_parent,
                rate_limit=q.rate_limit,
                rate_burst=q.rate_burst,
                group_concurrency=q.group_concurrency,
                prefetch=q.prefetch,
                adaptive=q.adaptive,
                concurrency_floor=q.concurrency_floor,
                weight=q.weight,
            )
            pool = QueuePool(
                client,
                info,
                spec,
                options,
                worker_id=self.worker_id,
                events=self.events,
                health=self.health,
                process_pool=self._process_pool,
                control=control_client,
                payloads=self.payloads,
                signatures=self.signatures,
                completion=completion,
                budget=budget,
            )
            self.pools.append(pool)
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
        self.health.track({pool.name: pool.resting for pool in self.pools})
        self._tasks.append(asyncio.create_task(self.health.write_file_forever(), name="health-file"))
        self._tasks.append(asyncio.create_task(self._sample_backlog(), name="backlog-sampler"))
        if s.metrics_port:
            checks = self.router.readiness_checks_with(self.resources)
            if s.database_url is not None:
                checks.append(("database", database_check(s.database_url.get_secret_value())))
            try:
                app = make_app(self.health, checks, serve_metrics=s.metrics_exporter != "otlp")
                runner = await start_server(app, s.metrics_host, s.metrics_port)
            except OSError as exc:  # the port is taken, or the host is not this machine's
                raise StartupError(
                    f"cannot serve /metrics on {s.metrics_host}:{s.metrics_port} "
                    f"(WORKER_METRICS_HOST, WORKER_METRICS_PORT): {exc}"
                ) from None
            self._stack.push_async_callback(runner.cleanup)
        if s.ecs_agent_uri:
            self._protection = ScaleInProtection(
                s.ecs_agent_uri, s.scale_in_protection_minutes, lambda: self.active_job_count
            )
            self.events.on("job:claimed", self._protection.job_claimed)
            self._tasks.append(asyncio.create_task(self._protection.run(), name="scale-in-protection"))
        if completion is not None:
            completion.idle_since = clock.now()  # the idle spell begins as the pollers start
            self._tasks.append(asyncio.create_task(completion.watch_idle(), name="idle-exit"))
        for pool in self.pools:
            pool.start()

    async def _describe(self, client: SqsApi, name: str, url: str | None) -> QueueInfo:
        """Resolve a queue, riding out an unreachable SQS; a missing queue is fatal."""
        backoff = Backoff(base=0.5, cap=15.0)
        while True:
            try:
                info = await describe_queue(client, name, url)
            except Exception as exc:
                code = error_code(exc)
                if code in NOT_FOUND_CODES:
                    raise StartupError(
                        f"queue {name!r} does not exist (region {self.settings.aws_region}"
                        + (f", endpoint {self.settings.aws_endpoint_url}" if self.settings.aws_endpoint_url else "")
                        + "); create it with `bootstrap` or deploy/aws/queues.yaml"
                    ) from None
                self.health.sqs_result(False)
                delay = backoff.next_delay()
                log.warning("cannot reach SQS for %s (%s); retrying in %.1f s", name, code, delay)
                await asyncio.sleep(delay)  # a stop meanwhile cancels the start (_start_unless_stopped)
                continue
            self.health.sqs_result(True)
            if info.max_receive_count is None:
                log.warning("queue %s has no RedrivePolicy: failing messages will retry until retention ends", name)
            return info

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
            await asyncio.gather(*(pool.receiver.wait(release_cap) for pool in self.pools))
        await asyncio.gather(*(pool.receiver.cancel() for pool in self.pools))
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
            self._process_pool.shutdown(wait=False, cancel_futures=True)
        self.state = WorkerState.ERROR if failed else WorkerState.STOPPED
        self.health.remove_file()  # this process's own: a stopped worker leaves none behind
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

    async def _sample_backlog(self) -> None:
        """Queue depth for the dashboards: one GetQueueAttributes per queue per interval."""
        names = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]
        states = dict(zip(names, ("visible", "in_flight", "delayed"), strict=True))
        oldest: dict[str, float] = {}
        quiet: set[str] = set()  # queues the last sample found empty
        interval = self.settings.backlog_sample_seconds
        while True:
            for pool in self.pools:
                # An idle queue (nothing received, nothing running, nothing there last time)
                # is not asked again: its polls would see new messages first, and an idle
                # worker should cost no more than its long polls (SQS bills per request).
                idle = not pool.received_since_sample and not pool.active and not pool.deferred
                if idle and oldest.get(pool.name) == 0.0 and pool.name in quiet:
                    continue
                pool.received_since_sample = 0
                try:
                    sampler = self._control or self._client
                    assert sampler is not None
                    resp = await sampler.get_queue_attributes(QueueUrl=pool.info.url, AttributeNames=names)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    self.health.sqs_result(False)
                    continue
                self.health.sqs_result(True)
                attrs: dict[str, str] = {str(k): v for k, v in resp.get("Attributes", {}).items()}
                for name, state in states.items():
                    metrics.QUEUE_MESSAGES.labels(pool.name, state).set(int(attrs.get(name, "0")))
                visible = int(attrs.get("ApproximateNumberOfMessages", "0"))
                if all(int(attrs.get(name, "0")) == 0 for name in names):
                    quiet.add(pool.name)
                else:
                    quiet.discard(pool.name)
                if pool.received_oldest_age:
                    oldest[pool.name] = pool.received_oldest_age
                elif visible == 0:
                    oldest[pool.name] = 0.0
                else:  # a backlog, but nothing received: it is ageing
                    oldest[pool.name] = oldest.get(pool.name, 0.0) + interval
                pool.received_oldest_age = 0.0
                metrics.OLDEST_MESSAGE.labels(pool.name).set(oldest[pool.name])
            await asyncio.sleep(interval)


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
