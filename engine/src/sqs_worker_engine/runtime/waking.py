"""Who waits for admission's state to change (admission.py): the pollers, one woken at a
time, and the line's timer for a change that comes by itself (a pause that ends, a rate
window that moves on)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Waker:
    def __init__(self, look: Callable[[], None]) -> None:
        self._look = look  # admission's look at its state: start whoever may, wake a poller
        self.pollers: list[asyncio.Future[None]] = []  # waiting for a change, longest first (written by change)
        self._timer: asyncio.TimerHandle | None = None  # the line's next look (written by at)
        self._soon = False  # a look is due on the loop's next turn (written by soon)

    def one(self) -> None:
        """Wake the poller that has waited longest. One, not all: pollers are alike (what
        one may ask for, any may), and a place freed by a job is one receive's worth at most;
        a poller that takes places while more are left wakes the next (`reserve`). Waking all
        of them for every freed place had tens race for it at high concurrency."""
        while self.pollers:
            waiter = self.pollers.pop(0)
            if not waiter.done():  # else its wait timed out: it looks anyway
                waiter.set_result(None)
                return

    def every(self) -> None:
        """Every poller, to see that it is done (the stop)."""
        while self.pollers:
            self.one()

    def soon(self) -> None:
        """One look on the loop's next turn for whatever changes before it (a batch of deletes)."""
        if not self._soon:
            self._soon = True
            asyncio.get_running_loop().call_soon(self._look_now)

    def _look_now(self) -> None:
        self._soon = False
        self._look()

    def at(self, delay: float) -> None:
        """Look again in `delay` seconds, unless a look is due sooner."""
        loop = asyncio.get_running_loop()
        if self._timer is not None:
            if self._timer.when() <= loop.time() + delay:
                return
            self._timer.cancel()
        self._timer = loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._look()

    async def change(self, loop: asyncio.AbstractEventLoop, at_most: float | None) -> None:
        """Until the state changes, or at most `at_most` seconds."""
        waiter = loop.create_future()
        self.pollers.append(waiter)
        timer = None if at_most is None else loop.call_later(at_most, _wake, waiter)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            if waiter in self.pollers:
                self.pollers.remove(waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
