"""A service's defaults, the way a generated service states them (its `service.py`)."""

from sqs_worker_engine import ServiceDefaults

SERVICE = ServiceDefaults(
    name="test-service",
    version="0.0.1",
    command="python -m tests.service",
    environ={"WORKER_QUEUES": "test-queue", "WORKER_HANDLERS": "tests.integration.app:router"},
)
