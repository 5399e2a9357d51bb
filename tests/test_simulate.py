"""The fleet simulator on the bakes' own deploy files: it reads what the templates ship, and
a short simulation of each platform keeps the invariants: no message lost, every message
ends, a message runs twice only when a SIGKILL cut its run off. No timing is asserted:
virtual time makes every figure the same on any machine, busy or not.

(`make simulate` itself runs in tests/test_bake.py, in the "full" bakes' environments.)"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from artifacts import Answers
from conftest import bake
from matrix import LIMITS, SUPPORTED, names
from sqs_worker_engine.fleet import deployfiles
from sqs_worker_engine.fleet.simulation import Options, Run, simulate
from sqs_worker_engine.fleet.traffic import Event, Shape, Steady


@pytest.fixture(autouse=True)
def quiet_workers() -> Iterator[None]:
    logger = logging.getLogger("sqs_worker_engine")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


@pytest.mark.parametrize("name", names("full", "checked", "artifacts"))
def test_the_simulator_reads_what_the_bake_ships(name: str, tmp_path: Path) -> None:
    given = SUPPORTED[name].answers
    answers = Answers.of(given)
    read = deployfiles.read(bake(tmp_path, **given) / "deploy")
    grace = answers.shutdown + LIMITS.GRACE_MARGIN_SECONDS
    most = LIMITS.max_replicas(answers.concurrency)
    assert read.platforms() == [p for p, on in (("kubernetes", answers.eks), ("ecs", answers.ecs)) if on]
    for spec in (read.kubernetes, read.ecs):
        if spec is None:
            continue
        assert spec.worker.queue == answers.queue
        assert spec.worker.concurrency == answers.concurrency
        assert spec.worker.grace == grace, "the platform's grace period: shutdown timeout + margin"
        assert spec.worker.number("WORKER_JOB_TIMEOUT_MS", 0) == answers.job_timeout * 1000
    if isinstance(read.kubernetes, deployfiles.Deployment):
        scaling = read.kubernetes.scaling
        assert scaling.maximum == most
        assert scaling.sqs is not None and scaling.sqs.in_flight
        assert read.kubernetes.max_unavailable == 1
    if isinstance(read.kubernetes, deployfiles.ScaledJob):
        job = read.kubernetes
        assert job.maximum == most
        assert job.worker.env["WORKER_MAX_JOBS"] == "1"
        assert job.deadline > answers.job_timeout + grace
    if read.ecs is not None:
        assert read.ecs.maximum == most
        assert read.ecs.minimum == min(4, most), "four tasks a sudden backlog finds, where the budget has room"
        # The step policies beside target tracking, and the alarms that invoke them, played as
        # shipped: one on the rounds of work a task, one on how much the backlog grew in a minute.
        step, growth = read.ecs.steps_out
        assert step.expression.replace(" ", "") == f"(visible+in_flight)/(tasks*{answers.concurrency})"
        assert growth.expression.replace(" ", "") == f"(sent-deleted)/(tasks*{answers.concurrency})"
        assert dict(growth.metrics)["sent"] == "NumberOfMessagesSent"
        for policy in (step, growth):
            assert (policy.threshold, policy.periods, policy.datapoints) == (2.0, 1, 1)
            assert policy.adjustment_type == "PercentChangeInCapacity" and policy.steps[0].lower == 0
        # Scale-in by a step policy on a low alarm over the same rounds, not by target tracking.
        quiet = read.ecs.step_in
        assert read.ecs.scale_in_disabled and quiet is not None and quiet.scales_in
        assert quiet.expression == step.expression and quiet.datapoints == quiet.periods >= 10
        assert quiet.adjustment_type == "ChangeInCapacity" and [s.adjustment for s in quiet.steps] == [-1]


# Twenty minutes at half the fleet's capacity, a rollout of every replica and one crash.
SHORT = Shape(
    "short",
    "half the capacity, a rollout and a crash",
    1200.0,
    Steady(0.5),
    events=(Event(300.0, "deploy"), Event(800.0, "crash")),
)


def invariants(result: dict[str, Any]) -> None:
    assert result["messages"] > 100
    assert result["messages_lost"] == 0
    assert result["unfinished"] == 0, "every message ends"
    assert result["dead_lettered"] == 0
    assert result["duplicate_runs"] <= result["cut_off_by_sigkill"], (
        result["duplicates_by_cause"],
        result["cut_off_by_cause"],
    )
    assert result["worker_errors"] == []


@pytest.mark.parametrize(
    ("name", "platform"),
    [("defaults", "kubernetes"), ("defaults", "ecs"), ("eks-scaledjob", "kubernetes")],
)
def test_a_short_simulation_of_the_generated_fleet_keeps_every_message(
    name: str, platform: str, tmp_path: Path
) -> None:
    read = deployfiles.read(bake(tmp_path, **SUPPORTED[name].answers) / "deploy")
    scaled_job = isinstance(read.kubernetes, deployfiles.ScaledJob) and platform == "kubernetes"
    # Scale 8 for the Deployment and the service: each simulated call runs eight jobs; jobs of
    # 2 s keep the fleet busy with half the messages (and half the CPU) of 1 s ones.
    options = Options(scale=None if scaled_job else 8, job_seconds=60.0 if scaled_job else 2.0)
    result = simulate(Run(SHORT, platform, read, options))
    invariants(result)
    # SIGTERM drains: a rollout never makes a message run twice (the grace period covers
    # the longest job); only the crash does.
    assert set(result["duplicates_by_cause"]) <= {"crash"}, result["duplicates_by_cause"]
