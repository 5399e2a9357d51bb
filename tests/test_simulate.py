"""The fleet simulator on the bakes' own deploy files: it reads what the templates ship, and
a short simulation of each platform keeps the invariants: no message lost, every message
ends, a message runs twice only when a SIGKILL cut its run off. No timing is asserted:
virtual time makes every figure the same on any machine, busy or not.

(`make simulate` itself runs in tests/test_bake.py, in the "full" bakes' environments.)"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from artifacts import Answers
from conftest import bake
from matrix import LIMITS, SUPPORTED, names
from sqs_worker_engine.fleet import cli, releases
from sqs_worker_engine.fleet.autoscalers import deployfiles, hpa, keda, oracle
from sqs_worker_engine.fleet.autoscalers.stepscaling import StepPolicy
from sqs_worker_engine.fleet.autoscalers.targettracking import TargetTracking, combined
from sqs_worker_engine.fleet.load.traffic import Event, Shape, Steady
from sqs_worker_engine.fleet.simulation import simulate
from sqs_worker_engine.fleet.sizing import Options, Run
from sqs_worker_engine.fleet.sqs.counts import Datapoint


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
        assert scaling.sqs.queue_length == LIMITS.busy_replica_holds(answers.concurrency)
        assert read.kubernetes.max_unavailable == 1
    if isinstance(read.kubernetes, deployfiles.ScaledJob):
        job = read.kubernetes
        assert job.maximum == most
        assert job.worker.env["WORKER_MAX_JOBS"] == "1"
        assert job.deadline > answers.job_timeout + grace
    if read.ecs is not None:
        assert read.ecs.maximum == most
        assert read.ecs.minimum == min(4, most), "four tasks a sudden backlog finds, where the budget has room"
        # A round of work is what a busy task holds, its prefetch with its handlers' jobs.
        holds = LIMITS.busy_replica_holds(answers.concurrency)
        # Headroom: target tracking on what a busy task holds in flight (not what waits visible).
        assert read.ecs.target == 1
        assert read.ecs.tracking_expression.replace(" ", "") == f"in_flight/(tasks*{holds})"
        counted = dict(read.ecs.tracking_metrics)
        assert counted["in_flight"] == "ApproximateNumberOfMessagesNotVisible"
        assert "ApproximateNumberOfMessagesVisible" not in counted.values()
        # The scale-out, played as shipped: the work asked for over the work cleared in a
        # minute, once more than a round of work a task waits.
        (demand,) = read.ecs.steps_out
        backlog = f"visible>tasks*{holds}ORsent-deleted>tasks*{holds}"
        assert demand.expression.replace(" ", "") == f"IF({backlog},(sent+visible/5)/deleted*tasks/desired,0)"
        assert dict(demand.metrics)["deleted"] == "NumberOfMessagesDeleted"
        assert (demand.threshold, demand.periods, demand.datapoints) == (1.2, 1, 1)
        assert demand.adjustment_type == "PercentChangeInCapacity" and demand.steps[0].lower == 0
        # Scale-in by a step policy on a low alarm over rounds of work a task.
        quiet = read.ecs.step_in
        assert read.ecs.scale_in_disabled and quiet is not None and quiet.scales_in
        assert quiet.expression.replace(" ", "") == f"(visible+in_flight)/(tasks*{holds})"
        assert quiet.datapoints == quiet.periods >= 10
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


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default bake's deploy directory (a Deployment on EKS and a service on ECS)."""
    return bake(tmp_path_factory.mktemp("defaults"), **SUPPORTED["defaults"].answers) / "deploy"


def sized_for(deploy: Path, job_seconds: float | None, tmp_path: Path) -> deployfiles.Bake:
    """The deploy files as shipped (None), or with the owner's figure for their jobs set as
    deploy/README.md says: BacklogPerTaskTarget's default and queueLength."""
    if job_seconds is None:
        return deployfiles.read(deploy)
    read = deployfiles.read(deploy)
    assert read.ecs is not None
    shipped = LIMITS.busy_replica_holds(read.ecs.worker.concurrency)  # BacklogPerTaskTarget's default
    holds = LIMITS.busy_replica_holds(read.ecs.worker.concurrency, job_seconds)
    edited = tmp_path / "deploy"
    shutil.copytree(deploy, edited)
    service = edited / "ecs" / "service.yaml"
    text = service.read_text()
    assert text.count(f"    Default: {shipped:g}\n") == 1
    service.write_text(text.replace(f"    Default: {shipped:g}\n", f"    Default: {holds}\n"))
    scaled = edited / "k8s" / "scaledobject.yaml"
    scaled.write_text(scaled.read_text().replace(f'queueLength: "{shipped:g}"', f'queueLength: "{holds}"'))
    return deployfiles.read(edited)


def busy_task_reads(bake_: deployfiles.Bake, job_seconds: float, seconds: float) -> tuple[float, float]:
    """(visible, in flight) as SQS counts them, on average, for one task of the bake's worker
    whose handlers are busy 90% of the time (the oracle's sizing): the engine itself on
    virtual time, its prefetch and its deletes on their way included."""
    assert bake_.ecs is not None
    one = deployfiles.Bake(ecs=deployfiles.EcsService(bake_.ecs.worker, 1, 1, 1e9, 60, 300, 50, 100))
    shape = Shape("busy", "busy", seconds, Steady(oracle.UTILIZATION))
    result = simulate(Run(shape, "ecs", one, Options(scale=1, job_seconds=job_seconds, start_seconds=5.0)))
    invariants(result)
    seen = [s for s in result["series"] if 3.0 <= s.t < seconds]
    return sum(s.visible for s in seen) / len(seen), sum(s.inflight for s in seen) / len(seen)


@pytest.mark.parametrize(
    ("job_seconds", "seconds", "sized"),
    [(1.0, 300.0, None), (0.01, 15.0, 0.01)],
    ids=["1 s jobs, as shipped", "10 ms jobs, the target set for them"],
)
def test_a_fleet_as_busy_as_the_oracle_runs_it_is_not_scaled_out_for_what_its_tasks_hold(
    defaults: Path, job_seconds: float, seconds: float, sized: float | None, tmp_path: Path
) -> None:
    """Six tasks, their handlers 90% busy, hold more than their jobs: what each receives
    ahead of its handlers (WORKER_PREFETCH) and the deletes on their way, which SQS counts
    in flight. A round of work counted as the concurrency alone scaled such a fleet of 1 s
    jobs out by half (ECS) and of 10 ms jobs to its maximum (ECS) or four times over
    (KEDA); a round is what a busy task holds (limits.busy_replica_holds): at the jobs of
    seconds the files are sized for, and at 10 ms once set for them as deploy/README.md
    says. Neither autoscaler asks for more than a task more. A few seconds of CPU: one task
    simulated, its figures taken for six."""
    read = sized_for(defaults, sized, tmp_path)
    visible, in_flight = busy_task_reads(read, job_seconds, seconds)
    tasks = 6
    assert read.ecs is not None and isinstance(read.kubernetes, deployfiles.Deployment)
    ecs = read.ecs
    # What a minute sends and deletes at that pace.
    minute = round(tasks * 0.9 * read.ecs.worker.concurrency / job_seconds * 60)
    point = Datapoint(0, round(tasks * visible), round(tasks * in_flight), 0.0, tasks, sent=minute, deleted=minute)
    points = [point] * 15  # a steady quarter hour of one-minute datapoints
    steps = [StepPolicy(s, ecs.minimum, ecs.maximum).decide(0.0, points, tasks) for s in ecs.steps_out]
    ecs_wants = combined(tasks, TargetTracking(ecs).decide(0.0, points, tasks), *steps)
    sqs = read.kubernetes.scaling.sqs
    assert sqs is not None
    counts = {
        "ApproximateNumberOfMessages": point.visible,
        "ApproximateNumberOfMessagesNotVisible": point.inflight,
        "ApproximateNumberOfMessagesDelayed": 0,
    }
    keda_wants = hpa.proposal(keda.queue_length(counts, sqs), sqs.queue_length, tasks)
    reads = f"{visible + in_flight:.1f} messages a task ({visible:.1f} visible)"
    assert ecs_wants <= tasks + 1, f"ECS scales {tasks} tasks to {ecs_wants} on {reads}"
    assert keda_wants <= tasks + 1, f"KEDA scales {tasks} pods to {keda_wants} on {reads}"


@pytest.mark.parametrize(
    ("job_seconds", "sized"), [(0.01, 0.01), (1.0, None), (5.0, None)], ids=["10 ms", "1 s", "5 s"]
)
def test_the_ecs_scale_out_adds_what_the_work_needs_whatever_the_jobs_length(
    defaults: Path, job_seconds: float, sized: float | None, tmp_path: Path
) -> None:
    """Four tasks under five tasks' worth of work, a minute's backlog waiting: the demand
    policy adds half the tasks (six, what the oracle runs), for 10 ms jobs as for 5 s ones.
    Counted in messages, the same minute was 350 rounds of 10 ms jobs and took the service to
    its maximum. A 10x spike still takes it to its maximum at once, even when the minute's
    visible count was read before it began; a rollout's minute (half the tasks starting
    again) and a minute with nothing deleted (every job failing) add nothing."""
    read = sized_for(defaults, sized, tmp_path)
    ecs = read.ecs
    assert ecs is not None
    (demand,) = ecs.steps_out
    task_minute = ecs.worker.concurrency / job_seconds * 60  # what a busy task clears in a minute
    tasks = 4

    def wants(sent: float, visible: float, deleted: float, running: int = tasks) -> int | None:
        point = Datapoint(0, round(visible), 0, 0.0, running, sent=round(sent), deleted=round(deleted), desired=tasks)
        return StepPolicy(demand, ecs.minimum, ecs.maximum).decide(0.0, [point], tasks)

    assert wants(5 * task_minute, task_minute, tasks * task_minute) == 6
    assert wants(tasks * task_minute, 0, tasks * task_minute) is None, "keeping up: nothing"
    assert wants(15 * task_minute, 10 * task_minute, tasks * task_minute) == ecs.maximum, "a 10x spike"
    assert wants(15 * task_minute, 0, tasks * task_minute) == ecs.maximum, "its first minute, read before it began"
    rollout = wants(tasks * task_minute, 2 * task_minute, 2 * task_minute, running=2)
    assert rollout is None, "half the tasks replaced: the work needs the tasks asked for, no more"
    assert wants(5 * task_minute, 5 * task_minute, 0) is None, "nothing deleted: no datapoint, nothing added"


def test_the_ecs_stack_s_deployment_alarms_are_ones_the_simulator_evaluates(defaults: Path) -> None:
    """The alarms a release's deployment watches (DeploymentConfiguration.Alarms) read metrics
    the simulation produces: the worker's jobs_processed_total by outcome, the DLQ's depth."""
    alarms = releases.read(defaults)
    assert alarms is not None and alarms.rollback
    names = {a.name for a in alarms.alarms}
    assert names == {"WorkerReleaseFailingAlarm", "WorkerJobErrorRatioHighAlarm", "DeadLetterQueueInflowAlarm"}
    assert alarms.not_simulated == ()
    assert alarms.bake_seconds == max(a.window for a in alarms.alarms)


# Twenty minutes at half the fleet's capacity: Spot interruptions, or a bad release at 5 minutes.
SPOT = Shape("spot", "half the capacity on Spot", 1200.0, Steady(0.5), interruptions_per_hour=9.0)
BAD = Shape("bad", "a bad release at 5 minutes", 1200.0, Steady(0.5), events=(Event(300.0, "bad-release"),))


@pytest.mark.parametrize("platform", ["kubernetes", "ecs"])
def test_spot_interruptions_of_the_generated_fleet_drain_within_the_warning(defaults: Path, platform: str) -> None:
    """The generated grace period (shutdown timeout + margin) fits in Spot's two-minute warning:
    every interrupted replica drains; nothing is lost or runs twice."""
    result = simulate(Run(SPOT, platform, deployfiles.read(defaults), Options(scale=8, job_seconds=2.0)))
    invariants(result)
    assert result["spot_interruptions"] == 3
    assert result["duplicate_runs"] == 0 and result["cut_off_by_sigkill"] == 0


def test_a_bad_release_of_the_generated_ecs_service_is_rolled_back_by_its_alarms(defaults: Path) -> None:
    options = Options(scale=8, job_seconds=2.0, deployment_alarms=releases.read(defaults))
    result = simulate(Run(BAD, "ecs", deployfiles.read(defaults), options))
    release = result["release"]
    assert release["rolled_back"] and release["alarm"] == "WorkerReleaseFailingAlarm", release
    assert result["messages_lost"] == 0 and result["unfinished"] == 0
    # The one-minute error ratio rolls the release back within minutes, and the bake's retry
    # base (WORKER_RETRY_BASE_SECONDS: four retries of at least 435 s in all at maxReceiveCount
    # 5) outlasts the rollback: the release's failures spend no message's last attempt.
    assert release["jobs_failed"] > 0 and release["dead_lettered"] == result["dead_lettered"] == 0, release


@pytest.mark.parametrize("name", ["defaults", "eks-py313-fifo"])
def test_the_report_states_what_the_run_assumed(name: str, tmp_path: Path) -> None:
    deploy = bake(tmp_path, **SUPPORTED[name].answers) / "deploy"
    out = tmp_path / "simulation"
    assert (
        cli.main(["--deploy", str(deploy), "--out", str(out), "--shapes", "drip", "--no-oracle", "--processes", "1"])
        == 0
    )
    text = (out / "report.md").read_text()
    assumed = json.loads((out / "report.json").read_text())["assumed"]
    assert "## What this run assumed" in text
    assert assumed["job_seconds"]["drip"]["source"] == "default", "the service states no job time of its own"
    assert "set `--job-seconds` to your jobs' mean" in text
    fifo = SUPPORTED[name].answers.get("queue_name", "").endswith(".fifo")
    assert assumed["queue"]["fifo"] is fifo
    assert ("is FIFO and was simulated as a standard queue" in text) is fifo
    assert "jobs running at its in-flight peak" in text and "*thrash*" in text and "*oracle*" in text
