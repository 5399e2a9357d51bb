"""The figures of a chaos run, so they can be quoted: written as JSON to the path in
CHAOS_REPORT (if set) after every section, and summed up in one line at the end of the
session (see conftest.py)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

FIGURES: dict[str, dict[str, Any]] = {}


def scale() -> str:
    """`CHAOS_SCALE=full`: thousands of messages and many more rounds; anything else: the
    size that fits the everyday suite."""
    return "full" if os.environ.get("CHAOS_SCALE", "").lower() == "full" else "default"


def add(section: str, **figures: Any) -> None:
    FIGURES.setdefault(section, {}).update(figures)
    path = os.environ.get("CHAOS_REPORT")
    if path:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps({"scale": scale(), "sections": FIGURES, "totals": totals()}, indent=2) + "\n")


def totals() -> dict[str, Any]:
    sums: Counter[str] = Counter()
    duplicated: Counter[str] = Counter()
    faults: Counter[str] = Counter()
    recovery = []
    for figures in FIGURES.values():
        for key in ("sent", "completed", "lost", "malformed_inputs_tried"):
            sums[key] += int(figures.get(key, 0))
        duplicated.update(figures.get("duplicated", {}))
        faults.update(figures.get("faults_injected", {}))
        if "outage_recovery_seconds" in figures:
            recovery.append(figures["outage_recovery_seconds"])
    return {
        **dict(sums),
        "duplicated": dict(duplicated),
        "faults_injected": dict(faults),
        "outage_recovery_seconds": recovery,
    }


def summary() -> str:
    t = totals()
    dup = ", ".join(f"{k}={v}" for k, v in sorted(t["duplicated"].items())) or "none"
    faults = sum(t["faults_injected"].values())
    recovery = "/".join(f"{s:.1f}s" for s in t["outage_recovery_seconds"]) or "-"
    return (
        f"chaos ({scale()}): sent={t.get('sent', 0)} completed={t.get('completed', 0)} lost={t.get('lost', 0)} "
        f"duplicated[{dup}] faults_injected={faults} malformed_inputs={t.get('malformed_inputs_tried', 0)} "
        f"outage_recovery={recovery} sections={','.join(FIGURES)}"
    )
