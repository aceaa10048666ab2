"""D22 in memory: a queue's counts, by a linear scan of the live and dead rows, as
counting is on any engine. Kept rows (Q19.2) are never counted: a history of a million
rows must not make ``stats`` slower."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._core import QueueLimits, QueueStats, StoreStats, Throttled
from ..._core import _transitions as t

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from datetime import datetime

    from ..._core import Job

#: A queue's counters and controls: acked, dead-lettered, cancelled (D27), paused,
#: limits and throttle counts (Q18).
Entry = tuple[int, int, int, bool, QueueLimits | None, Throttled]


def table_stats(
    rows: Iterable[Job],
    queue: str | None,
    names: Iterable[str],
    now: datetime,
    *,
    ids_issued: int,
    entry: Callable[[str], Entry],
) -> StoreStats:
    """D22 over ``rows`` (live and dead): every queue of ``names`` and with rows, or only
    ``queue`` (rows or not); ``entry`` gives a queue's counters and controls."""
    counts: dict[str, list[int]] = {}
    oldest: dict[str, datetime] = {}
    for name in [queue] if queue is not None else names:
        counts[name] = [0, 0, 0, 0, 0, 0]
    for job in rows:
        if queue is not None and job.queue != queue:
            continue
        row = counts.setdefault(job.queue, [0, 0, 0, 0, 0, 0])
        if job.state == "dead":
            row[4] += 1
        elif job.state == "cancelling":  # Q19.5
            row[5] += 1
        elif job.state == "processing":
            row[2] += 1
            if t.is_reclaimable(job, now):
                row[3] += 1
        elif job.run_at <= now:
            row[0] += 1
            if job.queue not in oldest or job.run_at < oldest[job.queue]:
                oldest[job.queue] = job.run_at
        else:
            row[1] += 1
    entries: list[QueueStats] = []
    for name, row in sorted(counts.items()):
        acked, dead_lettered, cancelled, paused, limits, throttled = entry(name)
        entries.append(
            QueueStats(
                queue=name,
                pending_ready=row[0],
                pending_delayed=row[1],
                processing=row[2],
                reclaimable=row[3],
                dead=row[4],
                oldest_ready_age_s=(
                    (now - oldest[name]).total_seconds() if name in oldest else None
                ),
                acked_total=acked,
                dead_lettered_total=dead_lettered,
                cancelled_total=cancelled,
                paused=paused,
                limits=limits,
                throttled=throttled,
                cancelling=row[5],
            )
        )
    return StoreStats(now=now, ids_issued=ids_issued, queues=tuple(entries))
