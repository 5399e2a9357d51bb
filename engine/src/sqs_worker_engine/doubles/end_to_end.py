"""Prove a whole service against an SQS emulator, whatever its handlers: the end-to-end test a
generated service runs (`sqs_worker_engine.testing.check_service`).

The service is run the way an operator runs it, as separate processes of its own command
line: `bootstrap` creates a private copy of each of its queues (and DLQ) on the emulator,
`run` serves them (each service queue pointed at its copy with WORKER_QUEUE_<KEY>_URL), and
SIGTERM stops it. What is sent comes from the handlers' own declarations:

- **examples**: each payload model's `json_schema_extra={"examples": [...]}` (pydantic's
  standard place, also what its JSON schema shows). Every example must validate, and must
  be processed: deleted with outcome `success` (the worker's `jobs_processed_total`), never
  dead-lettered. An example that fails shows its DLQ reason and the worker's last lines.
- **a rejected body**: a body that is not JSON, which every handler with a model (or a JSON
  payload) refuses: it must reach the DLQ at once, with the reason in `x-error-message`.
- **a probe** for a handler that declares no example: the rejected body for a model, or a
  plain string for `payload=str`, shows that the queue is served (received and settled);
  a warning says that examples would prove more.
- **the drain**: the examples again, SIGTERM once the worker has them, and the worker exits
  0 leaving nothing in flight and nothing more in the DLQ.

The examples are wrapped as each handler's envelope delivers them (ops/examples.py, as
`send` wraps them). A worker checks SNS notifications' signatures unless the service turns
that off: the check then signs them as a stand-in for SNS, its certificate put in the
emulator's S3 where the worker fetches SNS's (deleted at the end); so the service runs with
its own settings. Otherwise only standard SQS calls are made, so any emulator at `endpoint`
will do. Each run uses queues of its own (deleted at the end), so runs can share one emulator.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
import warnings
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from ..base.errors import PayloadError
from ..base.limits import dlq_name
from ..base.sqs import SQSClient, create_client
from ..formats.envelopes import ControlMessage, read_payload
from ..formats.signatures import Signer
from ..handlers.router import HandlerSpec, Router
from ..ops.examples import StandIn, example_bodies, signing
from ..ops.producer import Producer, open_producer
from ..process.settings import ServiceDefaults, WorkerConfig, load_settings, queue_env_key
from ..process.worker import load_router
from .emulators import free_port

REJECTED_BODY = "this body is not JSON, so the payload model must refuse it"
PROBE_BODY = "a probe from the end-to-end check"
MAX_RECEIVE_COUNT = 2  # a failing example reaches the DLQ after two quick attempts
# Fast retries and short polls: a failing example shows up in seconds, and an idle stop is quick.
RUN_ENV = {
    "WORKER_RETRY_BASE_SECONDS": "0.2",
    "WORKER_RETRY_MAX_SECONDS": "1",
    "WORKER_WAIT_TIME_SECONDS": "2",
    "WORKER_BACKLOG_SAMPLE_SECONDS": "5",
    "WORKER_METRICS_HOST": "127.0.0.1",
}


class NoExamples(UserWarning):
    """A handler declares no examples: only a probe shows that its queue is served."""


def example_problem(spec: HandlerSpec, body: str) -> str | None:
    """Why an example's body would not reach the handler (None: it would)."""
    try:
        read_payload(spec.payload, spec.envelope, body)
    except (PayloadError, ControlMessage) as exc:
        return str(exc)
    return None


@dataclass
class QueueRun:
    """One of the service's queues and its private copy on the emulator."""

    name: str  # as the service names it (its handler's queue, the metrics' label)
    copy: str  # the copy this run made
    examples: list[str]  # message bodies
    rejects: bool  # its payload refuses a body that is not JSON
    url: str = ""
    dlq_url: str = ""

    @property
    def fifo(self) -> bool:
        return self.name.endswith(".fifo")

    @property
    def probes(self) -> list[str]:
        """Sent besides the examples: the rejected body, or a probe where nothing is rejected."""
        if self.rejects:
            return [REJECTED_BODY]
        return [] if self.examples else [PROBE_BODY]


@dataclass
class Report:
    """What the check saw, per queue (the service's names)."""

    processed: dict[str, int] = field(default_factory=dict)  # examples processed with success
    dead_letters: dict[str, list[str]] = field(default_factory=dict)  # x-error-message of each
    without_examples: list[str] = field(default_factory=list)
    drain_seconds: float = 0.0


def check_service(
    service: ServiceDefaults,
    endpoint: str,
    workdir: Path,
    *,
    bucket: str | None = None,
    timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
) -> Report:
    """Run the whole check (see the module docstring); raises AssertionError saying what
    failed. `workdir` holds the worker's log; `bucket` (a name; `bootstrap` creates it)
    sends one example per queue through S3 in the extended client's format; `timeout`
    bounds each wait of a broken run (a slow machine is slow, never wrong); `env` adds to
    the service's environment."""
    return asyncio.run(_Check(service, endpoint, workdir, bucket, timeout, dict(env or {})).run())


class _Check:
    def __init__(
        self,
        service: ServiceDefaults,
        endpoint: str,
        workdir: Path,
        bucket: str | None,
        timeout: float,
        env: dict[str, str],
    ) -> None:
        self.service = service
        self.workdir = workdir
        self.bucket = bucket
        self.timeout = timeout
        self.log = workdir / "worker.log"
        # The service's defaults are given to its processes too, so that they run with the
        # configuration checked here whichever command line `command` names.
        self.base_env = {
            **service.environ,
            **os.environ,
            "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "test"),
            "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
            **env,
            "AWS_ENDPOINT_URL": endpoint,
        }
        if bucket:
            self.base_env["WORKER_LARGE_PAYLOAD_BUCKET"] = bucket
        self.config: WorkerConfig = load_settings(self.base_env, service)
        if not self.config.settings.handlers:
            raise AssertionError("the service names no WORKER_HANDLERS: nothing to check")
        self.router: Router = load_router(self.config.settings.handlers)
        self.region = self.config.settings.aws_region
        self.endpoint = endpoint
        self.port = free_port()
        self.stand_in: StandIn | None = None  # made by the first queue whose examples it signs
        self.queues = [self._plan(q.name) for q in self.config.queues]
        self.report = Report()
        self.worker: subprocess.Popen[bytes] | None = None

    def _plan(self, name: str) -> QueueRun:
        spec = self.router.get(name)
        if spec is None:
            raise AssertionError(f"no handler for queue {name!r} in {self.config.settings.handlers}")
        bodies = example_bodies(spec, self.region, self._signer(spec))
        for i, body in enumerate(bodies):
            problem = example_problem(spec, body)
            if problem:
                raise AssertionError(f"example {i} of {name!r}'s payload does not validate: {problem}")
        copy = f"e2e-{uuid.uuid4().hex[:12]}" + (".fifo" if name.endswith(".fifo") else "")
        return QueueRun(name, copy, bodies, rejects=spec.payload is not str)

    def _signer(self, spec: HandlerSpec) -> Signer | None:
        """What signs the handler's examples: the stand-in for SNS when the worker checks the
        signatures of what it takes, else nothing."""
        verify = self.config.settings.sns_verify_signatures
        if signing(spec.envelope, self.endpoint, verify) != "stand-in":
            return None
        if self.stand_in is None:
            self.stand_in = StandIn.new(self.endpoint)
        return self.stand_in.signer

    async def run(self) -> Report:
        async with create_client(self.region, self.endpoint, 4) as client:
            try:
                if self.stand_in is not None:
                    await self.stand_in.publish(self.region, self.endpoint)
                await self._bootstrap(client)
                worker = self.worker = self._start_worker()
                try:
                    await self._process_examples(client)
                    await self._drain(client, worker)
                finally:
                    if worker.poll() is None:
                        # The worker leads a process group of its own: its handler processes
                        # go with it (a kill of the worker alone left them running, orphaned).
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(worker.pid, signal.SIGKILL)
                        worker.wait()
            finally:
                for queue in self.queues:
                    for url in (queue.url, queue.dlq_url):
                        if url:
                            with contextlib.suppress(Exception):
                                await client.delete_queue(QueueUrl=url)
                if self.stand_in is not None:
                    with contextlib.suppress(Exception):
                        await self.stand_in.withdraw(self.region, self.endpoint)
        return self.report

    # -- the steps, in order -------------------------------------------------------

    async def _bootstrap(self, client: SQSClient) -> None:
        copies = ",".join(q.copy for q in self.queues)
        out = self._command("bootstrap", "--max-receive-count", str(MAX_RECEIVE_COUNT), WORKER_QUEUES=copies)
        for queue in self.queues:
            assert queue.copy in out, f"`bootstrap` did not report {queue.copy}: {out}"
            assert dlq_name(queue.copy) in out, f"`bootstrap` did not report {dlq_name(queue.copy)}: {out}"
            queue.url = (await client.get_queue_url(QueueName=queue.copy))["QueueUrl"]
            queue.dlq_url = (await client.get_queue_url(QueueName=dlq_name(queue.copy)))["QueueUrl"]

    def _start_worker(self) -> subprocess.Popen[bytes]:
        env = {
            **self.base_env,
            **RUN_ENV,
            "WORKER_METRICS_PORT": str(self.port),
            "WORKER_HEALTH_FILE": str(self.workdir / "progress"),
        }
        for queue in self.queues:
            env[f"WORKER_QUEUE_{queue_env_key(queue.name)}_URL"] = queue.url
        with self.log.open("ab") as log:  # the child keeps its own copy of the descriptor
            return subprocess.Popen(  # noqa: S603 - the service's own command
                self._argv("run"), env=env, stdout=log, stderr=log, start_new_session=True
            )

    async def _process_examples(self, client: SQSClient) -> None:
        for queue in self.queues:
            if not queue.examples:
                self.report.without_examples.append(queue.name)
                warnings.warn(
                    f"the handler of {queue.name!r} declares no examples on its payload model "
                    '(model_config = ConfigDict(json_schema_extra={"examples": [...]})): '
                    "only a probe showed that the queue is served",
                    NoExamples,
                    stacklevel=2,
                )
            await self._send(queue, queue.examples + queue.probes, offload_first=bool(self.bucket))
        for queue in self.queues:
            await self._until(
                functools.partial(self._settled, client, queue),
                f"{queue.name}: every example processed, the rejected body dead-lettered",
                functools.partial(self._explain, client, queue),
            )
            letters = await self._dead_letters(client, queue)
            self.report.dead_letters[queue.name] = [reason for _body, reason in letters]
            counts = self._outcomes(queue.name)
            self.report.processed[queue.name] = int(counts.get("success", 0))
            if queue.rejects:
                assert [body for body, _ in letters] == [REJECTED_BODY], (
                    f"{queue.name}: the DLQ should hold the rejected body alone, holds {letters}"
                )
                assert letters[0][1], f"{queue.name}: the dead letter carries no reason (x-error-message)"
            if not queue.examples:
                handled = sum(counts.values())
                assert handled >= len(queue.probes), f"{queue.name}: the probe was never handled ({counts})"

    async def _drain(self, client: SQSClient, worker: subprocess.Popen[bytes]) -> None:
        before = {q.name: self._outcomes(q.name).get("success", 0) for q in self.queues}
        for queue in self.queues:
            await self._send(queue, queue.examples)
        if any(q.examples for q in self.queues):
            # SIGTERM once the worker has some of them (running, or already done).
            async def taken() -> bool:
                for queue in self.queues:
                    if self._outcomes(queue.name).get("success", 0) > before[queue.name]:
                        return True
                    if (await _counts(client, queue.url))[1]:
                        return True
                return False

            await self._until(taken, "the worker to take the examples sent for the drain")
        started = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        grace = self.config.settings.shutdown_timeout + 30
        code = await asyncio.to_thread(_wait, worker, grace)
        self.report.drain_seconds = time.monotonic() - started
        assert code == 0, f"SIGTERM: the worker exited with {code}, not 0\n{self._tail()}"
        for queue in self.queues:
            visible, in_flight = await _counts(client, queue.url)
            assert in_flight == 0, f"{queue.name}: {in_flight} message(s) left in flight after the drain"
            assert visible <= len(queue.examples), f"{queue.name}: {visible} visible, more than was sent"
            letters = await self._dead_letters(client, queue)
            assert len(letters) == len(self.report.dead_letters[queue.name]), (
                f"{queue.name}: dead-lettered during the drain: {letters}"
            )

    # -- helpers -------------------------------------------------------------------

    async def _send(self, queue: QueueRun, bodies: list[str], offload_first: bool = False) -> None:
        """Each body in a FIFO group of its own; the first through S3 with `offload_first`
        (a threshold of one byte: whatever its size)."""
        if not bodies:
            return
        where = functools.partial(open_producer, queue.copy, region=self.region, endpoint_url=self.endpoint)
        producer: Producer[Any]
        offloading: Producer[Any]
        async with (
            where(queue_url=queue.url) as producer,
            where(queue_url=queue.url, bucket=self.bucket, threshold=1) as offloading,
        ):
            for i, body in enumerate(bodies):
                await (offloading if offload_first and i == 0 else producer).send(
                    body, group_id=f"e2e-{i}" if queue.fifo else None
                )

    async def _settled(self, client: SQSClient, queue: QueueRun) -> bool:
        if await _counts(client, queue.url) != (0, 0):
            return False
        dead = (await _counts(client, queue.dlq_url))[0]
        if dead > len(queue.probes):  # only a probe may end there
            letters = await self._dead_letters(client, queue)
            raise AssertionError(f"{queue.name}: examples dead-lettered, with reasons: {letters}\n{self._tail()}")
        if queue.rejects and dead < 1:
            return False
        return self._outcomes(queue.name).get("success", 0) >= len(queue.examples)

    async def _explain(self, client: SQSClient, queue: QueueRun) -> str:
        return (
            f"queue (visible, in flight): {await _counts(client, queue.url)}; "
            f"outcomes: {self._outcomes(queue.name)}; DLQ: {await self._dead_letters(client, queue)}"
        )

    async def _dead_letters(self, client: SQSClient, queue: QueueRun) -> list[tuple[str, str]]:
        """(body, x-error-message) of every DLQ message, left there (visibility 0 again)."""
        found: dict[str, tuple[str, str]] = {}
        for _ in range(3):  # receives may each return part of a small queue
            response = await client.receive_message(
                QueueUrl=queue.dlq_url, MaxNumberOfMessages=10, WaitTimeSeconds=0, MessageAttributeNames=["All"]
            )
            for m in response.get("Messages", []):
                attributes: dict[str, Any] = dict(m.get("MessageAttributes") or {})
                reason = str(attributes.get("x-error-message", {}).get("StringValue", ""))
                found[m["MessageId"]] = (m["Body"], reason)
                await client.change_message_visibility(
                    QueueUrl=queue.dlq_url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
                )
        return sorted(found.values())

    def _outcomes(self, queue: str) -> dict[str, float]:
        """jobs_processed_total of `queue` by outcome, from the worker's /metrics."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as response:
                text = response.read().decode()
        except OSError:
            return {}
        counts: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "jobs_processed_total" and sample.labels.get("queue") == queue:
                    counts[sample.labels["outcome"]] = sample.value
        return counts

    async def _until(
        self,
        condition: Callable[[], Awaitable[bool]],
        what: str,
        explain: Callable[[], Awaitable[str]] | None = None,
    ) -> None:
        deadline = time.monotonic() + self.timeout
        while not await condition():
            if self.worker is not None and self.worker.poll() is not None:
                raise AssertionError(f"the worker exited ({self.worker.returncode}) before {what}\n{self._tail()}")
            if time.monotonic() > deadline:
                detail = await explain() if explain else ""
                raise AssertionError(f"timed out waiting for {what}. {detail}\n{self._tail()}")
            await asyncio.sleep(0.2)

    def _argv(self, *args: str) -> list[str]:
        """The service's command line (its `command`, e.g. `python -m orders_worker`), on
        this interpreter."""
        argv = shlex.split(self.service.command)
        if argv and re.fullmatch(r"python(3(\.\d+)?)?", Path(argv[0]).name):
            argv[0] = sys.executable
        return [*argv, *args]

    def _command(self, *args: str, **env: str) -> str:
        done = subprocess.run(  # noqa: S603 - the service's own command
            self._argv(*args),
            env={**self.base_env, **env},
            capture_output=True,
            text=True,
            timeout=self.timeout,
            check=False,
        )
        assert done.returncode == 0, f"`{' '.join(args)}` exited {done.returncode}:\n{done.stdout}{done.stderr}"
        return done.stdout

    def _tail(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "the worker's last lines:\n" + text[-3000:]


async def _counts(client: SQSClient, url: str) -> tuple[int, int]:
    """(visible, in flight) of a queue now."""
    attrs = (
        await client.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]), int(attrs["ApproximateNumberOfMessagesNotVisible"])


def _wait(process: subprocess.Popen[bytes], timeout: float) -> int | None:
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        return None
