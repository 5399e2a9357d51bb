"""The fleet simulator's decisions, each a pure function, held to the platforms' documented
behaviour and to the cases that bite: the HPA's tolerance, policies and windows; KEDA's
ScaledJob strategies; ECS target tracking's alarms and cooldowns, and the step scaling
policies beside it (scale-out on a high alarm, scale-in on a low one); the oracle; traffic;
the lagging counts."""

from __future__ import annotations

import ast
import dataclasses
import itertools
import math
import random
from pathlib import Path

import pytest

import sqs_worker_engine
from sqs_worker_engine.fleet import report
from sqs_worker_engine.fleet.autoscalers import deployfiles, hpa, keda, oracle
from sqs_worker_engine.fleet.autoscalers.deployfiles import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    EcsService,
    Policy,
    Rules,
    SqsTrigger,
    Worker,
)
from sqs_worker_engine.fleet.autoscalers.platform import ecs_batch
from sqs_worker_engine.fleet.autoscalers.stepscaling import ScaleInStepPolicy, Step, StepPolicy, StepScaling
from sqs_worker_engine.fleet.autoscalers.targettracking import TargetTracking, combined
from sqs_worker_engine.fleet.load import traffic
from sqs_worker_engine.fleet.load.work import Durations, Histogram
from sqs_worker_engine.fleet.simulation import thrash
from sqs_worker_engine.fleet.sqs.counts import Counts, Datapoint, Truth
from sqs_worker_engine.fleet.sqs.metricmath import check, evaluate

# The generated ScaledObject's behaviour (deploy/k8s/scaledobject.yaml).
UP = Rules(0, "Max", (Policy("Percent", 100, 30), Policy("Pods", 4, 30)))
DOWN = Rules(300, "Min", (Policy("Pods", 1, 60),))


# -- the HPA ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "target", "current", "expected"),
    [
        (160, 16, 10, 10),  # on target
        (170, 16, 10, 10),  # 6% over: within the 10% tolerance, no change
        (180, 16, 10, 12),  # 12.5% over: ceil(180 / 16)
        (0, 16, 3, 0),  # nothing: as few as the minimum allows
        (5, 16, 0, 1),  # from none: no tolerance to apply
    ],
)
def test_a_metric_proposes_ceil_value_over_target_outside_the_tolerance(value, target, current, expected) -> None:
    assert hpa.proposal(value, target, current) == expected


def test_scale_up_takes_the_policy_that_allows_most_and_counts_what_the_period_added() -> None:
    # From 2: Percent 100 allows 4, Pods 4 allows 6; Max selects 6.
    assert hpa.limit(40, 2, [], 0.0, UP, DOWN) == 6
    # 4 added 10 s ago: the period started at 2, so 6 is still the bound.
    assert hpa.limit(40, 6, [(-10.0, 4)], 0.0, UP, DOWN) == 6
    # Once the period is over, from 6: Percent allows 12, Pods 10.
    assert hpa.limit(40, 6, [(-31.0, 4)], 0.0, UP, DOWN) == 12


def test_scale_down_removes_one_pod_a_minute() -> None:
    assert hpa.limit(1, 10, [], 0.0, UP, DOWN) == 9
    assert hpa.limit(1, 9, [(-30.0, -1)], 0.0, UP, DOWN) == 9  # one already this minute
    assert hpa.limit(1, 9, [(-61.0, -1)], 0.0, UP, DOWN) == 8


def test_the_scale_down_window_holds_the_highest_recent_proposal() -> None:
    history = [(-200.0, 8), (-100.0, 3)]
    assert hpa.stabilize(history, 2, 8, 0.0, UP, DOWN) == 8  # 8 was proposed within 300 s
    assert hpa.stabilize([(-301.0, 8), (-100.0, 3)], 2, 8, 0.0, UP, DOWN) == 3
    assert hpa.stabilize(history, 12, 8, 0.0, UP, DOWN) == 12  # up: no window, at once


def test_the_default_behaviour_is_kubernetes() -> None:
    """Without `behavior`: up by 100% or 4 pods per 15 s, down after 300 s by up to 100%."""
    scaler = hpa.Hpa(1, 10, DEFAULT_SCALE_UP, DEFAULT_SCALE_DOWN)
    assert scaler.decide(0.0, [9], 1) == 5
    assert scaler.decide(16.0, [9], 5) == 9


def test_an_hpa_scales_up_at_once_and_down_after_its_window_one_pod_a_minute() -> None:
    scaler = hpa.Hpa(1, 10, UP, DOWN)
    assert scaler.decide(0.0, [10], 1) == 5  # Pods 4: 1 -> 5 in the first 30 s
    assert scaler.decide(15.0, [10], 5) == 5  # still within the period
    assert scaler.decide(31.0, [10], 5) == 10
    counts = [10]
    for t in range(45, 1200, 15):  # nothing to do from now on
        counts.append(scaler.decide(float(t), [1], counts[-1]))
    first_down = next(i for i, c in enumerate(counts) if c < 10)
    assert 45 + (first_down - 1) * 15 >= 300, "not before the 300 s window has passed since the last 10"
    drops = [b - a for a, b in itertools.pairwise(counts) if b < a]
    assert drops and all(d == -1 for d in drops), drops
    assert counts[-1] == 1


def test_thrash_is_a_scale_out_within_the_window_after_a_scale_in() -> None:
    assert thrash([(0, 2), (100, 1), (250, 2)], 300) == 1
    assert thrash([(0, 2), (100, 1), (450, 2)], 300) == 0
    assert thrash([(0, 1), (100, 2), (200, 3)], 300) == 0


# -- KEDA ---------------------------------------------------------------------------------


def test_the_sqs_scaler_counts_in_flight_and_delayed_only_when_asked() -> None:
    attrs = {
        "ApproximateNumberOfMessages": 5,
        "ApproximateNumberOfMessagesNotVisible": 3,
        "ApproximateNumberOfMessagesDelayed": 2,
    }
    assert keda.queue_length(attrs, SqsTrigger(in_flight=True)) == 8
    assert keda.queue_length(attrs, SqsTrigger(in_flight=False)) == 5
    assert keda.queue_length(attrs, SqsTrigger(in_flight=False, delayed=True)) == 7


@pytest.mark.parametrize(
    ("strategy", "max_scale", "running", "pending", "expected"),
    [
        ("default", 5, 2, 0, 3),  # messages less jobs running
        ("default", 5, 2, 2, 3),  # pending jobs are running jobs
        ("accurate", 5, 2, 0, 5),  # running jobs took their messages already
        ("accurate", 5, 2, 2, 3),  # pending ones have not
        ("accurate", 9, 4, 0, 6),  # capped: max 10 less the 4 running
        ("eager", 3, 2, 1, 3),
        ("eager", 9, 4, 2, 4),
    ],
)
def test_scaled_job_strategies_follow_keda(strategy, max_scale, running, pending, expected) -> None:
    assert keda.jobs_to_create(strategy, max_scale, running, pending, 10) == expected


def test_a_job_taken_message_still_counted_makes_accurate_start_another_job() -> None:
    """kedacore/keda #7330: a Job whose pod is ready (no longer pending) has taken its
    message, but the lagging count still shows it: accurate starts a second Job for it."""
    assert keda.jobs_to_create("accurate", max_scale=1, running=1, pending=0, maximum=10) == 1
    # Counting in-flight messages and subtracting every Job running does not.
    assert keda.jobs_to_create("default", max_scale=1, running=1, pending=0, maximum=10) == 0


# -- ECS ----------------------------------------------------------------------------------

ECS = EcsService(Worker({}, 105), 2, 10, 8.0, 60, 300, 50, 100)


def _points(values: list[tuple[float, int]]) -> list[Datapoint]:
    """(visible, running) newest first."""
    return [Datapoint(-i, v, 0, 0.0, r) for i, (v, r) in enumerate(values)]


def test_target_tracking_scales_out_after_three_minutes_above_target() -> None:
    policy = TargetTracking(ECS)
    assert policy.decide(0.0, _points([(40, 2)] * 2), 2) == 2  # two datapoints: not yet
    assert policy.decide(60.0, _points([(40, 2)] * 3), 2) == 5  # ceil(40 / 8)
    # Within the cooldown the same backlog adds nothing more; a larger one does.
    assert policy.decide(90.0, _points([(40, 2)] * 3), 5) == 5
    assert policy.decide(100.0, _points([(72, 5)] * 3), 5) == 9


def test_target_tracking_scales_in_after_fifteen_quiet_minutes_and_its_cooldown() -> None:
    policy = TargetTracking(ECS)
    assert policy.decide(0.0, _points([(0, 6)] * 14), 6) == 6
    assert policy.decide(60.0, _points([(0, 6)] * 15), 6) == 2
    assert policy.decide(120.0, _points([(0, 2)] * 15), 4) == 4  # the scale-in cooldown


# The generated stack's step policy: rounds of work per task, x2 / x4 / x8 past 2, 4, 8 rounds.
ROUNDS = StepScaling(
    metrics=(
        ("visible", "ApproximateNumberOfMessagesVisible"),
        ("in_flight", "ApproximateNumberOfMessagesNotVisible"),
        ("tasks", "RunningTaskCount"),
    ),
    expression="(visible + in_flight) / (tasks * 8)",
    threshold=2.0,
    periods=1,
    datapoints=1,
    adjustment_type="PercentChangeInCapacity",
    steps=(Step(0, 2, 100), Step(2, 6, 300), Step(6, None, 700)),
    cooldown=60,
    min_magnitude=1,
)


def test_metric_math_is_evaluated_as_cloudwatch_does() -> None:
    assert evaluate("(visible + in_flight) / (tasks * 8)", {"visible": 40, "in_flight": 8, "tasks": 2}) == 3.0
    assert evaluate("-a + 2 * b - 1", {"a": 1, "b": 3}) == 4.0
    assert evaluate("a / tasks", {"a": 5, "tasks": 0}) is None, "no datapoint, as CloudWatch gives none"
    with pytest.raises(ValueError, match="not simulated"):
        evaluate("SUM(METRICS())", {})


def test_the_step_policy_acts_on_one_datapoint_in_proportion_to_the_breach() -> None:
    policy = StepPolicy(ROUNDS, 2, 10)
    assert policy.decide(0.0, _points([(31, 2)]), 2) is None, "31 / 16: under 2 rounds, no alarm"
    assert policy.decide(0.0, [], 2) is None, "no datapoint: not breaching"
    assert StepPolicy(ROUNDS, 2, 10).decide(0.0, _points([(40, 2)]), 2) == 4, "2.5 rounds: x2"
    assert StepPolicy(ROUNDS, 2, 10).decide(0.0, _points([(80, 2)]), 2) == 8, "5 rounds: x4"
    assert StepPolicy(ROUNDS, 2, 20).decide(0.0, _points([(200, 2)]), 2) == 16, "12.5 rounds: x8"
    assert StepPolicy(ROUNDS, 2, 10).decide(0.0, _points([(200, 2)]), 2) == 10, "within MaxCapacity"


def test_within_the_step_cooldown_what_the_last_scale_out_added_counts() -> None:
    # Application Auto Scaling's own example: +2, then a larger step of +3 within the
    # cooldown adds 1 more.
    counted = StepScaling(
        ROUNDS.metrics, "visible", 10.0, 1, 1, "ChangeInCapacity", (Step(0, 10, 2), Step(10, None, 3)), 300
    )
    policy = StepPolicy(counted, 1, 20)
    assert policy.decide(0.0, _points([(15, 4)]), 4) == 6
    assert policy.decide(60.0, _points([(15, 6)]), 6) is None, "the same step adds nothing more"
    assert policy.decide(120.0, _points([(25, 6)]), 6) == 7, "4 + 3"
    assert policy.decide(400.0, _points([(25, 7)]), 7) == 10, "cooled: from the capacity now"


def test_a_percent_step_rounds_as_application_auto_scaling_does() -> None:
    def stepped(percent: float, capacity: int, magnitude: int = 0) -> int | None:
        spec = StepScaling(
            ROUNDS.metrics, "visible", 0.0, 1, 1, "PercentChangeInCapacity", (Step(0, None, percent),), 60, magnitude
        )
        return StepPolicy(spec, 1, 100).decide(0.0, _points([(1, capacity)]), capacity)

    assert stepped(10, 3) == 4, "0.3 rounds up to 1"
    assert stepped(50, 5) == 7, "2.5 rounds down to 2"
    assert stepped(10, 12, magnitude=3) == 15, "at least MinAdjustmentMagnitude"


def test_target_tracking_and_the_step_policy_take_the_larger_capacity() -> None:
    # What targettracking.track does each minute: a step scale-out overrides a target
    # tracking scale-in, and the larger scale-out wins.
    step, tracking = StepPolicy(ROUNDS, 2, 10), TargetTracking(ECS)
    points = _points([(80, 2)] * 3)
    assert combined(2, tracking.decide(0.0, points, 2), step.decide(0.0, points, 2)) == 10  # ceil(80 / 8) over x4
    assert combined(2, 2, None) == 2, "no alarm: target tracking's"
    assert combined(5, 3, 8) == 8, "a step scale-out beats a target tracking scale-in"
    assert combined(5, 5, None, 4) == 4, "a step scale-in when nothing scales out"
    assert combined(5, 6, None, 4) == 6, "a target tracking scale-out beats a step scale-in"
    assert combined(6, 3, None, 5) == 5, "of two scale-ins, the larger capacity"


# A low alarm on the same rounds of work: under half a round for five minutes in a row
# removes a task, or two under a quarter of a round; one step per five minutes.
QUIET = dataclasses.replace(
    ROUNDS,
    threshold=0.5,
    periods=5,
    datapoints=5,
    adjustment_type="ChangeInCapacity",
    steps=(Step(-0.25, 0, -1), Step(None, -0.25, -2)),
    cooldown=300,
    min_magnitude=0,
    comparison="LessThanThreshold",
)


def test_a_low_alarm_that_must_hold_five_minutes_does_not_scale_in_on_a_two_minute_dip() -> None:
    busy: tuple[float, int] = (48, 8)  # 0.75 rounds of work a task
    dip: tuple[float, int] = (24, 8)  # 0.375
    policy = ScaleInStepPolicy(QUIET, 2, 10)
    assert policy.decide(0.0, _points([dip] * 2 + [busy] * 3), 8) is None, "two minutes under: no alarm"
    assert policy.decide(60.0, _points([dip] * 4 + [busy]), 8) is None, "four: still not"
    assert policy.decide(120.0, _points([dip] * 5), 8) == 7, "five in a row: one task fewer"
    # DatapointsToAlarm 3 of EvaluationPeriods 5: any three of the latest five.
    three_of_five = ScaleInStepPolicy(dataclasses.replace(QUIET, datapoints=3), 2, 10)
    assert three_of_five.decide(0.0, _points([dip, dip, busy, busy, busy]), 8) is None
    assert three_of_five.decide(0.0, _points([dip, busy, dip, busy, dip]), 8) == 7
    assert ScaleInStepPolicy(QUIET, 2, 10).decide(0.0, _points([dip] * 4), 8) is None, (
        "missing datapoints do not breach"
    )


def test_a_scale_in_takes_the_step_whose_bounds_hold_the_breach() -> None:
    def stepped(visible: float, tasks: int = 8, spec: StepScaling = QUIET) -> int | None:
        return ScaleInStepPolicy(spec, 2, 10).decide(0.0, _points([(visible, tasks)] * 5), tasks)

    assert stepped(32) is None, "0.5 rounds: not below the threshold"
    assert stepped(24) == 7, "0.375: -0.125 from the threshold, in (-0.25, 0]"
    assert stepped(8) == 6, "0.125: -0.375, in (-inf, -0.25]"
    assert stepped(16) == 6, "0.25: -0.25, the lower step's upper bound, which it includes below the threshold"
    at_most = dataclasses.replace(QUIET, comparison="LessThanOrEqualToThreshold")
    assert stepped(32, spec=at_most) == 7, "at the threshold: the step whose upper bound is 0 holds it"
    assert stepped(8, tasks=2) is None, "never below MinCapacity"


def test_a_percent_scale_in_rounds_as_application_auto_scaling_does() -> None:
    def stepped(percent: float, capacity: int, magnitude: int = 0) -> int | None:
        spec = dataclasses.replace(
            QUIET, adjustment_type="PercentChangeInCapacity", steps=(Step(None, 0, percent),), min_magnitude=magnitude
        )
        return ScaleInStepPolicy(spec, 1, 100).decide(0.0, _points([(0, capacity)] * 5), capacity)

    assert stepped(-10, 3) == 2, "-0.3 rounds to -1"
    assert stepped(-50, 5) == 3, "-2.5 rounds up to -2"
    assert stepped(-10, 12) == 11, "-1.2 rounds up to -1"
    assert stepped(-25, 4, magnitude=2) == 2, "at least MinAdjustmentMagnitude"


def test_a_scale_in_waits_its_cooldown_and_a_scale_out_ends_it() -> None:
    quiet = _points([(0, 8)] * 5)
    policy = ScaleInStepPolicy(QUIET, 2, 10)
    assert policy.decide(0.0, quiet, 8) == 6
    assert policy.decide(60.0, quiet, 6) is None, "within the cooldown"
    assert policy.decide(300.0, quiet, 6) == 4, "cooled"
    policy.scaled_out()
    assert policy.decide(360.0, quiet, 6) == 4, "a scale-out ended the cooldown"


def test_disable_scale_in_stops_target_tracking_from_scaling_in() -> None:
    policy = TargetTracking(dataclasses.replace(ECS, scale_in_disabled=True))
    assert policy.decide(60.0, _points([(0, 6)] * 15), 6) == 6, "fifteen quiet minutes: no scale-in"
    assert policy.decide(120.0, _points([(40, 2)] * 3), 2) == 5, "it still scales out"


def test_an_ecs_rollout_stops_what_is_above_the_minimum_healthy() -> None:
    assert ecs_batch(2, 50) == 1
    assert ecs_batch(10, 50) == 5
    assert ecs_batch(1, 0) == 1
    assert ecs_batch(1, 50) == 1  # would be 0: a rollout must start


# -- the oracle ---------------------------------------------------------------------------


def test_the_oracle_sizes_for_the_rate_a_start_latency_ahead_and_the_backlog() -> None:
    spike = traffic.Spike(base=10.0, factor=10.0, at=100.0, length=60.0)
    the = oracle.Oracle(
        lambda t: spike.rate(t), job_seconds=1.0, concurrency=8, start_seconds=30, minimum=1, maximum=10
    )
    assert the.desired(0.0, 0) == 2  # 10/s x 1 s / 0.9 / 8
    assert the.desired(60.0, 0) == 10  # the spike is within a start latency and a sync: ready for it
    assert the.desired(0.0, 1200) == 4  # 1200 waiting cleared in a minute: 20/s more


# -- traffic ------------------------------------------------------------------------------


def test_arrivals_follow_the_rate_in_groups_of_at_most_k() -> None:
    shape = traffic.Shape("t", "t", 600.0, traffic.Steady(20.0), absolute=True)
    groups = [g for _, gs in traffic.arrivals(shape, 1.0, 7, seed=3) for g in gs]
    total = sum(g.count for g in groups)
    assert abs(total - 12_000) < 4 * math.sqrt(12_000), total
    assert all(1 <= g.count <= 7 for g in groups)
    assert all(g.last - g.first <= traffic.MAX_SPAN + 1e-9 for g in groups)
    firsts = [g.first for g in groups]
    assert firsts == sorted(firsts), "groups never overlap in time"


def test_a_quiet_spell_never_holds_a_message_back_for_its_group() -> None:
    shape = traffic.Shape("t", "t", 3600.0, traffic.Steady(1 / 60), absolute=True)
    for at, groups in traffic.arrivals(shape, 1.0, 50, seed=1):
        for group in groups:
            assert at - group.first <= traffic.MAX_SPAN + traffic.STEP


@pytest.mark.slow
def test_the_same_seed_gives_the_same_traffic() -> None:
    shape = traffic.SHAPES["spike"]
    a = list(traffic.arrivals(shape, 80.0, 1, seed=5))
    assert a == list(traffic.arrivals(shape, 80.0, 1, seed=5))
    assert a != list(traffic.arrivals(shape, 80.0, 1, seed=6))


def test_the_day_averages_a_million_an_hour() -> None:
    day = traffic.SHAPES["day-1m"]
    assert abs(day.mean_rate(1.0) * 3600 - 1_000_000) < 10_000


# -- what readers see ---------------------------------------------------------------------


def test_approximate_counts_lag_up_to_a_minute_and_no_more() -> None:
    counts = Counts(lag=60.0, seed=2)
    for t in range(200):
        counts.record(Truth(float(t), visible=t, inflight=0, oldest_age=0.0, running=1))
    seen = [counts.approximate().visible for _ in range(500)]
    assert min(seen) >= 199 - 61 and max(seen) <= 199
    assert len(set(seen)) > 20, "each read draws its own lag"


def test_cloudwatch_publishes_a_minute_after_it_ends() -> None:
    counts = Counts(lag=0.0, delay=60.0, seed=2)
    for t in range(0, 300):
        counts.record(Truth(float(t), visible=t // 60, inflight=0, oldest_age=float(t), running=1))
    (latest,) = counts.cloudwatch(300.0)
    assert latest.minute == 3  # minute 4 ended at 300 s: published at 360 s
    assert [p.minute for p in counts.cloudwatch(300.0, 3)] == [3, 2, 1]


def test_cloudwatch_sums_what_was_sent_and_deleted_over_the_whole_minute() -> None:
    # NumberOfMessagesSent and NumberOfMessagesDeleted are a minute's Sum, not a read in it.
    counts = Counts(lag=0.0, delay=0.0, seed=2)
    for t in range(0, 181):
        counts.record(Truth(float(t), 0, 0, 0.0, 1, sent=3 * t, deleted=t if t < 120 else 119 + 2 * (t - 119)))
    # Deletes doubled from second 120: minute 2's sum shows it whole, whatever moment SQS reads.
    assert [(p.minute, p.sent, p.deleted) for p in counts.cloudwatch(180.0, 3)] == [
        (2, 180, 120),
        (1, 180, 60),
        (0, 177, 59),
    ]


# The generated stack's second step policy: how much the backlog grew in a minute, in rounds,
# with the rounds policy's threshold and steps.
GROWTH = dataclasses.replace(
    ROUNDS,
    metrics=(("sent", "NumberOfMessagesSent"), ("deleted", "NumberOfMessagesDeleted"), ("tasks", "RunningTaskCount")),
    expression="(sent - deleted) / (tasks * 8)",
)


def test_a_spike_that_began_after_the_minute_s_read_is_seen_by_what_the_minute_sent() -> None:
    # Three tasks deleting 5 a second; from second 40 of minute 0, 25 a second arrive. SQS's
    # read of the counts at second 30 shows nothing; the minute's sums show the backlog grew
    # by 400, 16.7 rounds of work a task.
    counts = Counts(lag=30.0, delay=0.0, seed=1)
    backlog = sent = deleted = 0
    for t in range(0, 61):
        arriving = 25 if t >= 40 else 5
        sent, deleted = sent + arriving, deleted + 5
        backlog += arriving - 5
        counts.record(Truth(float(t), backlog, 24, 0.0, 3, sent=sent, deleted=deleted))
    (point,) = counts.cloudwatch(61.0)
    read = StepPolicy(ROUNDS, 3, 10)
    counts_at_30 = dataclasses.replace(point, visible=0.0)  # the read before the spike, whatever the draw
    assert read.decide(0.0, [counts_at_30], 3) is None, "one round in flight a task: no alarm"
    assert point.sent - point.deleted == 400
    assert StepPolicy(GROWTH, 3, 10).decide(0.0, [point], 3) == 10, "16.7 rounds of growth: x8, within MaxCapacity"


def test_a_backlog_the_tasks_are_working_down_raises_no_growth_alarm() -> None:
    shrinking = Datapoint(0, 400, 24, 30.0, 3, sent=100, deleted=300)
    assert StepPolicy(ROUNDS, 3, 10).decide(0.0, [shrinking], 3) == 10, "the rounds alarm: 17.7 rounds a task"
    assert StepPolicy(GROWTH, 3, 10).decide(0.0, [shrinking], 3) is None


def test_job_durations_keep_their_mean_and_fit_their_timeout() -> None:
    rng = random.Random(1)
    durations = Durations(2.0, longest=5.0)
    draws = [durations.total(rng, 1) for _ in range(20_000)]
    assert max(draws) <= 5.0
    assert abs(sum(draws) / len(draws) - 2.0) < 0.05
    sums = [Durations(2.0).total(rng, 10) for _ in range(5000)]
    assert abs(sum(sums) / len(sums) - 20.0) < 0.3


def test_wait_quantiles_from_buckets() -> None:
    waits = Histogram()
    for i in range(1, 1001):
        waits.add_range(i / 100, i / 100, 1)
    assert waits.quantile(0.5) == pytest.approx(5.0, rel=0.02)
    assert waits.quantile(0.99) == pytest.approx(9.9, rel=0.02)
    spread = Histogram()
    spread.add_range(0.0, 10.0, 1000)
    assert spread.quantile(0.9) == pytest.approx(9.0, rel=0.03)
    assert spread.max == 10.0


# -- layering -----------------------------------------------------------------------------


def test_the_simulator_sits_above_the_engine() -> None:
    """Nothing in the engine imports the fleet package; the fleet package imports the
    engine's public pieces and the virtual-time loop, never the runtime's insides."""
    package = Path(sqs_worker_engine.__file__).parent
    for path in package.rglob("*.py"):
        if "fleet" in path.relative_to(package).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert "fleet" not in node.module.split("."), path.name
    allowed = {
        "base.clock",
        "base.limits",
        "base._version",
        "handlers.job",
        "handlers.outcomes",  # the outcomes jobs_processed_total is published by (ECS's deployment alarms read it)
        "handlers.router",
        "process.settings",
        "process.worker",
        "doubles.vtime",
    }
    checked = 0
    for path in (package / "fleet").rglob("*.py"):
        # The fleet's folders are its own: an import that climbs out of fleet/ is the engine's.
        depth = len(path.relative_to(package / "fleet").parts)  # fleet/x.py 1, fleet/sqs/x.py 2
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level > depth:
                assert node.module, f"{path.name}: from {'.' * node.level} import"
                used = {node.module} if node.module in allowed else {f"{node.module}.{a.name}" for a in node.names}
                assert used <= allowed, f"{path.relative_to(package)} imports {sorted(used)} of the engine"
                checked += 1
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert not node.module.startswith("sqs_worker_engine") or node.module.startswith(
                    "sqs_worker_engine.fleet"
                ), f"{path.relative_to(package)}: the engine by its absolute name ({node.module})"
    assert checked > 10, "the fleet's imports of the engine were found in its folders too"


# -- what the simulator reads ------------------------------------------------------------

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
spec:
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 0, maxUnavailable: 1}}
  template:
    spec:
      terminationGracePeriodSeconds: 105
      containers:
        - name: worker
          env:
            - {name: WORKER_QUEUES, value: "orders.fifo"}
            - {name: WORKER_CONCURRENCY, value: "8"}
            - name: FROM_A_SECRET
              valueFrom: {secretKeyRef: {name: s, key: k}}
          resources: {requests: {cpu: 250m, memory: 512Mi}}
---
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
spec:
  minReplicaCount: 1
  maxReplicaCount: 10
  advanced:
    horizontalPodAutoscalerConfig:
      behavior:
        scaleDown:
          stabilizationWindowSeconds: 300
          selectPolicy: Min
          policies: [{type: Pods, value: 1, periodSeconds: 60}]
  triggers:
    - type: aws-sqs-queue
      metadata: {queueLength: "8", activationQueueLength: "0", scaleOnInFlight: "true"}
    - type: aws-cloudwatch
      metadata: {metricName: ApproximateAgeOfOldestMessage, targetMetricValue: "120"}
"""

# The alarms' rounds of work a task, as the generated stack writes them.
ALARM_METRICS = """      Metrics:
        - Id: visible
          MetricStat: {Period: 60, Metric: {MetricName: ApproximateNumberOfMessagesVisible}}
        - Id: tasks
          MetricStat: {Period: 60, Metric: {MetricName: RunningTaskCount}}
        - Id: rounds
          Expression: !Sub "visible / (tasks * ${Target})"
"""
SERVICE = (
    """
Parameters:
  Target: {Type: Number, Default: 8}
Resources:
  Task:
    Type: AWS::ECS::TaskDefinition
    Properties:
      Cpu: "512"
      Memory: "1024"
      ContainerDefinitions:
        - Name: worker
          StopTimeout: 105
          Environment:
            - {Name: WORKER_QUEUES, Value: "orders"}
            - Name: WORKER_LARGE_PAYLOAD_BUCKET
              Value: !Ref Bucket
  Service:
    Type: AWS::ECS::Service
    Properties:
      DeploymentConfiguration: {MaximumPercent: 100, MinimumHealthyPercent: 50}
  Target2:
    Type: AWS::ApplicationAutoScaling::ScalableTarget
    Properties: {MinCapacity: 2, MaxCapacity: 10}
  Policy:
    Type: AWS::ApplicationAutoScaling::ScalingPolicy
    Properties:
      TargetTrackingScalingPolicyConfiguration:
        TargetValue: !Ref Target
        ScaleOutCooldown: 60
        CustomizedMetricSpecification:
          Metrics:
            - Id: visible
              MetricStat: {Metric: {MetricName: ApproximateNumberOfMessagesVisible}}
            - Id: in_flight
              MetricStat: {Metric: {MetricName: ApproximateNumberOfMessagesNotVisible}}
            - Id: tasks
              MetricStat: {Metric: {MetricName: RunningTaskCount}}
            - Id: per_task
              Expression: !Sub "(visible + in_flight) / tasks"
  Step:
    Type: AWS::ApplicationAutoScaling::ScalingPolicy
    Properties:
      PolicyType: StepScaling
      StepScalingPolicyConfiguration:
        AdjustmentType: PercentChangeInCapacity
        StepAdjustments:
          - {MetricIntervalLowerBound: 0, MetricIntervalUpperBound: 2, ScalingAdjustment: 100}
          - {MetricIntervalLowerBound: 2, ScalingAdjustment: 300}
  Rounds:
    Type: AWS::CloudWatch::Alarm
    Properties:
      ComparisonOperator: GreaterThanThreshold
      Threshold: 2
      EvaluationPeriods: 3
      AlarmActions: [!Ref Step]
"""
    + ALARM_METRICS
)


def test_the_deploy_files_are_read_with_the_platforms_defaults_for_what_they_leave_out(tmp_path: Path) -> None:
    (tmp_path / "k8s").mkdir()
    (tmp_path / "k8s" / "worker.yaml").write_text(DEPLOYMENT)
    (tmp_path / "ecs").mkdir()
    (tmp_path / "ecs" / "service.yaml").write_text(SERVICE)
    bake = deployfiles.read(tmp_path)
    assert bake.platforms() == ["kubernetes", "ecs"]
    k8s = bake.kubernetes
    assert isinstance(k8s, deployfiles.Deployment)
    assert (k8s.worker.queue, k8s.worker.fifo, k8s.worker.concurrency, k8s.worker.grace) == (
        "orders.fifo",
        True,
        8,
        105,
    )
    assert (k8s.worker.cpu, k8s.worker.memory_gib) == (0.25, 0.5)
    assert "FROM_A_SECRET" not in k8s.worker.env
    assert (k8s.max_surge, k8s.max_unavailable) == (0, 1)
    scaling = k8s.scaling
    assert (scaling.minimum, scaling.maximum, scaling.polling, scaling.cooldown) == (1, 10, 30, 300)
    assert scaling.scale_up == DEFAULT_SCALE_UP, "no scaleUp: the HPA's default"
    assert scaling.scale_down == Rules(300, "Min", (Policy("Pods", 1, 60),))
    assert scaling.sqs == SqsTrigger(8, 0, True, False)
    assert scaling.age is not None and scaling.age.target == 120.0
    ecs = bake.ecs
    assert ecs is not None
    assert (ecs.minimum, ecs.maximum, ecs.target, ecs.scale_out_cooldown, ecs.scale_in_cooldown) == (
        2,
        10,
        8.0,
        60,
        300,
    )
    assert (ecs.min_healthy_percent, ecs.max_percent) == (50, 100)
    assert ("in_flight", "ApproximateNumberOfMessagesNotVisible") in ecs.tracking_metrics
    assert (ecs.worker.cpu, ecs.worker.memory_gib, ecs.worker.grace) == (0.5, 1.0, 105.0)
    (step,) = ecs.steps_out  # the step policy, found by the alarm whose action it is
    assert (step.expression, step.threshold, step.periods, step.datapoints) == ("visible / (tasks * 8)", 2.0, 3, 3)
    assert step.metrics == (("visible", "ApproximateNumberOfMessagesVisible"), ("tasks", "RunningTaskCount"))
    assert (step.adjustment_type, step.cooldown, step.min_magnitude) == ("PercentChangeInCapacity", 300, 0)
    assert step.steps == (Step(0, 2, 100), Step(2, None, 300))
    assert ecs.step_in is None and not ecs.scale_in_disabled


# The same service with target tracking's scale-in disabled and a step policy on a low alarm.
SCALE_IN = (
    """
  QuietStep:
    Type: AWS::ApplicationAutoScaling::ScalingPolicy
    Properties:
      PolicyType: StepScaling
      StepScalingPolicyConfiguration:
        AdjustmentType: ChangeInCapacity
        Cooldown: 120
        StepAdjustments:
          - {MetricIntervalUpperBound: 0, ScalingAdjustment: -1}
  Quiet:
    Type: AWS::CloudWatch::Alarm
    Properties:
      ComparisonOperator: LessThanThreshold
      Threshold: 0.5
      EvaluationPeriods: 15
      DatapointsToAlarm: 12
      AlarmActions: [!Ref QuietStep]
"""
    + ALARM_METRICS
)
SCALES_IN = (
    SERVICE.replace("        ScaleOutCooldown: 60\n", "        ScaleOutCooldown: 60\n        DisableScaleIn: true\n")
    + SCALE_IN
)


def test_a_step_policy_on_a_low_alarm_is_read_as_the_scale_in_one(tmp_path: Path) -> None:
    (tmp_path / "ecs").mkdir()
    (tmp_path / "ecs" / "service.yaml").write_text(SCALES_IN)
    ecs = deployfiles.read(tmp_path).ecs
    assert ecs is not None and ecs.scale_in_disabled
    assert [s.scales_in for s in ecs.steps_out] == [False], "the high alarm's policy still scales out"
    quiet = ecs.step_in
    assert quiet is not None and quiet.scales_in
    assert (quiet.comparison, quiet.threshold, quiet.periods, quiet.datapoints) == ("LessThanThreshold", 0.5, 15, 12)
    assert (quiet.adjustment_type, quiet.cooldown, quiet.steps) == ("ChangeInCapacity", 120, (Step(None, 0, -1),))


# The same service scaled by its step policies alone, as the generated stack is.
NO_TRACKING = SERVICE[: SERVICE.index("  Policy:\n")] + SERVICE[SERVICE.index("  Step:\n") :]


def test_a_stack_without_target_tracking_is_scaled_by_its_step_policies_alone(tmp_path: Path) -> None:
    (tmp_path / "ecs").mkdir()
    (tmp_path / "ecs" / "service.yaml").write_text(NO_TRACKING)
    ecs = deployfiles.read(tmp_path).ecs
    assert ecs is not None and ecs.target is None and ecs.scale_in_disabled
    assert [s.expression for s in ecs.steps_out] == ["visible / (tasks * 8)"]
    points = _points([(400, 2)] * 15)  # far above any target: nothing tracks it
    assert TargetTracking(ecs).decide(0.0, points, 2) == 2
    assert (
        report.describe(deployfiles.Bake(ecs=ecs), "ecs")["kind"]
        == "ECS service + Application Auto Scaling step scaling"
    )


def test_a_target_on_messages_in_flight_alone_is_read_and_tracked_as_such(tmp_path: Path) -> None:
    """Headroom without the backlog: what waits visible is left to a policy of its own."""
    (tmp_path / "ecs").mkdir()
    in_flight_only = SERVICE.replace(
        "            - Id: visible\n              MetricStat: {Metric: {MetricName: ApproximateNumberOfMessagesVisible}}\n",
        "",
    ).replace('"(visible + in_flight) / tasks"', '"in_flight / tasks"')
    assert in_flight_only != SERVICE
    (tmp_path / "ecs" / "service.yaml").write_text(in_flight_only)
    ecs = deployfiles.read(tmp_path).ecs
    assert ecs is not None and ecs.tracking_expression == "in_flight / tasks"
    assert "ApproximateNumberOfMessagesVisible" not in {name for _, name in ecs.tracking_metrics}
    tracking = TargetTracking(ecs)
    backlog = [Datapoint(0, 400, 16, 0.0, 2)] * 3  # 400 visible, 8 in flight a task: at the target
    assert tracking.decide(0.0, backlog, 2) == 2, "what waits visible is not counted"
    busy = [Datapoint(0, 0, 40, 0.0, 2)] * 3  # 20 in flight a task: 2.5 times the target
    assert tracking.decide(0.0, busy, 2) == 5
    # A target on rounds of work in flight, as the generated stack's: the expression is evaluated.
    rounds = in_flight_only.replace('"in_flight / tasks"', '"in_flight / (tasks * 10)"').replace(
        "TargetValue: !Ref Target", "TargetValue: 0.9"
    )
    (tmp_path / "ecs" / "service.yaml").write_text(rounds)
    ecs = deployfiles.read(tmp_path).ecs
    assert ecs is not None and ecs.tracking_expression == "in_flight / (tasks * 10)"
    assert TargetTracking(ecs).decide(0.0, [Datapoint(0, 400, 16, 0.0, 2)] * 3, 2) == 2, "0.8 rounds: below"
    assert TargetTracking(ecs).decide(0.0, [Datapoint(0, 0, 20, 0.0, 2)] * 3, 2) == 3, "1 round: 2 x 1 / 0.9"


@pytest.mark.parametrize(
    ("files", "fragment"),
    [
        ({}, "neither k8s/"),
        ({"k8s/a.yaml": "kind: Deployment\nspec: {}\n"}, "without a KEDA ScaledObject"),
        ({"k8s/a.yaml": "kind: [unclosed\n"}, "not YAML"),
        ({"ecs/service.yaml": "Resources: {}\n"}, "no AWS::ECS::TaskDefinition"),
        ({"ecs/service.yaml": SERVICE.replace("AlarmActions: [!Ref Step]", "AlarmActions: []")}, "no CloudWatch alarm"),
        (
            {
                "ecs/service.yaml": NO_TRACKING.replace("GreaterThanThreshold", "LessThanThreshold")
                .replace("100}", "-1}")
                .replace("300}", "-1}")
            },
            "no scaling policy scales the service out",
        ),
        ({"ecs/service.yaml": SERVICE.replace("Period: 60", "Period: 300")}, "one-minute SQS and ECS metrics"),
        ({"ecs/service.yaml": SERVICE.replace('"visible / (tasks * ${Target})"', "SUM(METRICS())")}, "not simulated"),
        (
            {"ecs/service.yaml": SCALES_IN + SCALE_IN.replace("QuietStep", "Quiet2").replace("Quiet:", "Quiet3:")},
            "plays one that scales in",
        ),
        (
            {"ecs/service.yaml": SCALES_IN.replace("ScalingAdjustment: -1", "ScalingAdjustment: 1")},
            "adds capacity on a low",
        ),
        (
            {"ecs/service.yaml": SCALES_IN.replace("LessThanThreshold", "LessThanLowerOrGreaterThanUpperThreshold")},
            "compares with",
        ),
    ],
)
def test_a_deploy_directory_the_simulator_cannot_play_is_named_with_why(tmp_path: Path, files, fragment) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    with pytest.raises(deployfiles.DeployFileError, match=fragment):
        deployfiles.read(tmp_path)


def test_metric_math_s_if_takes_the_branch_its_comparison_chooses_and_only_that_one() -> None:
    values = {"visible": 50.0, "tasks": 4.0, "sent": 300.0, "deleted": 0.0}
    assert evaluate("IF(visible > tasks * 10, sent / 100, 0)", values) == 3.0
    assert evaluate("IF(visible > tasks * 20, sent / 100, 0)", values) == 0.0
    assert evaluate("IF(visible > 1 AND tasks >= 4, 1, 2)", values) == 1.0
    assert evaluate("IF(visible < 1 || tasks != 4, 1, 2)", values) == 2.0
    assert evaluate("IF(visible > 1, sent / deleted, 0)", values) is None, "the branch taken divides by zero"
    assert evaluate("IF(visible < 1, sent / deleted, 0)", values) == 0.0, "the other does not count"
    assert check("IF(visible > 1, SUM(METRICS()), 0)", {"visible"}), "every branch is checked, taken or not"
    assert check("IF(visible > 1 AND tasks > 0, sent / deleted, 0)", {"visible", "tasks", "sent", "deleted"}) is None
