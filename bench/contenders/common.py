"""What every contender shares: the handler's work and the completion log.

Every contender calls `handle(body)` (or `handle_async(body)`) for each message, so they
all do the same work per message. The handler is chosen by BENCH_HANDLER:

- `noop`: parse the body, nothing else
- `io<N>ms` / `io<N>s`: wait N (an I/O call: `time.sleep` in threads, `asyncio.sleep` on
  an event loop)
- `cpu`: sha256 over 1 MiB (hashlib releases the GIL, as most C-heavy work does)

Each completed message appends one fixed-width line to BENCH_LOG: the message's id and the
wall-clock time it finished. The harness counts completions from the file's size and reads
the ids back to find duplicates and redeliveries; a contender never reports its own rate.
Standard library only: this runs in each contender's interpreter.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import time

RECORD = "{:>12} {:17.6f}\n"
RECORD_BYTES = 31
CPU_BLOCK = b"\x5a" * (1 << 20)


def parse_handler(name: str) -> tuple[str, float]:
    """`noop` -> ("noop", 0), `io100ms` -> ("io", 0.1), `io1s` -> ("io", 1.0), `cpu` -> ("cpu", 0)."""
    if name in ("noop", "cpu"):
        return name, 0.0
    match = re.fullmatch(r"io(\d+(?:\.\d+)?)(ms|s)", name)
    if not match:
        raise ValueError(f"unknown handler {name!r}: use noop, cpu, io<N>ms or io<N>s")
    value = float(match.group(1))
    return "io", value / 1000 if match.group(2) == "ms" else value


KIND, SECONDS = parse_handler(os.environ.get("BENCH_HANDLER", "noop"))
_LOG = os.environ.get("BENCH_LOG")
_fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if _LOG else -1


def record(message_id: str) -> None:
    # One write of a short line to an O_APPEND file is atomic: threads and processes can
    # share the log without a lock.
    if _fd >= 0:
        os.write(_fd, RECORD.format(message_id, time.time()).encode())


def cpu_work() -> bytes:
    return hashlib.sha256(CPU_BLOCK).digest()


def handle(body: str) -> None:
    """The handler, for contenders that run it in threads."""
    message = json.loads(body)
    if KIND == "io":
        time.sleep(SECONDS)
    elif KIND == "cpu":
        cpu_work()
    record(message["id"])


async def handle_async(body: str) -> None:
    """The same handler on an event loop (CPU work is not awaited: it holds the loop)."""
    message = json.loads(body)
    if KIND == "io":
        await asyncio.sleep(SECONDS)
    elif KIND == "cpu":
        cpu_work()
    record(message["id"])


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))
