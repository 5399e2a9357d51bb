"""Maps queues to handlers: the one registry `handlers.py` fills in (handlers, readiness
checks, and the lifespan that opens and closes what handlers share)."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from ..formats.envelopes import ENVELOPES, EnvelopeKind

Executor = Literal["auto", "async", "thread", "process"]
F = TypeVar("F", bound=Callable[..., Any])
# A check takes no argument, or one: what the lifespan yielded (the shared resources).
ReadinessCheck = Callable[[], Awaitable[bool]] | Callable[[Any], Awaitable[bool]]
R = TypeVar("R", bound=ReadinessCheck)
# What `@router.lifespan` takes: an async generator function that yields once (what it
# yields is `job.resources`), or a function returning an async context manager.
Lifespan = Callable[[], AsyncIterator[Any]] | Callable[[], AbstractAsyncContextManager[Any]]
L = TypeVar("L", bound=Lifespan)


def is_coroutine_callable(fn: Callable[..., Any]) -> bool:
    """A coroutine function, also behind functools.wraps decorators and partials, or an
    object whose __call__ is one: run on the event loop and awaited."""
    target = inspect.unwrap(fn)
    if inspect.iscoroutinefunction(target):
        return True
    if inspect.isfunction(target) or inspect.ismethod(target) or not callable(target):
        return False
    return inspect.iscoroutinefunction(type(target).__call__)


def call_sync(fn: Callable[..., Any], job: Any) -> Any:
    """Call a plain handler (in its thread or process). One that hands back an awaitable (a
    plain function returning a coroutine) did not do its work: that is an error, so the
    message is retried with the reason instead of being deleted as a success."""
    result = fn(job)
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if close is not None:
            close()  # never awaited, on purpose: no "coroutine was never awaited" warning
        raise TypeError(
            f"handler {getattr(fn, '__qualname__', fn)!r} returned {type(result).__name__} instead of doing its "
            "work: register an `async def` (or a callable whose __call__ is async), or await it inside"
        )
    return result


@dataclass(frozen=True)
class BatchSpec:
    """A batch handler's call: up to `size` jobs, gathered for at most `wait` seconds."""

    size: int
    wait: float


@dataclass(frozen=True)
class HandlerSpec:
    queue: str
    fn: Callable[..., Any]
    payload: type[Any] | None
    mode: Literal["async", "thread", "process"]
    envelope: EnvelopeKind = "raw"
    batch: BatchSpec | None = None  # a batch handler (batches.py): called with a list of jobs


class Router:
    """Register handlers per queue.

    `payload` is a pydantic model the body must validate against (else the message goes
    straight to the DLQ), `str` for the raw body, or None for any JSON value.
    `envelope` says what wraps the payload on its way here: "raw" (nothing), "sns",
    "sns-raw" (raw message delivery), "eventbridge", "s3", "sns+s3" or "sns+eventbridge"
    (see envelopes.py; SNS notifications are checked for SNS's signature); the model then
    validates what is inside, and `job.envelope` carries the envelope's metadata.
    `executor`: "auto" runs coroutine functions on the event loop and plain functions in a
    thread pool (one per queue, sized to its concurrency); "process" runs a module-level
    function in a process pool, for CPU-bound work (costs: the job is pickled to the
    process, `job.cancelled` and `job.progress` do not reach it, and a timed-out call
    cannot be interrupted, only abandoned). `batch_handler` registers a handler that takes
    a list of jobs (see batches.py).
    """

    def __init__(self) -> None:
        self._handlers: dict[str, HandlerSpec] = {}
        self._readiness: list[tuple[str, ReadinessCheck]] = []
        self._lifespan: Lifespan | None = None

    def handler(
        self,
        queue: str,
        *,
        payload: type[Any] | None = None,
        executor: Executor = "auto",
        envelope: EnvelopeKind = "raw",
    ) -> Callable[[F], F]:
        return self._register(queue, payload, executor, envelope, None)

    def batch_handler(
        self,
        queue: str,
        *,
        payload: type[Any] | None = None,
        size: int = 10,
        wait_ms: int = 100,
        executor: Literal["auto", "async", "thread"] = "auto",
        envelope: EnvelopeKind = "raw",
    ) -> Callable[[F], F]:
        """A handler called with a list of up to `size` jobs, gathered for at most `wait_ms`
        after the first; it returns None or Lambda's {"batchItemFailures": [...]}. Each
        message keeps its own lease, retries and DLQ (see batches.py)."""
        if not 1 <= size <= 10_000:
            raise ValueError(f"batch size must be 1..10000, got {size}")
        if not 0 <= wait_ms <= 60_000:
            raise ValueError(f"batch wait_ms must be 0..60000, got {wait_ms}")
        if executor not in ("auto", "async", "thread"):
            raise ValueError(f"a batch handler runs on the event loop or in a thread, not executor={executor!r}")
        return self._register(queue, payload, executor, envelope, BatchSpec(size, wait_ms / 1000))

    def _register(
        self,
        queue: str,
        payload: type[Any] | None,
        executor: Executor,
        envelope: EnvelopeKind,
        batch: BatchSpec | None,
    ) -> Callable[[F], F]:
        if envelope not in ENVELOPES:
            raise ValueError(f"envelope must be one of {', '.join(ENVELOPES)}, got {envelope!r}")

        def register(fn: F) -> F:
            if queue in self._handlers:
                raise ValueError(f"queue {queue!r} already has a handler: {self._handlers[queue].fn.__qualname__}")
            if (
                payload is not None
                and payload is not str
                and not (isinstance(payload, type) and issubclass(payload, BaseModel))
            ):
                raise TypeError("payload must be a pydantic model, str, or None")
            is_async = is_coroutine_callable(fn)
            if executor == "auto":
                mode: Literal["async", "thread", "process"] = "async" if is_async else "thread"
            elif executor == "async" and not is_async:
                raise TypeError(f"{fn.__qualname__} is not a coroutine function; use executor='thread'")
            elif executor in ("thread", "process") and is_async:
                raise TypeError(f"{fn.__qualname__} is a coroutine function; only plain functions run in a {executor}")
            else:
                mode = executor
            self._handlers[queue] = HandlerSpec(queue, fn, payload, mode, envelope, batch)
            return fn

        return register

    def readiness_check(self, name: str) -> Callable[[R], R]:
        """Add a check to /readyz (e.g. the database answers). Never used for liveness. A
        check that takes an argument is called with the lifespan's resources."""

        def register(fn: R) -> R:
            self._readiness.append((name, fn))
            return fn

        return register

    def lifespan(self, fn: L) -> L:
        """Register what opens and closes the resources handlers share (a database pool, an
        HTTP client): an async generator function that opens them, yields them once, and
        closes them after (or a function returning an async context manager). The worker
        enters it before its first receive and leaves it after the drain; what it yields is
        `job.resources` in every handler (not in `executor="process"` ones) and the argument
        of readiness checks that take one. If it raises before yielding, the worker refuses
        to start (exit 3) with the reason, having received nothing."""
        if self._lifespan is not None:
            raise ValueError(f"the router already has a lifespan: {getattr(self._lifespan, '__qualname__', '?')}")
        self._lifespan = fn
        return fn

    def open_resources(self) -> AbstractAsyncContextManager[Any]:
        """The lifespan as a context manager that gives the resources (None without one)."""
        if self._lifespan is None:
            return contextlib.nullcontext(None)
        if inspect.isasyncgenfunction(inspect.unwrap(self._lifespan)):
            return contextlib.asynccontextmanager(self._lifespan)()  # type: ignore[arg-type]
        opened = self._lifespan()
        if not isinstance(opened, AbstractAsyncContextManager):
            raise TypeError(
                f"lifespan {getattr(self._lifespan, '__qualname__', '?')} must be an async generator function "
                f"(yield the resources once) or return an async context manager, not {type(opened).__name__}"
            )
        return opened

    def readiness_checks_with(self, resources: Any) -> list[tuple[str, Callable[[], Awaitable[bool]]]]:
        """The readiness checks, those that take the resources given them."""
        return [(name, _bind(fn, resources)) for name, fn in self._readiness]

    def get(self, queue: str) -> HandlerSpec | None:
        return self._handlers.get(queue)

    @property
    def queues(self) -> list[str]:
        return list(self._handlers)

    @property
    def readiness_checks(self) -> list[tuple[str, ReadinessCheck]]:
        return list(self._readiness)

    @property
    def has_lifespan(self) -> bool:
        return self._lifespan is not None


def _bind(fn: ReadinessCheck, resources: Any) -> Callable[[], Awaitable[bool]]:
    try:
        takes = len(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # a callable inspect cannot read: call it as it is
        takes = 0
    if not takes:
        return fn  # type: ignore[return-value]
    return functools.partial(fn, resources)  # type: ignore[call-arg]
