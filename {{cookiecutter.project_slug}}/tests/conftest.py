"""Fixtures. The end-to-end test talks to a real SQS emulator, found or started by the
engine's `sqs_worker_engine.doubles.emulators`: the one AWS_ENDPOINT_URL names, else LocalStack on
127.0.0.1:4566 (LOCALSTACK_PORT chooses another port), else one started there for the
session (Docker, or LocalStack's own runtime from PyPI on Python 3.13); with
SQS_EMULATOR=moto, moto's server started for the session instead."""

from __future__ import annotations

import os
from collections.abc import Iterator

{% if cookiecutter.use_idempotency == "yes" -%}
import boto3
{% endif -%}
import pytest
{%- if cookiecutter.use_idempotency == "yes" %}
from moto.server import ThreadedMotoServer
{%- endif %}
from sqs_worker_engine.doubles import emulators
{%- if cookiecutter.use_idempotency == "yes" %}

from {{ cookiecutter.package_name }}.idempotency import IdempotencySettings
{%- endif %}

# The emulators accept any credentials; never let a test pick up real ones.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
{%- if cookiecutter.tracing == "yes" %}
# No collector runs beside the tests: the worker processes they start export nothing
# (tests/test_tracing.py checks the exporter is wired).
os.environ.setdefault("OTEL_TRACES_EXPORTER", "none")
{%- endif %}


@pytest.fixture(scope="session")
def localstack_endpoint() -> Iterator[str]:
    emulator = emulators.ensure()
    yield emulator.endpoint
    emulator.stop()
{%- if cookiecutter.use_idempotency == "yes" %}


_MOTO: dict[str, ThreadedMotoServer] = {}


def pytest_configure(config: pytest.Config) -> None:
    """DynamoDB for the idempotency records, from a moto server of its own (SQS is the emulator's).
    Started before the tests are imported: the handlers' persistence layer makes its
    DynamoDB client when `handlers.py` is imported."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    _MOTO["server"] = server
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    os.environ["AWS_ENDPOINT_URL_DYNAMODB"] = endpoint
    table = IdempotencySettings().table  # IDEMPOTENCY_TABLE, or the service's default
    boto3.client("dynamodb", endpoint_url=endpoint, region_name="{{ cookiecutter.aws_region }}").create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    server = _MOTO.pop("server", None)
    if server is not None:
        server.stop()


@pytest.fixture(scope="session")
def dynamodb() -> str:
    return os.environ["AWS_ENDPOINT_URL_DYNAMODB"]
{%- endif %}
