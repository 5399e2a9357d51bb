"""Fleet tests: many replicas of the real worker against the simulator's queue, on virtual time."""

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def quiet_workers() -> Iterator[None]:
    """Hundreds of workers start and stop in a run: their logs say nothing a test reads."""
    logger = logging.getLogger("sqs_worker_engine")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)
