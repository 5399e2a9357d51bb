"""Facts about SQS and the platforms, and the rules derived from them: stated once, here.

The engine enforces them at run time; the template's hooks, its Jinja templates (through
`local_extensions.py`) and its tests load this very file, so a number or a naming rule
cannot drift between what is generated and what runs. Standard library only, on purpose:
the hooks load it before any dependency is installed.
"""

from __future__ import annotations

import math

# SQS (CreateQueue, ChangeMessageVisibility and ReceiveMessage API reference).
MAX_QUEUE_NAME = 80
MAX_VISIBILITY_SECONDS = 43_200  # 12 h: the cap on a visibility timeout and on a message's total lease
MAX_WAIT_SECONDS = 20  # longest long poll
MAX_RECEIVE_BATCH = 10  # messages one ReceiveMessage returns at most
RECEIVE_ATTEMPT_SECONDS = 300  # FIFO: a ReceiveRequestAttemptId may be sent again this long after its receive
MAX_MESSAGE_BYTES = 1_048_576  # one message (body and attributes), and one batch request
# The largest offloaded payload (extended client) a job reads by default: a few times what
# SQS takes inline, so a pointer cannot make a job hold more (WORKER_LARGE_PAYLOAD_MAX_BYTES).
LARGE_PAYLOAD_MAX_BYTES = 4 * MAX_MESSAGE_BYTES
MAX_RECEIVE_COUNT = 1000  # RedrivePolicy's maxReceiveCount ceiling
MAX_RETENTION_SECONDS = 14 * 24 * 3600
# Messages in flight (received, neither deleted nor visible again) a queue holds at most
# (SQS quotas). Past it a short poll answers OverLimit and a long poll nothing, silently:
# the alerts fire at INFLIGHT_ALERT_FRACTION of it.
MAX_INFLIGHT_STANDARD = 120_000
MAX_INFLIGHT_FIFO = 20_000
INFLIGHT_ALERT_FRACTION = 0.8
FIFO_SUFFIX = ".fifo"
DLQ_SUFFIX = "-dlq"

# ECS rejects a container stopTimeout above 120 s (Fargate and the EC2 agent alike).
ECS_MAX_STOP_TIMEOUT = 120
# What the platform's grace period adds to the worker's own shutdown timeout: time for the
# final deletes and releases after the drain (ECS stopTimeout, terminationGracePeriodSeconds).
GRACE_MARGIN_SECONDS = 15
# Spot capacity (Fargate Spot, EC2 Spot nodes) is reclaimed with this much warning: the task
# gets SIGTERM, so a drain within ECS_MAX_STOP_TIMEOUT fits in it.
SPOT_WARNING_SECONDS = 120
# EKS Pod Identity: the node's agent serves a pod its role's credentials here (a link-local
# address, which a NetworkPolicy cutting off 169.254.0.0/16 must let through).
EKS_POD_IDENTITY_AGENT_IP = "169.254.170.23"
EKS_POD_IDENTITY_AGENT_PORT = 80
# The oldest KEDA the Kubernetes manifests work with: TriggerAuthentication's
# `podIdentity.provider: aws` with a `roleArn` (the operator assumes the scaler role) came in 2.13.
KEDA_MIN_VERSION = "2.13"
# The retry backoff's step grows to this at most (WORKER_RETRY_MAX_SECONDS's default).
RETRY_MAX_SECONDS = 300.0
# A bad release on ECS, from its rollout's start to every task back on the release before it:
# the deployment's alarm (WorkerReleaseFailing: two one-minute datapoints, each published
# about a minute late, evaluated once a minute) fails the deployment, and ECS rolls back at
# the service's pace. Simulated on the default bake (docs/scaling.md, "Spot interruptions and
# a bad release"): the rollback began 4.6 minutes after the release did, the last task was
# back 6.8 minutes after. A message's retries must outlast it, or the release spends its
# attempts and SQS dead-letters it before the rollback lands.
RELEASE_ROLLBACK_SECONDS = 420
# The retry bases the templates choose from (WORKER_RETRY_BASE_SECONDS): the engine's
# default first, then steps an owner reads at a glance.
RETRY_BASES = (10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 300)
# Handlers in flight across a whole fleet that the scaling caps are sized against by default
# (replicas x concurrency stays within it): a downstream's capacity, not the queue's.
FLEET_CONCURRENCY_BUDGET = 80

# Prefetch: how many messages a pool holds ahead of its slots (runtime/prefetch.py says how
# and why). Stated here because what a busy replica holds is what SQS counts in flight, and
# the templates' scaling targets count it (`busy_replica_holds`).
PREFETCH_SOON_SECONDS = 1.0  # a receive's extra batch is held only if that many jobs start this soon
# The default cap at low concurrency. Short jobs need the most: at 10 ms jobs, concurrency
# 10 and a 30 ms round trip, 1,000 jobs a second start, 30 of them during each receive's
# round trip, plus a receive's 10 (the target, 40); below that the slots wait for receives.
PREFETCH_FLOOR = 50
# Above the floor, the default cap is this many times the concurrency: 10 ms jobs at
# concurrency 50 and a 25 ms round trip (SQS in-region, plus the receive itself) need
# 50 / 0.01 x 0.025 + 10 = 135 in hand, and the concurrency alone (the cap before) held
# them to about half their rate at +20 ms in the benchmark.
PREFETCH_TIMES = 3
# ... and at most this many, unless the concurrency is larger (the cap before: no more
# than it was at any concurrency). One process runs at most a few thousand short jobs a
# second: at 3,000 a second and a 30 ms round trip, 100 in hand. Messages of up to 256 KiB
# then take 50 MiB at most.
PREFETCH_CEILING = 200
# What a busy replica's prefetch is sized at for the scaling targets: SQS's round trip
# in-region (about 20 ms), and the mean job the generated targets are sized for: jobs of
# seconds, the fleet simulator's standard shapes' (a busy replica of 5 s jobs holds a
# message or two beyond its concurrency). Shorter jobs hold more, and a service of them
# sets its targets for them: 10 ms jobs, the shortest the engine's defaults are sized for,
# hold three times the concurrency beyond it (deploy/README.md, "What a round of work
# counts"; docs/scaling.md in the template's repository has why not by default).
SQS_ROUND_TRIP_SECONDS = 0.02
SCALING_JOB_SECONDS = 5.0
SHORT_JOB_SECONDS = 0.01


# The owner's secrets (the `secrets` answer; settings.ServiceDefaults.secrets): environment
# variable names in upper case, none the engine's or an SDK's own.
SECRET_NAME_PATTERN = r"^[A-Z][A-Z0-9_]{0,127}$"  # noqa: S105 - a rule for names, no secret
RESERVED_PREFIXES = ("WORKER_", "OTEL_", "AWS_")
# The engine's settings without one of those prefixes (settings.py holds this list to its own).
UNPREFIXED_SETTINGS = ("DB_POOL_SIZE", "ECS_AGENT_URI", "LOG_FORMAT", "LOG_LEVEL", "LOG_PAYLOADS")


def inflight_alert_threshold(queue: str) -> int:
    """The in-flight count at which a queue is near SQS's limit."""
    limit = MAX_INFLIGHT_FIFO if queue.endswith(FIFO_SUFFIX) else MAX_INFLIGHT_STANDARD
    return int(limit * INFLIGHT_ALERT_FRACTION)


def dlq_name(queue: str) -> str:
    """The dead-letter queue the template creates for `queue`: `<base>-dlq[.fifo]`."""
    if queue.endswith(FIFO_SUFFIX):
        return queue.removesuffix(FIFO_SUFFIX) + DLQ_SUFFIX + FIFO_SUFFIX
    return queue + DLQ_SUFFIX


def max_replicas(concurrency: int, budget: int = FLEET_CONCURRENCY_BUDGET) -> int:
    """Replica cap that keeps replicas x concurrency within the fleet budget (at least 1)."""
    return max(1, budget // concurrency)


def default_prefetch(concurrency: int) -> int:
    """The prefetch cap when WORKER_PREFETCH is unset: PREFETCH_TIMES the concurrency, at
    least PREFETCH_FLOOR, at most PREFETCH_CEILING unless the concurrency is larger. What is
    held is the measured target (`prefetch_target`), usually far less: the cap bounds memory
    and what a SIGKILL can strand beyond the running jobs."""
    return max(concurrency, PREFETCH_FLOOR, min(PREFETCH_TIMES * concurrency, PREFETCH_CEILING))


def prefetch_target(concurrency: int, cap: int, receive_seconds: float | None, job_seconds: float | None) -> int:
    """Messages to hold beyond the concurrency: those that start during one receive round
    trip when every slot is busy, plus a receive's 10 if that many start within
    PREFETCH_SOON_SECONDS, so that the next receive can ask for a whole batch while they
    still wait; 0 until both have been measured (runtime/prefetch.py)."""
    if cap <= 0 or receive_seconds is None or job_seconds is None:
        return 0
    starts_per_second = concurrency / max(job_seconds, 1e-4)
    batch = min(MAX_RECEIVE_BATCH, math.floor(starts_per_second * PREFETCH_SOON_SECONDS))
    return min(cap, math.ceil(starts_per_second * receive_seconds) + batch)


def busy_replica_holds(concurrency: int, job_seconds: float = SCALING_JOB_SECONDS, prefetch: int | None = None) -> int:
    """Messages a replica holds when its slots are all busy with jobs of `job_seconds`, as
    SQS counts them (in flight): its concurrency, plus what its prefetch keeps ahead of them
    (`prefetch_target` at SQS_ROUND_TRIP_SECONDS); `prefetch`, the cap (WORKER_PREFETCH;
    unset, `default_prefetch`). What the templates' scaling targets count as one round of
    work: 8 + 2 at concurrency 8 and 5 s jobs, 8 + 26 at 10 ms. SQS counts a message until
    its delete lands: the fleet simulator's busy replica of 10 ms jobs (the engine itself)
    showed 36 in flight on average, 8 running, 8 received ahead of them and 20 ended with
    their delete on its way."""
    cap = default_prefetch(concurrency) if prefetch is None else prefetch
    return concurrency + prefetch_target(concurrency, cap, SQS_ROUND_TRIP_SECONDS, job_seconds)


def retries_wait_at_least(base: float, attempts: int, cap: float = RETRY_MAX_SECONDS) -> float:
    """The least a message's retries wait in all before its last of `attempts` deliveries:
    the backoff's "equal jitter" keeps half of each step (base, doubling, at most `cap`),
    for each of the `attempts - 1` retries (backoff.py)."""
    return sum(min(cap, base * 2.0 ** min(k, 32)) / 2 for k in range(max(0, attempts - 1)))


def retry_base_outlasting(
    attempts: int, seconds: float = RELEASE_ROLLBACK_SECONDS, cap: float = RETRY_MAX_SECONDS
) -> int:
    """The smallest of RETRY_BASES whose retries, over `attempts` deliveries (the queue's
    maxReceiveCount), wait at least `seconds` in all however the jitter falls: 90 at 5
    attempts, the engine's 10 from 8. With too few attempts for any (3 and under: two
    retries wait 300 s at most) the largest, which comes closest; with no retry at all
    (1), the engine's default."""
    if attempts <= 1:
        return RETRY_BASES[0]
    for base in RETRY_BASES:
        if retries_wait_at_least(base, attempts, cap) >= seconds:
            return base
    return RETRY_BASES[-1]
