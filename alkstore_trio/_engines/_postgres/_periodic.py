"""Q17 on PostgreSQL: fire the schedules in one transaction that holds their rows' locks.

Why a transaction of several statements rather than one: the cron arithmetic runs in
the client (``cronsim``, in the schedule's time zone), while "now" must be the
database's. ``sync_periodic`` makes the missing rows and locks the declared rows that no
other transaction holds (``FOR UPDATE SKIP LOCKED``), and returns their definitions and
``next_fire_at`` with the clock read; the client plans the fire times owed at that
instant (the core's ``plan_fires``), enqueues one job per fire time on the same
connection and advances the rows. Each fire time is enqueued at most once: a row is
planned and advanced only by the transaction that holds its lock, and a later one reads
the advanced row. Nothing is visible before the commit, and a worker killed in the
middle leaves nothing behind (the server rolls its transaction back).

Why skip a held row rather than wait for it (Q17.9): its holder is firing it. If that
holder stalls (a frozen process, a blocked event loop), waiting would stall every other
worker's fire behind it, each holding a pool connection. So a call fires the rows it
could lock, leaves the held ones to their holder, and asks again about them within
:data:`~alkstore_trio._core._periodic.PERIODIC_HELD_RECHECK_S`. The stalled holder itself
is bounded by ``idle_in_transaction_session_timeout``, set for this transaction only:
PostgreSQL ends a session that sits idle in the fire transaction for
:data:`FIRE_IDLE_TIMEOUT_S`, which rolls its fire back and frees its rows, and the next
call fires what the row owes (Q17.5's catch-up). The one wait left, on a row that another
transaction is making for the first time, is bounded by ``lock_timeout``.
"""

from __future__ import annotations

from datetime import UTC
from typing import TYPE_CHECKING, Any, Final

from ..._core import PeriodicFired, PeriodicInfo, PeriodicTick
from ..._core._periodic import PERIODIC_HELD_RECHECK_S, delay_until, fire_spec, plan_fires

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from datetime import datetime

    from ..._core import EnqueueSpec, Periodic
    from ..._core._periodic import FirePlan
    from ._driver import Connection


#: Q17.9: the longest the fire transaction waits for a lock (a row another transaction is
#: making); past it the call fails with ``EngineError``, changing nothing.
FIRE_LOCK_TIMEOUT_S: Final = 2.0
#: Q17.9: the longest the fire transaction may sit idle, its client stalled between two
#: statements, before PostgreSQL ends the session, rolls the fire back and frees its rows.
#: A healthy client is idle there for one round trip and the cron arithmetic.
FIRE_IDLE_TIMEOUT_S: Final = 5.0
#: The two bounds, for the fire transaction only (``set_config(..., true)``).
_FIRE_TIMEOUTS_SQL: Final = (
    "SELECT pg_catalog.set_config('lock_timeout', %s, true), "
    "pg_catalog.set_config('idle_in_transaction_session_timeout', %s, true)"
)


def _ms(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


async def fire(
    conn: Connection,
    queries: dict[str, str],
    enqueue_statement: Callable[[Sequence[EnqueueSpec]], tuple[str, dict[str, object]]],
    schedules: Sequence[Periodic],
) -> PeriodicTick:
    """Q17.2/Q17.3/Q17.9 inside the caller's open transaction on ``conn``."""
    await conn.execute(_FIRE_TIMEOUTS_SQL, [_ms(FIRE_LOCK_TIMEOUT_S), _ms(FIRE_IDLE_TIMEOUT_S)])
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
    now: datetime = rows[0][4].astimezone(UTC)
    held = {name: (expression, tz, _utc(at)) for name, expression, tz, at, _ in rows if name}
    plans = []
    for p in ordered:
        if p.name in held:
            expression, tz, at = held[p.name]
            kept = at if (expression, tz) == (p.expression, p.tz) else None
            plans.append((p, plan_fires(p, kept, now)))
    fired: list[PeriodicFired] = []
    for p, plan in plans:
        for fire_at in plan.fires:
            ((job_id,),) = await conn.execute(*enqueue_statement([fire_spec(p, fire_at)]))
            fired.append(PeriodicFired(p.name, fire_at, job_id))
    if plans:
        await conn.execute(queries["advance_periodic"], _advance_params(plans, now))
    delays = [delay_until(plan.next_fire_at, now) for _, plan in plans]
    if len(plans) < len(ordered):  # another call holds a row: it fires it
        delays.append(PERIODIC_HELD_RECHECK_S)
    return PeriodicTick(tuple(fired), min(delays))


def _advance_params(plans: Sequence[tuple[Periodic, FirePlan]], now: datetime) -> dict[str, object]:
    return {
        "names": [p.name for p, _ in plans],
        "queues": [p.queue for p, _ in plans],
        "expressions": [p.expression for p, _ in plans],
        "tzs": [p.tz for p, _ in plans],
        "nexts": [plan.next_fire_at for _, plan in plans],
        "lasts": [plan.fires[-1] if plan.fires else None for _, plan in plans],
        "now": now,
    }


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
