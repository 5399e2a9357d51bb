"""Run to completion: a worker that exits on its own, after WORKER_MAX_JOBS jobs or after
WORKER_IDLE_EXIT_SECONDS with nothing received, so that an autoscaler's scale-in (a KEDA
ScaledJob, one job per pod) never has to kill work.

A job is one message whose handler was called (its first call in this process): a FIFO
retry in place is the same job again, every message of a batch handler's call is a job
of its own, and a message that never reaches its handler (a control message, a payload
the model refuses, its lease lost while its S3 payload was read) is not one.

The count is the process's, shared by every queue's admission (admission.py), and it
bounds what is received: a place is promised to a job when a poller is granted it, and
stays promised while its message waits to start, so places granted plus messages held
and not started never exceed the jobs left. Once the last job has started nothing waits
and nothing more is received; once it has been settled the worker stops, through the
normal drain, with nothing running (so no job sees `job.stopping` because of it).

With several queues the jobs left are shared in turn: a queue whose pollers find them
all promised waits in line, and the next room goes to the first in line. Without the line
an empty queue's long polls took the room back the moment they gave it back, 20 s at a
time, and a queue with messages never got any (the model: 0 of 3 run in 600 s).

The decisions are the pure functions below; `Completion` only keeps the counts and the line.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from ...base import clock

log = logging.getLogger("sqs_worker_engine.completion")
MAX_JOBS_REACHED = "max jobs reached"
IDLE = "idle"
UNLIMITED = 1 << 62  # the room of a worker without WORKER_MAX_JOBS: more than any receive asks


def room(max_jobs: int | None, started: int, promised: int) -> int:
    """How many more places pollers may be granted: the jobs left, less those already
    promised (places out on a receive, messages held and not started)."""
    if max_jobs is None:
        return UNLIMITED
    return max(0, max_jobs - started - promised)


def turn(wanted: int, room: int, first: bool) -> int:
    """Places a queue's poller is granted: what it wants within the room, if it is first in
    line (or nobody waits); else none, and it waits in line."""
    if wanted <= 0 or room <= 0 or not first:
        return 0
    return min(wanted, room)


def jobs_done(max_jobs: int | None, started: int, holding: int) -> bool:
    """Every job the worker may run has started and none is held any more: time to exit."""
    return max_jobs is not None and started >= max_jobs and holding == 0


def idle_left(idle_exit: float | None, idle_since: float | None, now: float) -> float | None:
    """Seconds until the idle exit (0 or less: now), or None while it cannot come (no
    WORKER_IDLE_EXIT_SECONDS, or something is held: received, waiting, running, settling)."""
    if idle_exit is None or idle_since is None:
        return None
    return idle_since + idle_exit - now


@dataclass
class Completion:
    """The process's counts, kept by every queue's admission; `on_done(reason)` asks the
    worker to drain and stop (Worker.stop), once."""

    max_jobs: int | None
    idle_exit: float | None
    on_done: Callable[[str], None]
    started: int = 0  # jobs: messages whose handler was called
    promised: int = 0  # places granted to receives, plus messages held that have not started
    holding: int = 0  # messages held (received, not yet given back or settled)
    idle_since: float | None = None  # since when nothing was held; None while something is (or before the start)
    done: str | None = None  # why the worker was asked to stop
    _listeners: list[Callable[[], None]] = field(default_factory=list)
    _line: list[object] = field(default_factory=list)  # queues (admissions) waiting for room, in order
    _on_left: Callable[[int], None] | None = None

    def listen(self, kick: Callable[[], None]) -> None:
        """`kick` is called when room comes back: another queue's pollers may ask again."""
        self._listeners.append(kick)

    def show_left(self, gauge: Callable[[int], None]) -> None:
        """Report the jobs left (worker_jobs_left) now and whenever a job starts."""
        self._on_left = gauge
        self._show()

    @property
    def room(self) -> int:
        return room(self.max_jobs, self.started, self.promised)

    def room_for(self, queue: object, wanted: int) -> int:
        """How many of the `wanted` places `queue`'s poller may be granted now. A queue that
        wants places and finds none joins the line; one that wants none leaves it."""
        if wanted <= 0:
            self._leave_line(queue)
            return 0
        first = not self._line or self._line[0] is queue
        granted = turn(wanted, self.room, first)
        if not granted and queue not in self._line:
            self._line.append(queue)
        return granted

    def promise(self, places: int, queue: object = None) -> None:
        """A poller of `queue` was granted `places`: it leaves the line, and the next in line
        looks at what room is left."""
        self.promised += places
        self._leave_line(queue)

    def unpromise(self, places: int) -> None:
        """Places given back unused (a receive brought fewer, or none)."""
        if places:
            self.promised -= places
            self._room_back()

    def received(self, count: int) -> None:
        """`count` messages arrived on promised places: they are held now."""
        if count:
            self.holding += count
            self.idle_since = None

    def job_started(self) -> None:
        """A held message's handler was called: its promise becomes a job."""
        self.promised -= 1
        self.started += 1
        self._show()

    def closed(self, promised: bool) -> None:
        """A held message left (settled, given back, lost); `promised`: it never started."""
        self.holding -= 1
        if promised:
            self.promised -= 1
            self._room_back()
        if self.holding == 0:
            self.idle_since = clock.now()
        if jobs_done(self.max_jobs, self.started, self.holding):
            self.finish(MAX_JOBS_REACHED)

    def idle_left(self, now: float) -> float | None:
        return idle_left(self.idle_exit, self.idle_since, now)

    def finish(self, reason: str) -> None:
        """Ask the worker to stop, saying why in one line (once)."""
        if self.done is not None:
            return
        self.done = reason
        if reason == MAX_JOBS_REACHED:
            log.info("max jobs reached: %d job(s) run (WORKER_MAX_JOBS), exiting", self.started)
        else:
            log.info(
                "idle: nothing received or running for %g s (WORKER_IDLE_EXIT_SECONDS), exiting",
                self.idle_exit,
            )
        self.on_done(reason)

    def _leave_line(self, queue: object) -> None:
        if queue in self._line:
            first = self._line[0] is queue
            self._line.remove(queue)
            if first and self._line:
                self._room_back()  # the next in line may take the room now

    def _room_back(self) -> None:
        if self.max_jobs is None:
            return
        for kick in self._listeners:
            kick()

    def _show(self) -> None:
        if self._on_left is not None and self.max_jobs is not None:
            self._on_left(max(0, self.max_jobs - self.started))

    async def watch_idle(self) -> None:
        """WORKER_IDLE_EXIT_SECONDS: finish once nothing was held for that long."""
        if self.idle_exit is None:
            return
        while self.done is None:
            left = self.idle_left(clock.now())
            if left is not None and left <= 0:
                self.finish(IDLE)
                return
            # While something is held, look again an idle spell later: the spell begins
            # when the last message leaves, and that look then sleeps the rest of it.
            await asyncio.sleep(self.idle_exit if left is None else left)
