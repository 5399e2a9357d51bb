"""The memory worker (sqs_worker_engine.testing): the real Worker against the in-memory SQS,
set up in one place for the model tests, the bench and scripts/measure_engine.py."""

from __future__ import annotations

import asyncio

import pytest

from sqs_worker_engine import Job, Router
from sqs_worker_engine.doubles import vtime
from sqs_worker_engine.testing import MEMORY_QUEUE as QUEUE
from sqs_worker_engine.testing import QUIET, memory_config, memory_sqs, memory_worker


def test_each_queue_is_seeded_with_its_messages_and_given_its_dlq() -> None:
    async def seeded() -> None:  # the in-memory SQS keeps the running loop's time
        sqs = memory_sqs("a", "b", messages=3, dlq_after=2, attributes={"VisibilityTimeout": "60"})
        for queue in ("a", "b"):
            assert sorted(sqs.bodies(queue)) == ["m-0", "m-1", "m-2"], f"three messages waiting on {queue}"
            assert sqs.bodies(f"{queue}-dlq") == [], f"{queue} has its DLQ"
        assert memory_sqs(messages=1, body=lambda i: f"n{i}").bodies(QUEUE) == ["n0"], "the default queue, own bodies"

    vtime.run(seeded())


@pytest.mark.parametrize(
    ("queues", "env", "names", "port"),
    [
        ((), {}, ["jobs"], 0),  # QUIET's port: no /metrics server
        (("high", "low"), {"WORKER_CONCURRENCY": "2"}, ["high", "low"], 0),
        (("jobs",), {"WORKER_METRICS_PORT": "9464"}, ["jobs"], 9464),  # the caller's setting wins
    ],
)
def test_the_settings_are_quiet_under_the_callers_own(
    queues: tuple[str, ...], env: dict[str, str], names: list[str], port: int
) -> None:
    config = memory_config(*queues, name="unit", **env)
    assert [q.name for q in config.queues] == names
    assert config.settings.metrics_port == port, "QUIET, then the caller's environment"
    assert config.settings.backlog_sample_seconds == float(QUIET["WORKER_BACKLOG_SAMPLE_SECONDS"])
    assert config.settings.service_name == "unit"


def test_a_memory_worker_takes_every_message_to_its_delete_and_stops_as_sigterm_does() -> None:
    seen: list[str] = []

    async def scenario() -> tuple[float, float | None]:
        sqs = memory_sqs(messages=20)
        router = Router()

        @router.handler(QUEUE, payload=str)
        async def handle(job: Job[str]) -> None:
            await asyncio.sleep(1)
            seen.append(job.payload)

        running = memory_worker(sqs, router, WORKER_CONCURRENCY="5")
        while sqs.bodies(QUEUE):
            await asyncio.sleep(0.1)
        took = await running.stop()
        return took, running.stopped_at

    took, stopped_at = vtime.run(scenario())
    assert sorted(seen) == sorted(f"m-{i}" for i in range(20)), "every message ran once"
    assert stopped_at is not None and stopped_at >= 4, f"five at a time, 1 s each: {stopped_at} s of virtual time"
    assert took < 1, f"nothing was running when it stopped: {took} s"
