"""Service defaults whose import takes a while (pydantic and friends, on a busy machine), so
a test can signal a service still building its defaults. Writes TEST_IMPORT_MARKER first."""

from __future__ import annotations

import os
import time
from pathlib import Path

Path(os.environ["TEST_IMPORT_MARKER"]).write_text("importing")
time.sleep(float(os.environ.get("TEST_IMPORT_SECONDS", "3")))

from sqs_worker_engine import ServiceDefaults  # noqa: E402 - imported after the pause on purpose

SERVICE = ServiceDefaults(name="slow-service", environ={"WORKER_HANDLERS": "tests.integration.app:router"})
