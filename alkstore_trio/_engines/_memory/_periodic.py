"""Q17 on the in-memory engine: the schedule rows, beside the job table.

The engine actor runs one request at a time, so one ``fire`` is atomic with the
enqueues it makes: two callers declaring the same schedule are served one after the
other, and the second finds the row already advanced (each fire time at most once).
Pure and synchronous, like the job table; ``now`` is always an argument.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._core import PeriodicFired, PeriodicInfo, PeriodicTick
from ..._core._periodic import delay_until, fire_spec, plan_fires

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime

    from ..._core import Periodic
    from ._table import JobTable


class _Row:
    __slots__ = (
        "expression",
        "last_fire_at",
        "last_seen_at",
        "name",
        "next_fire_at",
        "queue",
        "tz",
    )

    def __init__(self, p: Periodic, now: datetime) -> None:
        self.name = p.name
        self.queue = p.queue
        self.expression = p.expression
        self.tz = p.tz
        self.next_fire_at: datetime | None = None
        self.last_fire_at: datetime | None = None
        self.last_seen_at = now


class PeriodicRows:
    """Every schedule's row, by name (Q17)."""

    def __init__(self) -> None:
        self._rows: dict[str, _Row] = {}

    def fire(self, schedules: Sequence[Periodic], table: JobTable, now: datetime) -> PeriodicTick:
        """Q17.2/Q17.3: sync each schedule's row, enqueue what it owes, advance it."""
        # Plan every schedule before changing anything: all or nothing.
        plans = []
        for p in schedules:
            row = self._rows.get(p.name)
            same = row is not None and (row.expression, row.tz) == (p.expression, p.tz)
            current = row.next_fire_at if row is not None and same else None
            plans.append((p, plan_fires(p, current, now)))
        fired: list[PeriodicFired] = []
        for p, plan in plans:
            row = self._rows.setdefault(p.name, _Row(p, now))
            row.queue, row.expression, row.tz, row.last_seen_at = p.queue, p.expression, p.tz, now
            if plan.fires:
                ids = table.enqueue([fire_spec(p, at) for at in plan.fires], now)
                fired.extend(map(PeriodicFired, [p.name] * len(ids), plan.fires, ids))
                row.last_fire_at = plan.fires[-1]
            row.next_fire_at = plan.next_fire_at
        next_in_s = min(delay_until(plan.next_fire_at, now) for _, plan in plans)
        return PeriodicTick(tuple(fired), next_in_s)

    def list(self, stale_after_s: float, now: datetime) -> list[PeriodicInfo]:
        """Q17.6: every row by name, stale when unseen for more than ``stale_after_s``."""
        return [
            PeriodicInfo(
                name=row.name,
                queue=row.queue,
                expression=row.expression,
                tz=row.tz,
                next_fire_at=row.next_fire_at,
                last_fire_at=row.last_fire_at,
                last_seen_at=row.last_seen_at,
                stale=(now - row.last_seen_at).total_seconds() > stale_after_s,
            )
            for _, row in sorted(self._rows.items())
        ]

    def delete(self, name: str) -> bool:
        """Q17.10: delete the row ``name``; whether there was one."""
        return self._rows.pop(name, None) is not None
