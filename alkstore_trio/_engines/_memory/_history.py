"""Q19.2/Q19.3 in memory: the kept rows of acked (and, Q19.5, cancelled) jobs (history),
off every claim path.

A kept row is written once, by the ack (or the cancel) that moves it out of the live rows, and never
changes afterwards; it is read by id (``get_job``), listed by id (``list_jobs``) and
purged by age. Each queue keeps a heap of ``(purge_at, id)`` so that a purge touches
only the rows it deletes; ``purge_at`` never changes, so unlike the live heaps these
entries are never stale, and a clock set back needs no rebuild (a purge compares the
heap's top with ``now`` whatever ``now`` is).
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from ..._core import _transitions as t

if TYPE_CHECKING:
    from collections.abc import Iterator
    from datetime import datetime

    from ..._core import Job


class History:
    """The kept rows of one in-memory table, by id, with a purge heap per queue."""

    __slots__ = ("_heaps", "_rows")

    def __init__(self) -> None:
        self._rows: dict[int, Job] = {}
        self._heaps: dict[str, list[tuple[datetime, int]]] = {}

    def keep(self, job: Job) -> None:
        """Store a ``completed`` or ``cancelled`` row (:func:`~alkstore_trio._core.completed`,
        :func:`~alkstore_trio._core.kept_cancelled`)."""
        self._rows[job.id] = job
        heapq.heappush(self._heaps.setdefault(job.queue, []), (t.purge_at(job), job.id))

    def get(self, job_id: int) -> Job | None:
        return self._rows.get(job_id)

    def list_jobs(self, queue: str, state: str, limit: int, after_id: int | None) -> list[Job]:
        """D26 over the kept rows in ``state``: a linear scan, as the operator's listing of
        live rows."""
        floor = 0 if after_id is None else after_id
        found = sorted(
            (
                job
                for job in self._rows.values()
                if job.queue == queue and job.state == state and job.id > floor
            ),
            key=lambda job: job.id,
        )
        return found[:limit]

    def purge(self, queue: str, now: datetime, batch: int = t.PURGE_BATCH) -> int:
        """Q19.3: delete up to ``batch`` of this queue's rows past their ``purge_at``,
        the oldest first; how many."""
        heap = self._heaps.get(queue)
        purged = 0
        while heap and purged < batch and heap[0][0] < now:
            _, job_id = heapq.heappop(heap)
            del self._rows[job_id]
            purged += 1
        return purged

    def __iter__(self) -> Iterator[Job]:
        return iter(self._rows.values())

    def __len__(self) -> int:
        return len(self._rows)
