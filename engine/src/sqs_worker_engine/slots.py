"""Handler slots and the bound on held messages: what a poller must reserve before it
receives, so that nothing is held that cannot start soon.

A place is what a poller reserves for each message it asks for: the concurrency's worth,
plus `prefetch` more (see prefetch.py) for messages received while every handler runs, so
that a handler that ends finds its next job already here instead of waiting a receive's
round trip. A job starts only with a handler slot (`start`), handed out in the order
they were asked for; with prefetch 0 there is always one free for a place's message.
"""

from __future__ import annotations

import asyncio
from collections import deque

BATCH_WAIT = 0.002  # seconds a poller waits for a fuller batch of free slots (Slots.reserve)


class Slots:
    """Places, handler slots and the bound on held messages; pollers reserve places and
    held room before they receive, jobs take a handler slot before they run."""

    def __init__(self, handlers: int, held: int, prefetch: int = 0) -> None:
        self.capacity = handlers
        self.held_limit = held
        self.prefetch = prefetch  # places beyond the concurrency (set as the pool measures)
        self.in_use = 0  # places: reserved, waiting or running
        self.running = 0  # handler slots taken (at most the capacity)
        self.held = 0  # messages reserved or held, until settled, released or lost
        self._waiters: list[asyncio.Future[None]] = []
        self._starts: deque[asyncio.Future[None]] = deque()  # jobs waiting for a handler slot

    @property
    def free(self) -> int:
        return min(self.capacity + self.prefetch - self.in_use, self.held_limit - self.held)

    @property
    def waiting(self) -> int:
        """Jobs received and waiting for a handler slot (prefetched)."""
        return len(self._starts)

    def try_start(self) -> bool:
        """Take a handler slot if one is free and no job waits for one before this."""
        if self.running < self.capacity and not self._starts:
            self.running += 1
            return True
        return False

    def queue_start(self) -> asyncio.Future[None]:
        """Wait for a handler slot: the future is done once one is handed over. Every such
        future ends with `handler_done(started=True)` (it ran) or `leave_start`."""
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._starts.append(turn)
        return turn

    def leave_start(self, turn: asyncio.Future[None]) -> None:
        """A waiting job goes without running: its place in line goes, a slot it was
        already handed passes on."""
        if turn.done():
            self._end_run()
        else:
            turn.cancel()
            self._starts.remove(turn)

    async def reserve(self, most: int) -> int:
        """Take between 1 and `most` free slots, waiting for one if none is free.

        Jobs that started together end together, but their slots come back one release
        at a time, spread over a millisecond or two. Taking the first free slot at once
        would spend a receive on it alone; waiting up to BATCH_WAIT for a full batch lets
        one receive serve the whole wave (SQS bills per request; in the benchmark this
        took requests per message from about 0.22 to 0.20 with several pollers, at no cost
        in throughput). It never waits for slots that are busy with longer jobs, unless
        prefetched messages wait for a slot anyway: then it waits for a whole batch.
        """
        loop = asyncio.get_running_loop()
        want = min(most, self.capacity)
        while True:
            # While received messages wait for a slot, no slot idles: ask for a whole
            # batch (a receive is billed the same for 1 message as for 10).
            while self.free <= 0 or (self._starts and self.free < min(most, self.prefetch)):
                await self._wait(loop, None)
            deadline = loop.time() + BATCH_WAIT
            while 0 < self.free < want and (left := deadline - loop.time()) > 0:
                await self._wait(loop, left)
            n = min(most, self.free)
            if n > 0:  # another poller may have taken them meanwhile
                self.in_use += n
                self.held += n
                return n

    def reclaim(self) -> None:
        """A held message that gave its place up (parked, see tenants.py) takes one back
        when its turn comes, at once: waiting for one could wait forever behind a poller
        that holds every free place in a long poll of an empty queue. Places may run over
        for a moment; the concurrency still holds, since a job needs a handler slot to run."""
        self.in_use += 1

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

    def unreserve(self, n: int) -> None:
        """Reserved for a receive that brought fewer messages (or none)."""
        self.in_use -= n
        self.held -= n
        self._wake_all()

    def handler_done(self, started: bool = False) -> None:
        """A place is given up; `started`: its job held a handler slot, which goes too."""
        self.in_use -= 1
        if started:
            self._end_run()
        self._wake_all()

    def _end_run(self) -> None:
        while self._starts:
            turn = self._starts.popleft()
            if not turn.done():
                turn.set_result(None)  # the slot changes hands: `running` stays
                return
        self.running -= 1

    def forget(self) -> None:
        self.held -= 1
        self._wake_all()

    def _wake_all(self) -> None:
        # Wake every waiting poller; each checks again (this runs once per finished job, so
        # it must stay cheap: no task, no lock).
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            _wake(waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
