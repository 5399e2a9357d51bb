"""How far ahead of its handler slots a pool receives (WORKER_PREFETCH), by Little's law.

A pool receives only for free places (slots.py). Without prefetch, a slot freed by a job
that ended waits a whole receive round trip for its next job: at SQS's in-region latency
(about 20 ms) a 10 ms handler would run at a third of its concurrency. With prefetch, a
pool keeps in hand as many messages as start during one round trip at full speed:

    concurrency x receive round trip / job time, plus one receive's 10 if they start soon

(the 10: a receive then asks for a whole batch while that many still wait, which halves
the requests per message at low concurrency; "soon": as many jobs start within a second,
so slow jobs are not hoarded from the other replicas for the sake of a request), measured
as it runs (running averages of the receives that came back with all they asked for,
which did not wait in a long poll, held at their mean plus twice their mean deviation so
that a spread of round trips does not leave the slots waiting, and of job durations),
and never more than the cap: WORKER_PREFETCH, by default three times the concurrency, at
least 50 and at most 200 (but never below the concurrency), 0 turns it off. Three times:
10 ms jobs at a 20-30 ms round trip need two to three times the concurrency in hand; the
cap bounds memory and what a SIGKILL strands, the target (usually far less) is what is
held.

A prefetched message is a delivery like any other: leased and heartbeated, counted in
flight and against the held bound, started in the order it was received (FIFO: a group's
order and hold-back are unchanged, a group's next message waits for the one before it),
and released at once on SIGTERM. On SIGKILL it waits out its visibility timeout like the
running ones: at most the cap more messages than without prefetch, and, with prefetch on,
up to the cap more whose deletes were sent but not answered (admission.py).
"""

from __future__ import annotations

# The sizing itself (the default cap, the target) is in base/limits.py, beside the facts it
# rests on: the templates size their scaling targets on what a busy replica holds.
from ...base.limits import default_prefetch, prefetch_target

__all__ = ["SMOOTHING", "SPREAD_DEVIATIONS", "Pace", "default_prefetch", "prefetch_target"]

SMOOTHING = 0.2  # weight of the latest figure in each running average
# The round trip held for: the mean plus this many mean deviations. Held for the mean alone,
# the slots wait whenever a receive takes longer than the mean, about half of them: at
# 10 ms jobs, concurrency 10 and round trips spread over 10-40 ms the benchmark ran at
# 0.84 of its concurrency. Mean plus two deviations covers most of a spread's round trips
# (RFC 6298 holds four for a retransmit timer, where coming too early costs a resend).
SPREAD_DEVIATIONS = 2.0


class Pace:
    """The running averages `prefetch_target` needs."""

    def __init__(self) -> None:
        self.receive_mean: float | None = None
        self.receive_deviation = 0.0  # running mean of |round trip - mean|, as RFC 6298's RTTVAR
        self.job_seconds: float | None = None

    @property
    def receive_seconds(self) -> float | None:
        """The receive round trip to hold for: its mean plus SPREAD_DEVIATIONS deviations."""
        if self.receive_mean is None:
            return None
        return self.receive_mean + SPREAD_DEVIATIONS * self.receive_deviation

    def received(self, seconds: float) -> None:
        """A receive that brought all it asked for took `seconds`, request to response."""
        if self.receive_mean is not None:  # the deviation from the mean before this figure
            self.receive_deviation = _average(self.receive_deviation, abs(seconds - self.receive_mean))
        self.receive_mean = _average(self.receive_mean, seconds)

    def ran(self, seconds: float) -> None:
        self.job_seconds = _average(self.job_seconds, seconds)


def _average(current: float | None, latest: float) -> float:
    return latest if current is None else current + SMOOTHING * (latest - current)
