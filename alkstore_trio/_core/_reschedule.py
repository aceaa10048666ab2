"""Q16: rescheduling a pending job, and the due times that wake workers on time (R11).

Pure, like the rest of the core: validation of ``reschedule``'s arguments, the
transition of a pending row, and the two due-time rules the engines share: how far in
the future an enqueued row is due (the wake's announcement) and which row of a queue is
due next.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple

from .._errors import InvalidArgument
from . import _validate as v

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._records import EnqueueSpec, Job


class RescheduleSpec(NamedTuple):
    """Q16: validated input of one ``reschedule``: the new due time as a delay from the
    engine's ``now`` (>= 0: a negative delay was clamped to now) or as a UTC datetime, or
    neither (keep ``run_at``); and the new priority, or ``None`` (keep it)."""

    delay_s: float | None
    run_at: datetime | None
    priority: int | None


def check_reschedule(delay_s: object, run_at: object, priority: object) -> RescheduleSpec:
    """Q16: at most one of ``delay_s`` and ``run_at``, and something to change."""
    if delay_s is not None and run_at is not None:
        raise InvalidArgument("reschedule takes delay_s or run_at, not both: pass one new due time")
    if delay_s is None and run_at is None and priority is None:
        raise InvalidArgument(
            "reschedule needs a new due time (delay_s=... or run_at=...) or a new priority"
        )
    delay = None if delay_s is None else max(0.0, v.check_duration("delay_s", delay_s))
    return RescheduleSpec(
        delay_s=delay,
        run_at=v.check_optional_run_at(run_at),
        priority=None if priority is None else v.check_priority(priority),
    )


def is_reschedulable(job: Job | None, queue: str) -> bool:
    """Q16: only a pending row of this queue can be rescheduled."""
    return job is not None and job.queue == queue and job.state == "pending"


def rescheduled(job: Job, now: datetime, spec: RescheduleSpec) -> Job:
    """Q16: the pending row with its new ``run_at`` (``now + delay_s``, or ``run_at`` as
    given, or unchanged) and priority (or unchanged). Nothing else changes: not the
    attempts, ``enqueued_at``, ``expires_at`` or ``last_error``."""
    if spec.delay_s is not None:
        run_at = now + timedelta(seconds=spec.delay_s)
    elif spec.run_at is not None:
        run_at = spec.run_at
    else:
        run_at = job.run_at
    priority = job.priority if spec.priority is None else spec.priority
    return replace(job, run_at=run_at, priority=priority)


def due_in_s(run_at: datetime, now: datetime) -> float | None:
    """R11: the seconds from ``now`` until a pending row with this ``run_at`` is due, or
    ``None`` when it is due already (a wake then means "ready now")."""
    seconds = (run_at - now).total_seconds()
    return seconds if seconds > 0 else None


def spec_due_in_s(spec: EnqueueSpec, now: datetime) -> float | None:
    """R11: :func:`due_in_s` of the row ``spec`` enqueues at ``now`` (Q2's resolution)."""
    if spec.delay_s is not None:
        return spec.delay_s if spec.delay_s > 0 else None
    if spec.run_at is not None:
        return due_in_s(spec.run_at, now)
    return None


def next_due_in_s(jobs: Iterable[Job], queue: str, now: datetime) -> float | None:
    """Q16 (``next_due_in_s``): the seconds from ``now`` until the earliest ``run_at``
    later than ``now`` among this queue's pending rows, or ``None`` when there is none.
    A reference scan: engines answer it from an index."""
    due = [
        job.run_at
        for job in jobs
        if job.queue == queue and job.state == "pending" and job.run_at > now
    ]
    return (min(due) - now).total_seconds() if due else None
