"""Q19.1-Q19.3 in the reference model: the kept rows of acked jobs, as naively as the
rest of the model (one dict, linear scans)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datetime import datetime

    from .._core import Job


class ModelHistory:
    """The kept rows (``"completed"``, and Q19.5's ``"cancelled"``), by id."""

    def __init__(self) -> None:
        self.rows: dict[int, Job] = {}

    def finish(self, job: Job, result: bytes | None, now: datetime) -> None:
        """Q19.2: an acked row is kept, with ``completed_at = now`` and its result, when
        its stamp ``keep_completed_s`` is set; otherwise it (and its result) is gone."""
        if job.keep_completed_s is not None:
            self.rows[job.id] = replace(job, state="completed", completed_at=now, result=result)

    def cancelled(self, job: Job, now: datetime) -> None:
        """Q19.5: a job recorded cancelled is kept as ``"cancelled"`` (``completed_at =
        now``, no result) when its stamp ``keep_completed_s`` is set, as an ack keeps."""
        if job.keep_completed_s is not None:
            self.rows[job.id] = replace(job, state="cancelled", completed_at=now, result=None)

    def purge(self, queue: str, now: datetime) -> int:
        """Q19.3: delete this queue's kept rows with ``completed_at + keep_completed_s <
        now``; how many. (Engines do it in batches; every batch a sweep starts within its
        time budget finishes, so the model's one step is what a sweep of the model's
        small tables does.)"""
        doomed = [
            job.id
            for job in self.rows.values()
            if job.queue == queue
            and job.completed_at is not None
            and job.keep_completed_s is not None
            and job.completed_at + timedelta(seconds=job.keep_completed_s) < now
        ]
        for job_id in doomed:
            del self.rows[job_id]
        return len(doomed)

    def listed(self, queue: str, state: str, after_id: int | None) -> list[Job]:
        """D26: this queue's kept rows in ``state`` above ``after_id``, by id."""
        return [
            job
            for job_id in sorted(self.rows)
            if (job := self.rows[job_id]).queue == queue
            and job.state == state
            and (after_id is None or job_id > after_id)
        ]
