"""D22 in the reference model: one queue's statistics, counted one row at a time from
the model's rows, as naively as the rest of the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core import QueueStats

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Sequence
    from datetime import datetime

    from .._core import Job, QueueLimits, Throttled


def reclaimable(job: Job, now: datetime) -> bool:
    """A processing row whose lease has lapsed (Q3: a claim may take it again)."""
    return (
        job.state == "processing"
        and job.claim_expires_at is not None
        and now > job.claim_expires_at
    )


def queue_stats(
    name: str,
    rows: Sequence[Job],
    finished: Counter[str],
    *,
    paused: bool,
    limits: tuple[QueueLimits | None, Throttled],
    now: datetime,
) -> QueueStats:
    """D22: the statistics of queue ``name`` from its live and dead ``rows`` (kept rows
    are not counted, Q19.2), its counters ``finished`` (D27), its pause and its limits
    and throttle counts (Q18)."""
    ready = [job for job in rows if job.state == "pending" and job.run_at <= now]
    return QueueStats(
        queue=name,
        pending_ready=len(ready),
        pending_delayed=sum(1 for job in rows if job.state == "pending" and job.run_at > now),
        processing=sum(1 for job in rows if job.state == "processing"),
        reclaimable=sum(1 for job in rows if reclaimable(job, now)),
        dead=sum(1 for job in rows if job.state == "dead"),
        oldest_ready_age_s=(
            (now - min(job.run_at for job in ready)).total_seconds() if ready else None
        ),
        acked_total=finished["acked"],
        dead_lettered_total=finished["dead_lettered"],
        cancelled_total=finished["cancelled"],
        paused=paused,
        limits=limits[0],
        throttled=limits[1],
        cancelling=sum(1 for job in rows if job.state == "cancelling"),
    )
