"""Q5, the backoff curve (equal jitter), pinned exactly with a stub random source and
statistically with a seeded ``random.Random``. Decision 12 covers caps below one second."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from alkstore_trio._core import backoff_delay_s


class RecordingRng(random.Random):
    """Answers every ``randint`` with a fixed end of the range and records the arguments."""

    def __init__(self, pick: str = "low") -> None:
        super().__init__(0)
        self.pick = pick
        self.calls: list[tuple[int, int]] = []

    def randint(self, a: int, b: int) -> int:
        self.calls.append((a, b))
        return a if self.pick == "low" else b


def _range(base_s: float, attempt: int) -> tuple[int, int]:
    rng = RecordingRng()
    backoff_delay_s(base_s, attempt, rng)
    assert len(rng.calls) == 1, "exactly one randint draw per delay"
    return rng.calls[0]


@pytest.mark.parametrize(
    ("base_s", "attempt", "expected"),
    [
        # The contract's own examples.
        (2, 1, (1, 2)),
        (2, 2, (2, 4)),
        (2, 3, (4, 8)),
        (5, 30, (1800, 3600)),
        (0, 1, (0, 0)),
        # The default base (5 s).
        (5, 1, (3, 5)),
        (5, 2, (5, 10)),
        (5, 3, (10, 20)),
        (5, 10, (1280, 2560)),
        # Odd caps: ceil of the half, floor of the cap.
        (3, 1, (2, 3)),
        (7, 1, (4, 7)),
        (2.5, 1, (2, 2)),
        (2.5, 2, (3, 5)),
        (1.5, 1, (1, 1)),
        (1, 1, (1, 1)),
        # Just below and at the cap.
        (1800, 1, (900, 1800)),
        (1800, 2, (1800, 3600)),
        (3599, 1, (1800, 3599)),
        (3600, 1, (1800, 3600)),
        (3601, 1, (1800, 3600)),
    ],
)
def test_q5_delay_range_is_ceil_half_cap_to_floor_cap(base_s, attempt, expected):
    assert _range(base_s, attempt) == expected


@pytest.mark.parametrize("attempt", [12, 13, 30, 31, 32, 1000, 10**9, 2**63])
def test_q5_cap_is_3600_seconds_for_huge_attempts(attempt):
    assert _range(5, attempt) == (1800, 3600)


@pytest.mark.parametrize("base_s", [1e9, 3.1536e9])
def test_q5_cap_holds_for_huge_bases(base_s):
    assert _range(base_s, 1) == (1800, 3600)
    assert _range(base_s, 31) == (1800, 3600)


def test_q5_exponent_clamps_at_30():
    # base * 2**30 stays below the cap, so the clamp is visible: attempts past 31 do not
    # grow the delay any further.
    base = 1e-6
    at_31 = _range(base, 31)
    assert at_31 == (math.ceil(base * 2**30 / 2), math.floor(base * 2**30))
    assert at_31 == (537, 1073)
    assert _range(base, 30) == (269, 536)
    for attempt in (32, 33, 40, 100, 10**6):
        assert _range(base, attempt) == at_31


@pytest.mark.parametrize("attempt", [1, 2, 30, 31, 10**6])
def test_q5_base_zero_retries_at_once(attempt):
    rng = RecordingRng()
    assert backoff_delay_s(0, attempt, rng) == 0
    assert rng.calls == [(0, 0)]
    assert backoff_delay_s(0.0, attempt, random.Random(1)) == 0


@pytest.mark.parametrize(
    ("base_s", "attempt"),
    [
        (0.4, 1),
        (0.001, 1),
        (0.1, 1),
        (0.1, 3),
        (0.99, 1),
        (1e-9, 1),
        (1e-10, 31),
        (1e-10, 99),
        (0.25, 2),
    ],
)
def test_q5_decision_12_cap_below_one_second_is_one_second(base_s, attempt):
    cap = base_s * 2 ** min(attempt - 1, 30)
    assert 0 < cap < 1
    assert _range(base_s, attempt) == (1, 1)
    assert backoff_delay_s(base_s, attempt, random.Random(7)) == 1


@pytest.mark.parametrize(("base_s", "attempt"), [(0.5, 2), (0.25, 3), (1.0, 1)])
def test_q5_cap_of_exactly_one_second_is_one(base_s, attempt):
    assert _range(base_s, attempt) == (1, 1)


def test_q5_the_drawn_value_is_returned():
    low = RecordingRng("low")
    high = RecordingRng("high")
    assert backoff_delay_s(2, 3, low) == 4
    assert backoff_delay_s(2, 3, high) == 8


def test_q5_delays_are_ints():
    for base in (0, 0.3, 2, 2.5, 5.0):
        for attempt in (1, 2, 5, 40):
            delay = backoff_delay_s(base, attempt, random.Random(attempt))
            assert type(delay) is int


def test_q5_a_seeded_rng_gives_reproducible_delays():
    first = [backoff_delay_s(5, a, random.Random(42)) for a in range(1, 20)]
    second = [backoff_delay_s(5, a, random.Random(42)) for a in range(1, 20)]
    assert first == second
    rng_a, rng_b = random.Random(9), random.Random(9)
    assert [backoff_delay_s(2, 3, rng_a) for _ in range(50)] == [
        backoff_delay_s(2, 3, rng_b) for _ in range(50)
    ]


# -- statistics with a seeded random source -----------------------------------------------

DRAWS = 20_000


@pytest.mark.parametrize(
    ("base_s", "attempt", "low", "high"),
    [
        (2, 1, 1, 2),
        (2, 3, 4, 8),
        (5, 1, 3, 5),
        (5, 4, 20, 40),
        (5, 30, 1800, 3600),
        (5, 10**6, 1800, 3600),
    ],
)
def test_q5_draws_cover_the_whole_range_uniformly(base_s, attempt, low, high):
    rng = random.Random(20240601 + attempt)
    delays = [backoff_delay_s(base_s, attempt, rng) for _ in range(DRAWS)]
    assert min(delays) == low, "the lower end is reached"
    assert max(delays) == high, "the upper end is reached (the cap itself)"
    assert all(low <= d <= high for d in delays)
    # Uniform on [low, high]: the mean is the midpoint, within a few standard errors.
    width = high - low + 1
    stdev = math.sqrt((width**2 - 1) / 12)
    tolerance = 5 * stdev / math.sqrt(DRAWS) + 1e-9
    assert abs(statistics.fmean(delays) - (low + high) / 2) < tolerance
    # Every value of a small range shows up, each roughly 1/width of the time.
    if width <= 41:
        counts = {value: delays.count(value) for value in range(low, high + 1)}
        expected = DRAWS / width
        assert all(abs(c - expected) < 6 * math.sqrt(expected) for c in counts.values()), counts


def test_q5_cap_respected_over_many_attempts_and_bases():
    rng = random.Random(3)
    for base in (0.5, 1, 2, 5, 17, 60, 600, 3600, 10_000):
        for attempt in range(1, 45):
            delay = backoff_delay_s(base, attempt, rng)
            assert 0 <= delay <= 3600
            cap = min(base * 2 ** min(attempt - 1, 30), 3600)
            assert math.ceil(cap / 2) <= delay <= max(math.ceil(cap / 2), math.floor(cap))


def test_q5_jitter_spreads_a_stampede():
    """Many jobs failing together at the same attempt do not all come back at once."""
    rng = random.Random(11)
    delays = [backoff_delay_s(5, 8, rng) for _ in range(1000)]  # range [320, 640]
    assert len(set(delays)) > 250


@given(
    base_s=st.one_of(
        st.integers(min_value=0, max_value=10**6),
        st.floats(min_value=0, max_value=3.1536e9, allow_nan=False, allow_infinity=False),
    ),
    attempt=st.integers(min_value=1, max_value=2**40),
    seed=st.integers(min_value=0, max_value=2**32),
)
# A subnormal base: cap / 2 underflows to 0.0, and the delay must still be 1 s.
@example(base_s=5e-324, attempt=1, seed=0)
def test_q5_property_delay_is_within_the_curve(base_s, attempt, seed):
    delay = backoff_delay_s(base_s, attempt, random.Random(seed))
    cap = min(base_s * 2 ** min(attempt - 1, 30), 3600)
    low = max(math.ceil(cap / 2), 1) if cap > 0 else 0
    assert type(delay) is int
    assert low <= delay <= max(low, math.floor(cap))
    assert 0 <= delay <= 3600
    if cap == 0:
        assert delay == 0
    elif cap < 1:
        assert delay == 1
