"""The fleet simulator's decisions about Spot interruptions, a bad release and ECS's
deployment alarms, and what its report says the run assumed: pure functions, table-tested."""

from __future__ import annotations

from typing import Any

import pytest

from sqs_worker_engine.base.limits import SPOT_WARNING_SECONDS
from sqs_worker_engine.fleet import releases, report
from sqs_worker_engine.fleet.autoscalers.deployfiles import Bake, EcsService, ScaledJob, SqsTrigger, Worker
from sqs_worker_engine.fleet.autoscalers.platform import spot_grace
from sqs_worker_engine.fleet.load import traffic
from sqs_worker_engine.fleet.releases import Alarm
from sqs_worker_engine.fleet.sizing import JOB_SOURCES, Options, Run, job_source
from sqs_worker_engine.fleet.sqs.counts import Datapoint
from sqs_worker_engine.fleet.sqs.metricmath import evaluate


@pytest.mark.parametrize(
    ("grace", "killed_after"),
    [(30.0, 30.0), (105.0, 105.0), (120.0, 120.0), (300.0, 120.0)],
    ids=["ECS's default stopTimeout", "the generated grace", "ECS's maximum", "a longer Kubernetes grace"],
)
def test_a_spot_interruption_kills_at_the_grace_period_or_the_warnings_end(grace: float, killed_after: float) -> None:
    assert SPOT_WARNING_SECONDS == 120
    assert spot_grace(grace) == killed_after


def test_spot_interruptions_are_a_fixed_count_at_moments_drawn_from_the_seed() -> None:
    shape = traffic.Shape("s", "s", 2 * traffic.HOUR, traffic.Steady(0.5), interruptions_per_hour=3.0)
    one, again, other = (traffic.interruptions(shape, seed) for seed in (1, 1, 2))
    assert len(one) == 6 and all(e.kind == "spot" for e in one)
    assert all(0.05 * shape.seconds <= e.at <= 0.95 * shape.seconds for e in one)
    assert one == again and one != other
    assert traffic.interruptions(traffic.SHAPES["steady"], 1) == ()
    deploy_and_spot = traffic.Shape(
        "d",
        "d",
        traffic.HOUR,
        traffic.Steady(0.5),
        events=(traffic.Event(600.0, "deploy"),),
        interruptions_per_hour=4.0,
    )
    merged = traffic.events(deploy_and_spot, 1)
    assert [e.at for e in merged] == sorted(e.at for e in merged)
    assert [e.kind for e in merged].count("deploy") == 1 and [e.kind for e in merged].count("spot") == 4
    assert traffic.SHAPES["spot"].interruptions_per_hour == traffic.SPOT_PER_HOUR
    assert [e.kind for e in traffic.SHAPES["bad-release"].events] == ["bad-release"]


@pytest.mark.parametrize(
    ("alarmed", "deploying", "since_completed", "bake", "rolls_back"),
    [
        (False, True, None, 900.0, False),  # no alarm: nothing to do
        (True, True, None, 900.0, True),  # in ALARM during the deployment
        (True, False, 600.0, 900.0, True),  # within the bake time after it completed
        (True, False, 900.0, 900.0, True),  # at its very end
        (True, False, 901.0, 900.0, False),  # after it: the deployment is done, a later alarm is not its
    ],
)
def test_ecs_rolls_a_deployment_back_on_an_alarm_during_it_or_its_bake_time(
    alarmed: bool, deploying: bool, since_completed: float | None, bake: float, rolls_back: bool
) -> None:
    assert (
        releases.rollback_due(alarmed=alarmed, deploying=deploying, since_completed=since_completed, bake=bake)
        is rolls_back
    )


def test_metric_math_fills_missing_metrics_and_diffs_against_the_datapoint_before() -> None:
    assert evaluate("FILL(a, 0) / (FILL(a, 0) + FILL(b, 0))", {"b": 4.0}) == 0.0
    assert evaluate("FILL(a, 0) / (FILL(a, 0) + FILL(b, 0))", {"a": 1.0, "b": 4.0}) == 0.2
    assert evaluate("FILL(a, 0) / FILL(b, 0)", {}) is None, "no jobs: no value, as CloudWatch gives none"
    assert evaluate("DIFF(d)", {"d": 5.0}, {"d": 2.0}) == 3.0
    assert evaluate("DIFF(d)", {"d": 5.0}) is None, "the first datapoint has nothing to differ from"


def point(minute: int, *, deleted: float = 0.0, failed: float = 0.0, dead_letters: float = 0.0) -> Datapoint:
    return Datapoint(minute, 0, 0, 0.0, 4, deleted=deleted, failed=failed, dead_letters=dead_letters)


DLQ = Alarm("dlq", (("depth", "dead_letters"),), "DIFF(depth)", 0.0, 60, 1, 1, "Maximum")
RATIO = Alarm(
    "ratio",
    (("ok", "deleted"), ("bad", "failed")),
    "FILL(bad, 0) / (FILL(ok, 0) + FILL(bad, 0))",
    0.1,
    300,
    3,
    3,
    "Sum",
)


@pytest.mark.parametrize(
    ("alarm", "depths_or_failures", "expected"),
    [
        (DLQ, [3, 1], True),  # the DLQ grew in the latest minute
        (DLQ, [3, 3], False),  # it did not
        (DLQ, [3], False),  # no minute before: no value, not breaching
        (RATIO, [20, 20, 20], True),  # 20% of jobs failed in each of three periods
        (RATIO, [20, 20, 5], False),  # one period at 5%: 2 of 3 breach
        (RATIO, [20, 20], False),  # two periods published so far: missing ones do not breach
    ],
)
def test_a_deployment_alarm_is_in_alarm_as_cloudwatch_evaluates_it(
    alarm: Alarm, depths_or_failures: list[int], expected: bool
) -> None:
    if alarm is DLQ:
        periods = [[point(m, dead_letters=d)] for m, d in enumerate(depths_or_failures)]
    else:  # five minutes a period, 100 jobs a minute, `n`% of them failed
        periods = [[point(m, deleted=100 - n, failed=n) for m in range(5)] for n in depths_or_failures]
    assert releases.in_alarm(alarm, periods) is expected


def test_an_alarms_periods_are_those_published_newest_first() -> None:
    minutes = {m: point(m, failed=m) for m in range(20)}
    # At 16:30 (990 s) with datapoints a minute late, the newest five-minute period published is 10-14.
    periods = releases.periods_of(RATIO, minutes, now=990.0, delay=60.0)
    assert [[p.minute for p in period] for period in periods] == [
        [10, 11, 12, 13, 14],
        [5, 6, 7, 8, 9],
        [0, 1, 2, 3, 4],
        [],
    ]
    assert [[p.minute for p in period] for period in releases.periods_of(DLQ, minutes, now=990.0, delay=60.0)] == [
        [14],
        [13],
    ]


@pytest.mark.parametrize(
    ("metric", "read"),
    [
        ({"MetricName": "jobs_processed_total", "Dimensions": [{"Name": "outcome", "Value": "success"}]}, "deleted"),
        ({"MetricName": "jobs_processed_total", "Dimensions": [{"Name": "outcome", "Value": "retry"}]}, "failed"),
        ({"MetricName": "jobs_processed_total", "Dimensions": [{"Name": "outcome", "Value": "released"}]}, "zero"),
        ({"MetricName": "jobs_processed_total", "Dimensions": [{"Name": "outcome", "Value": "oops"}]}, None),
        (
            {
                "MetricName": "ApproximateNumberOfMessagesVisible",
                "Dimensions": [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["DeadLetterQueue", "QueueName"]}}],
            },
            "dead_letters",
        ),
        ({"MetricName": "worker_last_progress_timestamp_seconds", "Dimensions": []}, None),
    ],
)
def test_the_metrics_a_deployment_alarm_may_read_are_those_the_simulation_produces(
    metric: dict[str, object], read: str | None
) -> None:
    assert releases.reading(metric) == read


def worker(**env: str) -> Worker:
    return Worker({"WORKER_QUEUES": "jobs", "WORKER_JOB_TIMEOUT_MS": "60000", **env}, 105.0)


@pytest.mark.parametrize(
    ("shape_job", "flag", "scaled_job", "source"),
    [
        (0.01, None, False, "shape"),
        (0.01, 2.0, False, "shape"),  # a shape of short jobs keeps its own
        (None, 2.0, False, "flag"),
        (None, None, False, "default"),
        (None, None, True, "job-timeout"),
    ],
)
def test_the_report_names_where_each_shapes_job_time_came_from(
    shape_job: float | None, flag: float | None, scaled_job: bool, source: str
) -> None:
    shape = traffic.Shape("s", "s", 600.0, traffic.Steady(0.5), job_seconds=shape_job)
    spec = ScaledJob(worker(), 0, 4, 30, "accurate", (), SqsTrigger(), 900.0) if scaled_job else None
    bake = Bake(kubernetes=spec) if spec else Bake(ecs=EcsService(worker(), 1, 4, 10.0, 60, 300, 50, 100))
    run = Run(shape, "kubernetes" if scaled_job else "ecs", bake, Options(job_seconds=flag))
    assert job_source(run) == source and source in JOB_SOURCES


DEPLOY = {"queue": "orders-jobs", "concurrency": 8, "max_replicas": 10}


@pytest.mark.parametrize(
    ("queue", "source", "says"),
    [
        (
            "orders-jobs",
            "default",
            ["--job-seconds` to your jobs' mean", "a standard queue", "not jobs running beyond"],
        ),
        ("orders-jobs.fifo", "default", ["is FIFO and was simulated as a standard queue", "in-flight quota (20,000)"]),
        ("orders-jobs", "flag", ["5 s for steady: --job-seconds"]),
    ],
)
def test_the_report_says_what_the_run_assumed(queue: str, source: str, says: list[str]) -> None:
    limit = 20_000 if queue.endswith(".fifo") else 120_000
    assumed = report.assumed(
        deploy={**DEPLOY, "queue": queue}, jobs={"steady": (5.0, source, JOB_SOURCES[source])}, inflight_limit=limit
    )
    text = "\n".join(report.assumed_markdown(assumed))
    assert text.startswith("## What this run assumed")
    for words in says:
        assert words in text, (words, text)
    assert ("FIFO" in text) is queue.endswith(".fifo")
    assert ("this is an assumption" in text) is (source == "default")
    assert assumed["concurrency_budget"]["jobs"] == 80
    assert set(assumed["terms"]) >= {"oracle", "thrash", "replica-minutes"}


@pytest.mark.parametrize(
    ("rolled_back", "dead_lettered", "met"),
    [(True, 0, True), (True, 12, False), (False, 0, False)],
)
def test_the_bad_release_target_is_an_automatic_rollback_with_nothing_dead_lettered(
    rolled_back: bool, dead_lettered: int, met: bool
) -> None:
    release: dict[str, Any] = {
        "rolled_back": rolled_back,
        "jobs_failed": 40,
        "dead_lettered": dead_lettered,
        "at_minutes": 20,
    }
    if rolled_back:
        release |= {"alarm": "WorkerJobErrorRatioHighAlarm", "rollback_began_minutes": 4.5, "rolled_back_minutes": 6}
    shape: dict[str, Any] = {
        "platform": "ecs",
        "release": release,
        "messages_lost": 0,
        "duplicate_runs": 0,
        "cut_off_by_sigkill": 0,
    }
    shape |= {"duplicates_by_cause": {}, "cut_off_by_cause": {}}
    rows = [r for r in report.targets({"bad-release": shape}) if r["target"].startswith("bad release")]
    assert [r["met"] for r in rows] == [met]
    assert f"{dead_lettered:,} messages dead-lettered" in rows[0]["figure"]
    assert report.targets({"bad-release": {**shape, "platform": "kubernetes"}})[-1]["target"] != rows[0]["target"]
