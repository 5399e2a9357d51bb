"""Command line: `python -m {{ cookiecutter.package_name }} <command>`.

run          run the worker until SIGTERM/SIGINT
send         enqueue test messages
bootstrap    create the queues and their DLQs (idempotent)
config       print the validated effective configuration (secrets redacted)
healthcheck  liveness as an exit code (for ECS health checks and exec probes)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import uuid
from collections.abc import Sequence

from .runtime.health import check_file
from .settings import ConfigError, WorkerConfig, load_settings

PROG = "python -m {{ cookiecutter.package_name }}"
EXIT_CONFIG = 2
EXIT_STARTUP = 3


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = load_settings()
    except ConfigError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    handler = COMMANDS[args.command]
    try:
        return handler(config, args)
    except ConfigError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return EXIT_CONFIG


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="run the worker until SIGTERM/SIGINT")
    send = sub.add_parser("send", help="enqueue test messages")
    send.add_argument("--queue", help="queue name (default: the first of WORKER_QUEUES)")
    send.add_argument("--count", type=int, default=10)
    send.add_argument("--body", help="message body; default: a demo task as JSON")
    send.add_argument("--work-ms", type=int, default=200, help="demo task duration")
    send.add_argument("--group", default="demo", help="MessageGroupId (FIFO queues)")
    boot = sub.add_parser("bootstrap", help="create the queues and their DLQs (idempotent)")
    boot.add_argument("--max-receive-count", type=int, help="default: WORKER_MAX_RECEIVE_COUNT")
    sub.add_parser("config", help="print the effective configuration")
    health = sub.add_parser("healthcheck", help="exit 0 if the worker makes progress, 1 if stalled")
    health.add_argument("--stalled-after", type=float, help="seconds; default: WORKER_STALLED_AFTER_SECONDS")
    return parser


def cmd_run(config: WorkerConfig, args: argparse.Namespace) -> int:
    from .runtime import logs
    from .runtime.worker import StartupError, Worker, load_router

    logs.configure(config.settings.service_name, config.settings.log_level)
    router = load_router(config.settings.handlers)
    worker = Worker(config, router)
    try:
        asyncio.run(worker.run(handle_signals=True))
    except StartupError as exc:
        logging.getLogger(__name__).error("cannot start: %s", exc)
        return EXIT_STARTUP
    stuck = worker.stuck_threads()
    if stuck:
        # A thread cannot be interrupted; its message was already released. Exit anyway.
        logging.getLogger(__name__).warning("exiting with %d handler thread(s) still running", stuck)
        logging.shutdown()
        sys.stdout.flush()
        os._exit(0)
    return 0


def cmd_send(config: WorkerConfig, args: argparse.Namespace) -> int:
    from .runtime.sqs import create_client

    queue = args.queue or config.queues[0].name
    fifo = queue.endswith(".fifo")

    async def send() -> int:
        async with create_client(config.settings.aws_region, config.settings.aws_endpoint_url, 4) as client:
            url = (await client.get_queue_url(QueueName=queue))["QueueUrl"]
            sent = 0
            while sent < args.count:
                entries = []
                for i in range(sent, min(sent + 10, args.count)):
                    body = args.body or json.dumps({"task_id": f"demo-{i}", "work_ms": args.work_ms})
                    entry: dict[str, object] = {"Id": str(i), "MessageBody": body}
                    if fifo:
                        entry["MessageGroupId"] = args.group
                        entry["MessageDeduplicationId"] = uuid.uuid4().hex
                    entries.append(entry)
                resp = await client.send_message_batch(QueueUrl=url, Entries=entries)  # type: ignore[arg-type]
                if resp.get("Failed"):
                    print(f"send failed: {resp['Failed']}", file=sys.stderr)
                    return 1
                sent += len(entries)
            print(f"sent {sent} message(s) to {queue}")
            return 0

    return asyncio.run(send())


def cmd_bootstrap(config: WorkerConfig, args: argparse.Namespace) -> int:
    from .runtime.admin import bootstrap_queues

    max_receive = args.max_receive_count or config.settings.max_receive_count
    for line in asyncio.run(bootstrap_queues(config, max_receive)):
        print(line)
    return 0


def cmd_config(config: WorkerConfig, args: argparse.Namespace) -> int:
    print(json.dumps(config.describe(), indent=2, sort_keys=True))
    return 0


def cmd_healthcheck(config: WorkerConfig, args: argparse.Namespace) -> int:
    ok, message = check_file(config.health_file, args.stalled_after or config.stalled_after)
    print(message, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


COMMANDS = {
    "run": cmd_run,
    "send": cmd_send,
    "bootstrap": cmd_bootstrap,
    "config": cmd_config,
    "healthcheck": cmd_healthcheck,
}
