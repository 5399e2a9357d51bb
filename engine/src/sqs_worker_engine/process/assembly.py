"""The wiring: a worker's pieces and each queue's pool, built and connected.

pool.py reads as a message's life and worker.py as the worker's; what they are made of
(the SQS clients, the process-wide parts shared by every queue, each pool's admission,
lease book, settler, handler calls and pollers) and how those call each other is here.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from ..base.backoff import Backoff
from ..base.limits import MAX_RECEIVE_BATCH
from ..base.sqs import (
    CONNECT_TIMEOUT,
    NOT_FOUND_CODES,
    QueueInfo,
    SqsApi,
    SQSClient,
    create_client,
    describe_queue,
    error_code,
)
from ..base.telemetry import metrics
from ..base.telemetry.events import Events
from ..base.telemetry.health import Health, database_check
from ..formats.offload import PayloadStore
from ..formats.signatures import SnsSignatures
from ..handlers.router import HandlerSpec, Router
from ..runtime import reporting
from ..runtime.admission.admission import Admission
from ..runtime.handling.calls import HandlerCalls
from ..runtime.handling.preparing import Preparer
from ..runtime.handling.processes import ProcessPool
from ..runtime.pool import PoolOptions, PoolParts, QueuePool
from ..runtime.protections.adaptive import Limit
from ..runtime.protections.budget import SharedBudget
from ..runtime.protections.completion import Completion
from ..runtime.protections.reach import Kind
from ..runtime.protections.tenants import Tenants
from ..runtime.protections.throttle import Breaker, StartWindow
from ..runtime.receiving import OnMessages, Polls, Receiver
from ..runtime.reporting import QueueReport
from ..runtime.settling.decisions import RetryPolicy
from ..runtime.settling.delivery import LeaseBook
from ..runtime.settling.lease import LeaseKeeper
from ..runtime.settling.settling import Settler
from .platform.server import make_app, start_server
from .settings import QueueSettings, Settings, WorkerConfig

log = logging.getLogger("sqs_worker_engine.worker")
POLL_READ_MARGIN = 10  # seconds past WaitTimeSeconds before the client gives up on a poll
CONTROL_READ_TIMEOUT = 10.0  # heartbeats, deletes, DLQ sends: also bounded by each lease


class StartupError(Exception):
    """The worker cannot start (e.g. its queue does not exist)."""


# -- the worker's pieces ---------------------------------------------------------------


async def describe(client: SqsApi, name: str, url: str | None, health: Health, s: Settings) -> QueueInfo:
    """Resolve a queue, riding out an unreachable SQS; a missing queue is fatal."""
    backoff = Backoff(base=0.5, cap=15.0)
    while True:
        try:
            info = await describe_queue(client, name, url)
        except Exception as exc:
            code = error_code(exc)
            if code in NOT_FOUND_CODES:
                raise StartupError(
                    f"queue {name!r} does not exist (region {s.aws_region}"
                    + (f", endpoint {s.aws_endpoint_url}" if s.aws_endpoint_url else "")
                    + "); create it with `bootstrap` or deploy/aws/queues.yaml"
                ) from None
            health.sqs_result(False)
            delay = backoff.next_delay()
            log.warning("cannot reach SQS for %s (%s); retrying in %.1f s", name, code, delay)
            await asyncio.sleep(delay)  # a stop meanwhile cancels the start (_start_unless_stopped)
            continue
        health.sqs_result(True)
        if info.max_receive_count is None:
            log.warning("queue %s has no RedrivePolicy: failing messages will retry until retention ends", name)
        return info


async def serve_metrics(stack: AsyncExitStack, health: Health, router: Router, resources: Any, s: Settings) -> None:
    """/metrics and the health checks, when WORKER_METRICS_PORT is set."""
    if s.metrics_port:
        checks = router.readiness_checks_with(resources)
        if s.database_url is not None:
            checks.append(("database", database_check(s.database_url.get_secret_value())))
        try:
            app = make_app(health, checks, serve_metrics=s.metrics_exporter != "otlp")
            runner = await start_server(app, s.metrics_host, s.metrics_port)
        except OSError as exc:  # the port is taken, or the host is not this machine's
            raise StartupError(
                f"cannot serve /metrics on {s.metrics_host}:{s.metrics_port} "
                f"(WORKER_METRICS_HOST, WORKER_METRICS_PORT): {exc}"
            ) from None
        stack.push_async_callback(runner.cleanup)


async def open_clients(
    stack: AsyncExitStack, config: WorkerConfig, on_client: Callable[[SQSClient], None] | None
) -> tuple[SQSClient, SQSClient]:
    """Two clients, neither retrying on its own (see sqs.create_client): one for the long
    polls, one for everything else, so that heartbeats and deletes never wait behind a
    poll for a connection. Neither checks its requests against the service model: the
    worker builds every one of them (queue URLs, receipt handles and ids it was given),
    and the check took 7-10% of a receive's or a delete's CPU in a profile. Closed by `stack`."""
    s = config.settings
    polls: SQSClient = await stack.enter_async_context(
        create_client(
            s.aws_region,
            s.aws_endpoint_url,
            sum(q.pollers for q in config.queues) + 1,
            read_timeout=s.wait_time_seconds + POLL_READ_MARGIN,
            attempts=1,
            validate=False,
        )
    )
    control: SQSClient = await stack.enter_async_context(
        create_client(
            s.aws_region,
            s.aws_endpoint_url,
            config.control_connections,
            read_timeout=CONTROL_READ_TIMEOUT,
            attempts=1,
            validate=False,
        )
    )
    for aws in (polls, control):
        if on_client is not None:
            on_client(aws)
    return polls, control


@dataclass
class Shared:
    """What every queue's pool of one worker shares."""

    process_pool: ProcessPool | None  # handlers of mode "process"
    completion: Completion | None  # WORKER_MAX_JOBS, WORKER_IDLE_EXIT_SECONDS
    budget: SharedBudget | None  # WORKER_SHARED_CONCURRENCY


def shared_parts(config: WorkerConfig, router: Router, stop: Callable[[str], None]) -> Shared:
    s = config.settings
    process_pool = None
    handlers = tuple(spec.fn for q in config.queues if (spec := router.get(q.name)) and spec.mode == "process")
    if handlers:
        process_pool = ProcessPool(s.process_pool_size or os.cpu_count() or 1, handlers=handlers)
    if s.db_pool_size is not None:
        metrics.enable_db_pool_gauge()
    completion = None
    if s.max_jobs is not None or s.idle_exit_seconds is not None:
        completion = Completion(s.max_jobs, s.idle_exit_seconds, stop)
        if s.max_jobs is not None:
            completion.show_left(metrics.enable_jobs_left_gauge().set)
    budget = None
    if s.shared_concurrency is not None and config.priority is not None:
        budget = SharedBudget(s.shared_concurrency, config.priority)
        reporting.shared_budget(s.shared_concurrency)
        for q in config.queues:
            if q.concurrency > budget.total:
                log.info(
                    "queue %s: concurrency %d above the shared budget of %d: it may take the whole budget, never more",
                    q.name,
                    q.concurrency,
                    budget.total,
                )
    return Shared(process_pool, completion, budget)


def pool_options(q: QueueSettings, s: Settings) -> PoolOptions:
    """One queue's settings, as its pool reads them."""
    return PoolOptions(
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
        poll_timeout=CONNECT_TIMEOUT + s.wait_time_seconds + POLL_READ_MARGIN,
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


# -- one queue's pool --------------------------------------------------------------------


def build_admission(options: PoolOptions, tenant_cap: int | None, report: QueueReport, shared: Shared) -> Admission:
    return Admission(
        options.concurrency,
        options.prefetch,
        window=None if options.rate_limit is None else StartWindow(options.rate_limit, options.rate_burst),
        breaker=Breaker(cap=options.retry_max),
        tenant_cap=tenant_cap,
        report=report,
        completion=shared.completion,
        budget=shared.budget,
        # WORKER_ADAPTIVE_CONCURRENCY: the handler slots in use follow the downstream's latency.
        adaptive=Limit(options.concurrency_floor, options.concurrency) if options.adaptive else None,
        weight=options.weight,
    )


def build_settler(
    control: SqsApi,
    book: LeaseBook,
    info: QueueInfo,
    report: QueueReport,
    polls: Polls,
    options: PoolOptions,
    admission: Admission,
    sqs_answered: Callable[[Kind, bool], None],
    payloads: PayloadStore | None,
    worker_id: str,
    retry: RetryPolicy,
) -> Settler:
    return Settler(
        control,
        book,
        info,
        report,
        polls,
        retry=retry,
        # Deletes wait up to WORKER_ACK_FLUSH_MS for a batch of 10. A pool that may hold
        # fewer than 10 (WORKER_PREFETCH=0 at a concurrency below 10) can never fill one,
        # and its next receive waits for the settle: it sends at once.
        ack_flush=options.ack_flush if admission.held_limit >= MAX_RECEIVE_BATCH else 0.0,
        payloads=payloads,
        delete_large_payloads=options.delete_large_payloads,
        worker_id=worker_id,
        on_sqs=sqs_answered,
        stopping=lambda: admission.stopping,
    )


def build_pool(
    client: SqsApi,
    info: QueueInfo,
    spec: HandlerSpec,
    options: PoolOptions,
    *,
    worker_id: str,
    events: Events,
    health: Health,
    shared: Shared,
    control: SqsApi | None = None,
    payloads: PayloadStore | None = None,
    signatures: SnsSignatures | None = None,
) -> QueuePool:
    """`client` receives; `control` (default: the same) extends leases and settles;
    `payloads` reads offloaded payloads from S3; `signatures` checks SNS notifications
    (None: not checked); `shared`: what every queue's pool shares (the jobs left, the
    shared budget, the process pool)."""
    control = control or client
    report = QueueReport(info.name, worker_id, events, health, options.concurrency)
    cap = None if info.fifo else options.group_concurrency
    admission = build_admission(options, cap, report, shared)

    def sqs_answered(kind: Kind, ok: bool) -> None:
        """A receive, a lease extension or a settling call reached SQS, or could not
        (reach.py): admission holds its starts on it, readiness reports it."""
        admission.sqs_answered(kind, ok)
        health.sqs_result(not admission.reach.down, info.name)

    book = LeaseBook(info.name, options.visibility, options.heartbeat_fraction)
    polls = Polls(options.wait_time, options.poll_timeout)  # written by the receiver, read by the settler
    retry = RetryPolicy(options.retry_base, options.retry_max)
    settler = build_settler(
        control, book, info, report, polls, options, admission, sqs_answered, payloads, worker_id, retry
    )

    def receiver(on_messages: OnMessages, on_full: Callable[[float], None] | None) -> Receiver:
        return Receiver(
            client,
            info.url,
            admission,
            polls,
            report,
            wait_time=options.wait_time,
            visibility=options.visibility,
            on_messages=on_messages,
            on_sqs=sqs_answered,
            on_full=on_full,
        )

    return QueuePool(
        PoolParts(
            info=info,
            spec=spec,
            options=options,
            worker_id=worker_id,
            health=health,
            report=report,
            admission=admission,
            book=book,
            keeper=LeaseKeeper(book, control, info.url, sqs_answered, admission.reach.answers),
            settler=settler,
            preparer=Preparer(
                info.name,
                spec,
                worker_id,
                options.job_timeout,
                info.max_receive_count,
                report.progress_reporter,
                payloads,
                signatures,
            ),
            calls=HandlerCalls(spec, options.concurrency, report, shared.process_pool, book.running),
            retry=retry,
            tenants=None if cap is None else Tenants(cap),
            receiver=receiver,
        )
    )
