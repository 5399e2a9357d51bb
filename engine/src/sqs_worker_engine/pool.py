"""One queue's pool: pollers, handler slots, and each message's way to an outcome.

A poller reserves free slots *before* it receives, and asks SQS for at most that many
messages (and at most 10), so nothing is held invisible that cannot start at once. Every
received message gets a lease (kept alive by the keeper) and runs in its own task; the
slot is given back only when the handler has really finished, so concurrency bounds the
work that runs, not just the work that is awaited.

FIFO queues: messages of one MessageGroupId run strictly one after another, in order;
groups run in parallel. When one fails, the rest of its group in that batch is released
(visibility 0) rather than run: SQS then redelivers the group from the failed message on,
after its backoff, so nothing overtakes it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from . import metrics
from .acker import Acker
from .backoff import Backoff, backoff_delay
from .dlq import dead_letter_request, send_to_dlq
from .errors import PayloadError
from .events import Events
from .health import Health
from .job import Job
from .lease import Lease, LeaseKeeper
from .limits import MAX_RECEIVE_BATCH
from .logs import bind_job, get_logger
from .outcomes import Outcome, classify
from .router import HandlerSpec, call_sync
from .sqs import NOT_FOUND_CODES, QueueInfo, SQSClient, error_code

log = logging.getLogger(__name__)
RESPONSE_ALLOWANCE = 1.0  # seconds a ReceiveMessage response may spend in transit
# With WORKER_WAIT_TIME_SECONDS=0 an empty queue answers at once; a poller waits this long
# before asking again (a long poll would wait up to 20 s on SQS's side instead).
EMPTY_SHORT_POLL_PAUSE = 1.0
BATCH_WAIT = 0.002  # seconds a poller waits for a fuller batch of free slots (Slots.reserve)
OUTCOMES: tuple[Outcome, ...] = ("success", "retry", "dead_letter", "timeout", "lease_lost", "released")


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


class Slots:
    """Counts handler slots; pollers reserve before they receive."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.in_use = 0
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def free(self) -> int:
        return self.capacity - self.in_use

    async def reserve(self, most: int) -> int:
        """Take between 1 and `most` free slots, waiting for one if none is free.

        Jobs that started together end together, but their slots come back one release
        at a time, spread over a millisecond or two. Taking the first free slot at once
        would spend a receive on it alone; waiting up to BATCH_WAIT for a full batch lets
        one receive serve the whole wave (SQS bills per request; in the benchmark this
        took requests per message from about 0.22 to 0.20 with several pollers, at no cost
        in throughput). It never waits for slots that are busy with longer jobs.
        """
        loop = asyncio.get_running_loop()
        want = min(most, self.capacity)
        while True:
            while self.free <= 0:
                await self._wait(loop, None)
            deadline = loop.time() + BATCH_WAIT
            while 0 < self.free < want and (left := deadline - loop.time()) > 0:
                await self._wait(loop, left)
            n = min(most, self.free)
            if n > 0:  # another poller may have taken them meanwhile
                self.in_use += n
                return n

    async def _wait(self, loop: asyncio.AbstractEventLoop, at_most: float | None) -> None:
        """Until a slot is released, or at most `at_most` seconds."""
        waiter = loop.create_future()
        self._waiters.append(waiter)
        timer = None if at_most is None else loop.call_later(at_most, _wake, waiter)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def release(self, n: int = 1) -> None:
        # Wake every waiting poller; each checks again (this runs once per finished job, so
        # it must stay cheap: no task, no lock).
        self.in_use -= n
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            _wake(waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


@dataclass(eq=False)
class Run:
    """A message from receive to outcome."""

    message: dict[str, Any]
    lease: Lease
    aborted: asyncio.Future[str]
    job: Job[Any] | None = None
    started: float = 0.0
    handler_done: bool = False
    outcome: Outcome | None = None
    retry_delay: int = 0
    task: asyncio.Task[Outcome] | None = field(default=None, repr=False)

    def abort(self, reason: str) -> None:
        if not self.aborted.done():
            self.aborted.set_result(reason)


class QueuePool:
    def __init__(
        self,
        client: SQSClient,
        info: QueueInfo,
        spec: HandlerSpec,
        options: PoolOptions,
        *,
        worker_id: str,
        events: Events,
        health: Health,
        process_pool: concurrent.futures.Executor | None,
    ) -> None:
        self.client = client
        self.info = info
        self.name = info.name
        self.spec = spec
        self.options = options
        self.worker_id = worker_id
        self.events = events
        self.health = health
        self.process_pool = process_pool
        self.slots = Slots(options.concurrency)
        self.keeper = LeaseKeeper(
            client, info.name, info.url, options.visibility, options.heartbeat_fraction, health.sqs_result
        )
        self.acker = Acker(client, info.name, info.url, self.keeper, options.ack_flush)
        self.thread_pool = (
            concurrent.futures.ThreadPoolExecutor(options.concurrency, thread_name_prefix=f"job-{info.name}")
            if spec.mode == "thread"
            else None
        )
        self.runs: set[Run] = set()
        self.stopping = False
        self.received_oldest_age = 0.0  # max age at receive since the last backlog sample
        self.released = 0  # messages given back unprocessed (shutdown, group held back)
        self.deferred: list[Lease] = []  # to release once no poll of ours can take them
        self.handlers_running = 0  # handler calls not yet returned, settled or not
        self._poll_ends: dict[asyncio.Task[None], float] = {}
        self._pollers: list[asyncio.Task[None]] = []
        self._keeper_task: asyncio.Task[None] | None = None
        self._groups: set[asyncio.Task[None]] = set()
        self._loop_thread = threading.get_ident()
        metrics.CONCURRENCY.labels(self.name).set(options.concurrency)
        # Metric children looked up once: labels() per message shows up in profiles.
        self._inflight = metrics.INFLIGHT.labels(self.name)
        self._duration = metrics.JOB_DURATION.labels(self.name)
        self._receive_count = metrics.RECEIVE_COUNT.labels(self.name)
        self._age = metrics.MESSAGE_AGE.labels(self.name)
        self._processed = {o: metrics.JOBS_PROCESSED.labels(self.name, o) for o in OUTCOMES}
        self._inflight.set(0)
        self.received_since_sample = 0  # lets the backlog sampler skip an idle queue

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        self._keeper_task = asyncio.create_task(self.keeper.run(), name=f"keeper-{self.name}")
        self._pollers = [
            asyncio.create_task(self._poll_forever(), name=f"poller-{self.name}-{i}")
            for i in range(self.options.pollers)
        ]

    def stop_polling(self) -> None:
        """Stop fetching: no new receive is sent from now on.

        A long poll already in flight cannot be taken back: cancelling it here would not
        stop it inside SQS, where an abandoned poll still takes the next visible message
        and hides it for a whole visibility timeout (seen on AWS and LocalStack alike).
        So messages given back during shutdown are only *marked* for release (their leases
        kept alive), and `release_deferred()` makes them visible once no poll of ours is
        left that could take them.
        """
        self.stopping = True

    async def wait_polls(self, deadline: float) -> None:
        """Let in-flight long polls answer (at most until they would end by themselves)."""
        pending = [task for task in self._pollers if not task.done()]
        if pending:
            natural_end = max(self._poll_ends.get(task, 0.0) for task in pending)
            timeout = max(0.0, min(deadline, natural_end) - time.monotonic())
            await asyncio.wait(pending, timeout=timeout)

    async def release_deferred(self) -> None:
        """Make every message marked for release visible again (visibility 0), at once."""
        leases, self.deferred = self.deferred, []
        await asyncio.gather(*(self.acker.change_visibility(lease, 0) for lease in leases if lease.state == "held"))

    async def cancel_polls(self) -> None:
        """Cancel whatever poll is still waiting (an idle queue): the drain is over."""
        for task in self._pollers:
            task.cancel()
        await asyncio.gather(*self._pollers, return_exceptions=True)

    def signal_shutdown(self) -> None:
        for run in list(self.runs):
            if run.job is not None:
                run.job._request_stop()

    async def drain(self, deadline: float) -> int:
        """Wait for running jobs until `deadline` (monotonic); release whatever still runs."""
        pending = [run.task for run in self.runs if run.task is not None]
        if pending:
            await asyncio.wait(pending, timeout=max(0.0, deadline - time.monotonic()))
        cut = [run for run in self.runs if run.task is not None and not run.task.done()]
        for run in cut:
            run.abort("shutdown")
        if cut:
            await asyncio.gather(*(run.task for run in cut if run.task is not None), return_exceptions=True)
        if self._groups:
            await asyncio.gather(*self._groups, return_exceptions=True)
        return len(cut)

    async def close(self) -> None:
        await self.acker.close()
        if self._keeper_task is not None:
            self._keeper_task.cancel()
            await asyncio.gather(self._keeper_task, return_exceptions=True)
        if self.thread_pool is not None:
            self.thread_pool.shutdown(wait=False, cancel_futures=True)

    @property
    def active(self) -> int:
        return sum(1 for run in self.runs if run.started and not run.handler_done)

    def stuck_threads(self) -> int:
        """Sync handlers still running after the drain (a thread cannot be interrupted),
        including those whose job timed out and was settled long ago: its run is forgotten,
        its thread is not, and would hold the interpreter's exit."""
        return self.handlers_running

    # -- receiving -------------------------------------------------------------

    async def _poll_forever(self) -> None:
        backoff = Backoff(base=0.5, cap=20.0)
        while not self.stopping:
            n = await self.slots.reserve(MAX_RECEIVE_BATCH)
            if self.stopping:
                self.slots.release(n)
                return
            sent = time.monotonic()
            task = asyncio.current_task()
            if task is not None:
                self._poll_ends[task] = sent + self.options.wait_time + 2
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
                self.slots.release(n)
                raise
            except Exception as exc:
                self.slots.release(n)
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
                continue
            backoff.reset()
            metrics.SQS_CALLS.labels("ReceiveMessage", "ok").inc()
            self.health.sqs_result(True)
            self.health.progress(self.name)
            messages: list[dict[str, Any]] = [dict(m) for m in resp.get("Messages", [])]
            if len(messages) < n:
                self.slots.release(n - len(messages))
            if messages and self.stopping:
                self._release_received(messages)
                return
            if messages:
                # SQS starts a message's visibility clock when it hands the message out: during
                # a long poll, that is just before the response, not when the request was sent.
                # Allow a second for the response in transit, never later than the send.
                started = max(sent, time.monotonic() - RESPONSE_ALLOWANCE)
                self._dispatch(messages, started)
            elif self.options.wait_time == 0:
                await asyncio.sleep(EMPTY_SHORT_POLL_PAUSE)  # a short poll answers at once: do not spin

    def _release_received(self, messages: list[dict[str, Any]]) -> None:
        """A poll answered after shutdown began: its messages will be given back."""
        now = time.monotonic()
        for message in messages:
            lease = Lease(message["MessageId"], message["ReceiptHandle"], now, now + self.options.visibility)
            self.keeper.add(lease)
            self._give_back(lease)
            self.slots.release()
            self.events.emit(
                "job:released", worker_id=self.worker_id, job_id=lease.message_id, queue=self.name, reason="shutdown"
            )

    def _give_back(self, lease: Lease, delay: int = 0) -> None:
        """Release now, or, during shutdown, once no poll of ours can take it again."""
        self.released += 1
        if self.stopping and delay == 0:
            self.deferred.append(lease)
        else:
            self.acker.change_visibility(lease, delay)

    def _dispatch(self, messages: list[dict[str, Any]], sent: float) -> None:
        now_wall = time.time()
        self.received_since_sample += len(messages)
        runs: list[Run] = []
        for message in messages:
            lease = Lease(message["MessageId"], message["ReceiptHandle"], sent, sent + self.options.visibility)
            self.keeper.add(lease)
            run = Run(message, lease, asyncio.get_running_loop().create_future())
            lease.on_lost = lambda _why, r=run: r.abort("lease_lost")
            self.runs.add(run)
            runs.append(run)
            attrs = message.get("Attributes", {})
            receive_count = int(attrs.get("ApproximateReceiveCount", "1"))
            self._receive_count.observe(receive_count)
            if "SentTimestamp" in attrs:
                age = max(0.0, now_wall - int(attrs["SentTimestamp"]) / 1000)
                self._age.observe(age)
                self.received_oldest_age = max(self.received_oldest_age, age)
            self.events.emit("job:claimed", worker_id=self.worker_id, job_id=message["MessageId"], queue=self.name)
        if not self.info.fifo:
            for run in runs:
                run.task = asyncio.create_task(self._run(run), name=f"job-{run.lease.message_id}")
                run.task.add_done_callback(functools.partial(self._forget, run))
            return
        groups: dict[str, list[Run]] = {}
        for run in runs:
            group = run.message.get("Attributes", {}).get("MessageGroupId", "")
            groups.setdefault(group, []).append(run)
        for members in groups.values():
            task = asyncio.create_task(self._run_group(members))
            self._groups.add(task)
            task.add_done_callback(self._groups.discard)

    def _forget(self, run: Run, _task: object = None) -> None:
        self.runs.discard(run)

    async def _run_group(self, members: list[Run]) -> None:
        """FIFO: one at a time, in order; a failure holds back the rest of the group.

        The rest of a failed message's group becomes visible again together with it (same
        delay), so it cannot be received ahead of the failed message even by an emulator
        that does not keep a group locked while one of its messages is in flight.
        """
        blocked = False
        hold = 0
        for run in members:
            if blocked or self.stopping or run.lease.state != "held":
                await self._release_unstarted(run, "group held back" if blocked else "shutdown", hold)
                continue
            run.task = asyncio.create_task(self._run(run), name=f"job-{run.lease.message_id}")
            outcome = await asyncio.shield(run.task)
            self.runs.discard(run)
            blocked = outcome not in ("success", "dead_letter")
            hold = run.retry_delay if outcome in ("retry", "timeout") else 0

    async def _release_unstarted(self, run: Run, reason: str, delay: int = 0) -> None:
        self.runs.discard(run)
        if run.lease.state == "held":
            self._give_back(run.lease, delay)
        self.slots.release()
        self.events.emit(
            "job:released", worker_id=self.worker_id, job_id=run.lease.message_id, queue=self.name, reason=reason
        )

    # -- running one message ---------------------------------------------------

    async def _run(self, run: Run) -> Outcome:
        message = run.message
        attrs = message.get("Attributes", {})
        receive_count = int(attrs.get("ApproximateReceiveCount", "1"))
        bind_job(job_id=message["MessageId"], queue=self.name, receive_count=receive_count)
        if self.stopping and run.lease.state == "held":
            await self._release_unstarted(run, "shutdown")  # received, never started
            return "released"
        try:
            payload = parse_payload(self.spec.payload, message.get("Body", ""))
        except PayloadError as exc:
            self.slots.release()
            run.outcome = await self._dead_letter(run, exc, receive_count)
            self._record(run, run.outcome, 0.0, exc)
            return run.outcome
        max_receive = self.info.max_receive_count
        job: Job[Any] = Job(
            id=message["MessageId"],
            queue=self.name,
            body=message.get("Body", ""),
            payload=payload,
            attributes=dict(attrs),
            message_attributes=dict(message.get("MessageAttributes") or {}),
            receive_count=receive_count,
            max_retries=None if max_receive is None else max_receive - 1,
            worker_id=self.worker_id,
            logger=get_logger(),
            _cancel_flag=threading.Event(),
            _stop_flag=threading.Event(),
            _on_progress=self._progress_reporter(message["MessageId"]),
        )
        run.job = job
        if self.options.log_payloads:
            log.info("job payload", extra={"body": job.body})
        self.events.emit("job:started", worker_id=self.worker_id, job_id=job.id, queue=self.name)
        run.started = time.monotonic()
        self._inflight.inc()
        work = self._invoke(job, run)

        done, _ = await asyncio.wait(
            {work, run.aborted}, timeout=self.options.job_timeout, return_when=asyncio.FIRST_COMPLETED
        )
        duration = time.monotonic() - run.started
        error: BaseException | None = None
        if work in done:
            # A handler's own cancellation (it was cancelled, not by us) counts as a failure.
            error = asyncio.CancelledError() if work.cancelled() else work.exception()
            outcome: Outcome = classify(error)
        else:
            reason = run.aborted.result() if run.aborted.done() else "timeout"
            job._cancel(reason)
            work.cancel()
            outcome = {"shutdown": "released", "timeout": "timeout"}.get(reason, "lease_lost")  # type: ignore[assignment]
            if outcome == "timeout":
                error = TimeoutError(f"job exceeded its timeout of {self.options.job_timeout:g} s")
        self.health.progress(self.name)
        run.outcome = await self._settle(run, outcome, error, receive_count)
        self._record(run, run.outcome, duration, error)
        return run.outcome

    def _invoke(self, job: Job[Any], run: Run) -> asyncio.Future[Any]:
        """Start the handler; the slot is freed when the work really ends (threads too)."""
        loop = asyncio.get_running_loop()

        def finished(_: object = None) -> None:
            if not run.handler_done:
                run.handler_done = True
                self.handlers_running -= 1
                self._inflight.dec()
                self.slots.release()

        self.handlers_running += 1
        fut: asyncio.Future[Any]
        if self.spec.mode == "async":
            fut = asyncio.ensure_future(self.spec.fn(job))
            fut.add_done_callback(finished)
            return fut
        if self.spec.mode == "thread":
            assert self.thread_pool is not None
            cf = self.thread_pool.submit(contextvars.copy_context().run, call_sync, self.spec.fn, job)
        else:
            assert self.process_pool is not None
            cf = self.process_pool.submit(call_sync, self.spec.fn, job)
        cf.add_done_callback(lambda _f: loop.call_soon_threadsafe(finished))
        return asyncio.wrap_future(cf, loop=loop)

    async def _settle(self, run: Run, outcome: Outcome, error: BaseException | None, receive_count: int) -> Outcome:
        lease = run.lease
        if lease.state == "lost":
            return "lease_lost"  # whatever the handler did, this delivery is no longer ours
        if outcome == "success":
            self.acker.delete(lease)  # the acker batches it; the keeper extends until confirmed
        elif outcome in ("retry", "timeout"):
            await self._retry_later(run, receive_count)
        elif outcome == "dead_letter":
            assert error is not None
            return await self._dead_letter(run, error, receive_count)
        elif outcome == "released" and lease.state == "held":
            self._give_back(lease)
        # lease_lost: the handle is not ours any more; touch nothing.
        return outcome

    async def _retry_later(self, run: Run, receive_count: int) -> None:
        lease = run.lease
        if lease.state != "held":
            return
        max_receive = self.info.max_receive_count
        if max_receive is not None and receive_count >= max_receive:
            delay = 0  # next receive moves it to the DLQ; no point waiting
        else:
            cap = min(self.options.retry_max, 43_000)
            delay = round(backoff_delay(receive_count, self.options.retry_base, cap))
        run.retry_delay = delay
        self.acker.change_visibility(lease, delay)

    async def _dead_letter(self, run: Run, error: BaseException, receive_count: int) -> Outcome:
        """Non-retryable: DLQ with the error recorded, then delete. Never delete first."""
        if self.info.dlq_url is None:
            log.error(
                "non-retryable failure but the queue has no DLQ (RedrivePolicy); retrying instead",
                extra={"queue": self.name},
            )
            await self._retry_later(run, receive_count)
            return "retry"
        request = dead_letter_request(run.message, self.info.dlq_url, self.name, error, self.worker_id, self.info.fifo)
        try:
            await send_to_dlq(self.client, request)
        except Exception as exc:
            metrics.SQS_CALLS.labels("SendMessage", error_code(exc)).inc()
            log.error(
                "could not send to the DLQ (%s); the message will be retried instead", exc, extra={"queue": self.name}
            )
            await self._retry_later(run, receive_count)
            return "retry"
        metrics.SQS_CALLS.labels("SendMessage", "ok").inc()
        metrics.DLQ_SENDS.labels(self.name).inc()
        if run.lease.state == "held":
            self.acker.delete(run.lease)
        return "dead_letter"

    def _record(self, run: Run, outcome: Outcome, duration: float, error: BaseException | None) -> None:
        self._processed[outcome].inc()
        job_id = run.lease.message_id
        if outcome != "released" and run.started:
            self._duration.observe(duration)
        if outcome == "success":
            log.debug("job completed in %.3f s", duration)
            self.events.emit(
                "job:completed",
                worker_id=self.worker_id,
                job_id=job_id,
                queue=self.name,
                result=None,
                duration=duration,
            )
        elif outcome in ("released", "lease_lost"):
            log.info("job released unsettled (%s)", outcome)
            self.events.emit("job:released", worker_id=self.worker_id, job_id=job_id, queue=self.name, reason=outcome)
        else:
            max_receive = self.info.max_receive_count
            exhausted = max_receive is not None and run_receive_count(run) >= max_receive
            will_retry = outcome in ("retry", "timeout") and not exhausted
            log.warning(
                "job failed (%s): %s", outcome, _describe(error), exc_info=error if outcome == "retry" else None
            )
            self.events.emit(
                "job:failed",
                worker_id=self.worker_id,
                job_id=job_id,
                queue=self.name,
                error=error,
                will_retry=will_retry,
                outcome=outcome,
            )

    def _progress_reporter(self, job_id: str) -> Callable[[float, str | None], None]:
        loop = asyncio.get_running_loop()

        def report(percent: float, message: str | None) -> None:
            def emit() -> None:
                self.health.progress(self.name)
                self.events.emit(
                    "job:progress",
                    worker_id=self.worker_id,
                    job_id=job_id,
                    queue=self.name,
                    percent=percent,
                    message=message,
                )

            if threading.get_ident() == self._loop_thread:
                emit()
            else:
                loop.call_soon_threadsafe(emit)

        return report


def parse_payload(model: type[Any] | None, body: str) -> Any:
    """Body -> payload; anything that does not parse is a PayloadError (dead-lettered).

    The error says what is wrong and where, never quoting the body: it is logged, and a
    body is only logged with LOG_PAYLOADS. Nesting too deep for the parser is an error like
    any other (json raises RecursionError for it)."""
    if model is str:
        return body
    try:
        if model is None:
            return json.loads(body)
        assert issubclass(model, BaseModel)
        return model.model_validate_json(body)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'body'}: {error['msg']}"
            for error in exc.errors(include_url=False, include_input=False, include_context=False)
        )
        raise PayloadError(
            f"payload does not match {model.__name__ if model else 'JSON'}: {exc.error_count()} error(s): {problems}"
        ) from None
    except (ValueError, TypeError, RecursionError) as exc:
        raise PayloadError(f"body is not valid JSON: {exc}") from None


def run_receive_count(run: Run) -> int:
    return int(run.message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))


def _describe(error: BaseException | None) -> str:
    return "" if error is None else f"{type(error).__name__}: {error}"
