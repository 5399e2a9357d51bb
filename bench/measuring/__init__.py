"""bench/run.py's harness, a module a job: what a run measures (plan), a contender's process
and the proxy it talks through (processes), the queues, the contenders' starts and their
throughput (harness), what they do idle, loaded and stopped (lifecycle), where the
generated worker's CPU goes (profiling), and the service baked to measure (baking).
bench/versions.py and bench/instructions.py run the same pieces.

The contenders' shared module (contenders/common.py) is imported by name, as the contenders
themselves import it: their folder goes on the path with this package.
"""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent
ROOT = BENCH.parent
ENGINE = ROOT / "engine"  # the worker engine every baked service runs on
CONTENDERS_DIR = BENCH / "contenders"

if str(CONTENDERS_DIR) not in sys.path:
    sys.path.insert(0, str(CONTENDERS_DIR))
