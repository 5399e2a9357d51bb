"""The checks across settings, once each is read: timeouts that leave a heartbeat room and
end before the shutdown, a database pool that serves every handler, a liveness threshold
that outlasts a job, a priority with a budget to share."""

from __future__ import annotations

from collections.abc import Mapping

from ...runtime.settling.lease import heartbeat_problem
from .fields import Settings, queue_env_key
from .queues import QUEUE_OVERRIDE_PREFIX, QueueSettings


def check_priority(settings: Settings, problems: list[tuple[str, str]]) -> None:
    """A priority is of a shared budget's slots."""
    if settings.shared_concurrency is None and settings.priority is not None:
        problems.append(
            ("WORKER_PRIORITY", "chooses how a shared budget's slots are given: set WORKER_SHARED_CONCURRENCY")
        )


def check_timeouts(
    settings: Settings,
    queues: list[QueueSettings],
    overrides: Mapping[str, Mapping[str, str]],
    problems: list[tuple[str, str]],
) -> None:
    """Each queue's visibility timeout leaves the heartbeat room, and its job timeout ends
    before the shutdown timeout; the retry backoff's bounds are in order."""
    for q in queues:
        heartbeat = heartbeat_problem(q.visibility_timeout_seconds, settings.heartbeat_fraction)
        if heartbeat is not None:
            overridden = "VISIBILITY_TIMEOUT_SECONDS" in overrides[q.name]
            var = (
                f"{QUEUE_OVERRIDE_PREFIX}{queue_env_key(q.name)}_VISIBILITY_TIMEOUT_SECONDS"
                if overridden
                else "WORKER_HEARTBEAT_FRACTION"
            )
            problems.append((var, heartbeat))
        if q.job_timeout_ms >= settings.shutdown_timeout_ms:
            var = (
                f"{QUEUE_OVERRIDE_PREFIX}{queue_env_key(q.name)}_JOB_TIMEOUT_MS"
                if "JOB_TIMEOUT_MS" in overrides[q.name]
                else "WORKER_JOB_TIMEOUT_MS"
            )
            problems.append(
                (
                    var,
                    f"job timeout {q.job_timeout_ms} ms must be below WORKER_SHUTDOWN_TIMEOUT_MS "
                    f"({settings.shutdown_timeout_ms} ms), or SIGTERM cuts running jobs off",
                )
            )
    if settings.retry_max_seconds < settings.retry_base_seconds:
        problems.append(("WORKER_RETRY_MAX_SECONDS", "must be at least WORKER_RETRY_BASE_SECONDS"))


def check_capacity(settings: Settings, queues: list[QueueSettings], problems: list[tuple[str, str]]) -> None:
    """The database pool serves every handler that may run at once."""
    shared = settings.shared_concurrency
    total = sum(q.concurrency for q in queues)
    if shared is not None:
        total = min(total, shared)  # the queues never run more than the budget together
    if settings.db_pool_size is not None and total > settings.db_pool_size:
        what = "the shared budget" if shared is not None and total == shared else "sum of per-queue concurrency"
        lower = "WORKER_SHARED_CONCURRENCY" if shared is not None and total == shared else "WORKER_CONCURRENCY"
        problems.append(
            (
                "DB_POOL_SIZE",
                f"{settings.db_pool_size} connections cannot serve {total} concurrent handlers "
                f"({what}); lower {lower} or raise the pool",
            )
        )


def check_stall_threshold(settings: Settings, queues: list[QueueSettings], problems: list[tuple[str, str]]) -> None:
    if settings.stalled_after_seconds is not None:
        # Progress is marked when a long poll returns and when a job ends: the threshold
        # must outlast both, or an idle or busy worker would look stalled.
        longest = max(q.job_timeout for q in queues)
        floor = max(longest, settings.wait_time_seconds + 5)
        if settings.stalled_after_seconds <= floor:
            problems.append(
                (
                    "WORKER_STALLED_AFTER_SECONDS",
                    f"must exceed {floor:g} s (the longest job timeout, and the long-poll wait plus 5 s), "
                    "or a busy or idle worker looks stalled",
                )
            )
