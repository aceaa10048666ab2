"""Q16's steps of the engine-vs-model machine: ``queue.reschedule`` and
``queue.next_due_in_s``, with how they are drawn and applied (kept beside the other
steps' modules so that the rule's whole part of the machine is in one place)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

import hypothesis.strategies as st

from ._steps import _RUN_AT_TIMEZONES, _Step

if TYPE_CHECKING:
    from datetime import datetime

    from ._run import _Run

_RESCHEDULE_DELAYS = st.sampled_from((None, 0.0, 3.0, -2.0, 12.5))
_RESCHEDULE_RUN_ATS = st.sampled_from((None, 5.0, -4.0, 0.5))
_RESCHEDULE_PRIORITIES = st.sampled_from((None, 3, -1, 0))


@dataclass(frozen=True, repr=False)
class Reschedule(_Step):
    """``queue.reschedule(job_id, delay_s=..., run_at=now + run_at_in_s, priority=...)``
    (at most one of the two times; when both are ``None``, a priority)."""

    queue: str
    job_id: int = 0
    delay_s: float | None = None
    run_at_in_s: float | None = None
    run_at_tz: int = 0
    priority: int | None = None


@dataclass(frozen=True, repr=False)
class NextDue(_Step):
    """``queue.next_due_in_s()``."""

    queue: str


def draw_q16_step(draw: st.DrawFn, run: _Run, queue: str) -> _Step:
    """A reschedule of a pending row (most often), or of any id; or a next-due read."""
    read: bool = draw(st.booleans())
    if read:
        return NextDue(queue)
    name = run.queues[queue].name
    pending = [job.id for job in run.model.jobs() if job.state == "pending" and job.queue == name]
    job_id = draw(st.sampled_from([*pending, *pending, *run._id_pool()]))
    delay_s = draw(_RESCHEDULE_DELAYS)
    run_at_in_s = None if delay_s is not None else draw(_RESCHEDULE_RUN_ATS)
    priority = draw(_RESCHEDULE_PRIORITIES)
    if delay_s is None and run_at_in_s is None and priority is None:
        priority = 2
    tz = draw(st.integers(0, len(_RUN_AT_TIMEZONES) - 1))
    return Reschedule(queue, job_id, delay_s, run_at_in_s, tz, priority)


def _agree(what: str, engine: object, model: object) -> None:
    from ._run import _agree as agree  # _run imports this module: imported when used

    agree(what, engine, model)


async def apply_reschedule(run: _Run, step: Reschedule, now: datetime) -> object:
    queue = run.queues[step.queue]
    run_at = None
    if step.run_at_in_s is not None:
        zone = _RUN_AT_TIMEZONES[step.run_at_tz]
        run_at = (now + timedelta(seconds=step.run_at_in_s)).astimezone(zone)
    got = await queue.reschedule(
        step.job_id, delay_s=step.delay_s, run_at=run_at, priority=step.priority
    )
    want = run.model.reschedule(
        queue.name,
        step.job_id,
        delay_s=step.delay_s,
        run_at=run_at,
        priority=step.priority,
        now=now,
    )
    _agree(f"{step}: result", got, want)
    return got


async def apply_next_due(run: _Run, step: NextDue, now: datetime) -> object:
    queue = run.queues[step.queue]
    got = await queue.next_due_in_s()
    want = run.model.next_due_in_s(queue.name, now=now)
    _agree(f"{step}: result", got, want)
    return got
