"""Handler slots and the bound on held messages: what a poller must reserve before it
receives, so that nothing is held that cannot start at once."""

from __future__ import annotations

import asyncio

BATCH_WAIT = 0.002  # seconds a poller waits for a fuller batch of free slots (Slots.reserve)


class Slots:
    """Handler slots and the bound on held messages; pollers reserve both before they receive."""

    def __init__(self, handlers: int, held: int) -> None:
        self.capacity = handlers
        self.held_limit = held
        self.in_use = 0  # handler slots: reserved, waiting or running
        self.held = 0  # messages reserved or held, until settled, released or lost
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def free(self) -> int:
        return min(self.capacity - self.in_use, self.held_limit - self.held)

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
                self.held += n
                return n

    async def take_handler(self) -> None:
        """A held message that lent its handler slot out (parked, see tenants.py) takes one
        back before it runs, waiting for one if none is free."""
        loop = asyncio.get_running_loop()
        while self.capacity - self.in_use <= 0:
            await self._wait(loop, None)
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

    def handler_done(self) -> None:
        self.in_use -= 1
        self._wake_all()

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
