"""Q17 on PostgreSQL: fire the schedules in one transaction that holds their rows' locks.

Why a transaction of several statements rather than one: the cron arithmetic runs in
the client (``cronsim``, in the schedule's time zone), while "now" must be the
database's. ``sync_periodic`` upserts the declared rows, which locks them until commit,
and returns their ``next_fire_at`` with the clock read; the client plans the fire times
owed at that instant (the core's ``plan_fires``), enqueues one job per fire time on the
same connection and advances the rows. A second worker firing the same name waits on the
row lock and then finds it advanced: each fire time is enqueued at most once, whatever
the workers' own clocks say. Nothing is visible before the commit, and a worker killed
in the middle leaves nothing behind (the server rolls its transaction back).
"""

from __future__ import annotations

from datetime import UTC
from typing import TYPE_CHECKING, Any

from ..._core import PeriodicFired, PeriodicInfo, PeriodicTick
from ..._core._periodic import delay_until, fire_spec, plan_fires

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from datetime import datetime

    from ..._core import EnqueueSpec, Periodic
    from ._driver import Connection


async def fire(
    conn: Connection,
    queries: dict[str, str],
    enqueue_statement: Callable[[Sequence[EnqueueSpec]], tuple[str, dict[str, object]]],
    schedules: Sequence[Periodic],
) -> PeriodicTick:
    """Q17.2/Q17.3 inside the caller's open transaction on ``conn``."""
    ordered = sorted(schedules, key=lambda p: p.name)
    rows = await conn.execute(
        queries["sync_periodic"],
        {
            "names": [p.name for p in ordered],
            "queues": [p.queue for p in ordered],
            "expressions": [p.expression for p in ordered],
            "tzs": [p.tz for p in ordered],
        },
    )
    kept: dict[str, datetime | None] = {name: _utc(at) for name, at, _ in rows}
    now: datetime = rows[0][2].astimezone(UTC)
    plans = [(p, plan_fires(p, kept[p.name], now)) for p in ordered]
    fired: list[PeriodicFired] = []
    for p, plan in plans:
        for at in plan.fires:
            ((job_id,),) = await conn.execute(*enqueue_statement([fire_spec(p, at)]))
            fired.append(PeriodicFired(p.name, at, job_id))
    await conn.execute(
        queries["advance_periodic"],
        {
            "names": [p.name for p, _ in plans],
            "nexts": [plan.next_fire_at for _, plan in plans],
            "lasts": [plan.fires[-1] if plan.fires else None for _, plan in plans],
        },
    )
    next_in_s = min(delay_until(plan.next_fire_at, now) for _, plan in plans)
    return PeriodicTick(tuple(fired), next_in_s)


def info(row: Sequence[Any]) -> PeriodicInfo:
    """A ``list_periodic`` row as a :class:`PeriodicInfo`."""
    name, queue, expression, tz, next_fire_at, last_fire_at, last_seen_at, stale = row
    return PeriodicInfo(
        name=name,
        queue=queue,
        expression=expression,
        tz=tz,
        next_fire_at=_utc(next_fire_at),
        last_fire_at=_utc(last_fire_at),
        last_seen_at=last_seen_at.astimezone(UTC),
        stale=bool(stale),
    )


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)
