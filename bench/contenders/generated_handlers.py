"""The bench handler for the generated worker: `WORKER_HANDLERS=generated_handlers:router`.

The worker's own package is named by BENCH_PACKAGE (it is whatever the service was
generated as). I/O-like and no-op handlers are `async def`, the form the worker runs on its
event loop; the CPU-like handler is a plain `def`, which the worker runs in its thread pool
(sized to the concurrency), as the other contenders run every handler.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from common import KIND, handle, handle_async

runtime = importlib.import_module(os.environ["BENCH_PACKAGE"] + ".runtime")
router = runtime.Router()
QUEUE = os.environ["WORKER_QUEUES"]

if KIND == "cpu":

    @router.handler(QUEUE, payload=str)
    def on_message(job: Any) -> None:
        handle(job.payload)

else:

    @router.handler(QUEUE, payload=str)
    async def on_message(job: Any) -> None:
        await handle_async(job.payload)
