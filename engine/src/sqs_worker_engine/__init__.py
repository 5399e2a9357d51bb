"""sqs-worker-engine: an asyncio SQS worker that leases, heartbeats, settles and drains.

A service registers its handlers on a `Router` and runs `entry.main(ServiceDefaults(...))`;
the README lists the public API in brief, docs/engine/handlers.md in full.

The names below are imported on first use (PEP 562), so that `sqs_worker_engine.entry`
can catch a stop signal before the heavy dependencies load.

Until 0.6 the engine's modules sat at this level. The old paths that services baked then
import (`MOVED`) are served by one finder, as the moved module itself, with a
DeprecationWarning naming its new path; they go in 1.0 (`REMOVED_IN`). `python -m
sqs_worker_engine.emulators` (and `.localstack`), which their Makefiles run, runs the
emulator's command.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import CodeType, ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

    from .base.errors import DownstreamUnavailable, JobCancelled, NonRetryableError, PayloadError, RetryLater
    from .base.telemetry.metrics import set_db_pool_in_use
    from .handlers.job import Job
    from .handlers.router import Router
    from .process.settings import ConfigError, ServiceDefaults, WorkerConfig, load_settings
    from .process.worker import Worker, WorkerState

_EXPORTS = {
    "ConfigError": "process.settings",
    "DownstreamUnavailable": "base.errors",
    "Job": "handlers.job",
    "JobCancelled": "base.errors",
    "NonRetryableError": "base.errors",
    "PayloadError": "base.errors",
    "RetryLater": "base.errors",
    "Router": "handlers.router",
    "ServiceDefaults": "process.settings",
    "Worker": "process.worker",
    "WorkerConfig": "process.settings",
    "WorkerState": "process.worker",
    "load_settings": "process.settings",
    "set_db_pool_in_use": "base.telemetry.metrics",
}
__all__ = [
    "ConfigError",
    "DownstreamUnavailable",
    "Job",
    "JobCancelled",
    "NonRetryableError",
    "PayloadError",
    "RetryLater",
    "Router",
    "ServiceDefaults",
    "Worker",
    "WorkerConfig",
    "WorkerState",
    "__version__",
    "load_settings",
    "set_db_pool_in_use",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from .base._version import ENGINE_VERSION

        return ENGINE_VERSION
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sqs_worker_engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


# -- the old paths ---------------------------------------------------------------------

REMOVED_IN = "1.0"
# What the services released before 0.6 import at this level (their tests, Makefiles and
# READMEs): old name -> the module it is now. Any other old path is gone.
MOVED = {
    "batches": "sqs_worker_engine.handlers.batches",
    "emulators": "sqs_worker_engine.doubles.emulators",
    "events": "sqs_worker_engine.base.telemetry.events",
    "limits": "sqs_worker_engine.base.limits",
    "localstack": "sqs_worker_engine.doubles.emulators",
    "producer": "sqs_worker_engine.ops.producer",
    "tracing": "sqs_worker_engine.base.telemetry.tracing",
    "vtime": "sqs_worker_engine.doubles.vtime",
}
COMMANDS = frozenset({"emulators", "localstack"})  # `python -m` runs the moved module's main(argv)


class _MovedPaths:
    """Finds and loads MOVED's old paths, and nothing else. Duck-typed: importlib.abc would
    cost a tenth of a second here, before the entry point keeps SIGTERM."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        package, _, old = fullname.rpartition(".")
        if package != __name__ or old not in MOVED:
            return None
        return ModuleSpec(fullname, cast("Loader", self), origin=MOVED[old])

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        """The moved module itself (one module object under both names: a patch made through
        either holds), with the warning, said where the old path is imported."""
        new = MOVED[spec.name.rpartition(".")[2]]
        warnings.warn(
            f"{spec.name} is deprecated: import {new} ({spec.name} goes in {REMOVED_IN})",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the moved module ran as it was imported."""

    def get_code(self, fullname: str) -> CodeType | None:
        """What `python -m <old path>` runs: for COMMANDS, the moved module's command."""
        old = fullname.rpartition(".")[2]
        if old not in COMMANDS:
            return None
        return compile(f"import sys\nfrom {MOVED[old]} import main\nsys.exit(main(sys.argv[1:]))\n", fullname, "exec")


if not any(isinstance(finder, _MovedPaths) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedPaths())
