"""The batch collector and the partial batch response (batches.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sqs_worker_engine.handlers.batches import (
    BatchItemFailedError,
    BatchResponseError,
    Collector,
    failures,
    item_failures,
)
from sqs_worker_engine.testing import make_job

ids = st.lists(st.uuids().map(str), min_size=1, max_size=30, unique=True)


@given(ids=ids, data=st.data())
def test_the_failures_are_exactly_the_ids_the_response_names(ids: list[str], data: st.DataObject) -> None:
    failed = data.draw(st.lists(st.sampled_from(ids), unique=True))
    response = {"batchItemFailures": [{"itemIdentifier": i} for i in failed]}
    assert item_failures(ids, response) == set(failed)
    assert item_failures(ids, None) == set()
    assert item_failures(ids, {"batchItemFailures": []}) == set()


@pytest.mark.parametrize(
    ("response", "names"),
    [
        ([{"itemIdentifier": "a"}], "not list"),
        ({"failures": []}, "not dict"),
        ({"batchItemFailures": "a"}, "must be a list"),
        ({"batchItemFailures": [{"id": "a"}]}, "[0] has no itemIdentifier"),
        ({"batchItemFailures": [{"itemIdentifier": ""}]}, "[0] has no itemIdentifier"),
        ({"batchItemFailures": [{"itemIdentifier": "a"}, {"itemIdentifier": "z"}]}, "[1] names 'z'"),
        (True, "not bool"),
    ],
)
def test_a_response_that_is_not_a_partial_batch_response_is_named(response: Any, names: str) -> None:
    with pytest.raises(BatchResponseError) as info:
        item_failures(["a", "b"], response)
    assert names in str(info.value)


class Handler:
    """A batch handler the collector calls: records the calls, answers when told."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.responses: list[asyncio.Future[Any]] = []

    def __call__(self, jobs: list[Any]) -> tuple[asyncio.Future[Any], asyncio.Future[None]]:
        self.calls.append([j.payload for j in jobs])
        response: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        response.add_done_callback(lambda _r: ended.set_result(None))
        self.responses.append(response)
        return response, ended


async def eventually(condition: Any, timeout: float = 30.0) -> None:
    """Until `condition()` holds: timers and callbacks run when a busy machine gets to them."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "never happened"
        await asyncio.sleep(0.005)


def job(name: str) -> Any:
    return make_job(name, message_id=name)


@given(most=st.integers(1, 12), count=st.integers(0, 40))
def test_full_batches_go_at_once_and_the_rest_after_the_wait(most: int, count: int) -> None:
    async def play() -> None:
        handler = Handler()
        collector = Collector(handler, most=most, wait=0.01)
        results = [collector.submit(job(f"j{i}")) for i in range(count)]
        assert [len(c) for c in handler.calls] == [most] * (count // most)
        await eventually(lambda: sum(len(c) for c in handler.calls) == count)  # the last ones, after the wait
        assert [j for c in handler.calls for j in c] == [f"j{i}" for i in range(count)], "in the order they came"
        for response, call in zip(handler.responses, handler.calls, strict=True):
            response.set_result(failures([job(call[0])]))
        await asyncio.sleep(0)
        outcomes = ["failed" if r.exception() else r.result() for r, _ in results]
        firsts = {c[0] for c in handler.calls}
        assert outcomes == ["failed" if f"j{i}" in firsts else None for i in range(count)]
        assert all(isinstance(r.exception(), BatchItemFailedError) for r, _ in results if r.exception())
        await eventually(lambda: all(ended.done() for _, ended in results))  # the handler's work ended

    asyncio.run(play())


def test_a_job_given_up_while_it_waits_is_left_out_of_the_call() -> None:
    async def play() -> None:
        handler = Handler()
        collector = Collector(handler, most=3, wait=10)
        a, _ = collector.submit(job("a"))
        collector.submit(job("b"))
        a.cancel()
        collector.submit(job("c"))
        assert handler.calls == [], "b and c are not three"
        collector.flush()
        assert handler.calls == [["b", "c"]]

    asyncio.run(play())


def test_once_every_job_is_given_up_the_call_is_cancelled_but_not_before() -> None:
    async def play() -> None:
        handler = Handler()
        collector = Collector(handler, most=2, wait=10)
        (a, a_ended), (b, _) = collector.submit(job("a")), collector.submit(job("b"))
        [response] = handler.responses
        a.cancel()
        await asyncio.sleep(0)
        assert not response.cancelled(), "b still waits for the answer"
        b.cancel()
        await asyncio.sleep(0)
        assert response.cancelled()
        await eventually(a_ended.done)

    asyncio.run(play())


def test_an_exception_or_a_bad_response_ends_every_job_with_it() -> None:
    async def play() -> None:
        handler = Handler()
        collector = Collector(handler, most=2, wait=10)
        first = [collector.submit(job(n))[0] for n in ("a", "b")]
        second = [collector.submit(job(n))[0] for n in ("c", "d")]
        handler.responses[0].set_exception(ValueError("boom"))
        handler.responses[1].set_result({"batchItemFailures": [{"itemIdentifier": "a"}]})
        await asyncio.sleep(0)
        assert [str(r.exception()) for r in first] == ["boom", "boom"]
        assert all(isinstance(r.exception(), BatchResponseError) for r in second)

    asyncio.run(play())


def test_after_close_nothing_waits_for_company() -> None:
    async def play() -> None:
        handler = Handler()
        collector = Collector(handler, most=5, wait=10)
        collector.submit(job("a"))
        collector.close()
        assert handler.calls == [["a"]]
        collector.submit(job("b"))
        assert handler.calls == [["a"], ["b"]]

    asyncio.run(play())


def test_run_batch_gives_each_message_the_outcome_the_worker_would() -> None:
    from pydantic import BaseModel

    from sqs_worker_engine import Router
    from sqs_worker_engine.testing import run_batch, run_handler

    class Row(BaseModel):
        n: int

    router = Router()

    @router.batch_handler("rows", payload=Row, size=10)
    async def load(jobs: list[Any]) -> dict[str, Any]:
        return failures(j for j in jobs if j.payload.n < 0)

    results = run_batch(router, "rows", [{"n": 1}, {"n": "x"}, {"n": -1}])
    assert [r.outcome for r in results] == ["success", "dead_letter", "retry"]
    assert "reported failed by the batch handler" in results[2].reason
    with pytest.raises(TypeError, match="run_batch"):
        run_handler(router, "rows", {"n": 1})
