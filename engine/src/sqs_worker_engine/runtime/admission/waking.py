"""Who waits for admission's state to change (admission.py): the pollers, one woken at a
time, and only one that would go on, and the line's timer for a change that comes by itself
(a pause that ends, a rate window that moves on)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

# What a waiting poller asks for: (most, in its wait for a fuller batch) (admission.reserve).
Ask = tuple[int, bool]


class Waker:
    def __init__(self, look: Callable[[], None], goes_on: Callable[[Ask], bool]) -> None:
        self._look = look  # admission's look at its state: start whoever may, wake a poller
        self._goes_on = goes_on  # would a poller with this ask go on now (admission's word)
        # Waiting for a change, longest first, with what each asks for (written by change).
        self.pollers: list[tuple[asyncio.Future[None], Ask]] = []
        self._timer: asyncio.TimerHandle | None = None  # the line's next look (written by at)
        self._soon = False  # a look is due on the loop's next turn (written by soon)
        self._one_due = False  # a poller is to be woken on the loop's next turn (written by one)

    def one(self) -> None:
        """Wake the poller that has waited longest among those that would go on, looking
        on the loop's next turn. One, not all: pollers are alike (what one may ask for, any
        may), and a place freed by a job is one receive's worth at most; a poller that
        takes places while more are left wakes the next (`reserve`). Waking all of them for
        every freed place had tens race for it at high concurrency; waking one that would
        only wait again (nine places of a batch of ten free) cost a wake-up a job. On the
        next turn, not now: a woken poller looked then, after whatever the change set off;
        looking at once left messages that never ended in the liveness property tests (a
        pause, a shared budget). And the changes of one turn are looked at together."""
        if not self._one_due:
            self._one_due = True
            asyncio.get_running_loop().call_soon(self._one_now)

    def _one_now(self) -> None:
        self._one_due = False
        verdicts: dict[Ask, bool] = {}  # pollers alike ask alike: admission is asked once an ask
        for i, (waiter, ask) in enumerate(self.pollers):
            if waiter.done():  # its wait timed out: it looks anyway
                continue
            goes_on = verdicts.get(ask)
            if goes_on is None:
                goes_on = verdicts[ask] = self._goes_on(ask)
            if goes_on:
                del self.pollers[i]
                waiter.set_result(None)
                return

    def every(self) -> None:
        """Every poller, to see that it is done (the stop)."""
        while self.pollers:
            waiter, _ = self.pollers.pop(0)
            if not waiter.done():
                waiter.set_result(None)

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

    async def change(self, loop: asyncio.AbstractEventLoop, at_most: float | None, ask: Ask) -> None:
        """Until the state changes so that a poller with `ask` would go on, or at most
        `at_most` seconds."""
        waiter = loop.create_future()
        entry = (waiter, ask)
        self.pollers.append(entry)
        timer = None if at_most is None else loop.call_later(at_most, _wake, waiter)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            if entry in self.pollers:  # timed out or cancelled: still listed
                self.pollers.remove(entry)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
