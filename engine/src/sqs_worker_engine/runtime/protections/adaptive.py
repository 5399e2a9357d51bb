"""Adaptive concurrency: how many handlers of a queue may run at once, found from the
downstream's latency rather than guessed (WORKER_ADAPTIVE_CONCURRENCY).

A downstream has a knee: up to some number of calls in flight each takes about as long as
alone; past it they queue inside it, every call slows, and more concurrency brings less
throughput, not more. The limit here looks for that knee from the handlers' durations, in
the manner of Netflix's concurrency-limits (Gradient2, Vegas, AIMD) and Envoy's adaptive
concurrency filter, between a floor and the configured concurrency (the ceiling):

- Samples are gathered in windows of at least the limit in use (and MIN_WINDOW) jobs, and
  of enough jobs for the window's mean to stand within about 5% of the true latency when
  durations vary by themselves (PRECISION): noisy durations make windows longer, not the
  limit lower. A job that started before the limit last moved says nothing about the new
  limit, and is left out (its start is `now - latency`).
- A window's latency is its samples' mean; the baseline is the smallest window latency
  of the last BASELINE_WINDOWS windows, of those long enough for the spread seen since:
  the downstream's latency unloaded, which follows it when it really gets slower for
  everyone (once every remembered window is slower).
- A window within TOLERANCE of the baseline grows the limit: doubling (slow start) up to
  where trouble last showed (below), then by one a window (additive increase); but
  only if the window used at least half of the limit (as Gradient2 does): a quiet queue's
  fast jobs say nothing about more concurrency, and a limit grown idle to the ceiling would
  meet the next backlog with the ceiling.
- A window above it shrinks the limit by the gradient, TOLERANCE x baseline / latency,
  at most by half; the limit it reaches is where growth turns additive.
- A timeout or DownstreamUnavailable (outcome `timeout`, `deferred`) halves the limit at
  once, once per burst: the ones that started before the limit last shrank are not
  counted again. The first of an episode (no window closed since) also sets where growth
  turns additive, at that half, as TCP does on a loss: a downstream that hangs past its
  capacity is not met with slow start's doubling again and again. The rest of an episode
  (an outage) takes the limit down to the floor without moving that point, so once the
  downstream answers the limit doubles back up to it.
- A failed job's duration is no measure of the downstream's load (a refused connection
  fails in a millisecond and would drag the baseline down): only successes are latencies.

Pure: time is given (`now`), nothing is read from a clock, so tests and the model drive it
sample by sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...handlers.outcomes import Outcome

TOLERANCE = 1.25  # a window within 25% of the baseline counts as the downstream unloaded
MIN_GRADIENT = 0.5  # one window shrinks the limit to half at most
BACKOFF = 0.5  # a timeout or DownstreamUnavailable halves the limit
MIN_WINDOW = 5  # samples in a window at least, so that one odd job does not move the limit
BASELINE_WINDOWS = 30  # windows the baseline remembers
# Jobs' durations vary by themselves (payloads, the downstream's own noise): a window holds
# enough of them for its mean to stand within about PRECISION of the true latency (one
# standard error: spread / jobs <= PRECISION^2), or noise reads as load and the limit
# sinks. Up to MAX_WINDOW jobs.
PRECISION = 0.05
MAX_WINDOW = 1000
SPREAD_WEIGHT = 0.2  # the latest window's share of the spread estimate
# A move worth a log line: by 10% and 2 handlers since the last one told (at a knee of 6
# the limit goes 6, 7, 6: probing, not news), or onto the floor or the ceiling.
TELL_CHANGE = 0.10
TELL_LEAST = 2

# What an ending says about the downstream: a latency, overload, or nothing (the handler
# never ran to an answer: released at shutdown, its lease lost, a control message).
LATENCY: frozenset[Outcome] = frozenset({"success"})
OVERLOAD: frozenset[Outcome] = frozenset({"timeout", "deferred"})


@dataclass
class Window:
    """Durations of one window, as running sums: their mean and relative spread."""

    n: int = 0
    total: float = 0.0
    squares: float = 0.0
    busiest: int = 0  # the most jobs running as one of them ended

    def add(self, seconds: float, running: int) -> None:
        self.n += 1
        self.total += seconds
        self.squares += seconds * seconds
        self.busiest = max(self.busiest, running)

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else 0.0

    @property
    def spread(self) -> float:
        """The squared coefficient of variation (variance / mean^2); 0 below two samples."""
        if self.n < 2 or self.total <= 0:
            return 0.0
        variance = max(0.0, (self.squares - self.total * self.total / self.n) / (self.n - 1))
        square = self.mean**2
        return variance / square if square > 0 else 0.0  # durations too small to square: no spread


@dataclass
class Limit:
    """The limit of handlers running at once for one queue. `sample` after every job."""

    floor: int
    ceiling: int
    value: float = field(init=False)  # the limit, a fraction kept so that small moves add up
    latency: float | None = field(init=False, default=None)  # the latest window's
    baseline: float | None = field(init=False, default=None)
    _threshold: float = field(init=False)  # slow start below it, additive growth above
    _moved: float = field(init=False, default=float("-inf"))  # when the limit last moved
    _shrunk: float = field(init=False, default=float("-inf"))  # when it last shrank
    _window: Window = field(init=False, default_factory=Window)
    _spread: float = field(init=False, default=0.0)  # jobs' squared coefficient of variation
    _overloaded: bool = field(init=False, default=False)  # timeouts met since the last window
    _history: list[tuple[float, int]] = field(init=False, default_factory=list)  # recent windows: latency, jobs

    def __post_init__(self) -> None:
        if not 1 <= self.floor <= self.ceiling:
            raise ValueError(f"the floor must be within 1..ceiling, got floor {self.floor}, ceiling {self.ceiling}")
        self.value = float(self.floor)
        self._threshold = float(self.ceiling)

    @property
    def current(self) -> int:
        """The limit in use: whole handlers, within floor..ceiling."""
        return max(self.floor, min(self.ceiling, int(self.value)))

    def sample(self, latency: float, outcome: Outcome, now: float, running: int | None = None) -> int:
        """One job ended at `now` after `latency` seconds with `outcome`, `running` jobs
        running as it ended, itself included (None: as many as the limit): the limit in use."""
        started = now - latency
        if outcome in OVERLOAD and started >= self._shrunk:
            if not self._overloaded:
                self._threshold = max(float(self.floor), self.value * BACKOFF)
                self._overloaded = True
            self._move(self.value * BACKOFF, now)
        elif outcome in LATENCY and started >= self._moved:  # else it ran under another limit
            self._window.add(latency, self.current if running is None else running)
            if self._window.n >= self._needed(max(self._spread, self._window.spread)):
                self._close_window(now)
        return self.current

    @property
    def window_size(self) -> int:
        """Jobs a window holds now (at least): the limit in use, MIN_WINDOW, and enough for
        PRECISION at the spread seen so far."""
        return self._needed(self._spread)

    def _needed(self, spread: float) -> int:
        return max(MIN_WINDOW, self.current, min(MAX_WINDOW, math.ceil(spread / PRECISION**2)))

    def _close_window(self, now: float) -> None:
        window, self._window = self._window, Window()
        self._overloaded = False
        latency = window.mean
        self._spread += SPREAD_WEIGHT * (window.spread - self._spread) if self._history else window.spread
        self._history = [*self._history[-(BASELINE_WINDOWS - 1) :], (latency, window.n)]
        self.latency = latency
        # A window too short for the spread known now (an early one, before the spread was
        # seen: five fast jobs of a mixed queue) is no baseline: it would hold the limit down
        # for BASELINE_WINDOWS windows. Within twice PRECISION is enough here.
        trusted = [mean for mean, n in self._history if self._spread / n <= (2 * PRECISION) ** 2]
        self.baseline = baseline = min(trusted, default=latency)
        if latency <= TOLERANCE * baseline:
            if 2 * window.busiest < self.current:
                return  # the limit was not used: no sign the downstream takes more
            grown = self.value * 2 if self.value < self._threshold else self.value + 1
            self._move(min(grown, max(self._threshold, self.value + 1)), now)
        else:
            self._move(self.value * max(MIN_GRADIENT, TOLERANCE * baseline / latency), now)
            self._threshold = self.value

    def _move(self, value: float, now: float) -> None:
        before = self.current
        self.value = max(float(self.floor), min(float(self.ceiling), value))
        if self.current != before:  # only whole handlers change what the samples measure
            self._moved = now
            self._window = Window()
            if self.current < before:
                self._shrunk = now


def worth_telling(told: int, limit: int, floor: int, ceiling: int) -> bool:
    """Whether a move from the limit last logged (`told`) to `limit` is worth a log line:
    by TELL_CHANGE and TELL_LEAST or more, or onto the floor or the ceiling. Not every move."""
    if limit == told:
        return False
    return limit in (floor, ceiling) or abs(limit - told) >= max(TELL_LEAST, TELL_CHANGE * told)
