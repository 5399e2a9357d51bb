"""Fixtures. Integration tests talk to a real LocalStack: one already reachable through
AWS_ENDPOINT_URL, else one started for the session (Docker, or LocalStack's runtime on the
host), see `sqs_worker_engine/doubles/emulators.py`. Every test makes its own queues, so nothing leaks between them.

The tests of raw SQS behaviour the engine relies on also run on moto's server: parametrize
them with `@pytest.mark.parametrize("emulator", EMULATORS)` and take `sqs` or `endpoint`
(both follow `emulator`; LocalStack when a test does not name one). moto's server is started
once per test process, on a free port, the first time a test asks for it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sqs_worker_engine.doubles import emulators

from .support import Sqs

# LocalStack accepts any credentials; never let a test pick up real ones.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
# The SDK is installed for the tracing tests; worker processes of the other tests export
# nothing (test_tracing.py's OTLP test gives its worker an endpoint of its own).
os.environ.setdefault("OTEL_TRACES_EXPORTER", "none")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if f"{os.sep}integration{os.sep}" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def localstack_endpoint() -> Iterator[str]:
    ls = emulators.ensure(emulator=emulators.LOCALSTACK)
    yield ls.endpoint
    ls.stop()


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    moto = emulators.ensure(emulator=emulators.MOTO)
    yield moto.endpoint
    moto.stop()


@pytest.fixture
def emulator() -> str:
    """Which emulator a test talks to: LocalStack unless it is parametrized over EMULATORS."""
    return emulators.LOCALSTACK


@pytest.fixture
def endpoint(emulator: str, request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{emulator}_endpoint"))


@pytest.fixture
def sqs(endpoint: str) -> Iterator[Sqs]:
    client = Sqs(endpoint)
    yield client
    client.cleanup()


@pytest.fixture
def health_file(tmp_path: Path) -> str:
    return str(tmp_path / "worker.progress")
