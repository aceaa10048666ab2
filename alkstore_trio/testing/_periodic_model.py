"""Q17 in the reference model: the schedule rows, written the plain way.

The engines share the core's :func:`~alkstore_trio._core._periodic.plan_fires`, which
jumps to the latest due fire time arithmetically (``every_s``) or walks back from the
upcoming one (cron). The model derives the same answer independently and naively: it
walks *forward* from the row's ``next_fire_at``, one fire time at a time, collecting
every fire time up to now, and keeps the last ``catch_up + 1`` of them. The state
machine holds the two to agreement, so a slip in either shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from .._core import PeriodicFired, PeriodicInfo, PeriodicTick
from .._core._periodic import PERIODIC_FIRE_AT_HEADER, PERIODIC_NAME_HEADER

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .._core import Periodic
    from ._model import ReferenceModel


@dataclass
class _Row:
    queue: str
    expression: str
    tz: str
    next_fire_at: datetime
    last_fire_at: datetime | None
    last_seen_at: datetime


def _successor(p: Periodic, instant: datetime) -> datetime:
    """The schedule's first fire time strictly after ``instant``."""
    if p.every_s is not None:
        return instant + timedelta(seconds=p.every_s)
    from cronsim import CronSim  # the `cron` extra, needed only for cron schedules

    zone = ZoneInfo(p.tz)
    # cronsim walks wall-clock time; in a fold's second hour its next time can be the
    # hour's first occurrence, before ``instant``: only a later instant is a successor.
    return next(
        at
        for at in (
            local.astimezone(UTC) for local in CronSim(p.cron or "", instant.astimezone(zone))
        )
        if at > instant
    )


class PeriodicModel:
    """Every schedule's row by name, and Q17.2-Q17.6 and Q17.10 over them."""

    def __init__(self) -> None:
        self._rows: dict[str, _Row] = {}

    def fire(
        self, model: ReferenceModel, schedules: Iterable[Periodic], *, now: datetime
    ) -> PeriodicTick:
        """Q17.2: sync, enqueue what each schedule owes (schedules in name order, each's
        fire times ascending), advance."""
        fired: list[PeriodicFired] = []
        nexts: list[datetime] = []
        for p in sorted(schedules, key=lambda s: s.name):
            row = self._rows.get(p.name)
            if row is None or (row.expression, row.tz) != (p.expression, p.tz):
                # Q17.3: new or re-defined: the first fire time after now, nothing owed.
                first = _successor(p, now)
                last = None if row is None else row.last_fire_at
                row = self._rows[p.name] = _Row(p.queue, p.expression, p.tz, first, last, now)
            else:
                due = []
                fire_at = row.next_fire_at
                while fire_at <= now:
                    due.append(fire_at)
                    fire_at = _successor(p, fire_at)
                kept = due[-(p.catch_up + 1) :] if due else []
                fired.extend(
                    PeriodicFired(p.name, at, self._enqueue(model, p, at, now)) for at in kept
                )
                if kept:
                    row.last_fire_at = kept[-1]
                row.next_fire_at = fire_at
            row.queue, row.last_seen_at = p.queue, now
            nexts.append(row.next_fire_at)
        next_in_s = max(0.0, min((at - now).total_seconds() for at in nexts))
        return PeriodicTick(tuple(fired), next_in_s)

    @staticmethod
    def _enqueue(model: ReferenceModel, p: Periodic, at: datetime, now: datetime) -> int:
        headers = {
            **dict(p.headers.items()),
            PERIODIC_NAME_HEADER: p.name,
            PERIODIC_FIRE_AT_HEADER: at.isoformat(),
        }
        return model.enqueue(
            p.queue,
            p.payload,
            opts=p.opts,
            priority=p.priority,
            max_attempts=p.max_attempts,
            headers=headers,
            now=now,
        )

    def list_rows(self, stale_after_s: float, *, now: datetime) -> list[PeriodicInfo]:
        """Q17.6: every row by name."""
        return [
            PeriodicInfo(
                name=name,
                queue=row.queue,
                expression=row.expression,
                tz=row.tz,
                next_fire_at=row.next_fire_at,
                last_fire_at=row.last_fire_at,
                last_seen_at=row.last_seen_at,
                stale=now - row.last_seen_at > timedelta(seconds=stale_after_s),
            )
            for name, row in sorted(self._rows.items())
        ]

    def delete(self, name: str) -> bool:
        """Q17.10: drop the row ``name``; whether there was one."""
        return self._rows.pop(name, None) is not None

    def next_fire_times(self) -> list[tuple[str, datetime]]:
        """Every row's next fire time (for the machine's time targets)."""
        return [(name, row.next_fire_at) for name, row in sorted(self._rows.items())]
