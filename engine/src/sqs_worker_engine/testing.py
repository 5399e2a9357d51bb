"""Unit-test handlers without AWS: build a `Job` from a payload, run its handler, read the
outcome the worker would act on.

    from sqs_worker_engine.testing import run_handler

    def test_a_bad_task_is_dead_lettered():
        result = run_handler(router, QUEUE, {"task_id": ""})
        assert result.outcome == "dead_letter"
        assert "task_id" in result.reason

The body goes through the handler's envelope and payload model exactly as a received
message's does (a body that fails them is dead-lettered without running the handler), and
the outcome comes from the same decision the worker makes (`outcomes.classify`; the list is
`outcomes.OUTCOMES`):
- "success": deleted;
- "retry": visible again after a backoff, or after `retry_after` seconds when the handler
  raised `RetryLater`;
- "deferred": the handler raised `DownstreamUnavailable` (what it calls is down): visible
  again after `retry_after` seconds while the queue pauses, never dead-lettered for it;
- "dead_letter": to the DLQ with `reason` (`NonRetryableError`, or a body the model refuses);
- "timeout": ran past `timeout=`, cancelled, retried;
- "released": given back at shutdown (the handler raised `JobCancelled` for a shutdown,
  as `job.raise_if_stopping()` does with `stopping=True`);
- "lease_lost": the handler raised `JobCancelled` for a lost lease: never touched again;
- "dropped": a control message (an SNS subscription confirmation, S3's test event),
  deleted unrun.

`run_handler` runs each call on an event loop of its own. Resources made on another loop
(an async client or pool built by a fixture, for `resources=`) cannot be used there: write
the test as async and `await run_handler_async(...)`, which runs on the test's own loop
(pytest-asyncio's `@pytest.mark.asyncio`, or anyio's `@pytest.mark.anyio`). `run_handler`
says so (`OtherLoopError`) rather than report the loop's error as the handler's failure.

A batch handler (`Router.batch_handler`) runs with `run_batch(router, QUEUE, [m1, m2])`,
which returns one HandlerResult per message, in order: the jobs the response names are
"retry", as in the worker.

A router with a lifespan (`@router.lifespan`) has it entered around each call, as the
worker does, so `job.resources` is what it yields; `resources=` gives a stand-in instead
(a fake client, a test database), and the lifespan is not run.

`check_service(SERVICE, endpoint, tmp_path, env={...})` runs a whole service against an SQS
emulator, driven by the examples its payload models declare (see `end_to_end.py`); `env`
adds to the environment of the service's processes (the settings your own code reads at
boot, say: an API's URL, a stand-in token). For an HTTP API a handler calls,
`with stand_in_http({"POST /v1/orders": (201, {...})}) as partner:` serves one on 127.0.0.1
for the block: give the service `env={"PARTNER_API_URL": partner.url}`, and read what it
was asked in `partner.requests` (doubles/http.py).

A test of the worker as a whole, without AWS, runs the real Worker against the in-memory
SQS (`doubles.memory.MemorySQS`): `memory_sqs("jobs", messages=100)` seeds it,
`memory_worker(sqs, router, "jobs", WORKER_CONCURRENCY="8")` starts the worker on the
running loop with the settings of a worker off the network (QUIET, under the test's own),
and `await running.stop()` stops it as SIGTERM does. On `doubles.vtime.run` its sleeps take
no wall-clock time; any loop works. The engine's model tests, the bench and
scripts/measure_engine.py all set their workers up this way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import pickle
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from .base import clock
from .base.errors import PayloadError, RetryLater
from .doubles.http import stand_in_http
from .formats.envelopes import ControlMessage, Envelope, read_payload
from .handlers.batches import BatchItemFailedError, BatchResponseError, item_failures
from .handlers.job import Job
from .handlers.outcomes import Outcome, classify
from .handlers.router import Router, call_sync

if TYPE_CHECKING:
    from .doubles.end_to_end import check_service
    from .doubles.memory import MemorySQS
    from .process.settings import WorkerConfig
    from .process.worker import Worker

__all__ = [
    "FROM_LIFESPAN",
    "MEMORY_QUEUE",
    "QUIET",
    "HandlerResult",
    "OtherLoopError",
    "RunningWorker",
    "check_service",
    "make_job",
    "memory_config",
    "memory_sqs",
    "memory_worker",
    "run_batch",
    "run_batch_async",
    "run_handler",
    "run_handler_async",
    "stand_in_http",
]


def _body(value: str | bytes | BaseModel | Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value)


def make_job(
    payload: Any,
    *,
    queue: str = "test-queue",
    body: str | None = None,
    message_id: str | None = None,
    receive_count: int = 1,
    max_retries: int | None = 4,
    group_id: str | None = None,
    attributes: Mapping[str, str] | None = None,
    message_attributes: Mapping[str, Any] | None = None,
    worker_id: str = "test-worker",
    envelope: Envelope | None = None,
    resources: Any = None,
) -> Job[Any]:
    """A `Job` as a handler receives it, carrying `payload` as given (no validation), and
    `resources` as `job.resources`."""
    attrs = {"ApproximateReceiveCount": str(receive_count), **(attributes or {})}
    if group_id is not None:
        attrs["MessageGroupId"] = group_id
    return Job(
        id=message_id or str(uuid.uuid4()),
        queue=queue,
        body=body if body is not None else _body(payload),
        payload=payload,
        attributes=attrs,
        message_attributes=dict(message_attributes or {}),
        receive_count=receive_count,
        max_retries=max_retries,
        worker_id=worker_id,
        envelope=envelope,
        resources=resources,
        logger=logging.getLogger(f"sqs_worker_engine.testing.{queue}"),
    )


class _FromLifespan:
    """The default of `resources=`: open the router's lifespan around the call."""

    def __repr__(self) -> str:
        return "FROM_LIFESPAN"


FROM_LIFESPAN: Any = _FromLifespan()


@contextlib.asynccontextmanager
async def _resources(router: Router, given: Any) -> AsyncIterator[Any]:
    if given is not FROM_LIFESPAN:
        yield given
        return
    async with router.open_resources() as opened:
        yield opened


@dataclass
class HandlerResult:
    """What running one message through its handler came to."""

    outcome: Outcome
    job: Job[Any] | None  # None when the body never became a payload
    error: BaseException | None = None

    @property
    def reason(self) -> str:
        """The error as the DLQ records it: `Type: message`, or "" on success."""
        return "" if self.error is None else f"{type(self.error).__name__}: {self.error}"

    @property
    def retry_after(self) -> float | None:
        """The delay a handler asked for with `RetryLater(seconds)`, else None."""
        return self.error.seconds if isinstance(self.error, RetryLater) else None


async def run_handler_async(
    router: Router,
    queue: str,
    message: str | bytes | BaseModel | Any,
    *,
    timeout: float | None = None,  # noqa: ASYNC109 - stands for the job timeout, as the worker applies it
    stopping: bool = False,
    resources: Any = FROM_LIFESPAN,
    **job_fields: Any,
) -> HandlerResult:
    """Run `queue`'s handler on `message` (a body string, a model, or a JSON-able value).

    `timeout` stands for the job timeout; `stopping=True` runs it as during a SIGTERM
    drain (`job.stopping` set). `resources` is `job.resources` (default: the router's
    lifespan is entered around the call). `job_fields` go to `make_job` (receive_count,
    group_id...).
    """
    read = _read(router, queue, message)
    if isinstance(read, HandlerResult):
        return read  # a body the worker would drop or dead-letter unrun: no lifespan is opened for it
    async with _resources(router, resources) as shared:
        return await _run_one(router, queue, read, timeout, stopping, shared, job_fields)


@dataclass
class _Read:
    """A message as its handler will get it: its body, payload and envelope."""

    body: str
    payload: Any
    envelope: Any


def _read(router: Router, queue: str, message: str | bytes | BaseModel | Any) -> _Read | HandlerResult:
    """The message through the handler's envelope and payload model, as the worker reads it
    before it opens anything for the job; or the outcome of a body it refuses."""
    spec = router.get(queue)
    if spec is None:
        raise LookupError(f"no handler for queue {queue!r}; the router serves {router.queues}")
    if spec.batch is not None:
        raise TypeError(f"{queue!r} has a batch handler: run it with run_batch(router, queue, [messages])")
    body = _body(message)
    try:
        payload, envelope = read_payload(spec.payload, spec.envelope, body)
    except ControlMessage as exc:
        return HandlerResult("dropped", None, exc)
    except PayloadError as exc:
        return HandlerResult("dead_letter", None, exc)
    return _Read(body, payload, envelope)


async def _run_one(
    router: Router,
    queue: str,
    read: _Read,
    timeout: float | None,  # noqa: ASYNC109
    stopping: bool,
    resources: Any,
    job_fields: dict[str, Any],
) -> HandlerResult:
    spec = router.get(queue)
    assert spec is not None
    job = make_job(read.payload, queue=queue, body=read.body, envelope=read.envelope, resources=resources, **job_fields)
    if stopping:
        job._request_stop()
    if spec.mode == "async":
        work: Any = spec.fn(job)
    else:  # threads and processes alike: the handler is a plain function of the job
        # A process handler gets the job as its process does: pickled there and back, without
        # resources, with the process's logger (a test that passed on what its process never
        # has would pass a handler that fails every job deployed).
        called = pickle.loads(pickle.dumps(job)) if spec.mode == "process" else job  # noqa: S301 - our own bytes
        work = asyncio.to_thread(call_sync, spec.fn, called)
    try:
        await asyncio.wait_for(work, timeout)
    except TimeoutError:
        job._cancel("timeout")
        return HandlerResult("timeout", job, TimeoutError(f"job exceeded its timeout of {timeout:g} s"))
    except Exception as exc:
        return HandlerResult(classify(exc), job, exc)
    return HandlerResult("success", job)


class OtherLoopError(RuntimeError):
    """`resources=` were made on another event loop than the one `run_handler` started."""


# What asyncio, aiohttp and their kind say when an object of one loop is used on another.
_OTHER_LOOP = ("Event loop is closed", "attached to a different loop", "different event loop")


def _same_loop(results: list[HandlerResult], resources: Any) -> None:
    """Raise OtherLoopError where a result's error is the loop's, not the handler's."""
    if resources is FROM_LIFESPAN:
        return  # opened by the router's lifespan on this very loop
    for result in results:
        error = result.error
        if isinstance(error, RuntimeError) and any(text in str(error) for text in _OTHER_LOOP):
            raise OtherLoopError(
                f"the handler failed with {result.reason!r}: the resources= given were made on another event "
                "loop than the one run_handler starts for each call. Make them in an async test and "
                "`await run_handler_async(...)` there (pytest-asyncio's @pytest.mark.asyncio, or anyio's "
                "@pytest.mark.anyio): it runs on the test's own loop"
            ) from error


def run_handler(
    router: Router,
    queue: str,
    message: str | bytes | BaseModel | Any,
    **options: Any,
) -> HandlerResult:
    """`run_handler_async` from synchronous test code, on an event loop of its own (for
    resources made on the test's loop, use `run_handler_async`)."""
    result = asyncio.run(run_handler_async(router, queue, message, **options))
    _same_loop([result], options.get("resources", FROM_LIFESPAN))
    return result


async def run_batch_async(
    router: Router,
    queue: str,
    messages: Sequence[str | bytes | BaseModel | Any],
    *,
    timeout: float | None = None,  # noqa: ASYNC109 - stands for the job timeout, as the worker applies it
    resources: Any = FROM_LIFESPAN,
    **job_fields: Any,
) -> list[HandlerResult]:
    """Run `queue`'s batch handler once on `messages`; one result per message, in order.
    A body that fails the envelope or the model is dead-lettered and left out of the call.
    `resources` as for `run_handler_async`."""
    async with _resources(router, resources) as shared:
        return await _run_batch(router, queue, messages, timeout, shared, job_fields)


async def _run_batch(
    router: Router,
    queue: str,
    messages: Sequence[str | bytes | BaseModel | Any],
    timeout: float | None,  # noqa: ASYNC109
    resources: Any,
    job_fields: dict[str, Any],
) -> list[HandlerResult]:
    spec = router.get(queue)
    if spec is None:
        raise LookupError(f"no handler for queue {queue!r}; the router serves {router.queues}")
    if spec.batch is None:
        raise TypeError(f"{queue!r} has a handler of one message: run it with run_handler")
    results: list[HandlerResult | None] = [None] * len(messages)
    jobs: list[tuple[int, Job[Any]]] = []
    for i, message in enumerate(messages):
        body = _body(message)
        try:
            payload, envelope = read_payload(spec.payload, spec.envelope, body)
        except ControlMessage as exc:
            results[i] = HandlerResult("dropped", None, exc)
            continue
        except PayloadError as exc:
            results[i] = HandlerResult("dead_letter", None, exc)
            continue
        jobs.append(
            (i, make_job(payload, queue=queue, body=body, envelope=envelope, resources=resources, **job_fields))
        )
    batch = [job for _, job in jobs]
    if batch:
        work: Any = spec.fn(batch) if spec.mode == "async" else asyncio.to_thread(call_sync, spec.fn, batch)
        try:
            failed = item_failures([job.id for job in batch], await asyncio.wait_for(work, timeout))
        except TimeoutError:
            error = TimeoutError(f"job exceeded its timeout of {timeout:g} s")
            for i, job in jobs:
                job._cancel("timeout")
                results[i] = HandlerResult("timeout", job, error)
        except BatchResponseError as exc:
            for i, job in jobs:
                results[i] = HandlerResult("retry", job, exc)
        except Exception as exc:
            for i, job in jobs:
                results[i] = HandlerResult(classify(exc), job, exc)
        else:
            for i, job in jobs:
                reported = BatchItemFailedError("reported failed by the batch handler") if job.id in failed else None
                results[i] = HandlerResult(classify(reported), job, reported)
    return [r for r in results if r is not None]


def run_batch(router: Router, queue: str, messages: Sequence[Any], **options: Any) -> list[HandlerResult]:
    """`run_batch_async` from synchronous test code, on an event loop of its own."""
    results = asyncio.run(run_batch_async(router, queue, messages, **options))
    _same_loop(results, options.get("resources", FROM_LIFESPAN))
    return results


# -- a memory worker: the real Worker against the in-memory SQS --------------------------
# The worker's modules (its SQS clients among them) load when a worker is made, as the
# end-to-end check's do below: a handler's unit tests never load them.

MEMORY_QUEUE = "jobs"  # the queue, when a caller names none
QUIET = {
    "AWS_REGION": "us-east-1",  # the clients' region: the in-memory SQS answers in any
    "WORKER_METRICS_PORT": "0",  # no /metrics server: many workers run in one process
    "WORKER_BACKLOG_SAMPLE_SECONDS": "3600",  # no backlog sampling among the calls the worker makes
}


def memory_sqs(
    *queues: str,
    messages: int = 0,
    body: Callable[[int], str] = "m-{}".format,
    dlq_after: int | None = None,
    attributes: Mapping[str, str] | None = None,
) -> MemorySQS:
    """An in-memory SQS with each of `queues` (default MEMORY_QUEUE) on it, and `messages`
    waiting on each, the i-th with the body `body(i)` (`m-0`, `m-1`, ...). Made on the
    running loop, whose time the in-memory SQS keeps.

    `dlq_after`: each queue gets its DLQ (`<queue>-dlq`), which takes a message at that
    many receives. `attributes`: each queue's own (VisibilityTimeout, ...)."""
    from .doubles.memory import MemorySQS

    sqs = MemorySQS()
    for queue in queues or (MEMORY_QUEUE,):
        if dlq_after is None:
            sqs.create_queue(queue, **(attributes or {}))
        else:
            sqs.create_queue_with_dlq(queue, max_receive_count=dlq_after, **(attributes or {}))
        for i in range(messages):
            sqs.put(queue, body(i))
    return sqs


def memory_config(*queues: str, name: str = "memory", **env: str) -> WorkerConfig:
    """The settings of a worker consuming `queues` (default MEMORY_QUEUE) off the network:
    QUIET, then the caller's `env` (WORKER_CONCURRENCY="8", ...), validated as
    `load_settings` validates the environment. `name`: the service's (its logs, its health
    file)."""
    from .process.settings import ServiceDefaults, load_settings

    settings = {**QUIET, "WORKER_QUEUES": ",".join(queues or (MEMORY_QUEUE,)), **env}
    return load_settings(settings, ServiceDefaults(name=name))


class RunningWorker:
    """A worker started as a task on the running loop; `stop()` is what SIGTERM does.
    `stopped_at`: the loop's time when its run ended, once it has."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.task = asyncio.create_task(worker.run())
        self.stopped_at: float | None = None
        self.task.add_done_callback(lambda _task: setattr(self, "stopped_at", clock.now()))

    async def stop(self, reason: str = "SIGTERM") -> float:
        """Stop the worker as `reason` would and wait for its run to end; how long that took."""
        began = clock.now()
        self.worker.stop(reason)
        await self.task
        return clock.now() - began


def memory_worker(sqs: MemorySQS, router: Router, *queues: str, name: str = "memory", **env: str) -> RunningWorker:
    """The real Worker against `sqs`, with `memory_config`'s settings, started on the running
    loop: it receives once the caller next awaits."""
    from .process.worker import Worker

    return RunningWorker(Worker(memory_config(*queues, name=name, **env), router, client=sqs))


def __getattr__(name: str) -> Any:
    # The end-to-end check imports the worker and the producer: only for the tests that use it.
    if name == "check_service":
        from .doubles.end_to_end import check_service

        return check_service
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
