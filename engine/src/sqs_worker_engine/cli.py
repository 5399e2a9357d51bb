"""The service's command line, built for it: `python -m <service> <command>`.

A service's `__main__` is `sys.exit(entry.main("<package>.service:SERVICE"))`, where
SERVICE is its `ServiceDefaults` (name, version, command and the defaults of its
environment). What `--help` shows is written for the people who operate the service
(`DESCRIPTION`), not this docstring.

run          run the worker until SIGTERM/SIGINT
send         enqueue messages: a body, or the payload model's own examples
bootstrap    create the queues and their DLQs (idempotent)
config       print the validated effective configuration (secrets redacted)
healthcheck  liveness as an exit code (for ECS health checks and exec probes)
redrive      move DLQ messages back to their queue (StartMessageMoveTask, or a safe copy)
dlq peek     show DLQ messages and their recorded errors without taking them
dlq purge    delete everything in the DLQ (asks first)
dlq delete   delete one DLQ message by its id
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from .base.telemetry.health import check
from .process.host import signals
from .process.host.loops import EventLoop, new_loop
from .process.settings import ConfigError, ServiceDefaults, WorkerConfig, load_settings

if TYPE_CHECKING:
    from .ops.examples import StandIn

EXIT_CONFIG = 2
# The commands that read the service's own settings (its handlers run, or its config is
# shown); the others only talk to SQS or read the health file, and a setting of the
# owner's missing on a laptop must not refuse them.
OWN_SETTINGS = frozenset({"run", "config"})
EXIT_STARTUP = 3
LEFTOVER_GRACE_SECONDS = 1.0  # at exit, what a stop left running gets this long to end once cancelled

DESCRIPTION = """\
Run and operate {name}: the worker, messages for its queues, the queues themselves, its
configuration and health, and its dead-letter queue.

Settings are environment variables (WORKER_QUEUES, WORKER_CONCURRENCY, AWS_REGION,
AWS_ENDPOINT_URL...; docs/engine/configuration.md lists them); `config` prints what is in
effect. Exit codes: 0 done, 1 the command failed, 2 bad configuration or arguments,
3 the worker cannot start (a missing queue, a port in use, a failed startup)."""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows each option's default, except where there is none to show (unset, off)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default in ([], argparse.SUPPRESS):
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """Every parser and subparser formats its help the same way."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)


def main(service: ServiceDefaults | None = None, argv: Sequence[str] | None = None) -> int:
    """Parse `argv`, load the settings over `service`'s defaults, run the command; the exit code."""
    service = service or ServiceDefaults()
    parser = build_parser(service.command, service.name)
    args = parser.parse_args(argv)
    if args.command != "run":
        signals.restore_default_signals()  # only `run` drains; anything else just stops
    try:
        config = load_settings(service=service, own=args.command in OWN_SETTINGS)
    except ConfigError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    handler = COMMANDS[args.command]
    try:
        return handler(config, args)
    except ConfigError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except (LookupError, ClientError, BotoCoreError) as exc:
        print(f"{parser.prog} {args.command}: {exc}", file=sys.stderr)
        return 1


def build_parser(prog: str, name: str = "this service") -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description=DESCRIPTION.format(name=name))
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")
    _add_run_and_send(sub)
    _add_setup_commands(sub)
    _add_redrive(sub)
    _add_dlq(sub)
    return parser


def _add_run_and_send(sub: argparse._SubParsersAction[_Parser]) -> None:
    sub.add_parser(
        "run",
        help="run the worker until SIGTERM/SIGINT",
        description="Run the worker. The first SIGTERM or SIGINT (Ctrl-C) drains: nothing new is received,\n"
        "running jobs get WORKER_SHUTDOWN_TIMEOUT_MS to finish, and the worker exits 0. Another signal\n"
        "a second or more later exits at once (128 + the signal).",
    )
    send = sub.add_parser(
        "send",
        help="send messages to a queue",
        description="Send messages to a queue: the --body (or --body-file) message once, or, with no body,\n"
        "the examples its handler's payload model declares (json_schema_extra={'examples': [...]}, what\n"
        "the end-to-end test sends), wrapped as the handler's envelope receives them.",
    )
    send.add_argument("--queue", help="queue name (default: the first of WORKER_QUEUES)")
    send.add_argument(
        "--count",
        type=int,
        help="how many messages to send, taking the examples in turn "
        "(default: 1 with --body or --body-file, else each example once)",
    )
    send.add_argument("--body", help="the message body (default: the payload model's examples)")
    send.add_argument("--body-file", help="read the message body from this file (large payloads go through S3)")
    send.add_argument(
        "--group", help="MessageGroupId: required on a FIFO queue; on a standard queue, the tenant (fair queues)"
    )
    send.add_argument("--delay", type=int, default=0, help="DelaySeconds, 0-900 (standard queues)")
    send.add_argument(
        "--attribute", action="append", default=[], metavar="NAME=VALUE", help="a String message attribute (repeatable)"
    )


def _add_setup_commands(sub: argparse._SubParsersAction[_Parser]) -> None:
    boot = sub.add_parser("bootstrap", help="create the queues and their DLQs (idempotent)")
    boot.add_argument("--max-receive-count", type=int, help="default: WORKER_MAX_RECEIVE_COUNT")
    sub.add_parser("config", help="print the effective configuration")
    health = sub.add_parser(
        "healthcheck",
        help="exit 0 if the worker makes progress, 1 if stalled",
        description="Liveness as an exit code, from the progress file each worker process writes once a\n"
        "second (WORKER_HEALTH_FILE, with the process id before its suffix): 0 if every running worker\n"
        "with a file there (or the one --pid names) made progress within --stalled-after seconds.",
    )
    health.add_argument("--stalled-after", type=float, help="seconds; default: WORKER_STALLED_AFTER_SECONDS")
    health.add_argument("--pid", type=int, help="judge this worker process only (default: every running one)")


def _add_redrive(sub: argparse._SubParsersAction[_Parser]) -> None:
    redrive = sub.add_parser(
        "redrive",
        help="move DLQ messages back to their source queue",
        description="Move dead-lettered messages back to the queue they came from. By default SQS "
        "moves them itself (StartMessageMoveTask): fast and resumable; each message comes back as "
        "it is in the DLQ, the worker's record (x-error-*) on it, and the worker unfolds that record, "
        "so its handler sees the message as first sent. --copy (or --id) copies them instead, as "
        "they were first sent on the wire too: every attribute, AWSTraceHeader and MessageGroupId "
        "restored, with a journal (in REDRIVE_JOURNAL_DIR, else $XDG_STATE_HOME, else $TMPDIR) so "
        "that an interrupted run resumes without losing or duplicating a message.",
    )
    redrive.add_argument("--queue", help="the source queue (default: the first of WORKER_QUEUES)")
    redrive.add_argument("--rate", type=int, help="messages per second, 1-500 (default: as fast as SQS allows)")
    redrive.add_argument("--cancel", action="store_true", help="cancel a running move task and exit")
    redrive.add_argument(
        "--copy", action="store_true", help="copy in batches instead of StartMessageMoveTask (default: off)"
    )
    redrive.add_argument(
        "--id",
        action="append",
        default=[],
        dest="ids",
        metavar="MESSAGE_ID",
        help="move only this DLQ message, by the message_id `dlq peek` shows (repeatable; implies --copy)",
    )


def _add_dlq(sub: argparse._SubParsersAction[_Parser]) -> None:
    dlq = sub.add_parser("dlq", help="look into or empty the DLQ")
    dlq_sub = dlq.add_subparsers(dest="dlq_command", required=True)
    peek = _dlq_command(
        dlq_sub,
        "peek",
        "show DLQ messages with their recorded errors, without taking them",
        "Print one JSON line per DLQ message without taking it: who dead-lettered it "
        "(dead_lettered_by: worker, sqs or unknown), the reason the worker recorded (x-error-*; "
        "never a producer's attributes of the same name), the source queue's receive count, the "
        "producer's attributes and the start of the body. An empty DLQ is said so on stderr.",
    )
    peek.add_argument("--count", type=int, default=10, help="show at most this many messages (default: 10)")
    purge = _dlq_command(
        dlq_sub,
        "purge",
        "delete every message in the DLQ (asks first)",
        "Delete every message in the DLQ. Asks for the DLQ's name on the terminal; "
        "without a terminal (a script, CI) it refuses unless --yes is given.",
    )
    purge.add_argument("--yes", action="store_true", help="do not ask (default: ask on the terminal)")
    delete = _dlq_command(
        dlq_sub,
        "delete",
        "delete one DLQ message by its id",
        "Delete the DLQ messages with these ids (the message_id `dlq peek` shows), leaving the others where they are.",
    )
    delete.add_argument(
        "--id", action="append", required=True, dest="ids", metavar="MESSAGE_ID", help="a DLQ message id (repeatable)"
    )


def _dlq_command(dlq_sub: argparse._SubParsersAction[_Parser], name: str, help: str, description: str) -> _Parser:
    """A `dlq` subcommand; each names its source queue the same way."""
    command = dlq_sub.add_parser(name, help=help, description=description)
    command.add_argument("--queue", help="the source queue (default: the first of WORKER_QUEUES)")
    return command


def cmd_run(config: WorkerConfig, args: argparse.Namespace) -> int:
    from .base.telemetry import logs, tracing
    from .process.platform import otlp_metrics
    from .process.worker import StartupError, Worker, load_router

    handlers = _handlers(config)
    logs.configure(config.settings.service_name, config.settings.log_level, config.settings.log_format)
    provider = tracing.configure(config.settings.service_name)
    pushed = otlp_metrics.configure(config.settings.metrics_exporter, config.settings.service_name)
    router = load_router(handlers)
    worker = Worker(config, router)
    try:
        run_until_stopped(worker.run(handle_signals=True), config.settings.event_loop)
    except StartupError as exc:
        logging.getLogger(__name__).error("cannot start: %s", exc)
        return EXIT_STARTUP
    finally:
        if provider is not None:
            provider.shutdown()  # the last spans, exported before the process ends
        if pushed is not None:
            pushed.shutdown()  # the drain's counts, exported before the process ends
    lingering = lingering_threads()
    if lingering:
        # A thread cannot be interrupted (a sync handler, or one an async handler started
        # with asyncio.to_thread); its message was already released. The interpreter would
        # wait for it at exit, far past the platform's grace period: exit without it.
        logging.getLogger(__name__).warning(
            "exiting with %d thread(s) still running: %s", len(lingering), ", ".join(t.name for t in lingering)
        )
        logging.shutdown()
        sys.stdout.flush()
        os._exit(0)
    return 0


def _handlers(config: WorkerConfig) -> str:
    if not config.settings.handlers:
        raise ConfigError([("WORKER_HANDLERS", "name the Router to serve, as package.module:attribute")])
    return config.settings.handlers


def run_until_stopped(main: Coroutine[Any, Any, None], event_loop: EventLoop = "asyncio") -> None:
    """asyncio.run, without its last step: waiting for every thread asyncio.to_thread
    started, which a blocked call would stretch to its own end. On the loop `event_loop`
    resolves to (loops.py, WORKER_EVENT_LOOP)."""
    loop = new_loop(event_loop)
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(main)
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            # What the worker left behind (a lifespan's close that swallowed its cancellation)
            # is waited for briefly, never for ever: the drain is over.
            loop.run_until_complete(asyncio.wait(pending, timeout=LEFTOVER_GRACE_SECONDS))
            if stuck := [task for task in pending if not task.done()]:
                logging.getLogger(__name__).warning(
                    "exiting with %d task(s) that ignored their cancellation: %s",
                    len(stuck),
                    ", ".join(task.get_name() for task in stuck),
                )
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        asyncio.set_event_loop(None)
        loop.close()  # shuts the default executor down without waiting for its threads


def lingering_threads(grace: float = 1.0) -> list[threading.Thread]:
    """Threads other than this one that would hold the interpreter's exit, after giving
    them `grace` seconds in all to finish."""
    deadline = time.monotonic() + grace
    others = [t for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
    for thread in others:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t for t in others if t.is_alive()]


def cmd_send(config: WorkerConfig, args: argparse.Namespace) -> int:
    from .ops.producer import Message, Producer, open_producer

    queue = args.queue or config.queues[0].name
    fifo = queue.endswith(".fifo")
    s = config.settings
    if fifo and not args.group:
        raise ConfigError([("--group", f"{queue} is a FIFO queue: name the MessageGroupId its messages go in")])
    given = args.body is not None or args.body_file is not None
    if args.body_file:
        with open(args.body_file, encoding="utf-8") as f:
            args.body = f.read()
    attributes = dict(_attribute(text) for text in args.attribute)
    if args.count is not None and args.count < 1:
        raise ConfigError([("--count", f"must be at least 1, got {args.count}")])
    bodies, stand_in = ([args.body] * (args.count or 1), None) if given else _examples(config, queue, args.count)
    # No tracing here: only `run` exports. A command on a laptop has no collector beside it,
    # and its exporter would retry for seconds, saying so, before the command could exit.

    async def send() -> int:
        if stand_in is not None:  # first: a worker may take the messages at once
            await stand_in.publish(s.aws_region, s.aws_endpoint_url or "")
        producer: Producer[Any]
        async with open_producer(
            queue,
            region=s.aws_region,
            endpoint_url=s.aws_endpoint_url or "",
            bucket=s.large_payload_bucket,
            threshold=s.large_payload_threshold_bytes,
        ) as producer:
            messages = [Message(body, group_id=args.group, delay=args.delay, attributes=attributes) for body in bodies]
            result = await producer.send_batch(messages)
        for failure in result.failed:
            print(f"message {failure.index} not sent: {failure.code} {failure.message}", file=sys.stderr)
        print(f"sent {len(result.message_ids)} message(s) to {queue}")
        return 0 if result.ok else 1

    try:
        return asyncio.run(send())
    except (ValueError, TypeError) as exc:  # refused before sending: say what is wrong
        print(f"{config.service.command} send: {exc}", file=sys.stderr)
        return EXIT_CONFIG


def _examples(config: WorkerConfig, queue: str, count: int | None) -> tuple[list[str], StandIn | None]:
    """What `send` sends without a body: `count` messages taking the examples of `queue`'s
    handler's payload model in turn (default: each once), as the queue receives them, and the
    stand-in for SNS that signs them, if one does (its certificate to publish before they are
    sent; examples.py)."""
    from .ops.examples import StandIn, example_bodies, signing
    from .process.worker import load_router

    s = config.settings
    handlers = _handlers(config)
    spec = load_router(handlers).get(queue)
    if spec is None:
        raise ConfigError([("--queue", f"{queue} has no handler in {handlers}: give a --body to send")])
    how = signing(spec.envelope, s.aws_endpoint_url, s.sns_verify_signatures)
    if how == "refused":
        raise ConfigError(
            [
                (
                    "WORKER_SNS_VERIFY_SIGNATURES",
                    f"{queue}'s handler takes SNS notifications (envelope={spec.envelope!r}), which only SNS "
                    "signs outside an emulator, and a worker checking signatures dead-letters unsigned ones: "
                    "publish the examples to the topic the queue subscribes to (with the check off, "
                    "WORKER_SNS_VERIFY_SIGNATURES=false here as on the worker, they are sent unsigned)",
                )
            ]
        )
    stand_in = StandIn.new(s.aws_endpoint_url or "") if how == "stand-in" else None
    bodies = example_bodies(spec, s.aws_region, stand_in.signer if stand_in else None, count)
    if not bodies:
        model = getattr(spec.payload, "__name__", repr(spec.payload))
        raise ConfigError(
            [
                (
                    "--body",
                    f"{queue}'s payload model ({model}) declares no examples to send: give a --body, or declare "
                    'some on the model (model_config = ConfigDict(json_schema_extra={"examples": [...]}))',
                )
            ]
        )
    return bodies, stand_in


def _attribute(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ConfigError([("--attribute", f"{text!r} is not NAME=VALUE")])
    return name, value


def cmd_bootstrap(config: WorkerConfig, args: argparse.Namespace) -> int:
    from .ops.admin import bootstrap_queues

    max_receive = args.max_receive_count or config.settings.max_receive_count
    for line in asyncio.run(bootstrap_queues(config, max_receive)):
        print(line)
    return 0


def cmd_config(config: WorkerConfig, args: argparse.Namespace) -> int:
    from .process.worker import check_handlers, load_router

    # What `run` would refuse, `config` refuses too: it is how an operator checks a change.
    check_handlers(config, load_router(_handlers(config)))
    print(json.dumps(config.describe(), indent=2, sort_keys=True))
    if config.settings.metrics_exporter != "prometheus":
        from .process.platform.otlp_metrics import INTERVAL_VARIABLE, export_interval

        # OpenTelemetry's own variable: a bad value is ignored with a warning, by `run` too.
        _, warning = export_interval(os.environ.get(INTERVAL_VARIABLE))
        if warning is not None:
            print(f"{config.service.command} config: warning: {warning}", file=sys.stderr)
    return 0


def cmd_healthcheck(config: WorkerConfig, args: argparse.Namespace) -> int:
    ok, message = check(config.health_file, args.stalled_after or config.stalled_after, args.pid)
    print(message, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


def cmd_redrive(config: WorkerConfig, args: argparse.Namespace) -> int:
    from .base.sqs import create_client
    from .ops import admin, redrive

    queue = args.queue or config.queues[0].name
    if args.rate is not None and not 1 <= args.rate <= 500:
        print(f"{config.service.command}: --rate must be within 1..500 (SQS's limit), got {args.rate}", file=sys.stderr)
        return EXIT_CONFIG

    async def go() -> int:
        async with create_client(config.settings.aws_region, config.settings.aws_endpoint_url, 4) as client:
            src_url, src_arn, dlq_url, dlq_arn, fifo = await admin.resolve_dlq(client, queue)
            if args.cancel:
                cancelled = await redrive.cancel_move(client, dlq_arn)
                print("cancelled the running move task" if cancelled else "no move task is running")
                return 0
            dlq_name = dlq_arn.rsplit(":", 1)[-1]
            if not args.copy and not args.ids:
                try:
                    # Always name the destination: SQS only knows the source of messages it
                    # dead-lettered itself, not of those the worker sent there (non-retryable).
                    await redrive.start_move(client, dlq_arn, src_arn, args.rate)
                except Exception as exc:
                    if not redrive.unsupported(exc, emulated=config.settings.aws_endpoint_url is not None):
                        raise
                    answer = exc.response.get("Error", {}).get("Code") if isinstance(exc, ClientError) else exc
                    print(f"StartMessageMoveTask is not available here ({answer}); copying instead")
                else:
                    final = await redrive.wait_move(client, dlq_arn, redrive.print_progress)
                    return 0 if final.status == "COMPLETED" else 1
            # Before the first send: a journal that cannot be written would lose the run's
            # place after the copies went (and a rerun would send them again).
            path, private = redrive.journal_place(dlq_name)
            journal = redrive.Journal.ready(path, private)
            print(f"journal: {path} (set {redrive.JOURNAL_DIR_VARIABLE} to keep it elsewhere)")
            if journal.sent:
                print(f"resuming: {len(journal.sent)} message(s) were copied by an interrupted run")
            refusals: list[str] = []
            later: list[str] = []  # reached the DLQ after the copy began
            if args.ids:
                moved = 0
                chosen = await admin.find(client, dlq_url, set(args.ids))
                for start in range(0, len(chosen), 10):
                    done, refused = await redrive.copy_chosen(
                        client, dlq_url, src_url, fifo, journal, chosen[start : start + 10]
                    )
                    moved += done
                    refusals += [f"{message_id}: {reason}" for message_id, reason in refused.items()]
                missing = set(args.ids) - {m["MessageId"] for m in chosen}
                refusals += [f"{message_id}: not found in {dlq_name}" for message_id in sorted(missing)]
            else:
                moved = await redrive.copy_back(
                    client,
                    dlq_url,
                    src_url,
                    fifo,
                    journal,
                    rate=args.rate,
                    report=lambda n: print(f"moved {n}", flush=True),
                    refused=refusals.append,
                    arrived_later=later.append,
                )
            print(f"COMPLETED: moved {moved} message(s) from {dlq_name} to {queue}")
            if later:
                print(
                    f"left in {dlq_name}: {len(later)} message(s) that reached it after this copy began "
                    "(failed again, or new): the next run moves them"
                )
            for reason in refusals:
                print(f"left in {dlq_name}: {reason}")
            return 1 if refusals else 0

    try:
        return asyncio.run(go())
    except redrive.JournalError as exc:
        print(f"{config.service.command} redrive: {exc}", file=sys.stderr)
        return EXIT_CONFIG


def cmd_dlq(config: WorkerConfig, args: argparse.Namespace) -> int:
    from .base.sqs import create_client, describe_queue
    from .ops import admin, redrive

    queue = args.queue or config.queues[0].name
    prog = f"{config.service.command} dlq {args.dlq_command}"
    if args.dlq_command == "purge" and not args.yes and not sys.stdin.isatty():
        print(f"{prog}: no terminal to confirm on; pass --yes to purge without asking", file=sys.stderr)
        return EXIT_CONFIG

    async def go() -> int:
        async with create_client(config.settings.aws_region, config.settings.aws_endpoint_url, 4) as client:
            _src_url, _src_arn, dlq_url, dlq_arn, _fifo = await admin.resolve_dlq(client, queue)
            dlq_name = dlq_arn.rsplit(":", 1)[-1]
            if args.dlq_command == "peek":
                max_receive = (await describe_queue(client, queue)).max_receive_count
                messages = await admin.peek(client, dlq_url, args.count)
                for message in messages:
                    print(json.dumps(redrive.describe(message, max_receive)))
                if not messages:
                    print(f"{dlq_name} is empty", file=sys.stderr)
                return 0
            if args.dlq_command == "delete":
                chosen = await admin.find(client, dlq_url, set(args.ids))
                for message in chosen:
                    await client.delete_message(QueueUrl=dlq_url, ReceiptHandle=message["ReceiptHandle"])
                    print(f"deleted {message['MessageId']} from {dlq_name}")
                missing = sorted(set(args.ids) - {m["MessageId"] for m in chosen})
                for message_id in missing:
                    print(f"{prog}: {message_id} not found in {dlq_name}", file=sys.stderr)
                return 1 if missing else 0
            if not args.yes:
                prompt = f"Delete every message in {dlq_name}? Type its name to confirm: "
                try:
                    answer = await asyncio.to_thread(input, prompt)
                except EOFError:
                    answer = ""
                if answer.strip() != dlq_name:
                    print("not purged")
                    return 1
            await client.purge_queue(QueueUrl=dlq_url)
            print(f"purged {dlq_name}")
            return 0

    return asyncio.run(go())


COMMANDS = {
    "run": cmd_run,
    "send": cmd_send,
    "bootstrap": cmd_bootstrap,
    "config": cmd_config,
    "healthcheck": cmd_healthcheck,
    "redrive": cmd_redrive,
    "dlq": cmd_dlq,
}
