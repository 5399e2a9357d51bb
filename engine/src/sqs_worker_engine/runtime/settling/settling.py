"""Settling: carrying out what `decisions.plan` decided for a message, through the acker
(which asks the lease book before every use of a handle).

- Delete (and, with WORKER_LARGE_PAYLOAD_DELETE, the offloaded payload, only once SQS
  confirmed the delete: nothing points at it any more).
- Retry after a delay, release, give back: one visibility change (`give_back`).
- Dead-letter: copy to the DLQ with the reason, then delete; never delete first. A failed
  DLQ send retries the message instead.

Shutdown. A long poll already out cannot be taken back: cancelling it would not stop it
inside SQS, where it still takes the next visible message and hides it for a whole
visibility timeout. So while a poll of ours is out, what is given back waits for it (at
most until the release cap), its lease kept meanwhile; past that, it is made visible only
once the poll has surely ended in SQS. The receiver keeps the record of its polls out
(receiving.Polls); settling reads it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from ...base import clock
from ...base.sqs import QueueInfo, SqsApi
from ...formats.dlq import dead_letter_request, fit_to_size
from ...formats.offload import PayloadStore, S3Pointer
from ..protections.reach import Kind
from ..reporting import QueueReport
from .acker import Acker
from .decisions import DeadLetter, Delete, Release, RetryAfter, RetryPolicy, Settlement, Untouched, retry_delay
from .delivery import Delivery, LeaseBook

log = logging.getLogger("sqs_worker_engine.pool")


class PollsOut(Protocol):
    """What settling reads of the pool's long polls out: the receiver's `Polls`
    (receiving.py), written by the pollers alone."""

    @property
    def out(self) -> Mapping[object, tuple[float, float]]: ...  # poller -> (SQS ends it, its client gives up)

    def release_delay(self, now: float) -> int: ...


def _pass_on(to: asyncio.Future[bool], result: asyncio.Future[bool]) -> None:
    if not to.done():
        to.set_result(result.result())


class Settler:
    def __init__(
        self,
        control: SqsApi,
        book: LeaseBook,
        info: QueueInfo,
        report: QueueReport,
        polls: PollsOut,
        *,
        retry: RetryPolicy,
        ack_flush: float,
        payloads: PayloadStore | None,
        delete_large_payloads: bool,
        worker_id: str,
        on_sqs: Callable[[Kind, bool], None],
        stopping: Callable[[], bool],
    ) -> None:
        """`on_sqs(kind, ok)`: told whether each settling call reached SQS; `stopping()`:
        the pool stops (its admission's fact)."""
        self.control = control
        self.book = book
        self.info = info
        self.report = report
        self.polls = polls  # read only: the receiver writes it
        self.stopping = stopping
        self.retry = retry
        self.payloads = payloads
        self.delete_large_payloads = delete_large_payloads
        self.worker_id = worker_id
        self.acker = Acker(control, book, info.url, ack_flush, on_sqs=on_sqs)
        # (delivery, delay, done): made visible once no poll of ours is out
        self.deferred: list[tuple[Delivery, int, asyncio.Future[bool]]] = []
        self._release_cap = 0.0  # written by stop
        self.polls_over = (
            False  # shutdown: every poll has answered, or the release cap passed (by _release_after_polls)
        )
        self._releaser: asyncio.Task[None] | None = None

    async def settle(
        self,
        delivery: Delivery,
        settlement: Settlement,
        *,
        attempt: int,
        error: BaseException | None,
        pointer: S3Pointer | None,
        trace: dict[str, str] | None,
        sent: Callable[[], None] = lambda: None,
    ) -> Settlement:
        """Carry out the settlement; returns what was done (a failed DLQ send retries).
        `sent()`: its delete's batch call goes out (admission may give its place back)."""
        if isinstance(settlement, Delete):
            deleted = await self.acker.delete(delivery, sent)
            if deleted and pointer is not None and self.payloads is not None and self.delete_large_payloads:
                await self.payloads.delete(pointer)
        elif isinstance(settlement, RetryAfter):
            await self.give_back(delivery, settlement.seconds)
        elif isinstance(settlement, Release):
            await self.give_back(delivery)
        elif isinstance(settlement, DeadLetter):
            return await self._dead_letter(delivery, settlement, attempt, error, trace, sent)
        return settlement

    async def _dead_letter(
        self,
        delivery: Delivery,
        settlement: DeadLetter,
        attempt: int,
        error: BaseException | None,
        trace: dict[str, str] | None,
        sent: Callable[[], None],
    ) -> Settlement:
        """Copy to the DLQ with the reason, then delete. The lease is kept (as if a delete
        were queued) while the copy is sent."""
        assert self.info.dlq_url is not None
        if not self.book.settling(delivery, "delete", clock.now()):
            return Untouched()
        request = dead_letter_request(
            delivery.message,
            self.info.dlq_url,
            self.info.name,
            error if error is not None else RuntimeError(settlement.why),
            self.worker_id,
            self.info.fifo,
            settlement.why,
            trace=trace,
        )
        fitted = fit_to_size(request, self.info.dlq_max_size)
        try:
            if fitted is None:
                raise ValueError(f"the message does not fit the DLQ's MaximumMessageSize of {self.info.dlq_max_size}")
            await self.control.send_message(**fitted)
        except Exception as exc:
            delay = retry_delay(attempt, self.retry)
            self.report.dlq_send_failed(exc, delay)
            await self.give_back(delivery, delay)
            return RetryAfter(delay)
        self.report.dlq_sent()
        await self.acker.delete(delivery, sent)
        return settlement

    async def give_back(self, delivery: Delivery, seconds: int = 0) -> bool:
        """Make the message visible after `seconds`: now, or during shutdown, once no poll
        of ours is out that could take it (a poll that did would hide it for a whole
        visibility timeout, or run it here once more)."""
        if not self.stopping():
            return await self.acker.change_visibility(delivery, seconds)
        if self.polls.out and not self.polls_over:
            done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            self.deferred.append((delivery, seconds, done))
            if self._releaser is None:
                self._releaser = asyncio.create_task(self._release_after_polls())
            return await done
        return await self.acker.change_visibility(delivery, max(seconds, self.polls.release_delay(clock.now())))

    def stop(self, release_cap: float) -> None:
        """The pool stops (its admission says so: `stopping`): releases wait for the polls
        still out, at most until the loop time `release_cap`."""
        self._release_cap = release_cap

    async def _release_after_polls(self) -> None:
        """Wait until every poll of ours has answered (at most until its client gives up,
        or the release cap), then release whatever was given back meanwhile."""
        pending = [task for task in self.polls.out if isinstance(task, asyncio.Future)]
        if pending:
            end = min(self._release_cap, max(hard for _, hard in self.polls.out.values()))
            await asyncio.wait(pending, timeout=max(0.0, end - clock.now()))
        self.polls_over = True
        await self.release_deferred()

    async def release_deferred(self) -> None:
        deferred, self.deferred = self.deferred, []
        delay = self.polls.release_delay(clock.now())
        for delivery, seconds, done in deferred:
            self.acker.change_visibility(delivery, max(seconds, delay)).add_done_callback(
                functools.partial(_pass_on, done)
            )

    async def close(self) -> None:
        if self._releaser is not None:
            await self._releaser
        await self.release_deferred()
        await self.acker.close()
