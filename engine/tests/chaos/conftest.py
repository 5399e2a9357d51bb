"""Chaos fixtures: a seeded fault proxy, the completions database, and the summary line."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..faultproxy import FaultProxy
from . import handlers, report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if f"{os.sep}chaos{os.sep}" in str(item.path):
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.chaos)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if report.FIGURES:
        terminalreporter.write_line(report.summary())


@pytest.fixture
def seed() -> int:
    """CHAOS_SEED replays a run: the fault proxy's draws and the moments of every stop."""
    value = int(os.environ.get("CHAOS_SEED") or random.randrange(1 << 30))
    print(f"CHAOS_SEED={value}")  # shown with a failure, to replay it
    return value


@pytest.fixture
def proxy(localstack_endpoint: str, seed: int) -> Iterator[FaultProxy]:
    p = FaultProxy(localstack_endpoint, seed=seed).start()
    yield p
    p.stop()


@pytest.fixture
def chaos_db(tmp_path: Path) -> Path:
    path = tmp_path / "completions.sqlite"
    handlers.create(str(path))
    return path
