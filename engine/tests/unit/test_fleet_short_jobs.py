"""The fleet simulator with short jobs, where what SQS counts is more than the handlers run:
arrivals sent at their own moments, a message counted until its delete lands, a scaled
replica holding ahead of its slots what a real one holds, deep enough to keep them busy,
and the report's targets on the steady loads of short jobs."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from sqs_worker_engine.base.limits import SCALING_JOB_SECONDS, busy_replica_holds, default_prefetch, prefetch_target
from sqs_worker_engine.doubles.vtime import run as run_on_virtual_time
from sqs_worker_engine.fleet import report
from sqs_worker_engine.fleet.autoscalers.deployfiles import Bake, EcsService, Worker
from sqs_worker_engine.fleet.load import traffic
from sqs_worker_engine.fleet.load.work import Durations, Ledger, Replica
from sqs_worker_engine.fleet.sizing import Options, Run, Scale, choose_scale, delete_wait, worker_config


def worker(concurrency: int = 8, **env: str) -> Worker:
    return Worker({"WORKER_QUEUES": "jobs", "WORKER_CONCURRENCY": str(concurrency), **env}, 105.0)


def test_each_group_is_sent_when_its_last_member_arrives_not_at_the_end_of_its_step() -> None:
    """Sent at the end of each quarter second, 10 ms jobs met a quarter second's arrivals as
    one burst: a standing queue the real ones never see."""
    shape = traffic.Shape("t", "t", 10.0, traffic.Steady(4000.0), absolute=True)
    sent = list(traffic.arrivals(shape, 1.0, 1, seed=3))
    assert all(at == group.last for at, groups in sent for group in groups), "one message: sent as it arrives"
    times = [at for at, _ in sent]
    assert times == sorted(times)
    assert len(set(times)) > 0.99 * len(times), "no two sent at one moment, as a step's end would"
    grouped = list(traffic.arrivals(shape, 1.0, 24, seed=3))
    full = [(at, g) for at, gs in grouped for g in gs if g.count == 24]
    assert full and all(at == g.last for at, g in full)


@dataclass
class _Job:
    """What the ledger's handler reads of a job."""

    body: str
    stopping: bool = False


def test_a_finished_message_is_counted_until_its_delete_lands_and_a_real_batch_s_wait_after() -> None:
    """SQS counts a message in flight until its delete lands. With 10 ms jobs that is most of
    what a replica holds: the delete waits for its batch and takes a round trip."""

    async def play() -> list[int]:
        ledger = Ledger(Durations(0.01, sigma=0.01), width=8, delete_wait=0.005)
        body = ledger.send(traffic.Group(8, 0.0, 0.0))
        observed = [ledger.observed]
        await ledger.run(_Job(body), Replica())  # type: ignore[arg-type]
        observed.append(ledger.observed)  # done, not deleted
        ledger.deleted(body)
        observed.append(ledger.observed)  # deleted: a real batch would still be waiting to send it
        await asyncio.sleep(0.006)
        observed.append(ledger.observed)
        assert ledger.completed == 8 and ledger.outstanding == 0
        return observed

    assert run_on_virtual_time(play()) == [8, 8, 8, 0]


def test_a_held_message_s_members_beyond_a_wave_wait_behind_it_and_come_back_when_it_is_visible() -> None:
    ledger = Ledger(Durations(0.01), width=8)
    body = ledger.send(traffic.Group(24, 0.0, 0.0))
    ledger.held(body, True)
    assert ledger.observed == 8, "prefetched: one wave counted, as real ones would be spread over the slots"
    ledger.held(body, False)
    assert ledger.observed == 24


@pytest.mark.parametrize(
    ("job", "k", "prefetch"),
    [
        (0.01, 32, 1),  # the real one holds 26 ahead: one simulated message of 32
        (0.01, 8, 3),  # 26 / 8
        (1.0, 4, 2),  # 1 + 8 (eight start within a second) / 4
        (5.0, 16, 1),  # 2 / 16: at least one, or the slots would wait for every receive
    ],
)
def test_a_scaled_replica_holds_ahead_what_a_real_one_does_and_deletes_at_once(
    job: float, k: int, prefetch: int
) -> None:
    scale = Scale(8 if k >= 8 else k, max(1, k // 8))
    config = worker_config(worker(), "jobs", scale, job)
    (queue,) = config.queues
    real = prefetch_target(8, default_prefetch(8), 0.02, job)
    assert (queue.concurrency, queue.prefetch) == (8 // scale.width, prefetch), real
    assert config.settings.ack_flush_ms == 1, "at once: the ledger counts the real batch's wait"
    (off,) = worker_config(worker(WORKER_PREFETCH="0"), "jobs", scale, job).queues
    assert off.prefetch == 0, "prefetch off stays off"


def test_a_real_delete_waits_half_what_ten_jobs_take_at_full_speed_within_the_flush() -> None:
    assert delete_wait(worker(), Scale(8, 4), 0.01) == pytest.approx(0.00625)  # 10 x 10 ms / 8, halved
    assert delete_wait(worker(), Scale(8, 4), 1.0) == pytest.approx(0.05)  # the 100 ms flush, halved
    assert delete_wait(worker(), Scale(1, 1), 0.01) == 0.0, "at scale 1 the worker batches as in life"


def test_a_scaled_run_of_short_jobs_is_deep_enough_for_its_slots_to_keep_busy() -> None:
    """8 side by side in one wave of 10 ms ran the simulated replicas at three quarters of
    their slots (a 20 ms round trip per receive): a simulated message lasts two round trips
    at least."""
    bake = Bake(ecs=EcsService(worker(), 4, 10, 8.0, 60, 300, 50, 100))
    ten = choose_scale(Run(traffic.SHAPES["steady-10ms"], "ecs", bake, Options(budget=2_000_000)))
    assert (ten.width, ten.depth) == (8, 4), "7.2M over 2M wanted 8: one wave would be too short"
    assert choose_scale(Run(traffic.SHAPES["steady-1s"], "ecs", bake)).k == 1, "144,000 messages: one for one"
    assert choose_scale(Run(traffic.SHAPES["steady-10ms"], "ecs", bake, Options(budget=10**9))).k == 1


def _shape(name: str, ratio: float) -> dict[str, object]:
    job = traffic.SHAPES[name].job_seconds
    return {
        "messages_lost": 0,
        "duplicate_runs": 0,
        "cut_off_by_sigkill": 0,
        "job_seconds": job,
        "replica_minutes": 130.0 * ratio,
        "oracle_replica_minutes": 130.0,
        "ratios": {"replica_minutes": ratio},
    }


def test_the_report_holds_the_steady_loads_of_10_ms_and_1_s_jobs_to_the_oracle_s_replica_minutes() -> None:
    rows = report.targets(
        {
            "steady-10ms": _shape("steady-10ms", 1.2),
            "steady-100ms": _shape("steady-100ms", 2.0),
            "steady-1s": _shape("steady-1s", 1.4),
        }
    )
    steady = {r["target"]: r["met"] for r in rows if r["target"].startswith("steady load")}
    assert steady == {
        "steady load of 10 ms jobs: replica-minutes within 1.3x the oracle's": True,
        "steady load of 1 s jobs: replica-minutes within 1.3x the oracle's": False,
    }, "100 ms jobs are reported, not held to a target"


@pytest.mark.parametrize(
    ("concurrency", "job_seconds", "holds"),
    [
        (8, 5.0, 8 + 1 + 1),  # one job starts in a round trip, one within a second
        (8, 1.0, 8 + 1 + 8),
        (8, 0.01, 8 + 16 + 10),  # 800 start a second: 16 in a 20 ms round trip, and a receive's 10
        (1, 0.01, 1 + 2 + 10),
        (20, 0.01, 20 + 40 + 10),
        (50, 0.01, 50 + 100 + 10),
    ],
)
def test_a_busy_replica_holds_its_concurrency_and_what_its_prefetch_keeps_ahead(
    concurrency: int, job_seconds: float, holds: int
) -> None:
    """Jobs that start in a 20 ms round trip, plus a receive's 10 if as many start within a
    second: what the scaling targets count a busy replica as (the ECS stack's
    BacklogPerTaskTarget, KEDA's queueLength), at the jobs of seconds they are sized for
    unless told."""
    assert busy_replica_holds(concurrency, job_seconds) == holds
    assert busy_replica_holds(concurrency) == busy_replica_holds(concurrency, SCALING_JOB_SECONDS)


def test_what_a_busy_replica_holds_is_within_its_prefetch_cap() -> None:
    assert busy_replica_holds(100, 0.01) == 100 + default_prefetch(100), "200 + 10 ahead of 10 ms jobs, capped at 200"
    assert busy_replica_holds(8, 0.01, prefetch=0) == 8, "prefetch off: its slots alone"
    assert busy_replica_holds(8, 0.01, prefetch=12) == 8 + 12
