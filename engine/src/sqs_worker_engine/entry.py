"""The process entry point: `sys.exit(entry.main("my_service.service:SERVICE"))` in a
service's `__main__`.

A platform may stop a task at any moment, also while Python is still importing the
worker's dependencies (a rolling deploy replacing a replica that has just started). With
Python's default handler that SIGTERM kills the process with -15 before it could say
anything. So the very first thing this module does, before the heavy imports, is to keep
SIGTERM and SIGINT; the worker acts on a kept signal as soon as it can (it stops without
receiving anything and exits 0); for any other command the signal acts as usual once
the command line is parsed.
Standard library only (signals.py), and imported without the package's other modules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .process.host.signals import keep_stop_signals

if TYPE_CHECKING:
    from .process.settings import ServiceDefaults


def main(service: ServiceDefaults | str | None = None, argv: Sequence[str] | None = None) -> int:
    """Keep stop signals, then import and run the CLI; returns the exit code.

    `service` may be given as "package.module:NAME" so that building it (pydantic and the
    rest) also happens after the signals are kept: that is what a service's `__main__`
    passes."""
    keep_stop_signals()
    from .cli import main as cli_main

    if isinstance(service, str):
        service = _resolve(service)
    return cli_main(service, argv)


def _resolve(reference: str) -> ServiceDefaults:
    import importlib

    from .process.settings import ServiceDefaults

    module_name, _, attribute = reference.partition(":")
    value = getattr(importlib.import_module(module_name), attribute)
    if not isinstance(value, ServiceDefaults):
        raise TypeError(f"{reference} is a {type(value).__name__}, not ServiceDefaults")
    return value
