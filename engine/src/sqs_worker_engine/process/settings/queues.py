"""Per-queue settings: `WORKER_QUEUE_<KEY>_<SETTING>` over the process-wide values, each
read by the reader its global one uses, each problem named by the variable that made it.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass

from ...base.limits import MAX_RECEIVE_BATCH, MAX_VISIBILITY_SECONDS, default_prefetch
from ...runtime.protections.throttle import window_of
from .fields import (
    FALSE_WORDS,
    MAX_POLLERS,
    NOT_WHOLE,
    TRUE_WORDS,
    Settings,
    queue_env_key,
    rate_per_second,
    whole_number,
)
from .redaction import http_url_problem, redact_url

QUEUE_OVERRIDE_PREFIX = "WORKER_QUEUE_"
QUEUE_OVERRIDES = (
    "URL",
    "CONCURRENCY",
    "JOB_TIMEOUT_MS",
    "VISIBILITY_TIMEOUT_SECONDS",
    "POLLERS",
    "RATE_LIMIT",
    "RATE_BURST",
    "GROUP_CONCURRENCY",
    "PREFETCH",
    "ADAPTIVE_CONCURRENCY",
    "CONCURRENCY_FLOOR",
    "WEIGHT",
)


@dataclass(frozen=True)
class QueueSettings:
    """What one queue's pool runs with, after per-queue overrides."""

    name: str
    url: str | None
    concurrency: int
    job_timeout_ms: int
    visibility_timeout_seconds: int
    pollers: int
    rate_limit: float | None = None  # jobs started per second (WORKER_[QUEUE_<KEY>_]RATE_LIMIT)
    rate_burst: int = 1  # starts the rate limit lets go together (WORKER_[QUEUE_<KEY>_]RATE_BURST)
    group_concurrency: int | None = None  # jobs of one group at once (WORKER_[QUEUE_<KEY>_]GROUP_CONCURRENCY)
    prefetch: int = 0  # most messages held beyond the concurrency (WORKER_[QUEUE_<KEY>_]PREFETCH)
    adaptive: bool = False  # the concurrency is a ceiling (WORKER_[QUEUE_<KEY>_]ADAPTIVE_CONCURRENCY)
    concurrency_floor: int = 1  # the adaptive limit's floor (WORKER_[QUEUE_<KEY>_]CONCURRENCY_FLOOR)
    weight: int = 1  # its share of the shared budget under weighted priority (WORKER_QUEUE_<KEY>_WEIGHT)

    @property
    def fifo(self) -> bool:
        return self.name.endswith(".fifo")

    @property
    def job_timeout(self) -> float:
        return self.job_timeout_ms / 1000


def queue_overrides(
    env: Mapping[str, str], settings: Settings, problems: list[tuple[str, str]]
) -> dict[str, dict[str, str]]:
    """Each queue's WORKER_QUEUE_<KEY>_<SETTING> values, by queue name; the ones naming no
    queue, or no setting, are problems."""
    by_key = {queue_env_key(name): name for name in settings.queues}
    overrides: dict[str, dict[str, str]] = {name: {} for name in settings.queues}
    for var, value in env.items():
        if not var.startswith(QUEUE_OVERRIDE_PREFIX):
            continue
        rest = var[len(QUEUE_OVERRIDE_PREFIX) :]
        # GROUP_CONCURRENCY ends in CONCURRENCY: of the readings, the one naming a queue wins.
        readings = [(rest[: -len(s) - 1], s) for s in QUEUE_OVERRIDES if rest.endswith("_" + s)]
        known = [(k, s) for k, s in readings if k in by_key]
        if not readings:
            known_vars = [f"{QUEUE_OVERRIDE_PREFIX}{k}_{s}" for k in by_key for s in QUEUE_OVERRIDES]
            close = difflib.get_close_matches(var, known_vars, n=1, cutoff=0.8)
            hint = f"; did you mean {close[0]}?" if close else ""
            problems.append((var, f"unknown per-queue setting; use one of {', '.join(QUEUE_OVERRIDES)}{hint}"))
            continue
        if len(known) > 1:
            problems.append((var, f"ambiguous: names {' and '.join(f'{s} of {by_key[k]}' for k, s in known)}"))
            continue
        # Naming no queue: the longest setting read is the one meant (X_GROUP_CONCURRENCY: X's cap).
        key, setting = known[0] if known else max(readings, key=lambda r: len(r[1]))
        if key not in by_key:
            problems.append((var, f"no queue with key {key!r} in WORKER_QUEUES ({', '.join(settings.queues)})"))
            continue
        overrides[by_key[key]][setting] = value
    return overrides


class QueueReader:
    """One queue's settings: its overrides over the worker-wide values, each problem
    named by the variable that made it (in the order the checks run)."""

    def __init__(self, name: str, own: Mapping[str, str], settings: Settings, problems: list[tuple[str, str]]):
        self.name = name
        self.own = own
        self.settings = settings
        self.problems = problems
        self.prefix = f"{QUEUE_OVERRIDE_PREFIX}{queue_env_key(name)}_"

    def number(self, setting: str, default: int, low: int, high: int) -> int:
        return _int(self.own, setting, self.prefix, default, low, high, self.problems)

    def refuse(self, var: str, problem: str) -> None:
        self.problems.append((var, problem))

    def read(self, base_concurrency: int) -> QueueSettings:
        own, prefix, settings = self.own, self.prefix, self.settings
        concurrency = self.number("CONCURRENCY", base_concurrency, 1, 1000)
        weight = self._weight()
        job_timeout_ms = self.number("JOB_TIMEOUT_MS", settings.job_timeout_ms, 100, MAX_VISIBILITY_SECONDS * 1000)
        visibility = self.number(
            "VISIBILITY_TIMEOUT_SECONDS", settings.visibility_timeout_seconds, 2, MAX_VISIBILITY_SECONDS
        )
        default_ahead = default_prefetch(concurrency) if settings.prefetch is None else settings.prefetch
        prefetch = self.number("PREFETCH", default_ahead, 0, 10_000)
        pollers = self._pollers(concurrency, prefetch)
        url = own.get("URL") or None
        if url is not None and http_url_problem(url):
            self.refuse(prefix + "URL", f"{redact_url(url)!r} is not a queue URL")
        rate, burst = self._rate()
        # FIFO runs one job per group anyway; at or above the concurrency the cap never bites.
        group_cap = self.number("GROUP_CONCURRENCY", settings.group_concurrency or 0, 1, 1000) or None
        if self.name.endswith(".fifo") or (group_cap is not None and group_cap >= concurrency):
            group_cap = None
        adaptive, least = self._adaptive(concurrency)
        return QueueSettings(
            self.name,
            url,
            concurrency,
            job_timeout_ms,
            visibility,
            pollers,
            rate,
            burst,
            group_cap,
            prefetch,
            adaptive,
            least,
            weight,
        )

    def _weight(self) -> int:
        weight = self.number("WEIGHT", 1, 1, 1000)
        if "WEIGHT" in self.own and self.settings.shared_concurrency is None:
            self.refuse(
                self.prefix + "WEIGHT", "a weight is a share of a shared budget: set WORKER_SHARED_CONCURRENCY too"
            )
        elif "WEIGHT" in self.own and self.settings.priority == "strict":
            self.refuse(
                self.prefix + "WEIGHT",
                "strict priority reads no weights (the order of WORKER_QUEUES decides): "
                "drop it, or set WORKER_PRIORITY=weighted",
            )
        return weight

    def _pollers(self, concurrency: int, prefetch: int) -> int:
        # One long poll returns at most 10 messages, so a pool needs ceil(places / 10)
        # pollers to keep every place filled (the concurrency, plus the prefetch).
        # Each poller holds a connection; past MAX_POLLERS the default is refused, not clamped,
        # naming what made it (a typo such as WORKER_PREFETCH=10000 would otherwise open 1,001).
        places = concurrency + prefetch
        needed = math.ceil(places / MAX_RECEIVE_BATCH)
        if not self.settings.pollers and "POLLERS" not in self.own and needed > MAX_POLLERS:
            self.refuse(
                self.prefix + "PREFETCH" if "PREFETCH" in self.own else "WORKER_PREFETCH",
                f"concurrency {concurrency} + prefetch {prefetch} would need {needed} pollers, more than "
                f"{MAX_POLLERS}: lower the prefetch (or the concurrency), or set WORKER_POLLERS",
            )
            needed = MAX_POLLERS
        return self.number("POLLERS", self.settings.pollers or needed, 1, MAX_POLLERS)

    def _rate(self) -> tuple[float | None, int]:
        """The rate limit (starts a second) and its burst."""
        rate_text = self.own.get("RATE_LIMIT", self.settings.rate_limit or "")
        rate: float | None = None
        if rate_text:
            try:
                rate = rate_per_second(rate_text)
            except ValueError as exc:
                self.refuse(self.prefix + "RATE_LIMIT", str(exc))
        burst = self.number("RATE_BURST", self.settings.rate_burst or 1, 1, 1_000_000)
        burst_var = self.prefix + "RATE_BURST" if "RATE_BURST" in self.own else "WORKER_RATE_BURST"
        if burst > 1 and not rate_text:
            self.refuse(burst_var, "a burst is of a rate limit: set WORKER_RATE_LIMIT too")
        elif rate is not None and burst > window_of(rate)[0]:
            self.refuse(
                burst_var, f"{burst} is more starts at once than {rate_text} allows in a window ({window_of(rate)[0]})"
            )
        return rate, burst

    def _adaptive(self, concurrency: int) -> tuple[bool, int]:
        """Whether the concurrency adapts, and its floor."""
        own, prefix = self.own, self.prefix
        adaptive = _bool(own, "ADAPTIVE_CONCURRENCY", prefix, self.settings.adaptive_concurrency, self.problems)
        least = self.number("CONCURRENCY_FLOOR", self.settings.concurrency_floor, 1, 1000)
        if adaptive and least > concurrency:
            names = [prefix + s if s in own else "WORKER_" + s for s in ("CONCURRENCY_FLOOR", "CONCURRENCY")]
            self.refuse(
                names[0],
                f"the adaptive concurrency's floor {least} is above {self.name}'s concurrency {concurrency} "
                f"({names[1]}, the ceiling)",
            )
        return adaptive, least


def _int(
    own: Mapping[str, str],
    setting: str,
    prefix: str,
    default: int,
    low: int,
    high: int,
    problems: list[tuple[str, str]],
) -> int:
    raw = own.get(setting)
    if raw is None:
        return default
    try:
        value = whole_number(raw)
    except ValueError:
        problems.append((prefix + setting, f"{NOT_WHOLE} (got {raw!r})"))
        return default
    if not low <= value <= high:
        problems.append((prefix + setting, f"{value} is outside {low}..{high}"))
        return default  # not a value the checks after this one would name again
    return value


def _bool(own: Mapping[str, str], setting: str, prefix: str, default: bool, problems: list[tuple[str, str]]) -> bool:
    raw = own.get(setting)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word not in TRUE_WORDS | FALSE_WORDS:
        problems.append((prefix + setting, f"{raw!r} is not true or false"))
        return default
    return word in TRUE_WORDS
