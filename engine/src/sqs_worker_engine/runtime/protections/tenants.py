"""Fair tenants on a standard queue: at most `cap` jobs of one message group run at once in
a pool (WORKER_[QUEUE_<KEY>_]GROUP_CONCURRENCY), so a noisy tenant cannot take every slot.
Admission (admission.py) counts each group's running jobs and passes over a capped
group's waiting messages; this module decides park or give back, and for how long.

On a standard queue the MessageGroupId is the tenant (SQS fair queues). SQS hands out
messages in its own order, and a receive cannot ask for "any tenant but this one", so a
message whose group is at its cap cannot simply be left unreceived. It is either

- parked: its lease kept, waiting in admission's line while other tenants' messages pass
  it, until a job of its group ends (in receive order); or
- given back, once `room` messages are parked: receiving then goes on and reaches the
  other tenants' messages instead of stopping at the held-messages bound. Its delay is
  its place in its group's line at the rate the group drains (cap jobs at a time, each
  as long as jobs here take on average), so a backlog comes back about when it can run,
  not all at once to be given back again. Before any job has ended here, the longest
  running one tells how long jobs take at least.

A give-back is a receive, and every receive counts toward the message's maxReceiveCount.
So fairness spends at most half of that budget (`when_capped`); past it a message is
parked whatever the room, and it never reaches the DLQ for being a busy tenant's. SQS fair
queues already favour quiet tenants when they deliver; the cap keeps one worker's slots
shared even when a receive is mostly one tenant's.
"""

from __future__ import annotations

import math
from typing import Literal

Capped = Literal["park", "give_back"]
# Without a redrive policy nothing counts the receives; fairness still stops giving a
# message back after this many, as if maxReceiveCount were twice it.
RECEIVES_WITHOUT_DLQ = 5
# The longest a message is given back for: a longer backlog is met again in a quarter of
# an hour rather than hidden for hours (parked then, if its receives are spent).
MAX_GIVE_BACK_SECONDS = 900
SHORTEST_JOB_SECONDS = 0.05  # the duration assumed while nothing has ended or run for longer


def when_capped(parked: int, room: int, receive_count: int, max_receive: int | None) -> Capped:
    """What to do with a message whose group is at its cap."""
    budget = RECEIVES_WITHOUT_DLQ if max_receive is None else max_receive // 2
    if parked < room or receive_count > budget:
        return "park"
    return "give_back"


def give_back_delay(line_ends: float, now: float, job_seconds: float, cap: int) -> tuple[int, float]:
    """(seconds to give the message back for, when its group's line now ends): one more
    place in a line that drains `cap` jobs of `job_seconds` at a time."""
    ends = max(now, line_ends) + job_seconds / cap
    return min(MAX_GIVE_BACK_SECONDS, max(1, math.ceil(ends - now))), ends


class Tenants:
    """When each group's given-back messages are due to run (admission.py counts the jobs
    each group runs; this only spaces out the give-backs)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._line_ends: dict[str, float] = {}

    def give_back(self, group: str, now: float, job_seconds: float | None, longest_running: float) -> int:
        """Seconds to give a message of `group` back for (see give_back_delay);
        `job_seconds`: the pool's running average of job durations (None before any ended),
        `longest_running`: how long the longest job running now has run."""
        if len(self._line_ends) > 1000:  # forget lines that have run out
            self._line_ends = {g: t for g, t in self._line_ends.items() if t > now}
        seconds = job_seconds
        if seconds is None:
            seconds = max(SHORTEST_JOB_SECONDS, longest_running)
        delay, self._line_ends[group] = give_back_delay(self._line_ends.get(group, now), now, seconds, self.cap)
        return delay
