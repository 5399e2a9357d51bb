"""Structured JSON logs (Powertools Logger) with job context on every line.

`bind_job()` stores the job id, queue and receive count in a context variable. Each job
runs in its own asyncio task (and sync handlers in a copy of that context), so every line
logged from inside a job carries them, whether it comes from `job.logger` or from any
`logging.getLogger(...)` in your code.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

_logger: Logger | None = None


def configure(service: str, level: str) -> Logger:
    """Route the runtime's and the application's logs through one JSON formatter."""
    global _logger
    formatter = LambdaPowertoolsFormatter(service=service)
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Chatty libraries stay at WARNING unless the worker itself is at DEBUG.
    for noisy in ("botocore", "aiobotocore", "urllib3", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if level == "DEBUG" else logging.WARNING)
    # Powertools would otherwise filter records of loggers whose name contains the service
    # name out of the root handler; we avoid duplicates by not propagating instead.
    os.environ.setdefault("POWERTOOLS_LOG_DEDUPLICATION_DISABLED", "true")
    own_handler = logging.StreamHandler(sys.stdout)
    own_handler.setFormatter(formatter)
    _logger = Logger(service=service, level=level, logger_formatter=formatter, logger_handler=own_handler)
    _logger._logger.propagate = False
    return _logger


def get_logger() -> Logger:
    global _logger
    if _logger is None:
        _logger = Logger(service="worker")
    return _logger


def bind_job(**keys: Any) -> None:
    """Attach keys to every log line of the current job (task-local)."""
    get_logger().thread_safe_append_keys(**keys)
