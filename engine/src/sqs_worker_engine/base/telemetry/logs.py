"""Logs with job context on every line: JSON (Powertools Logger) for machines, or text lines
for a person at a terminal (`LOG_FORMAT=text`, what `make dev` sets).

`bind_job()` stores the job id, queue and receive count in a context variable. Each job
runs in its own asyncio task (and sync handlers in a copy of that context), so every line
logged from inside a job carries them, whether it comes from `job.logger` or from any
`logging.getLogger(...)` in your code. Both formats carry the same keys: the text one is
the same Powertools formatter with another last step (`TextFormatter.serialize`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from typing import Any, Literal

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

LogFormat = Literal["json", "text"]
_logger: Logger | None = None
# What `configure` was last given (service, level, format): a handler process, spawned with
# Python's defaults (no handler, WARNING), configures itself the same way.
_configured: tuple[str, str, LogFormat] | None = None


class TextFormatter(LambdaPowertoolsFormatter):
    """`17:12:14.924 INFO    worker started  version=0.1.0 config={...}`: the time, the level,
    the message, then every other key as key=value (values that are not plain words as JSON),
    and a traceback on the lines below. Message content is untrusted: control characters
    (a newline that would start a forged line, a terminal's escape sequence) are shown
    escaped, as `\\n` and `\\x1b`."""

    # Said once by the line's start (time, level) or the same on every line (service), or
    # shown below it (the exception): not repeated as keys.
    LEFT_OUT = frozenset(
        {
            "level",
            "message",
            "timestamp",
            "service",
            "location",
            "taskName",
            "exception",
            "exception_name",
            "exception_notes",
            "stack_trace",
        }
    )

    def format(self, record: logging.LogRecord) -> str:
        clock = time.strftime("%H:%M:%S", time.localtime(record.created))
        return f"{clock}.{int(record.msecs):03d} {super().format(record)}"

    def serialize(self, log: Any) -> str:
        fields: dict[str, Any] = dict(log)
        keys = " ".join(f"{k}={_word(v)}" for k, v in fields.items() if k not in self.LEFT_OUT)
        message = _escape(str(fields.get("message", "")))
        line = f"{fields.get('level', ''):<7} {message}" + (f"  {keys}" if keys else "")
        exception = fields.get("exception")
        if not exception:
            return line
        # A traceback keeps its lines; nothing else in it may move the terminal.
        return line + "\n" + _escape(str(exception), keep="\n")


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escape(text: str, keep: str = "") -> str:
    return _CONTROL.sub(lambda m: m.group() if m.group() in keep else repr(m.group())[1:-1], text)


def _word(value: Any) -> str:
    if isinstance(value, str) and value and all(c.isprintable() and not c.isspace() and c not in "\"'=" for c in value):
        return value
    return json.dumps(value, default=str, separators=(",", ":"))  # escapes what is not printable


def configure(service: str, level: str, log_format: LogFormat = "json") -> Logger:
    """Route the runtime's and the application's logs through one formatter."""
    global _logger, _configured
    _configured = (service, level, log_format)
    formatter = TextFormatter(service=service) if log_format == "text" else LambdaPowertoolsFormatter(service=service)
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


def configuration() -> tuple[str, str, LogFormat] | None:
    """The last `configure` call's arguments; None before any."""
    return _configured


def get_logger() -> Logger:
    global _logger
    if _logger is None:
        _logger = Logger(service="worker")
    return _logger


def bind_job(**keys: Any) -> None:
    """Attach keys to every log line of the current job (task-local)."""
    get_logger().thread_safe_append_keys(**keys)
