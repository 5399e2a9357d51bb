"""Pure parts of the runtime: backoff, payload parsing, DLQ records, events, router, health."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from sqs_worker_engine import Job, Router
from sqs_worker_engine.base.backoff import Backoff, backoff_delay
from sqs_worker_engine.base.errors import NonRetryableError, PayloadError
from sqs_worker_engine.base.telemetry.events import Events
from sqs_worker_engine.base.telemetry.health import Health, check, check_file, progress_file, progress_files
from sqs_worker_engine.formats.dlq import dead_letter_request
from sqs_worker_engine.formats.payload import parse_payload
from sqs_worker_engine.runtime.admission import admission as slot_module
from sqs_worker_engine.runtime.admission.admission import Admission, Grant
from sqs_worker_engine.runtime.settling.acker import ATTEMPTS, RETRY_SECONDS, keep_trying
from sqs_worker_engine.runtime.settling.delivery import extension_seconds


def test_backoff_grows_with_jitter_and_is_capped() -> None:
    low = [backoff_delay(n, 2, 300, rand=0.0) for n in range(1, 10)]
    high = [backoff_delay(n, 2, 300, rand=1.0) for n in range(1, 10)]
    assert low == [1, 2, 4, 8, 16, 32, 64, 128, 150]
    assert high == [2, 4, 8, 16, 32, 64, 128, 256, 300]
    assert backoff_delay(10_000, 2, 300) <= 300
    b = Backoff(base=0.5, cap=20)
    delays = [b.next_delay() for _ in range(8)]
    assert delays[-1] >= 10 and all(d <= 20 for d in delays)
    b.reset()
    assert b.next_delay() <= 0.5


def test_a_failed_settle_is_retried_for_its_attempts_and_its_seconds() -> None:
    assert all(keep_trying(n, 100.0, 100.0 + RETRY_SECONDS + 60) for n in range(1, ATTEMPTS))
    assert keep_trying(ATTEMPTS + 5, 100.0, 100.0 + RETRY_SECONDS / 2), "a burst of fast failures"
    assert not keep_trying(ATTEMPTS, 100.0, 100.0 + RETRY_SECONDS), "both budgets spent"


def test_extension_never_passes_the_twelve_hour_cap() -> None:
    twelve_hours = 43_200
    now = 1000.0
    assert extension_seconds(30, now, now) == 30
    assert extension_seconds(30, now - (twelve_hours - 10), now) == 9
    assert extension_seconds(30, now - twelve_hours, now) == 0


class Order(BaseModel):
    order_id: int


def test_payload_parsing() -> None:
    assert parse_payload(None, '{"a": 1}') == {"a": 1}
    assert parse_payload(str, "plain text") == "plain text"
    assert parse_payload(Order, '{"order_id": 5}') == Order(order_id=5)
    for model, body in [(None, "not json"), (Order, '{"order_id": "x"}'), (Order, "[]"), (None, "\udcff")]:
        with pytest.raises(PayloadError):
            parse_payload(model, body)
    assert issubclass(PayloadError, NonRetryableError)


def message(attrs: int) -> dict[str, Any]:
    return {
        "MessageId": "m-1",
        "Body": "{}",
        "Attributes": {"ApproximateReceiveCount": "2", "MessageGroupId": "g"},
        "MessageAttributes": {f"a{i}": {"DataType": "String", "StringValue": str(i)} for i in range(attrs)},
    }


def test_dead_letter_request_records_the_error_within_the_attribute_limit() -> None:
    request = dead_letter_request(message(10), "dlq-url", "orders", NonRetryableError("bad " * 1000), "w1", fifo=True)
    attrs = request["MessageAttributes"]
    assert len(attrs) == 10
    assert attrs["x-error-type"]["StringValue"] == "NonRetryableError"
    assert len(attrs["x-error-message"]["StringValue"]) <= 1024
    context = json.loads(attrs["x-error-context"]["StringValue"])
    assert context["receive_count"] == 2 and context["source_queue"] == "orders"
    assert set(context["attributes"]) == {"a7", "a8", "a9"}, "nothing is dropped"
    assert request["MessageGroupId"] == "g" and request["MessageDeduplicationId"] == "m-1"
    plain = dead_letter_request(message(1), "dlq-url", "orders", ValueError(), "w1", fifo=False)
    assert plain["MessageGroupId"] == "g", "on a standard queue, the fair queue's tenant"
    assert "MessageDeduplicationId" not in plain
    assert "attributes" not in json.loads(plain["MessageAttributes"]["x-error-context"]["StringValue"])


def test_events_subscribe_unsubscribe_and_isolate_failing_listeners() -> None:
    events = Events()
    got: list[str] = []
    off = events.on("job:completed", lambda e: got.append(e["job_id"]))
    events.on("job:completed", lambda e: 1 / 0)  # a broken listener must not break others
    events.emit("job:completed", worker_id="w", job_id="1", queue="q", result=None, duration=0.1)
    off()
    events.emit("job:completed", worker_id="w", job_id="2", queue="q", result=None, duration=0.1)
    assert got == ["1"]
    with pytest.raises(ValueError, match="unknown event"):
        events.on("job:exploded", print)  # type: ignore[call-overload]


def test_router_registration_rules() -> None:
    router = Router()

    @router.handler("q1")
    async def a(job: Job[Any]) -> None: ...

    @router.handler("q2", payload=Order)
    def b(job: Job[Order]) -> None: ...

    assert router.get("q1").mode == "async"  # type: ignore[union-attr]
    assert router.get("q2").mode == "thread"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="already has a handler"):
        router.handler("q1")(a)
    with pytest.raises(TypeError, match="pydantic model"):
        router.handler("q3", payload=dict)(a)
    with pytest.raises(TypeError, match="coroutine function"):
        router.handler("q4", executor="process")(a)


def test_job_cancellation_signal() -> None:
    job: Job[Any] = Job("1", "q", "{}", {}, {}, {}, 3, 4, "w")
    assert job.retry_count == 2 and not job.cancelled
    job.raise_if_cancelled()
    job._cancel("shutdown")
    assert job.cancelled and job.cancel_reason == "shutdown"
    with pytest.raises(Exception, match="shutdown"):
        job.raise_if_cancelled()
    with pytest.raises(ValueError, match="percent"):
        job.progress(101)


def test_healthcheck_verdict_from_the_progress_file(tmp_path: Path) -> None:
    base = tmp_path / "orders.progress"
    path = tmp_path / f"orders.{os.getpid()}.progress"  # this process's own
    assert check_file(str(path), 60)[0] is False
    health = Health(stalled_after=60, health_file=str(base))
    health.progress()
    health.write_file()
    assert check_file(str(path), 60)[0] is True and not base.exists()
    ok, message = check_file(str(path), 60, now=time.time() + 120)
    assert not ok and "stalled" in message
    path.write_text("garbage")
    assert check_file(str(path), 60)[0] is False


def test_liveness_follows_the_pool_longest_without_progress() -> None:
    """One queue's stuck slots stall the worker even while another queue keeps polling."""
    now = [1000.0]
    health = Health(stalled_after=60, health_file=None, monotonic=lambda: now[0])
    health.track(["orders", "receipts"])
    health.progress("orders")
    assert health.live()
    now[0] += 120
    health.progress("orders")  # orders keeps polling
    assert not health.live() and health.stalled_for() >= 120
    health.progress("receipts")
    assert health.live()


def test_a_resting_pool_is_live_and_a_pool_with_every_slot_held_is_not() -> None:
    """A pool waiting by design (paused, rate-limited, below a higher queue on a strict
    budget) is progress; one whose slots are all held by jobs that do not end is a stall."""
    now = [0.0]
    resting = {"paused": True, "stuck": False}
    health = Health(stalled_after=8, health_file=None, monotonic=lambda: now[0])
    health.track({name: (lambda name=name: resting[name]) for name in resting})
    now[0] = 20.0
    assert health.stalled_for() == 20.0, "the stuck pool is 20 s without progress"
    health.progress("stuck")
    assert health.live(), "the paused pool rests: it never stalls the worker"
    resting["paused"] = False
    now[0] = 29.0
    assert not health.live() and health.stalled_for() == 9.0


def test_slots_gather_a_wave_of_releases_into_one_reservation(monkeypatch: pytest.MonkeyPatch) -> None:
    # A long batch wait makes the test independent of the machine's speed: the reservation
    # must come back as soon as the whole wave is free, not when the wait runs out.
    monkeypatch.setattr(slot_module, "BATCH_WAIT", 30.0)

    async def scenario() -> tuple[int, int]:
        slots = Admission(10, 0)
        assert (await slots.reserve(10)).places == 10
        poller = asyncio.ensure_future(slots.reserve(10))
        for _ in range(10):  # one job ends per loop iteration, as a wave's jobs do
            slots.received(Grant(1), 0)
            await asyncio.sleep(0)
        n = (await asyncio.wait_for(poller, 5)).places
        return n, slots.in_use

    assert asyncio.run(scenario()) == (10, 10)


def test_slots_take_a_lone_free_slot_after_the_batch_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slot_module, "BATCH_WAIT", 0.01)

    async def scenario() -> int:
        slots = Admission(10, 0)
        await slots.reserve(10)
        poller = asyncio.ensure_future(slots.reserve(10))
        slots.received(Grant(1), 0)  # the other nine stay busy with longer jobs
        return (await asyncio.wait_for(poller, 5)).places

    assert asyncio.run(scenario()) == 1


def test_slots_never_hand_out_more_than_capacity() -> None:
    async def scenario() -> list[int]:
        slots = Admission(12, 0)
        first = (await slots.reserve(10)).places
        second = (await slots.reserve(10)).places
        pollers = [asyncio.ensure_future(slots.reserve(10)) for _ in range(3)]
        slots.received(Grant(first), 0)
        done, pending = await asyncio.wait(pollers, timeout=1)
        for task in pending:
            task.cancel()
        assert slots.in_use <= slots.capacity
        return [first, second, *sorted(t.result().places for t in done)]

    assert asyncio.run(scenario()) == [10, 2, 10]


def test_async_callables_are_recognised_however_they_are_wrapped() -> None:
    from sqs_worker_engine.handlers.router import is_coroutine_callable

    async def coro(job: Job[Any]) -> None: ...

    def plain(job: Job[Any]) -> None: ...

    class AsyncCall:
        async def __call__(self, job: Job[Any]) -> None: ...

    class SyncCall:
        def __call__(self, job: Job[Any]) -> None: ...

    @functools.wraps(coro)
    def decorated(job: Job[Any]) -> Any:
        return coro(job)

    cases: dict[Callable[..., Any], bool] = {
        coro: True,
        functools.partial(coro): True,
        decorated: True,
        AsyncCall(): True,
        plain: False,
        SyncCall(): False,
        lambda job: coro(job): False,  # undecidable before it runs: refused when it runs (below)
    }
    assert {fn: is_coroutine_callable(fn) for fn in cases} == cases


def test_a_plain_handler_that_returns_a_coroutine_is_retried_with_the_reason() -> None:
    from sqs_worker_engine.testing import run_handler

    router = Router()

    async def real(job: Job[Any]) -> None: ...

    router.handler("q")(lambda job: real(job))
    result = run_handler(router, "q", {"n": 1})
    assert result.outcome == "retry"
    assert "returned coroutine instead of doing its work" in result.reason


@pytest.mark.parametrize(
    ("last", "sig", "now", "echo"),
    [
        (None, "SIGINT", 0.0, False),  # the first signal always counts
        (("SIGINT", 10.0), "SIGINT", 10.2, True),  # a wrapper passing Ctrl-C on: the same stop
        (("SIGINT", 10.0), "SIGINT", 11.0, False),  # a second Ctrl-C, a second later: exit now
        (("SIGINT", 10.0), "SIGTERM", 10.2, False),  # another signal is another request
    ],
)
def test_a_repeat_of_the_same_signal_within_a_second_is_an_echo(
    last: tuple[str, float] | None, sig: str, now: float, echo: bool
) -> None:
    import signal

    from sqs_worker_engine.process.worker import is_echo

    previous = None if last is None else (signal.Signals[last[0]], last[1])
    assert is_echo(previous, signal.Signals[sig], now) is echo


def lifespan_router(log: list[str]) -> Router:
    from collections.abc import AsyncIterator

    router = Router()

    @router.lifespan
    async def shared() -> AsyncIterator[dict[str, str]]:
        log.append("open")
        yield {"client": "real"}
        log.append("close")

    @router.handler("q", payload=str)
    async def handle(job: Job[str]) -> None:
        log.append(job.resources["client"])

    @router.batch_handler("b", payload=str)
    def load(jobs: list[Job[str]]) -> None:
        log.extend(job.resources["client"] for job in jobs)

    return router


def test_run_handler_enters_the_lifespan_around_the_call_as_the_worker_does() -> None:
    from sqs_worker_engine.testing import run_batch, run_handler

    log: list[str] = []
    router = lifespan_router(log)
    assert run_handler(router, "q", "x").outcome == "success"
    assert log == ["open", "real", "close"]
    log.clear()
    assert [r.outcome for r in run_batch(router, "b", ["x", "y"])] == ["success", "success"]
    assert log == ["open", "real", "real", "close"]


def test_run_handler_takes_a_stand_in_for_the_resources_and_skips_the_lifespan() -> None:
    from sqs_worker_engine.testing import make_job, run_handler

    log: list[str] = []
    router = lifespan_router(log)
    assert run_handler(router, "q", "x", resources={"client": "fake"}).outcome == "success"
    assert log == ["fake"]
    assert make_job("x", resources={"client": "fake"}).resources == {"client": "fake"}


def test_a_lifespan_must_be_an_async_generator_or_give_a_context_manager() -> None:
    router = Router()

    @router.lifespan
    def wrong() -> Any:  # a plain function returning neither
        return 42

    with pytest.raises(TypeError, match="async generator function"):
        router.open_resources()
    with pytest.raises(ValueError, match="already has a lifespan"):
        router.lifespan(wrong)


def gone_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_healthcheck_judges_each_running_worker_by_its_own_file(tmp_path: Path) -> None:
    """Two workers of one service on one host: one stalled while the other makes progress
    is a failed check naming it (a file they shared said ok); a stopped worker's file is
    left out; `--pid` judges one worker."""
    base = str(tmp_path / "orders.progress")
    now = time.time()
    me, gone = os.getpid(), gone_pid()
    assert check(base, 60)[0] is False, "no file at all"
    Path(progress_file(base, gone)).write_text(f"{now}\n")
    ok, message = check(base, 60)
    assert not ok and f"only stopped workers': {gone}" in message, message
    Path(progress_file(base, me)).write_text(f"{now - 120}\n")  # running, stalled
    ok, message = check(base, 60, now=now)
    assert not ok and "stalled" in message and f"(worker {me})" in message, message
    Path(progress_file(base, me)).write_text(f"{now}\n")
    assert check(base, 60, now=now)[0] is True, "the stopped worker's file is left out"
    parent = os.getppid()  # another running worker, stalled
    Path(progress_file(base, parent)).write_text(f"{now - 120}\n")
    ok, message = check(base, 60, now=now)
    assert not ok and f"worker {parent}: stalled" in message and f"worker {me}: ok" in message, message
    assert check(base, 60, pid=me, now=now)[0] is True
    assert check(base, 60, pid=gone, now=now) == (
        False,
        f"worker {gone} is not running (its last progress file is {progress_file(base, gone)})",
    )
    assert check(base, 60, pid=1234567, now=now)[0] is False
    Path(tmp_path / "orders.x.progress").write_text("0\n")  # not a worker's: never read
    Path(tmp_path / "orders-b.7.progress").write_text("0\n")
    assert set(progress_files(base)) == {me, gone, parent}
