"""One queue's pool: a message's life from receive to settlement, in the order it lives.

1. Receive (receiving.py). A poller asks admission (admission.py) how many it may ask
   for: free places within concurrency + prefetch, what the rate limit, a pause and SQS's
   health allow. It asks SQS for at most that many (and at most 10); each message
   received gets a ticket.
2. Start. The message waits for admission's word (a handler slot, its tenant's turn, the
   rate window, the end of a pause) in receive order, its lease kept meanwhile.
3. Run. The handler runs with the job timeout; the lease book keeps its lease. A handler
   that outlives its timeout, or its lease, is cancelled; one that cannot be interrupted
   (a thread, a coroutine that ignores cancellation) keeps its lease and its slot until
   its work really returns, so nobody runs it twice meanwhile.
4. Decide. `decisions.plan` turns the outcome into one settlement.
5. Settle (settling.py): delete, retry after a delay, dead-letter, or release. Then the
   ticket is closed: whatever the message held from admission goes back, in one place.

FIFO queues: one group's messages run one after another, in order; groups in parallel.
A failing message with group-mates waiting is retried in place (see decisions.py); a
message that is released or lost holds back the rest of its group, released behind it.

Standard queues with a group cap (tenants.py): a message whose group already runs its cap
waits in line, passed by the others (parked), or is given back for a few seconds.

Shutdown (driven by worker.py): no new receive; what waits to start is given back; jobs
get `job.stopping`; settling.py holds releases back while a poll of ours is still out.

What a pool is made of (admission, lease book, settler, handler calls, pollers) is built
and connected in assembly.py; here is only what happens to a message.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from ..base import clock
from ..base.limits import MAX_RECEIVE_BATCH
from ..base.sqs import QueueInfo
from ..base.telemetry import tracing
from ..base.telemetry.health import Health
from ..base.telemetry.logs import bind_job
from ..handlers.job import Job
from ..handlers.outcomes import Ending, describe
from ..handlers.router import HandlerSpec
from .admission.admission import Admission, Ticket
from .backlog import Received
from .handling import job_spans
from .handling.calls import HandlerCalls
from .handling.preparing import Payload, Preparer
from .protections.prefetch import Pace, prefetch_target
from .protections.tenants import Tenants, when_capped
from .receiving import OnMessages, Polls, Receiver
from .reporting import QueueReport
from .settling.decisions import (
    DeadLetter,
    Facts,
    Release,
    RetryAfter,
    RetryInPlace,
    RetryPolicy,
    Settlement,
    Untouched,
    group_goes_on,
    plan,
)
from .settling.delivery import Delivery, LeaseBook, State
from .settling.lease import LeaseKeeper
from .settling.settling import Settler

log = logging.getLogger("sqs_worker_engine.pool")


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
    rate_burst: int = 1  # starts the rate limit lets go together (WORKER_RATE_BURST)
    group_concurrency: int | None = None  # standard queues: jobs of one group at once (see tenants.py)
    prefetch: int = 0  # WORKER_PREFETCH: most messages held beyond the concurrency (see prefetch.py)
    adaptive: bool = False  # WORKER_ADAPTIVE_CONCURRENCY: the concurrency is a ceiling (see adaptive.py)
    concurrency_floor: int = 1  # WORKER_CONCURRENCY_FLOOR: the adaptive limit's floor
    weight: int = 1  # WORKER_QUEUE_<KEY>_WEIGHT: its share of a shared budget (see budget.py)


@dataclass(eq=False, slots=True)  # one a message: no instance dict
class Run:
    """One delivery's way through the pool."""

    delivery: Delivery
    attempt: int  # the receive count, plus retries run in place
    ticket: Ticket  # what it holds from admission
    job: Job[Any] | None = None
    payload: Payload = field(default_factory=Payload)  # where its payload is, once read
    span: job_spans.JobSpan | None = None  # this attempt's `process` span, when tracing
    _cut_off: bool = False  # the shutdown deadline came: stop waiting for the work (written by cut_now)
    _cut: asyncio.Future[None] | None = field(default=None, repr=False)

    def cut(self) -> asyncio.Future[None]:
        """Done once it is cut off: a future made only when a handler waits (see Delivery.lost)."""
        if self._cut is None:
            self._cut = asyncio.get_running_loop().create_future()
            if self._cut_off:
                self._cut.set_result(None)
        return self._cut

    def cut_now(self) -> None:
        """The shutdown deadline came: whoever waits for its work stops waiting."""
        self._cut_off = True
        if self._cut is not None and not self._cut.done():
            self._cut.set_result(None)
        if self.delivery.wake is not None:
            self.delivery.wake()

    def watch(self, wake: Callable[[], None] | None) -> None:
        """While its job waits for its work: `wake()` once the lease is lost or the
        shutdown cuts it off, at once if either came already (None: no longer)."""
        self.delivery.wake = wake
        if wake is not None and (self._cut_off or self.delivery.state is State.LOST):
            wake()


@dataclass
class PoolParts:
    """What one queue's pool is made of, built and connected by assembly.py."""

    info: QueueInfo
    spec: HandlerSpec
    options: PoolOptions
    worker_id: str
    health: Health
    report: QueueReport  # the one observer: events, metrics, health
    admission: Admission  # how many may be received, and may this message start
    book: LeaseBook  # every held delivery's state and lease
    keeper: LeaseKeeper  # extends the book's leases
    settler: Settler  # delete, retry delay, dead-letter, release
    preparer: Preparer  # a message into a job (or an ending: it cannot run)
    calls: HandlerCalls  # the handler calls
    retry: RetryPolicy
    tenants: Tenants | None  # standard queues with a group cap: given-back groups' times
    receiver: Callable[[OnMessages, Callable[[float], None] | None], Receiver]  # the pollers, told of what they bring


class QueuePool:
    def __init__(self, parts: PoolParts) -> None:
        self.tracing = tracing.enabled()  # decided once: a provider is installed before the worker starts
        self.info, self.name, self.spec, self.options = parts.info, parts.info.name, parts.spec, parts.options
        self.worker_id, self.health, self.report = parts.worker_id, parts.health, parts.report
        self.admission, self.book, self.keeper, self.settler = parts.admission, parts.book, parts.keeper, parts.settler
        self.line = parts.admission.line  # each message's way to a slot, and what it gives back
        self.preparer, self.calls, self.retry, self.tenants = parts.preparer, parts.calls, parts.retry, parts.tenants
        self.pace = Pace()  # receive round trips and job durations, for the prefetch (written by the life)
        self.runs: set[Run] = set()  # the deliveries on their way through (written by _dispatch, _forget)
        self.received = Received()  # what was received since the backlog's last sample (backlog.py)
        self.receiver = parts.receiver(self._dispatch, self._received_full if self.options.prefetch else None)
        self._keeper_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- lifecycle (worker.py calls these in this order) -----------------------

    def start(self) -> None:
        self._keeper_task = asyncio.create_task(self.keeper.run(), name=f"keeper-{self.name}")
        self.receiver.start(self.options.pollers, self.name)

    def stop_polling(self, release_cap: float) -> None:
        """No new receive from now on; what waits to start is given back; running jobs see
        `job.stopping`. What is given back waits for the polls still out (settling.py), at
        most until the loop time `release_cap`."""
        self.settler.stop(release_cap)
        self.admission.stop()
        self.receiver.stop()
        self.calls.close()  # no more jobs are coming to fill a batch
        for run in list(self.runs):
            if run.job is not None:
                run.job._request_stop()

    async def drain(self, deadline: float) -> int:
        """Wait for running jobs until `deadline` (loop time); then cut off whatever still
        runs: it is cancelled and released. Returns how many were cut off."""
        lives = [task for task in self._tasks if not task.done()]
        if lives:
            await asyncio.wait(lives, timeout=max(0.0, deadline - clock.now()))
        cut = [run for run in self.runs if not run.ticket.returned]
        for run in self.runs:
            run.cut_now()
        # Wait for the lives still going (one may spawn another as it lets its group go):
        # only for those not done, so that a finished task whose removal is still queued
        # is never awaited over and over.
        while pending := [task for task in self._tasks if not task.done()]:
            await asyncio.wait(pending)
        return len(cut)

    async def wait_polls(self, cap: float) -> None:
        """WORKER_DRAIN_POLLS: let the last polls answer, until the loop time `cap`."""
        await self.receiver.wait(cap)

    async def cancel_polls(self) -> None:
        """Cancel whatever poll is still waiting (an idle queue): the drain is over."""
        await self.receiver.cancel()

    async def flush_deletes(self) -> None:
        """Send the decided deletes still waiting in their batch (the exit without a drain)."""
        await self.settler.acker.close()

    async def close(self) -> None:
        await self.settler.close()
        if self._keeper_task is not None:
            self._keeper_task.cancel()
            await asyncio.gather(self._keeper_task, return_exceptions=True)
        self.calls.shutdown()

    def resting(self) -> bool:
        """Waiting by design, not stuck (health.py, admission.py)."""
        return self.admission.resting(backing_off=self.receiver.backing_off > 0)

    @property
    def active(self) -> int:
        """Handler calls whose work has not ended: after the drain, threads that could not
        be interrupted (they would hold the interpreter's exit)."""
        return self.calls.running

    @property
    def deferred(self) -> list[Any]:
        return self.settler.deferred

    @property
    def url(self) -> str:
        return self.info.url

    @property
    def stopping(self) -> bool:
        """The pool stops: its admission's fact (no more receives or starts)."""
        return self.admission.stopping

    @property
    def polls(self) -> Polls:
        return self.receiver.polls

    # -- 1. receive (receiving.py) -> 2. one life per message ---------------------

    def _dispatch(self, messages: list[dict[str, Any]], tickets: list[Ticket], received_at: float) -> None:
        now_wall = time.time()
        runs, oldest = [], 0.0
        for message, ticket in zip(messages, tickets, strict=True):
            delivery = self.book.receive(message, received_at)
            self.admission.received_group(ticket, delivery.group)
            receive_count = delivery.receive_count  # read from the message's attributes: once
            run = Run(delivery, attempt=receive_count, ticket=ticket)
            self.runs.add(run)
            runs.append(run)
            age = delivery.age(now_wall)
            self.report.claimed(delivery.message_id, receive_count, age)
            oldest = max(oldest, age or 0.0)
        self.received.note(len(messages), oldest)
        if self.info.fifo:
            groups: dict[str | None, list[Run]] = {}
            for run in runs:
                groups.setdefault(run.delivery.group, []).append(run)
            for members in groups.values():
                for run in members[1:]:
                    self.line.behind_its_group(run.ticket)
                self._spawn(self._run_group(members), members)
        else:
            for run in runs:
                self._spawn(self._life(run, []), [run])

    def _spawn(self, coro: Coroutine[Any, Any, Any], runs: list[Run]) -> None:
        task = asyncio.create_task(self._guarded(coro, runs))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guarded(self, coro: Coroutine[Any, Any, Any], runs: list[Run]) -> None:
        """A life that crashed (a bug) still gives back what its messages held: their
        leases are let go (SQS redelivers them) and their tickets closed."""
        try:
            await coro
        except Exception:
            log.exception("a message's life failed; its messages come back when their leases run out")
            for run in runs:
                if run.delivery.state in (State.RECEIVED, State.RUNNING):
                    self.book.lose(run.delivery, "its task failed")
                self._forget(run)

    # -- 2-5. one message's life --------------------------------------------------

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

    async def _life(self, run: Run, mates: list[Run]) -> Settlement:
        """Wait for admission, run, decide, settle; FIFO retries in place while `mates`
        wait behind it. Whatever way it leaves, its ticket is closed (`_forget`)."""
        bind_job(job_id=run.delivery.message_id, queue=self.name, receive_count=run.attempt)
        try:
            # Only a queue with a group cap gives messages back for their tenant: no coroutine else.
            if self.tenants is not None and await self._given_back_for_its_tenant(run):
                return Release()
            while True:
                started = self.line.start_at_once(run.ticket)
                if started is None:
                    started = await self.line.wait_to_start(run.ticket, run.delivery.lost())
                if not started:
                    reason = "shutdown" if self.stopping else "lease lost before it started"
                    await self._let_go([run], reason)
                    return Release()
                ending = self.line.ended(run.ticket, await self._attempt(run))
                if ending.called:  # a job may take 0.0 s by the loop's clock (uvloop's ticks in ms)
                    self.pace.ran(ending.duration)  # also the fair tenants' line length
                    if self.options.prefetch:
                        self._size_prefetch()
                waiting = bool(mates) and any(m.delivery.state is State.RECEIVED for m in mates)
                facts = Facts(
                    attempt=run.attempt,
                    max_receive=self.info.max_receive_count,
                    has_dlq=self.info.dlq_url is not None,
                    mates_waiting=waiting and not self.stopping,
                    requested_delay=ending.requested_delay,
                )
                settlement = plan(ending.outcome, facts, self.retry, describe(ending.error))
                if isinstance(settlement, RetryInPlace):
                    self._ended(run, settlement, ending, will_retry=True)
                    if await self._wait_in_place(run, settlement.seconds):
                        run.attempt += 1
                        continue
                    settlement = Release() if run.delivery.state is not State.LOST else Untouched()
                    ending = Ending("released", None, 0.0)
                settlement = await self.settler.settle(
                    run.delivery,
                    settlement,
                    attempt=run.attempt,
                    error=ending.error,
                    pointer=run.payload.pointer,
                    trace=run.span.ids if run.span is not None else None,
                    sent=lambda: self.line.delete_sent(run.ticket),
                )
                self._ended(run, settlement, ending, will_retry=isinstance(settlement, RetryAfter))
                return settlement
        finally:
            self._forget(run)

    async def _given_back_for_its_tenant(self, run: Run) -> bool:
        """Standard queue with a group cap (tenants.py): its group runs its cap now. Parked
        (it waits in admission's line, passed by the others) unless the park is full: then
        given back for about as long as its group's line takes. True if given back."""
        group = run.ticket.group
        if self.tenants is None or group is None or not self.line.at_cap(run.ticket):
            return False
        room = max(0, self.options.prefetch - MAX_RECEIVE_BATCH)  # leave places for other tenants
        action = when_capped(self.line.parked, room, run.delivery.receive_count, self.info.max_receive_count)
        if action == "park":
            self.report.tenant_capped(action, group, self.tenants.cap, run.delivery.message_id, None)
            return False
        now = clock.now()
        longest = max((now - r.ticket.started_at for r in self.runs if not r.ticket.returned), default=0.0)
        delay = self.tenants.give_back(group, now, self.pace.job_seconds, longest)
        self.report.tenant_capped(action, group, self.tenants.cap, run.delivery.message_id, delay)
        await self._let_go([run], f"group {group} at its cap", delay)
        return True

    async def _attempt(self, run: Run) -> Ending:
        """One handler call, up to its end (or the shutdown cut). Admission's slot is taken;
        if the handler is never called (preparing.py: the message cannot run), the slot's
        work has ended here."""
        invoked = False
        try:
            if self.tracing:
                self._start_span(run)
            job = await self.preparer.prepare(run.delivery, run.attempt, run.payload)
            if isinstance(job, Ending):
                return job
            if self.stopping:
                job._request_stop()
            run.job = job
            invoked = True
            return await self._call(run, job)
        finally:
            if not invoked:
                self.line.work_ended(run.ticket)

    async def _call(self, run: Run, job: Job[Any]) -> Ending:
        """Run the handler until it ends, its timeout, its lease is lost or the shutdown cut."""
        if self.options.log_payloads:
            log.info("job payload", extra={"body": job.body})
        self.report.started(job.id)
        self.line.handler_called(run.ticket)
        if run.delivery.state is State.RECEIVED:
            self.book.start(run.delivery)
        return await self.calls.call(
            job,
            watch=run.watch,
            cut=run.cut,
            job_timeout=self.options.job_timeout,
            lease_gone=lambda: run.delivery.state is State.LOST,
            span=run.span,
            on_ended=lambda: self.line.work_ended(run.ticket),
            on_overdue=lambda: self.line.overdue(run.ticket),
        )

    def _start_span(self, run: Run) -> None:
        run.span = job_spans.JobSpan(
            self.name, run.delivery.message, self.worker_id, run.attempt, self.options.trace_parent
        )
        self.book.observe(run.delivery, run.span.note)
        bind_job(**run.span.log_ids())

    def _ended(self, run: Run, settlement: Settlement, ending: Ending, will_retry: bool) -> None:
        """The attempt is reported, and its span ends with the settlement on it."""
        span, run.span = run.span, None
        self.report.ended(
            run.delivery.message_id,
            ending,
            will_retry=will_retry,
            trace=span.ids if span else None,
            dead_lettered=isinstance(settlement, DeadLetter),
        )
        if span is not None:
            self.book.observe(run.delivery, None)
            span.settled(settlement, ending)

    def _received_full(self, seconds: float) -> None:
        self.pace.received(seconds)
        self._size_prefetch()

    def _size_prefetch(self) -> None:
        self.admission.set_prefetch(
            prefetch_target(
                self.admission.limit, self.options.prefetch, self.pace.receive_seconds, self.pace.job_seconds
            )
        )

    async def _wait_in_place(self, run: Run, seconds: int) -> bool:
        """FIFO: wait out a retry delay holding the group's leases. False if the wait was
        cut short (shutdown, or the lease was lost)."""
        if run.delivery.state is State.LOST:
            return False
        stopping = asyncio.ensure_future(self.admission.stopped())
        waits: set[asyncio.Future[Any]] = {stopping, run.delivery.lost()}
        try:
            done, _ = await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()  # never the lease's own future: other waits share it
        return not done

    async def _let_go(self, runs: list[Run], reason: str, seconds: int = 0) -> None:
        """Give back messages that will not run now (shutdown, held behind their group, or
        their tenant at its cap), visible again after `seconds`."""
        waiting = [r.delivery for r in runs if r.delivery.state is State.RECEIVED]
        await asyncio.gather(*(self.settler.give_back(delivery, seconds) for delivery in waiting))
        for run in runs:
            self._forget(run)
            self.report.released(run.delivery.message_id, reason)

    def _forget(self, run: Run) -> None:
        """The one place a message's hold on admission ends (its ticket is closed once)."""
        self.line.close(run.ticket)
        self.runs.discard(run)
