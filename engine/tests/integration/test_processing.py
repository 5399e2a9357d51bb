"""Messages flow through the worker against LocalStack: received, run, deleted in batches."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import threading
import time
from collections import Counter
from typing import Any

import pytest

from sqs_worker_engine import Job, Router, Worker, WorkerState
from sqs_worker_engine.base.telemetry.events import Error, JobStarted
from sqs_worker_engine.process.settings import load_settings
from sqs_worker_engine.process.worker import StartupError
from sqs_worker_engine.runtime.receiving import EMPTY_SHORT_POLL_PAUSE

from ..support import CallLog, Sqs, env_for, metric, running_worker, wait_for


def test_messages_are_processed_once_and_deleted(sqs: Sqs, localstack_endpoint: str, health_file: str) -> None:
    queue = sqs.create()
    seen: Counter[str] = Counter()
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        seen[job.payload["n"]] += 1

    sqs.send(queue, [{"n": str(i)} for i in range(25)])
    calls = CallLog()

    async def scenario() -> None:
        env = env_for(localstack_endpoint, queue.name, health_file, WORKER_CONCURRENCY=5)
        async with running_worker(env, router, calls.attach):
            await wait_for(lambda: len(seen) == 25, what="25 jobs")
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), what="queue empty")

    asyncio.run(scenario())
    assert seen == Counter({str(i): 1 for i in range(25)})
    assert metric("jobs_processed_total", queue=queue.name, outcome="success") == 25
    deletes = calls.named("DeleteMessageBatch")
    assert sum(len(d["Entries"]) for d in deletes) == 25
    assert len(deletes) < 25, "deletes must be batched"
    assert all(len(d["Entries"]) <= 10 for d in deletes)
    assert not calls.named("DeleteMessage"), "single deletes cost one request per message"


@pytest.mark.parametrize(("prefetch", "messages"), [(0, 20), (5, 40)])
def test_never_receives_more_than_free_places(
    sqs: Sqs, localstack_endpoint: str, health_file: str, prefetch: int, messages: int
) -> None:
    """A pool holds at most its concurrency plus its prefetch cap (0: today's free slots
    only), and runs no more than its concurrency at once."""
    queue = sqs.create()
    running = 0
    peak = 0
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.2)
        running -= 1

    sqs.send(queue, [{"n": i} for i in range(messages)])
    calls = CallLog()
    in_flight_seen: list[int] = []

    async def scenario() -> None:
        env = env_for(localstack_endpoint, queue.name, health_file, WORKER_CONCURRENCY=3, WORKER_PREFETCH=prefetch)
        async with running_worker(env, router, calls.attach):
            for _ in range(8):
                in_flight_seen.append(sqs.counts(queue.url)[1])
                await asyncio.sleep(0.2)
            await wait_for(lambda: metric("jobs_processed_total", queue=queue.name, outcome="success") == messages)

    asyncio.run(scenario())
    asked = [c["MaxNumberOfMessages"] for c in calls.named("ReceiveMessage")]
    places = 3 + prefetch
    assert asked and max(asked) <= places, f"asked for more than the {places} places: {asked}"
    assert peak == 3
    # Nothing held invisible beyond the places (plus deletes not yet flushed).
    assert max(in_flight_seen) <= places + 3, in_flight_seen


def test_concurrency_above_ten_uses_several_pollers(sqs: Sqs, localstack_endpoint: str, health_file: str) -> None:
    queue = sqs.create()
    running = 0
    peak = 0
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(1.5)
        running -= 1

    sqs.send(queue, [{"n": i} for i in range(25)])
    calls = CallLog()

    async def scenario() -> None:
        env = env_for(localstack_endpoint, queue.name, health_file, WORKER_CONCURRENCY=25)
        async with running_worker(env, router, calls.attach) as worker:
            # One poller per 10 places: the concurrency and its default prefetch cap.
            assert worker.pools[0].options.pollers == 10  # ceil((25 + 75) / 10)
            await wait_for(lambda: metric("jobs_processed_total", queue=queue.name, outcome="success") == 25)

    asyncio.run(scenario())
    assert peak == 25, f"only {peak} of 25 slots were ever busy at once"
    assert all(c["MaxNumberOfMessages"] <= 10 for c in calls.named("ReceiveMessage"))


def test_sync_handlers_run_in_threads_async_on_the_loop(sqs: Sqs, localstack_endpoint: str, health_file: str) -> None:
    sync_q, async_q = sqs.create(), sqs.create()
    where: dict[str, str] = {}
    router = Router()
    loop_thread = threading.get_ident()

    @router.handler(sync_q.name)
    def blocking(job: Job[Any]) -> None:
        where["sync"] = "thread" if threading.get_ident() != loop_thread else "loop"
        job.logger.info("from a thread")

    @router.handler(async_q.name)
    async def non_blocking(job: Job[Any]) -> None:
        where["async"] = "thread" if threading.get_ident() != loop_thread else "loop"

    sqs.send(sync_q, [{"n": 1}])
    sqs.send(async_q, [{"n": 1}])

    async def scenario() -> None:
        nonlocal loop_thread
        loop_thread = threading.get_ident()
        env = env_for(localstack_endpoint, f"{sync_q.name},{async_q.name}", health_file)
        async with running_worker(env, router):
            await wait_for(lambda: len(where) == 2)

    asyncio.run(scenario())
    assert where == {"sync": "thread", "async": "loop"}


def test_async_callables_that_are_not_plain_coroutine_functions_run_or_fail_loudly(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    """An object with an async __call__ and a decorated coroutine function are awaited; a plain
    function that returns a coroutine is an error (retried, with the reason), never a success
    that deletes the message without its work being done."""
    callable_q, decorated_q, wrapper_q = sqs.create(), sqs.create(), sqs.create(max_receive=None)
    ran: list[str] = []
    router = Router()

    class Handler:
        async def __call__(self, job: Job[Any]) -> None:
            ran.append("callable object")

    def logged(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(job: Job[Any]) -> Any:
            return fn(job)  # the coroutine, unawaited: a common way to write a decorator

        return wrapper

    @router.handler(decorated_q.name)
    @logged
    async def decorated(job: Job[Any]) -> None:
        ran.append("decorated")

    async def real(job: Job[Any]) -> None:
        ran.append("behind a wrapper")

    router.handler(callable_q.name)(Handler())
    router.handler(wrapper_q.name)(lambda job: real(job))
    for queue in (callable_q, decorated_q, wrapper_q):
        sqs.send(queue, [{"n": 1}])

    async def scenario() -> None:
        env = env_for(localstack_endpoint, f"{callable_q.name},{decorated_q.name},{wrapper_q.name}", health_file)
        async with running_worker(env, router):
            await wait_for(lambda: len(ran) == 2, what="both async callables to run")
            await wait_for(
                lambda: metric("jobs_processed_total", queue=wrapper_q.name, outcome="retry") >= 1,
                what="the wrapper's coroutine to be refused",
            )

    asyncio.run(scenario())
    assert sorted(ran) == ["callable object", "decorated"]
    assert sqs.counts(callable_q.url) == (0, 0) and sqs.counts(decorated_q.url) == (0, 0)
    assert metric("jobs_processed_total", queue=wrapper_q.name, outcome="success") == 0
    assert sum(sqs.counts(wrapper_q.url)) == 1, "the message is still there, for a fixed handler"


def cpu_bound(job: Job[Any]) -> None:
    """Module level so a worker process can import it."""
    with open(job.payload["out"], "a") as handle:
        handle.write(f"{os.getpid()}\n")


def test_process_executor_runs_handlers_in_other_processes(
    sqs: Sqs, localstack_endpoint: str, health_file: str, tmp_path: Any
) -> None:
    queue = sqs.create()
    out = tmp_path / "pids"
    router = Router()
    router.handler(queue.name, executor="process")(cpu_bound)
    sqs.send(queue, [{"out": str(out)} for _ in range(4)])

    async def scenario() -> None:
        env = env_for(localstack_endpoint, queue.name, health_file, WORKER_PROCESS_POOL_SIZE=2)
        async with running_worker(env, router):
            await wait_for(lambda: metric("jobs_processed_total", queue=queue.name, outcome="success") == 4, 120)

    asyncio.run(scenario())
    pids = set(out.read_text().split())
    assert pids and str(os.getpid()) not in pids


def crashes_or_records(job: Job[Any]) -> None:
    """Module level so a worker process can import it: a "crash" payload kills its process."""
    if job.payload.get("crash"):
        os._exit(1)
    with open(job.payload["out"], "a") as handle:
        handle.write(f"{job.payload['n']}\n")


def test_a_dead_handler_process_does_not_wedge_the_queue(
    sqs: Sqs, localstack_endpoint: str, health_file: str, tmp_path: Any
) -> None:
    """A handler process that dies (a segfault, the OOM killer) breaks Python's process pool
    for good; the worker replaces the pool, the job it was running is retried, and the
    messages after it run."""
    queue = sqs.create(visibility=10, max_receive=2)
    out = tmp_path / "done"
    router = Router()
    router.handler(queue.name, executor="process")(crashes_or_records)
    sqs.send(queue, [{"crash": True, "out": str(out), "n": -1}])

    async def scenario() -> None:
        env = env_for(localstack_endpoint, queue.name, health_file, WORKER_PROCESS_POOL_SIZE=1, WORKER_CONCURRENCY=1)
        async with running_worker(env, router):
            await wait_for(lambda: metric("jobs_processed_total", queue=queue.name, outcome="retry") >= 1, 120)
            sqs.send(queue, [{"out": str(out), "n": n} for n in range(3)])
            await wait_for(lambda: metric("jobs_processed_total", queue=queue.name, outcome="success") == 3, 120)

    asyncio.run(scenario())
    assert sorted(out.read_text().split()) == ["0", "1", "2"]


def sleeps_crashes_or_records(job: Job[Any]) -> None:
    """Module level so a worker process can import it: works a second, or kills its process."""
    if job.payload.get("crash"):
        time.sleep(0.3)  # its neighbours are under way when it dies
        os._exit(1)
    time.sleep(1.0)
    with open(job.payload["out"], "a") as handle:
        handle.write(f"{job.payload['n']}:{job.receive_count}\n")


def test_a_dead_handler_process_charges_only_the_job_that_killed_it(
    sqs: Sqs, localstack_endpoint: str, health_file: str, tmp_path: Any
) -> None:
    """A pool of 2 processes, concurrency 4, maxReceiveCount 2: one message kills its
    process. Python's pool fails every job it held; they were retried as their own
    failures, and 3 of 8 ordinary messages went to the DLQ beside the one that crashed.
    Now the jobs caught in the break run again at once, each in a process of its own,
    without spending a receive, and only the job that kills its process alone is charged."""
    queue = sqs.create(visibility=30, max_receive=2)
    out = tmp_path / "done"
    router = Router()
    router.handler(queue.name, executor="process")(sleeps_crashes_or_records)
    messages: list[dict[str, Any]] = [{"out": str(out), "n": n} for n in range(8)]
    messages.insert(2, {"crash": True, "out": str(out), "n": -1})
    sqs.send(queue, messages)

    async def scenario() -> None:
        env = env_for(
            localstack_endpoint,
            queue.name,
            health_file,
            WORKER_PROCESS_POOL_SIZE=2,
            WORKER_CONCURRENCY=4,
            WORKER_RETRY_BASE_SECONDS=0.5,
        )
        async with running_worker(env, router):
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), 240, "every message settled")

    asyncio.run(scenario())
    done = dict(line.split(":") for line in out.read_text().split())
    assert sorted(done, key=int) == [str(n) for n in range(8)], "every ordinary message ran to success"
    assert set(done.values()) == {"1"}, f"receives spent by ordinary messages: {done}"
    assert queue.dlq_url is not None
    dead = [json.loads(m["Body"]) for m in sqs.receive_all(queue.dlq_url)]
    assert [m.get("crash") for m in dead] == [True], f"in the DLQ: {dead}"


def test_events_state_and_job_context(sqs: Sqs, localstack_endpoint: str, health_file: str) -> None:
    queue = sqs.create(max_receive=4)
    events: list[str] = []
    contexts: list[dict[str, Any]] = []
    states: list[WorkerState] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        job.progress(50, "half way")
        contexts.append(
            {
                "id": job.id,
                "queue": job.queue,
                "payload": job.payload,
                "receive_count": job.receive_count,
                "retry_count": job.retry_count,
                "max_retries": job.max_retries,
                "worker_id": job.worker_id,
                "cancelled": job.cancelled,
                "progress": job.last_progress,
            }
        )

    sqs.send(queue, [{"hello": "world"}])

    async def scenario() -> None:
        env = env_for(localstack_endpoint, queue.name, health_file, WORKER_ID="orders-7")
        worker = Worker(load_settings(env), router)
        assert worker.state == WorkerState.IDLE
        unsubscribe = {}
        for name in ("started", "job:claimed", "job:started", "job:progress", "job:completed", "stopped"):
            unsubscribe[name] = worker.on(name, lambda e: events.append(e["event"]))
        ignored: list[JobStarted] = []
        worker.on("job:started", ignored.append)
        worker.off("job:started", ignored.append)
        task = asyncio.create_task(worker.run())
        await wait_for(lambda: worker.state == WorkerState.RUNNING)
        states.append(worker.state)
        await wait_for(lambda: "job:completed" in events)
        unsubscribe["stopped"]()
        worker.stop()
        await task
        states.append(worker.state)
        assert worker.worker_id == "orders-7"
        assert worker.active_job_count == 0
        assert ignored == []

    asyncio.run(scenario())
    assert events == ["started", "job:claimed", "job:started", "job:progress", "job:completed"]
    assert states == [WorkerState.RUNNING, WorkerState.STOPPED]
    (ctx,) = contexts
    assert ctx["queue"] == queue.name and ctx["payload"] == {"hello": "world"}
    assert ctx["receive_count"] == 1 and ctx["retry_count"] == 0 and ctx["max_retries"] == 3
    assert ctx["worker_id"] == "orders-7" and ctx["cancelled"] is False
    assert ctx["progress"] == (50, "half way")


def test_a_missing_queue_puts_the_worker_in_the_error_state(localstack_endpoint: str, health_file: str) -> None:
    router = Router()
    router.handler("no-such-queue-anywhere")(lambda job: None)
    worker = Worker(load_settings(env_for(localstack_endpoint, "no-such-queue-anywhere", health_file)), router)
    errors: list[Error] = []
    worker.on("error", errors.append)

    async def scenario() -> None:
        await worker.run()

    with pytest.raises(StartupError, match="does not exist"):
        asyncio.run(scenario())
    assert worker.state == WorkerState.ERROR
    assert [e["where"] for e in errors] == ["start"]


def test_short_polling_an_empty_queue_does_not_spin(sqs: Sqs, localstack_endpoint: str, health_file: str) -> None:
    """WORKER_WAIT_TIME_SECONDS=0 (short polls) answers at once when the queue is empty; the
    poller pauses before asking again instead of hammering SQS, and still picks up work."""
    queue = sqs.create()
    done: list[int] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        done.append(job.payload["n"])

    calls = CallLog()
    window = 3.0
    pollers: list[int] = []

    async def scenario() -> None:
        env = env_for(localstack_endpoint, queue.name, health_file, WORKER_WAIT_TIME_SECONDS=0)
        async with running_worker(env, router, calls.attach) as worker:
            pollers.append(worker.pools[0].options.pollers)
            before = calls.completed("ReceiveMessage")
            await asyncio.sleep(window)  # a counting window, not a measurement: load only lowers the count
            calls_in_window.append(calls.completed("ReceiveMessage") - before)
            sqs.send(queue, [{"n": 1}])
            await wait_for(lambda: done == [1], what="the job sent after the idle window")

    calls_in_window: list[int] = []
    asyncio.run(scenario())
    # The lead poller pauses between empty answers; the others stop after their first.
    assert pollers[0] > 1
    assert calls_in_window[0] <= window / EMPTY_SHORT_POLL_PAUSE + 1 + pollers[0], (
        f"{calls_in_window[0]} receives in {window:g} s by {pollers[0]} pollers: spinning"
    )


def test_a_batch_handler_s_partial_failure_retries_exactly_the_failed_messages(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    """One call takes more than one receive's 10; the ids the response names come back with
    their own receive counts, and go to the DLQ after maxReceiveCount; the rest run once."""
    from sqs_worker_engine.handlers.batches import failures

    queue = sqs.create(max_receive=3)
    bodies = [f"ok-{i}" for i in range(20)] + ["bad-1", "bad-2", "bad-3", "flaky-1", "flaky-2"]
    calls: list[list[tuple[str, int]]] = []
    router = Router()

    @router.batch_handler(queue.name, payload=str, size=25, wait_ms=2000)
    async def handle(jobs: list[Job[str]]) -> dict[str, Any]:
        calls.append([(j.payload, j.receive_count) for j in jobs])
        return failures(
            j for j in jobs if j.payload.startswith("bad") or (j.payload.startswith("flaky") and j.receive_count == 1)
        )

    sqs.send(queue, bodies)

    dlq_url = queue.dlq_url
    assert dlq_url is not None

    async def scenario() -> None:
        env = env_for(localstack_endpoint, queue.name, health_file, WORKER_CONCURRENCY=25)
        async with running_worker(env, router):
            await wait_for(lambda: sqs.counts(dlq_url) == (3, 0), 120, "3 in the DLQ")
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), 60, "the queue empty")

    asyncio.run(scenario())
    seen: dict[str, list[int]] = {}
    for batch in calls:
        for body, count in batch:
            seen.setdefault(body, []).append(count)
    assert {b: seen[b] for b in bodies if b.startswith("ok")} == {b: [1] for b in bodies if b.startswith("ok")}
    assert {b: sorted(seen[b]) for b in ("flaky-1", "flaky-2")} == {"flaky-1": [1, 2], "flaky-2": [1, 2]}
    assert {b: sorted(seen[b]) for b in ("bad-1", "bad-2", "bad-3")} == {f"bad-{i}": [1, 2, 3] for i in (1, 2, 3)}
    assert max(len(b) for b in calls) > 10, [len(b) for b in calls]
    dead = sorted(m["Body"] for m in sqs.receive_all(dlq_url))
    assert dead == ["bad-1", "bad-2", "bad-3"]


def test_a_plain_batch_handler_runs_in_a_thread(sqs: Sqs, localstack_endpoint: str, health_file: str) -> None:
    queue = sqs.create()
    calls: list[tuple[str, int]] = []
    router = Router()

    @router.batch_handler(queue.name, size=12, wait_ms=2000)
    def load(jobs: list[Job[Any]]) -> None:
        calls.append((threading.current_thread().name, len(jobs)))

    sqs.send(queue, [{"n": i} for i in range(12)])

    async def scenario() -> None:
        async with running_worker(env_for(localstack_endpoint, queue.name, health_file, WORKER_CONCURRENCY=12), router):
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), 60, "the queue empty")

    asyncio.run(scenario())
    assert sum(n for _, n in calls) == 12
    assert all(name.startswith(f"job-{queue.name}") for name, _ in calls), calls
