"""The testing helpers as an owner's tests use them: every outcome the worker acts on is named
where they are documented, and a handler whose resources were made on the test's own event
loop (an async client, a pool) runs with them through `run_handler_async`; the synchronous
`run_handler`, which starts a loop of its own, says so instead of reporting the loop's error
as the handler's failure."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sqs_worker_engine import DownstreamUnavailable, Job, Router, testing
from sqs_worker_engine.handlers.outcomes import OUTCOMES
from sqs_worker_engine.testing import OtherLoopError, run_batch, run_handler, run_handler_async


class Partner:
    """Stands for an async client: its connection lives on the loop it was made on."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.calls: asyncio.Queue[str] = asyncio.Queue()

    async def call(self, what: str) -> str:
        if asyncio.get_running_loop() is not self.loop:
            # What an aiohttp or asyncpg object says when used from another loop.
            raise RuntimeError(f"Task got Future {what!r} attached to a different loop")
        await self.calls.put(what)
        return "ok"


router = Router()


@router.handler("orders")
async def book(job: Job[dict[str, Any]]) -> None:
    partner: Partner = job.resources
    await partner.call(job.payload["order_id"])


@router.batch_handler("bulk")
async def book_all(jobs: list[Job[dict[str, Any]]]) -> None:
    for job in jobs:
        await job.resources.call(job.payload["order_id"])


@router.handler("flaky")
async def flaky(job: Job[dict[str, Any]]) -> None:
    raise DownstreamUnavailable(30, "the partner answers 503")


def test_every_outcome_is_named_in_the_helpers_documentation() -> None:
    documented = testing.__doc__ or ""
    missing = [outcome for outcome in OUTCOMES if f'"{outcome}"' not in documented]
    assert missing == [], f"testing.py's docstring leaves out {missing}"


def test_a_downstream_that_is_down_defers_the_message_with_its_pause() -> None:
    result = run_handler(router, "flaky", {"order_id": "o-1"}, resources=None)
    assert (result.outcome, result.retry_after) == ("deferred", 30)


def test_resources_made_on_the_tests_own_loop_work_with_run_handler_async() -> None:
    async def test_body() -> None:  # what an async test (pytest-asyncio, anyio) runs on its loop
        partner = Partner()
        result = await run_handler_async(router, "orders", {"order_id": "o-1"}, resources=partner)
        assert result.outcome == "success", result.reason
        assert partner.calls.get_nowait() == "o-1"

    asyncio.run(test_body())


def test_run_handler_says_when_resources_belong_to_another_loop() -> None:
    async def made_elsewhere() -> Partner:
        return Partner()

    partner = asyncio.run(made_elsewhere())  # a fixture's loop, closed since
    with pytest.raises(OtherLoopError, match=r"await run_handler_async\(\.\.\.\)"):
        run_handler(router, "orders", {"order_id": "o-1"}, resources=partner)
    with pytest.raises(OtherLoopError, match=r"pytest\.mark\.asyncio"):
        run_batch(router, "bulk", [{"order_id": "o-1"}], resources=partner)
    # Without resources= the helper never second-guesses a handler's error.
    assert run_handler(router, "orders", {"order_id": "o-1"}).outcome == "retry"


def test_a_body_the_payload_model_refuses_is_dead_lettered_without_opening_the_lifespan() -> None:
    """As the worker does: a body its model refuses never gets a job, nor the resources a
    job would use. Before, `run_handler` opened the lifespan first, which loaded the
    service's settings: a 100-line settings traceback instead of the dead-letter outcome."""
    from pydantic import BaseModel

    class Order(BaseModel):
        order_id: str

    opened: list[str] = []
    guarded = Router()

    @guarded.lifespan
    async def resources() -> Any:
        opened.append("lifespan")
        raise RuntimeError("PARTNER_API_URL: Field required (the service's settings, unset in a unit test)")
        yield  # pragma: no cover

    @guarded.handler("orders", payload=Order)
    async def handle(job: Job[Order]) -> None:
        raise AssertionError("a refused body reached the handler")

    result = run_handler(guarded, "orders", {"order": "no id"})
    assert (result.outcome, result.job) == ("dead_letter", None), result
    assert "order_id" in result.reason
    assert opened == [], "the lifespan was opened for a body the worker would never run"


# What a process handler was given, as it saw it (run_handler calls it in a thread of this process).
SEEN_IN_PROCESS: list[tuple[Any, bool]] = []


def crunch(job: Job[dict[str, Any]]) -> None:
    """Module level, as an `executor="process"` handler must be."""
    job.logger.info("crunched", extra={"n": job.payload["n"]})
    SEEN_IN_PROCESS.append((job.resources, job.logger is not None))


def test_a_process_handler_gets_the_job_as_its_process_would() -> None:
    """Pickled there and back, as the worker sends it to its process: no resources (a
    lifespan's pool stays in the worker), the process's logger. A test given more than the
    process has passed a handler that failed every job deployed."""
    processes = Router()
    processes.handler("crunch", executor="process")(crunch)
    SEEN_IN_PROCESS.clear()
    result = run_handler(processes, "crunch", {"n": 3}, resources="a pool of the worker's")
    assert result.outcome == "success", result.reason
    assert SEEN_IN_PROCESS == [(None, True)]
