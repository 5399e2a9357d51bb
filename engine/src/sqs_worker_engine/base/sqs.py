"""The SQS client, observed, and what the worker needs to know about each queue."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import botocore.useragent
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from . import clock
from .telemetry import metrics, tracing

if TYPE_CHECKING:
    from types_aiobotocore_sqs import SQSClient as SQSClient
else:
    SQSClient = Any

# Codes that mean "this receipt handle no longer names a message you hold": AWS says
# ReceiptHandleIsInvalid / MessageNotInflight, LocalStack InvalidParameterValue.
GONE_CODES = frozenset(
    {
        "ReceiptHandleIsInvalid",
        "MessageNotInflight",
        "AWS.SimpleQueueService.MessageNotInflight",
        "InvalidParameterValue",
        "InvalidParameterValueException",
        "AWS.SimpleQueueService.NonExistentQueue",
        "QueueDoesNotExist",
    }
)
NOT_FOUND_CODES = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})
CONNECT_TIMEOUT = 5.0


class SqsApi(Protocol):
    """The seam between the worker and SQS: the calls a running worker makes.

    Production passes an aiobotocore client; the engine's tests pass the in-memory model
    (`sqs_worker_engine.doubles.memory.MemorySQS`). Arguments and answers are the SQS API's own."""

    async def get_queue_url(self, *args: Any, **kwargs: Any) -> Any: ...
    async def get_queue_attributes(self, *args: Any, **kwargs: Any) -> Any: ...
    async def receive_message(self, *args: Any, **kwargs: Any) -> Any: ...
    async def delete_message_batch(self, *args: Any, **kwargs: Any) -> Any: ...
    async def change_message_visibility_batch(self, *args: Any, **kwargs: Any) -> Any: ...
    async def send_message(self, *args: Any, **kwargs: Any) -> Any: ...


class ObservedSqs:
    """Every SQS call the worker makes, through one place: counted and timed
    (`sqs_api_calls_total`, `sqs_request_duration_seconds`, by operation and outcome) and,
    with tracing, a CLIENT span for the messaging operations (tracing.client_span). The
    outcome is "ok", SQS's error code, or "cancelled" (the caller gave up first: its own
    deadline, or a long poll abandoned at shutdown).

    `leases=True`: the lease keeper's view of the same client, whose visibility changes
    extend leases rather than settle messages (no settle span for them)."""

    def __init__(self, client: SqsApi, client_id: str = "", *, leases: bool = False) -> None:
        self.client = client
        self.client_id = client_id
        self.leases = leases
        self.tracing = tracing.enabled()  # decided once: a provider is installed before the worker starts

    def for_leases(self) -> ObservedSqs:
        return ObservedSqs(self.client, self.client_id, leases=True)

    async def get_queue_url(self, **params: Any) -> Any:
        return await self._call("GetQueueUrl", self.client.get_queue_url, params)

    async def get_queue_attributes(self, **params: Any) -> Any:
        return await self._call("GetQueueAttributes", self.client.get_queue_attributes, params)

    async def receive_message(self, **params: Any) -> Any:
        return await self._call("ReceiveMessage", self.client.receive_message, params)

    async def delete_message_batch(self, **params: Any) -> Any:
        return await self._call("DeleteMessageBatch", self.client.delete_message_batch, params)

    async def change_message_visibility_batch(self, **params: Any) -> Any:
        return await self._call("ChangeMessageVisibilityBatch", self.client.change_message_visibility_batch, params)

    async def send_message(self, **params: Any) -> Any:
        return await self._call("SendMessage", self.client.send_message, params)

    async def _call(self, operation: str, method: Callable[..., Awaitable[Any]], params: dict[str, Any]) -> Any:
        traced = self.tracing and not (self.leases and operation == "ChangeMessageVisibilityBatch")
        # A receive's span is made once it has answered, and only if it brought messages or
        # failed: a long poll that brings nothing (an idle queue, one given up at shutdown)
        # would be a root trace of its own every 20 s per poller, and X-Ray bills per trace.
        deferred = operation == "ReceiveMessage"
        span = tracing.client_span(operation, params, self.client_id) if traced and not deferred else None
        started, started_ns = clock.now(), time.time_ns()
        outcome, response = "ok", None
        try:
            response = await method(**params)
            return response
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except Exception as exc:
            outcome = error_code(exc)
            raise
        finally:
            metrics.sqs_call(operation, outcome, clock.now() - started)
            if traced and deferred and (outcome not in ("ok", "cancelled") or (response or {}).get("Messages")):
                span = tracing.client_span(operation, params, self.client_id, start_time=started_ns)
            if span is not None:
                tracing.client_span_ended(span, operation, outcome, response)


def observed(client: SqsApi, client_id: str) -> SqsApi:
    """The client, observed (once: an observed client is returned as it is)."""
    return client if isinstance(client, ObservedSqs) else ObservedSqs(client, client_id)


def lease_client(client: SqsApi) -> SqsApi:
    """The lease keeper's view of a client (ObservedSqs.for_leases); any other as it is."""
    return client.for_leases() if isinstance(client, ObservedSqs) else client


_sanitize = botocore.useragent.sanitize_user_agent_string_component


@functools.lru_cache(maxsize=1024)
def _sanitized(raw_str: str, allow_hash: bool) -> str:
    # botocore's own parameter names: it passes them by keyword too (the app id's component).
    return _sanitize(raw_str, allow_hash)


def _cache_user_agent() -> None:
    """botocore builds every request's User-Agent header twice, each time cleaning each of
    its dozen components character by character: about 0.3 ms a request, a tenth of a
    no-op job's CPU at saturation. The cleaning is a pure function of a few strings that
    never change in a process (versions, platform, features used): remembered here."""
    botocore.useragent.sanitize_user_agent_string_component = _sanitized


_request_context: Callable[[], Any] | None
try:  # where botocore keeps the features a request used (newer botocore only)
    from botocore.context import get_context as _request_context
except ImportError:  # pragma: no cover - botocore before the User-Agent's feature list
    _request_context = None

USER_AGENTS_KEPT = 64  # feature sets remembered a client: a process uses a handful


def _remember_user_agent(client: Any) -> None:
    """botocore builds a request's User-Agent header twice, from a dozen components, each
    request: 4-5% of the worker's CPU at saturation, in profiles. For one client the header
    changes only with the features the request used (the `m/` component, read from
    botocore's request context), so this client's header is remembered for each set of
    them, and built by botocore itself the first time."""
    creator = getattr(client, "_user_agent_creator", None)
    if _request_context is None or creator is None:
        return
    build: Callable[[], str] = creator.to_string
    built: dict[frozenset[str], str] = {}

    def to_string() -> str:
        context = _request_context()
        features = frozenset(context.features) if context is not None else frozenset()
        header = built.get(features)
        if header is None:
            header = build()
            if len(built) < USER_AGENTS_KEPT:
                built[features] = header
        return header

    creator.to_string = to_string  # this client's creator only: botocore's class is untouched


@contextlib.asynccontextmanager
async def _remembering_user_agent(client_context: AbstractAsyncContextManager[Any]) -> AsyncIterator[Any]:
    async with client_context as client:
        _remember_user_agent(client)
        yield client


def create_client(
    region: str,
    endpoint_url: str | None,
    max_connections: int,
    read_timeout: float = 40.0,
    attempts: int = 3,
    validate: bool = True,
) -> AbstractAsyncContextManager[SQSClient]:
    """An aiobotocore SQS client; the pool is sized by the caller.

    `attempts` 1 turns the SDK's own retries off. The worker does that for the calls whose
    timing it must know: a receive the SDK sends again runs longer than the worker thinks
    (and can take a message given back at shutdown), and a lease extension or delete the
    SDK retries can reach SQS after the lease's local deadline. The worker retries those
    itself, checking the lease before each attempt.

    `validate` False skips botocore's check of each request's parameters against the
    service model: for the worker's own requests, which no input of anyone's shapes (the
    in-memory SQS checks them in the tests instead, doubles/memory.py)."""
    _cache_user_agent()
    config = AioConfig(
        max_pool_connections=max_connections,
        connect_timeout=CONNECT_TIMEOUT,
        read_timeout=read_timeout,
        retries={"mode": "standard", "total_max_attempts": attempts},
        tcp_keepalive=True,
        parameter_validation=validate,
    )
    return _remembering_user_agent(
        get_session().create_client("sqs", region_name=region, endpoint_url=endpoint_url, config=config)
    )


@dataclass(frozen=True)
class QueueInfo:
    name: str
    url: str
    arn: str
    fifo: bool
    visibility_timeout: int
    max_receive_count: int | None
    dlq_url: str | None
    dlq_max_size: int = 262_144  # the DLQ's MaximumMessageSize: body plus attributes


async def describe_queue(client: SqsApi, name: str, url: str | None = None) -> QueueInfo:
    """Resolve a queue and its DLQ (from the RedrivePolicy)."""
    if url is None:
        url = (await client.get_queue_url(QueueName=name))["QueueUrl"]
    attrs = (await client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"]))["Attributes"]
    max_receive: int | None = None
    dlq_url: str | None = None
    dlq_max_size = QueueInfo.dlq_max_size
    policy = attrs.get("RedrivePolicy")
    if policy:
        redrive = json.loads(policy)
        max_receive = int(redrive["maxReceiveCount"])
        # arn:<partition>:sqs:<region>:<account>:<name>. The DLQ lives in the queue owner's
        # account, which need not be the worker's (a queue shared through its policy).
        *_, account, dlq_name = str(redrive["deadLetterTargetArn"]).split(":")
        dlq_url = (await client.get_queue_url(QueueName=dlq_name, QueueOwnerAWSAccountId=account))["QueueUrl"]
        dlq_attrs = await client.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["MaximumMessageSize"])
        dlq_max_size = int(dlq_attrs.get("Attributes", {}).get("MaximumMessageSize", dlq_max_size))
    return QueueInfo(
        name=name,
        url=url,
        arn=attrs.get("QueueArn", ""),
        fifo=attrs.get("FifoQueue", "false") == "true",
        visibility_timeout=int(attrs.get("VisibilityTimeout", "30")),
        max_receive_count=max_receive,
        dlq_url=dlq_url,
        dlq_max_size=dlq_max_size,
    )


def error_code(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", "ClientError"))
    if isinstance(exc, BotoCoreError):
        return type(exc).__name__
    return type(exc).__name__


def entry_gone(entry: Mapping[str, Any]) -> bool:
    """A failed batch entry whose message we no longer hold (retrying cannot help)."""
    return str(entry.get("Code", "")) in GONE_CODES
