"""A generated service as its owner first makes it their own: the example handler, its model
and its tests replaced by their own, on a machine without uv. `make install` brings uv,
the service's whole `make test` (end-to-end included) stays green, and Ctrl-C under
`make run` drains the job that is running instead of cutting it off."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from conftest import bake, run, seed_mypy_cache, tool_env
from matrix import SUPPORTED
from test_bake import pytest_summary

pytestmark = pytest.mark.xdist_group("owned-service")  # one bake for the module

OWN_HANDLERS = '''\
"""Invoices: what this service does, written by its owner."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from pydantic import BaseModel, ConfigDict, Field
from sqs_worker_engine import Job, NonRetryableError, Router

router = Router()
QUEUE = "orders-worker-jobs"


class Invoice(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"invoice_id": "inv-1", "cents": 1200},
                {"invoice_id": "inv-2", "cents": 0, "pause_ms": 20},
            ]
        }
    )

    invoice_id: str = Field(pattern=r"^inv-")
    cents: int = Field(ge=0)
    pause_ms: int = Field(default=0, ge=0)


class Ledger:
    """Stands for a database pool: opened once, shared by every job."""

    def __init__(self) -> None:
        self.booked: dict[str, int] = {}


@router.lifespan
async def ledger() -> AsyncIterator[Ledger]:
    yield Ledger()


@router.handler(QUEUE, payload=Invoice)
async def book(job: Job[Invoice]) -> None:
    if job.payload.cents > 1_000_000:
        raise NonRetryableError(f"invoice {job.payload.invoice_id} is over the limit")
    await asyncio.sleep(job.payload.pause_ms / 1000)
    ledger: Ledger = job.resources
    ledger.booked[job.payload.invoice_id] = job.payload.cents
'''

OWN_TESTS = '''\
"""The owner's own handler tests."""

from __future__ import annotations

from sqs_worker_engine.testing import run_handler

from orders_worker.handlers import QUEUE, Invoice, Ledger, router


def test_an_invoice_is_booked() -> None:
    ledger = Ledger()
    result = run_handler(router, QUEUE, Invoice(invoice_id="inv-7", cents=5), resources=ledger)
    assert result.outcome == "success", result.reason
    assert ledger.booked == {"inv-7": 5}


def test_an_invoice_over_the_limit_is_dead_lettered() -> None:
    result = run_handler(router, QUEUE, {"invoice_id": "inv-8", "cents": 2_000_000})
    assert result.outcome == "dead_letter"
    assert "over the limit" in result.reason
'''


def without_uv(env: dict[str, str]) -> dict[str, str]:
    """The environment with no uv on PATH: a machine where it was never installed."""
    dirs = env["PATH"].split(os.pathsep)
    kept = [d for d in dirs if not (Path(d) / "uv").exists()]
    assert shutil.which("uv", path=os.pathsep.join(kept)) is None
    assert shutil.which("python3", path=os.pathsep.join(kept)), "python3 is all `make install` needs"
    return {**env, "PATH": os.pathsep.join(kept)}


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 120) -> None:
    """The timeout only bounds a broken run (a busy machine is slow, never wrong)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def owned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A default bake made the owner's own, installed on a machine without uv (so with no
    uv.lock from the bake): `make install` brings uv into .uv/ first."""
    project = bake(tmp_path_factory.mktemp("owned"))
    package = project / "src" / "orders_worker"
    (package / "handlers.py").write_text(OWN_HANDLERS)
    (project / "tests" / "test_handlers.py").write_text(OWN_TESTS)
    installed = subprocess.run(
        ["make", "install"],
        cwd=project,
        env=without_uv(tool_env()),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    output = installed.stdout + installed.stderr
    assert installed.returncode == 0, output[-3000:]
    assert "uv is not on PATH: installing it into .uv/" in output, output[-3000:]
    assert (project / ".uv" / "bin" / "uv").is_file() and (project / "uv.lock").is_file()
    return project


def test_replaced_handlers_keep_make_test_green_on_a_machine_without_uv(owned: Path, localstack_endpoint: str) -> None:
    env = without_uv(tool_env(AWS_ENDPOINT_URL=localstack_endpoint))
    seed_mypy_cache(owned)
    result = subprocess.run(
        ["make", "test"], cwd=owned, env=env, capture_output=True, text=True, timeout=1500, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"`make test` failed after the owner's edits:\n{output[-6000:]}"
    counts = pytest_summary(output)
    # The owner's two tests, the own-settings two, the deploy settings' three (each target of the
    # bake, and the settings file) and the end-to-end check.
    assert counts == {"passed": 8}, counts


def test_a_required_setting_of_the_owners_fails_make_test_until_a_deploy_file_sets_it(owned: Path) -> None:
    """The owner adds settings without a default to their Settings, named their own way (one
    reads the variable service.py's example reads): `make test` fails naming each and each
    target whose deploy files leave it out (before a first rollout would fail, the worker
    refusing to start); once deploy/settings.env, the file both targets read, sets them, and
    the settings test gives them a value as its docstring says, the settings tests and strict
    mypy pass. The example of a refusal in that test is the example's alone: an owner's
    field reaches neither its checks nor its types."""
    service, settings = owned / "src" / "orders_worker" / "service.py", owned / "deploy" / "settings.env"
    settings_test = owned / "tests" / "test_settings.py"
    originals = {path: path.read_text() for path in (service, settings, settings_test)}
    fields = {"partner_url": "PARTNER_API_URL", "ledger_url": "LEDGER_API_URL"}
    declared = "".join(
        f'    {name}: HttpUrl = Field(validation_alias="{variable}")\n' for name, variable in fields.items()
    )
    own = (
        originals[service]
        .replace("from pydantic_settings import", "from pydantic import Field, HttpUrl\nfrom pydantic_settings import")
        .replace("    # For example:\n", f"{declared}    # For example:\n")
    )
    assert own.count("LEDGER_API_URL") > originals[service].count("LEDGER_API_URL"), "the fields were not added"
    values = {variable: f"https://{name}.example.com/v1" for name, variable in fields.items()}
    given = originals[settings_test].replace("load_settings({}, SERVICE)", f"load_settings({values!r}, SERVICE)")
    assert given != originals[settings_test], "the settings test has no `load_settings({}, SERVICE)` to give values to"
    env = without_uv(tool_env())
    try:
        service.write_text(own)
        red = subprocess.run(
            ["make", "test-unit"], cwd=owned, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        output = red.stdout + red.stderr
        assert red.returncode != 0, f"`make test` passes with a required setting no deploy file sets:\n{output[-4000:]}"
        for target in ("ECS (deploy/ecs/service.yaml)", "Kubernetes (deploy/k8s/)"):
            for name, variable in fields.items():
                said = f"{variable} (the field {name!r}"
                assert f"on {target} the worker would refuse to start (exit 2) without " in output, output[-4000:]
                assert said in output, f"{target} and the field {name} not named:\n{output[-4000:]}"

        settings.write_text(originals[settings] + "".join(f"{k}={v}\n" for k, v in values.items()))
        settings_test.write_text(given)
        argv = [str(owned / ".venv" / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        green = subprocess.run(
            [*argv, "tests/test_deploy_settings.py", "tests/test_settings.py"],
            cwd=owned,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        output = green.stdout + green.stderr
        assert green.returncode == 0, f"set in deploy/settings.env and the settings test, yet:\n{output[-4000:]}"
        assert re.search(r"^5 passed\b", output, re.MULTILINE), output[-2000:]  # each target, the file, settings
        seed_mypy_cache(owned)
        typed = subprocess.run(
            ["make", "typecheck"], cwd=owned, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert typed.returncode == 0, (
            f"strict mypy fails on the owner's settings:\n{(typed.stdout + typed.stderr)[-4000:]}"
        )
    finally:
        for path, text in originals.items():
            path.write_text(text)


def test_ctrl_c_under_make_run_drains_the_running_job(owned: Path, localstack_endpoint: str) -> None:
    """Ctrl-C signals the terminal's whole foreground process group: make, and whatever
    runs the worker. The worker must take that as one request to drain."""
    sqs: Any = boto3.client("sqs", endpoint_url=localstack_endpoint, region_name="us-east-1")
    name = f"ctrl-c-{uuid.uuid4().hex[:12]}"
    url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "60"})["QueueUrl"]
    try:
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"invoice_id": "inv-slow", "cents": 1, "pause_ms": 4000}))
        env = without_uv(tool_env(AWS_ENDPOINT_URL=localstack_endpoint))
        env.update(
            {
                "WORKER_QUEUE_ORDERS_WORKER_JOBS_URL": url,
                "WORKER_METRICS_PORT": "0",
                "WORKER_WAIT_TIME_SECONDS": "2",
                "WORKER_HEALTH_FILE": str(owned / "progress"),
            }
        )
        log = owned / "run.log"
        with log.open("wb") as out:
            # A session of its own: its process group is what a terminal's Ctrl-C reaches.
            make = subprocess.Popen(["make", "run"], cwd=owned, env=env, stdout=out, stderr=out, start_new_session=True)
        try:

            def in_flight() -> bool:
                attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
                return attrs["ApproximateNumberOfMessagesNotVisible"] == "1"

            wait_until(in_flight, "the slow invoice to be running")
            os.killpg(make.pid, signal.SIGINT)
            make.wait(120)
        finally:
            if make.poll() is None:
                os.killpg(make.pid, signal.SIGKILL)
        text = log.read_text()
        assert "without draining" not in text, text[-3000:]
        assert "worker stopped" in text, text[-3000:]
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        left = (attrs["ApproximateNumberOfMessages"], attrs["ApproximateNumberOfMessagesNotVisible"])
        assert left == ("0", "0"), f"the running invoice was cut off, not finished and deleted: {left}\n{text[-3000:]}"
    finally:
        sqs.delete_queue(QueueUrl=url)


def test_replacing_the_handler_leaves_every_other_generated_test_and_the_deploy_check_working(
    tmp_path: Path, localstack_endpoint: str
) -> None:
    """The README's promise for every answer set: replace `Task` and `handle_task`, rewrite
    tests/test_handlers.py, and the rest needs no change. With idempotency on, the generated
    tests/test_idempotency.py once imported the example handler and its side effect, so
    `make test` failed (mypy, then pytest) as soon as the owner replaced them; and the deploy
    docs' check step sent the example's body, which the owner's model refuses."""
    answers = SUPPORTED["fifo-ecs-idempotency"].answers
    project = bake(tmp_path, **answers)
    package = "billing_events"
    queue = answers["queue_name"]
    own = OWN_HANDLERS.replace('QUEUE = "orders-worker-jobs"', f"QUEUE = {queue!r}")
    (project / "src" / package / "handlers.py").write_text(own)
    (project / "tests" / "test_handlers.py").write_text(OWN_TESTS.replace("orders_worker", package))

    # The generated tests beside the owner's, on the suite's interpreter (no environment of the
    # bake's own: test_bake.py builds those); an engine module the engine deprecates fails too.
    tests = ["tests/test_handlers.py", "tests/test_idempotency.py"]
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-W",
        "error:sqs_worker_engine:DeprecationWarning",
    ]
    result = run([*argv, *tests], project, timeout=300, PYTHONPATH=str(project / "src"))
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"a generated test breaks once the example handler is replaced:\n{output[-4000:]}"
    assert "3 passed" in output, output[-2000:]

    # deploy/README.md's check step, run against the emulator as the owner runs it in AWS.
    commands = [line.strip() for line in (project / "deploy" / "README.md").read_text().splitlines()]
    (check,) = [c for c in commands if re.fullmatch(rf"uv run python -m {package} send\b.*", c)]
    assert "--group" in check, f"a FIFO queue needs a MessageGroupId: {check}"
    env = {
        "AWS_ENDPOINT_URL": localstack_endpoint,
        "AWS_ACCESS_KEY_ID": str(secrets.randbelow(9 * 10**11) + 10**11),  # an account of its own
        "AWS_SECRET_ACCESS_KEY": "test",
        "PYTHONPATH": str(project / "src"),
    }
    made = run([sys.executable, "-m", package, "bootstrap"], project, timeout=120, **env)
    assert made.returncode == 0, made.stdout + made.stderr
    sent = run([sys.executable, *check.split()[3:]], project, timeout=120, **env)
    assert sent.returncode == 0, f"`{check}` failed:\n{sent.stdout}{sent.stderr}"
    sqs: Any = boto3.client(
        "sqs",
        endpoint_url=localstack_endpoint,
        region_name=answers.get("aws_region", "us-east-1"),
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key="test",
    )
    url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=2)["Messages"]
    bodies = [json.loads(m["Body"]) for m in got]
    assert bodies and all(b["invoice_id"].startswith("inv-") for b in bodies), f"not the owner's examples: {bodies}"
