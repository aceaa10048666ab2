"""Result rows of the PostgreSQL engine's statements as the core's records."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..._core import NO_HEADERS, Headers, Job, QueueLimits, QueueStats, Throttled
from ..._core._workers import WorkerInfo, worker_state

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

    Every claimed job passes through here, so it is written for speed: the fields are
    passed by position (in :class:`Job`'s field order; the conformance suite reads every
    field back) and the UTC checks are inline. Together about a third faster than
    keywords and :func:`utc` calls.
    """
    (
        id_,
        queue,
        payload,
        priority,
        state,
        attempts,
        max_attempts,
        run_at,
        enqueued_at,
        visibility_timeout_s,
        backoff_base_s,
        expires_at,
        claimed_by,
        claimed_at,
        claim_expires_at,
        last_error,
        headers,
        died_at,
        unique_key,
        claim_token,
        concurrency_key,
        keep_completed_s,
    ) = row[:22]
    return Job(
        id_,
        queue,
        bytes(payload),
        priority,
        state,
        attempts,
        max_attempts,
        run_at if run_at.tzinfo is UTC else run_at.astimezone(UTC),
        enqueued_at if enqueued_at.tzinfo is UTC else enqueued_at.astimezone(UTC),
        visibility_timeout_s,
        backoff_base_s,
        None if expires_at is None else utc(expires_at),
        claimed_by,
        claimed_at if claimed_at is None or claimed_at.tzinfo is UTC else utc(claimed_at),
        claim_expires_at
        if claim_expires_at is None or claim_expires_at.tzinfo is UTC
        else utc(claim_expires_at),
        last_error,
        None if died_at is None else utc(died_at),
        Headers(headers) if headers else NO_HEADERS,
        unique_key,
        concurrency_key,
        claim_token,
        keep_completed_s,
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


def worker_info(row: Sequence[Any], gone_after_s: float) -> WorkerInfo:
    """A row of the ``list_workers`` statement as its :class:`WorkerInfo` (Q21.4)."""
    heartbeat_at, stopped_at, now = utc(row[7]), utc_or_none(row[8]), utc(row[9])
    return WorkerInfo(
        worker_id=row[0],
        host=row[1],
        pid=row[2],
        queues=tuple(row[3]),
        concurrency=row[4],
        version=row[5],
        started_at=utc(row[6]),
        heartbeat_at=heartbeat_at,
        stopped_at=stopped_at,
        state=worker_state(heartbeat_at, stopped_at, now, gone_after_s),
        now=now,
    )
