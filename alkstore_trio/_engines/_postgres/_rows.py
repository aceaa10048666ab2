"""Result rows of the PostgreSQL engine's statements as the core's records."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..._core import NO_HEADERS, Headers, Job, QueueLimits, QueueStats, Throttled

if TYPE_CHECKING:
    from collections.abc import Sequence


def job(row: Sequence[Any]) -> Job:
    """A result row in the column order of the queries as a Job: the columns of ``jobs``
    up to ``last_error``, the headers, ``died_at``, the unique key (Q15), the claim token
    (Q19.8), the concurrency key (Q18.8) and the stamp ``keep_completed_s`` (Q19.2).

    The queries send the headers as ``nullif(headers, '{}')``: ``None`` for a job without
    any (the usual case), so psycopg parses no JSON (its jsonb loader takes about 1.3 µs
    a row even for ``{}``, two thirds of this function's own cost) and no
    :class:`Headers` is built.
    """
    headers = row[16]
    return Job(
        id=row[0],
        queue=row[1],
        payload=bytes(row[2]),
        priority=row[3],
        state=row[4],
        attempts=row[5],
        max_attempts=row[6],
        run_at=utc(row[7]),
        enqueued_at=utc(row[8]),
        visibility_timeout_s=row[9],
        backoff_base_s=row[10],
        expires_at=utc_or_none(row[11]),
        claimed_by=row[12],
        claimed_at=utc_or_none(row[13]),
        claim_expires_at=utc_or_none(row[14]),
        last_error=row[15],
        died_at=utc_or_none(row[17]),
        headers=Headers(headers) if headers else NO_HEADERS,
        unique_key=row[18],
        claim_token=row[19],
        concurrency_key=row[20],
        keep_completed_s=row[21],
    )


def kept_job(row: Sequence[Any]) -> Job:
    """Q19.2: a row of the job fields followed by ``completed_at`` and the result (a
    kept row's; ``None`` for other rows), then (Q19.7) the progress text."""
    base = job(row)
    completed_at, result, progress = row[22], row[23], row[24]
    if completed_at is None and result is None and progress is None:
        return base
    return replace(
        base,
        completed_at=utc_or_none(completed_at),
        result=None if result is None else bytes(result),
        progress=progress,
    )


def utc(value: datetime) -> datetime:
    return value if value.tzinfo is UTC else value.astimezone(UTC)


def utc_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else utc(value)


def queue_stats(row: Sequence[Any], now: datetime) -> QueueStats:
    """A row of the ``stats`` statement (one queue) as its :class:`QueueStats`; Q18:
    its pause, limits and throttle counts."""
    return QueueStats(
        queue=row[2],
        pending_ready=int(row[3]),
        pending_delayed=int(row[4]),
        processing=int(row[6]),
        reclaimable=int(row[7]),
        dead=int(row[8]),
        oldest_ready_age_s=(
            None if row[5] is None else max(0.0, (now - utc(row[5])).total_seconds())
        ),
        acked_total=int(row[9]),
        dead_lettered_total=int(row[10]),
        cancelled_total=int(row[11]),
        paused=bool(row[12]),
        limits=(
            QueueLimits(
                max_running=row[13], rate_per_s=row[14], burst=row[15], max_running_per_key=row[19]
            )
            if row[18]
            else None
        ),
        throttled=Throttled(running=int(row[16]), rate=int(row[17]), per_key=int(row[20])),
        cancelling=int(row[21]),
    )
