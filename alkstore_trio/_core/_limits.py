"""Q18.7-Q18.11: a queue's fleet-wide limits, as records and pure rules.

Why in the core: every engine enforces the same arithmetic inside its claim (the
in-memory engine and the reference model call these functions; the PostgreSQL claim
computes the same in SQL, and the conformance suite checks that they agree). Nothing here
reads a clock: ``now`` is always an argument.

- :func:`merged_limits` validates a ``set_limits`` call against the current limits (each
  argument left out keeps its value, ``None`` clears it) and returns the new ones, or
  raises :class:`~alkstore_trio.InvalidArgument` before anything changed.
- :func:`tokens_at` refills a token bucket (Q18.9): ``rate_per_s`` tokens a second, up to
  ``burst``. A claim takes one token per job it hands out, so in any window of ``t``
  seconds claims hand out at most ``burst + rate_per_s * t`` jobs.
- :func:`allowance` is what one claim may hand out: the free slots of ``max_running``
  (Q18.7) and the whole tokens of the bucket, whichever is smaller.
- :func:`throttled_by` says which limits throttled a claim (Q18.10's counters).
- :func:`per_key_pick` is Q18.8's fair pick: from the candidates in claim order, each
  concurrency key contributes at most its free slots (its best jobs); keyless jobs
  compete as ever.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Final, TypeVar

from .._errors import InvalidArgument
from ._validate import _show

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from datetime import datetime

_J = TypeVar("_J")

#: The largest ``max_running`` and ``burst`` (int32, as stored on PostgreSQL).
LIMIT_MAX: Final = 2**31 - 1
#: The largest ``rate_per_s``: a million claims a second is no limit at all.
RATE_MAX: Final = 1e6


class _Unset(Enum):
    UNSET = "UNSET"


#: The default of every :meth:`Queue.set_limits` argument: keep the current value.
UNSET: Final = _Unset.UNSET


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """A queue's fleet-wide limits (Q18.7-Q18.9), from :meth:`Queue.limits` and
    :attr:`QueueStats.limits`. ``None`` means no such limit.

    Attributes:
        max_running: Q18.7: at most this many jobs of the queue are processing under
            an unexpired lease at once, across every worker of the store.
        rate_per_s: Q18.9: claims hand out at most ``burst + rate_per_s * t`` jobs of
            the queue in any window of ``t`` seconds, on the engine's clock.
        burst: Q18.9: the token bucket's size (set exactly when ``rate_per_s`` is).
        max_running_per_key: Q18.8: at most this many jobs of one ``concurrency_key``
            of the queue are processing under an unexpired lease at once (jobs without
            a key are not counted nor held back by it).
    """

    max_running: int | None = None
    rate_per_s: float | None = None
    burst: int | None = None
    max_running_per_key: int | None = None

    @property
    def limited(self) -> bool:
        """Whether any limit is set."""
        return (
            self.max_running is not None
            or self.rate_per_s is not None
            or self.max_running_per_key is not None
        )


#: No limits: the limits of a queue nobody limited.
NO_LIMITS: Final = QueueLimits()


@dataclass(frozen=True, slots=True)
class Throttled:
    """Q18.10: how many claims of a queue each limit throttled so far: claims that
    handed out fewer jobs than they asked for and could have found, because that limit's
    allowance was the smallest (a claim that two limits held to the same count counts
    for both).

    Attributes:
        running: Claims throttled by ``max_running`` (Q18.7).
        rate: Claims throttled by ``rate_per_s`` (Q18.9).
        per_key: Claims that handed out fewer jobs than they asked for and than the
            other limits allowed, because jobs they found were held back by their
            key's ``max_running_per_key`` (Q18.8).
    """

    running: int = 0
    rate: int = 0
    per_key: int = 0

    @property
    def total(self) -> int:
        """Claims throttled by any limit (each claim once per limit that held it)."""
        return self.running + self.rate + self.per_key


NOT_THROTTLED: Final = Throttled()


def default_burst(rate_per_s: float) -> int:
    """Q18.9: the burst of a rate given without one: one second's worth, at least 1."""
    return max(1, math.ceil(rate_per_s))


def _check_count(param: str, value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= LIMIT_MAX:
        raise InvalidArgument(
            f"{param} must be an int from 1 to {LIMIT_MAX}, or None for no limit; "
            f"got {_show(value)}"
        )
    return int(value)


def _check_rate(value: object) -> float | None:
    if value is None:
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    rate = float(value) if ok else math.nan  # type: ignore[arg-type]
    if not (math.isfinite(rate) and 0 < rate <= RATE_MAX):
        raise InvalidArgument(
            f"rate_per_s must be a finite number of jobs a second > 0 and at most "
            f"{RATE_MAX:g}, or None for no rate limit; got {_show(value)}"
        )
    return rate


def check_limit_args(
    max_running: object, rate_per_s: object, burst: object, max_running_per_key: object = UNSET
) -> None:
    """Q18.11: each ``set_limits`` argument on its own (:data:`UNSET` passes), and at
    least one given; :func:`merged_limits` then checks them together."""
    given = (max_running, rate_per_s, burst, max_running_per_key)
    if all(value is UNSET for value in given):
        raise InvalidArgument(
            "set_limits needs at least one of max_running, rate_per_s, burst and "
            "max_running_per_key (None clears a limit); nothing to change"
        )
    if max_running_per_key is not UNSET:
        _check_count("max_running_per_key", max_running_per_key)
    if max_running is not UNSET:
        _check_count("max_running", max_running)
    if rate_per_s is not UNSET:
        _check_rate(rate_per_s)
    if burst is not UNSET:
        _check_count("burst", burst)


def merged_limits(
    current: QueueLimits,
    *,
    max_running: object = UNSET,
    rate_per_s: object = UNSET,
    burst: object = UNSET,
    max_running_per_key: object = UNSET,
) -> QueueLimits:
    """Q18.11's validation: the limits after a ``set_limits`` call on ``current``.

    An argument left out (:data:`UNSET`) keeps its value; ``None`` clears it. A new
    ``rate_per_s`` without a ``burst`` gets :func:`default_burst`; a ``burst`` needs a
    rate (given, or kept). Raises :class:`InvalidArgument` for any bad value, or when
    nothing is given; the caller then changes nothing.
    """
    check_limit_args(max_running, rate_per_s, burst, max_running_per_key)
    new_max = (
        current.max_running if max_running is UNSET else _check_count("max_running", max_running)
    )
    per_key = (
        current.max_running_per_key
        if max_running_per_key is UNSET
        else _check_count("max_running_per_key", max_running_per_key)
    )
    new_rate = current.rate_per_s if rate_per_s is UNSET else _check_rate(rate_per_s)
    new_burst = _check_count("burst", None if burst is UNSET else burst)
    if new_rate is None:
        if new_burst is not None:
            raise InvalidArgument(
                f"burst needs a rate: give rate_per_s too (got burst={new_burst} "
                "with no rate limit)"
            )
        return QueueLimits(max_running=new_max, max_running_per_key=per_key)
    if new_burst is None:
        kept = burst is UNSET and rate_per_s is UNSET
        new_burst = current.burst if kept and current.burst is not None else default_burst(new_rate)
    return QueueLimits(
        max_running=new_max, rate_per_s=new_rate, burst=new_burst, max_running_per_key=per_key
    )


def refills(rate_per_s: object, burst: object) -> bool:
    """Q18.9: whether a ``set_limits`` call with these arguments starts the bucket
    full: any call that gives ``rate_per_s`` or ``burst``."""
    return rate_per_s is not UNSET or burst is not UNSET


def tokens_at(limits: QueueLimits, tokens: float, refilled_at: datetime, now: datetime) -> float:
    """Q18.9: the bucket's tokens at ``now``: ``tokens`` at ``refilled_at`` plus
    ``rate_per_s`` a second since (never less: a clock set back refills nothing), up to
    ``burst``. Only for a rate-limited queue."""
    assert limits.rate_per_s is not None
    assert limits.burst is not None
    elapsed = max(0.0, (now - refilled_at).total_seconds())
    return min(float(limits.burst), tokens + limits.rate_per_s * elapsed)


def allowance(limits: QueueLimits, live: int, tokens: float | None, n: int) -> int:
    """Q18.7/Q18.9: the most jobs one claim of ``n`` may hand out, with ``live`` jobs of
    the queue processing under unexpired leases and ``tokens`` in its bucket (``None``:
    no rate limit)."""
    allowed = n
    if limits.max_running is not None:
        allowed = min(allowed, max(0, limits.max_running - live))
    if tokens is not None:
        allowed = min(allowed, math.floor(tokens))
    return max(0, allowed)


def throttled_by(
    limits: QueueLimits, live: int, tokens: float | None, n: int, found: int
) -> tuple[bool, bool]:
    """Q18.10: (running, rate): which limits throttled a claim of ``n`` that found
    ``found`` claimable rows (counting up to one past its allowance): a limit throttles
    when the claim's allowance is below both ``n`` and ``found`` and that limit's own
    allowance is the claim's."""
    allowed = allowance(limits, live, tokens, n)
    if allowed >= min(n, found):
        return False, False
    running = limits.max_running is not None and max(0, limits.max_running - live) == allowed
    rate = tokens is not None and math.floor(tokens) == allowed
    return running, rate


def seconds_to_token(limits: QueueLimits, tokens: float) -> float:
    """Q18.9: how long until the bucket holds a whole token again (0 when it does)."""
    assert limits.rate_per_s is not None
    return max(0.0, (1.0 - tokens) / limits.rate_per_s)


def per_key_pick(
    limits: QueueLimits,
    candidates: Sequence[_J],
    key_of: Callable[[_J], str | None],
    live_by_key: Mapping[str, int],
) -> list[_J]:
    """Q18.8's fair pick: of ``candidates`` (in claim order), the ones a claim may take
    before the other limits: each key's best jobs up to its free slots
    (``max_running_per_key`` less its live leases, ``live_by_key``), and every keyless
    job. A key with a deep backlog so adds at most its free slots to a claim, whatever
    its jobs' order, and the other keys' best jobs are in the pick beside them."""
    cap = limits.max_running_per_key
    if cap is None:
        return list(candidates)
    taken: dict[str, int] = {}
    out: list[_J] = []
    for job in candidates:
        key = key_of(job)
        if key is not None:
            used = taken.get(key, live_by_key.get(key, 0))
            if used >= cap:
                continue
            taken[key] = used + 1
        out.append(job)
    return out


def per_key_throttled(held: bool, picked: int, allowed: int) -> bool:
    """Q18.10: a claim that ``held`` jobs back by their keys' limit, whose per-key pick
    kept ``picked`` candidates (counted up to one past ``allowed``, what the other
    limits allow of its ``n``): throttled by the per-key limit when the pick came out
    short of ``allowed``."""
    return held and picked < allowed
