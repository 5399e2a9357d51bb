"""Unit tests of the handlers, with no AWS at all: each message goes through its payload
model and its handler exactly as the worker runs it, and the outcome is the one the worker
acts on ("success" deletes, "retry" backs off, "dead_letter" goes to the DLQ with a reason).
Copy these for your own handlers."""

from __future__ import annotations

import asyncio

import pytest
from sqs_worker_engine.testing import run_handler, run_handler_async

from {{ cookiecutter.package_name }}.handlers import QUEUE, Task, router


def test_a_task_succeeds_and_its_message_is_deleted() -> None:
    result = run_handler(router, QUEUE, Task(task_id="t-1", work_ms=10))
    assert result.outcome == "success", result.reason
    assert result.job is not None and result.job.last_progress == (0, "started")


def test_a_failing_task_is_dead_lettered_with_its_reason() -> None:
    result = run_handler(router, QUEUE, {"task_id": "t-2", "fail": True})
    assert result.outcome == "dead_letter"
    assert result.reason == "NonRetryableError: task t-2 asked to fail"


def test_a_transient_failure_is_retried_until_it_passes() -> None:
    message = {"task_id": "t-3", "fail_attempts": 2}
    assert run_handler(router, QUEUE, message, receive_count=1).outcome == "retry"
    assert run_handler(router, QUEUE, message, receive_count=2).outcome == "retry"
    assert run_handler(router, QUEUE, message, receive_count=3).outcome == "success"


def test_a_body_that_fails_the_model_never_reaches_the_handler() -> None:
    result = run_handler(router, QUEUE, {"task_id": "", "work_ms": -1})
    assert result.outcome == "dead_letter" and result.job is None
    assert "task_id" in result.reason and "work_ms" in result.reason


def test_a_job_over_its_timeout_is_cancelled_and_retried() -> None:
    result = run_handler(router, QUEUE, Task(task_id="t-4", work_ms=5_000), timeout=0.2)
    assert result.outcome == "timeout"


def test_a_draining_worker_still_lets_a_short_task_finish() -> None:
    assert run_handler(router, QUEUE, Task(task_id="t-5", work_ms=10), stopping=True).outcome == "success"


@pytest.mark.asyncio
async def test_resources_made_on_the_tests_own_event_loop_reach_the_handler() -> None:
    # An async stand-in made here, on this test's loop (a client, a pool): run_handler_async
    # runs the handler on the same loop, where such objects work (run_handler starts its own).
    shared = asyncio.Event()
    result = await run_handler_async(router, QUEUE, Task(task_id="t-6"), resources=shared)
    assert result.outcome == "success", result.reason
    assert result.job is not None and result.job.resources is shared
