"""Liveness from progress, readiness from dependencies.

Liveness asks one question: is a handler, or the loop, stuck? Each queue's pool counts as
making progress when a receive returns (an empty long poll counts, and so does a failed
one: backing off from an SQS outage is the loop doing its job), when a job finishes, and
whenever it is *resting*: a slot is free and its pollers wait on admission's word (a
pause on downstream trouble, the rate limit, a shared budget that gives its slots to a
higher queue, SQS unreachable, or simply nothing to receive now). A pause or a budget's
wait is the worker doing what it should, not a stall: a platform restarting it then would
restart a healthy worker exactly while its downstream is in trouble. What is left is the
case liveness exists for: every slot held by a job that does not end (a handler that
ignores its timeout), or a loop that does not turn (a blocking call in an async handler:
then nothing here runs at all, the progress file goes stale and /livez does not answer).
The verdict follows the pool longest without progress. It never checks a dependency: a
database blip must not restart the whole pool mid-job.

The timestamp is also written to a small file once a second, so `healthcheck` can give the
same verdict as an exit code (an ECS health check or a Kubernetes exec probe). The file is
the worker process's own: WORKER_HEALTH_FILE with the process id before its suffix
(`/tmp/orders.progress` -> `/tmp/orders.1234.progress`), so workers of one service on one
host (or sharing a /tmp) never write over each other's, and a stopped one cannot look alive
through another's writes. `healthcheck` judges every running worker that has a file there
(or the one `--pid` names) and leaves out those of processes that are gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from urllib.parse import urlsplit

from . import metrics


def progress_file(base: str, pid: int | str) -> str:
    """The progress file of worker process `pid`: `base` with the pid before its suffix."""
    stem, suffix = os.path.splitext(base)
    return f"{stem}.{pid}{suffix}"


def progress_files(base: str) -> dict[int, str]:
    """The progress files next to `base`, by the pid of the worker that wrote each."""
    directory, name = os.path.split(base)
    stem, suffix = os.path.splitext(name)
    mine = re.compile(rf"{re.escape(stem)}\.(\d+){re.escape(suffix)}")
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return {}
    found = (mine.fullmatch(n) for n in names)
    return {int(m.group(1)): os.path.join(directory, m.group(0)) for m in found if m}


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: there
    return True


class Health:
    def __init__(
        self, stalled_after: float, health_file: str | None, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        """`health_file`: WORKER_HEALTH_FILE (this process writes its own, `progress_file`);
        `monotonic`: the clock progress is measured on (the worker's loop clock)."""
        self.stalled_after = stalled_after
        self.health_file = progress_file(health_file, os.getpid()) if health_file else None
        self._now = monotonic
        self._started: float | None = None  # progress before any pool is tracked (start-up)
        # Progress per queue pool, on `monotonic`: a pool whose every slot is stuck stalls
        # the worker even while another pool keeps polling.
        self._marks: dict[str, float] = {}
        self._resting: dict[str, Callable[[], bool]] = {}  # pool -> is it resting now
        self._sqs: bool | None = None  # the worker's own calls: describing its queues, sampling their backlog
        self._queues: dict[str, bool] = {}  # each queue's pool: SQS answers every kind of call it makes
        self.stopping = False
        # Queues paused on downstream trouble: reported by /readyz, never failing it (a pod
        # taken out of service gains nothing; the worker itself pulls its work).
        self.paused: set[str] = set()
        self._written = 0.0

    def track(self, pools: Mapping[str, Callable[[], bool]] | Iterable[str]) -> None:
        """Judge liveness by these pools from now on (all counted as progressing now); a
        mapping gives each pool's `resting()`: True while it waits by design (admission.py)."""
        now = self._now()
        self._resting = dict(pools) if isinstance(pools, Mapping) else {}
        self._marks = dict.fromkeys(pools, now)
        self._started = now

    def progress(self, key: str = "") -> None:
        now = self._now()
        if key in self._marks:
            self._marks[key] = now
        else:
            self._started = now

    def sqs_result(self, ok: bool, queue: str | None = None) -> None:
        """Whether SQS answered: the worker's own call, or `queue`'s pool, which says whether
        SQS answers every kind of call it makes (its receives, its lease extensions and
        visibility changes, its deletes: runtime/protections/reach.py)."""
        if queue is None:
            self._sqs = ok
        else:
            self._queues[queue] = ok

    @property
    def sqs_ok(self) -> bool | None:
        """/readyz's "sqs": every queue's pool has SQS answering all its kinds of call (a
        worker whose deletes are refused is not ready, though live: it starts nothing and
        rests); before the pools have called, whether the queues could be described."""
        return all(self._queues.values()) if self._queues else self._sqs

    def stalled_for(self) -> float:
        """Seconds since the pool longest without progress made some (0 before start)."""
        now = self._now()
        for key, resting in self._resting.items():
            if resting():
                self._marks[key] = now
        last = min(self._marks.values(), default=self._started)
        return 0.0 if last is None else max(0.0, now - last)

    def live(self) -> bool:
        return self.stalled_for() <= self.stalled_after

    def last_progress_wall(self) -> float:
        """Unix time of the last progress (what the file and the gauge say)."""
        return time.time() - self.stalled_for()

    async def write_file_forever(self, interval: float = 1.0) -> None:
        while True:
            self.write_file()
            await asyncio.sleep(interval)

    def write_file(self) -> None:
        wall = self.last_progress_wall()
        metrics.LAST_PROGRESS.set(wall)
        if not self.health_file or abs(self._written - wall) < 0.5:
            return
        directory = os.path.dirname(self.health_file) or "."
        with contextlib.suppress(OSError):  # a read-only disk must not take the worker down
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".health-")
            with os.fdopen(fd, "w") as handle:
                handle.write(f"{wall:.3f}\n")
            os.replace(tmp, self.health_file)
            self._written = wall

    def remove_file(self) -> None:
        if self.health_file:
            with contextlib.suppress(OSError):
                os.unlink(self.health_file)


def check(base: str, stalled_after: float, pid: int | None = None, now: float | None = None) -> tuple[bool, str]:
    """The `healthcheck` verdict: for worker `pid`, else for every running worker with a
    progress file next to `base` (all of them must be making progress)."""
    files = progress_files(base)
    if pid is not None:
        if pid not in files:
            return False, f"no progress file of worker {pid} at {progress_file(base, pid)}"
        if not running(pid):
            return False, f"worker {pid} is not running (its last progress file is {files[pid]})"
        return check_file(files[pid], stalled_after, now)
    live = {p: path for p, path in sorted(files.items()) if running(p)}
    if not live:
        gone = f" (only stopped workers': {', '.join(map(str, sorted(files)))})" if files else ""
        return False, (
            f"no progress file of a running worker at {progress_file(base, '<pid>')}{gone}: "
            "the worker has not started (or runs elsewhere)"
        )
    verdicts = {p: check_file(path, stalled_after, now) for p, path in live.items()}
    ok = all(good for good, _ in verdicts.values())
    if len(verdicts) == 1:
        ((p, (_, message)),) = verdicts.items()
        return ok, f"{message} (worker {p})"
    return ok, "; ".join(f"worker {p}: {message}" for p, (_, message) in verdicts.items())


def check_file(path: str, stalled_after: float, now: float | None = None) -> tuple[bool, str]:
    """The `healthcheck` verdict from the progress file."""
    try:
        with open(path) as handle:
            last = float(handle.read().strip())
    except FileNotFoundError:
        return False, f"no progress file at {path}: the worker has not started (or runs elsewhere)"
    except (OSError, ValueError) as exc:
        return False, f"cannot read progress file {path}: {exc}"
    age = (time.time() if now is None else now) - last
    if age > stalled_after:
        return False, f"stalled: no progress for {age:.0f} s (threshold {stalled_after:g} s)"
    return True, f"ok: last progress {age:.1f} s ago"


DEFAULT_PORTS = {"postgresql": 5432, "postgres": 5432, "mysql": 3306, "redis": 6379, "mongodb": 27017}


def database_check(url: str) -> Callable[[], Awaitable[bool]]:
    """Readiness for DATABASE_URL: can a TCP connection be opened to it? (No driver needed,
    no credentials used: a reachable port is what "ready" can promise without your pool.)"""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+")[0]
    host, port = parts.hostname or "localhost", parts.port or DEFAULT_PORTS.get(scheme, 5432)

    async def reachable() -> bool:
        try:
            _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=2)
        except (OSError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True

    return reachable
