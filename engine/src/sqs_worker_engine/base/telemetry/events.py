"""Worker and job lifecycle events: subscribe, unsubscribe, emit.

Events and the fields each carries (all carry `worker_id`):

- `started` (`queues`), `stopped` (`reason`), `error` (`error`, `where`)
- `job:claimed`, `job:started` (`job_id`, `queue`)
- `job:progress` (`job_id`, `queue`, `percent`, `message`)
- `job:completed` (`job_id`, `queue`, `result`, `duration`)
- `job:failed` (`job_id`, `queue`, `error`, `will_retry`, `outcome`)
- `job:released` (`job_id`, `queue`, `reason`): given back unprocessed (shutdown, lost lease)
- `job:dropped` (`job_id`, `queue`, `reason`): deleted unrun, a control message (an SNS
  subscription confirmation, S3's test event)

A listener gets one dict: the fields plus `event`, its name. The names and the fields are
typed (`EventName`, a TypedDict per event), so that mypy refuses an unknown name or a wrong
field where an event is emitted or subscribed to; at run time an unknown name is a
ValueError naming the known ones.

A listener that raises is logged and ignored: observers must never break processing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal, Protocol, TypedDict, get_args, overload

EventName = Literal[
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
]
EVENTS: tuple[EventName, ...] = get_args(EventName)


class Started(TypedDict):
    event: Literal["started"]
    worker_id: str
    queues: list[str]


class Stopped(TypedDict):
    event: Literal["stopped"]
    worker_id: str
    reason: str


class Error(TypedDict):
    event: Literal["error"]
    worker_id: str
    error: BaseException
    where: str


class _Job(TypedDict):
    worker_id: str
    job_id: str
    queue: str


class JobClaimed(_Job):
    event: Literal["job:claimed"]


class JobStarted(_Job):
    event: Literal["job:started"]


class JobProgress(_Job):
    event: Literal["job:progress"]
    percent: float
    message: str | None


class JobCompleted(_Job):
    event: Literal["job:completed"]
    result: Any
    duration: float


class JobFailed(_Job):
    event: Literal["job:failed"]
    error: BaseException | None
    will_retry: bool
    outcome: str


class JobReleased(_Job):
    event: Literal["job:released"]
    reason: str


class JobDropped(_Job):
    event: Literal["job:dropped"]
    reason: str


Event = (
    Started
    | Stopped
    | Error
    | JobClaimed
    | JobStarted
    | JobProgress
    | JobCompleted
    | JobFailed
    | JobReleased
    | JobDropped
)
Listener = Callable[[Any], object]  # a listener of any event
log = logging.getLogger("sqs_worker_engine.events")


class Subscribe(Protocol):
    """`on(event, listener)`: subscribe; returns a function that unsubscribes. A listener of
    one event reads that event's fields (a lambda's are checked against them too); one of
    several events takes `Any`, or an `Event` it tells apart by `event`."""

    @overload
    def __call__(self, event: Literal["started"], listener: Callable[[Started], object]) -> Callable[[], None]: ...
    @overload
    def __call__(self, event: Literal["stopped"], listener: Callable[[Stopped], object]) -> Callable[[], None]: ...
    @overload
    def __call__(self, event: Literal["error"], listener: Callable[[Error], object]) -> Callable[[], None]: ...
    @overload
    def __call__(
        self, event: Literal["job:claimed"], listener: Callable[[JobClaimed], object]
    ) -> Callable[[], None]: ...
    @overload
    def __call__(
        self, event: Literal["job:started"], listener: Callable[[JobStarted], object]
    ) -> Callable[[], None]: ...
    @overload
    def __call__(
        self, event: Literal["job:progress"], listener: Callable[[JobProgress], object]
    ) -> Callable[[], None]: ...
    @overload
    def __call__(
        self, event: Literal["job:completed"], listener: Callable[[JobCompleted], object]
    ) -> Callable[[], None]: ...
    @overload
    def __call__(self, event: Literal["job:failed"], listener: Callable[[JobFailed], object]) -> Callable[[], None]: ...
    @overload
    def __call__(
        self, event: Literal["job:released"], listener: Callable[[JobReleased], object]
    ) -> Callable[[], None]: ...
    @overload
    def __call__(
        self, event: Literal["job:dropped"], listener: Callable[[JobDropped], object]
    ) -> Callable[[], None]: ...


class Events:
    def __init__(self) -> None:
        self._listeners: dict[str, list[Callable[[Any], object]]] = {name: [] for name in EVENTS}
        # The events someone listens to now (written by on and off): a job's events come
        # several a message and mostly nobody listens, so their emitters ask this first
        # and build no fields for nobody.
        self.heard: set[str] = set()
        self.on: Subscribe = self._subscribe

    def _subscribe(self, event: EventName, listener: Callable[[Any], object]) -> Callable[[], None]:
        self._check(event)
        self._listeners[event].append(listener)
        self.heard.add(event)
        return lambda: self.off(event, listener)

    def off(self, event: EventName, listener: Callable[[Any], object]) -> None:
        self._check(event)
        if listener in self._listeners[event]:
            self._listeners[event].remove(listener)
        if not self._listeners[event]:
            self.heard.discard(event)

    # Emitting: each event's fields, by name.
    @overload
    def emit(self, event: Literal["started"], *, worker_id: str, queues: list[str]) -> None: ...
    @overload
    def emit(self, event: Literal["stopped"], *, worker_id: str, reason: str) -> None: ...
    @overload
    def emit(self, event: Literal["error"], *, worker_id: str, error: BaseException, where: str) -> None: ...
    @overload
    def emit(
        self, event: Literal["job:claimed", "job:started"], *, worker_id: str, job_id: str, queue: str
    ) -> None: ...
    @overload
    def emit(
        self,
        event: Literal["job:progress"],
        *,
        worker_id: str,
        job_id: str,
        queue: str,
        percent: float,
        message: str | None,
    ) -> None: ...
    @overload
    def emit(
        self, event: Literal["job:completed"], *, worker_id: str, job_id: str, queue: str, result: Any, duration: float
    ) -> None: ...
    @overload
    def emit(
        self,
        event: Literal["job:failed"],
        *,
        worker_id: str,
        job_id: str,
        queue: str,
        error: BaseException | None,
        will_retry: bool,
        outcome: str,
    ) -> None: ...
    @overload
    def emit(
        self, event: Literal["job:released", "job:dropped"], *, worker_id: str, job_id: str, queue: str, reason: str
    ) -> None: ...
    def emit(self, event: str, **fields: Any) -> None:
        listeners = self._listeners.get(event)
        if listeners is None:
            self._check(event)
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
