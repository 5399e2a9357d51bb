#!/usr/bin/env python3
"""Instructions per message: the engine's worker on two or more versions, counted, not timed.

    python bench/instructions.py REF [REF ...] [--rows noop:50,io10ms:100] [--repeats 2]
    make bench-instructions REFS="REF [REF ...]"

CPU time on a shared machine moves more than most engine changes do: on one day, two
versions measured side by side by bench/versions.py gave ratios from 0.60x to 1.75x for
the same row, round to round. The instructions a process executes do not depend on what
else runs beside it. So here the real worker (bench/instructions_worker.py: the engine's
Worker, its own aiobotocore clients, uvloop, LocalStack on this machine) runs under
valgrind, which counts every instruction of its process.

- Each REF's engine is unpacked from git (versions.py's `unpack`) and put first on the
  path of one baked service's environment: this checkout's template and dependencies.
  What differs between the versions is the engine only. This checkout's working tree
  comes last, as "now".
- A count is the difference of two runs on fresh queues, of N1 and N2 messages:
  (I2 - I1) / (N2 - N1) leaves out the start, the imports and the exit.
- SQS requests a message come from the worker's own counter, by the same difference.
  If two versions batched differently, the instructions differ for that reason too.
- Under valgrind the worker runs about 50 times slower, so no latency is added: this is
  the work a message costs, not what the loop does while requests are out.

Writes benchmarks-instructions.md and .json (default: docs/). Needs valgrind
(`apt-get install valgrind`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import versions  # bench/versions.py (its directory is first on sys.path)
from measuring import ENGINE, ROOT
from measuring.baking import bake, revision, tool_env
from measuring.plan import rotation
from reporting.results import HANDLER_TEXT
from sqs_worker_engine.doubles import emulators

NOW = versions.NOW
WORKER = Path(__file__).with_name("instructions_worker.py")
HANDLERS = {"noop": 0.0, "io10ms": 0.010}  # the handler's sleep, seconds
ROWS = (("noop", 50), ("io10ms", 100))
MESSAGES = (500, 1500)
RUN_TIMEOUT = 900.0  # seconds for one counted run; ~1,500 messages take about a minute


def parse_rows(text: str) -> list[tuple[str, int]]:
    """ "noop:50,io10ms:100" to [("noop", 50), ("io10ms", 100)]."""
    rows = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        handler, _, concurrency = item.partition(":")
        if handler not in HANDLERS or not concurrency.isdigit() or int(concurrency) < 1:
            raise argparse.ArgumentTypeError(
                f"{item!r}: give handler:concurrency, the handler one of {', '.join(HANDLERS)}"
            )
        rows.append((handler, int(concurrency)))
    if not rows:
        raise argparse.ArgumentTypeError("name at least one row, e.g. noop:50")
    return rows


def instructions(valgrind_output: str) -> int:
    """The process's instruction count from valgrind's summary (`I refs: 1,234,567`)."""
    found = re.search(r"I\s+refs:\s+([\d,]+)", valgrind_output)
    if found is None:
        raise ValueError(f"no instruction count in valgrind's output: {valgrind_output[-1500:]}")
    return int(found.group(1).replace(",", ""))


def per_message(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two counted runs of different sizes, as figures a message: the difference of their
    counts over the difference of their messages."""
    messages = second["messages"] - first["messages"]
    if messages <= 0:
        raise ValueError("the second run must handle more messages than the first")
    requests = {
        operation: (second["requests"].get(operation, 0.0) - first["requests"].get(operation, 0.0)) / messages
        for operation in ("ReceiveMessage", "DeleteMessageBatch")
    }
    return {
        "instructions_per_message": (second["instructions"] - first["instructions"]) / messages,
        "requests_per_message": sum(requests.values()),
        "requests": requests,
    }


def summarise(measured: list[dict[str, Any]], names: Sequence[str]) -> list[dict[str, Any]]:
    """Per row and version: the median over the repeats, and the median of its ratios to
    now's count in the same repeat, with their lowest and highest."""
    out = []
    for handler, concurrency in dict.fromkeys((m["handler"], m["concurrency"]) for m in measured):
        rows = [m for m in measured if (m["handler"], m["concurrency"]) == (handler, concurrency)]
        now = {m["repeat"]: m for m in rows if m["version"] == NOW}
        for name in names:
            mine = [m for m in rows if m["version"] == name]
            if not mine:
                continue
            ratios = [
                m["instructions_per_message"] / now[m["repeat"]]["instructions_per_message"]
                for m in mine
                if m["repeat"] in now
            ]
            out.append(
                {
                    "handler": handler,
                    "concurrency": concurrency,
                    "version": name,
                    "repeats": len(mine),
                    "instructions_per_message": statistics.median(m["instructions_per_message"] for m in mine),
                    "requests_per_message": statistics.median(m["requests_per_message"] for m in mine),
                    "over_now": statistics.median(ratios) if ratios else None,
                    "over_now_low": min(ratios) if ratios else None,
                    "over_now_high": max(ratios) if ratios else None,
                }
            )
    return out


def markdown(results: dict[str, Any]) -> str:
    names = ", ".join(
        f"`{v['ref']}` ({v['commit']})" if v["ref"] != NOW else f"now (this checkout, {v['commit']})"
        for v in results["versions"]
    )
    first, second = results["messages"]
    lines = [
        "# Instructions per message, versions of the engine side by side",
        "",
        (
            f"Run of {results['date']} ({results['repeats']} repeat(s), {results['duration_seconds'] / 60:.0f} min), "
            f"by `bench/instructions.py`: {names}. The real worker against LocalStack under valgrind; each count "
            f"is the difference of a run of {second} messages and one of {first}, over {second - first}. "
            "No latency is added. *Over now* is a version's count over now's in the same repeat (median; "
            "in brackets the lowest and highest)."
        ),
        "",
        "| handler | concurrency | version | instructions / message | SQS requests / message | over now |",
        "|---|---|---|---|---|---|",
    ]
    for row in results["summary"]:
        over = ""
        if row["over_now"] is not None:
            low, high = row["over_now_low"], row["over_now_high"]
            over = f"{row['over_now']:.3f}x" + ("" if low == high else f" ({low:.3f}-{high:.3f})")
        lines.append(
            f"| {HANDLER_TEXT.get(row['handler'], row['handler'])} | {row['concurrency']} "
            f"| {row['version']} | {row['instructions_per_message']:,.0f} | {row['requests_per_message']:.3f} | {over} |"
        )
    return "\n".join(lines) + "\n"


class Counter:
    """Counted runs of the worker, each on a fresh queue seeded straight to LocalStack."""

    def __init__(self, python: Path, endpoint: str) -> None:
        self.python, self.endpoint = python, endpoint
        self.sqs = boto3.client(
            "sqs",
            region_name="us-east-1",
            endpoint_url=endpoint,
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )

    def count(self, engine_src: Path, handler: str, concurrency: int, messages: int) -> dict[str, Any]:
        name = f"instructions-{uuid.uuid4().hex[:12]}"
        url = self.sqs.create_queue(QueueName=name)["QueueUrl"]
        try:
            for start in range(0, messages, 10):
                batch = range(start, min(start + 10, messages))
                self.sqs.send_message_batch(
                    QueueUrl=url, Entries=[{"Id": str(i - start), "MessageBody": f"m-{i}"} for i in batch]
                )
            env = {
                **tool_env(),
                "PYTHONPATH": str(engine_src),  # this version's engine, before the bake's own
                "ENDPOINT": self.endpoint,
                "QUEUE": name,
                "MESSAGES": str(messages),
                "CONCURRENCY": str(concurrency),
                "SLEEP_SECONDS": str(HANDLERS[handler]),
                "AWS_ACCESS_KEY_ID": "test",
                "AWS_SECRET_ACCESS_KEY": "test",
            }
            command = [
                "valgrind",
                "--tool=cachegrind",
                "--cache-sim=no",
                "--cachegrind-out-file=/dev/null",
                str(self.python),
                str(WORKER),
            ]
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode != 0 or not lines:
                raise RuntimeError(f"the counted worker failed ({done.returncode}):\n{done.stderr[-3000:]}")
            report = json.loads(lines[-1])
            if report["handled"] < messages:
                raise RuntimeError(f"the counted worker handled {report['handled']} of {messages} messages")
            return {"messages": messages, "instructions": instructions(done.stderr), "requests": report["requests"]}
        finally:
            with contextlib.suppress(Exception):
                self.sqs.delete_queue(QueueUrl=url)


def measure(
    refs: Sequence[str],
    rows: Sequence[tuple[str, int]],
    repeats: int,
    messages: tuple[int, int],
    out: Path,
    log: Callable[[str], None],
) -> dict[str, Any]:
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sqs-bench-instructions-")))
        ls = emulators.ensure()
        stack.callback(ls.stop)  # stops it only if it was started here
        log("baking the service whose environment every version runs in")
        project = bake(scratch / "bake")
        engines: dict[str, Path] = {}
        version_list = []
        for ref in [*refs, NOW]:
            if ref == NOW:
                head, changed = revision()
                engines[ref], commit = ENGINE / "src", head + ("+changes" if changed else "")
            else:
                tree, commit = versions.unpack(ref, scratch)
                engines[ref] = tree / "engine" / "src"
            version_list.append({"ref": ref, "commit": commit})
        counter = Counter(project / ".venv" / "bin" / "python", ls.endpoint)
        measured: list[dict[str, Any]] = []
        turn = 0
        for repeat in range(1, repeats + 1):
            for handler, concurrency in rows:
                for ref in rotation(tuple(engines), turn):
                    first, second = (counter.count(engines[ref], handler, concurrency, n) for n in messages)
                    row = {"version": ref, "repeat": repeat, "handler": handler, "concurrency": concurrency}
                    row.update(per_message(first, second))
                    measured.append(row)
                    log(
                        f"repeat {repeat} {ref:>10} {handler} c={concurrency}: "
                        f"{row['instructions_per_message']:,.0f} instructions, "
                        f"{row['requests_per_message']:.3f} requests a message"
                    )
                turn += 1
        results: dict[str, Any] = {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "versions": version_list,
            "repeats": repeats,
            "messages": list(messages),
            "runs": measured,
            "summary": summarise(measured, tuple(engines)),
            "duration_seconds": round(time.monotonic() - started, 1),
        }
    out.mkdir(parents=True, exist_ok=True)
    (out / "benchmarks-instructions.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "benchmarks-instructions.md").write_text(markdown(results))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("refs", nargs="+", help="commits, tags or branches to set beside this checkout")
    parser.add_argument(
        "--rows", type=parse_rows, default=list(ROWS), help="handler:concurrency,... (default noop:50,io10ms:100)"
    )
    parser.add_argument("--repeats", type=int, default=2, help="counts of every row on every version (default 2)")
    parser.add_argument(
        "--messages", default=",".join(map(str, MESSAGES)), help="the two runs' sizes, N1,N2 (default 500,1500)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="where the report goes (default: docs/)")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.messages.split(",") if n.strip().isdigit()]
    if len(sizes) != 2 or not 0 < sizes[0] < sizes[1]:
        parser.error("--messages: give two sizes, the smaller first, e.g. 500,1500")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed: apt-get install valgrind")

    def log(text: str) -> None:
        print(f"[instructions {time.strftime('%H:%M:%S')}] {text}", flush=True)

    results = measure(args.refs, args.rows, args.repeats, (sizes[0], sizes[1]), args.out, log)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
