"""The reference model's backoff curve (Q5, decision 12) and what a handle knows of its
job for the draw, written out step by step from the contract text."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import random


def model_backoff_delay_s(base_s: float, attempt: int, rng: random.Random) -> int:
    """Q5 (equal jitter) and decision 12, computed step by step from the contract text.

    Args:
        base_s: The row's ``backoff_base_s``.
        attempt: The row's post-claim ``attempts`` (>= 1).
        rng: The random source; exactly one ``randint`` call is made.

    Returns:
        An integer number of seconds in ``[ceil(cap / 2), floor(cap)]``, or ``ceil(cap / 2)``
        when that interval is empty (a cap below one second).
    """
    exponent = min(attempt - 1, 30)
    cap = min(base_s * 2**exponent, 3600)
    # A positive cap halves to at least 1 s, even when cap / 2 underflows to 0.0 (a
    # subnormal base such as 5e-324).
    low = max(math.ceil(cap / 2), 1) if cap > 0 else 0
    high = math.floor(cap)
    if high < low:
        high = low
    return rng.randint(low, high)


def _after(now: datetime, seconds: float) -> datetime:
    return now + timedelta(seconds=float(seconds))


@dataclass(frozen=True)
class _Stamps:
    """What a job handle knows about its job for ever: used for the backoff draw."""

    queue: str
    max_attempts: int
    backoff_base_s: float
