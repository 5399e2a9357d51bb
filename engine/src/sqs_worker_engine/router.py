"""Maps queues to handlers: the one registry `handlers.py` fills in."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

Executor = Literal["auto", "async", "thread", "process"]
F = TypeVar("F", bound=Callable[..., Any])
ReadinessCheck = Callable[[], Awaitable[bool]]


@dataclass(frozen=True)
class HandlerSpec:
    queue: str
    fn: Callable[..., Any]
    payload: type[Any] | None
    mode: Literal["async", "thread", "process"]


class Router:
    """Register handlers per queue.

    `payload` is a pydantic model the body must validate against (else the message goes
    straight to the DLQ), `str` for the raw body, or None for any JSON value.
    `executor`: "auto" runs coroutine functions on the event loop and plain functions in a
    thread pool (one per queue, sized to its concurrency); "process" runs a module-level
    function in a process pool, for CPU-bound work (costs: the job is pickled to the
    process, `job.cancelled` and `job.progress` do not reach it, and a timed-out call
    cannot be interrupted, only abandoned).
    """

    def __init__(self) -> None:
        self._handlers: dict[str, HandlerSpec] = {}
        self._readiness: list[tuple[str, ReadinessCheck]] = []

    def handler(self, queue: str, *, payload: type[Any] | None = None, executor: Executor = "auto") -> Callable[[F], F]:
        def register(fn: F) -> F:
            if queue in self._handlers:
                raise ValueError(f"queue {queue!r} already has a handler: {self._handlers[queue].fn.__qualname__}")
            if (
                payload is not None
                and payload is not str
                and not (isinstance(payload, type) and issubclass(payload, BaseModel))
            ):
                raise TypeError("payload must be a pydantic model, str, or None")
            is_async = inspect.iscoroutinefunction(fn)
            if executor == "auto":
                mode: Literal["async", "thread", "process"] = "async" if is_async else "thread"
            elif executor == "async" and not is_async:
                raise TypeError(f"{fn.__qualname__} is not a coroutine function; use executor='thread'")
            elif executor in ("thread", "process") and is_async:
                raise TypeError(f"{fn.__qualname__} is a coroutine function; only plain functions run in a {executor}")
            else:
                mode = executor
            self._handlers[queue] = HandlerSpec(queue, fn, payload, mode)
            return fn

        return register

    def readiness_check(self, name: str) -> Callable[[ReadinessCheck], ReadinessCheck]:
        """Add a check to /readyz (e.g. the database answers). Never used for liveness."""

        def register(fn: ReadinessCheck) -> ReadinessCheck:
            self._readiness.append((name, fn))
            return fn

        return register

    def get(self, queue: str) -> HandlerSpec | None:
        return self._handlers.get(queue)

    @property
    def queues(self) -> list[str]:
        return list(self._handlers)

    @property
    def readiness_checks(self) -> list[tuple[str, ReadinessCheck]]:
        return list(self._readiness)
