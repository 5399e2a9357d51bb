"""A contender's process and what is read of it: its CPU time, memory and timed stop (Proc),
the completions it logs (one fixed-width line a message) and the rate of their waves, the
machine's busy time; and the proxy every contender talks to SQS through, which counts and
times each request and adds the round trip a run asks for."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil
from common import RECORD_BYTES  # bench/contenders/, on the path with this package

from measuring import CONTENDERS_DIR


class RunError(RuntimeError):
    """A run that gave no figure: reported in its row, and the other runs go on."""


def load_module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def counting_proxy(faultproxy: ModuleType) -> type:
    """The tests' FaultProxy, resending once when LocalStack has dropped a kept-alive
    connection under it (the request is counted once: the contender made one)."""
    import asyncio

    import aiohttp

    class CountingProxy(faultproxy.FaultProxy):  # type: ignore[name-defined,misc]
        """Also times each operation through to LocalStack and back (`seconds`)."""

        def _follow(self, *_args: Any) -> None:
            # The tests' proxy parses every receive and delete to track what each client
            # holds; the bench needs only the counts, and the parsing would tax every
            # contender's requests with the proxy's CPU on a machine they share.
            return None

        async def _handle(self, request: Any) -> Any:
            target = request.headers.get("X-Amz-Target", "")
            operation = target.rsplit(".", 1)[-1] if target else request.path
            started = time.perf_counter()
            low, high = self.added  # seconds added to every request's round trip, as AWS's latency
            if high > 0:
                await asyncio.sleep(random.uniform(low, high))
            try:
                response = await super()._handle(request)
            except aiohttp.ServerDisconnectedError:
                with self._lock:
                    self.counts[operation] -= 1
                    self.resent += 1
                response = await super()._handle(request)
            with self._lock:
                self.seconds[operation] += time.perf_counter() - started
            return response

    return CountingProxy


class Proc:
    """A contender process: CPU time, memory and a timed stop."""

    def __init__(self, cmd: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with open(log, "ab") as out:
            self.popen = subprocess.Popen(
                cmd, env=env, cwd=CONTENDERS_DIR, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.ps = psutil.Process(self.popen.pid)

    def _tree(self) -> list[psutil.Process]:
        try:
            return [self.ps, *self.ps.children(recursive=True)]
        except psutil.Error:
            return []

    def cpu(self) -> float:
        """User + system seconds of the process and all its children."""
        total = 0.0
        for i, p in enumerate(self._tree()):
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                total += t.user + t.system
                if i == 0:
                    total += t.children_user + t.children_system
        return total

    def rss(self) -> int:
        total = 0
        for p in self._tree():
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
        return total

    def peak_rss(self) -> int:
        """High-water mark of resident memory (VmHWM), summed over the process tree."""
        total = 0
        for p in self._tree():
            try:
                status = Path(f"/proc/{p.pid}/status").read_text()
            except OSError:
                continue
            match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
            if match:
                total += int(match.group(1)) * 1024
        return total

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float) -> float | None:
        """SIGTERM, then wait: seconds to exit, or None if it had to be killed."""
        if not self.alive():
            return 0.0
        sent = time.monotonic()
        self.popen.send_signal(signal.SIGTERM)
        while time.monotonic() - sent < timeout:
            if self.popen.poll() is not None:
                return time.monotonic() - sent
            time.sleep(0.005)
        self.kill()
        return None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(10)

    def tail(self, chars: int = 1500) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def completions(log: Path) -> int:
    try:
        return log.stat().st_size // RECORD_BYTES
    except FileNotFoundError:
        return 0


def read_completions(log: Path) -> list[tuple[str, float]]:
    if not log.exists():
        return []
    rows = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            rows.append((parts[0], float(parts[1])))
    return rows


@dataclass
class Snapshot:
    t: float
    wall: float  # the clock the completion log is written in
    done: int
    requests: Counter[str]
    seconds: Counter[str]  # time spent per operation, at the proxy
    cpu: float
    machine_busy: float  # CPU seconds all processes on the machine used (not idle, not waiting)


def machine_busy() -> float:
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def aligned_rate(times: list[float], start: float, end: float, waves: tuple[int, ...]) -> float | None:
    """Messages per second between completions of the same rank in their wave.

    Handlers that start together finish together: completions come in waves (of up to
    `concurrency` messages, or 10 per receive). A fixed window catches a whole number of
    waves plus or minus one, which is a large error when there are few (1 s jobs). Timing
    the k-th and the (k+m)-th completion inside the window, with m a multiple of the wave
    size, measures whole waves exactly; for a steady stream it is the plain rate.
    """
    inside = sorted(t for t in times if start <= t <= end)
    for wave in waves:  # the largest wave size that fits the window at least once
        m = (len(inside) - 1) // wave * wave
        # Over half the window at least: a few completions of one receive, a millisecond
        # apart, are one wave of the contender's own, not a rate.
        if m >= wave and inside[m] - inside[0] >= (end - start) / 2:
            return m / (inside[m] - inside[0])
    return None
