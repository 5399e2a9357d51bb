"""FIFO queues: one at a time and in order within a MessageGroupId; groups in parallel;
a failed message holds back the rest of its group instead of being overtaken."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from sqs_worker_engine import Job, Router

from ..support import Sqs, env_for, running_worker, wait_for


def test_groups_are_ordered_and_serial_but_run_in_parallel(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    queue = sqs.create(fifo=True, visibility=30)
    order: dict[str, list[int]] = defaultdict(list)
    active: dict[str, int] = defaultdict(int)
    peak_per_group: dict[str, int] = defaultdict(int)
    peak_total = 0
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        nonlocal peak_total
        group = job.group_id or ""
        active[group] += 1
        peak_per_group[group] = max(peak_per_group[group], active[group])
        peak_total = max(peak_total, sum(active.values()))
        await asyncio.sleep(0.2)
        order[group].append(job.payload["n"])
        active[group] -= 1

    for group in ("a", "b", "c"):
        sqs.send(queue, [{"n": n} for n in range(6)], group=group)

    async def scenario() -> None:
        async with running_worker(env_for(localstack_endpoint, queue.name, health_file, WORKER_CONCURRENCY=10), router):
            await wait_for(lambda: sum(len(v) for v in order.values()) == 18, 90, "18 jobs")

    asyncio.run(scenario())
    assert dict(order) == {g: list(range(6)) for g in ("a", "b", "c")}
    assert max(peak_per_group.values()) == 1, "a group never runs two messages at once"
    assert peak_total >= 2, "different groups run in parallel"


def test_a_failed_message_holds_back_its_group(sqs: Sqs, localstack_endpoint: str, health_file: str) -> None:
    queue = sqs.create(fifo=True, visibility=30, max_receive=5)
    log: list[str] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        name = f"{job.group_id}{job.payload['n']}"
        if name == "a2" and job.receive_count == 1:
            log.append("a2!")
            raise RuntimeError("transient")
        log.append(name)

    sqs.send(queue, [{"n": n} for n in range(1, 5)], group="a")
    sqs.send(queue, [{"n": n} for n in range(1, 5)], group="b")

    async def scenario() -> None:
        env = env_for(localstack_endpoint, queue.name, health_file, WORKER_RETRY_BASE_SECONDS=1)
        async with running_worker(env, router):
            await wait_for(lambda: len([x for x in log if x != "a2!"]) == 8, 90, "all 8 jobs")
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), 30)

    asyncio.run(scenario())
    group_a = [x for x in log if x.startswith("a")]
    group_b = [x for x in log if x.startswith("b")]
    assert group_a == ["a1", "a2!", "a2", "a3", "a4"], "nothing in group a overtook the failed a2"
    assert group_b == ["b1", "b2", "b3", "b4"]


def test_a_failing_message_does_not_push_its_group_mates_to_the_dlq(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    """Retried in place: its group-mates are held, not given back, so they spend no receives."""
    queue = sqs.create(fifo=True, visibility=30, max_receive=3)
    log: list[tuple[str, int]] = []
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        log.append((job.payload["id"], job.receive_count))
        if job.payload["id"] == "bad":
            raise RuntimeError("always fails")

    sqs.send(queue, [{"id": "bad"}, {"id": "b"}, {"id": "c"}], group="g")

    async def scenario() -> None:
        env = env_for(localstack_endpoint, queue.name, health_file, WORKER_RETRY_BASE_SECONDS=0.5)
        async with running_worker(env, router):
            await wait_for(lambda: [i for i, _ in log if i != "bad"] == ["b", "c"], 90, "b and c")
            await wait_for(lambda: sqs.counts(queue.url) == (0, 0), 30)

    asyncio.run(scenario())
    assert log == [("bad", 1), ("bad", 2), ("bad", 3), ("b", 1), ("c", 1)]
    (dead,) = sqs.receive_all(queue.dlq_url or "")
    assert '"bad"' in dead["Body"]
    assert dead["MessageAttributes"]["x-error-type"]["StringValue"] == "RuntimeError"
    assert "gave up after 3 attempts" in dead["MessageAttributes"]["x-error-context"]["StringValue"]
