"""Worker and job lifecycle events: subscribe, unsubscribe, emit.

Events and the fields each carries (all carry `worker_id`):

- `started`, `stopped` (`reason`), `error` (`error`, `where`)
- `job:claimed`, `job:started` (`job_id`, `queue`)
- `job:progress` (`job_id`, `queue`, `percent`, `message`)
- `job:completed` (`job_id`, `queue`, `result`, `duration`)
- `job:failed` (`job_id`, `queue`, `error`, `will_retry`, `outcome`)
- `job:released` (`job_id`, `queue`, `reason`): given back unprocessed (shutdown, lost lease)
- `job:dropped` (`job_id`, `queue`, `reason`): deleted unrun, a control message (an SNS
  subscription confirmation, S3's test event)

A listener that raises is logged and ignored: observers must never break processing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

EVENTS = (
    "started",
    "stopped",
    "error",
    "job:claimed",
    "job:started",
    "job:progress",
    "job:completed",
    "job:failed",
    "job:released",
    "job:dropped",
)

Listener = Callable[[dict[str, Any]], object]
log = logging.getLogger(__name__)


class Events:
    def __init__(self) -> None:
        self._listeners: dict[str, list[Listener]] = {name: [] for name in EVENTS}

    def on(self, event: str, listener: Listener) -> Callable[[], None]:
        """Subscribe; returns a function that unsubscribes."""
        self._check(event)
        self._listeners[event].append(listener)
        return lambda: self.off(event, listener)

    def off(self, event: str, listener: Listener) -> None:
        self._check(event)
        if listener in self._listeners[event]:
            self._listeners[event].remove(listener)

    def emit(self, event: str, **fields: Any) -> None:
        listeners = self._listeners[event]
        if not listeners:  # the usual case: several events a message, nobody listening
            return
        for listener in tuple(listeners):
            try:
                listener({"event": event, **fields})
            except Exception:
                log.exception("event listener failed", extra={"event": event})

    def _check(self, event: str) -> None:
        if event not in self._listeners:
            raise ValueError(f"unknown event {event!r}; known: {', '.join(EVENTS)}")
