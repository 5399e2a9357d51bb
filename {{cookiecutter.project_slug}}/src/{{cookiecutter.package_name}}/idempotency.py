"""Opt-in: do a side effect at most once per key, even when SQS delivers a message twice.

SQS is at-least-once: a SIGKILL, a lost lease or a standard queue's occasional duplicate
delivery runs a handler again. Wrap the part that must not repeat (charging a card,
sending an email) with `@once(key=...)`; Powertools' idempotency utility records each key
and its result in DynamoDB (IDEMPOTENCY_TABLE, partition key `id`, TTL attribute
`expiration`), and a repeat returns the recorded result instead of running again.

The wrapped function is a plain function taking the payload as `task=`: call it from an
async handler with `await asyncio.to_thread(fn, task=payload)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from botocore.config import Config
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqs_worker_engine import load_settings

from .service import SERVICE

F = TypeVar("F", bound=Callable[..., Any])


class IdempotencySettings(BaseSettings):
    """IDEMPOTENCY_TABLE and IDEMPOTENCY_TTL_SECONDS, validated like the engine's settings."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    table: str = Field(
        default="{{ cookiecutter.project_slug }}-idempotency",
        min_length=3,
        max_length=255,
        pattern=r"^[A-Za-z0-9_.-]+$",  # DynamoDB's table names
        validation_alias="IDEMPOTENCY_TABLE",
    )
    ttl_seconds: int = Field(default=86_400, ge=60, le=30 * 86_400, validation_alias="IDEMPOTENCY_TTL_SECONDS")


_worker = load_settings(service=SERVICE).settings
_settings = IdempotencySettings()


class _JobDeadline:
    """Powertools lets an in-progress record lapse when the Lambda's remaining time runs out.
    A worker's equivalent is the job timeout: a worker killed mid-call then blocks the
    retry only until the job timeout has passed, not for the whole record TTL."""

    def __init__(self, millis: int) -> None:
        self.millis = millis

    def get_remaining_time_in_millis(self) -> int:
        return self.millis


def once(key: str) -> Callable[[F], F]:
    """`key` is a JMESPath into the payload, e.g. "task_id" or "[order_id, line]"."""
    config = IdempotencyConfig(
        event_key_jmespath=key,
        raise_on_no_idempotency_key=True,
        expires_after_seconds=_settings.ttl_seconds,
    )
    config.register_lambda_context(_JobDeadline(_worker.job_timeout_ms))  # type: ignore[arg-type]
    # One persistence layer per function: Powertools configures a layer once, with the
    # first function's key, and would apply it to every other function sharing it.
    # Same region as the queues unless AWS_REGION says otherwise; AWS_ENDPOINT_URL_DYNAMODB
    # points it elsewhere (a local DynamoDB in tests).
    persistence = DynamoDBPersistenceLayer(
        table_name=_settings.table, boto_config=Config(region_name=_worker.aws_region)
    )

    def wrap(fn: F) -> F:
        decorate = idempotent_function(data_keyword_argument="task", persistence_store=persistence, config=config)
        return decorate(fn)  # type: ignore[no-any-return]

    return wrap
