"""Q19.5 in memory: the two-phase cancel, the holder's settle and the sweep's part.

A cancelled processing row becomes *cancelling*: still live (it keeps its unique key,
Q15.3), but in none of the claim heaps, so no claim hands it out and Q4's V refuses
every operation of its holder. It sits in its queue's ``cancelling`` heap, by deadline,
for the sweep. It leaves the live rows through :func:`finalize` only: when its holder
settles it (:func:`settle`), when the sweep finds its lease lapsed (:func:`sweep`), or at
once when ``cancel`` finds nobody holding it (a pending row, or a lapsed lease).
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from ..._core import _transitions as t

if TYPE_CHECKING:
    from collections.abc import Iterable
    from datetime import datetime

    from ..._core import Job
    from .._protocol import Claim
    from ._table import JobTable, _QueueIndex


def cancel(table: JobTable, queue: str, job_id: int, now: datetime) -> tuple[bool, bool]:
    """Q19.5: cancel this queue's live row at ``now``. Returns (cancelled, announce):
    ``cancelled`` is False when there is no live row; ``announce`` is True when the row
    is (still) cancelling and its holder is to be told (again)."""
    table._observe(now)
    job = table._live.get(job_id)
    if job is None or job.queue != queue:
        return False, False
    if t.cancel_step(job, now) == "finalize":
        finalize(table, job, now)
        return True, False
    if job.state == "processing":
        table._set_live(t.cancelling(job), now)
    return True, True


def settle(table: JobTable, queue: str, claims: Iterable[Claim], now: datetime) -> list[int]:
    """Q19.5: finalize each (job id, claim token) whose row of this queue is cancelling
    under that token (no lease check); the ids finalized, in the order given."""
    table._observe(now)
    settled: list[int] = []
    for job_id, token in dict.fromkeys(claims):
        job = table._live.get(job_id)
        if job is not None and job.queue == queue and t.is_settleable(job, token):
            finalize(table, job, now)
            settled.append(job_id)
    return settled


def among(table: JobTable, queue: str, job_ids: Iterable[int]) -> list[int]:
    """Q19.5: which of these ids are cancelling rows of this queue (distinct, in order)."""
    live = table._live
    return [
        job_id
        for job_id in dict.fromkeys(job_ids)
        if (job := live.get(job_id)) is not None
        and job.queue == queue
        and job.state == "cancelling"
    ]


def sweep(table: JobTable, index: _QueueIndex, now: datetime) -> int:
    """Q19.5, the sweep's first step: finalize the queue's cancelling rows whose lease
    lapsed (their holder died or never settled); how many."""
    heap = index.cancelling
    count = 0
    while heap and heap[0][0] < now:
        _, job_id, gen = heapq.heappop(heap)
        if table._gen.get(job_id) == gen:
            finalize(table, table._live[job_id], now)
            count += 1
    return count


def finalize(table: JobTable, job: Job, now: datetime) -> None:
    """Q19.5: record a live row as cancelled: it leaves the live rows (its unique key
    frees) and is counted (D27); its stamp ``keep_completed_s`` set, it is kept in the
    table's history as ``"cancelled"`` (Q19.2). The one place a job becomes *cancelled*."""
    table._drop_live(job.id)
    table._counts(job.queue).cancelled += 1
    if job.keep_completed_s is not None:
        table.history.keep(t.kept_cancelled(job, now))
