"""Q16 in memory: rescheduling a pending row, and the next due time of a queue (R11).

Both read the queue's ``delayed`` heap through the table's own upkeep (``_observe``,
``_promote_due``, ``_set_live``); a limited queue's due time adds Q18.9's waits
(:func:`._per_key.limited_due_in_s`).
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from ..._core._reschedule import due_in_s, is_reschedulable, rescheduled
from . import _per_key

if TYPE_CHECKING:
    from datetime import datetime

    from ..._core import Job
    from ..._core._reschedule import RescheduleSpec
    from ._table import JobTable


def reschedule(
    table: JobTable, queue: str, job_id: int, spec: RescheduleSpec, now: datetime
) -> Job | None:
    """Q16: give this queue's pending row its new ``run_at`` and priority; the new row,
    or ``None`` (processing, cancelling, dead or missing: nothing changes)."""
    table._observe(now)
    job = table._live.get(job_id)
    if not is_reschedulable(job, queue):
        return None
    assert job is not None
    new = rescheduled(job, now, spec)
    table._set_live(new, now)
    return new


def next_due_in_s(table: JobTable, queue: str, now: datetime) -> float | None:
    """Q16: seconds until the earliest future ``run_at`` of this queue's pending rows (the
    top of its ``delayed`` heap, once the due and stale entries are off it)."""
    table._observe(now)
    index = table._queues.get(queue)
    if index is None:
        return None
    table._promote_due(index, now)
    delayed = index.delayed
    due: float | None = None
    while delayed:
        run_at, job_id, gen = delayed[0]
        if table._gen.get(job_id) == gen:
            due = due_in_s(run_at, now)
            break
        heapq.heappop(delayed)
    if not table.limits.limited(queue):
        return due
    return _per_key.limited_due_in_s(table, queue, index, due, now)
