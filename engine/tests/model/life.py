"""Life events of the process, for the model's property suites (test_compositions.py,
test_shared_compositions.py): what happens to a worker besides its messages.

- the lifespan slow, failing or hanging, in its open or its close (the first worker's
  only: the platform then starts another, whose lifespan is healthy);
- SIGTERM in a phase of the worker's life rather than at a random time: while the
  lifespan opens, during a pause, while a queue waits with nothing running (a budget's or
  a rate limit's quiet spell), while a message settles;
- SQS failing for a spell, per call kind, then answering again; or refusing the deletes
  alone (a worker policy without sqs:DeleteMessage: AccessDenied) while it answers the
  rest; or losing a few receives' answers after handing their messages out (a dropped
  connection, at the worst moments: while a queue pauses, when a receive on several
  places answers and the next may get one, or from `outage_at`; a FIFO receive is then
  sent again with its ReceiveRequestAttemptId);
- a handler process dying (`executor="process"` handlers on `FakeProcesses`: a process
  pool on the loop's virtual time, in which a "crash" message kills its process).

And what the suites check of them (`Watch`): no job starts after SIGTERM; once SQS
answers again no queue still waits on it; no message is charged for a neighbour's crash;
the worker stays live whenever it can make progress (the check of the check plays a
handler that never ends, and liveness must fail on it). Of SQS refusing deletes and
answers lost, as each worker hears SQS through its own client (`Heard`): no job starts
from a refused delete until a delete is answered, and no receive sent meanwhile brings a
message (it would be charged a receive, towards the DLQ, for its neighbours' deletes);
no receive brings more messages than the places granted for it, and what a queue holds
stays within concurrency + prefetch (`watched_receives`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, Literal
from unittest import mock

from botocore.exceptions import EndpointConnectionError
from hypothesis import strategies as st

from sqs_worker_engine.base import clock
from sqs_worker_engine.base.telemetry.events import JobFailed
from sqs_worker_engine.doubles.memory import Fault, MemorySQS
from sqs_worker_engine.handlers.job import Job
from sqs_worker_engine.handlers.router import Router
from sqs_worker_engine.process.worker import StartupError, Worker, WorkerState
from sqs_worker_engine.runtime.admission.admission import Admission, Grant, Ticket
from sqs_worker_engine.runtime.handling import processes
from sqs_worker_engine.runtime.handling.processes import HandlerProcessDied
from sqs_worker_engine.runtime.settling.delivery import State

Lifespan = Literal["none", "slow_open", "failing_open", "hanging_open", "slow_close", "failing_close", "hanging_close"]
Phase = Literal["time", "opening", "paused", "quiet", "settling"]
CALL_KINDS = ("ReceiveMessage", "DeleteMessageBatch", "ChangeMessageVisibilityBatch", "SendMessage")
RECOVERY = 12.0  # seconds after SQS answers again by which no queue may still wait on it
PHASE_WAIT = 60.0  # seconds a SIGTERM waits for its phase before it goes anyway
OPEN_SECONDS = 20.0  # a slow lifespan's opening
CLOSE_SECONDS = 5.0  # a slow lifespan's close
STALLED_AFTER = "26"  # WORKER_STALLED_AFTER_SECONDS: above the job timeout and the long poll + 5 s
PROCESS_POOL = "2"  # WORKER_PROCESS_POOL_SIZE
CRASH_AFTER = 1.0  # seconds a "crash" message runs before its process dies
STARTUP = 2.5  # seconds a fake process pool takes to start its processes (a spawn, the handlers' imports)


@dataclass(frozen=True)
class Life:
    lifespan: Lifespan = "none"
    phase: Phase = "time"  # when SIGTERM comes, if it does
    outage: tuple[str, ...] = ()  # call kinds that fail from `outage_at` until SQS heals
    outage_at: float = 0.0
    processes: bool = False  # handlers in a process pool, where "crash" messages kill their process
    deletes_refused: bool = False  # the outage is DeleteMessageBatch's alone, refused (AccessDenied)
    lost_receives: int = 0  # answers lost after SQS handed their messages out (`Heard`)


@st.composite
def lives(draw: st.DrawFn, batch: bool) -> Life:
    lifespan: Lifespan = draw(
        st.sampled_from(
            [
                "none",
                "none",
                "none",
                "slow_open",
                "failing_open",
                "hanging_open",
                "slow_close",
                "failing_close",
                "hanging_close",
            ]
        )
    )
    phase: Phase = draw(st.sampled_from(["time", "time", "opening", "paused", "quiet", "settling"]))
    if lifespan == "hanging_open":
        phase = "opening"  # it never opens: only a SIGTERM ends it
    outage = tuple(draw(st.lists(st.sampled_from(CALL_KINDS), max_size=2, unique=True)))
    deletes_refused = draw(st.sampled_from([False, False, False, True]))
    return Life(
        lifespan=lifespan,
        phase=phase,
        outage=("DeleteMessageBatch",) if deletes_refused else outage,
        outage_at=draw(st.floats(0, 20)),
        processes=not batch and draw(st.booleans()),
        deletes_refused=deletes_refused,
        lost_receives=draw(st.sampled_from([0, 0, 1, 3])),
    )


def env(life: Life) -> dict[str, str]:
    return {
        "WORKER_STALLED_AFTER_SECONDS": STALLED_AFTER,
        **({"WORKER_PROCESS_POOL_SIZE": PROCESS_POOL} if life.processes else {}),
    }


def add_lifespan(router: Router, life: Life) -> None:
    """The router's lifespan: it misbehaves as `life` says in the first worker only."""
    opened: list[int] = []

    @router.lifespan
    async def resources() -> AsyncIterator[None]:
        first = not opened
        opened.append(1)
        how = life.lifespan if first else "none"
        if how == "failing_open":
            raise ConnectionRefusedError("the database refused the connection")
        if how in ("slow_open", "hanging_open"):
            await _sleep(OPEN_SECONDS if how == "slow_open" else 10 * 3600, stubborn=how == "hanging_open")
        try:
            yield
        finally:
            if how == "failing_close":
                raise ConnectionResetError("the pool's last connection reset while closing")
            if how in ("slow_close", "hanging_close"):
                await _sleep(CLOSE_SECONDS if how == "slow_close" else 10 * 3600, stubborn=how == "hanging_close")


async def _sleep(seconds: float, stubborn: bool) -> None:
    """Sleep; a stubborn sleeper swallows the first cancellation (a library that does)."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        if not stubborn:
            raise
        await asyncio.sleep(seconds)


class FakeProcesses(concurrent.futures.Executor):
    """A process pool of `size` on the loop's virtual time. Its processes take STARTUP
    seconds to start (a spawned process imports the handlers' modules). A job runs its
    handler when a process takes it (its side effects, its answer), the process says on
    `announce` that it begins it (as a real one does, processes.py), and the answer comes
    back after the seconds `plan(job)` gives; a job `plan` marks as a crash kills its
    process instead: every job of the pool, running or queued, fails with BrokenProcessPool
    and the pool takes no more (as Python's does). As CPython 3.12 and later do, a broken
    pool's futures are ended under the pool's own lock, which its `submit` and `shutdown`
    take: a done-callback that calls either would deadlock there, and fails here.
    `ended(job, ok)`: a job's process answered, or died."""

    def __init__(
        self,
        size: int,
        announce: Any,
        plan: Callable[[Job[Any]], tuple[float, bool]],
        ended: Callable[[Job[Any], bool], None],
    ) -> None:
        self.size = size
        self.announce = announce
        self.plan = plan
        self.ended = ended
        self.broken = False
        self._lock = threading.Lock()  # CPython's `_shutdown_lock`: not reentrant
        self._ready_at = clock.now() + STARTUP
        self._running: dict[concurrent.futures.Future[Any], Job[Any] | None] = {}
        self._queued: deque[tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...]]] = deque()

    def _locked(self, what: str) -> None:
        if not self._lock.acquire(blocking=False):
            raise AssertionError(f"{what} called while the pool's lock is held: on CPython 3.12+ a deadlock")
        self._lock.release()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        self._locked("submit")
        if self.broken:
            raise BrokenProcessPool("a process in the pool was terminated abruptly")
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._queued.append((future, fn, args))
        loop = asyncio.get_running_loop()
        loop.call_at(max(self._ready_at, loop.time()), self._next)
        return future

    def _next(self) -> None:
        loop = asyncio.get_running_loop()
        while len(self._running) < self.size and self._queued and not self.broken:
            future, fn, args = self._queued.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            if fn is not processes._begin:  # the pool's own first call (`_warm`)
                self._running[future] = None
                loop.call_soon(self._answer, future, (fn(*args), None))
                continue
            number, *work = args
            os.write(self.announce.fileno(), number.to_bytes(8, "little"))
            job: Job[Any] = work[-1]
            seconds, crash = self.plan(job)
            self._running[future] = job
            if crash:
                loop.call_later(seconds, self._break)
                continue
            try:
                answer: tuple[Any, BaseException | None] = (work[0](*work[1:]), None)
            except Exception as exc:  # the handler's own failure: the process answers with it
                answer = (None, exc)
            loop.call_later(seconds, self._answer, future, answer)

    def _answer(self, future: concurrent.futures.Future[Any], answer: tuple[Any, BaseException | None]) -> None:
        if future not in self._running:
            return  # the pool broke meanwhile
        job = self._running.pop(future)
        result, error = answer
        if job is not None:
            self.ended(job, error is None)
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)
        self._next()

    def _break(self) -> None:
        if self.broken:
            return
        self.broken = True
        running, self._running = self._running, {}
        queued, self._queued = self._queued, deque()
        with self._lock:
            for future, job in running.items():
                if job is not None:
                    self.ended(job, False)
                future.set_exception(BrokenProcessPool("a process in the pool was terminated abruptly"))
            for future, _, _ in queued:
                if not future.cancelled():
                    future.set_exception(BrokenProcessPool("a process in the pool was terminated abruptly"))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._locked("shutdown")
        if cancel_futures:
            for future, _, _ in self._queued:
                future.cancel()
            self._queued.clear()


def owner(workers: list[Worker], admission: Any) -> Worker | None:
    return next((w for w in workers if any(p.admission is admission for p in w.pools)), None)


def phase_now(worker: Worker, phase: Phase) -> bool:
    """Is `worker` in `phase` now?"""
    if phase == "opening":
        return worker.state is WorkerState.STARTING and worker.pools != [] and worker.resources is None
    if worker.state is not WorkerState.RUNNING:
        return False
    pools = worker.pools
    if phase == "paused":
        return any(p.admission.breaker.paused for p in pools)
    if phase == "quiet":
        return any(p.admission.waiting and not p.admission.running for p in pools)
    if phase == "settling":
        return any(d.state is State.SETTLING for p in pools for d in p.book)
    return True


async def when(worker: Worker, phase: Phase) -> None:
    """Until `worker` is in `phase` (at most PHASE_WAIT seconds)."""
    deadline = clock.now() + PHASE_WAIT
    while not phase_now(worker, phase) and clock.now() < deadline:
        await asyncio.sleep(0.05)


@dataclass
class Watch:
    """What the suites check of life events, as the run goes."""

    problems: list[str] = field(default_factory=list)
    healed_at: float | None = None  # when SQS answered again after an outage
    heard: dict[int, Heard] = field(default_factory=dict)  # id(worker) -> its client (`hear`)

    def take(self, workers: list[Worker], admission: Any) -> None:
        """A job takes a slot: never in a worker that was told to stop."""
        worker = owner(workers, admission)
        if worker is not None and worker._stop_reason:
            self.problems.append(f"a job started after the worker was stopped ({worker._stop_reason})")
        self._started_while_refused(worker, admission)

    def failed(self, kinds: Callable[[str], str | None]) -> Callable[[JobFailed], None]:
        """A `job:failed` listener: a message is charged only for its own crash."""

        def listener(event: JobFailed) -> None:
            error = event.get("error")
            kind = kinds(str(event.get("job_id")))
            if isinstance(error, (BrokenProcessPool, HandlerProcessDied)) and kind != "crash":
                self.problems.append(f"a {kind} message was charged for a process that died ({type(error).__name__})")

        return listener

    def sample(self, workers: list[Worker]) -> None:
        """Liveness while a worker runs, and SQS's recovery seen by every queue."""
        now = clock.now()
        for worker in workers:
            if worker.state is not WorkerState.RUNNING or worker._stop_reason:
                continue
            if not worker.health.live():
                self.problems.append(f"not live at {now:.1f} s ({worker.health.stalled_for():.1f} s without progress)")
            if self.healed_at is not None and now > self.healed_at + RECOVERY:
                # A queue holding messages that wait to start must have heard SQS answer
                # (its lease keeper asks again within seconds); with nothing held, its next
                # receive's answer says so, and no message waits on it meanwhile.
                waiting = [p.name for p in worker.pools if not p.admission.sqs_ok and p.admission.waiting]
                if waiting:
                    self.problems.append(
                        f"SQS answered again at {self.healed_at:.1f} s, {waiting} still wait at {now:.1f} s"
                    )

    # -- SQS refusing deletes, receives sent again (Heard, watched_receives) -------------

    def hear(self, worker: Worker, client: Heard) -> None:
        """`client` is the one `worker` was made with: what it heard of SQS is judged."""
        self.heard[id(worker)] = client
        client.worker = worker

    def _started_while_refused(self, worker: Worker | None, admission: Any) -> None:
        """A start from a refused delete until a delete is answered, in its queue: its job
        could not delete its message, which comes back charged a receive."""
        client = self.heard.get(id(worker)) if worker is not None else None
        pool = next((p for p in worker.pools if p.admission is admission), None) if worker is not None else None
        if client is not None and pool is not None and client.refused_since(pool.url, clock.now()):
            self.problems.append(f"a job of {pool.name} started after a refused delete, before one was answered")

    def received(self, admission: Any, places: int, got: int) -> None:
        """A receive was answered: never more messages than its places, nor more held than
        the concurrency + the prefetch cap."""
        if got > places:
            self.problems.append(f"a receive on {places} places brought {got} messages")
        if admission.held > admission.held_limit:
            self.problems.append(f"{admission.held} held, more than {admission.held_limit} (concurrency + prefetch)")


class Heard:
    """A worker's client onto the shared model, as that worker hears SQS: per queue, since
    when its deletes are refused (the first refused since one was answered); a receive it
    sends meanwhile that brings messages is a problem (a receive sent again with its
    attempt id brings those of its first send: no new receive). It loses the answers of
    `events.lost_receives` receives that bring messages (SQS handed them out; the
    connection dropped): while a queue of the worker pauses, or from `outage_at`."""

    def __init__(self, sqs: MemorySQS, problems: list[str], events: Life) -> None:
        self.sqs = sqs
        self.problems = problems
        self.refused: dict[str, float] = {}  # queue url -> when a delete was first refused, none answered since
        self.attempts: set[str] = set()  # the ReceiveRequestAttemptIds it sent
        self.losing = events.lost_receives  # answers still to lose
        self.lose_from = events.outage_at  # loop time from which it loses them anyway
        self.worker: Worker | None = None  # set by Watch.hear

    def refused_since(self, url: str, now: float) -> bool:
        """Its deletes on `url` were refused before `now`, and none answered since. (At the
        very instant of the refusal the worker may not have read it yet.)"""
        since = self.refused.get(url)
        return since is not None and now > since

    async def delete_message_batch(self, *args: Any, **params: Any) -> Any:
        try:
            answer = await self.sqs.delete_message_batch(**params)
        except Exception:
            self.refused.setdefault(params["QueueUrl"], clock.now())
            raise
        self.refused.pop(params["QueueUrl"], None)
        return answer

    async def receive_message(self, *args: Any, **params: Any) -> Any:
        attempt = params.get("ReceiveRequestAttemptId")
        again = attempt in self.attempts
        if attempt is not None:
            self.attempts.add(attempt)
        refused = self.refused_since(params["QueueUrl"], clock.now())
        answer = await self.sqs.receive_message(**params)
        if refused and not again and answer.get("Messages"):
            self.problems.append(
                f"a receive sent after a refused delete, before one was answered, brought "
                f"{len(answer['Messages'])} messages: each charged a receive it could not use"
            )
        if self.losing and answer.get("Messages") and self._worst_moment(len(answer["Messages"])):
            self.losing -= 1
            raise EndpointConnectionError(endpoint_url=params["QueueUrl"])
        return answer

    def _worst_moment(self, brought: int) -> bool:
        """While a queue pauses (the next receive is its probe, on one place), when a
        receive on several places answers, or from `lose_from` whatever it brings."""
        pools = self.worker.pools if self.worker is not None else []
        return any(p.admission.breaker.paused for p in pools) or brought > 1 or clock.now() >= self.lose_from

    async def get_queue_url(self, *args: Any, **params: Any) -> Any:
        return await self.sqs.get_queue_url(**params)

    async def get_queue_attributes(self, *args: Any, **params: Any) -> Any:
        return await self.sqs.get_queue_attributes(**params)

    async def change_message_visibility_batch(self, *args: Any, **params: Any) -> Any:
        return await self.sqs.change_message_visibility_batch(**params)

    async def send_message(self, *args: Any, **params: Any) -> Any:
        return await self.sqs.send_message(**params)


@contextlib.contextmanager
def watched_receives(watch: Watch) -> Iterator[None]:
    """Every receive's answer is judged (`Watch.received`) while this holds."""
    received = Admission.received

    def judged(admission: Admission, grant: Grant, got: int) -> list[Ticket]:
        tickets = received(admission, grant, got)
        watch.received(admission, grant.places, got)
        return tickets

    with mock.patch.object(Admission, "received", judged):
        yield


def process_plan(job: Job[Any]) -> tuple[float, bool]:
    """How long a composition's message runs in its process, and whether it kills it."""
    kind = job.payload["kind"]
    if kind == "crash":
        return CRASH_AFTER, True
    return {"slow": 14.0, "lost": 12.0}.get(kind, 0.2), False


@contextlib.contextmanager
def fake_processes(
    ended: Callable[[Job[Any], bool], None], plan: Callable[[Job[Any]], tuple[float, bool]] = process_plan
) -> Iterator[None]:
    """Process pools made while this holds are FakeProcesses (`plan`)."""
    with mock.patch.object(
        processes, "spawn_executor", lambda size, announce: FakeProcesses(size, announce, plan, ended)
    ):
        yield


async def failed_to_open(running: Any, sqs: Any) -> None:
    """The first worker's lifespan refused to open: it exits as a start-up error, having
    received nothing (the platform then starts another)."""
    try:
        await running.task
    except StartupError:
        pass
    else:
        raise AssertionError("a worker whose lifespan failed to open did not refuse to start")
    assert sqs.receipts == {}, f"a worker whose lifespan failed received {sqs.receipts}"


async def outage(sqs: Any, events: Life) -> None:
    """SQS fails these calls from `outage_at` until it heals (the scenario heals it)."""
    if not events.outage:
        return
    await asyncio.sleep(events.outage_at)
    for operation in events.outage:
        sqs.faults[operation] = Fault(error="AccessDenied" if events.deletes_refused else "ServiceUnavailable")


async def sigterm_moment(worker: Worker, events: Life, at: float | None) -> bool:
    """Wait for the moment SIGTERM comes, if it does: `at` seconds in, or the worker's
    phase. A lifespan that hangs in its open is always stopped while it opens."""
    if events.lifespan == "hanging_open":
        await when(worker, "opening")
        return True
    if at is None:
        return False
    if events.phase == "opening" and events.lifespan != "slow_open":
        await asyncio.sleep(at)  # no opening to catch: the time it was given
    elif events.phase == "time":
        await asyncio.sleep(at)
    else:
        await when(worker, events.phase)
    return True


_tally: dict[str, int] = {}


def tally(events: Life, sigterm: bool, kinds: Any) -> None:
    """Count what a suite played (`told`)."""
    played = [
        f"lifespan {events.lifespan}" if events.lifespan != "none" else "",
        f"SIGTERM {events.phase}" if sigterm or events.lifespan == "hanging_open" else "",
        *(f"outage {kind}" for kind in events.outage if not events.deletes_refused),
        "deletes refused" if events.deletes_refused else "",
        "receive answers lost" if events.lost_receives else "",
        "a handler process dying" if events.processes and any(k == "crash" for k, _ in kinds) else "",
        "process pool" if events.processes else "",
    ]
    for name in filter(None, played):
        _tally[name] = _tally.get(name, 0) + 1


def told() -> str:
    return ", ".join(f"{name} {n}" for name, n in sorted(_tally.items())) or "none"


async def ignore_cancellation(seconds: float) -> None:
    """A handler that ignores its cancellation for `seconds` (its timeout, a lost lease)."""
    until = clock.now() + seconds
    while clock.now() < until:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(until - clock.now())
