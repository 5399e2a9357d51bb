"""The in-memory SQS model, held to LocalStack: each SQS behaviour the model plays for the
engine's model tests, run the same way against both. LocalStack is the truth."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiobotocore.session import get_session
from botocore.exceptions import ClientError

from sqs_worker_engine.memory import MemorySQS

from ..support import REGION, Sqs

BACKENDS = ["memory", "localstack"]
Make = Callable[..., Coroutine[Any, Any, tuple[str, str | None]]]


@asynccontextmanager
async def backend(name: str, request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, Make]]:
    """(client, make(fifo=False, max_receive=None, max_size=None) -> (url, dlq url))."""
    if name == "memory":
        model = MemorySQS()
        count = 0

        async def make_memory(fifo: bool = False, max_receive: int | None = None, max_size: int | None = None):
            nonlocal count
            count += 1
            queue = f"q{count}" + (".fifo" if fifo else "")
            extra = {} if max_size is None else {"MaximumMessageSize": str(max_size)}
            if max_receive is None:
                return model.create_queue(queue, **extra), None
            url = model.create_queue_with_dlq(queue, max_receive, **extra)
            dlq = next(q.url for q in model.queues.values() if q.url != url and q.name.startswith(f"q{count}"))
            return url, dlq

        yield model, make_memory
        await model.settle()
        return
    sqs: Sqs = request.getfixturevalue("sqs")

    async def make_real(fifo: bool = False, max_receive: int | None = None, max_size: int | None = None):
        queue = sqs.create(fifo=fifo, visibility=30, max_receive=max_receive)
        if max_size is not None:
            sqs.client.set_queue_attributes(QueueUrl=queue.url, Attributes={"MaximumMessageSize": str(max_size)})
        return queue.url, queue.dlq_url

    async with get_session().create_client("sqs", region_name=REGION, endpoint_url=sqs.endpoint) as client:
        yield client, make_real


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


async def receive(client: Any, url: str, visibility: int = 30, wait: int = 0, most: int = 1) -> list[dict[str, Any]]:
    resp = await client.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=most,
        WaitTimeSeconds=wait,
        VisibilityTimeout=visibility,
        MessageSystemAttributeNames=["All"],
    )
    return list(resp.get("Messages", []))


async def send(client: Any, url: str, body: str, group: str | None = None) -> None:
    extra = {} if group is None else {"MessageGroupId": group, "MessageDeduplicationId": body}
    await client.send_message(QueueUrl=url, MessageBody=body, **extra)


async def give_back(client: Any, url: str, message: dict[str, Any], seconds: int = 0) -> dict[str, Any]:
    entry = {"Id": "0", "ReceiptHandle": message["ReceiptHandle"], "VisibilityTimeout": seconds}
    return dict(await client.change_message_visibility_batch(QueueUrl=url, Entries=[entry]))


def count(message: dict[str, Any]) -> int:
    return int(message["Attributes"]["ApproximateReceiveCount"])


@pytest.mark.parametrize("name", BACKENDS)
def test_every_receive_raises_the_receive_count_also_after_a_give_back(
    name: str, request: pytest.FixtureRequest
) -> None:
    async def scenario() -> None:
        async with backend(name, request) as (client, make):
            url, _ = await make()
            await send(client, url, "m")
            (first,) = await receive(client, url)
            await give_back(client, url, first)
            (second,) = await receive(client, url)
            assert (count(first), count(second)) == (1, 2)
            assert first["ReceiptHandle"] != second["ReceiptHandle"]

    run(scenario())


@pytest.mark.parametrize("name", BACKENDS)
def test_an_old_receipt_handle_still_deletes_the_message(name: str, request: pytest.FixtureRequest) -> None:
    async def scenario() -> None:
        async with backend(name, request) as (client, make):
            url, _ = await make()
            await send(client, url, "m")
            (first,) = await receive(client, url, visibility=1)
            # Another consumer has it once its visibility runs out. A long poll waits for that:
            # LocalStack makes expired messages visible again on a once-a-second sweep, later
            # still on a busy machine, so a fixed sleep would race it.
            (second,) = await receive(client, url, wait=10)
            assert count(second) == 2
            resp = await client.delete_message_batch(
                QueueUrl=url, Entries=[{"Id": "0", "ReceiptHandle": first["ReceiptHandle"]}]
            )
            assert [e["Id"] for e in resp.get("Successful", [])] == ["0"]
            again = await give_back(client, url, second)  # the message is gone: its handles fail
            assert again.get("Successful", []) == [] and len(again["Failed"]) == 1

    run(scenario())


@pytest.mark.parametrize("name", BACKENDS)
def test_a_fifo_group_with_a_message_in_flight_gives_out_nothing(name: str, request: pytest.FixtureRequest) -> None:
    async def scenario() -> None:
        async with backend(name, request) as (client, make):
            url, _ = await make(fifo=True)
            for body in ("a", "b"):
                await send(client, url, body, group="g")
            await send(client, url, "x", group="other")
            (head,) = await receive(client, url)
            assert head["Body"] == "a"
            rest = await receive(client, url, most=10)
            assert [m["Body"] for m in rest] == ["x"], "b waits while a is in flight"
            await give_back(client, url, head, seconds=60)  # a retry delay keeps the group locked
            assert await receive(client, url, most=10) == []

    run(scenario())


@pytest.mark.parametrize("name", BACKENDS)
def test_the_receive_after_max_receive_count_moves_the_message_to_the_dlq(
    name: str, request: pytest.FixtureRequest
) -> None:
    async def scenario() -> None:
        async with backend(name, request) as (client, make):
            url, dlq = await make(max_receive=2)
            await send(client, url, "m")
            for _ in range(2):
                (message,) = await receive(client, url)
                await give_back(client, url, message)
            assert await receive(client, url) == []
            assert [m["Body"] for m in await receive(client, dlq or "", most=10)] == ["m"]

    run(scenario())


@pytest.mark.parametrize("name", BACKENDS)
def test_a_body_over_the_queues_maximum_size_is_refused(name: str, request: pytest.FixtureRequest) -> None:
    # LocalStack 4.14 counts the body only; SQS (and the model) also count the attributes.
    async def scenario() -> None:
        async with backend(name, request) as (client, make):
            url, _ = await make(max_size=1024)
            await send(client, url, "x" * 1000)
            with pytest.raises(ClientError) as refused:
                await send(client, url, "x" * 1100)
            assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"

    run(scenario())


@pytest.mark.parametrize("name", BACKENDS)
def test_an_abandoned_long_poll_still_takes_a_message(name: str, request: pytest.FixtureRequest) -> None:
    async def scenario() -> None:
        async with backend(name, request) as (client, make):
            url, _ = await make()
            poll = asyncio.ensure_future(receive(client, url, wait=6))
            await asyncio.sleep(2.0)  # room for the request to reach SQS on a busy machine
            poll.cancel()  # the caller gives up; SQS does not know
            await asyncio.gather(poll, return_exceptions=True)
            await send(client, url, json.dumps({"n": 1}))
            await asyncio.sleep(1.0)
            assert await receive(client, url) == [], "the abandoned poll took it and hides it"

    run(scenario())
