"""The SQS behaviour the engine relies on, run the same way on the in-memory model, LocalStack
and moto's server (docs/engine/emulator-fidelity.md tables each test here).

LocalStack is the truth for the model. Where an emulator departs from SQS, the test asserts
what that emulator does (so a change in it is noticed) and says what SQS does instead; the
engine's own behaviour there is proven on a backend that is faithful."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import ClientError

from sqs_worker_engine.doubles.memory import MemorySQS

from ..support import EMULATORS, REGION, Sqs

BACKENDS = ["memory", *EMULATORS]
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
    sqs = Sqs(request.getfixturevalue(f"{name}_endpoint"))
    request.addfinalizer(sqs.cleanup)

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
def test_a_fifo_receive_retried_with_its_attempt_id(name: str, request: pytest.FixtureRequest) -> None:
    """SQS gives a FIFO receive retried with the same ReceiveRequestAttemptId (within 5
    minutes) the same messages and receipt handles: the engine retries a failed receive so.
    Neither emulator does: the retry takes the next messages, as a new receive would."""

    async def scenario() -> None:
        async with backend(name, request) as (client, make):
            url, _ = await make(fifo=True)
            await send(client, url, "a", group="g")
            await send(client, url, "b", group="h")
            bodies = []
            for _ in range(2):
                resp = await client.receive_message(QueueUrl=url, MaxNumberOfMessages=1, ReceiveRequestAttemptId="r-1")
                bodies.append([m["Body"] for m in resp.get("Messages", [])])
            assert bodies == ([["a"], ["a"]] if name == "memory" else [["a"], ["b"]]), bodies

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


def refused_code(error: pytest.ExceptionInfo[ClientError]) -> str:
    return str(error.value.response["Error"]["Code"])


@pytest.mark.parametrize("name", BACKENDS)
def test_a_long_poll_returns_as_soon_as_a_message_arrives(name: str, request: pytest.FixtureRequest) -> None:
    async def scenario() -> None:
        async with backend(name, request) as (client, make):
            url, _ = await make()
            loop = asyncio.get_running_loop()
            started = loop.time()
            poll = asyncio.ensure_future(receive(client, url, wait=20))
            await asyncio.sleep(0.5)  # the poll is waiting; what it returns is checked below
            await send(client, url, "wake")
            (message,) = await poll
            # The definition of a long poll, not a speed: it answers before its wait is over.
            assert message["Body"] == "wake" and loop.time() - started < 20

    run(scenario())


@pytest.mark.parametrize("name", BACKENDS)
def test_a_batched_extension_keeps_a_message_hidden_while_an_unextended_one_comes_back(
    name: str, request: pytest.FixtureRequest
) -> None:
    """What the lease keeper relies on: ChangeMessageVisibilityBatch counts from the call."""

    async def scenario() -> None:
        async with backend(name, request) as (client, make):
            url, _ = await make()
            for body in ("kept", "expired"):
                await send(client, url, body)
            held = await receive(client, url, visibility=3, most=10)
            while len(held) < 2:  # a receive may answer with fewer than are there
                held += await receive(client, url, visibility=3, most=10)
            kept = next(m for m in held if m["Body"] == "kept")
            entry = {"Id": "0", "ReceiptHandle": kept["ReceiptHandle"], "VisibilityTimeout": 60}
            extended = await client.change_message_visibility_batch(QueueUrl=url, Entries=[entry])
            assert [e["Id"] for e in extended.get("Successful", [])] == ["0"]
            again = await receive(client, url, wait=20, most=10)  # waits for the expired one
            assert [m["Body"] for m in again] == ["expired"] and count(again[0]) == 2
            assert await receive(client, url, most=10) == [], "the extended one stays hidden"

    run(scenario())


# SQS refuses a batch call of more than 10 entries. moto's server takes 11 deletes or
# visibility changes in one call: the engine's own chunking (10 a call) is what the model
# (which refuses, like SQS) holds it to in the model tests.
REFUSES_ELEVEN_ENTRIES = {"memory": True, "localstack": True, "moto": False}


@pytest.mark.parametrize("name", BACKENDS)
def test_batches_hold_at_most_ten(name: str, request: pytest.FixtureRequest) -> None:
    async def scenario() -> None:
        async with backend(name, request) as (client, make):
            url, _ = await make()
            for i in range(11):
                await send(client, url, f"m{i}")
            with pytest.raises(ClientError) as receive_refused:
                await receive(client, url, most=11)
            assert refused_code(receive_refused) == "InvalidParameterValue"
            held: list[dict[str, Any]] = []
            while len(held) < 11:
                held += await receive(client, url, most=10)
            deletes = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(held)]
            changes = [{**e, "VisibilityTimeout": 60} for e in deletes]
            calls = [
                (client.change_message_visibility_batch, changes),
                (client.delete_message_batch, deletes),
            ]
            for call, entries in calls:
                if REFUSES_ELEVEN_ENTRIES[name]:
                    with pytest.raises(ClientError) as refused:
                        await call(QueueUrl=url, Entries=entries)
                    assert refused_code(refused) == "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
                else:
                    answered = await call(QueueUrl=url, Entries=entries)
                    assert len(answered.get("Successful", [])) == 11, f"moto's server takes all 11: {answered}"

    run(scenario())


# SQS's BatchEntryIdsNotDistinct is about the entries' Ids. moto's server also gives it to a
# DeleteMessageBatch naming one receipt handle twice (under distinct Ids). The engine never
# sends one: a delivery is settled once (the lease book's one writer of delivery state).
REFUSES_ONE_HANDLE_TWICE = {"localstack": False, "moto": True}


@pytest.mark.parametrize("name", EMULATORS)
def test_one_receipt_handle_twice_in_a_delete_batch(name: str, request: pytest.FixtureRequest) -> None:
    async def scenario() -> None:
        async with backend(name, request) as (client, make):
            url, _ = await make()
            await send(client, url, "m")
            (message,) = await receive(client, url)
            entries = [{"Id": str(i), "ReceiptHandle": message["ReceiptHandle"]} for i in range(2)]
            if REFUSES_ONE_HANDLE_TWICE[name]:
                with pytest.raises(ClientError) as refused:
                    await client.delete_message_batch(QueueUrl=url, Entries=entries)
                assert refused_code(refused) == "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"
            else:
                answer = await client.delete_message_batch(QueueUrl=url, Entries=entries)
                assert sorted(e["Id"] for e in answer.get("Successful", [])) == ["0", "1"], answer

    run(scenario())


# SQS counts message attributes (names, types, values) toward the size limit. moto's server
# counts the body alone. The engine counts both itself: the producer splits batches and
# refuses by that count (producer.py), dead letters are fitted to the DLQ's limit by it
# (dlq.fit_to_size; tests/unit/test_decisions.py); the model counts both, as SQS does.
COUNTS_ATTRIBUTES_IN_SIZE = {"memory": True, "localstack": True, "moto": False}


@pytest.mark.parametrize("name", BACKENDS)
def test_message_attributes_count_toward_the_size_limit(name: str, request: pytest.FixtureRequest) -> None:
    async def scenario() -> None:
        async with backend(name, request) as (client, make):
            url, _ = await make(max_size=1024)
            attributes = {"note": {"DataType": "String", "StringValue": "y" * 100}}

            async def send_over() -> None:
                await client.send_message(QueueUrl=url, MessageBody="x" * 1000, MessageAttributes=attributes)

            if COUNTS_ATTRIBUTES_IN_SIZE[name]:
                with pytest.raises(ClientError) as refused:
                    await send_over()
                assert refused_code(refused) == "InvalidParameterValue"
            else:
                await send_over()
                assert len(await receive(client, url)) == 1, "accepted over the limit"

    run(scenario())


# SQS refuses a message with more than 10 message attributes; neither emulator does. The
# engine keeps to 10 itself: its producer refuses an 11th before sending
# (tests/unit/test_producer.py) and a dead letter keeps 10, the rest in its error context
# (test_hostile_input.py, "ten attributes").
TAKES_ELEVEN_ATTRIBUTES = {"localstack": True, "moto": True}


@pytest.mark.parametrize("name", EMULATORS)
def test_more_than_ten_message_attributes(name: str, request: pytest.FixtureRequest) -> None:
    async def scenario() -> None:
        async with backend(name, request) as (client, make):
            url, _ = await make()
            eleven = {f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)}
            if TAKES_ELEVEN_ATTRIBUTES[name]:
                await client.send_message(QueueUrl=url, MessageBody="m", MessageAttributes=eleven)
                resp = await client.receive_message(QueueUrl=url, MessageAttributeNames=["All"])
                assert len(resp["Messages"][0]["MessageAttributes"]) == 11, "taken, where SQS refuses"
            else:
                with pytest.raises(ClientError):
                    await client.send_message(QueueUrl=url, MessageBody="m", MessageAttributes=eleven)

    run(scenario())


@pytest.mark.parametrize("name", EMULATORS)
def test_system_attributes_come_back_on_receive(name: str, request: pytest.FixtureRequest) -> None:
    """AWSTraceHeader (the X-Ray parent of a job's span), the timestamps behind the age
    metrics, and a FIFO message's group and sequence number."""
    header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"

    async def scenario() -> None:
        async with backend(name, request) as (client, make):
            url, _ = await make()
            trace = {"AWSTraceHeader": {"DataType": "String", "StringValue": header}}
            await client.send_message(QueueUrl=url, MessageBody="t", MessageSystemAttributes=trace)
            (message,) = await receive(client, url)
            attributes = message["Attributes"]
            assert attributes["AWSTraceHeader"] == header
            assert int(attributes["SentTimestamp"]) <= int(attributes["ApproximateFirstReceiveTimestamp"])
            fifo, _ = await make(fifo=True)
            await send(client, fifo, "f", group="g")
            (ordered,) = await receive(client, fifo)
            assert ordered["Attributes"]["MessageGroupId"] == "g"
            assert ordered["Attributes"]["SequenceNumber"].isdigit()

    run(scenario())


# SQS refuses a visibility timeout that would keep a message hidden more than 12 hours in
# all. LocalStack 4.14 takes any; moto's server refuses from the message's send (SQS counts
# from its first receive). The lease keeper never asks past 12 hours from the receive
# (delivery.extension_seconds) and takes a refused extension as a lost lease.
REFUSES_PAST_TWELVE_HOURS = {"localstack": False, "moto": True}


@pytest.mark.parametrize("name", EMULATORS)
def test_a_visibility_past_twelve_hours(name: str, request: pytest.FixtureRequest) -> None:
    async def scenario() -> None:
        async with backend(name, request) as (client, make):
            url, _ = await make()
            await send(client, url, "m")
            (message,) = await receive(client, url)
            entry = {"Id": "0", "ReceiptHandle": message["ReceiptHandle"], "VisibilityTimeout": 43200}
            if REFUSES_PAST_TWELVE_HOURS[name]:
                with pytest.raises(ClientError) as refused:  # the whole call, not the entry
                    await client.change_message_visibility_batch(QueueUrl=url, Entries=[entry])
                assert refused_code(refused) == "InvalidParameterValue"
            else:
                answer = await client.change_message_visibility_batch(QueueUrl=url, Entries=[entry])
                assert [e["Id"] for e in answer.get("Successful", [])] == ["0"], answer

    run(scenario())


# StartMessageMoveTask (`redrive`): LocalStack runs it; moto's server 5.2 does not have it
# (HTTP 500). `redrive --copy` works on both (test_operations_dlq.py, the interrupted copy).
HAS_MOVE_TASKS = {"localstack": True, "moto": False}


@pytest.mark.parametrize("name", EMULATORS)
def test_message_move_tasks(name: str, request: pytest.FixtureRequest) -> None:
    async def scenario() -> None:
        async with backend(name, request) as (client, make):
            _, dlq = await make(max_receive=1)
            arn = (await client.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"]))["Attributes"]
            if HAS_MOVE_TASKS[name]:
                tasks = await client.list_message_move_tasks(SourceArn=arn["QueueArn"])
                assert tasks.get("Results", []) == []
            else:
                once = AioConfig(retries={"total_max_attempts": 1})  # a 500 is retried otherwise
                async with get_session().create_client(
                    "sqs", region_name=REGION, endpoint_url=client.meta.endpoint_url, config=once
                ) as plain:
                    with pytest.raises(ClientError) as missing:
                        await plain.list_message_move_tasks(SourceArn=arn["QueueArn"])
                assert missing.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500

    run(scenario())
