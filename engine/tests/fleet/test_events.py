"""The platform's events beyond rollouts and crashes, played on fleets of the real worker:
Spot interruptions (SIGTERM with the two-minute warning, SIGKILL at the earlier of the
grace period and the warning's end, a replacement at once) and a bad release (a rollout
whose handler fails every job), rolled back on ECS by the deployment alarms it watches,
and not on Kubernetes. Short shapes, a few seconds of CPU each."""

from __future__ import annotations

import dataclasses

from sqs_worker_engine.fleet.autoscalers.deployfiles import Bake, EcsService
from sqs_worker_engine.fleet.load.traffic import Event, Shape, Steady
from sqs_worker_engine.fleet.releases import Alarm, DeploymentAlarms
from sqs_worker_engine.fleet.simulation import simulate
from sqs_worker_engine.fleet.sizing import Options, Run

from .test_fleet import check, kubernetes, worker

# Half the fleet's capacity for half an hour, four interruptions (eight an hour).
SPOT = Shape("spot", "half the capacity on Spot", 1800.0, Steady(0.5), interruptions_per_hour=8.0)


def test_spot_interruptions_drain_within_the_warning_and_lose_nothing() -> None:
    """The generated grace period (the shutdown timeout + 15 s, 105 s) is within the
    two-minute warning: every interrupted replica drains, none is cut off, nothing runs twice."""
    for platform, bake in (
        ("kubernetes", kubernetes()),
        ("ecs", Bake(ecs=EcsService(worker(), 2, 4, 4.0, 60, 300, 50, 100))),
    ):
        result = simulate(Run(SPOT, platform, bake, Options(scale=1, start_seconds=20.0)))
        check(result)
        assert result["spot_interruptions"] == 4, result["spot_interruptions"]
        assert result["duplicate_runs"] == 0 and result["cut_off_by_sigkill"] == 0, result["cut_off_by_cause"]
        assert result["peak_draining"] >= 1, "an interrupted replica drains beside its replacement"


def test_a_drain_longer_than_the_warning_is_cut_off_at_two_minutes_and_each_cut_job_runs_again() -> None:
    """A grace period of 300 s does not outlast the capacity: jobs of 150 s are SIGKILLed at
    the warning's end, each counted as cut off by the interruption, and run again once."""
    slow = kubernetes(grace=300.0, WORKER_JOB_TIMEOUT_MS="240000", WORKER_SHUTDOWN_TIMEOUT_MS="280000")
    shape = dataclasses.replace(SPOT, seconds=2400.0, profile=Steady(0.3))
    result = simulate(Run(shape, "kubernetes", slow, Options(scale=1, job_seconds=150.0, start_seconds=20.0)))
    check(result)
    assert result["cut_off_by_cause"].get("spot", 0) >= 1, result["cut_off_by_cause"]
    assert result["duplicates_by_cause"].get("spot", 0) == result["cut_off_by_cause"]["spot"]


# The alarms the generated ECS stack's deployments watch: the queues stack's DLQ inflow (a rise
# in the DLQ's depth in a one-minute datapoint) and the job error ratio (over 10% of jobs
# failed in three five-minute periods in a row), whose window sets the bake time (15 min).
DLQ_INFLOW = Alarm("DeadLetterQueueInflowAlarm", (("depth", "dead_letters"),), "DIFF(depth)", 0.0, 60, 1, 1, "Maximum")
ERROR_RATIO = Alarm(
    "WorkerJobErrorRatioHighAlarm",
    (("ok", "deleted"), ("failed", "failed")),
    "FILL(failed, 0) / (FILL(ok, 0) + FILL(failed, 0))",
    0.1,
    300,
    3,
    3,
    "Sum",
)
BAD = Shape("bad", "a bad release at 5 minutes", 1800.0, Steady(0.5), events=(Event(300.0, "bad-release"),))


def test_a_bad_release_on_ecs_is_rolled_back_by_its_deployment_alarm() -> None:
    bake = Bake(ecs=EcsService(worker(), 2, 4, 4.0, 60, 300, 50, 100))
    alarms = DeploymentAlarms(rollback=True, alarms=(ERROR_RATIO, DLQ_INFLOW))
    result = simulate(Run(BAD, "ecs", bake, Options(scale=1, start_seconds=20.0, deployment_alarms=alarms)))
    release = result["release"]
    assert release["rolled_back"], release
    assert release["alarm"] == "DeadLetterQueueInflowAlarm"
    # The DLQ alarm fires on the first message dead-lettered: four retries with backoff
    # (75-150 s) and a datapoint a minute late; every message that failed is accounted for.
    assert 0 < release["rollback_began_minutes"] < release["rolled_back_minutes"] < 15, release
    assert result["jobs_failed"] > 0 and 0 < result["dead_lettered"] < result["messages"] / 4, result["dead_lettered"]
    assert result["messages_lost"] == 0 and result["unfinished"] == 0
    assert result["duplicate_runs"] <= result["cut_off_by_sigkill"]


def test_a_bad_release_on_kubernetes_is_not_rolled_back_and_costs_every_message_after_it() -> None:
    result = simulate(Run(BAD, "kubernetes", kubernetes(), Options(scale=1, start_seconds=20.0)))
    assert result["release"]["rolled_back"] is False
    assert result["messages_lost"] == 0 and result["unfinished"] == 0
    # Nothing completes once every pod runs the bad release: what came after it is dead-lettered.
    assert result["dead_lettered"] > result["messages"] / 2, (result["dead_lettered"], result["messages"])


def test_alarms_that_do_not_roll_back_leave_the_bad_release_in_place() -> None:
    bake = Bake(ecs=EcsService(worker(), 2, 4, 4.0, 60, 300, 50, 100))
    alarms = DeploymentAlarms(rollback=False, alarms=(ERROR_RATIO, DLQ_INFLOW))
    result = simulate(Run(BAD, "ecs", bake, Options(scale=1, start_seconds=20.0, deployment_alarms=alarms)))
    assert result["release"]["rolled_back"] is False
