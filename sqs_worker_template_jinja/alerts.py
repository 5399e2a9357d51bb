"""What a bake alerts on: one table of alerts, rendered on each platform the bake targets.

From `alerts()` come every alert of a bake:
- `deploy/prometheus/alerts.yaml` (and the PrometheusRule rendered from it), for EKS and for
  any Prometheus that scrapes the worker (each alert with a PromQL `expr`: one on a metric
  only CloudWatch has is an alarm alone);
- CloudWatch alarms for ECS: on SQS's own metrics in `deploy/aws/queues.yaml`, on the
  worker's in `deploy/ecs/service.yaml` (the metrics its collector writes as EMF, in the
  namespace of the service's name: emf.py says which);
- the runbook in `deploy/README.md`: what each alert means, what to look at, what to do,
  under a heading its `runbook` anchor names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .checkout import load_limits

RUNBOOK = "deploy/README.md"
SEVERITIES = ("critical", "warning", "info")


@dataclass(frozen=True)
class Bake:
    """The answers the alerts read."""

    slug: str
    package: str
    queue: str
    dlq: str
    concurrency: int
    stalled_after: int  # the liveness threshold the deploy files give WORKER_STALLED_AFTER_SECONDS
    ecs: bool
    eks: bool
    fifo: bool

    @classmethod
    def of(cls, cookiecutter: dict[str, Any]) -> Bake:
        limits = load_limits()
        queue = str(cookiecutter["queue_name"])
        return cls(
            slug=str(cookiecutter["project_slug"]),
            package=str(cookiecutter["package_name"]),
            queue=queue,
            dlq=limits.dlq_name(queue),
            concurrency=int(cookiecutter["worker_concurrency"]),
            stalled_after=int(cookiecutter["job_timeout_seconds"]) + 60,
            ecs=cookiecutter["deploy_target"] != "eks",
            eks=cookiecutter["deploy_target"] != "ecs",
            fifo=queue.endswith(limits.FIFO_SUFFIX),
        )


@dataclass(frozen=True)
class Alert:
    """One alert, on every platform. `expr` is PromQL over the worker's metrics (None: a
    metric only CloudWatch has, no Prometheus rule); `alarm` the CloudWatch alarm's
    properties (its metrics, statistic, threshold), in the stack `stack` ("queues": on SQS's
    metrics; "service": on the worker's EMF metrics, ECS only). `pages`: whether the alarm
    notifies the stack's AlarmTopicArn (False: its state and the runbook only)."""

    name: str
    severity: str
    title: str  # one plain line: the CloudWatch alarm's description, the runbook's first words
    summary: str  # Prometheus's annotation (its templating allowed)
    expr: str | None
    wait: str | None  # Prometheus's `for`
    stack: str
    alarm: dict[str, Any]
    means: str
    look: str
    do: str
    why: str = ""  # a comment in the rules file: why this threshold
    pages: bool = True

    @property
    def anchor(self) -> str:
        """The runbook heading's anchor (GitHub's: the heading in lower case)."""
        return self.name.lower()

    @property
    def runbook(self) -> str:
        return f"{RUNBOOK}#{self.anchor}"

    def cloudwatch(self) -> dict[str, Any]:
        """The AWS::CloudWatch::Alarm's properties, notifying the stack's AlarmTopicArn."""
        topic = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}
        actions = {"AlarmActions": topic, "OKActions": topic} if self.pages else {}
        return {"AlarmDescription": f"{self.title} Runbook: {self.runbook}", **self.alarm, **actions}


def _stat(
    id_: str, namespace: str, metric: str, dimensions: dict[str, Any], stat: str, period: int = 60
) -> dict[str, Any]:
    return {
        "Id": id_,
        "ReturnData": False,
        "MetricStat": {
            "Metric": {
                "Namespace": namespace,
                "MetricName": metric,
                **({"Dimensions": [{"Name": k, "Value": v} for k, v in dimensions.items()]} if dimensions else {}),
            },
            "Period": period,
            "Stat": stat,
        },
    }


def _expression(expression: str, label: str, period: int | None = None) -> dict[str, Any]:
    found = {"Id": "alarm", "Expression": expression, "Label": label, "ReturnData": True}
    return found | ({"Period": period} if period else {})


def _math(
    metrics: list[dict[str, Any]], threshold: float, periods: int, missing: str = "notBreaching"
) -> dict[str, Any]:
    return {
        "Metrics": metrics,
        "EvaluationPeriods": periods,
        "DatapointsToAlarm": periods,
        "Threshold": threshold,
        "ComparisonOperator": "GreaterThanThreshold",
        "TreatMissingData": missing,
    }


# What a job's outcome can be (jobs_processed_total{outcome}); the engine's outcomes.py.
OUTCOMES = ("success", "retry", "dead_letter", "timeout", "lease_lost", "released", "dropped", "deferred")
FAILED_OUTCOMES = ("retry", "dead_letter", "timeout")
ERROR_RATIO = 0.1
# A release whose jobs fail: more than this share failed in each of RELEASE_MINUTES minutes.
RELEASE_ERROR_RATIO = 0.5
RELEASE_MINUTES = 2
OLDEST_AGE_SECONDS = 600


def alerts(cookiecutter: dict[str, Any]) -> list[Alert]:
    """Every alert of this bake (the same list on each platform)."""
    b = Bake.of(cookiecutter)
    limits = load_limits()
    platforms = [name for name, on in (("ECS", b.ecs), ("EKS", b.eks)) if on]

    def each(**by_platform: str) -> str:
        """Platform-specific advice, for the platforms this bake targets only."""
        return "; ".join(
            f"{name}: {by_platform[name.lower()]}" if len(platforms) > 1 else by_platform[name.lower()]
            for name in platforms
        )

    job = f'job="{b.slug}"'
    ns = b.slug  # the collector's EMF namespace
    sqs = {"QueueName": b.queue}
    queue = {"queue": b.queue}
    standard = int(limits.MAX_INFLIGHT_STANDARD * limits.INFLIGHT_ALERT_FRACTION)
    fifo = int(limits.MAX_INFLIGHT_FIFO * limits.INFLIGHT_ALERT_FRACTION)
    inflight = limits.inflight_alert_threshold(b.queue)
    return [
        Alert(
            name="SQSOldestMessageAgeHigh",
            severity="warning",
            title=f"{b.queue}: the oldest message has waited more than {OLDEST_AGE_SECONDS} s.",
            summary="{{ $labels.queue }}: oldest message is {{ $value | humanizeDuration }} old",
            expr=f"max by (queue) (queue_oldest_message_seconds{{{job}}}) > {OLDEST_AGE_SECONDS}",
            wait="10m",
            stack="queues",
            alarm={
                "Namespace": "AWS/SQS",
                "MetricName": "ApproximateAgeOfOldestMessage",
                "Dimensions": [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["Queue", "QueueName"]}}],
                "Statistic": "Maximum",
                "Period": 60,
                "EvaluationPeriods": 10,
                "Threshold": {"Ref": "OldestMessageAgeThresholdSeconds"},
                "ComparisonOperator": "GreaterThanThreshold",
                "TreatMissingData": "notBreaching",
            },
            means="Workers are not keeping up: messages wait longer than they should before a worker takes them.",
            look="Whether autoscaling reached its cap (desired = maximum replicas); whether handlers slowed "
            "down (job_duration_seconds) or fail (jobs_processed_total by outcome); whether receiving is "
            "paused (worker_queue_paused) or rate limited.",
            do="Fix what slows or fails the handlers first; raise the replica cap only within what the "
            "downstream absorbs (deploy/README.md, Rollouts stay within the concurrency budget).",
            why="Ten minutes behind is when a person should look, well before retention or the DLQ. "
            "CloudWatch's ApproximateAgeOfOldestMessage is the authority; the worker's estimate is from receives.",
        ),
        Alert(
            name="SQSBacklogPerWorkerHigh",
            severity="warning",
            title=f"{b.queue}: more than {b.concurrency * 10} visible messages wait per worker.",
            summary="{{ $labels.queue }}: {{ $value | humanize }} visible messages per worker",
            expr=(
                f'max by (queue) (sqs_queue_messages{{{job}, state="visible"}}) '
                f"/ on (queue) count by (queue) (worker_concurrency{{{job}}}) > {b.concurrency * 10}"
            ),
            wait="15m",
            stack="service",
            alarm=_math(
                [
                    _stat("visible", "AWS/SQS", "ApproximateNumberOfMessagesVisible", sqs, "Maximum"),
                    _stat(
                        "tasks",
                        "ECS/ContainerInsights",
                        "RunningTaskCount",
                        {"ClusterName": {"Ref": "ClusterName"}, "ServiceName": b.slug},
                        "Average",
                    ),
                    _expression("visible / tasks", "Visible messages per running task"),
                ],
                b.concurrency * 10,
                15,
            ),
            means="Ten rounds of work wait per worker: autoscaling is capped, lagging or broken.",
            look="The service's desired and running count against its maximum; the scaling activity ("
            + each(ecs="the scalable target's activities", eks="the ScaledObject's events and KEDA's logs")
            + ").",
            do="If the cap is reached, decide with the downstream's owners whether it may rise; if "
            "scaling lags, look at the errors of "
            + each(ecs="Application Auto Scaling", eks="KEDA")
            + " (permissions, metrics).",
            why="Autoscaling holds the backlog near one round of work per worker.",
        ),
        Alert(
            name="DeadLetterQueueInflow",
            severity="warning",
            title=f"Messages reached the dead-letter queue {b.dlq}.",
            summary="{{ $labels.queue }}: {{ $value | humanize }} message(s) sent to the dead-letter queue in 10 min",
            expr=f"sum by (queue) (increase(worker_dead_letter_sends_total{{{job}}}[10m])) > 0",
            wait=None,
            stack="queues",
            alarm=_math(
                [
                    _stat(
                        "depth",
                        "AWS/SQS",
                        "ApproximateNumberOfMessagesVisible",
                        {"QueueName": {"Fn::GetAtt": ["DeadLetterQueue", "QueueName"]}},
                        "Maximum",
                    ),
                    _expression("DIFF(depth)", "Messages added to the dead-letter queue"),
                ],
                0,
                1,
            ),
            means="Jobs failed for good: a NonRetryableError or a body that fails its model (sent by the "
            "worker), or a message received maxReceiveCount times (moved by SQS).",
            look=f"`python -m {b.package} dlq peek`: each message's x-error-type, x-error-message and "
            "x-error-context (its trace), and dead_lettered_by; the worker's logs for those job ids.",
            do="Fix the handler or the producer, then `redrive` the messages back (they keep their "
            "attributes and trace); delete those that must never run (`dlq delete --id`).",
            why="Prometheus sees what the worker sends; CloudWatch's rise in the DLQ's depth sees SQS's moves too.",
        ),
        Alert(
            name="WorkerStalled",
            severity="critical",
            title=f"A worker made no progress for more than {b.stalled_after} s.",
            summary="{{ $labels.instance }}: no progress for {{ $value | humanizeDuration }}",
            expr=f"time() - worker_last_progress_timestamp_seconds{{{job}}} > {b.stalled_after}",
            wait="2m",
            stack="service",
            alarm=_math(
                [
                    _stat("progress", ns, "worker_last_progress_timestamp_seconds", {}, "Minimum"),
                    _expression("EPOCH(progress) - progress", "Seconds since the stalest worker's last progress"),
                ],
                b.stalled_after,
                2,
                # No datapoint at all is a worker whose /metrics no longer answers (a blocked loop).
                missing="breaching",
            ),
            means="The handler loop has neither received nor finished anything for longer than any job "
            "may take: the same verdict as the liveness probe, which should be restarting it.",
            look="The worker's last log lines (a blocking call on the event loop, a deadlock in a "
            "handler); the probe's verdicts ("
            + each(ecs="the task's health and its stopped reason", eks="the pod's events and restarts")
            + ").",
            do="If the platform does not restart it, check the health check or liveness probe; then "
            "find the handler that blocks (a sync call in an async handler belongs in a thread).",
            why="The same threshold as the liveness probes (WORKER_STALLED_AFTER_SECONDS).",
        ),
        Alert(
            name="WorkerJobErrorRatioHigh",
            severity="warning",
            title=f"{b.queue}: more than {ERROR_RATIO:.0%} of jobs retried, dead-lettered or timed out.",
            summary="{{ $labels.queue }}: {{ $value | humanizePercentage }} of jobs retried, dead-lettered or timed out",
            expr=(
                f'sum by (queue) (rate(jobs_processed_total{{{job}, outcome=~"{"|".join(FAILED_OUTCOMES)}"}}[10m])) '
                f"/ sum by (queue) (rate(jobs_processed_total{{{job}}}[10m])) > {ERROR_RATIO}"
            ),
            wait="15m",
            stack="service",
            alarm=_math(
                _failed_share(b, 300),
                ERROR_RATIO,
                3,
            ),
            means="Handlers fail often: a dependency is down or slow, or a release broke them.",
            look="The worker's logs by outcome (`job failed`), the failing jobs' traces (error.type on their "
            "spans), job_duration_seconds against the job timeout.",
            do='Roll back a release that caused it ("Rolling back": one command per platform); if a '
            "dependency is down, the retries with backoff buy time (DownstreamUnavailable pauses the queue "
            "instead of spending attempts).",
        ),
        Alert(
            name="WorkerLeasesLost",
            severity="warning",
            title=f"{b.queue}: leases were lost (a job may run twice).",
            summary="{{ $labels.queue }}: {{ $value | humanize }} lease(s) lost in 15 min",
            expr=f"sum by (queue) (increase(worker_leases_lost_total{{{job}}}[15m])) > 0",
            wait=None,
            stack="service",
            alarm=_math(
                [_stat("lost", ns, "worker_leases_lost_total", queue, "Sum", 900), _expression("lost", "Leases lost")],
                0,
                1,
            ),
            means="A lease's extension was refused or not confirmed in time: its job was cancelled and the "
            "message will run again elsewhere.",
            look="sqs_request_duration_seconds and sqs_api_calls_total for ChangeMessageVisibilityBatch "
            "(slow or throttled SQS), a blocked event loop (WorkerStalled), the visibility timeout against "
            "WORKER_HEARTBEAT_FRACTION.",
            do="Keep handlers off the event loop; lengthen the visibility timeout if extensions are late; "
            "make sure handlers are idempotent (the job will run again).",
        ),
        Alert(
            name="SQSRequestErrors",
            severity="warning",
            title="SQS calls fail (throttled, refused or erroring).",
            summary="{{ $labels.operation }}: failing with {{ $labels.outcome }}",
            expr=f'sum by (operation, outcome) (rate(sqs_api_calls_total{{{job}, outcome!~"ok|cancelled"}}[5m])) > 0',
            wait="10m",
            stack="service",
            alarm=_math(
                [
                    {
                        "Id": "alarm",
                        "Expression": (
                            f'SELECT SUM(sqs_api_calls_total) FROM SCHEMA("{ns}", operation, outcome) '
                            "WHERE outcome != 'ok' AND outcome != 'cancelled'"
                        ),
                        "Label": "Failed SQS calls",
                        "Period": 60,
                        "ReturnData": True,
                    }
                ],
                0,
                10,
            ),
            means="SQS answers the worker's calls with errors: throttling, access denied, a missing queue, "
            "or SQS itself failing. Receives back off; settling retries for a while, then lets go.",
            look="sqs_api_calls_total by operation and outcome (the error code); the worker's warnings; "
            "sqs_request_duration_seconds for the same operations.",
            do="AccessDenied: the worker's role (deploy/aws/worker-policy.json), the region, the queue name. "
            "Throttling: fewer replicas or pollers. QueueDoesNotExist: deploy deploy/aws/queues.yaml.",
        ),
        Alert(
            name="WorkerSettleFailures",
            severity="info",
            title=f"{b.queue}: deletes or visibility changes could not be confirmed.",
            summary="{{ $labels.queue }}: {{ $value | humanize }} unconfirmed {{ $labels.action }}(s) in 15 min",
            expr=f"sum by (queue, action) (increase(worker_settle_failures_total{{{job}}}[15m])) > 0",
            wait=None,
            stack="service",
            alarm=_math(
                [
                    _stat("deletes", ns, "worker_settle_failures_total", queue | {"action": "delete"}, "Sum", 900),
                    _stat("changes", ns, "worker_settle_failures_total", queue | {"action": "visibility"}, "Sum", 900),
                    _expression("FILL(deletes, 0) + FILL(changes, 0)", "Unconfirmed settlements"),
                ],
                0,
                1,
            ),
            means="A finished job's delete (or a retry's visibility change) never reached SQS: the message "
            "will be delivered again.",
            look="SQSRequestErrors at the same time; the worker's `could not delete` errors.",
            do="Expect duplicate deliveries; handlers must be idempotent. Persisting: as SQSRequestErrors.",
        ),
        Alert(
            name="SQSInFlightNearLimit",
            severity="warning",
            title=(
                f"{b.queue}: more than {inflight} messages in flight, {limits.INFLIGHT_ALERT_FRACTION:.0%} "
                "of what SQS allows a queue."
            ),
            summary="{{ $labels.queue }}: {{ $value | humanize }} messages in flight",
            expr=(
                f'max by (queue) (sqs_queue_messages{{{job}, state="in_flight", queue!~".+\\\\.fifo"}}) > {standard} '
                f'or max by (queue) (sqs_queue_messages{{{job}, state="in_flight", queue=~".+\\\\.fifo"}}) > {fifo}'
            ),
            wait="5m",
            stack="queues",
            alarm={
                "Namespace": "AWS/SQS",
                "MetricName": "ApproximateNumberOfMessagesNotVisible",
                "Dimensions": [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["Queue", "QueueName"]}}],
                "Statistic": "Maximum",
                "Period": 60,
                "EvaluationPeriods": 5,
                "Threshold": inflight,
                "ComparisonOperator": "GreaterThanThreshold",
                "TreatMissingData": "notBreaching",
            },
            means="Close to SQS's quota of messages in flight per queue "
            f"({limits.MAX_INFLIGHT_STANDARD:,} standard, {limits.MAX_INFLIGHT_FIFO:,} FIFO). Past it a "
            "long poll returns nothing, silently: the queue stops being consumed.",
            look="Who holds the messages: the fleet's prefetch (worker_prefetched_messages) and running "
            "jobs, long visibility timeouts of retries (RetryLater), other consumers of the queue.",
            do="Lower WORKER_PREFETCH or the retry delays, or split the traffic across queues; SQS raises "
            "the quota for standard queues on request.",
            why="SQS's quota, from the engine's limits.py; FIFO queues have the smaller one.",
        ),
        Alert(
            name="WorkerConcurrencyAtFloor",
            severity="warning",
            title=f"{b.queue}: the adaptive concurrency limit stays at its floor.",
            summary="{{ $labels.queue }}: adaptive limit at its floor of {{ $value }} on {{ $labels.instance }}",
            expr=(
                f"worker_concurrency_limit{{{job}}} <= on (instance, queue) worker_concurrency_floor{{{job}}} "
                f"and on (instance, queue) (worker_concurrency_floor{{{job}}} < on (instance, queue) "
                f"worker_concurrency{{{job}}})"
            ),
            wait="30m",
            stack="service",
            alarm=_math(
                [
                    _stat("limit", ns, "worker_concurrency_limit", queue, "Minimum", 300),
                    _stat("floor", ns, "worker_concurrency_floor", queue, "Maximum", 300),
                    _stat("ceiling", ns, "worker_concurrency", queue, "Maximum", 300),
                    _expression("IF(limit <= floor AND floor < ceiling, 1, 0)", "At the floor", 300),
                ],
                0,
                6,
            ),
            means="With WORKER_ADAPTIVE_CONCURRENCY the downstream's latency keeps the limit at "
            "WORKER_CONCURRENCY_FLOOR: the downstream is overloaded or slow, and the queue drains at "
            "the floor's pace.",
            look="job_duration_seconds against its usual level, the downstream's own health, timeouts and "
            "DownstreamUnavailable pauses.",
            do="Relieve the downstream (its capacity, other callers); a floor set too high keeps "
            "overloading it; a limit that should not adapt: WORKER_ADAPTIVE_CONCURRENCY=false.",
            why="Only with adaptive concurrency (worker_concurrency_floor exists then).",
        ),
    ] + _only_some(b)


def _failed_share(b: Bake, period: int) -> list[dict[str, Any]]:
    """The share of the queue's jobs that failed (retried, dead-lettered, timed out) over
    each `period` seconds, as metric math on the collector's EMF: the two job error alarms'."""
    outcomes = {f"o{i}": o for i, o in enumerate(OUTCOMES)}
    failed = "+".join(f"FILL({i}, 0)" for i, o in outcomes.items() if o in FAILED_OUTCOMES)
    every = "+".join(f"FILL({i}, 0)" for i in outcomes)
    stats = [
        _stat(i, b.slug, "jobs_processed_total", {"queue": b.queue, "outcome": o}, "Sum", period)
        for i, o in outcomes.items()
    ]
    return [*stats, _expression(f"({failed}) / ({every})", "Failed share of jobs", period)]


def _only_some(b: Bake) -> list[Alert]:
    """The alerts of some bakes alone: SQS's noisy groups on a standard queue, the release
    alarm where ECS deploys."""
    return ([] if b.fifo else [_noisy_groups(b)]) + ([_release_failing(b)] if b.ecs else [])


def _noisy_groups(b: Bake) -> Alert:
    """SQS fair queues: on a standard queue whose producers send each tenant as the
    MessageGroupId, SQS publishes how many groups it finds noisy. Only CloudWatch has the
    metric (no Prometheus rule), and it means something only with tenants: no page."""
    return Alert(
        name="SQSNoisyGroups",
        severity="info",
        title=f"{b.queue}: SQS finds noisy message groups (tenants) on this fair queue. Only with tenants "
        "(a MessageGroupId on the standard queue's messages); a CloudWatch alarm alone, not a page.",
        summary="",
        expr=None,
        wait=None,
        stack="queues",
        pages=False,
        alarm={
            "Namespace": "AWS/SQS",
            "MetricName": "ApproximateNumberOfNoisyGroups",
            "Dimensions": [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["Queue", "QueueName"]}}],
            "Statistic": "Maximum",
            "Period": 60,
            "EvaluationPeriods": 15,
            "DatapointsToAlarm": 15,
            "Threshold": 0,
            "ComparisonOperator": "GreaterThanThreshold",
            "TreatMissingData": "notBreaching",
        },
        means="The queue is a fair queue (its producers send each tenant as the MessageGroupId) and, for a "
        "quarter of an hour, SQS has found tenants whose messages take more than their share: it keeps the "
        "quiet tenants' messages moving ahead of theirs, and the noisy tenants' wait. Without tenants it "
        "stays at 0.",
        look='The dashboards\' "Noisy tenants (SQS fair queue)" and "Fair tenants" panels; the worker\'s '
        "give-back log lines, which name the tenant (`group`); worker_tenants_at_cap and "
        "worker_tenant_capped_total (whether the engine caps it already); the tenant's producer.",
        do="Throttle the tenant: WORKER_GROUP_CONCURRENCY (WORKER_QUEUE_<KEY>_GROUP_CONCURRENCY for one queue) "
        "caps how many of one tenant's jobs run at once per process (the README's \"Read on\": Several "
        "queues, priorities and tenants); ask its producer to spread its sends. Every tenant slow at once "
        "is the fleet's capacity instead (SQSOldestMessageAgeHigh).",
    )


def _release_failing(b: Bake) -> Alert:
    """ECS's deployments watch it (DeploymentConfiguration.Alarms) to roll a bad release back
    before its failures spend the messages' attempts: the job error ratio on one-minute
    periods, where WorkerJobErrorRatioHigh waits fifteen minutes to page. Between
    deployments nothing acts on it: no page, no Prometheus rule (a person rolls back on
    Kubernetes, on WorkerJobErrorRatioHigh)."""
    return Alert(
        name="WorkerReleaseFailing",
        severity="info",
        title=f"{b.queue}: more than {RELEASE_ERROR_RATIO:.0%} of jobs failed in each of {RELEASE_MINUTES} minutes. "
        "Watched by the ECS deployment, which rolls a release back on it; not a page.",
        summary="",
        expr=None,
        wait=None,
        stack="service",
        pages=False,
        alarm=_math(
            _failed_share(b, 60),
            RELEASE_ERROR_RATIO,
            RELEASE_MINUTES,
        ),
        means="During a deployment or its bake time: the new release fails its jobs, and ECS rolls it back "
        "to the task definition before it. At other times: what WorkerJobErrorRatioHigh means, sooner.",
        look="The service's deployment events (`aws ecs describe-services`: a rollback names the alarm), "
        "the new task definition's logs by outcome (`job failed`).",
        do="Fix the release and deploy again; the messages its failures retried run on the release before "
        'it (their retries outlast the rollback: WORKER_RETRY_BASE_SECONDS). "Rolling back" says more.',
        why="Two one-minute periods: a rollback begins within about four minutes of a broken release's "
        "first jobs, before a message's retries run out.",
    )
