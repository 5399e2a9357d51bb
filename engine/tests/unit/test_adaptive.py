"""The adaptive limit (adaptive.py) alone, sample by sample on a clock the tests hold, and
admission's slots under a limit that moves. The wiring through the whole worker is in
model/test_adaptive.py; the benchmark at a downstream's knee in bench/adaptive.py."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sqs_worker_engine.handlers.outcomes import OUTCOMES, Outcome
from sqs_worker_engine.runtime.admission.admission import Admission, Ticket
from sqs_worker_engine.runtime.protections.adaptive import BASELINE_WINDOWS, MIN_WINDOW, Limit, worth_telling

BASE = 0.05  # seconds a call takes while the downstream is within its capacity


def knee(capacity: int, base: float = BASE) -> Callable[[int], float]:
    """A downstream of `capacity`: base latency up to it, quadratically slower beyond."""
    return lambda inflight: base * max(1.0, (inflight / capacity) ** 2)


class Rounds:
    """Drives a limit as a pool would with a backlog: every round, `current` jobs start
    together and end together after the downstream's latency at that many in flight."""

    def __init__(self, limit: Limit) -> None:
        self.limit = limit
        self.now = 0.0
        self.path: list[int] = []

    def run(self, rounds: int, latency: Callable[[int], float], outcome: Outcome = "success") -> list[int]:
        for _ in range(rounds):
            n = self.limit.current
            seconds = latency(n)
            self.now += seconds
            for _ in range(n):
                self.limit.sample(seconds, outcome, self.now)
            self.path.append(self.limit.current)
        return self.path[-rounds:]


def test_it_starts_at_the_floor_and_grows_to_the_ceiling_while_latency_holds() -> None:
    limit = Limit(floor=2, ceiling=64)
    assert limit.current == 2
    path = Rounds(limit).run(40, lambda n: BASE)
    assert path == sorted(path), f"never shrinks at a steady latency: {path}"
    assert path[-1] == 64, path
    assert sorted(set(path)) == [2, 4, 8, 16, 32, 64], f"slow start: doubling a window, not +1 steps: {path}"


def test_it_settles_at_the_downstreams_knee() -> None:
    """Capacity 6: the limit finds 6-7 from the floor and stays there."""
    rounds = Rounds(Limit(floor=1, ceiling=48))
    settled = rounds.run(200, knee(6))[-150:]
    assert set(settled) <= {6, 7}, f"settled between {min(settled)} and {max(settled)}: {rounds.path[:30]}"
    assert settled.count(6) >= len(settled) // 3, "it does not sit past the knee"


def test_it_backs_off_when_latency_climbs() -> None:
    limit = Limit(floor=1, ceiling=100)
    rounds = Rounds(limit)
    rounds.run(20, lambda n: BASE)
    assert limit.current == 100
    shrunk = rounds.run(1, lambda n: 2 * BASE)[0]
    # Shrunk by the gradient: tolerance x baseline / latency = 1.25 x 0.05 / 0.1.
    assert shrunk == 62, shrunk
    assert rounds.run(1, lambda n: 10 * BASE)[0] == 31, "at most by half a window"


class NoisyRounds(Rounds):
    """As Rounds, each job's duration varied by `noise(rng)`, a factor around 1."""

    def __init__(self, limit: Limit, noise: Callable[[random.Random], float]) -> None:
        super().__init__(limit)
        self.noise = noise
        self.rng = random.Random(7)

    def run(self, rounds: int, latency: Callable[[int], float], outcome: Outcome = "success") -> list[int]:
        for _ in range(rounds):
            n = self.limit.current
            durations = sorted(latency(n) * self.noise(self.rng) for _ in range(n))
            for seconds in durations:
                self.limit.sample(seconds, outcome, self.now + seconds)
            self.now += durations[-1]
            self.path.append(self.limit.current)
        return self.path[-rounds:]


@pytest.mark.parametrize(
    ("name", "noise"),
    [
        pytest.param(name, noise, id=name)
        for name, noise in [
            ("lognormal, sigma 0.5", lambda rng: rng.lognormvariate(-0.125, 0.5)),
            ("lognormal, sigma 1", lambda rng: rng.lognormvariate(-0.5, 1.0)),
            ("two kinds of job, 1 and 20", lambda rng: 1.0 if rng.random() < 0.5 else 20.0),
        ]
    ],
)
def test_noisy_durations_make_windows_longer_not_the_limit_lower(
    name: str, noise: Callable[[random.Random], float]
) -> None:
    """Durations that vary by themselves are no load: the limit still settles near the
    knee (the mean of a window is held within about 5% by taking more jobs). Before
    windows grew with the spread, sigma 0.5 sank the limit to 1-2."""
    limit = Limit(floor=1, ceiling=48)
    path = NoisyRounds(limit, noise).run(4000, knee(6))
    settled = path[2000:]
    mean = sum(settled) / len(settled)
    assert 5 <= mean <= 7.5, f"{name}: the limit averaged {mean:.2f} ({min(settled)}..{max(settled)})"
    assert limit.window_size > 6, "the windows grew with the spread"


def test_a_lucky_first_window_is_no_baseline() -> None:
    """A mixed queue (jobs of 1 and 20 times the base) whose first five jobs happen to be
    the fast kind: that window, too short for the spread seen later, must not stand as the
    baseline, or the limit sits at the floor for BASELINE_WINDOWS long windows."""
    first = iter([1.0] * MIN_WINDOW)

    def noise(rng: random.Random) -> float:
        return next(first, 1.0 if rng.random() < 0.5 else 20.0)

    limit = Limit(floor=1, ceiling=48)
    path = NoisyRounds(limit, noise).run(3000, knee(6))
    settled = path[1500:]
    assert 5 <= sum(settled) / len(settled) <= 7.5, f"averaged {sum(settled) / len(settled):.2f}"


def test_a_quiet_queue_does_not_grow_the_limit_it_does_not_use() -> None:
    """Fast jobs while one runs at a time say nothing about eight: the limit stays, or it
    would reach the ceiling while idle and meet the next backlog with it."""
    limit = Limit(floor=8, ceiling=48)
    for i in range(500):
        limit.sample(BASE, "success", i * 1.0, running=1)
    assert limit.current == 8
    for i in range(500, 520):
        limit.sample(BASE, "success", i * 1.0, running=4)  # half the limit used: it may grow
    assert limit.current == 16


@pytest.mark.parametrize("outcome", ["timeout", "deferred"])
def test_a_timeout_or_downstream_unavailable_halves_it_once_per_burst(outcome: Outcome) -> None:
    """`deferred` is DownstreamUnavailable's outcome. The jobs that started before the
    halving are the same burst: they do not halve it again."""
    limit = Limit(floor=1, ceiling=64)
    rounds = Rounds(limit)
    rounds.run(20, lambda n: BASE)
    assert limit.current == 64
    now = rounds.now + 1.0
    assert limit.sample(1.0, outcome, now) == 32
    assert limit.sample(1.5, outcome, now + 0.1) == 32, "started before the halving: the same burst"
    assert limit.sample(0.5, outcome, now + 0.6) == 16, "started after it: another"


@pytest.mark.parametrize("outcome", ["retry", "dead_letter", "released", "lease_lost", "dropped"])
def test_endings_that_say_nothing_of_the_downstreams_load_do_not_move_it(outcome: Outcome) -> None:
    """A failure's duration is no latency (a refused connection fails in a millisecond and
    would drag the baseline down); a released or lost job never answered."""
    limit = Limit(floor=1, ceiling=64)
    rounds = Rounds(limit)
    rounds.run(3, lambda n: BASE)
    before, baseline = limit.current, limit.baseline
    for i in range(200):
        limit.sample(0.001, outcome, rounds.now + i)
    assert (limit.current, limit.baseline) == (before, baseline)


def test_a_job_started_under_another_limit_is_not_counted() -> None:
    limit = Limit(floor=8, ceiling=64)
    rounds = Rounds(limit)
    assert rounds.run(1, lambda n: BASE) == [16]  # moved at rounds.now
    moved_at = rounds.now
    for _ in range(50):  # slow jobs of the old limit end: not the new limit's latency
        limit.sample(10.0, "success", moved_at + 1.0)
    assert limit.current == 16
    assert rounds.run(1, lambda n: BASE) == [32], "its own jobs move it"


def test_it_recovers_after_the_downstream_heals() -> None:
    rounds = Rounds(Limit(floor=1, ceiling=48))
    rounds.run(100, knee(6))
    down = rounds.run(8, lambda n: BASE, outcome="deferred")
    assert down[-1] == 1, f"an outage brings it to the floor: {down}"
    healed = rounds.run(60, knee(6))
    assert set(healed[-30:]) <= {6, 7}, healed
    # Doubling up to half the limit the outage met, then by one: 1, 2, 3, 4, 5, 6, most of
    # them windows of MIN_WINDOW single jobs.
    assert healed.index(6) <= 15, f"back at the knee within 15 rounds: {healed}"


def test_the_baseline_follows_a_downstream_that_got_slower_for_good() -> None:
    """Twice as slow at every concurrency (its other clients, say): first read as overload,
    then, once no remembered window is as fast as before, as the new normal."""
    limit = Limit(floor=1, ceiling=48)
    rounds = Rounds(limit)
    rounds.run(100, knee(6))
    slower = rounds.run(BASELINE_WINDOWS * MIN_WINDOW + 100, knee(6, base=2 * BASE))
    assert min(slower) < 6, "it backed off first"
    assert set(slower[-30:]) <= {6, 7}, slower
    assert limit.baseline == pytest.approx(2 * BASE)


@settings(max_examples=500)
@given(
    floor=st.integers(1, 8),
    extra=st.integers(0, 40),
    samples=st.lists(st.tuples(st.floats(0.0, 5.0), st.sampled_from(OUTCOMES), st.floats(0.0, 2.0)), max_size=300),
)
def test_it_never_leaves_floor_and_ceiling(floor: int, extra: int, samples: list[tuple[float, Outcome, float]]) -> None:
    limit = Limit(floor=floor, ceiling=floor + extra)
    now = 0.0
    for latency, outcome, gap in samples:
        now += gap
        assert floor <= limit.sample(latency, outcome, now) <= floor + extra
        assert limit.current == limit.sample(latency, "released", now)


def test_a_floor_above_the_ceiling_is_refused() -> None:
    with pytest.raises(ValueError, match="floor"):
        Limit(floor=9, ceiling=8)
    with pytest.raises(ValueError, match="floor"):
        Limit(floor=0, ceiling=8)


def test_windows_hold_at_least_min_window_jobs() -> None:
    limit = Limit(floor=1, ceiling=8)
    for i in range(MIN_WINDOW - 1):
        assert limit.sample(BASE, "success", float(i)) == 1
    assert limit.sample(BASE, "success", float(MIN_WINDOW)) == 2


@pytest.mark.parametrize(
    ("told", "limit", "worth"),
    [
        (10, 10, False),
        (10, 11, False),  # 10% but one handler: at a knee of 6 the limit goes 6, 7, 6
        (6, 7, False),
        (6, 8, True),
        (20, 21, False),  # 5%: not every move is a log line
        (20, 18, True),
        (40, 37, False),
        (40, 36, True),
        (2, 1, True),  # the floor
        (47, 48, True),  # the ceiling
        (48, 47, False),
    ],
)
def test_a_move_is_told_when_it_is_10_percent_and_2_or_reaches_floor_or_ceiling(
    told: int, limit: int, worth: bool
) -> None:
    assert worth_telling(told, limit, 1, 48) is worth


# -- admission's slots under a moving limit -----------------------------------------------

steps = st.lists(
    st.one_of(
        st.tuples(st.just("limit"), st.integers(1, 6)), st.tuples(st.sampled_from(["arrive", "end"]), st.just(0))
    ),
    max_size=60,
)


@given(capacity=st.integers(1, 6), script=steps)
def test_a_start_never_takes_a_slot_past_the_limit_and_nobody_startable_waits(
    capacity: int, script: list[tuple[str, int]]
) -> None:
    """Shrinking below what runs stops new starts until enough end; growing starts whoever
    waits at once. The limit never passes the concurrency."""

    async def play() -> None:
        admission = Admission(capacity, 100)
        admission.prefetch = 100
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        tasks: dict[Ticket, asyncio.Task[bool]] = {}
        started: list[Ticket] = []
        for step, n in script:
            running_before = admission.running
            if step == "limit":
                admission.set_limit(n)
                assert admission.limit == min(n, capacity)
            elif step == "arrive":
                (ticket,) = admission.received(await admission.reserve(1), 1)
                tasks[ticket] = asyncio.ensure_future(admission.line.start(ticket, never))
            else:
                mine = [t for t in started if not t.closed]
                if mine:
                    admission.line.work_ended(mine[0])
                    admission.line.decide(mine[0])
                    admission.line.close(mine[0])
            for _ in range(5):
                await asyncio.sleep(0)
            new = [t for t, task in tasks.items() if task.done() and task.result() and t not in started]
            started += new
            if new:
                assert admission.running <= admission.limit, f"{admission.running} run over the limit {admission.limit}"
            else:
                assert admission.running <= max(running_before, admission.limit)
            for _ in admission.tickets():
                assert admission.running >= admission.limit, "a startable message waits"
        for ticket in list(tasks):
            admission.line.work_ended(ticket)
            admission.line.close(ticket)
        await asyncio.sleep(0)
        assert (admission.held, admission.in_use, admission.running) == (0, 0, 0)

    asyncio.run(play())


def test_receives_ask_for_places_by_the_limit_in_use() -> None:
    """A shrunken limit holds no ceiling's worth of messages waiting: places are the limit
    plus the prefetch; the held bound stays the concurrency plus the prefetch cap."""

    async def play() -> None:
        admission = Admission(48, 10)
        admission.prefetch = 10
        assert admission.receivable(100, 0.0) == 58
        admission.set_limit(6)
        assert admission.receivable(100, 0.0) == 16
        assert admission.held_limit == 58
        admission.set_limit(100)
        assert admission.limit == 48, "never past the concurrency"

    asyncio.run(play())


def test_durations_too_small_to_square_do_not_break_it() -> None:
    """Found by the property above: a mean of 1e-200 s squares to 0.0, and the spread
    divided by it."""
    limit = Limit(floor=1, ceiling=8)
    for i in range(20):
        assert 1 <= limit.sample(1e-200 * (1 + i % 2), "success", float(i)) <= 8


def test_jobs_under_the_loop_clock_s_tick_do_not_read_as_load() -> None:
    """uvloop's loop clock counts whole milliseconds: a sub-millisecond job takes 0.0 s or
    0.001 s by it, and such jobs are now sampled (they ran). Windows of 0.0 s make a
    baseline of 0.0, against which any tick is a latency without bound: the windows' spread
    must keep them from being trusted, or the limit halves on clock ticks alone."""
    limit = Limit(floor=1, ceiling=32)
    now = 0.0
    for _ in range(200):  # all 0.0: the limit grows to the ceiling
        now += 0.001
        limit.sample(0.0, "success", now, limit.current)
    grown = limit.current
    assert grown == 32, grown
    for i in range(5000):  # the same jobs, one in three read a tick
        now += 0.001
        limit.sample(0.001 if i % 3 == 0 else 0.0, "success", now, limit.current)
        assert limit.current >= grown // 2 + 1, f"shrank to {limit.current} on clock ticks alone"
