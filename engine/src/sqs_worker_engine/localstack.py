"""The emulator finder/starter under its first name: `sqs_worker_engine.doubles.emulators` is the module
(LocalStack or moto's server, chosen by SQS_EMULATOR). Kept so that `import localstack` and
`python -m sqs_worker_engine.localstack start|stop|run -- CMD` keep working."""

from __future__ import annotations

import sys

from .doubles.emulators import (
    DEFAULT_PORT,
    DEFAULT_URL,
    HOST_PACKAGES,
    IMAGE,
    SOURCES,
    VERSION,
    Emulator,
    EmulatorError,
    LocalStack,
    LocalStackError,
    chosen,
    chosen_port,
    ensure,
    healthy,
    host_python,
    identify,
    main,
    start_moto,
    start_private,
)

__all__ = [
    "DEFAULT_PORT",
    "DEFAULT_URL",
    "HOST_PACKAGES",
    "IMAGE",
    "SOURCES",
    "VERSION",
    "Emulator",
    "EmulatorError",
    "LocalStack",
    "LocalStackError",
    "chosen",
    "chosen_port",
    "ensure",
    "healthy",
    "host_python",
    "identify",
    "main",
    "start_moto",
    "start_private",
]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
