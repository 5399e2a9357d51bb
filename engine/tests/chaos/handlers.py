"""Handlers for chaos runs: the worker runs as `python -m <package> run` with
WORKER_HANDLERS=tests.chaos.handlers:router, and every completion is committed to a SQLite
file outside the worker (CHAOS_DB) before the handler returns, so a test can count what
completed across SIGTERMs, SIGKILLs and outages, whatever happens to the process.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time

from pydantic import BaseModel

from sqs_worker_engine import Job, Router

QUEUE = os.environ.get("CHAOS_QUEUE", "chaos-jobs")
# A second queue, served by a plain function (a thread), for a handler that blocks.
SYNC_QUEUE = os.environ.get("CHAOS_SYNC_QUEUE", "chaos-sync")
DB = os.environ.get("CHAOS_DB", "chaos.sqlite")

router = Router()
_never = threading.Event()  # never set: a blocked thread stays blocked until the process ends


class Item(BaseModel):
    id: str
    ms: int = 0  # simulated work
    hang: bool = False  # never return: only the job timeout ends it


SCHEMA = "CREATE TABLE IF NOT EXISTS events (kind TEXT, id TEXT, message_id TEXT, pid INTEGER, receive_count INTEGER, t REAL)"


def connect(path: str) -> sqlite3.Connection:
    # Autocommit: each INSERT is in the file (the OS has it) when execute() returns, or not
    # at all, so a SIGKILL right after cannot lose it; surviving a host crash is not needed.
    conn = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def create(path: str) -> None:
    """Run by the test before any worker starts: WAL lets the writers and the reader overlap."""
    conn = connect(path)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(SCHEMA)
    finally:
        conn.close()


def record(kind: str, job: Job[Item]) -> None:
    conn = connect(DB)
    try:
        conn.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)",
            (kind, job.payload.id, job.id, os.getpid(), job.receive_count, time.time()),
        )
    finally:
        conn.close()


@router.handler(QUEUE, payload=Item)
async def work(job: Job[Item]) -> None:
    if job.payload.hang:
        record("start", job)
        await asyncio.Event().wait()
    await asyncio.sleep(job.payload.ms / 1000)
    record("done", job)


@router.handler(SYNC_QUEUE, payload=Item)
def block(job: Job[Item]) -> None:
    """A plain function that never returns: its thread, and so its slot, stays taken."""
    record("start", job)
    _never.wait()
