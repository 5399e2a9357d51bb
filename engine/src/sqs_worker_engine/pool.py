"""One queue's pool: a message's life from receive to settlement, in the order it lives.

1. Receive. A poller reserves free slots *before* it receives and asks SQS for at most
   that many messages (and at most 10), so nothing is held that cannot start at once.
   Two bounds apply: handler slots (the concurrency) and messages held in all (running
   plus settling: a slow DLQ or delete call must not let receiving run ahead).
2. Run. Each message's handler runs in its own task, with the job timeout; the lease book
   keeps its lease. A handler that outlives its timeout, or its lease, is cancelled; one
   that cannot be interrupted (a thread, a coroutine that ignores cancellation) keeps its
   lease and its slot until its work really returns, so nobody runs it twice meanwhile.
3. Decide. `decisions.plan` turns the outcome into one settlement.
4. Settle. Delete, retry after a delay, dead-letter with the reason, or release: through
   the acker, which asks the book before using the handle.

FIFO queues: one group's messages run one after another, in order; groups in parallel.
A failing message with group-mates waiting is retried in place (see decisions.py); a
message that is released or lost holds back the rest of its group, released behind it.

Standard queues with a group cap (fair tenants, see tenants.py): before step 2 a message
whose group already runs its cap of jobs is parked (lease kept, handler slot lent out) or
given back for a few seconds: a receive cannot choose its tenants.

Shutdown (driven by worker.py): no new receive; jobs get `job.stopping`; what is given back
is released at once unless a poll of ours is still out (it could take the message again),
in which case it is released the moment the last poll has answered.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import functools
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from . import clock, metrics, tracing
from .acker import Acker
from .backoff import Backoff
from .batches import Collector
from .decisions import (
    DeadLetter,
    Delete,
    Facts,
    Release,
    RetryAfter,
    RetryInPlace,
    RetryPolicy,
    Settlement,
    Untouched,
    group_goes_on,
    plan,
    retry_delay,
)
from .delivery import Delivery, LeaseBook, State
from .dlq import dead_letter_request, fit_to_size
from .envelopes import ControlMessage, read_payload
from .errors import DownstreamUnavailable, PayloadError, RetryLater
from .events import Events
from .health import Health
from .job import Job
from .lease import LeaseKeeper
from .limits import MAX_RECEIVE_BATCH
from .logs import bind_job, get_logger
from .offload import PayloadStore, S3Pointer, pointer_of, pointer_problem
from .outcomes import classify
from .prefetch import Pace, prefetch_target
from .reporting import Ending, JobReport, describe
from .router import HandlerSpec, call_sync
from .signatures import SnsSignatures
from .slots import Slots
from .sqs import NOT_FOUND_CODES, QueueInfo, SqsApi, error_code
from .tenants import Tenants, when_capped
from .throttle import Breaker, TokenBucket

log = logging.getLogger(__name__)
RESPONSE_ALLOWANCE = 1.0  # seconds a ReceiveMessage response may spend in transit
SETTLING_ROOM = 5 * MAX_RECEIVE_BATCH  # at least this many messages may be settling at once
POLL_END_ALLOWANCE = 2.0  # seconds past WaitTimeSeconds by which SQS has surely ended a poll
# With WORKER_WAIT_TIME_SECONDS=0 an empty queue answers at once; a poller waits this long
# before asking again (a long poll would wait up to 20 s on SQS's side instead).
EMPTY_SHORT_POLL_PAUSE = 1.0
CUT_GRACE = 0.5  # seconds a job cut off at the shutdown deadline gets to react to its cancellation


@dataclass(frozen=True)
class PoolOptions:
    concurrency: int
    pollers: int
    job_timeout: float
    visibility: int
    heartbeat_fraction: float
    wait_time: int
    retry_base: float
    retry_max: float
    ack_flush: float
    log_payloads: bool
    poll_timeout: float  # seconds after sending a receive when its client gives up on it
    delete_large_payloads: bool = False  # WORKER_LARGE_PAYLOAD_DELETE (see offload.py)
    trace_parent: bool = True  # WORKER_TRACE_PARENT: the producer's span parents the job's (see tracing.py)
    rate_limit: float | None = None  # jobs started per second (see throttle.py)
    group_concurrency: int | None = None  # standard queues: jobs of one group at once (see tenants.py)
    prefetch: int = 0  # WORKER_PREFETCH: most messages held beyond the concurrency (see prefetch.py)

    @property
    def held_limit(self) -> int:
        """Messages held at once (running, waiting, settling): the concurrency plus room
        for settling. Deletes wait up to WORKER_ACK_FLUSH_MS for a batch of ten and then a
        round trip, so at a few hundred messages a second dozens are settling at any
        moment; less room than that throttled receiving in the benchmark. A slow DLQ or
        delete call still stops receiving once the room is used up. With a group cap,
        room for as many parked messages as there are slots."""
        parked = self.concurrency if self.group_concurrency is not None else 0
        return self.concurrency + max(self.concurrency, SETTLING_ROOM) + parked + self.prefetch


def _pass_on(to: asyncio.Future[bool], result: asyncio.Future[bool]) -> None:
    if not to.done():
        to.set_result(result.result())


@dataclass(eq=False)
class Run:
    """One delivery's way through the pool."""

    delivery: Delivery
    attempt: int  # the receive count, plus retries run in place
    # Done at the shutdown deadline: stop waiting for the work. A future (see Delivery.lost).
    cut: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    job: Job[Any] | None = None
    pointer: S3Pointer | None = None  # an offloaded payload's place in S3
    body: str | None = None  # the payload read from there (kept for retries in place)
    span: tracing.JobSpan | None = None  # this attempt's `process` span, when tracing
    started: float = 0.0
    running: bool = False  # a handler call of it has not returned yet
    handler_slot: bool = True  # it still holds its place (slots.py)
    permit: bool = False  # it holds a handler slot: its handler may run
    deciding: bool = False  # between attempts: the slot stays until the decision is made
    task: asyncio.Task[Any] | None = field(default=None, repr=False)


class QueuePool:
    def __init__(
        self,
        client: SqsApi,
        info: QueueInfo,
        spec: HandlerSpec,
        options: PoolOptions,
        *,
        worker_id: str,
        events: Events,
        health: Health,
        process_pool: concurrent.futures.Executor | None,
        control: SqsApi | None = None,
        payloads: PayloadStore | None = None,
        signatures: SnsSignatures | None = None,
    ) -> None:
        """`client` receives; `control` (default: the same) extends leases and settles;
        `payloads` reads offloaded payloads from S3; `signatures` checks SNS notifications
        (None: not checked)."""
        self.client = client
        self.payloads = payloads
        self.signatures = signatures
        self.tracing = tracing.enabled()  # decided once: a provider is installed before the worker starts
        self.control = control or client
        self.info = info
        self.name = info.name
        self.spec = spec
        self.options = options
        self.worker_id = worker_id
        self.events = events
        self.health = health
        self.process_pool = process_pool
        self.slots = Slots(options.concurrency, options.held_limit)
        self.pace = Pace()  # receive round trips and job durations, for the prefetch
        self._prefetched = metrics.PREFETCHED.labels(info.name)
        self._prefetched.set(0)
        self.bucket = None if options.rate_limit is None else TokenBucket(options.rate_limit, clock.now())
        self.breaker = Breaker(cap=options.retry_max)
        cap = None if info.fifo else options.group_concurrency
        self.tenants = None if cap is None else Tenants(info.name, cap)
        self._paused = metrics.PAUSED.labels(info.name)
        self._paused.set(0)
        self._throttled = metrics.THROTTLED.labels(info.name)
        self.book = LeaseBook(info.name, options.visibility, options.heartbeat_fraction)
        self.keeper = LeaseKeeper(self.book, self.control, info.url, health.sqs_result)
        self.acker = Acker(self.control, self.book, info.url, options.ack_flush)
        self.retry = RetryPolicy(options.retry_base, options.retry_max)
        self.thread_pool = (
            concurrent.futures.ThreadPoolExecutor(options.concurrency, thread_name_prefix=f"job-{info.name}")
            if spec.mode == "thread"
            else None
        )
        self.collector = (
            None
            if spec.batch is None
            else Collector(self._call_batch, min(spec.batch.size, options.concurrency), spec.batch.wait)
        )
        self.runs: set[Run] = set()
        self.stopping = False
        self._stopped = asyncio.Event()
        self.received_oldest_age = 0.0  # max age at receive since the last backlog sample
        self.received_since_sample = 0  # lets the backlog sampler skip an idle queue
        self.released = 0  # messages given back unprocessed (shutdown, group held back)
        # (delivery, delay, done): made visible once no poll of ours is out
        self.deferred: list[tuple[Delivery, int, asyncio.Future[bool]]] = []
        self.handlers_running = 0  # handler calls not yet returned, settled or not
        # poller -> (when SQS ends its long poll, when its client gives up on it)
        self._polls_out: dict[asyncio.Task[None], tuple[float, float]] = {}
        self._abandoned: list[tuple[float, float]] = []  # polls cancelled while still out
        self._polls_over = False
        self._release_cap = 0.0
        self._releaser: asyncio.Task[None] | None = None
        self._pollers: list[asyncio.Task[None]] = []
        # Set while the queue has work: the pollers beyond the first wait for it while the
        # queue is empty, so an idle queue costs one long poll at a time, not one per poller.
        self._has_work = asyncio.Event()
        self._has_work.set()
        self._stopping_future: asyncio.Future[None] | None = None  # see _stop_signal
        self._keeper_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        metrics.CONCURRENCY.labels(self.name).set(options.concurrency)
        self.report = JobReport(self.name, worker_id, events, health)

    # -- lifecycle (worker.py calls these in this order) -----------------------

    def start(self) -> None:
        self._keeper_task = asyncio.create_task(self.keeper.run(), name=f"keeper-{self.name}")
        self._pollers = [
            asyncio.create_task(self._poll_forever(lead=i == 0), name=f"poller-{self.name}-{i}")
            for i in range(self.options.pollers)
        ]

    def stop_polling(self, release_cap: float) -> None:
        """No new receive from now on; running jobs see `job.stopping`.

        A long poll already out cannot be taken back: cancelling it here would not stop it
        inside SQS, where it still takes the next visible message and hides it for a whole
        visibility timeout. So while one is out, what is given back waits for it (at most
        until the loop time `release_cap`), its lease kept alive meanwhile."""
        self.stopping = True
        self._release_cap = release_cap
        self._stopped.set()
        self._has_work.set()  # the idle pollers wake, to see that they are done
        if not self._stop_signal().done():
            self._stop_signal().set_result(None)
        if self.collector is not None:
            self.collector.close()  # no more jobs are coming to fill a batch
        for run in list(self.runs):
            if run.job is not None:
                run.job._request_stop()

    async def _release_after_polls(self) -> None:
        """Wait until every poll of ours has answered (at most until its client gives up,
        or the release cap), then release whatever was given back meanwhile."""
        pending = list(self._polls_out)
        if pending:
            end = min(self._release_cap, max(hard for _, hard in self._polls_out.values()))
            await asyncio.wait(pending, timeout=max(0.0, end - clock.now()))
        self._polls_over = True
        await self.release_deferred()

    def _release_delay(self) -> int:
        """0, or while a poll of ours is still out (past the release cap, or abandoned):
        until that poll ends in SQS (or, if it is already late, until its client gives up
        on it), so that not even an abandoned poll can take the message."""
        now = clock.now()
        ends = [sqs_end if now < sqs_end else hard for sqs_end, hard in [*self._polls_out.values(), *self._abandoned]]
        return max(0, math.ceil(max(ends, default=now) - now))

    async def wait_polls(self, cap: float) -> None:
        """WORKER_DRAIN_POLLS: let the last polls answer instead of cancelling them."""
        pending = [task for task in self._pollers if not task.done()]
        if pending:
            await asyncio.wait(pending, timeout=max(0.0, cap - clock.now()))

    async def release_deferred(self) -> None:
        deferred, self.deferred = self.deferred, []
        delay = self._release_delay()
        for delivery, seconds, done in deferred:
            self.acker.change_visibility(delivery, max(seconds, delay)).add_done_callback(
                functools.partial(_pass_on, done)
            )

    async def drain(self, deadline: float) -> int:
        """Wait for running jobs until `deadline` (loop time); then cut off whatever still
        runs: it is cancelled and released. Returns how many were cut off."""
        lives = [task for task in self._tasks if not task.done()]
        if lives:
            await asyncio.wait(lives, timeout=max(0.0, deadline - clock.now()))
        cut = [run for run in self.runs if run.running]
        for run in self.runs:
            if not run.cut.done():
                run.cut.set_result(None)
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        return len(cut)

    async def cancel_polls(self) -> None:
        """Cancel whatever poll is still waiting (an idle queue): the drain is over."""
        self._abandoned = list(self._polls_out.values())
        for task in self._pollers:
            task.cancel()
        await asyncio.gather(*self._pollers, return_exceptions=True)

    async def close(self) -> None:
        if self._releaser is not None:
            await self._releaser
        await self.release_deferred()
        await self.acker.close()
        if self._keeper_task is not None:
            self._keeper_task.cancel()
            await asyncio.gather(self._keeper_task, return_exceptions=True)
        if self.thread_pool is not None:
            self.thread_pool.shutdown(wait=False, cancel_futures=True)

    @property
    def active(self) -> int:
        return sum(1 for run in self.runs if run.running)

    def stuck_threads(self) -> int:
        """Handler calls still running after the drain (a thread cannot be interrupted):
        they would hold the interpreter's exit."""
        return self.handlers_running

    # -- 1. receive ------------------------------------------------------------

    async def _poll_forever(self, lead: bool) -> None:
        """Receive for free places until the stop. The lead poller always polls; the others,
        once a receive of theirs comes back empty, wait until one brings messages."""
        backoff = Backoff(base=0.5, cap=20.0)
        me = asyncio.current_task()
        assert me is not None
        poll_timeout = self.options.poll_timeout
        while not self.stopping:
            n = await self.slots.reserve(MAX_RECEIVE_BATCH)
            n = await self._admit(n)
            if self.stopping:
                self._unadmit(n, n)
                return
            sent = clock.now()
            self._polls_out[me] = (sent + self.options.wait_time + POLL_END_ALLOWANCE, sent + poll_timeout)
            try:
                resp = await self.client.receive_message(
                    QueueUrl=self.info.url,
                    MaxNumberOfMessages=n,
                    WaitTimeSeconds=self.options.wait_time,
                    VisibilityTimeout=self.options.visibility,
                    MessageSystemAttributeNames=["All"],
                    MessageAttributeNames=["All"],
                )
            except asyncio.CancelledError:
                self._unadmit(n, n)
                raise
            except Exception as exc:
                self._unadmit(n, n)
                await self._receive_failed(exc, backoff)
                continue
            finally:
                self._polls_out.pop(me, None)
            backoff.reset()
            metrics.SQS_CALLS.labels("ReceiveMessage", "ok").inc()
            self.health.sqs_result(True)
            self.health.progress(self.name)
            messages: list[dict[str, Any]] = [dict(m) for m in resp.get("Messages", [])]
            if len(messages) < n:
                self._unadmit(n, n - len(messages))
            elif self.options.prefetch:  # a full answer did not wait in a long poll: a round trip
                self.pace.received(clock.now() - sent)
                self._size_prefetch()
            if messages:
                # SQS starts a message's visibility clock when it hands the message out: during
                # a long poll, that is just before the response, not when the request was sent.
                # Allow a second for the response in transit, never later than the send.
                self._dispatch(messages, max(sent, clock.now() - RESPONSE_ALLOWANCE))
                self._has_work.set()
            elif not lead:
                self._has_work.clear()
                await self._has_work.wait()
            elif self.options.wait_time == 0:
                await asyncio.sleep(EMPTY_SHORT_POLL_PAUSE)  # a short poll answers at once: do not spin

    async def _admit(self, n: int) -> int:
        """Of the `n` slots reserved, how many to ask SQS for: what the pause and the rate
        limit allow (see throttle.py), waiting until that is at least one. The rest of the
        slots go back. 0 only when stopping."""
        waited = 0.0
        try:
            while not self.stopping:
                now = clock.now()
                allowed = self.breaker.allowed(n, now)
                granted = allowed if self.bucket is None or allowed == 0 else self.bucket.take(allowed, now)
                if granted:
                    self.slots.unreserve(n - granted)
                    return granted
                if allowed == 0:  # paused, or the probe is still out
                    wait = self.breaker.wait(now) or 0.05
                else:
                    assert self.bucket is not None
                    wait = self.bucket.wait(now)
                    waited += wait
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), timeout=wait)
            return n
        finally:
            if waited:
                self._throttled.inc(waited)

    def _downstream(self, run: Run, ending: Ending) -> Ending:
        """What a job's ending says about the downstream: trouble pauses the queue (and the
        message waits out the whole pause), an answer after the pause began ends it
        (throttle.Breaker)."""
        error = ending.error
        if isinstance(error, DownstreamUnavailable):
            now = clock.now()
            if self.breaker.trouble(now, error.seconds, run.delivery.received_at):
                metrics.PAUSES.labels(self.name).inc()
                self._paused.set(1)
                self.health.paused.add(self.name)
                log.warning(
                    "downstream unavailable: receiving paused for %g s (%s)",
                    self.breaker.until - now,
                    error,
                    extra={"queue": self.name},
                )
            # Invisible for the whole pause and then as long again as asked: the probe that
            # ends the pause is then another message, not this one once more (each receive
            # counts toward its maxReceiveCount).
            return dataclasses.replace(ending, requested_delay=self.breaker.until - now + error.seconds)
        handled = ending.outcome not in ("released", "lease_lost")
        if self.breaker.answered(run.delivery.received_at, handled):
            self._paused.set(0)
            self.health.paused.discard(self.name)
            log.info("downstream answers again: receiving resumed", extra={"queue": self.name})
        return ending

    def _unadmit(self, asked: int, unused: int) -> None:
        """`unused` of the `asked` messages never came (or never will): their slots, rate
        tokens and, for a probe, the breaker's turn go back."""
        if unused <= 0:
            return
        self.slots.unreserve(unused)
        if self.bucket is not None:
            self.bucket.give_back(unused)
        if self.breaker.probing and unused == asked:
            self.breaker.probe_unused()

    async def _receive_failed(self, exc: Exception, backoff: Backoff) -> None:
        code = error_code(exc)
        metrics.SQS_CALLS.labels("ReceiveMessage", code).inc()
        metrics.POLL_ERRORS.labels(self.name, code).inc()
        self.health.sqs_result(False)
        self.health.progress(self.name)  # backing off is progress: the loop is alive
        delay = backoff.next_delay()
        level = logging.ERROR if code in NOT_FOUND_CODES else logging.WARNING
        log.log(level, "receive failed (%s); retrying in %.1f s", code, delay, extra={"queue": self.name})
        self.events.emit("error", worker_id=self.worker_id, error=exc, where=f"receive:{self.name}")
        await asyncio.sleep(delay)

    def _dispatch(self, messages: list[dict[str, Any]], received_at: float) -> None:
        now_wall = time.time()
        self.received_since_sample += len(messages)
        runs = []
        for message in messages:
            delivery = self.book.receive(message, received_at)
            run = Run(delivery, attempt=delivery.receive_count)
            self.runs.add(run)
            runs.append(run)
            age = self.report.claimed(delivery, now_wall)
            self.received_oldest_age = max(self.received_oldest_age, age)
        if self.info.fifo:
            groups: dict[str | None, list[Run]] = {}
            for run in runs:
                groups.setdefault(run.delivery.group, []).append(run)
            for members in groups.values():
                self._spawn(self._run_group(members), members)
        else:
            for run in runs:
                self._spawn(self._life(run, []) if self.tenants is None else self._tenant_life(run), [run])

    def _spawn(self, coro: Any, runs: list[Run]) -> None:
        task = asyncio.create_task(coro)
        for run in runs:
            run.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- 2-4. one message's life --------------------------------------------------

    async def _run_group(self, members: list[Run]) -> None:
        """FIFO: one at a time, in order. The next one runs only once this one is gone for
        good (deleted or dead-lettered); otherwise the rest is released behind it."""
        for i, run in enumerate(members):
            rest = members[i + 1 :]
            if self.stopping or run.delivery.state is not State.RECEIVED:
                await self._let_go(members[i:], "shutdown" if self.stopping else "group held back")
                return
            settlement = await self._life(run, rest)
            if not group_goes_on(settlement):
                await self._let_go(rest, "shutdown" if self.stopping else "group held back")
                return

    async def _tenant_life(self, run: Run) -> None:
        """Standard queue with a group cap (tenants.py): run now, or park, or give back."""
        assert self.tenants is not None
        group = run.delivery.group
        if group is not None and not self.tenants.try_start(group):
            action = when_capped(
                self.tenants.parked, self.options.concurrency, run.delivery.receive_count, self.info.max_receive_count
            )
            metrics.TENANT_CAPPED.labels(self.name, action).inc()
            if action == "give_back":
                if self.bucket is not None:
                    self.bucket.give_back(1)  # it did not start: its token is another's
                now = clock.now()
                longest = max((now - r.started for r in self.runs if r.running), default=0.0)
                delay = self.tenants.give_back(group, now, self.pace.job_seconds, longest)
                log.info(
                    "group at its cap of %d: message given back for %d s",
                    self.tenants.cap,
                    delay,
                    extra={"queue": self.name, "message_id": run.delivery.message_id, "group": group},
                )
                await self._let_go([run], f"group {group} at its cap", delay)
                return
            if not await self._park(run, group):
                await self._let_go([run], "shutdown" if self.stopping else "lease lost while parked")
                return
        try:
            await self._life(run, [])
        finally:
            if group is not None:
                self.tenants.done(group)

    async def _park(self, run: Run, group: str) -> bool:
        """Hold the message, its handler slot lent out, until its group's turn and a free
        slot. False if it may not run after all (shutdown, or its lease was lost)."""
        assert self.tenants is not None
        self._handler_slot_done(run)
        turn = self.tenants.park(group)
        if not await self._turn_came(run, turn):
            self.tenants.leave(group, turn)
            return False
        self.tenants.started()
        self.slots.reclaim()
        run.handler_slot = True
        return True

    def _stop_signal(self) -> asyncio.Future[None]:
        """Done once the pool stops polling (shared by every wait that a stop cuts short)."""
        if self._stopping_future is None:
            self._stopping_future = asyncio.get_running_loop().create_future()
        return self._stopping_future

    async def _turn_came(self, run: Run, turn: asyncio.Future[None]) -> bool:
        """Wait for `turn` (a group's, or a handler slot's); False if the run may not use it
        after all: shutdown, or its lease was lost meanwhile."""
        if not turn.done():
            # Futures only, no task: with prefetch, most jobs of a busy queue wait here.
            waits: set[asyncio.Future[Any]] = {turn, self._stop_signal(), run.delivery.lost()}
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        return turn.done() and not turn.cancelled() and not self.stopping and run.delivery.state is State.RECEIVED

    async def _life(self, run: Run, mates: list[Run]) -> Settlement:
        """Run, decide, settle; FIFO retries in place while `mates` wait behind it."""
        bind_job(job_id=run.delivery.message_id, queue=self.name, receive_count=run.attempt)
        try:
            if self.stopping:
                await self._let_go([run], "shutdown")  # received, never started
                return Release()
            if not await self._take_slot(run):
                await self._let_go([run], "shutdown" if self.stopping else "lease lost before it started")
                return Release()
            while True:
                run.deciding = True
                ending = self._downstream(run, await self._attempt(run))
                if ending.duration:
                    self.pace.ran(ending.duration)  # also the fair tenants' line length
                    if self.options.prefetch:
                        self._size_prefetch()
                waiting = any(m.delivery.state is State.RECEIVED for m in mates)
                facts = Facts(
                    attempt=run.attempt,
                    max_receive=self.info.max_receive_count,
                    has_dlq=self.info.dlq_url is not None,
                    mates_waiting=waiting and not self.stopping,
                    requested_delay=ending.requested_delay,
                )
                settlement = plan(ending.outcome, facts, self.retry, describe(ending.error))
                if not isinstance(settlement, RetryInPlace):
                    # The slot goes back as soon as the work has ended (now, or when a thread
                    # cut off at shutdown returns); a FIFO head retried in place keeps it, so
                    # waiting group-mates can never hold every slot while their heads wait.
                    run.deciding = False
                    self._handler_slot_done(run)
                if isinstance(settlement, RetryInPlace):
                    self.report.ended(run.delivery.message_id, ending, will_retry=True, trace=self._trace_ids(run))
                    self._end_span(run, settlement, ending)
                    if await self._wait_in_place(run, settlement.seconds):
                        run.attempt += 1
                        continue
                    settlement = Release() if run.delivery.state is not State.LOST else Untouched()
                    ending = Ending("released", None, 0.0)
                settlement = await self._settle(run, settlement, ending)
                self.report.ended(
                    run.delivery.message_id,
                    ending,
                    will_retry=isinstance(settlement, RetryAfter),
                    trace=self._trace_ids(run),
                )
                self._end_span(run, settlement, ending)
                return settlement
        finally:
            self._forget(run)

    async def _attempt(self, run: Run) -> Ending:
        """One handler call, up to its end (or the shutdown cut)."""
        message = run.delivery.message
        self._start_span(run)
        attrs = message.get("Attributes", {})
        try:
            body = await self._body(run)
            payload, envelope = read_payload(self.spec.payload, self.spec.envelope, body)
            if self.signatures is not None and envelope is not None and envelope.sns is not None:
                await self.signatures.check(envelope.sns.signed, envelope.sns.topic_arn)
        except ControlMessage as exc:
            return Ending("dropped", exc, 0.0)
        except PayloadError as exc:
            return Ending("dead_letter", exc, 0.0)
        except Exception as exc:  # S3 unreachable or slow: worth another attempt
            return Ending("retry", exc, 0.0)
        max_receive = self.info.max_receive_count
        job: Job[Any] = Job(
            id=run.delivery.message_id,
            queue=self.name,
            body=body,
            payload=payload,
            envelope=envelope,
            large_payload=run.pointer,
            attributes=dict(attrs),
            message_attributes=dict(message.get("MessageAttributes") or {}),
            receive_count=run.attempt,
            max_retries=None if max_receive is None else max_receive - 1,
            worker_id=self.worker_id,
            logger=get_logger(),
            _cancel_flag=threading.Event(),
            _stop_flag=threading.Event(),
            _on_progress=self.report.progress_reporter(run.delivery.message_id),
        )
        if self.stopping:
            job._request_stop()
        run.job = job
        if self.options.log_payloads:
            log.info("job payload", extra={"body": job.body})
        self.report.started(job.id)
        if run.delivery.state is State.RECEIVED:
            self.book.start(run.delivery)
        run.started = clock.now()
        with run.span or contextlib.nullcontext():  # the span is current in the handler's task or thread
            work, ended = self._invoke(job, run)
        lost, cut = run.delivery.lost(), run.cut
        await asyncio.wait({work, lost, cut}, timeout=self.options.job_timeout, return_when=asyncio.FIRST_COMPLETED)
        if work.done() and run.delivery.state is State.LOST:
            return Ending("lease_lost", None, clock.now() - run.started)  # whatever it did: not ours now
        if work.done():
            error = asyncio.CancelledError() if work.cancelled() else work.exception()
            requested = error.seconds if isinstance(error, RetryLater) else None
            return Ending(classify(error), error, clock.now() - run.started, requested)
        reason = "shutdown" if cut.done() else "lease_lost" if lost.done() else "timeout"
        if run.span is not None:
            run.span.event("cancelled", reason=reason, job_timeout_seconds=self.options.job_timeout)
        job._cancel(reason)
        work.cancel()
        # A job that cannot be interrupted keeps its lease and slot until its work
        # returns: released now, it could run twice at once. Only the shutdown cut
        # stops this wait (its message is released at exit, the process ends).
        if reason == "shutdown":
            await asyncio.wait({ended}, timeout=CUT_GRACE)
        elif not ended.done():
            either: set[asyncio.Future[Any]] = {ended, cut}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not ended.done():
                await asyncio.wait({ended}, timeout=CUT_GRACE)
        duration = clock.now() - run.started
        if reason == "timeout" and run.delivery.state is not State.LOST:
            if not ended.done():  # cut off at shutdown while its work still runs
                return Ending("released", None, duration)
            error = TimeoutError(f"job exceeded its timeout of {self.options.job_timeout:g} s")
            return Ending("timeout", error, duration)
        if run.delivery.state is State.LOST:
            return Ending("lease_lost", None, duration)
        return Ending("released", None, duration)

    def _start_span(self, run: Run) -> None:
        if not self.tracing:
            return
        run.span = tracing.JobSpan(
            self.name, run.delivery.message, self.worker_id, run.attempt, self.options.trace_parent
        )
        run.delivery.observer = run.span.note
        # None for a span not sampled: the log formatter drops None, so no earlier job's
        # trace lingers on this one's lines (one task runs a FIFO group's jobs in turn).
        ids: dict[str, str | None] = {"trace_id": None, "span_id": None}
        bind_job(**(ids | run.span.ids))

    def _trace_ids(self, run: Run) -> dict[str, str] | None:
        return run.span.ids if run.span is not None else None

    @staticmethod
    def _end_span(run: Run, settlement: Settlement, ending: Ending) -> None:
        """What became of the message, on the attempt's span; then the span ends."""
        span, run.span = run.span, None
        if span is None:
            return
        run.delivery.observer = None
        if isinstance(settlement, RetryAfter | RetryInPlace):
            span.event("retry", delay_seconds=settlement.seconds, in_place=isinstance(settlement, RetryInPlace))
        elif isinstance(settlement, DeadLetter):
            span.event("dead_letter", reason=settlement.why[:1024])
        elif isinstance(settlement, Release):
            span.event("released", reason="shutdown" if ending.outcome == "released" else ending.outcome)
        span.end(ending.outcome, ending.error)

    async def _body(self, run: Run) -> str:
        """The message's payload text: its body, or for an offloaded payload the S3 object
        (read inside the job, its lease held, within the job timeout)."""
        message = run.delivery.message
        run.pointer = pointer_of(message)
        if run.pointer is None:
            return str(message.get("Body", ""))
        if run.body is None:
            if self.payloads is None:
                raise PayloadError(pointer_problem(run.pointer, ()) or "")
            run.body = await asyncio.wait_for(self.payloads.fetch(run.pointer), self.options.job_timeout)
        return run.body

    def _invoke(self, job: Job[Any], run: Run) -> tuple[asyncio.Future[Any], asyncio.Future[None]]:
        """Start the handler. Returns its result, and a future that is done when the work
        has really ended (a thread's call returned), which frees the handler slot."""
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()

        def finished(_: object = None) -> None:
            if not ended.done():
                ended.set_result(None)
                self.handlers_running -= 1
                run.running = False
                self.report.running(-1)
                if not run.deciding:
                    self._handler_slot_done(run)

        self.handlers_running += 1
        run.running = True
        self.report.running(+1)
        if self.collector is not None:
            result, call_ended = self.collector.submit(job)
            call_ended.add_done_callback(finished)
            return result, ended
        if self.spec.mode == "async":
            task = asyncio.ensure_future(self.spec.fn(job))
            task.add_done_callback(finished)
            return task, ended
        if self.spec.mode == "thread":
            assert self.thread_pool is not None
            cf = self.thread_pool.submit(contextvars.copy_context().run, call_sync, self.spec.fn, job)
        else:
            assert self.process_pool is not None
            cf = self.process_pool.submit(call_sync, self.spec.fn, job)
        cf.add_done_callback(lambda _f: loop.call_soon_threadsafe(finished))
        return asyncio.wrap_future(cf, loop=loop), ended

    def _call_batch(self, jobs: list[Job[Any]]) -> tuple[asyncio.Future[Any], asyncio.Future[None]]:
        """Start a batch handler (batches.Collector calls this): its response, and a future
        done once its work has ended (a thread's call returned, even if given up). In a
        context of its own: its log lines must not carry the first job's id or span."""
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()
        metrics.BATCH_SIZE.labels(self.name).observe(len(jobs))

        def done(_: object = None) -> None:
            if not ended.done():
                ended.set_result(None)

        response: asyncio.Future[Any]
        if self.spec.mode == "async":
            response = loop.create_task(self.spec.fn(jobs), context=contextvars.Context())
            response.add_done_callback(done)
        else:
            assert self.thread_pool is not None
            cf = self.thread_pool.submit(contextvars.Context().run, call_sync, self.spec.fn, jobs)
            cf.add_done_callback(lambda _f: loop.call_soon_threadsafe(done))
            response = asyncio.wrap_future(cf, loop=loop)
        return response, ended

    def _handler_slot_done(self, run: Run) -> None:
        """Give the place (and handler slot) back once, when its work has ended (or never ran)."""
        if run.handler_slot and not run.running:
            run.handler_slot = False
            self.slots.handler_done(started=run.permit)
            run.permit = False

    async def _take_slot(self, run: Run) -> bool:
        """A handler slot for the job, in receive order: at once unless prefetched messages
        wait for one. False if it may not run after all (shutdown, or its lease was lost)."""
        if run.permit or self.slots.try_start():
            run.permit = True
            return True
        turn = self.slots.queue_start()
        self._prefetched.inc()
        try:
            came = await self._turn_came(run, turn)
        finally:
            self._prefetched.dec()
        if came:
            run.permit = True
            return True
        self.slots.leave_start(turn)
        return False

    def _size_prefetch(self) -> None:
        self.slots.prefetch = prefetch_target(
            self.options.concurrency, self.options.prefetch, self.pace.receive_seconds, self.pace.job_seconds
        )

    async def _wait_in_place(self, run: Run, seconds: int) -> bool:
        """FIFO: wait out a retry delay holding the group's leases. False if the wait was
        cut short (shutdown, or the lease was lost)."""
        if run.delivery.state is State.LOST:
            return False
        stopping = asyncio.ensure_future(self._stopped.wait())
        waits: set[asyncio.Future[Any]] = {stopping, run.delivery.lost()}
        try:
            done, _ = await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()  # never the lease's own future: other waits share it
        return not done

    async def _settle(self, run: Run, settlement: Settlement, ending: Ending) -> Settlement:
        """Carry out the settlement; returns what was done (a failed DLQ send retries)."""
        delivery = run.delivery
        if isinstance(settlement, Delete):
            deleted = await self.acker.delete(delivery)
            if deleted and run.pointer is not None and self.payloads is not None and self.options.delete_large_payloads:
                await self.payloads.delete(run.pointer)  # only now: nothing points at it any more
        elif isinstance(settlement, RetryAfter):
            await self._give_back(delivery, settlement.seconds)
        elif isinstance(settlement, Release):
            self.released += 1
            await self._give_back(delivery)
        elif isinstance(settlement, DeadLetter):
            return await self._dead_letter(run, settlement, ending)
        return settlement

    async def _dead_letter(self, run: Run, settlement: DeadLetter, ending: Ending) -> Settlement:
        """Copy to the DLQ with the reason, then delete: never delete first. The lease is
        kept (as if a delete were queued) while the copy is sent."""
        delivery = run.delivery
        assert self.info.dlq_url is not None
        if not self.book.settling(delivery, "delete", clock.now()):
            return Untouched()
        error = ending.error if ending.error is not None else RuntimeError(settlement.why)
        request = dead_letter_request(
            delivery.message,
            self.info.dlq_url,
            self.name,
            error,
            self.worker_id,
            self.info.fifo,
            settlement.why,
            trace=self._trace_ids(run),
        )
        fitted = fit_to_size(request, self.info.dlq_max_size)
        try:
            if fitted is None:
                raise ValueError(f"the message does not fit the DLQ's MaximumMessageSize of {self.info.dlq_max_size}")
            await self.control.send_message(**fitted)
        except Exception as exc:
            metrics.SQS_CALLS.labels("SendMessage", error_code(exc)).inc()
            delay = retry_delay(run.attempt, self.retry)
            log.error(
                "could not send to the DLQ (%s); retrying the message in %d s instead",
                exc,
                delay,
                extra={"queue": self.name},
            )
            await self._give_back(delivery, delay)
            return RetryAfter(delay)
        metrics.SQS_CALLS.labels("SendMessage", "ok").inc()
        metrics.DLQ_SENDS.labels(self.name).inc()
        await self.acker.delete(delivery)
        return settlement

    async def _give_back(self, delivery: Delivery, seconds: int = 0) -> bool:
        """Make the message visible after `seconds`: now, or during shutdown, once no poll
        of ours is out that could take it (a poll that did would hide it for a whole
        visibility timeout, or run it here once more)."""
        if not self.stopping:
            return await self.acker.change_visibility(delivery, seconds)
        if self._polls_out and not self._polls_over:
            done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            self.deferred.append((delivery, seconds, done))
            if self._releaser is None:
                self._releaser = asyncio.create_task(self._release_after_polls())
            return await done
        return await self.acker.change_visibility(delivery, max(seconds, self._release_delay()))

    async def _let_go(self, runs: list[Run], reason: str, seconds: int = 0) -> None:
        """Give back messages that will not run now (shutdown, held behind their group, or
        their tenant at its cap), visible again after `seconds`."""
        waiting = [r.delivery for r in runs if r.delivery.state is State.RECEIVED]
        self.released += len(waiting)
        await asyncio.gather(*(self._give_back(delivery, seconds) for delivery in waiting))
        for run in runs:
            self._forget(run)
            self.report.released(run.delivery.message_id, reason)

    def _forget(self, run: Run) -> None:
        run.deciding = False
        self._handler_slot_done(run)
        if run in self.runs:
            self.runs.discard(run)
            self.slots.forget()
