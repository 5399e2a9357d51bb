"""The worker engine. You normally edit `handlers.py`, not this package."""

from .errors import JobCancelled, NonRetryableError, PayloadError
from .job import Job
from .metrics import set_db_pool_in_use
from .router import Router
from .worker import Worker, WorkerState

__all__ = [
    "Job",
    "JobCancelled",
    "NonRetryableError",
    "PayloadError",
    "Router",
    "Worker",
    "WorkerState",
    "set_db_pool_in_use",
]
