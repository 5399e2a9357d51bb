"""Whether SQS answers, per kind of call (reach.py): what holds the starts, what ends an
outage, how the lease keeper asks again, and what readiness says of it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sqs_worker_engine.base.telemetry.health import Health
from sqs_worker_engine.doubles import vtime
from sqs_worker_engine.doubles.memory import MemorySQS
from sqs_worker_engine.runtime.admission.admission import Admission
from sqs_worker_engine.runtime.protections.reach import PROBE_HANDLE, Kind, Reach, starts_held
from sqs_worker_engine.runtime.settling.delivery import LeaseBook
from sqs_worker_engine.runtime.settling.lease import LeaseKeeper


@pytest.mark.parametrize(
    ("down", "held"),
    [
        (set(), False),
        ({"receive"}, False),  # a poller retries its own receives
        ({"visibility"}, False),  # a message received now has its whole lease ahead
        ({"delete"}, True),  # a job whose message cannot be deleted runs for nothing
        ({"receive", "visibility", "delete"}, True),
    ],
)
def test_only_failing_deletes_hold_the_starts(down: set[Kind], held: bool) -> None:
    assert starts_held(down) is held, f"{sorted(down)} down"


@pytest.mark.parametrize(
    ("answers", "down"),
    [
        ([("delete", False)], {"delete"}),
        ([("delete", False), ("receive", True), ("visibility", True)], {"delete"}),  # other kinds end nothing
        ([("delete", False), ("delete", True)], set()),
        ([("visibility", False), ("delete", False), ("visibility", True)], {"delete"}),
        ([("receive", False), ("delete", True)], {"receive"}),
    ],
)
def test_only_an_answered_call_of_its_own_kind_ends_an_outage(
    answers: list[tuple[Kind, bool]], down: set[Kind]
) -> None:
    reach = Reach()
    for kind, ok in answers:
        reach.answered(kind, ok)
    assert reach.down == down, f"after {answers}"


def test_admission_receives_and_starts_nothing_while_deletes_fail_whatever_else_answers() -> None:
    async def play() -> None:
        admission = Admission(2, 0)
        assert admission.receivable(10, 0.0) == 2
        admission.sqs_answered("delete", False)
        for kind in ("receive", "visibility"):
            admission.sqs_answered(kind, True)
            assert admission.receivable(10, 0.0) == 0, f"a {kind} answered ended the delete outage"
            assert not admission.sqs_ok
        admission.sqs_answered("delete", True)
        assert admission.receivable(10, 0.0) == 2 and admission.sqs_ok
        admission.sqs_answered("visibility", False)
        assert admission.receivable(10, 0.0) == 2, "failing extensions hold no receive back"
        admission.stop()

    asyncio.run(play())


def test_readiness_needs_every_queue_to_have_sqs_answering_every_kind_of_call() -> None:
    health = Health(60, None)
    assert health.sqs_ok is None
    health.sqs_result(True)  # the queues described
    assert health.sqs_ok is True
    health.sqs_result(True, "a")
    health.sqs_result(False, "b")  # b's deletes refused
    health.sqs_result(True)  # a backlog sample answered: b still cannot delete
    assert health.sqs_ok is False
    health.sqs_result(True, "b")
    assert health.sqs_ok is True


def test_the_keeper_asks_a_kind_that_fails_again_with_a_call_naming_no_message_until_sqs_answers() -> None:
    """Nothing held: no lease to extend early, no delete to retry. Each kind that fails is
    asked again with a call naming no message, backing off, until SQS answers one; a kind
    that answers is not asked."""
    reach = Reach()
    sent: list[tuple[str, list[dict[str, Any]]]] = []

    def heard(kind: Kind, ok: bool) -> None:
        reach.answered(kind, ok)

    async def play() -> None:
        sqs = MemorySQS()
        url = sqs.create_queue("q")
        delete, change = sqs.delete_message_batch, sqs.change_message_visibility_batch

        async def noted_delete(**params: Any) -> Any:
            sent.append(("DeleteMessageBatch", params["Entries"]))
            return await delete(**params)

        async def noted_change(**params: Any) -> Any:
            sent.append(("ChangeMessageVisibilityBatch", params["Entries"]))
            return await change(**params)

        sqs.delete_message_batch = noted_delete  # type: ignore[method-assign]
        sqs.change_message_visibility_batch = noted_change  # type: ignore[method-assign]
        for operation in ("DeleteMessageBatch", "ChangeMessageVisibilityBatch"):
            sqs.fail(operation, "AccessDenied")
        keeper = LeaseKeeper(LeaseBook("q", 30, 0.5), sqs, url, heard, reach.answers)
        reach.answered("delete", False)
        reach.answered("visibility", False)
        task = asyncio.ensure_future(keeper.run())
        await asyncio.sleep(6)
        assert reach.down == {"delete", "visibility"}
        sqs.heal()
        await asyncio.sleep(6)
        asked = len(sent)
        await asyncio.sleep(6)
        assert len(sent) == asked, "a kind that answers is asked again"
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    vtime.run(play())  # virtual time: 18 s in milliseconds
    assert reach.down == set(), "the kinds answered again"
    deletes = [entries for operation, entries in sent if operation == "DeleteMessageBatch"]
    assert 3 <= len(deletes) <= 12, f"{len(deletes)} delete probes in 6 to 12 s, 0.5 to 4 s apart"
    assert all(entries == [{"Id": "probe", "ReceiptHandle": PROBE_HANDLE}] for entries in deletes), deletes
    assert any(operation == "ChangeMessageVisibilityBatch" for operation, _ in sent)


def test_the_model_answers_a_call_naming_no_message_with_its_entry_failed_and_no_misuse() -> None:
    async def play() -> None:
        sqs = MemorySQS()
        url = sqs.create_queue("q")
        entry = {"Id": "probe", "ReceiptHandle": PROBE_HANDLE}
        deleted = await sqs.delete_message_batch(QueueUrl=url, Entries=[entry])
        changed = await sqs.change_message_visibility_batch(QueueUrl=url, Entries=[{**entry, "VisibilityTimeout": 0}])
        for answer in (deleted, changed):
            assert [f["Code"] for f in answer["Failed"]] == ["ReceiptHandleIsInvalid"], answer
        assert sqs.misuses == []

    asyncio.run(play())
