"""One ``stats`` reading shared by every page, and the acked and dead-lettered rates
drawn from the readings (W9).

Why shared: each open overview asks for its table every few seconds, and the other pages
need the queues' names, counts and limits too. ``stats`` counts rows, so its cost grows
with the backlog (hundreds of milliseconds at 100,000 rows on a loaded machine). Reading
it for each page would cost the database one count per page per interval; instead a
reading younger than the interval is handed to every page that asks, and only the first
asker after that reads again (the others wait for its reading rather than start their
own). An action forgets the reading, so the page after it shows the action's effect.
The readings kept form the rates' time series: the ``*_total`` counters only grow
(D27), so two readings give a rate.

Two bounds keep a large backlog from costing much (``stats`` took about 0.7 s at 1M
jobs): a reading is reused for at least ten times as long as it took to read, so the
readings take at most a tenth of one database session's time; and while the app runs
with its lifespan (``serve_dashboard``, ``alkstore-trio dashboard``), a page that finds
the reading stale is served the stale one at once and one background task reads the
next, so no page waits for a count (up to three limits old: older, the page reads
inline, and a store that stopped answering shows as an error, not as old numbers).
"""

from __future__ import annotations

import itertools
from collections import deque
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import trio

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence
    from datetime import datetime

    from .._core import StoreStats
    from .._store import Store

#: How many readings the series keeps (at 5 s apart: ten minutes).
SERIES_LENGTH: Final = 120
#: A reading is reused for at least this many times the time it took (W9).
COST_FACTOR: Final = 10.0
#: A reading older than this many reuse limits is never served while a new one is read.
STALE_LIMITS: Final = 3.0
#: The sparkline's size, in SVG user units.
CHART_WIDTH: Final = 120
CHART_HEIGHT: Final = 24


@dataclass(frozen=True)
class Sample:
    """One reading's counters: when (the store's clock) and, per queue, acked and
    dead-lettered so far."""

    at: datetime
    totals: dict[str, tuple[int, int]]


@dataclass(frozen=True)
class Rates:
    """One queue's rates per minute between consecutive readings, oldest first, and the
    latest of each (``None`` until two readings exist)."""

    acked: tuple[float, ...]
    dead_lettered: tuple[float, ...]

    @property
    def acked_now(self) -> float | None:
        return self.acked[-1] if self.acked else None

    @property
    def dead_lettered_now(self) -> float | None:
        return self.dead_lettered[-1] if self.dead_lettered else None


def rates(samples: Sequence[Sample], queue: str) -> Rates:
    """W9: ``queue``'s acked and dead-lettered jobs per minute between each two
    consecutive readings (a queue missing from a reading counts from its next one)."""
    acked: list[float] = []
    dead: list[float] = []
    for before, after in itertools.pairwise(samples):
        if queue not in before.totals or queue not in after.totals:
            continue
        elapsed = (after.at - before.at).total_seconds()
        if elapsed <= 0:
            continue
        (a0, d0), (a1, d1) = before.totals[queue], after.totals[queue]
        acked.append(max(0, a1 - a0) * 60 / elapsed)
        dead.append(max(0, d1 - d0) * 60 / elapsed)
    return Rates(tuple(acked), tuple(dead))


def sparkline(values: Sequence[float], top: float | None = None) -> str:
    """SVG ``polyline`` points for ``values`` (the last :data:`SERIES_LENGTH`), scaled so
    ``top`` (default: their maximum) is the top edge; ``""`` for fewer than two."""
    if len(values) < 2:
        return ""
    shown = list(values)[-SERIES_LENGTH:]
    peak = max(top if top is not None else max(shown), 1e-9)
    step = CHART_WIDTH / (len(shown) - 1)
    points = []
    for i, value in enumerate(shown):
        y = CHART_HEIGHT - 1 - (CHART_HEIGHT - 2) * min(value, peak) / peak
        points.append(f"{i * step:.1f},{y:.1f}")
    return " ".join(points)


class SharedStats:
    """``stats()`` readings shared by every page (W9), and the series of readings the
    rates come from."""

    def __init__(self, store: Store, max_age_s: float) -> None:
        self._store = store
        self._max_age_s = max_age_s
        self._lock = trio.Lock()
        self._last: tuple[float, StoreStats] | None = None
        self._took_s = 0.0
        self._nursery: trio.Nursery | None = None
        self._refreshing = False
        self.samples: deque[Sample] = deque(maxlen=SERIES_LENGTH)

    @property
    def limit_s(self) -> float:
        """How long a reading is reused: ``max_age_s``, or ten times what the last
        reading took when that is longer."""
        return max(self._max_age_s, COST_FACTOR * self._took_s)

    @asynccontextmanager
    async def background(self) -> AsyncIterator[None]:
        """While open, stale readings are replaced in a background task (the app's
        lifespan opens it)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                yield
            finally:
                self._nursery = None
                nursery.cancel_scope.cancel()

    def invalidate(self) -> None:
        """Forget the reading: after an action, the next page reads afresh."""
        self._last = None

    async def read(self) -> StoreStats:
        """A reading younger than :attr:`limit_s`, and none from before the last
        :meth:`invalidate`; one ``stats`` call for all concurrent callers. With the
        background open, a reading up to three limits old is returned at once while
        one background task reads the next."""
        last = self._last
        if last is not None:
            age = trio.current_time() - last[0]
            if age < self.limit_s:
                return last[1]
            if self._nursery is not None and age < STALE_LIMITS * self.limit_s:
                if not self._refreshing:
                    self._refreshing = True
                    self._nursery.start_soon(self._refresh)
                return last[1]
        async with self._lock:
            last = self._last
            if last is not None and trio.current_time() - last[0] < self.limit_s:
                return last[1]
            return await self._read_now()

    async def _refresh(self) -> None:
        try:
            async with self._lock:
                last = self._last
                if last is None or trio.current_time() - last[0] >= self.limit_s:
                    await self._read_now()
        except Exception:
            # A page past the stale bound reads inline, and shows the error.
            return
        finally:
            self._refreshing = False

    async def _read_now(self) -> StoreStats:
        began = trio.current_time()
        stats = await self._store.stats()
        done = trio.current_time()
        self._took_s = done - began
        self._last = (done, stats)
        self._record(stats)
        return stats

    def _record(self, stats: StoreStats) -> None:
        # A page load right after a refresh is served, but not a point of the series.
        gap = (stats.now - self.samples[-1].at).total_seconds() if self.samples else None
        if gap is not None and gap < self._max_age_s / 2:
            return
        totals = {q.queue: (q.acked_total, q.dead_lettered_total) for q in stats.queues}
        self.samples.append(Sample(stats.now, totals))
