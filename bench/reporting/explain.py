"""What the report's figures mean: the Method (how each figure was taken), the CPU floor each
row is divided by, prefetch off against on side by side, and, for each throughput target
missed, the row's own figures that say why (how busy the machine was, the worker's CPU, the
receive's round trip, what the worker may hold against what the ideal rate needs)."""

from __future__ import annotations

from typing import Any

from measuring.plan import IO_HANDLERS
from sqs_worker_engine import load_settings
from sqs_worker_engine.base.limits import MAX_RECEIVE_BATCH, default_prefetch

from reporting.results import (
    HANDLER_TEXT,
    IO_SECONDS,
    OTHERS,
    find,
    latencies,
    latency_text,
    ok_runs,
    raw_cpu_ms,
    scenarios,
)
from reporting.tables import num, table
from reporting.targets import tied_at_ideal

WHY_MISSED = (
    "Where the generated worker fell short of 0.9 or was not ahead, the figures of the row itself. "
    "*Machine busy* is every process's CPU over the window (LocalStack, the proxy and the harness "
    "share the cores with the contender): near the core count, the machine set the pace, and the "
    "emulator's ceiling, measured with nothing else running, overstates what was left for the "
    "worker. *Worker CPU* is the worker's own process: its jobs share one event loop, so near 1 core "
    "a job that ends waits for the loop before the next one starts. *Beyond the handler* is what "
    "that costs each job: concurrency / throughput, less the handler's own time. *ReceiveMessage* "
    "is its mean round trip through the proxy, the added latency included. *Held at the ideal rate / "
    "bound*: by Little's law, the messages a worker must hold to run at the ideal rate (a place is "
    "taken when its receive is sent and given back when its delete call goes out: ideal rate x "
    "(ReceiveMessage round trip + handler)), against what the worker may hold with its default "
    "prefetch cap (concurrency + `WORKER_PREFETCH`); where the first is larger, the bound set the "
    "pace, and a larger `WORKER_PREFETCH` raises it. *Deletes out at the ideal rate*: the messages "
    "whose delete call is out (ideal rate x DeleteMessageBatch round trip) against the prefetch cap, "
    "past which a message keeps its place until its delete is answered; and those calls (a tenth as "
    "many) against the connections of the worker's client for deletes and heartbeats (one for each "
    "poller, and 10), past which a delete waits for a connection.\n\n"
)
WHY_MISSED_COLUMNS = [
    "handler",
    "concurrency",
    "latency",
    "efficiency",
    "prefetch off",
    "best other",
    "machine busy (cores)",
    "worker CPU (cores)",
    "per job beyond the handler (ms)",
    "ReceiveMessage (ms)",
    "held at the ideal rate / bound",
    "deletes out at the ideal rate: messages / cap, calls / connections",
]


def why_missed(results: dict[str, Any]) -> str:
    """For each missed throughput target, what this run measured in its rows: how busy the
    machine was (every process: LocalStack, the proxy, the contender), the worker's own
    CPU, the receive round trip, and the same row with prefetch off. A reader should not
    have to take a reason on trust."""
    missed = {t["name"] for t in results["targets"] if t["met"] is False}
    if not any(n.startswith(("efficiency", "ahead of")) for n in missed):
        return ""
    rows = [missed_row(r, results) for r in ok_runs(results) if fell_short(r, results)]
    return WHY_MISSED + table(WHY_MISSED_COLUMNS, rows) + "\n"


def best_other(r: dict[str, Any], results: dict[str, Any]) -> dict[str, Any] | None:
    """The fastest of the other contenders in a row's scenario, if any ran there."""
    others = [o for c in OTHERS if (o := find(results, c, r["handler"], r["concurrency"], r["added_ms"]))]
    return max(others, key=lambda o: o["throughput"], default=None)


def fell_short(r: dict[str, Any], results: dict[str, Any]) -> bool:
    """A generated worker's row below 0.9 efficiency (I/O-like) or not ahead of the best other."""
    if r["contender"] != "generated" or r["handler"] not in IO_HANDLERS + ("noop",):
        return False
    best = best_other(r, results)
    short = r["handler"] in IO_HANDLERS and r["efficiency"] < 0.9
    behind = best is not None and r["throughput"] <= best["throughput"] and not tied_at_ideal(r, best)
    return short or behind


def missed_row(r: dict[str, Any], results: dict[str, Any]) -> list[str]:
    """The row's own figures, in WHY_MISSED_COLUMNS."""
    best = best_other(r, results)
    off = find(results, "generated-p0", r["handler"], r["concurrency"], r["added_ms"])
    busy = r.get("machine_busy_cores")
    seconds = IO_SECONDS.get(r["handler"])
    beyond = 1000 * (r["concurrency"] / r["throughput"] - seconds) if seconds else None
    ms = r.get("request_ms", {})
    trip = ms.get("ReceiveMessage", 0.0) / 1000 + (seconds or 0.0)
    places = r["concurrency"] + default_prefetch(r["concurrency"])
    # Messages whose delete call is out at the ideal rate (Little's law again), and those calls.
    deleting = r["ideal"] * ms.get("DeleteMessageBatch", 0.0) / 1000 if r.get("ideal") else None
    return [
        HANDLER_TEXT.get(r["handler"], r["handler"]),
        str(r["concurrency"]),
        latency_text(r["added_ms"]),
        num(r["efficiency"], 2),
        num(off["efficiency"], 2) if off else "–",
        f"{best['contender']} {num(best['throughput'] / r['ideal'], 2)}" if best and r.get("ideal") else "–",
        f"{num(busy, 2)} of {results['machine']['cores']}" if busy is not None else "–",
        num(r["cpu_cores"], 2),
        num(beyond, 1),
        num(ms.get("ReceiveMessage"), 1),
        f"{num(r['ideal'] * trip, 0)} / {places}" if r.get("ideal") else "–",
        f"{num(deleting, 0)} / {default_prefetch(r['concurrency'])}, "
        f"{num(deleting / MAX_RECEIVE_BATCH, 0)} / {worker_connections(r['concurrency'])}"
        if deleting is not None
        else "–",
    ]


def worker_connections(concurrency: int) -> int:
    """The control client's connections of a one-queue worker at `concurrency`, its other
    settings the defaults the bench runs with, as the engine sizes them."""
    return load_settings({"WORKER_QUEUES": "bench", "WORKER_CONCURRENCY": str(concurrency)}).control_connections


def prefetch_section(results: dict[str, Any]) -> str:
    """The worker with its default prefetch against WORKER_PREFETCH=0, row by row, from
    this one run (their turns alternate with the other contenders')."""
    rows = []
    for added, handler, concurrency in scenarios(results):
        on = find(results, "generated", handler, concurrency, added)
        off = find(results, "generated-p0", handler, concurrency, added)
        if not (on and off):
            continue
        rows.append(
            [
                latency_text(added),
                HANDLER_TEXT.get(handler, handler),
                str(concurrency),
                f"{num(off['throughput'])} → {num(on['throughput'])}",
                f"{num(on['throughput'] / off['throughput'], 2)}x" if off["throughput"] else "–",
                f"{num(off['efficiency'], 2)} → {num(on['efficiency'], 2)}"
                if on.get("efficiency") is not None and off.get("efficiency") is not None
                else "–",
                f"{num(off['requests_per_message'], 3)} → {num(on['requests_per_message'], 3)}",
                f"{num(off['cpu_ms_per_message'], 3)} → {num(on['cpu_ms_per_message'], 3)}",
            ]
        )
    if not rows:
        return ""
    return (
        "\n## Prefetch: off → on (the default), side by side in this run\n\n"
        "`WORKER_PREFETCH=0` (the worker before prefetch: it receives only for free slots) → the default "
        "(up to three times the concurrency, at least 50 and at most 200, held beyond the running jobs, sized "
        "within that by Little's law; a place given back when its delete is sent, up to as many deletes out).\n\n"
        + table(
            [
                "latency",
                "handler",
                "concurrency",
                "msg/s",
                "ratio",
                "efficiency",
                "SQS requests / message",
                "CPU ms / message",
            ],
            rows,
        )
        + "\n"
    )


def floor_method(results: dict[str, Any]) -> str:
    """The Method's entry on the CPU floor: what each row's CPU per message is divided by."""
    beside = [r for r in ok_runs(results) if r["contender"] == "raw"]
    raw = results["ceiling"].get("cpu_ms_per_message") or raw_cpu_ms(results)
    ceiling = f"the cheapest of the ceiling's runs ({num(raw, 3)} ms)"
    if not beside:
        return f"- **CPU over the raw loop's** = a row's CPU per message / {ceiling}.\n"
    at = " and ".join(str(c) for c in sorted({r["concurrency"] for r in beside}))
    processes, threads = beside[0]["processes"], beside[0]["threads"]
    layout = f"{threads} threads" + (" in one process" if processes == 1 else f" in each of {processes} processes")
    return f"""- **CPU over the raw loop's** = a row's CPU per message / the raw batched loop's, the floor. In
  the no-op scenarios at concurrency {at}, at every latency, the raw loop ({layout}, the
  layout cheapest per message in the full plan's ceiling runs) takes its turn in the rotation
  beside the others, with the same latency added, and those rows are divided by that run: two
  figures taken side by side at the same latency drift least with the machine's load, and the
  added latency changes what the loop itself costs. The other rows are divided by {ceiling},
  taken at the emulator's latency. The raw loop is the floor, not a contender: no other table
  lists it.
"""


def method(results: dict[str, Any]) -> list[str]:
    """The Method section: how every figure of the report was taken."""
    plan = results["plan"]
    labels = results["contenders"]
    libs = results["machine"]["libraries"]
    return [
        "## Method\n",
        f"""- **Contenders.** {labels["generated"]}: `python -m {results["package"]} run`, settings from the environment
  (concurrency via `WORKER_CONCURRENCY`, its default prefetch and pollers, 20 s long polls, batched
  deletes), the handler module given by `WORKER_HANDLERS` (`bench/contenders/generated_handlers.py`).
  {labels["generated-p0"]}: the same with `WORKER_PREFETCH=0`.
  {labels["handloop"]}: boto3, receive 10, handle each in turn, `DeleteMessage` each; stops between
  batches on SIGTERM. {labels["threadpool"]}: one boto3 receiver (10 at a time, whenever a thread is
  free) feeding a `ThreadPoolExecutor` of *concurrency* threads, each deleting its message when done.
  {labels["celery"]}: Celery {libs.get("celery")} with kombu {libs.get("kombu")}'s SQS transport, threads pool of
  *concurrency* threads, `task_acks_late` (delete after the handler, like the others); Celery's
  defaults otherwise: prefetch multiplier 4, 10 s long polls, one `DeleteMessage` per message, and
  kombu's `polling_interval` of 1 s, which it also waits whenever its prefetch is full (so at low
  concurrency Celery fetches at most *4 x concurrency* messages a second).
  Celery consumes its own message format: its queues get the same payloads wrapped in the envelope
  Celery itself produces.
- **Same handler.** `bench/contenders/common.py`, for all: parse the JSON body, do the work, append
  the id and time to a completion log. No-op; I/O-like: wait 10 ms, 100 ms or 1 s (`asyncio.sleep`
  in the generated worker's `async def` handler, `time.sleep` in the threaded ones); CPU-like:
  sha256 over 1 MiB ({results["cpu_handler_seconds"] * 1000:.2f} ms here; the generated worker runs it as a plain
  `def`, in its thread pool, as the others run every handler).
- **Counting.** Every contender's endpoint is the engine's `engine/tests/faultproxy.py` proxy
  in front of LocalStack (with its per-client message tracking off, so that it parses nothing);
  SQS requests are the proxy's per-operation counts. Messages processed
  are read from the completion log. No figure comes from a contender's own account.
- **Latency.** Every throughput scenario runs {" and ".join(latency_text(a) for a in latencies(results))}: the
  proxy holds every request for the added round trip (a uniform draw where a spread is given)
  before it forwards it, as SQS in-region takes about 20 ms where LocalStack takes a few.
  The other measurements run at the emulator's latency.
- **Throughput.** For each handler and concurrency, each contender in turn (the order rotates
  every scenario) gets a fresh queue seeded beforehand, straight to LocalStack, with enough
  messages for the whole run; after {plan["warmup"]:g} s of warm-up, a {plan["window"]:g} s window counts
  completions, proxy requests and the process's CPU time (user + system, psutil). The window
  closes early if the backlog runs low, so the queue never runs dry inside it.
- **Efficiency** = throughput / min(concurrency / handler latency, the emulator's ceiling); for the
  CPU-like handler, min(concurrency, cores) / latency. The **ceiling** is a raw batched loop
  (`bench/contenders/raw_loop.py`: processes of threads that receive 10 and `DeleteMessageBatch`
  them, nothing else) through the same proxy in the same run: {num(results["ceiling"]["messages_per_second"])} msg/s, the best of
  {len(results["ceiling"]["runs"])} measurement(s).
{floor_method(results)}- **SQS requests per message** = all requests in the window / messages completed in it (0.2 is
  the floor: one receive of 10 and one batch delete of 10). "At saturation" is the no-op handler.
- **Idle.** An empty queue, concurrency {plan["idle_concurrency"]} (its pollers as listed), {plan["idle_window"]:g} s after start-up
  calls are over: requests per minute, and per poller; resident memory; then SIGTERM and the
  seconds to exit (**idle drain**).
- **Memory under load.** Concurrency {plan["rss_concurrency"]}, {plan["rss_bytes"] // 1024} KiB payloads, {HANDLER_TEXT.get(plan["rss_handler"], plan["rss_handler"])} handler: peak RSS
  (VmHWM) over {plan["rss_seconds"]:g} s of processing.
- **Drain.** Concurrency {plan["drain_concurrency"]}, {plan["drain_handler"]} handler, visibility timeout {plan["drain_visibility"]} s: after the first
  wave completes and the next is half-way, SIGTERM. Reported: seconds from SIGTERM to exit, and
  from the last job's end to exit (the drain's own cost, without the remaining job time);
  messages left in flight on exit (hidden until their visibility timeout although no one works
  on them); and, after waiting that timeout out, messages SQS delivers again although they had
  completed (**redelivered completed**: the handler would run twice), plus any lost.
  **Kill**: the same with SIGKILL, as a crash or an OOM kill; what is left in flight then waits
  out the visibility timeout, and the bound is the running jobs plus what the contender holds
  beyond them (the worker's prefetch cap; 9 of a receive of 10 for the loops; 3 x concurrency
  for Celery's prefetch multiplier of 4).
- **Profile.** py-spy samples the generated worker at concurrency 1 and at saturation, no-op
  handler (and at its worst I/O-like case if one fell short of 0.9): the share of samples by
  function and file.
""",
    ]
