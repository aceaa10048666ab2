"""Q17 in the engine-vs-model machine: the ``FirePeriodic`` step.

A step fires a few schedules from a fixed table (:data:`SCHEDULES`), as one worker of a
fleet would, on the engine and on the model, and holds them to the same jobs, the same
delay and the same listing. Two table entries share a name with different definitions,
so the machine also re-defines a schedule (Q17.3). Across the whole run the machine
keeps every (schedule, fire time) enqueued and fails on a second one: each fire time at
most once. Gaps are held to the model's policy: the model keeps exactly the last
``catch_up + 1`` due fire times, so a missing one is a disagreement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..._core import Periodic
from ._steps import _ONE_MICROSECOND, AdvanceTo, _Step

if TYPE_CHECKING:
    from datetime import datetime

    from ._run import _Run

#: The schedules a step may fire: (name, keyword arguments of ``Periodic``).
SCHEDULES: tuple[tuple[str, dict[str, object]], ...] = (
    ("p-every", {"every_s": 5.0}),
    ("p-every", {"every_s": 7.0, "payload": b"v2"}),  # a re-definition of p-every
    ("p-skip", {"every_s": 3.0, "catch_up": "skip", "priority": 2}),
    ("p-cron", {"cron": "* * * * *", "tz": "Europe/Riga", "catch_up": 2}),
    ("p-back", {"every_s": 11.0, "catch_up": 3, "headers": {"tenant": "a"}}),
)
#: The horizon of the step's listing: short, so rows turn stale within a run.
STALE_AFTER_S = 30.0


@dataclass(frozen=True, repr=False)
class FirePeriodic(_Step):
    """``store.fire_periodic`` of the table entries ``picks`` (distinct names), then
    ``store.list_periodic(stale_after_s=30)``."""

    picks: tuple[int, ...] = (0,)


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
    got = await run.store.fire_periodic(schedules)
    want = run.model.periodic.fire(run.model, schedules, now=now)
    _agree(f"{step}: tick", got, want)
    for fired in got.fired:
        key = (fired.name, fired.fire_at)
        assert key not in run.periodic_fired, f"{step}: fire time {key} enqueued twice"
        run.periodic_fired.add(key)
    listed = await run.store.list_periodic(stale_after_s=STALE_AFTER_S)
    _agree(f"{step}: list_periodic", listed, run.model.periodic.list_rows(STALE_AFTER_S, now=now))
    return len(got.fired)


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
