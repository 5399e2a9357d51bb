"""What an on-call engineer relies on when messages fail: DLQ tools (redrive, copy-redrive, peek,
purge, delete) that lose nothing, duplicate nothing and keep each message whole."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sqs_worker_engine import Job, NonRetryableError, Router
from sqs_worker_engine.ops import redrive

from ..support import (
    EMULATORS,
    PACKAGE,
    PROJECT_ROOT,
    REGION,
    Queue,
    Sqs,
    cli,
    env_for,
    running_worker,
    wait_for,
    wait_until,
)


def dead_letter(sqs: Sqs, queue: Queue, router: Router, endpoint: str, health_file: str, count: int) -> None:
    """Runs a worker on `queue` until `count` messages are in its DLQ.

    WORKER_DRAIN_POLLS: the worker's last long poll must not linger in SQS and take one of the
    messages a redrive brings back (see WORKER_DRAIN_POLLS in settings/fields.py)."""

    async def run() -> None:
        env = env_for(endpoint, queue.name, health_file, WORKER_DRAIN_POLLS="true", WORKER_WAIT_TIME_SECONDS=2)
        async with running_worker(env, router):
            await wait_for(lambda: sqs.counts(queue.dlq_url or "")[0] == count, 60, f"{count} in the DLQ")

    asyncio.run(run())


def test_poison_messages_redrive_back_none_lost_none_duplicated(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    queue = sqs.create(max_receive=2)
    router = Router()
    poisoned: set[int] = set()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        poisoned.add(job.payload["n"])
        raise NonRetryableError(f"cannot handle {job.payload['n']}")

    sqs.send(queue, [{"n": i} for i in range(25)])

    dead_letter(sqs, queue, router, localstack_endpoint, health_file, 25)
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name}
    peek = cli("dlq", "peek", "--count", "5", **env)
    assert peek.returncode == 0, peek.stderr
    shown = [json.loads(line) for line in peek.stdout.splitlines()]
    assert len(shown) == 5 and all(s["x-error-type"] == "NonRetryableError" for s in shown)
    assert shown[0]["x-error-context"]["source_queue"] == queue.name
    again = [json.loads(line) for line in cli("dlq", "peek", "--count", "25", **env).stdout.splitlines()]
    assert {s["receive_count"] for s in again} == {1}, "the source's count, not the DLQ's (each peek is a receive)"
    assert all(s["dead_lettered_by"] == "worker" for s in shown)
    assert sqs.counts(queue.dlq_url or "") == (25, 0), "peek takes nothing"

    moved = cli("redrive", "--rate", "50", **env)
    assert moved.returncode == 0, moved.stderr
    assert "COMPLETED" in moved.stdout and "moved 25 / 25" in moved.stdout.replace("moved 25 / 0", "moved 25 / 25")
    back = sqs.receive_all(queue.url)
    numbers = sorted(json.loads(m["Body"])["n"] for m in back)
    assert numbers == list(range(25)), "every message back, each exactly once"
    assert sqs.counts(queue.dlq_url or "") == (0, 0)


def copy_back(sqs: Sqs, queue: Any, journal: Path, after_send: Any = None) -> int:
    from aiobotocore.session import get_session

    async def go() -> int:
        async with get_session().create_client("sqs", region_name=REGION, endpoint_url=sqs.endpoint) as client:
            return await redrive.copy_back(
                client, queue.dlq_url, queue.url, False, redrive.Journal(journal), after_send=after_send
            )

    return asyncio.run(go())


def fill_dlq(sqs: Sqs, queue: Any, count: int) -> None:
    for start in range(0, count, 10):
        entries = [{"Id": str(i), "MessageBody": json.dumps({"n": start + i})} for i in range(min(10, count - start))]
        sqs.client.send_message_batch(QueueUrl=queue.dlq_url, Entries=entries)


# On moto's server too: its lack of StartMessageMoveTask leaves `redrive --copy`
# (docs/engine/emulator-fidelity.md).
@pytest.mark.parametrize("emulator", EMULATORS)
def test_copy_redrive_interrupted_then_resumed_moves_each_message_once(sqs: Sqs, tmp_path: Path) -> None:
    queue = sqs.create(max_receive=2)
    fill_dlq(sqs, queue, 20)
    journal = tmp_path / "journal"

    class CtrlCError(Exception):
        pass

    async def interrupt() -> None:
        raise CtrlCError  # Ctrl-C right after SQS took the first copies

    with pytest.raises(CtrlCError):
        copy_back(sqs, queue, journal, interrupt)
    assert copy_back(sqs, queue, journal) + sqs.counts(queue.url)[0] >= 20
    numbers = sorted(json.loads(m["Body"])["n"] for m in sqs.receive_all(queue.url))
    assert numbers == list(range(20)), "nothing lost, nothing sent twice"
    assert sqs.counts(queue.dlq_url or "") == (0, 0)
    assert not journal.exists()


def test_copy_redrive_moves_what_the_dlq_held_when_it_began_and_ends_while_they_fail_again(
    sqs: Sqs, tmp_path: Path
) -> None:
    """A worker running beside `redrive --copy` dead-letters again at once what fails again:
    the copy received those too, sent them back, and went round with them for ever (an owner
    saw 27,000 moves of a handful of messages in ten minutes). What reached the DLQ after the
    copy began is left there, named, for the next run."""
    from aiobotocore.session import get_session

    queue = sqs.create(max_receive=2)
    fill_dlq(sqs, queue, 4)
    arrived: list[str] = []

    async def go() -> int:
        async with get_session().create_client("sqs", region_name=REGION, endpoint_url=sqs.endpoint) as client:

            async def fails_again() -> None:  # the worker: every copy it takes, dead-lettered at once
                got = await client.receive_message(QueueUrl=queue.url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
                for message in got.get("Messages", []):
                    await client.send_message(QueueUrl=queue.dlq_url or "", MessageBody=message["Body"])
                    await client.delete_message(QueueUrl=queue.url, ReceiptHandle=message["ReceiptHandle"])

            copying = redrive.copy_back(
                client,
                queue.dlq_url or "",
                queue.url,
                False,
                redrive.Journal(tmp_path / "journal"),
                after_send=fails_again,
                arrived_later=arrived.append,
            )
            return await asyncio.wait_for(copying, 120)  # only a broken copy takes this long

    assert asyncio.run(go()) == 4
    assert len(arrived) == len(set(arrived)) >= 1, arrived
    assert sum(sqs.counts(queue.dlq_url or "")) == len(arrived), "the bounced ones stay in the DLQ"


@pytest.mark.parametrize("emulator", ["moto"])
def test_redrive_on_motos_server_copies_instead(sqs: Sqs) -> None:
    """moto's server has no StartMessageMoveTask: it answers HTTP 500 with a page of HTML.
    `redrive` (as `make dlq-redrive` runs it) stopped there, printing that page; against an
    emulator such an answer means the action is missing, and it copies instead."""
    queue = sqs.create(max_receive=2)
    fill_dlq(sqs, queue, 3)
    moved = cli("redrive", AWS_ENDPOINT_URL=sqs.endpoint, WORKER_QUEUES=queue.name)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert "copying instead" in moved.stdout and "<html" not in moved.stdout + moved.stderr, moved.stdout
    assert "COMPLETED: moved 3 message(s)" in moved.stdout, moved.stdout
    assert sorted(json.loads(m["Body"])["n"] for m in sqs.receive_all(queue.url)) == [0, 1, 2]


def test_copy_redrive_after_a_crash_deletes_what_was_copied_without_resending(sqs: Sqs, tmp_path: Path) -> None:
    """The state a SIGKILL leaves: copies sent and journaled, originals still in the DLQ."""
    queue = sqs.create(max_receive=2)
    fill_dlq(sqs, queue, 5)
    journal = tmp_path / "journal"
    copied = sqs.client.receive_message(QueueUrl=queue.dlq_url, MaxNumberOfMessages=3, VisibilityTimeout=0)["Messages"]
    for message in copied:
        sqs.client.send_message(QueueUrl=queue.url, MessageBody=message["Body"])
    redrive.Journal(journal).record([m["MessageId"] for m in copied])
    assert copy_back(sqs, queue, journal) == 5
    numbers = sorted(json.loads(m["Body"])["n"] for m in sqs.receive_all(queue.url))
    assert numbers == list(range(5))
    assert sqs.counts(queue.dlq_url or "") == (0, 0)


def test_copy_redrive_leaves_an_unsendable_message_in_the_dlq_and_ends(sqs: Sqs, tmp_path: Path) -> None:
    queue = sqs.create(max_receive=2)
    sqs.client.set_queue_attributes(QueueUrl=queue.url, Attributes={"MaximumMessageSize": "1024"})
    fill_dlq(sqs, queue, 2)
    sqs.client.send_message(QueueUrl=queue.dlq_url, MessageBody=json.dumps({"n": 99, "pad": "x" * 2000}))
    reports: list[str] = []

    async def go() -> int:
        from aiobotocore.session import get_session

        async with get_session().create_client("sqs", region_name=REGION, endpoint_url=sqs.endpoint) as client:
            copying = redrive.copy_back(
                client, queue.dlq_url or "", queue.url, False, redrive.Journal(tmp_path / "j"), refused=reports.append
            )
            return await asyncio.wait_for(copying, 60)  # it used to hand the big one back and receive it forever

    assert asyncio.run(go()) == 2
    assert sorted(json.loads(m["Body"])["n"] for m in sqs.receive_all(queue.url)) == [0, 1]
    assert len(reports) == 1, reports
    assert sum(sqs.counts(queue.dlq_url or "")) == 1, "the unsendable message stays in the DLQ"


def read_only_directory(tmp_path: Path) -> tuple[list[str], Path] | None:
    """A directory no write reaches, root's included, and the command prefix that makes it
    so: for another user, mode 0555; for root (which writes through any mode), a read-only
    tmpfs mounted over it in a mount namespace of the command's own (as a container's
    read-only root filesystem refuses writes: EROFS). None where neither can be had."""
    directory = tmp_path / "read-only"
    directory.mkdir()
    if os.geteuid() != 0:
        directory.chmod(0o555)
        return [], directory
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o ro tmpfs {directory} && ! touch {directory}/x"],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        return None
    # `cd` again after the mount: a working directory entered before it is the one beneath.
    mount = f'mount -t tmpfs -o ro tmpfs {directory} && cd "$(pwd -P)" && exec "$@"'
    return ["unshare", "-m", "sh", "-c", mount, "sh"], directory


def redrive_from(cwd: Path, env: dict[str, str], prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """`redrive --copy` as an operator runs it in `cwd` (the image's working directory)."""
    keep = {k: v for k, v in os.environ.items() if k not in ("REDRIVE_JOURNAL_DIR", "XDG_STATE_HOME", "TMPDIR")}
    return subprocess.run(
        [*(prefix or []), sys.executable, "-m", PACKAGE, "redrive", "--copy"],
        env={**keep, "AWS_REGION": REGION, "PYTHONPATH": str(PROJECT_ROOT), **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.parametrize("where", ["read-only", "under a file"])
def test_copy_redrive_that_cannot_write_its_journal_sends_nothing_and_names_the_path(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path, where: str
) -> None:
    """It used to send the copies, then fail on its journal with a traceback: the originals
    stayed in the DLQ, and a rerun sent them again."""
    prefix: list[str] = []
    if where == "read-only":
        made = read_only_directory(tmp_path)
        if made is None:
            pytest.skip("no read-only directory to be had here (root without a mount namespace)")
        prefix, directory = made
    else:
        (tmp_path / "a-file").write_text("")
        directory = tmp_path / "a-file" / "journals"  # no one, root included, makes this
    queue = sqs.create(max_receive=2)
    fill_dlq(sqs, queue, 5)
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name, "REDRIVE_JOURNAL_DIR": str(directory)}
    result = redrive_from(PROJECT_ROOT, env, prefix)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output, output
    assert str(directory) in result.stderr and "REDRIVE_JOURNAL_DIR" in result.stderr, output
    assert sqs.counts(queue.url) == (0, 0), "nothing sent"
    assert sum(sqs.counts(queue.dlq_url or "")) == 5, "everything still in the DLQ"


def test_copy_redrive_whose_journal_fails_after_a_send_deletes_what_it_sent_and_stops(sqs: Sqs, tmp_path: Path) -> None:
    """The disk fills (or goes read-only) between the check and a write: what SQS took is
    still deleted from the DLQ before the run stops, so a rerun sends none of it again."""
    queue = sqs.create(max_receive=2)
    fill_dlq(sqs, queue, 15)
    (tmp_path / "a-file").write_text("")

    async def go() -> None:
        from aiobotocore.session import get_session

        journal = redrive.Journal.ready(tmp_path / "journal")
        journal.path = tmp_path / "a-file" / "journal"  # every write from now on fails
        async with get_session().create_client("sqs", region_name=REGION, endpoint_url=sqs.endpoint) as client:
            await redrive.copy_back(client, queue.dlq_url or "", queue.url, False, journal)

    with pytest.raises(redrive.JournalError, match="a-file/journal"):
        asyncio.run(go())
    sent = sqs.counts(queue.url)[0]
    assert sent > 0 and sent + sqs.counts(queue.dlq_url or "")[0] == 15, "what was sent left the DLQ"
    assert copy_back(sqs, queue, tmp_path / "journal") == 15 - sent
    numbers = sorted(json.loads(m["Body"])["n"] for m in sqs.receive_all(queue.url))
    assert numbers == list(range(15)), "each message once"


def test_copy_redrive_from_a_read_only_working_directory_journals_in_the_temp_dir(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    """The image's read-only root as the working directory, nothing set: the journal goes to
    $TMPDIR (a tmpfs or emptyDir in the deploy files), in a directory of this user's own."""
    made = read_only_directory(tmp_path)
    if made is None:
        pytest.skip("no read-only directory to be had here (root without a mount namespace)")
    prefix, read_only = made
    temp = tmp_path / "tmp"
    temp.mkdir()
    queue = sqs.create(max_receive=2)
    fill_dlq(sqs, queue, 12)
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name, "TMPDIR": str(temp)}
    result = redrive_from(read_only, env, prefix)
    assert result.returncode == 0, result.stdout + result.stderr
    journals = temp / f"sqs-worker-engine-{os.geteuid()}"
    assert str(journals) in result.stdout, "it says where its journal is"
    assert "COMPLETED: moved 12" in result.stdout, result.stdout
    numbers = sorted(json.loads(m["Body"])["n"] for m in sqs.receive_all(queue.url))
    assert numbers == list(range(12))
    assert journals.is_dir() and not list(journals.iterdir()), "the journal goes once every copy is settled"
    assert journals.stat().st_mode & 0o077 == 0, "private: what it holds decides what is deleted"


def test_purge_asks_on_a_terminal_and_refuses_without_one(sqs: Sqs, localstack_endpoint: str) -> None:
    queue = sqs.create(max_receive=2)
    sqs.client.send_message(QueueUrl=queue.dlq_url, MessageBody="x")
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name}
    closed = subprocess.run(
        [sys.executable, "-m", PACKAGE, "dlq", "purge"],
        env={**os.environ, "AWS_REGION": REGION, **env},
        cwd=PROJECT_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert closed.returncode == 2 and "--yes" in closed.stderr and "Traceback" not in closed.stderr, closed.stderr
    assert "not purged" in on_a_terminal(["dlq", "purge"], "no\n", env)
    assert sqs.counts(queue.dlq_url or "")[0] == 1
    assert f"purged {queue.dlq_name}" in on_a_terminal(["dlq", "purge"], f"{queue.dlq_name}\n", env)
    wait_until(lambda: sqs.counts(queue.dlq_url or "")[0] == 0, "the DLQ purged")


def on_a_terminal(args: list[str], typed: str, env: dict[str, str]) -> str:
    """Run the command with a terminal as its stdin, type `typed`; what it printed."""
    import pty

    controller, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", PACKAGE, *args],
            env={**os.environ, "AWS_REGION": REGION, **env},
            cwd=PROJECT_ROOT,
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        os.write(controller, typed.encode())
        out, _ = process.communicate(timeout=180)
    finally:
        os.close(terminal)
        os.close(controller)
    return out


def look(sqs: Sqs, url: str, count: int) -> list[dict[str, Any]]:
    """`count` messages of the queue, by id, left visible."""
    seen: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 30
    while len(seen) < count:
        assert time.monotonic() < deadline, f"only {len(seen)} of {count} messages seen"
        for m in sqs.client.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=1,
            VisibilityTimeout=0,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
        ).get("Messages", []):
            seen[m["MessageId"]] = m
    return list(seen.values())


XRAY = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
TEN = {
    **{f"s{i}": {"DataType": "String", "StringValue": f"v{i}"} for i in range(7)},
    "amount": {"DataType": "Number", "StringValue": "12.50"},
    "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xffbytes"},
    "kind": {"DataType": "String.custom", "StringValue": "order"},
}


def test_a_fair_queue_message_dead_lettered_and_redriven_comes_back_whole(
    sqs: Sqs, localstack_endpoint: str, health_file: str, tmp_path: Path
) -> None:
    queue = sqs.create(max_receive=3)
    router = Router()

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        raise NonRetryableError("cannot handle it")

    sqs.client.send_message(
        QueueUrl=queue.url,
        MessageBody='{"n": 1}',
        MessageGroupId="tenant-a",
        MessageAttributes=TEN,
        MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": XRAY}},
    )

    dead_letter(sqs, queue, router, localstack_endpoint, health_file, 1)
    [copy] = look(sqs, queue.dlq_url or "", 1)
    assert copy["Attributes"].get("MessageGroupId") == "tenant-a", "the fair queue's tenant travels with the copy"
    assert copy["Attributes"].get("AWSTraceHeader") == XRAY
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name, "REDRIVE_JOURNAL_DIR": str(tmp_path)}
    moved = cli("redrive", "--copy", **env)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    [back] = sqs.receive_all(queue.url)
    assert back["MessageAttributes"] == TEN, "every attribute, with its type, and none of the worker's"
    assert back["Attributes"].get("AWSTraceHeader") == XRAY
    assert back["Attributes"].get("MessageGroupId") == "tenant-a"
    assert sqs.counts(queue.dlq_url or "") == (0, 0)


def test_a_message_dead_lettered_with_ten_attributes_meets_its_handler_with_ten_after_the_default_redrive(
    sqs: Sqs, localstack_endpoint: str, health_file: str
) -> None:
    """SQS's move task brings the DLQ copy back as it is: 7 originals beside the worker's 3
    (the other 3 folded into x-error-context). The worker unfolds them for the handler."""
    queue = sqs.create(max_receive=3)
    router = Router()
    seen: list[dict[str, Any]] = []

    @router.handler(queue.name)
    async def handle(job: Job[Any]) -> None:
        seen.append(dict(job.message_attributes))
        if len(seen) == 1:
            raise NonRetryableError("cannot handle it yet")

    sqs.client.send_message(QueueUrl=queue.url, MessageBody='{"n": 1}', MessageAttributes=TEN)
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name}

    async def scenario() -> None:
        worker_env = env_for(localstack_endpoint, queue.name, health_file, WORKER_WAIT_TIME_SECONDS=2)
        async with running_worker(worker_env, router):
            await wait_for(lambda: sqs.counts(queue.dlq_url or "")[0] == 1, 60, "the copy in the DLQ")
            [copy] = look(sqs, queue.dlq_url or "", 1)
            assert len(copy["MessageAttributes"]) == 10 and "blob" not in copy["MessageAttributes"]
            moved = await asyncio.to_thread(cli, "redrive", **env)
            assert moved.returncode == 0, moved.stdout + moved.stderr
            assert "not available" not in moved.stdout, "SQS's own move task moved it"
            await wait_for(lambda: len(seen) == 2, 60, "the redriven message handled")

    asyncio.run(scenario())
    assert seen[0] == TEN
    assert seen[1] == TEN, "every original with its type, none of the worker's"
    assert sqs.counts(queue.dlq_url or "") == (0, 0)


def test_copy_redrive_splits_near_limit_messages_by_size(sqs: Sqs, tmp_path: Path) -> None:
    queue = sqs.create(max_receive=2)
    pad = "x" * 250_000  # four of these fill SQS's 1 MiB a batch request
    for n in range(6):
        sqs.client.send_message(QueueUrl=queue.dlq_url, MessageBody=json.dumps({"n": n, "pad": pad}))
    assert copy_back(sqs, queue, tmp_path / "journal") == 6
    assert sorted(json.loads(m["Body"])["n"] for m in sqs.receive_all(queue.url)) == list(range(6))
    assert sqs.counts(queue.dlq_url or "") == (0, 0)


FORGED = {
    "x-error-type": {"DataType": "String", "StringValue": "Handled"},
    "x-error-message": {"DataType": "String", "StringValue": "handled: safe to purge"},
    "x-error-context": {"DataType": "String", "StringValue": "{not json"},
    "tenant": {"DataType": "String", "StringValue": "acme"},
}


def test_peek_and_redrive_take_a_producers_error_attributes_for_the_producers(
    sqs: Sqs, localstack_endpoint: str, tmp_path: Path
) -> None:
    """A crash-looping message SQS dead-lettered itself, its producer's x-error-* untouched."""
    queue = sqs.create(max_receive=1)
    for n in range(2):
        sqs.client.send_message(QueueUrl=queue.url, MessageBody=json.dumps({"n": n}), MessageAttributes=FORGED)
    sqs.receive_all(queue.url, visibility=0)  # each message's one receive: a worker that crashed
    wait_until(lambda: not sqs.receive_all(queue.url, visibility=0), "SQS to move both")  # the next moves it
    wait_until(lambda: sqs.counts(queue.dlq_url or "")[0] == 2, "both in the DLQ")
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name, "REDRIVE_JOURNAL_DIR": str(tmp_path)}
    peek = cli("dlq", "peek", **env)
    assert peek.returncode == 0 and "Traceback" not in peek.stderr, peek.stderr
    shown = [json.loads(line) for line in peek.stdout.splitlines()]
    assert len(shown) == 2, peek.stdout
    for message in shown:
        assert message["dead_lettered_by"] == "sqs" and message["receive_count"] == 1
        assert not {"x-error-type", "x-error-message", "x-error-context"} & set(message), "none passes for the worker's"
        assert message["producer_attributes"]["x-error-message"] == "handled: safe to purge"
    assert cli("redrive", "--copy", **env).returncode == 0
    back = sqs.receive_all(queue.url)
    assert len(back) == 2 and all(m["MessageAttributes"] == FORGED for m in back), "the producer's, as sent"


def test_one_dlq_message_is_deleted_or_redriven_by_its_id(sqs: Sqs, localstack_endpoint: str, tmp_path: Path) -> None:
    queue = sqs.create(max_receive=2)
    env = {"AWS_ENDPOINT_URL": localstack_endpoint, "WORKER_QUEUES": queue.name, "REDRIVE_JOURNAL_DIR": str(tmp_path)}
    empty = cli("dlq", "peek", **env)
    assert empty.returncode == 0 and f"{queue.dlq_name} is empty" in empty.stderr, empty.stdout + empty.stderr
    fill_dlq(sqs, queue, 3)
    ids = {json.loads(m["Body"])["n"]: m["MessageId"] for m in look(sqs, queue.dlq_url or "", 3)}
    deleted = cli("dlq", "delete", "--id", ids[0], **env)
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    moved = cli("redrive", "--id", ids[1], **env)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    missing = cli("dlq", "delete", "--id", "no-such-id", **env)
    assert missing.returncode == 1 and "no-such-id not found" in missing.stderr, missing.stderr
    assert [json.loads(m["Body"])["n"] for m in sqs.receive_all(queue.url)] == [1]
    assert [json.loads(m["Body"])["n"] for m in sqs.receive_all(queue.dlq_url or "")] == [2], "the other one stays"
