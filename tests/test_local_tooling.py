"""A generated service's local tooling as its owner meets it on a laptop: a Python 3.12
service (the default answer), no Docker, and a pyenv that resolves `python3.13` to nothing
inside the project (its .python-version names 3.12).

- `LOCALSTACK_PORT=<port> make localstack` serves SQS on that port from LocalStack's own
  runtime, on a Python 3.13 the starter finds (LocalStack 4.14 fails every CreateQueue on
  3.12), and `make localstack-stop` stops it and nothing else: not another project's
  emulator (even one this project found answering and used), not the suite's LocalStack.
- `make dev` on a terminal: Ctrl-C drains the worker, and make exits 0 (not 130).
- `make send`, from another terminal: the payload model's examples (or SEND_ARGS's) reach
  the queue on the emulator `make dev` uses.
"""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from conftest import bake, run, tool_env
from sqs_worker_engine.doubles import emulators

pytestmark = pytest.mark.xdist_group("local-tooling")  # one bake for the module
TAG = uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = bake(tmp_path_factory.mktemp("tooling"), lock=True, python_version="3.12", project_name=f"Tooling {TAG}")
    installed = subprocess.run(
        ["make", "install"], cwd=project, env=tool_env(), capture_output=True, text=True, timeout=900, check=False
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return project


def as_owner(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The owner's machine: pyenv chooses by the project's .python-version, no emulator named,
    no Docker; the starters' state files in a directory of this test's own."""
    env = tool_env()
    for var in ("PYENV_VERSION", "AWS_ENDPOINT_URL", "SQS_EMULATOR", "LOCALSTACK_PORT"):
        env.pop(var, None)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env.update(LOCALSTACK_NO_DOCKER="1", TMPDIR=str(tmp_path / "tmp"), **extra)
    return env


def make(target: str, project: Path, env: dict[str, str], *variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", target, *variables],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def test_localstack_port_serves_sqs_there_and_localstack_stop_stops_only_that(
    service: Path, tmp_path: Path, localstack_endpoint: str
) -> None:
    port, taken = emulators.free_port(), emulators.free_port()
    url, taken_url = emulators.local_url(port), emulators.local_url(taken)
    # A runtime cache of its own: the starter must find Python 3.13 from inside this 3.12
    # project and build LocalStack's runtime on it (a cache built on 3.12 never serves a queue).
    env = as_owner(tmp_path, LOCALSTACK_VENV=str(tmp_path / "runtime"))
    other = tmp_path / "another-project"
    other.mkdir()

    def other_project(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sqs_worker_engine.doubles.emulators", command],
            cwd=other,
            env={**env, "LOCALSTACK_PORT": str(taken)},
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    try:
        started = make("localstack", service, {**env, "LOCALSTACK_PORT": str(port)})
        assert started.returncode == 0, started.stdout + started.stderr
        assert started.stdout.strip().splitlines()[-1] == url, started.stdout
        assert "runtime on Python 3.13" in started.stderr, started.stderr
        sqs: Any = boto3.client("sqs", endpoint_url=url, region_name="us-east-1")
        queue = sqs.create_queue(QueueName=f"tooling-{TAG}")["QueueUrl"]
        sqs.send_message(QueueUrl=queue, MessageBody="on its port")
        (message,) = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=1)["Messages"]
        assert message["Body"] == "on its port"

        # Another project's LocalStack: this project uses it when told its port, says so, and
        # its stop leaves it running.
        assert other_project("start").returncode == 0
        found = make("localstack", service, {**env, "LOCALSTACK_PORT": str(taken)})
        assert found.returncode == 0 and found.stdout.strip().splitlines()[-1] == taken_url, found.stderr
        assert f"LocalStack already answers at {taken_url}, not started by this project" in found.stderr
        assert make("localstack-stop", service, {**env, "LOCALSTACK_PORT": str(taken)}).returncode == 0
        assert emulators.healthy(taken_url), "this project's stop stopped another project's LocalStack"

        stopped = make("localstack-stop", service, {**env, "LOCALSTACK_PORT": str(port)})
        assert stopped.returncode == 0 and f"stopped LocalStack at {url}" in stopped.stderr, stopped.stderr
        assert emulators.identify(url, timeout=1) is None, "make localstack-stop left it running"
        assert emulators.healthy(taken_url), "make localstack-stop stopped another project's LocalStack"
        assert emulators.identify(localstack_endpoint) == "localstack", "the suite's LocalStack was stopped"
    finally:
        other_project("stop")
        make("localstack-stop", service, {**env, "LOCALSTACK_PORT": str(port)})
    assert emulators.identify(taken_url, timeout=1) is None


@contextlib.contextmanager
def on_a_terminal(argv: list[str], cwd: Path, env: dict[str, str]) -> Iterator[tuple[int, int]]:
    """Run `argv` as a terminal's foreground job: its pid and the terminal's end we type in."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the terminal is its controlling one, as in a shell
        try:
            os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        finally:
            os._exit(127)
    try:
        yield pid, fd
    finally:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)


def read_until(fd: int, wanted: str, seen: list[str], timeout: float) -> bool:
    """Read the terminal into `seen` until `wanted` shows up (True) or it closes or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if wanted and wanted in "".join(seen):
            return True
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the other end closed: everything on it has exited
                return bool(wanted) and wanted in "".join(seen)
            if not chunk:
                return bool(wanted) and wanted in "".join(seen)
            seen.append(chunk.decode(errors="replace"))
    return False


def test_ctrl_c_under_make_dev_drains_and_make_exits_0(service: Path, tmp_path: Path, localstack_endpoint: str) -> None:
    env = as_owner(
        tmp_path,
        AWS_ENDPOINT_URL=localstack_endpoint,  # the suite's LocalStack: `make dev` starts none
        WORKER_METRICS_PORT=str(emulators.free_port()),
        WORKER_WAIT_TIME_SECONDS="1",
    )
    sqs: Any = boto3.client("sqs", endpoint_url=localstack_endpoint, region_name="us-east-1")
    seen: list[str] = []
    try:
        with on_a_terminal(["make", "--no-print-directory", "dev"], service, env) as (pid, fd):
            assert read_until(fd, "worker started", seen, 300), "".join(seen)[-3000:]
            os.write(fd, b"\x03")  # Ctrl-C, typed: the terminal signals its foreground job
            read_until(fd, "", seen, 120)
            _, status = os.waitpid(pid, 0)
        output = "".join(seen)
        assert "worker stopped" in output, output[-3000:]
        assert os.waitstatus_to_exitcode(status) == 0, (
            f"make dev exited {os.waitstatus_to_exitcode(status)}:\n{output[-3000:]}"
        )
        assert "Interrupt" not in output and "Error" not in output, output[-3000:]
    finally:
        for name in (f"tooling-{TAG}-jobs", f"tooling-{TAG}-jobs-dlq"):
            with contextlib.suppress(Exception):
                sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=name)["QueueUrl"])


def test_make_send_reaches_the_queue_make_dev_serves(service: Path, tmp_path: Path, localstack_endpoint: str) -> None:
    """The owner's second terminal while `make dev` runs: `python -m <package> send` there had
    neither the emulator's endpoint nor credentials ("Unable to locate credentials"), or with
    AWS credentials of their own would have sent to AWS. `make send` finds the emulator as
    `make dev` does and sends the payload model's examples, or what SEND_ARGS says."""
    env = as_owner(tmp_path, AWS_ENDPOINT_URL=localstack_endpoint)
    package = f"tooling_{TAG}"
    queue = f"tooling-{TAG}-jobs"
    sqs: Any = boto3.client("sqs", endpoint_url=localstack_endpoint, region_name="us-east-1")
    try:
        python = str(service / ".venv" / "bin" / "python")
        made = run([python, "-m", package, "bootstrap"], service, timeout=300, AWS_ENDPOINT_URL=localstack_endpoint)
        assert made.returncode == 0, made.stdout + made.stderr
        examples = make("send", service, env)
        assert examples.returncode == 0, examples.stdout + examples.stderr
        assert f"sent 2 message(s) to {queue}" in examples.stdout, examples.stdout + examples.stderr
        body = tmp_path / "task.json"
        body.write_text('{"task_id": "from-make-send"}')
        one = make("send", service, env, f"SEND_ARGS=--body-file {body}")
        assert one.returncode == 0, one.stdout + one.stderr
        url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
        bodies: list[str] = []
        for _ in range(10):
            got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
            bodies += [m["Body"] for m in got.get("Messages", [])]
            if len(bodies) >= 3:
                break
        assert len(bodies) == 3 and any("from-make-send" in body for body in bodies), bodies
    finally:
        for name in (queue, f"{queue}-dlq"):
            with contextlib.suppress(Exception):
                sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=name)["QueueUrl"])


def test_a_json_body_and_the_dlq_tools_reach_the_emulator_make_dev_serves(
    service: Path, tmp_path: Path, localstack_endpoint: str
) -> None:
    """The owner's second hour: a JSON body given to `make send` lost its quotes in the
    recipe's shell (`SEND_ARGS='--body {"task_id": ...}'`) and was dead-lettered as invalid
    JSON; `BODY='...'` reaches the queue as written, and `--body` in SEND_ARGS is refused
    saying so. The DLQ tools had no route to the emulator ("Unable to locate credentials"):
    `make dlq-peek` and `make dlq-redrive` find it as `make send` does."""
    env = as_owner(tmp_path, AWS_ENDPOINT_URL=localstack_endpoint)
    package = f"tooling_{TAG}"
    queue = f"tooling-{TAG}-jobs"
    sqs: Any = boto3.client("sqs", endpoint_url=localstack_endpoint, region_name="us-east-1")
    try:
        python = str(service / ".venv" / "bin" / "python")
        made = run([python, "-m", package, "bootstrap"], service, timeout=300, AWS_ENDPOINT_URL=localstack_endpoint)
        assert made.returncode == 0, made.stdout + made.stderr
        url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
        dlq = sqs.get_queue_url(QueueName=f"{queue}-dlq")["QueueUrl"]
        written = '{"task_id": "t 1", "note": "it\'s \\"quoted\\""}'
        sent = make("send", service, env, f"BODY={written}")
        assert sent.returncode == 0, sent.stdout + sent.stderr
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=5)["Messages"]
        assert [m["Body"] for m in got] == [written], "the body reached the queue as written"
        sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
        refused = make("send", service, env, 'SEND_ARGS=--body {"task_id": "x"}')
        assert refused.returncode == 2 and "BODY=" in refused.stderr, refused.stdout + refused.stderr

        sqs.send_message(QueueUrl=dlq, MessageBody='{"task_id": "dead-one"}')
        peeked = make("dlq-peek", service, env)
        assert peeked.returncode == 0 and "dead-one" in peeked.stdout, peeked.stdout + peeked.stderr
        redriven = make("dlq-redrive", service, env)
        assert redriven.returncode == 0, redriven.stdout + redriven.stderr
        back = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=5).get("Messages", [])
        assert [m["Body"] for m in back] == ['{"task_id": "dead-one"}'], back
    finally:
        for name in (queue, f"{queue}-dlq"):
            with contextlib.suppress(Exception):
                sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=name)["QueueUrl"])
