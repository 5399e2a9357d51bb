"""The process pool for `executor="process"` handlers, replaced when one of its processes dies.

Python's ProcessPoolExecutor is broken for good once a worker process exits abruptly (a
segfault, the OOM killer, `os._exit`): the jobs it held fail with BrokenProcessPool (they
are retried like any failure) and every later submit raises at once. Without a new pool the
queue would never run another job while its leases went on being extended.
"""

from __future__ import annotations

import concurrent.futures
import logging
import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from typing import Any

log = logging.getLogger(__name__)


class ProcessPool(concurrent.futures.Executor):
    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._executor = self._new()
        self.replacements = 0

    def _new(self) -> concurrent.futures.ProcessPoolExecutor:
        # spawn: a fork of a process running an event loop and threads is not safe.
        return concurrent.futures.ProcessPoolExecutor(self.size, mp_context=multiprocessing.get_context("spawn"))

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        with self._lock:
            try:
                return self._executor.submit(fn, *args, **kwargs)
            except BrokenProcessPool:
                log.warning("a handler process died: starting a new process pool")
                self._executor.shutdown(wait=False, cancel_futures=True)
                self._executor = self._new()
                self.replacements += 1
                return self._executor.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._executor.shutdown(wait=wait, cancel_futures=cancel_futures)
