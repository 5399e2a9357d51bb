"""Log lines for a person at a terminal (LOG_FORMAT=text, what `make dev` sets) carry what the
JSON lines carry; the start and stop lines' configuration is what differs from the engine's
defaults, not every setting there is."""

from __future__ import annotations

import json
import logging

import pytest

from sqs_worker_engine.base.telemetry import logs
from sqs_worker_engine.process.settings import ConfigError, ServiceDefaults, load_settings

# A generated service's defaults (its service.py): what the default bake's start line carried.
SERVICE = ServiceDefaults(
    name="orders-worker",
    version="0.1.0",
    command="python -m orders_worker",
    environ={
        "WORKER_QUEUES": "orders-worker-jobs",
        "WORKER_HANDLERS": "orders_worker.handlers:router",
        "WORKER_CONCURRENCY": "8",
        "WORKER_VISIBILITY_TIMEOUT_SECONDS": "30",
        "WORKER_JOB_TIMEOUT_MS": "60000",
        "WORKER_SHUTDOWN_TIMEOUT_MS": "90000",
        "WORKER_MAX_RECEIVE_COUNT": "5",
        "WORKER_METRICS_PORT": "9102",
        "AWS_REGION": "us-east-1",
    },
)


@pytest.fixture
def lines(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Configure the logs, and read back what they printed."""

    def configured(log_format: logs.LogFormat) -> logging.Logger:
        logs.configure("orders-worker", "INFO", log_format)
        # Another test of this process may have quietened the engine's loggers: these lines count.
        for name in ("sqs_worker_engine", "sqs_worker_engine.worker"):
            logger = logging.getLogger(name)
            monkeypatch.setattr(logger, "level", logger.level)  # put back after the test
            logger.setLevel(logging.NOTSET)  # (setLevel also clears the loggers' cached levels)
        return logging.getLogger("sqs_worker_engine.worker")

    yield configured, lambda: capsys.readouterr().out.splitlines()
    logging.getLogger().handlers.clear()


def test_text_lines_carry_the_message_the_job_and_the_extras(lines) -> None:
    configured, printed = lines
    log = configured("text")
    log.info("worker started", extra={"version": "0.1.0", "config": {"queues": [{"name": "q"}]}})
    logs.bind_job(job_id="m-1", queue="q", receive_count=2)
    logs.get_logger().info("task done", extra={"task_id": "t 1"})
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("failed")
    started, done, failed, *trace = printed()
    assert started.split(" ", 1)[1] == 'INFO    worker started  version=0.1.0 config={"queues":[{"name":"q"}]}', started
    assert done.endswith('INFO    task done  job_id=m-1 queue=q receive_count=2 task_id="t 1"'), done
    assert failed.endswith("ERROR   failed  job_id=m-1 queue=q receive_count=2"), failed
    assert trace[0] == "Traceback (most recent call last):" and trace[-1] == "RuntimeError: boom", trace


def test_json_stays_the_default(lines) -> None:
    configured, printed = lines
    configured("json").info("worker started", extra={"version": "0.1.0"})
    (line,) = printed()
    assert json.loads(line)["message"] == "worker started"
    assert load_settings({}, SERVICE).settings.log_format == "json"
    assert load_settings({"LOG_FORMAT": "text"}, SERVICE).settings.log_format == "text"


def test_an_unknown_log_format_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"LOG_FORMAT: .*'json' or 'text'.*\(got 'yaml'\)"):
        load_settings({"LOG_FORMAT": "yaml"}, SERVICE)


def test_the_start_lines_configuration_is_what_differs_from_the_engines_defaults() -> None:
    config = load_settings(
        {"DATABASE_URL": "postgresql://app:hunter2@db/orders", "WORKER_QUEUE_ORDERS_WORKER_JOBS_CONCURRENCY": "3"},
        SERVICE,
    )
    summary = config.summary()
    assert summary == {
        "handlers": "orders_worker.handlers:router",
        "database_url": "postgresql://app:***@db/orders",
        "queues": [{"name": "orders-worker-jobs", "concurrency": 3}],
    }
    full, compact = len(json.dumps(config.describe())), len(json.dumps(summary))
    assert compact * 5 < full, f"{compact} bytes of {full}"
