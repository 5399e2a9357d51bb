"""The end-to-end check services run (`sqs_worker_engine.testing.check_service`), on a
service of three queues: one with examples, one FIFO behind an EventBridge envelope, one
that declares none; and on the same service with a bug, which the check must catch."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import pytest

from sqs_worker_engine import ServiceDefaults
from sqs_worker_engine.doubles.end_to_end import PROBE_BODY, REJECTED_BODY, NoExamples
from sqs_worker_engine.handlers.router import Router
from sqs_worker_engine.ops.examples import examples_of, message_body
from sqs_worker_engine.testing import check_service, stand_in_http

from ..support import PROJECT_ROOT, REGION, running

SERVICE = ServiceDefaults(
    name="examples-service",
    version="0.0.1",
    command="python -m tests.service",
    environ={
        "WORKER_QUEUES": "orders,shipped.fifo,notes",
        "WORKER_HANDLERS": "tests.integration.examples_app:router",
        "WORKER_JOB_TIMEOUT_MS": "10000",
        "WORKER_SHUTDOWN_TIMEOUT_MS": "20000",
        "AWS_REGION": REGION,
    },
)
# `python -m tests.service` finds this package wherever pytest runs from.
ENV = {"PYTHONPATH": str(PROJECT_ROOT)}


def test_a_service_is_proven_by_the_examples_its_handlers_declare(localstack_endpoint: str, tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = check_service(SERVICE, localstack_endpoint, tmp_path, env=ENV)
    assert report.processed == {"orders": 2, "shipped.fifo": 1, "notes": 1}, report
    assert report.dead_letters["orders"] and "Invalid JSON" in report.dead_letters["orders"][0], report
    assert len(report.dead_letters["shipped.fifo"]) == 1 and report.dead_letters["notes"] == []
    assert report.without_examples == ["notes"]
    assert [str(w.message) for w in caught if w.category is NoExamples], "a handler without examples is named"
    assert "worker stopped" in (tmp_path / "worker.log").read_text()


SNS_SERVICE = ServiceDefaults(
    name="sns-examples-service",
    version="0.0.1",
    command="python -m tests.service",
    environ={
        "WORKER_QUEUES": "notices,parcels",
        "WORKER_HANDLERS": "tests.integration.sns_examples_app:router",
        "WORKER_JOB_TIMEOUT_MS": "10000",
        "WORKER_SHUTDOWN_TIMEOUT_MS": "20000",
        "AWS_REGION": REGION,
    },
)


def test_handlers_fed_through_sns_are_proven_by_their_examples_with_signatures_checked(
    localstack_endpoint: str, tmp_path: Path
) -> None:
    """`envelope="sns"` (two examples) and `"sns+eventbridge"`: each example reaches its queue
    as a signed SNS notification, and the worker, checking signatures as the service's
    settings say (the default), processes every one; only the rejected bodies are
    dead-lettered."""
    report = check_service(SNS_SERVICE, localstack_endpoint, tmp_path, env=ENV)
    assert report.processed == {"notices": 2, "parcels": 1}, report
    for queue in ("notices", "parcels"):
        [reason] = report.dead_letters[queue]
        assert "not an SNS notification" in reason, (queue, reason)
    assert report.without_examples == []


def test_a_handler_that_fails_its_examples_fails_the_check_with_the_reason(
    localstack_endpoint: str, tmp_path: Path
) -> None:
    # The same service as above: its `notes` queue declares no examples, which the test
    # above asserts is named; here it would only be the suite's one stray warning.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoExamples)
        with pytest.raises(AssertionError) as info:
            check_service(SERVICE, localstack_endpoint, tmp_path, env={**ENV, "EXAMPLES_APP_BROKEN": "1"}, timeout=60)
    assert "orders: examples dead-lettered" in str(info.value), str(info.value)[-2000:]
    assert "the ledger is read-only" in str(info.value)


PROCESS_SERVICE = ServiceDefaults(
    name="process-examples-service",
    version="0.0.1",
    command="python -m tests.service",
    environ={
        "WORKER_QUEUES": "crunch",
        "WORKER_HANDLERS": "tests.integration.process_examples_app:router",
        "WORKER_PROCESS_POOL_SIZE": "2",
        "WORKER_JOB_TIMEOUT_MS": "10000",
        "WORKER_SHUTDOWN_TIMEOUT_MS": "20000",
        "AWS_REGION": REGION,
    },
)


def test_a_failed_check_leaves_none_of_the_workers_handler_processes_running(
    localstack_endpoint: str, tmp_path: Path
) -> None:
    """A check that fails kills the worker it started, and the worker's handler processes
    with it: they were left running, their parent gone, after every failed `make test`."""
    pids = tmp_path / "pids"
    with pytest.raises(AssertionError) as info:
        check_service(
            PROCESS_SERVICE, localstack_endpoint, tmp_path, env={**ENV, "PROCESS_EXAMPLES_PIDS": str(pids)}, timeout=60
        )
    assert "cannot crunch 1" in str(info.value), str(info.value)[-2000:]
    recorded = {int(pid) for pid in pids.read_text().split()}
    assert recorded, "no handler process ran"
    deadline = time.monotonic() + 10  # SIGKILL is sent by then: this bounds only its delivery
    while alive := {pid for pid in recorded if running(pid)}:
        assert time.monotonic() < deadline, f"handler processes outlived the failed check: {sorted(alive)}"
        time.sleep(0.1)


def test_examples_are_read_from_the_models_json_schema_extra() -> None:
    from .examples_app import Order, Shipped, router

    assert examples_of(Order) == [{"order_id": "o-1", "amount": 3}, {"order_id": "o-2", "amount": 0}]
    assert examples_of(str) == [] and examples_of(None) == []
    spec = router.get("shipped.fifo")
    assert spec is not None
    body = message_body(spec, examples_of(Shipped)[0])
    assert '"detail": {"parcel": "p-9"}' in body, "wrapped as EventBridge delivers it"
    assert REJECTED_BODY != PROBE_BODY
    assert Router().get("x") is None


def test_an_example_its_own_model_refuses_is_named_before_anything_runs() -> None:
    from pydantic import BaseModel, ConfigDict

    from sqs_worker_engine import Job
    from sqs_worker_engine.doubles.end_to_end import example_problem

    router = Router()

    class Refund(BaseModel):
        model_config = ConfigDict(json_schema_extra={"examples": [{"refund_id": 7}]})

        refund_id: str

    @router.handler("refunds", payload=Refund)
    async def refund(job: Job[Refund]) -> None: ...

    spec = router.get("refunds")
    assert spec is not None
    problem = example_problem(spec, message_body(spec, examples_of(Refund)[0]))
    assert problem is not None and "refund_id" in problem, problem


PARTNER_SERVICE = ServiceDefaults(
    name="partner-service",
    version="0.0.1",
    command="python -m tests.service",
    environ={
        "WORKER_QUEUES": "partner-orders",
        "WORKER_HANDLERS": "tests.integration.partner_app:router",
        "WORKER_JOB_TIMEOUT_MS": "10000",
        "WORKER_SHUTDOWN_TIMEOUT_MS": "20000",
        "AWS_REGION": REGION,
    },
)


def test_a_handler_that_calls_an_http_api_is_proven_against_a_stand_in_given_by_its_own_setting(
    localstack_endpoint: str, tmp_path: Path
) -> None:
    """The owner's second hour: a handler whose client the lifespan opens from a required
    setting of the service's own (PARTNER_API_URL), calling an HTTP API. The end-to-end
    check had no way to stand in for the API; `stand_in_http` serves one for the block."""
    with stand_in_http({"POST /v1/orders": (201, {"id": "booked"})}) as partner:
        report = check_service(
            PARTNER_SERVICE, localstack_endpoint, tmp_path, env={**ENV, "PARTNER_API_URL": partner.url}
        )
    assert report.processed == {"partner-orders": 2}, report
    booked = {r.json()["order"] for r in partner.requests if r.path == "/v1/orders"}
    assert booked == {"o-1", "o-2"}, partner.requests
