"""Facts about SQS and the platforms, and the rules derived from them: stated once, here.

The engine enforces them at run time; the template's hooks, its Jinja templates (through
`local_extensions.py`) and its tests load this very file, so a number or a naming rule
cannot drift between what is generated and what runs. Standard library only, on purpose:
the hooks load it before any dependency is installed.
"""

from __future__ import annotations

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
# Handlers in flight across a whole fleet that the scaling caps are sized against by default
# (replicas x concurrency stays within it): a downstream's capacity, not the queue's.
FLEET_CONCURRENCY_BUDGET = 80


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
