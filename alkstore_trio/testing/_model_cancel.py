"""The reference model's two-phase cancel (Q19.5), as plainly as the rule reads.

A cancelled pending row, or a processing or cancelling row whose lease lapsed (``now >
claim_expires_at``), is finalized at once: it leaves the rows and is counted cancelled
(D27), and kept as ``"cancelled"`` when its stamp keeps it (Q19.2). A processing row
under a live lease becomes ``"cancelling"`` and stays until its holder settles it (same
claim token, any time) or the sweep finds its lease lapsed. The model writes these
rules out itself, so that it stays an oracle independent of the core's ``_transitions``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable
    from datetime import datetime

    from .._core import Job
    from ._model import ReferenceModel


def _lapsed(job: Job, now: datetime) -> bool:
    return job.claim_expires_at is not None and now > job.claim_expires_at


def cancel(model: ReferenceModel, queue: str, job_id: int, now: datetime) -> bool:
    """Q19.5: ``queue.cancel(job_id)`` at ``now``."""
    job = model._rows.get(job_id)
    if job is None or job.queue != queue or job.state == "dead":
        return False
    if job.state == "pending" or _lapsed(job, now):
        finalize(model, job, now)
    else:
        model._rows[job_id] = replace(job, state="cancelling")
    return True


def settle(
    model: ReferenceModel, queue: str, claims: Iterable[tuple[int, int]], now: datetime
) -> list[int]:
    """Q19.5: ``settle_cancelled``: each distinct (id, token) of a cancelling row of this
    queue claimed with that token is finalized, lease lapsed or not; the ids, in order."""
    settled = []
    for job_id, token in dict.fromkeys(claims):
        job = model._rows.get(job_id)
        if (
            job is not None
            and job.queue == queue
            and job.state == "cancelling"
            and job.claim_token == token
        ):
            finalize(model, job, now)
            settled.append(job_id)
    return settled


def among(model: ReferenceModel, queue: str, job_ids: Iterable[int]) -> list[int]:
    """Q19.5: which of these distinct ids are cancelling rows of this queue."""
    return [
        job_id
        for job_id in dict.fromkeys(job_ids)
        if (job := model._rows.get(job_id)) is not None
        and job.queue == queue
        and job.state == "cancelling"
    ]


def sweep(model: ReferenceModel, queue: str, now: datetime) -> int:
    """Q19.5, the sweep's first step: this queue's cancelling rows whose lease lapsed
    are finalized; how many."""
    lapsed = [
        job
        for job in model.jobs()
        if job.queue == queue and job.state == "cancelling" and _lapsed(job, now)
    ]
    for job in lapsed:
        finalize(model, job, now)
    return len(lapsed)


def finalize(model: ReferenceModel, job: Job, now: datetime) -> None:
    """The job is recorded cancelled: its row goes, and it is counted (D27); its stamp
    ``keep_completed_s`` set, it is kept as ``"cancelled"`` (Q19.2's history)."""
    del model._rows[job.id]
    model._count(job.queue, "cancelled")
    model.kept.cancelled(job, now)
