"""A clock that only moves when told to."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from .._core import _validate as v

#: Where a :class:`ManualClock` starts when no start is given.
DEFAULT_START = datetime(2000, 1, 1, tzinfo=UTC)


class ManualClock:
    """A clock for tests: ``now()`` changes only through :meth:`advance` and :meth:`set`.

    Pass it to ``open_store("memory://", clock=clock)`` to drive leases, delays, expiry
    and retention without sleeping.

    Args:
        start: The initial time, timezone-aware (default 2000-01-01T00:00:00Z, so runs
            are reproducible).

    Raises:
        InvalidArgument: ``start`` is naive or not a datetime.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._now = DEFAULT_START if start is None else self._utc("start", start)

    @staticmethod
    def _utc(param: str, value: object) -> datetime:
        return v.check_aware_utc(param, value)

    def now(self) -> datetime:
        """The current manual time (timezone-aware UTC)."""
        return self._now

    def advance(self, seconds: float) -> datetime:
        """Move the clock forward by ``seconds`` (a finite number >= 0); returns the new
        time."""
        self._now += timedelta(seconds=v.check_duration("seconds", seconds, min_s=0))
        return self._now

    def set(self, when: datetime) -> None:
        """Jump to ``when`` (timezone-aware), forwards or backwards."""
        self._now = self._utc("when", when)

    def __repr__(self) -> str:
        return f"ManualClock({self._now.isoformat()})"


class TrioClock:
    """A store clock that follows trio's clock: ``start + trio.current_time()`` seconds.

    For testing a :class:`~alkstore_trio.Worker` on the in-memory engine under
    ``trio.testing.MockClock(autojump_threshold=0)``: the worker's intervals (heartbeats,
    polls, grace periods) run on trio's clock, and with this clock the store's leases,
    delays and expiry move with them, so whole runs take no real time::

        async with open_store("memory://", clock=TrioClock()) as store:
            ...

    Args:
        start: The store time at trio time 0, timezone-aware (default 2000-01-01Z).

    Raises:
        InvalidArgument: ``start`` is naive or not a datetime.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._start = DEFAULT_START if start is None else v.check_aware_utc("start", start)

    def now(self) -> datetime:
        """The store time now (timezone-aware UTC); call it inside ``trio.run``."""
        import trio  # imported here: ManualClock needs no trio

        return self._start + timedelta(seconds=trio.current_time())

    def __repr__(self) -> str:
        return f"TrioClock(start={self._start.isoformat()})"
