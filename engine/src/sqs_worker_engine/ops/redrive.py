"""DLQ redrive: move dead-lettered messages back to their source queue.

The normal way is SQS's own StartMessageMoveTask (server side, rate-limited, resumable);
`redrive` starts one, shows progress until it ends, and `--cancel` stops a running one.

Where that API is not available (an emulator, a region, a FIFO DLQ without support), the
fallback copies in batches: receive from the DLQ, send to the source queue, delete from
the DLQ. A journal file records each DLQ message that was sent before it is deleted, so an
interrupted run (Ctrl-C, a crash) resumes without sending anything twice and without
losing anything: a message is deleted from the DLQ only after the copy is confirmed.
The journal is checked writable before the first send (`Journal.ready`), so a place it
cannot be written (the image's read-only root) sends nothing; it lives in
REDRIVE_JOURNAL_DIR, else $XDG_STATE_HOME/sqs-worker-engine, else a directory of this
user's own in $TMPDIR (`journal_place`), never the working directory.
Each copy is the message as it was first sent (dlq.py: the worker's record taken off, the
attributes it moved aside restored, AWSTraceHeader and MessageGroupId kept), in requests
of at most 10 messages and SQS's 1 MiB.

`describe` is what `dlq peek` prints of a DLQ message: the worker's record apart from
whatever the producer set.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from ..base.sqs import SQSClient
from ..formats.dlq import MOVED_BY_SQS, original_attributes, receive_whole, system_arguments, worker_record
from .producer import _batches

FINAL = ("COMPLETED", "CANCELLED", "FAILED")
BATCH_VISIBILITY = 30  # a batch a crashed run was holding comes back after this
UNSUPPORTED = ("UnsupportedOperation", "InvalidAction", "AWS.SimpleQueueService.UnsupportedOperation")


@dataclass
class Progress:
    status: str
    moved: int
    to_move: int | None
    failure: str | None = None


async def start_move(client: SQSClient, dlq_arn: str, dest_arn: str | None, rate: int | None) -> str:
    args: dict[str, Any] = {"SourceArn": dlq_arn}
    if dest_arn:
        args["DestinationArn"] = dest_arn
    if rate:
        args["MaxNumberOfMessagesPerSecond"] = rate
    return str((await client.start_message_move_task(**args))["TaskHandle"])


async def move_status(client: SQSClient, dlq_arn: str) -> Progress | None:
    tasks = (await client.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=1)).get("Results", [])
    if not tasks:
        return None
    t = tasks[0]
    to_move = t.get("ApproximateNumberOfMessagesToMove")
    return Progress(
        status=str(t.get("Status")),
        moved=int(t.get("ApproximateNumberOfMessagesMoved", 0)),
        to_move=None if to_move is None else int(to_move),
        failure=t.get("FailureReason"),
    )


async def cancel_move(client: SQSClient, dlq_arn: str) -> bool:
    tasks = (await client.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=10)).get("Results", [])
    running = [t for t in tasks if t.get("Status") == "RUNNING" and t.get("TaskHandle")]
    for t in running:
        await client.cancel_message_move_task(TaskHandle=str(t["TaskHandle"]))
    return bool(running)


async def wait_move(
    client: SQSClient, dlq_arn: str, report: Callable[[Progress], None], interval: float = 1.0
) -> Progress:
    while True:
        progress = await move_status(client, dlq_arn)
        if progress is None:
            raise RuntimeError("the move task disappeared")
        report(progress)
        if progress.status in FINAL:
            return progress
        await asyncio.sleep(interval)


def unsupported(exc: BaseException, emulated: bool = False) -> bool:
    """Whether StartMessageMoveTask is missing where it was called: SQS's codes for that, or,
    on an emulator (`emulated`), an HTTP 500 (moto's server answers so for an action it has
    not, with a page of HTML); AWS's own 500 is a failure to report."""
    if not isinstance(exc, ClientError):
        return False
    if exc.response.get("Error", {}).get("Code") in UNSUPPORTED:
        return True
    return emulated and exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 500


JOURNAL_DIR_VARIABLE = "REDRIVE_JOURNAL_DIR"


class JournalError(Exception):
    """The journal cannot be read or written where it is: nothing is sent."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(
            f"cannot write the redrive journal at {path} ({problem}); set {JOURNAL_DIR_VARIABLE} "
            "to a writable directory (the journal is how an interrupted copy resumes without "
            "sending a message twice)"
        )
        self.path = path


class Journal:
    """DLQ message ids already sent to the source queue but not yet deleted from the DLQ."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sent: set[str] = set()
        try:
            if path.exists():
                self.sent = {line.strip() for line in path.read_text().splitlines() if line.strip()}
        except (OSError, UnicodeDecodeError) as exc:
            raise JournalError(path, _why(exc)) from None

    @classmethod
    def ready(cls, path: Path, private: bool = False) -> Journal:
        """The journal at `path`, known writable before anything is sent: its directory
        made, a journal an interrupted run left read, the file opened for writing. A
        `private` directory (one in a temp dir others may write) must be this user's
        alone: what the journal holds decides what is deleted from the DLQ."""
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if private:
                _check_private(path.parent)
            journal = cls(path)
            with path.open("a"):
                pass
            if not journal.sent:
                path.unlink()
        except OSError as exc:
            raise JournalError(path, _why(exc)) from None
        return journal

    def record(self, message_ids: list[str]) -> None:
        # Known sent before it is written down: should the write fail, the run still deletes
        # these from the DLQ (they were sent) before it stops.
        self.sent.update(message_ids)
        try:
            with self.path.open("a") as handle:
                handle.writelines(f"{m}\n" for m in message_ids)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            raise JournalError(self.path, _why(exc)) from None

    def forget(self, message_ids: list[str]) -> None:
        self.sent.difference_update(message_ids)
        if not self.sent:
            # A journal left behind names only messages deleted already: harmless to a rerun.
            with contextlib.suppress(OSError):
                self.path.unlink(missing_ok=True)


def _why(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _check_private(directory: Path) -> None:
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise JournalError(directory, "not a directory of this user's alone: another user could write the journal")


def journal_place(dlq_name: str, environ: Mapping[str, str] | None = None) -> tuple[Path, bool]:
    """Where `redrive --copy` keeps its journal for this DLQ, and whether the directory must
    be private: REDRIVE_JOURNAL_DIR; else $XDG_STATE_HOME/sqs-worker-engine; else
    sqs-worker-engine-<uid> in $TMPDIR (/tmp): a tmpfs or emptyDir in the deploy files,
    writable under a read-only root filesystem, and kept while the pod or task lives."""
    env = os.environ if environ is None else environ
    name = f".redrive-{dlq_name}.journal"
    if env.get(JOURNAL_DIR_VARIABLE):
        return Path(env[JOURNAL_DIR_VARIABLE]) / name, False
    if env.get("XDG_STATE_HOME"):
        return Path(env["XDG_STATE_HOME"]) / "sqs-worker-engine" / name, False
    temp = env.get("TMPDIR") or "/tmp"  # noqa: S108 - a tmpfs/emptyDir in containers; private below
    return Path(temp) / f"sqs-worker-engine-{os.geteuid()}" / name, True


async def copy_back(
    client: SQSClient,
    dlq_url: str,
    dest_url: str,
    fifo: bool,
    journal: Journal,
    rate: int | None = None,
    report: Callable[[int], None] = lambda _: None,
    after_send: Callable[[], Awaitable[None]] | None = None,
    refused: Callable[[str], None] = lambda _: None,
    arrived_later: Callable[[str], None] = lambda _: None,
) -> int:
    """The fallback: receive, send, journal, delete. Returns how many were moved.

    It moves what the DLQ held when it began. A message sent to the DLQ since (`arrived_after`:
    a copy that failed again, with a worker running beside it, or a new failure) is left
    there, hidden for the rest of the run, for the next one: `arrived_later` is told its id,
    once. Moved too, a message that fails at once went round for ever.

    A message the destination refuses (too large for its MaximumMessageSize, say) stays
    in the DLQ, hidden for the rest of the run so that it is not received again and
    again: `refused` is told why, once per message."""
    moved = 0
    empty_polls = 0
    began_ms = int(time.time() * 1000)  # SQS's clock is the wall's: SentTimestamp is compared with it
    kept: set[str] = set()  # refused this run, or arrived after it began: left hidden in the DLQ
    while empty_polls < 2:
        started = time.monotonic()
        batch = [dict(m) for m in await receive_whole(client, dlq_url, BATCH_VISIBILITY)]
        if not batch:
            empty_polls += 1
            continue
        empty_polls = 0
        for message in batch:
            if message["MessageId"] not in kept and arrived_after(message, began_ms):
                kept.add(message["MessageId"])
                arrived_later(message["MessageId"])
        try:
            fresh = [m for m in batch if m["MessageId"] not in journal.sent and m["MessageId"] not in kept]
            for message_id, reason in (await send_copies(client, dest_url, fifo, journal, fresh)).items():
                kept.add(message_id)
                refused(f"{message_id}: {reason}")
            if fresh and after_send is not None:
                await after_send()
        finally:
            # Even when interrupted: delete what is known to be copied (now, or by an earlier
            # interrupted run), and hand the rest of the batch back at once.
            moved += await _settle_batch(client, dlq_url, [m for m in batch if m["MessageId"] not in kept], journal)
            report(moved)
        if rate:
            await asyncio.sleep(max(0.0, len(batch) / rate - (time.monotonic() - started)))
    return moved


def arrived_after(message: Mapping[str, Any], began_ms: int) -> bool:
    """Whether a DLQ message was sent there at or after `began_ms` (SQS's SentTimestamp, in
    ms). A message SQS moved there keeps its first send's; one the worker dead-lettered
    carries the time it reached the DLQ, and a copy that failed again one after the copy."""
    return int(message.get("Attributes", {}).get("SentTimestamp", "0")) >= began_ms


async def copy_chosen(
    client: SQSClient, dlq_url: str, dest_url: str, fifo: bool, journal: Journal, messages: list[dict[str, Any]]
) -> tuple[int, dict[str, str]]:
    """Copy these received DLQ messages (at most 10) to `dest_url`, then delete them from
    the DLQ: (how many moved, the refused ones by id with the reason). A refused message
    stays in the DLQ."""
    fresh = [m for m in messages if m["MessageId"] not in journal.sent]
    refused: dict[str, str] = {}
    try:
        refused = await send_copies(client, dest_url, fifo, journal, fresh)
    finally:
        moved = await _settle_batch(client, dlq_url, [m for m in messages if m["MessageId"] not in refused], journal)
    return moved, refused


async def _settle_batch(client: SQSClient, dlq_url: str, batch: list[dict[str, Any]], journal: Journal) -> int:
    done = [m for m in batch if m["MessageId"] in journal.sent]
    rest = [m for m in batch if m["MessageId"] not in journal.sent]
    gone: list[str] = []
    if done:
        deleted = await client.delete_message_batch(
            QueueUrl=dlq_url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)]
        )
        gone = [done[int(e["Id"])]["MessageId"] for e in deleted.get("Successful", [])]
        journal.forget(gone)
    if rest:
        await client.change_message_visibility_batch(
            QueueUrl=dlq_url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0} for i, m in enumerate(rest)
            ],
        )
    return len(gone)


async def send_copies(
    client: SQSClient, dest_url: str, fifo: bool, journal: Journal, messages: list[dict[str, Any]]
) -> dict[str, str]:
    """Send a copy of each DLQ message to `dest_url`, journalling each one SQS took, in
    batches of at most 10 entries and SQS's 1 MiB a request. The messages SQS refused as
    the sender's fault (sending again cannot help), by DLQ message id, with the reason."""
    refused: dict[str, str] = {}
    entries = {i: copy_entry(i, m, fifo) for i, m in enumerate(messages)}
    batches = list(_batches(entries))
    while batches:
        batch = batches.pop(0)
        try:
            result = await client.send_message_batch(QueueUrl=dest_url, Entries=list(batch.values()))  # type: ignore[arg-type]
        except ClientError as exc:
            if int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 500)) >= 500:
                raise
            if len(batch) > 1:  # SQS refused the request as a whole: find the one it refuses
                batches[:0] = [{i: e} for i, e in batch.items()]
                continue
            error = exc.response.get("Error", {})
            refused[str(messages[next(iter(batch))]["MessageId"])] = f"{error.get('Code')} {error.get('Message', '')}"
            continue
        journal.record([str(messages[int(e["Id"])]["MessageId"]) for e in result.get("Successful", [])])
        for failed in result.get("Failed", []):
            if failed.get("SenderFault"):
                refused[str(messages[int(failed["Id"])]["MessageId"])] = (
                    f"{failed.get('Code')} {failed.get('Message', '')}".strip()
                )
    return refused


def copy_entry(index: int, message: dict[str, Any], fifo: bool) -> dict[str, Any]:
    """The SendMessageBatch entry that puts a DLQ message back as it was first sent: its
    attributes without the worker's record and with those the worker moved aside, its
    AWSTraceHeader and its MessageGroupId (FIFO order, or a fair queue's tenant)."""
    attrs = original_attributes(message.get("MessageAttributes"))
    entry: dict[str, Any] = {"Id": str(index), "MessageBody": message["Body"]}
    if attrs:
        entry["MessageAttributes"] = attrs
    # The DLQ message id as the FIFO deduplication id: a resend within SQS's 5-minute
    # window is deduplicated too.
    entry.update(system_arguments(message, fifo, "redrive"))
    return entry


def print_progress(progress: Progress) -> None:
    total = "?" if progress.to_move is None else str(progress.to_move)
    print(f"{progress.status}: moved {progress.moved} / {total}", flush=True)


def describe(message: dict[str, Any], max_receive_count: int | None = None, width: int = 200) -> dict[str, Any]:
    """What `dlq peek` shows for one DLQ message. The `x-error-*` keys only ever hold the
    worker's record (see dlq.py for why a producer cannot forge one); every attribute
    that is not the worker's is under `producer_attributes`, its value cut to `width`.
    `receive_count` is the source queue's: from the worker's record, or the source's
    `max_receive_count` for a message SQS moved itself (it moves on the receive after)."""
    attrs = message.get("MessageAttributes") or {}
    system = message.get("Attributes") or {}
    record = worker_record(message)
    try:
        sent = int(system.get("SentTimestamp", "0")) / 1000
    except ValueError:
        sent = 0
    shown: dict[str, Any] = {
        "message_id": message.get("MessageId"),
        "sent_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(sent)),
    }
    if record is not None:
        context = record["x-error-context"]
        shown["dead_lettered_by"] = "worker"
        count = context.get("receive_count")
        shown["receive_count"] = count if isinstance(count, int) else None
        shown.update(record)
        producer = {k: v for k, v in attrs.items() if k not in record}
    elif MOVED_BY_SQS in system:
        shown["dead_lettered_by"] = "sqs"
        shown["source"] = str(system[MOVED_BY_SQS])
        shown["receive_count"] = max_receive_count
        shown["why"] = "received maxReceiveCount times without being deleted (a crash, lost leases, give-backs)"
        producer = dict(attrs)
    else:
        shown["dead_lettered_by"] = "unknown"  # sent to the DLQ by someone else, no worker record
        shown["receive_count"] = None
        producer = dict(attrs)
    if "MessageGroupId" in system:
        shown["group"] = str(system["MessageGroupId"])
    if producer:
        shown["producer_attributes"] = {k: _shown_value(v, width) for k, v in sorted(producer.items())}
    shown["body"] = (message.get("Body") or "")[:width]
    return shown


def _shown_value(value: Any, width: int) -> str:
    if not isinstance(value, dict):
        return ""
    if "StringValue" in value:
        return str(value["StringValue"])[:width]
    if "BinaryValue" in value:
        return f"<{len(value['BinaryValue'])} bytes, {value.get('DataType', 'Binary')}>"
    return ""
