"""Q17 in the engine-vs-model machine: the ``FirePeriodic`` step (which may first delete
a row, Q17.10: the schedule then comes back as a new row when it is fired again).

A step fires a few schedules from a fixed table (:data:`SCHEDULES`), as one worker of a
fleet would, on the engine and on the model, and holds them to the same jobs, the same
delay and the same listing. Two table entries share a name with different definitions,
so the machine also re-defines a schedule (Q17.3). Across the whole run the machine
keeps every (schedule, fire time) enqueued and fails on a second one: each fire time at
most once. Gaps are held to the model's policy: the model keeps exactly the last
``catch_up + 1`` due fire times, so a missing one is a disagreement.

Crossing daylight saving (Q17.7): two entries are cron schedules in :data:`DST_ZONE`
(a daily 02:30, inside the hour that a spring-forward night skips and a fall-back night
repeats, and a half-hourly one), and a run may start 15 minutes before that zone's next
change of either kind (:func:`dst_start_offsets`, drawn before the first step, while the
store is still empty: the months jumped cost nothing). The machine's own steps then walk
the night: the model walks forward from each row's fire time with ``cronsim``, the
engines plan backwards from the upcoming one, and the two must agree on every fire time.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import hypothesis.strategies as st
from hypothesis import event

from ..._core import Periodic
from ._steps import _ONE_MICROSECOND, AdvanceTo, _Step

if TYPE_CHECKING:
    from datetime import datetime

    from ._run import _Run

#: Q17.7: the zone of the schedules that cross daylight-saving changes.
DST_ZONE = "Europe/Berlin"
#: The schedules a step may fire: (name, keyword arguments of ``Periodic``).
SCHEDULES: tuple[tuple[str, dict[str, object]], ...] = (
    ("p-every", {"every_s": 5.0}),
    ("p-every", {"every_s": 7.0, "payload": b"v2"}),  # a re-definition of p-every
    ("p-skip", {"every_s": 3.0, "catch_up": "skip", "priority": 2}),
    ("p-cron", {"cron": "* * * * *", "tz": "Europe/Riga", "catch_up": 2}),
    ("p-back", {"every_s": 11.0, "catch_up": 3, "headers": {"tenant": "a"}}),
    ("p-dst", {"cron": "30 2 * * *", "tz": DST_ZONE}),  # Q17.7
    ("p-dst-half", {"cron": "*/30 * * * *", "tz": DST_ZONE, "catch_up": 3}),  # Q17.7
)
#: Q17: a few table entries with distinct names (the first of each name wins).
_PICKS = st.lists(st.integers(0, len(SCHEDULES) - 1), min_size=1, max_size=3).map(
    lambda picks: tuple({SCHEDULES[i][0]: i for i in reversed(picks)}.values())
)
#: Q17.10: mostly no delete; else the row of one entry's name (maybe not made yet).
_DELETES = st.one_of(
    st.just(None), st.just(None), st.just(None), st.integers(0, len(SCHEDULES) - 1)
)
#: How long before a daylight-saving change a run may start.
_DST_EVE = timedelta(minutes=15)
#: The horizon of the step's listing: short, so rows turn stale within a run.
STALE_AFTER_S = 30.0


@dataclass(frozen=True, repr=False)
class FirePeriodic(_Step):
    """``store.delete_periodic`` of the table entry ``delete``'s name when it is given
    (Q17.10), then ``store.fire_periodic`` of the table entries ``picks`` (distinct
    names), then ``store.list_periodic(stale_after_s=30)``."""

    picks: tuple[int, ...] = (0,)
    delete: int | None = None


def draw_fire_periodic(draw: st.DrawFn) -> FirePeriodic:
    """A ``FirePeriodic`` step: up to three entries of distinct names, and one time in
    four a row deleted first."""
    picks = draw(_PICKS)
    return FirePeriodic(picks, delete=draw(_DELETES))


def schedules_of(step: FirePeriodic, queue: str) -> list[Periodic]:
    """The step's schedules, sending their jobs to ``queue``."""
    return [
        Periodic(SCHEDULES[i][0], queue, **SCHEDULES[i][1])  # type: ignore[arg-type]
        for i in step.picks
    ]


async def apply_fire_periodic(run: _Run, step: FirePeriodic, now: datetime) -> object:
    """Run the step on the engine and the model; they must agree, and no fire time may
    have been enqueued before."""
    from ._run import _agree

    queue = next(iter(run.queues.values())).name
    schedules = schedules_of(step, queue)
    if step.delete is not None:  # Q17.10
        name = SCHEDULES[step.delete][0]
        deleted = await run.store.delete_periodic(name)
        _agree(f"{step}: delete_periodic({name!r})", deleted, run.model.periodic.delete(name))
        event(f"FirePeriodic: delete_periodic -> {deleted}")
    got = await run.store.fire_periodic(schedules)
    want = run.model.periodic.fire(run.model, schedules, now=now)
    _agree(f"{step}: tick", got, want)
    for fired in got.fired:
        key = (fired.name, fired.fire_at)
        assert key not in run.periodic_fired, f"{step}: fire time {key} enqueued twice"
        run.periodic_fired.add(key)
        if _near_a_dst_change(fired.fire_at):
            event("FirePeriodic: a fire time within 6 h after a DST change")
    listed = await run.store.list_periodic(stale_after_s=STALE_AFTER_S)
    _agree(f"{step}: list_periodic", listed, run.model.periodic.list_rows(STALE_AFTER_S, now=now))
    return len(got.fired)


@functools.lru_cache(maxsize=8)
def dst_start_offsets(now: datetime) -> tuple[float, ...]:
    """Q17.7: seconds a fresh run may first advance by: 0 (start where the harness's
    clock stands), or to :data:`_DST_EVE` before :data:`DST_ZONE`'s next spring-forward
    change, or its next fall-back change (each within 400 days)."""
    zone = ZoneInfo(DST_ZONE)
    offsets = [0.0]
    for forward in (True, False):
        change = _next_change(now, zone, forward=forward)
        if change is not None and change - _DST_EVE > now:
            offsets.append((change - _DST_EVE - now).total_seconds())
    return tuple(offsets)


def _next_change(now: datetime, zone: ZoneInfo, *, forward: bool) -> datetime | None:
    """The first instant after ``now`` at which ``zone``'s UTC offset grows
    (``forward``) or shrinks: found hour by hour, then to the second."""
    hour = timedelta(hours=1)
    at, offset = now, _utc_offset(now, zone)
    for _ in range(400 * 24):
        later = _utc_offset(at + hour, zone)
        if later != offset and (later > offset) == forward:
            low, high = at, at + hour  # the offset changes in (low, high]
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                low, high = (low, middle) if _utc_offset(middle, zone) == later else (middle, high)
            return high
        at, offset = at + hour, later
    return None


def _utc_offset(at: datetime, zone: ZoneInfo) -> timedelta:
    offset = at.astimezone(zone).utcoffset()
    assert offset is not None, zone
    return offset


def _near_a_dst_change(at: datetime) -> bool:
    zone = ZoneInfo(DST_ZONE)
    return _utc_offset(at, zone) != _utc_offset(at - timedelta(hours=6), zone)


def periodic_targets(run: _Run, now: datetime) -> list[AdvanceTo]:
    """Each schedule's next fire time ahead, and one microsecond after it."""
    out = []
    for _, at in run.model.periodic.next_fire_times():
        for plus_us in (0, 1):
            target = at + plus_us * _ONE_MICROSECOND
            if target > now:
                seconds = (target - now).total_seconds()
                out.append(AdvanceTo(0, "next_fire_at", plus_us, seconds))
    return out
