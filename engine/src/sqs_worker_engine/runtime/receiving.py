"""One queue's receiving: its pollers, each asking admission how many messages it may ask
for (admission.py) and SQS for at most that many, until the stop.

What comes back is handed to the pool with a ticket per message (`on_messages`). A poll
that fails waits with backoff and tries again; one that comes back empty keeps polling if
it is the lead poller, and otherwise waits until a receive brings messages again, so an
idle queue costs one long poll at a time, not one per poller.

FIFO: a receive that failed is sent again as it was, by the same poller after its
backoff: with its ReceiveRequestAttemptId, so that messages SQS handed out in an answer
never read come back at once (SQS answers with the same messages and restarts their
visibility timeout), not after their visibility timeout with their whole group held
behind them; and for the same number, on the places granted for it, held meanwhile. SQS
answers a retry with the first attempt's messages whatever it asks for: a retry sent on
fewer places (another poller's grant, or one made after the pause, the adaptive limit or
the jobs left had shrunk) would bring more messages than places, and admission would hold
more than its bounds. The places are the first attempt's, so the retry goes out even
where admission would now grant none (a pause, deletes failing): it is not another receive.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..base import clock
from ..base.backoff import Backoff
from ..base.limits import MAX_RECEIVE_BATCH, RECEIVE_ATTEMPT_SECONDS
from ..base.sqs import SqsApi
from .admission.admission import Admission, Grant, Ticket
from .protections.reach import Kind
from .reporting import QueueReport

RESPONSE_ALLOWANCE = 1.0  # seconds a ReceiveMessage response may spend in transit
POLL_END_ALLOWANCE = 2.0  # seconds past WaitTimeSeconds by which SQS has surely ended a poll
# With WORKER_WAIT_TIME_SECONDS=0 an empty queue answers at once; a poller waits this long
# before asking again (a long poll would wait up to 20 s on SQS's side instead).
EMPTY_SHORT_POLL_PAUSE = 1.0
# (messages, a ticket each, when their visibility clock started)
OnMessages = Callable[[list[dict[str, Any]], list[Ticket], float], None]
# A FIFO receive is sent again at most this long after its first send: within SQS's window
# for its attempt id, with a long poll's time to spare.
RETRY_WITHIN = RECEIVE_ATTEMPT_SECONDS - 60


@dataclass(frozen=True, slots=True)
class Attempt:
    """One receive: the places granted for it; on a FIFO queue, its ReceiveRequestAttemptId."""

    grant: Grant
    attempt_id: str | None
    first_sent: float  # loop time it was first sent


def retried(attempt: Attempt, now: float) -> bool:
    """Whether a receive that failed is sent again as it was (see above): on a FIFO queue,
    while SQS still knows its attempt id."""
    return attempt.attempt_id is not None and now - attempt.first_sent < RETRY_WITHIN


@dataclass
class Polls:
    """The pool's long polls out: poller -> (when SQS ends it, when its client gives up).
    Written by the pollers only; the settler reads it (settling.py: what is given back at
    the stop waits for them)."""

    wait_time: int
    poll_timeout: float
    out: dict[object, tuple[float, float]] = field(default_factory=dict)
    abandoned: list[tuple[float, float]] = field(default_factory=list)  # cancelled while still out

    def sent(self, poller: object, now: float) -> None:
        self.out[poller] = (now + self.wait_time + POLL_END_ALLOWANCE, now + self.poll_timeout)

    def answered(self, poller: object) -> None:
        self.out.pop(poller, None)

    def release_delay(self, now: float) -> int:
        """0, or while a poll of ours is still out (past the release cap, or abandoned):
        until that poll ends in SQS (or, if it is already late, until its client gives up
        on it), so that not even an abandoned poll can take the message."""
        ends = [sqs_end if now < sqs_end else hard for sqs_end, hard in [*self.out.values(), *self.abandoned]]
        return max(0, math.ceil(max(ends, default=now) - now))


class Receiver:
    def __init__(
        self,
        client: SqsApi,
        url: str,
        admission: Admission,
        polls: Polls,
        report: QueueReport,
        *,
        wait_time: int,
        visibility: int,
        on_messages: OnMessages,
        on_sqs: Callable[[Kind, bool], None],
        on_full: Callable[[float], None] | None = None,
    ) -> None:
        """`on_sqs("receive", ok)`: whether each receive reached SQS (reach.py);
        `on_full(seconds)`: a receive came back with all it asked for in `seconds` (it did
        not wait in a long poll): the prefetch's round trip (prefetch.py)."""
        self.client = client
        self.url = url
        self.admission = admission
        self.polls = polls  # our long polls out: written here only (settling.py reads them)
        self.report = report
        self.wait_time = wait_time
        self.visibility = visibility
        self.on_messages = on_messages
        self.on_sqs = on_sqs
        self.on_full = on_full
        self.tasks: list[asyncio.Task[None]] = []
        self.fifo = url.endswith(".fifo")
        self.backing_off = 0  # pollers waiting to try again after a receive failed
        self._has_work = asyncio.Event()  # the queue had messages at the latest receive
        self._has_work.set()

    def start(self, pollers: int, name: str) -> None:
        self.tasks = [
            asyncio.create_task(self._poll_forever(lead=i == 0), name=f"poller-{name}-{i}") for i in range(pollers)
        ]

    @property
    def stopping(self) -> bool:
        return self.admission.stopping  # one fact: admission stops receiving and starting at once

    def stop(self) -> None:
        """Admission has stopped: the idle pollers wake to see that they are done."""
        self._has_work.set()

    async def wait(self, cap: float) -> None:
        """WORKER_DRAIN_POLLS: let the last polls answer, until the loop time `cap`."""
        pending = [task for task in self.tasks if not task.done()]
        if pending:
            await asyncio.wait(pending, timeout=max(0.0, cap - clock.now()))

    async def cancel(self) -> None:
        """Cancel whatever poll is still waiting (an idle queue): the drain is over."""
        self.polls.abandoned = list(self.polls.out.values())
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _reserve(self) -> Attempt | None:
        """Places for a new receive (None: the pollers stop), and its attempt id (FIFO)."""
        grant = await self.admission.reserve(MAX_RECEIVE_BATCH)
        if self.stopping or not grant.places:
            self.admission.received(grant, 0)
            return None
        return Attempt(grant, uuid.uuid4().hex if self.fifo else None, clock.now())

    def _failed(self, attempt: Attempt) -> Attempt | None:
        """A receive failed: the attempt to send again after the backoff, its places held
        (FIFO, `retried`), or None, its places given back."""
        if retried(attempt, clock.now()):
            return attempt
        self.admission.received(attempt.grant, 0)
        return None

    async def _poll_forever(self, lead: bool) -> None:
        backoff = Backoff(base=0.5, cap=20.0)
        retry: Attempt | None = None  # FIFO: a receive that failed, sent again as it was
        try:
            while not self.stopping:
                attempt, retry = retry or await self._reserve(), None
                if attempt is None:
                    return
                sent = clock.now()
                messages = await self._receive(attempt, sent)
                if isinstance(messages, Exception):
                    retry = self._failed(attempt)
                    await self._wait_out(messages, backoff)
                    continue
                backoff.reset()
                grant = attempt.grant
                if self.admission.slot_free():  # with every slot held, only a job's end is progress (health.py)
                    self.report.receive_ok()
                self.on_sqs("receive", True)
                tickets = self.admission.received(grant, len(messages))
                if len(messages) == grant.places and self.on_full is not None:
                    self.on_full(clock.now() - sent)  # a full answer did not wait in a long poll
                if messages:
                    # SQS starts a message's visibility clock when it hands the message out: during
                    # a long poll, that is just before the response, not when the request was sent
                    # (a FIFO receive sent again restarts it: see above). Allow a second for the
                    # response in transit, never later than the send.
                    self.on_messages(messages, tickets, max(sent, clock.now() - RESPONSE_ALLOWANCE))
                    self._has_work.set()
                elif self.stopping:
                    return  # answered after the stop: nothing more to wait for (WORKER_DRAIN_POLLS)
                elif not lead:
                    self._has_work.clear()
                    await self._has_work.wait()
                elif self.wait_time == 0:
                    await asyncio.sleep(EMPTY_SHORT_POLL_PAUSE)  # a short poll answers at once: do not spin
        finally:
            if retry is not None:  # the stop came while it waited to be sent again
                self.admission.received(retry.grant, 0)

    async def _wait_out(self, exc: Exception, backoff: Backoff) -> None:
        """A receive failed: wait with backoff before the next."""
        delay = backoff.next_delay()
        self.report.receive_failed(exc, delay)
        self.on_sqs("receive", False)
        self.backing_off += 1  # waiting out an outage: the pool rests (health.py)
        try:
            await asyncio.sleep(delay)
        finally:
            self.backing_off -= 1

    async def _receive(self, attempt: Attempt, sent: float) -> list[dict[str, Any]] | Exception:
        """One ReceiveMessage for the attempt's places: the messages, or why it failed."""
        me = asyncio.current_task()
        self.polls.sent(me, sent)
        try:
            resp = await self.client.receive_message(
                QueueUrl=self.url,
                MaxNumberOfMessages=attempt.grant.places,
                WaitTimeSeconds=self.wait_time,
                VisibilityTimeout=self.visibility,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
                **({} if attempt.attempt_id is None else {"ReceiveRequestAttemptId": attempt.attempt_id}),
            )
        except asyncio.CancelledError:
            self.admission.received(attempt.grant, 0)
            raise
        except Exception as exc:
            return exc
        finally:
            self.polls.answered(me)
        return [dict(m) for m in resp.get("Messages", [])]
