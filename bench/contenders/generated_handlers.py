"""The bench handler for the generated worker: `WORKER_HANDLERS=generated_handlers:router`.

The worker runs as the baked service (`python -m <package> run`, the package named by
BENCH_PACKAGE), on the engine it depends on; the handlers are registered on the engine's
Router, as a service's own handlers.py does. I/O-like and no-op handlers are `async def`,
the form the worker runs on its event loop; the CPU-like handler is a plain `def`, which the
worker runs in its thread pool (sized to the concurrency), as the other contenders run every
handler.
"""

from __future__ import annotations

import os
from typing import Any

from common import KIND, handle, handle_async
from sqs_worker_engine import Router

router = Router()
QUEUE = os.environ["WORKER_QUEUES"]

if KIND == "cpu":

    @router.handler(QUEUE, payload=str)
    def on_message(job: Any) -> None:
        handle(job.payload)

else:

    @router.handler(QUEUE, payload=str)
    async def on_message(job: Any) -> None:
        await handle_async(job.payload)
