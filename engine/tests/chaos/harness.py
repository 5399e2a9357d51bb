"""A fleet of worker processes behind the fault proxy, messages sent over time, and the
accounting that says what was lost, what was done twice, and why.

Every worker is `python -m <package> run` (tests.chaos.handlers), named to the proxy by its
own AWS_SDK_UA_APP_ID, so the proxy knows which messages each one holds. When a worker is
SIGKILLed, what it held at that moment is kept: a completion may only be repeated if the
previous one was by a killed worker holding that message (its delete never reached SQS),
or if SQS was unreachable while the message was held. Anything else, and any repeat after
a SIGTERM, is a defect.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import re
import signal
import sqlite3
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqs_worker_engine.doubles.emulators import free_port

from ..faultproxy import FaultProxy
from ..support import Sqs, env_for, worker_process

HANDLERS = "tests.chaos.handlers:router"
# Short long polls and leases: an abandoned poll (a killed worker's, or one cancelled at an
# idle stop) lives on inside SQS until its wait ends and may take a message, hiding it for a
# visibility timeout. Short ones make such holds a delay of seconds that cannot look like loss.
WORKER_ENV = {
    "WORKER_CONCURRENCY": 4,
    "WORKER_WAIT_TIME_SECONDS": 1,
    "WORKER_VISIBILITY_TIMEOUT_SECONDS": 4,
    "WORKER_JOB_TIMEOUT_MS": 10_000,
    "WORKER_SHUTDOWN_TIMEOUT_MS": 20_000,
    "WORKER_BACKLOG_SAMPLE_SECONDS": 5,
    "WORKER_METRICS_HOST": "127.0.0.1",
}


def probe(port: int, path: str) -> int:
    """HTTP status of a worker's endpoint; 0 when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def until(predicate: Any, timeout: float, what: str, interval: float = 0.2) -> float:
    """Wait for `predicate()`; returns when it became true. The timeout only bounds a broken run."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
    return time.monotonic()


@dataclass
class Member:
    """One worker process (one slot of the fleet, one generation)."""

    slot: int
    app: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path
    started: float
    ended_by: str | None = None  # "sigterm" or "sigkill"
    stopped_at: float = 0.0  # when the signal was sent (wall clock, as the completion records)
    ended_at: float = 0.0  # when it exited
    exit_code: int | None = None
    held_at_stop: set[str] = field(default_factory=set)


class Fleet:
    def __init__(self, proxy: FaultProxy, queue: str, tmp_path: Path, db: Path, name: str, **env: Any) -> None:
        self.proxy = proxy
        self.queue = queue
        self.tmp_path = tmp_path
        self.db = db
        self.name = name
        self.env = {**WORKER_ENV, **env}
        self.members: list[Member] = []
        self.current: dict[int, Member] = {}
        self.stopping: list[Member] = []

    def start(self, slot: int) -> Member:
        app = f"{self.name}-{slot}-{len(self.members)}"
        port = free_port()
        env = env_for(
            self.proxy.url,
            self.queue,
            str(self.tmp_path / f"{app}.progress"),
            CHAOS_QUEUE=self.queue,
            CHAOS_DB=str(self.db),
            AWS_SDK_UA_APP_ID=app,
            WORKER_ID=app,
            WORKER_METRICS_PORT=port,
            **self.env,
        )
        log = self.tmp_path / f"{app}.log"
        member = Member(slot, app, port, worker_process(env, log, HANDLERS), log, time.time())
        self.members.append(member)
        self.current[slot] = member
        return member

    def start_all(self, size: int) -> None:
        for slot in range(size):
            self.start(slot)
        until(lambda: all(probe(m.port, "/livez") == 200 for m in self.current.values()), 120, "workers to start")

    def sigterm(self, slot: int, wait: bool = True) -> Member:
        """Stop gracefully; with `wait=False` the worker drains while its replacement starts
        (a rolling deploy), and `reap()` collects it."""
        member = self.current.pop(slot)
        member.ended_by, member.stopped_at = "sigterm", time.time()
        member.proc.send_signal(signal.SIGTERM)
        self.stopping.append(member)
        if wait:
            self.reap()
        return member

    def reap(self, timeout: float = 90) -> None:
        for member in self.stopping:
            member.exit_code = member.proc.wait(timeout)
            member.ended_at = member.ended_at or time.time()
        self.stopping.clear()

    def sigkill(self, slot: int) -> Member:
        member = self.current.pop(slot)
        member.stopped_at = time.time()
        member.proc.kill()
        member.exit_code = member.proc.wait(30)
        member.ended_by, member.ended_at = "sigkill", time.time()
        # What SQS still had out to it: received, neither deleted nor given back.
        member.held_at_stop = self.proxy.held(member.app)
        return member

    def alive(self) -> list[Member]:
        return [m for m in self.current.values() if m.proc.poll() is None]

    def stop_all(self) -> list[int | None]:
        stopped = [self.sigterm(slot, wait=False) for slot in list(self.current)]
        self.reap()
        return [m.exit_code for m in stopped]

    def kill_all(self) -> None:
        """Cleanup after a failed run: nothing may outlive the test."""
        for member in self.members:
            if member.proc.poll() is None:
                member.proc.kill()
                member.proc.wait(30)
        self.current.clear()
        self.stopping.clear()

    def settle_failures(self) -> set[str]:
        """Message ids the workers said they could not delete (they run again: at-least-once)."""
        failed = set()
        for member in self.members:
            for line in member.log.read_text(errors="replace").splitlines() if member.log.exists() else []:
                if "could not delete message" in line:
                    with contextlib.suppress(ValueError):
                        failed.add(str(json.loads(line).get("message_id")))
        return failed

    def logs(self) -> str:
        return "".join(m.log.read_text(errors="replace") for m in self.members if m.log.exists())

    def metric_totals(self, names: tuple[str, ...]) -> Counter[str]:
        """Sum some counters over the live workers' /metrics (what the workers themselves saw)."""
        totals: Counter[str] = Counter()
        for member in self.alive():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{member.port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                continue
            for line in text.splitlines():
                if line.startswith(names):
                    name_labels, _, value = line.rpartition(" ")
                    # One queue per run: its label only makes the figures unreadable.
                    key = re.sub(r'queue="[^"]*",?', "", name_labels).replace(",}", "}").replace("{}", "")
                    totals[key] += int(float(value))
        return totals


class Sender(threading.Thread):
    """Sends `count` messages over about `seconds`, straight to SQS (never through the proxy)."""

    def __init__(self, sqs: Sqs, url: str, prefix: str, count: int, seconds: float, rng: random.Random) -> None:
        super().__init__(daemon=True, name="chaos-sender")
        self.client = sqs.client
        self.url = url
        self.ids = [f"{prefix}-{i}" for i in range(count)]
        self.seconds = seconds
        self.bodies = [json.dumps({"id": i, "ms": work_ms(rng)}) for i in self.ids]
        self.sent: list[str] = []
        self.error: BaseException | None = None
        self.enough = threading.Event()  # set it to stop sending early; `sent` says what went

    def run(self) -> None:
        try:
            batches = [self.bodies[i : i + 10] for i in range(0, len(self.bodies), 10)]
            pause = self.seconds / max(1, len(batches))
            for n, batch in enumerate(batches):
                if self.enough.is_set():
                    return
                entries = [{"Id": str(i), "MessageBody": body} for i, body in enumerate(batch)]
                resp = self.client.send_message_batch(QueueUrl=self.url, Entries=entries)
                assert not resp.get("Failed"), resp["Failed"]
                self.sent += self.ids[n * 10 : n * 10 + len(batch)]
                time.sleep(pause)
        except BaseException as exc:  # reported by the test, which asserts on it
            self.error = exc


def work_ms(rng: random.Random) -> int:
    """Mostly short jobs; one in eight outlives the visibility timeout, so heartbeats must extend it."""
    return rng.randint(3_200, 4_500) if rng.random() < 0.125 else rng.randint(10, 250)


@dataclass(frozen=True)
class Completion:
    id: str
    message_id: str
    pid: int
    t: float


def completions(db: Path) -> list[Completion]:
    conn = sqlite3.connect(str(db), timeout=60)
    try:
        rows = conn.execute("SELECT id, message_id, pid, t FROM events WHERE kind = 'done' ORDER BY t").fetchall()
    finally:
        conn.close()
    return [Completion(*row) for row in rows]


def completed_ids(db: Path) -> set[str]:
    return {c.id for c in completions(db)}


@dataclass
class Outage:
    down_at: float
    up_at: float
    held: set[str]  # every message any worker held when SQS went away


@dataclass
class Accounting:
    sent: int
    completed: int
    lost: list[str]
    duplicated: Counter[str]
    by_kill: dict[str, int]  # app -> repeats its kill explains
    held_at_kill: dict[str, int]  # app -> messages it held when killed
    defects: list[str]  # repeats nothing explains, or after a graceful stop

    def figures(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "completed": self.completed,
            "lost": len(self.lost),
            "duplicated": dict(self.duplicated),
            "held_at_each_kill": list(self.held_at_kill.values()),
            "duplicates_per_kill": list(self.by_kill.values()),
        }


def account(sent: list[str], done: list[Completion], fleet: Fleet, outages: tuple[Outage, ...] = ()) -> Accounting:
    by_pid = {m.proc.pid: m for m in fleet.members}
    unsettled = fleet.settle_failures()
    by_id: dict[str, list[Completion]] = defaultdict(list)
    for c in done:
        by_id[c.id].append(c)
    duplicated: Counter[str] = Counter()
    by_kill: Counter[str] = Counter()
    defects: list[str] = []
    for runs in by_id.values():
        for previous, again in itertools.pairwise(runs):
            member = by_pid.get(previous.pid)
            ended_after = member is not None and member.ended_by is not None and previous.t <= member.ended_at
            held = member.held_at_stop if member is not None else set()
            if ended_after and member is not None and member.ended_by == "sigkill" and previous.message_id in held:
                cause = "sigkill"
                by_kill[member.app] += 1
            elif any(previous.message_id in o.held and previous.t <= o.up_at for o in outages):
                cause = "outage"
            elif previous.message_id in unsettled:
                cause = "delete_failed"  # the worker logged it could not delete it
            elif member is not None and member.ended_by == "sigterm" and again.t >= member.stopped_at:
                cause = "sigterm"  # run again after a graceful stop: what a drain must prevent
            else:
                cause = "unexplained"
            duplicated[cause] += 1
            if cause in ("sigterm", "unexplained"):
                who = member.app if member else previous.pid
                defects.append(f"{previous.id} done by {who} at {previous.t:.3f}, again by pid {again.pid} ({cause})")
    killed = [m for m in fleet.members if m.ended_by == "sigkill"]
    unique = {c.id for c in done}
    return Accounting(
        sent=len(sent),
        completed=len(unique & set(sent)),
        lost=sorted(set(sent) - unique),
        duplicated=duplicated,
        by_kill={m.app: by_kill[m.app] for m in killed},
        held_at_kill={m.app: len(m.held_at_stop) for m in killed},
        defects=defects,
    )


def settle(sqs: Sqs, url: str, db: Path, sent: list[str], timeout: float) -> None:
    """Wait until every message completed and the queue is empty (repeats included)."""
    until(lambda: set(sent) <= completed_ids(db), timeout, "every message to complete", 0.5)
    until(lambda: sqs.counts(url) == (0, 0), timeout, "the queue to empty", 0.5)


def drain_report(log: Path) -> dict[str, Any] | None:
    """The 'worker stopped' line of a worker's log."""
    for line in log.read_text(errors="replace").splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if data.get("message") == "worker stopped":
            return dict(data)
    return None
