"""Prometheus metrics. The first five names are the worker-runtime conventions; the rest
are what an SQS operator needs to tell a slow handler from a slow broker."""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, Info

JOBS_PROCESSED = Counter(
    "jobs_processed",
    "Jobs finished, by queue and outcome (success, retry, dead_letter, timeout, lease_lost, released, dropped, deferred).",
    ["queue", "outcome"],
)
JOB_DURATION = Histogram(
    "job_duration_seconds",
    "Handler run time, by queue.",
    ["queue"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600),
)
INFLIGHT = Gauge("worker_inflight_jobs", "Handlers running now, by queue.", ["queue"])
CONCURRENCY = Gauge("worker_concurrency", "Configured handler slots, by queue.", ["queue"])
CONCURRENCY_LIMIT = Gauge(
    "worker_concurrency_limit",
    "Handler slots in use, by queue: the configured concurrency, or with WORKER_ADAPTIVE_CONCURRENCY "
    "the adaptive limit between its floor and that concurrency.",
    ["queue"],
)
CONCURRENCY_FLOOR = Gauge(
    "worker_concurrency_floor",
    "With WORKER_ADAPTIVE_CONCURRENCY, the fewest handler slots the adaptive limit keeps, by queue.",
    ["queue"],
)
OLDEST_MESSAGE = Gauge(
    "queue_oldest_message_seconds",
    "Age of the oldest message received in the last sampling window (0 when the queue is empty). "
    "CloudWatch's ApproximateAgeOfOldestMessage is the authoritative figure.",
    ["queue"],
)
QUEUE_MESSAGES = Gauge(
    "sqs_queue_messages",
    "Approximate messages in the queue by state (visible, in_flight, delayed), from GetQueueAttributes.",
    ["queue", "state"],
)
MESSAGE_AGE = Histogram(
    "sqs_message_age_at_receive_seconds",
    "Time from SentTimestamp to receive.",
    ["queue"],
    buckets=(0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 14400, 86400),
)
RECEIVE_COUNT = Histogram(
    "sqs_message_receive_count",
    "ApproximateReceiveCount at receive (1 = first delivery).",
    ["queue"],
    buckets=(1, 2, 3, 5, 10, 20, 50),
)
LEASE_EXTENSIONS = Counter("worker_lease_extensions", "Visibility extensions that SQS confirmed.", ["queue"])
LEASES_LOST = Counter(
    "worker_leases_lost", "Leases lost while a job held them (job cancelled, not settled).", ["queue"]
)
DLQ_SENDS = Counter("worker_dead_letter_sends", "Messages sent to the DLQ by the worker (non-retryable).", ["queue"])
SETTLE_FAILURES = Counter(
    "worker_settle_failures",
    "Deletes or visibility changes that could not be confirmed (the message will be redelivered).",
    ["queue", "action"],
)
SQS_CALLS = Counter(
    "sqs_api_calls",
    "SQS API calls, by operation and outcome (ok, SQS's error code, or cancelled: given up before SQS answered).",
    ["operation", "outcome"],
)
# What tells "SQS is slow" from "the handler is slow" (job_duration_seconds). ReceiveMessage
# is a long poll: up to WORKER_WAIT_TIME_SECONDS on an empty queue, hence the top buckets.
SQS_REQUEST_DURATION = Histogram(
    "sqs_request_duration_seconds",
    "SQS API request time, by operation and outcome (as sqs_api_calls_total).",
    ["operation", "outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30),
)
POLL_ERRORS = Counter("worker_poll_errors", "ReceiveMessage failures, by queue and error code.", ["queue", "code"])
PAUSED = Gauge(
    "worker_queue_paused", "1 while a queue's receiving is paused (a handler raised DownstreamUnavailable).", ["queue"]
)
PAUSES = Counter("worker_queue_pauses", "Pauses started on downstream trouble, by queue.", ["queue"])
THROTTLED = Counter(
    "worker_rate_limited_seconds", "Seconds pollers waited for the queue's rate limit, by queue.", ["queue"]
)
# Fair tenants (tenants.py), on a queue with a group cap. Per-tenant labels would make one
# series per tenant ever seen; these count groups instead, and logs name the tenant.
TENANTS_RUNNING = Gauge("worker_tenants_running", "Message groups (tenants) with a job running, by queue.", ["queue"])
TENANTS_AT_CAP = Gauge(
    "worker_tenants_at_cap", "Message groups running as many jobs as the group cap allows, by queue.", ["queue"]
)
TENANT_JOBS_PARKED = Gauge(
    "worker_tenant_jobs_parked", "Messages held until their group is below its cap, by queue.", ["queue"]
)
TENANT_CAPPED = Counter(
    "worker_tenant_capped",
    "Messages whose group was at its cap when received: parked or given back, by queue and action.",
    ["queue", "action"],
)
PREFETCHED = Gauge(
    "worker_prefetched_messages",
    "Messages received ahead of a free handler slot and waiting for one (WORKER_PREFETCH), by queue.",
    ["queue"],
)
BATCH_SIZE = Histogram(
    "worker_batch_size",
    "Jobs per call of a batch handler, by queue (see batches.py).",
    ["queue"],
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10000),
)
# Priorities on one budget (budget.py, WORKER_SHARED_CONCURRENCY).
SHARED_CONCURRENCY = Gauge(
    "worker_shared_concurrency", "Handler slots the queues of this process share (WORKER_SHARED_CONCURRENCY)."
)
SHARED_IN_USE = Gauge(
    "worker_shared_slots_in_use", "Slots of the shared budget this queue's jobs hold now, by queue.", ["queue"]
)
SHARED_GIVEN = Counter(
    "worker_shared_slots_given",
    "Slots of the shared budget given to this queue's jobs (its share: its rate over the sum's), by queue.",
    ["queue"],
)
LAST_PROGRESS = Gauge("worker_last_progress_timestamp_seconds", "Unix time the handler loop last made progress.")
WORKER_INFO = Info("worker", "Worker identity and version.")

_db_pool: Gauge | None = None
_jobs_left: Gauge | None = None


def enable_db_pool_gauge(registry: CollectorRegistry = REGISTRY) -> Gauge:
    """Register `db_pool_in_use` (only when DB_POOL_SIZE is configured)."""
    global _db_pool
    if _db_pool is None:
        _db_pool = Gauge("db_pool_in_use", "Database connections checked out by handlers.", registry=registry)
    return _db_pool


def enable_jobs_left_gauge(registry: CollectorRegistry = REGISTRY) -> Gauge:
    """Register `worker_jobs_left` (only with WORKER_MAX_JOBS: a 0 would read as "done")."""
    global _jobs_left
    if _jobs_left is None:
        _jobs_left = Gauge(
            "worker_jobs_left",
            "Jobs the worker will still start before it drains and exits (WORKER_MAX_JOBS).",
            registry=registry,
        )
    return _jobs_left


# (operation, outcome) -> its counter and histogram children: `labels()` takes a lock and
# checks its arguments on every call, twice what counting and timing a call then cost.
_SQS_CALL_SERIES: dict[tuple[str, str], tuple[Counter, Histogram]] = {}


def sqs_call(operation: str, outcome: str, seconds: float) -> None:
    """One SQS call, counted and timed (the client wrapper, sqs.ObservedSqs, calls this)."""
    series = _SQS_CALL_SERIES.get((operation, outcome))
    if series is None:
        series = _SQS_CALL_SERIES[operation, outcome] = (
            SQS_CALLS.labels(operation, outcome),
            SQS_REQUEST_DURATION.labels(operation, outcome),
        )
    series[0].inc()
    series[1].observe(seconds)


def set_db_pool_in_use(value: int) -> None:
    """Call from your pool's checkout/checkin hooks (see handlers.py). No-op without a pool."""
    if _db_pool is not None:
        _db_pool.set(value)
