"""A handler process dying, the real worker on `life.FakeProcesses` (a process pool on
virtual time that ends a broken pool's futures under its own lock, as CPython 3.12+ does,
and whose processes take life.STARTUP seconds to start): the job that kills its process
alone reaches the DLQ after maxReceiveCount; its neighbours complete on their first
attempt, each run again once, within their timeout; a pool's start-up never counts
against a job's timeout. Each was seen to go wrong end to end (LocalStack, CPython 3.12)."""

from __future__ import annotations

import json
from typing import Any

from sqs_worker_engine.handlers.job import Job

from . import life, vtime
from .harness import QUEUE, memory_queue, start, until

PLANS: dict[str, tuple[float, bool]] = {}  # body -> (seconds it runs, whether it kills its process)


def planned(job: Job[Any]) -> tuple[float, bool]:
    return PLANS[job.payload["name"]]


def in_a_process(job: Job[Any]) -> None:
    """A process handler: its time and its end are the fake pool's (`planned`)."""


def play(plans: dict[str, tuple[float, bool]], dlq_after: int, **env: str) -> dict[str, Any]:
    """Send a message per plan to a worker whose handler runs in a (fake) process pool;
    run until every message has left the queue; return what happened."""
    PLANS.clear()
    PLANS.update(plans)
    runs: dict[str, list[bool]] = {name: [] for name in plans}
    failed: list[tuple[str, str]] = []  # (job id, error type)
    names: dict[str, str] = {}  # job id -> name

    def ended(job: Job[Any], ok: bool) -> None:
        names[job.id] = job.payload["name"]
        runs[job.payload["name"]].append(ok)

    async def scenario() -> dict[str, Any]:
        sqs, router = memory_queue(dlq_after=dlq_after, VisibilityTimeout="30")
        router.handler(QUEUE, executor="process")(in_a_process)
        for name in plans:
            sqs.put(QUEUE, json.dumps({"name": name}))
        worker = await start(sqs, router, **env)
        worker.worker.on("job:failed", lambda e: failed.append((e["job_id"], type(e.get("error")).__name__)))
        assert await until(lambda: sqs.bodies(QUEUE) == [], 600), (
            f"messages never left the queue: {sqs.bodies(QUEUE)}, runs {runs}, failed {failed}"
        )
        dead = [json.loads(b)["name"] for b in sqs.bodies(f"{QUEUE}-dlq")]
        await worker.stop()
        failures: dict[str, list[str]] = {name: [] for name in plans}
        for job_id, error in failed:
            failures[names[job_id]].append(error)
        return {"dead": dead, "runs": runs, "failures": failures}

    with life.fake_processes(ended, planned):
        return vtime.run(scenario())


def test_a_job_that_kills_its_process_alone_is_dead_lettered_after_max_receive_count() -> None:
    """Before: its run alone ended under the pool's lock, the pool's shutdown was called
    from that callback, and the job never ended: it stayed in flight, lease extended, slot
    held, until SIGTERM."""
    seen = play({"killer": (0.5, True)}, dlq_after=2, WORKER_CONCURRENCY="2", WORKER_PROCESS_POOL_SIZE="2")
    assert seen["dead"] == ["killer"], seen
    assert seen["failures"]["killer"] == ["HandlerProcessDied", "HandlerProcessDied"], seen


def test_neighbours_of_a_crash_run_again_once_on_their_first_attempt_within_their_timeout() -> None:
    """A warm pool of 4: three 2 s jobs beside one that kills its process 1.6 s in, job
    timeout 3 s. Before, every innocent job ran on attempts 1, 2 and 3: its run alone kept
    the broken run's timeout and paid a cold process start."""
    plans = {"a": (2.0, False), "b": (2.0, False), "c": (2.0, False), "killer": (1.6, True)}
    seen = play(
        plans,
        dlq_after=3,
        WORKER_CONCURRENCY="4",
        WORKER_PROCESS_POOL_SIZE="4",
        WORKER_JOB_TIMEOUT_MS="3000",
        WORKER_SHUTDOWN_TIMEOUT_MS="10000",
    )
    for name in "abc":
        assert seen["runs"][name] == [False, True], f"{name}: caught in the crash, then ran once alone: {seen}"
        assert seen["failures"][name] == [], f"{name} was charged for its neighbour's crash: {seen}"
    assert seen["dead"] == ["killer"], seen


def test_a_cold_pool_start_does_not_count_against_a_job_s_timeout() -> None:
    """1 s jobs, a 3 s timeout, processes that take life.STARTUP (2.5 s) to start: before,
    the first jobs after boot timed out and ran twice."""
    seen = play(
        {"first": (1.0, False), "second": (1.0, False)},
        dlq_after=3,
        WORKER_CONCURRENCY="2",
        WORKER_PROCESS_POOL_SIZE="2",
        WORKER_JOB_TIMEOUT_MS="3000",
        WORKER_SHUTDOWN_TIMEOUT_MS="10000",
    )
    assert seen["runs"] == {"first": [True], "second": [True]}, seen
    assert seen["failures"] == {"first": [], "second": []}, seen
