"""Where the generated worker's CPU goes: py-spy samples it at concurrency 1, at saturation
and in its worst I/O-like case (profile_cases), and the collapsed stacks are summed into
shares: self time by library, the worker's own functions inclusive of their calls, the
event-loop callbacks, the hottest functions."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from measuring.harness import Bench
from measuring.plan import IO_HANDLERS, Plan
from measuring.processes import Proc, RunError, completions


def profile(bench: Bench, handler: str, concurrency: int, seconds: float) -> dict[str, Any]:
    """py-spy on the generated worker at saturation: where its CPU time goes."""
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out = bench.work / f"profile-{handler}-c{concurrency}.txt"
    rate = bench.ideal(handler, concurrency)
    count = min(bench.plan.max_seed * 2, math.ceil(rate * (seconds + 6) * 1.3) + 100)
    queue = bench.new_queue(f"profile-{handler}-c{concurrency}")
    info: dict[str, Any] = {"handler": handler, "concurrency": concurrency}
    proc: Proc | None = None
    try:
        bench.seed(queue, count, "generated")
        with bench.proxy() as proxy:
            proc, log = bench.start("generated", queue, handler, concurrency, proxy)
            bench.wait_for(proc, "first completed message", lambda: completions(log) >= 1)
            time.sleep(1.0)
            before, cpu_before, t0 = completions(log), proc.cpu(), time.monotonic()
            cmd = [pyspy, "record", "--pid", str(proc.popen.pid), "--duration", str(int(seconds))]
            cmd += ["--rate", "200", "--format", "raw", "--nonblocking", "--output", str(out)]
            result = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=seconds + 60)
            info["messages"] = completions(log) - before
            info["cpu_cores"] = (proc.cpu() - cpu_before) / (time.monotonic() - t0)
            proc.stop(30)
        if result.returncode != 0 or not out.exists():
            raise RunError(f"py-spy failed: {result.stderr.strip()[-500:]}")
        info.update(summarise_profile(out.read_text(), bench.package))
    except (RunError, subprocess.TimeoutExpired) as exc:
        info["error"] = str(exc)
    finally:
        if proc is not None and proc.alive():
            proc.kill()
        bench.delete_queue(queue[1])
    return info


def profile_cases(results: dict[str, Any], plan: Plan) -> list[tuple[str, int]]:
    """Concurrency 1 and saturation (where CPU per message and requests per message are
    measured), and the I/O case the generated worker fell furthest short in at the
    emulator's latency (profiles run there), if it fell short."""
    cases = [("noop", 1), ("noop", 10 if 10 in plan.concurrencies else plan.concurrencies[-1])]
    worst = min(
        (
            r
            for r in results["runs"]
            if r["contender"] == "generated"
            and r["handler"] in IO_HANDLERS
            and r.get("efficiency")
            and r["added_ms"] == "0"
        ),
        key=lambda r: r["efficiency"],
        default=None,
    )
    if worst is not None and worst["efficiency"] < 0.9:
        cases.append((worst["handler"], worst["concurrency"]))
    return cases


AREAS = {
    "aiobotocore": "aiobotocore",
    "botocore": "botocore",
    "aiohttp": "aiohttp",
    "yarl": "aiohttp",
    "multidict": "aiohttp",
    "asyncio": "asyncio",
    "selectors.py": "sockets and polling",
    "socket.py": "sockets and polling",
    "json": "json",
    "logging": "logging",
    "aws_lambda_powertools": "Powertools (logs)",
    "prometheus_client": "prometheus_client",
    "pydantic": "pydantic",
    "pydantic_core": "pydantic",
    "threading.py": "threading",
}


def frame_file(frame: str) -> str:
    """`fn (pkg/mod.py:12)` -> `pkg/mod.py` (py-spy already gives module-relative paths)."""
    match = re.search(r" \(([^()]*?)(?::\d+)?\)$", frame)
    return match.group(1) if match else ""


ENGINE_PACKAGE = "sqs_worker_engine"
# The engine's command line: its frames hold the event loop (every sample of the main
# thread), so inclusive of their calls they say nothing; left out of the worker's own list.
ENGINE_ENTRY = (f"{ENGINE_PACKAGE}/entry.py", f"{ENGINE_PACKAGE}/cli.py")


def frame_area(frame: str, package: str) -> str:
    path = frame_file(frame)
    # The engine is installed into the service's virtualenv (py-spy gives
    # `sqs_worker_engine/...`); were it run from a checkout, its path would hold the same.
    if path.startswith(f"{ENGINE_PACKAGE}/") or f"/{ENGINE_PACKAGE}/" in path:
        return "worker runtime"
    if path.startswith(f"{package}/") or f"/src/{package}/" in path:
        return "service package"
    if path.startswith(("generated_handlers", "common")):
        return "bench handler"
    return AREAS.get(path.split("/", 1)[0], "other (stdlib, libraries)")


def summarise_profile(raw: str, package: str) -> dict[str, Any]:
    """Collapsed stacks -> shares of samples: self time by library, the worker's own
    functions inclusive of the calls they make, the event-loop callbacks, the hottest lines."""
    total = 0
    own: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    runtime: Counter[str] = Counter()
    callbacks: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        count = int(n)
        total += count
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";") if f]
        own[frames[-1]] += count
        areas[frame_area(frames[-1], package)] += count
        for frame in set(frames):
            if frame_area(frame, package) == "worker runtime" and not frame_file(frame).endswith(ENGINE_ENTRY):
                runtime[frame] += count
        # What the event loop was running: the frame under the innermost Handle._run.
        loop = max((i for i, f in enumerate(frames) if f.startswith("Handle._run ")), default=None)
        if loop is not None and loop + 1 < len(frames):
            callbacks[frames[loop + 1]] += count
        elif "select" in frames[-1].lower():
            callbacks["(polling for I/O)"] += count
        else:
            callbacks["(the event loop itself)" if loop is not None or "_run_once" in stack else frames[-1]] += count

    def top(counter: Counter[str], n: int) -> list[dict[str, Any]]:
        return [{"frame": k, "share": v / total} for k, v in counter.most_common(n)] if total else []

    return {
        "samples": total,
        "areas": top(areas, 12),
        "runtime": top(runtime, 15),
        "callbacks": top(callbacks, 12),
        "self": top(own, 12),
    }
