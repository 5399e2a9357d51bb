"""sqs-worker-engine: an asyncio SQS worker that leases, heartbeats, settles and drains.

A service registers its handlers on a `Router` and runs `entry.main(ServiceDefaults(...))`;
see the README for the whole public API.

The names below are imported on first use (PEP 562), so that `sqs_worker_engine.entry`
can catch a stop signal before the heavy dependencies load.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base.errors import DownstreamUnavailable, JobCancelled, NonRetryableError, PayloadError, RetryLater
    from .base.telemetry.metrics import set_db_pool_in_use
    from .handlers.job import Job
    from .handlers.router import Router
    from .process.settings import ConfigError, ServiceDefaults, WorkerConfig, load_settings
    from .process.worker import Worker, WorkerState

_EXPORTS = {
    "ConfigError": "process.settings",
    "DownstreamUnavailable": "base.errors",
    "Job": "handlers.job",
    "JobCancelled": "base.errors",
    "NonRetryableError": "base.errors",
    "PayloadError": "base.errors",
    "RetryLater": "base.errors",
    "Router": "handlers.router",
    "ServiceDefaults": "process.settings",
    "Worker": "process.worker",
    "WorkerConfig": "process.settings",
    "WorkerState": "process.worker",
    "load_settings": "process.settings",
    "set_db_pool_in_use": "base.telemetry.metrics",
}
__all__ = [
    "ConfigError",
    "DownstreamUnavailable",
    "Job",
    "JobCancelled",
    "NonRetryableError",
    "PayloadError",
    "RetryLater",
    "Router",
    "ServiceDefaults",
    "Worker",
    "WorkerConfig",
    "WorkerState",
    "__version__",
    "load_settings",
    "set_db_pool_in_use",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from .base._version import ENGINE_VERSION

        return ENGINE_VERSION
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sqs_worker_engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
