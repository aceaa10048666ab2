"""Q21 on the in-memory engine: the worker rows, beside the job table.

The engine actor runs one request at a time, so each beat is atomic. Pure and
synchronous, like the job table; ``now`` is always an argument.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..._core._workers import (
    WORKER_PURGE_AFTER_S,
    WORKER_PURGE_BATCH,
    WorkerInfo,
    list_order_key,
    worker_state,
)

if TYPE_CHECKING:
    from datetime import datetime

    from ..._core._workers import BeatPhase, WorkerRegistration


@dataclass(frozen=True)
class _Row:
    registration: WorkerRegistration
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None


class WorkerRows:
    """Every worker's row, by worker id (Q21)."""

    def __init__(self) -> None:
        self._rows: dict[str, _Row] = {}

    def beat(self, registration: WorkerRegistration, phase: BeatPhase, now: datetime) -> None:
        """Q21.2: write the row for ``phase``; a start or a beat also purges (Q21.4)."""
        worker_id = registration.worker_id
        row = self._rows.get(worker_id)
        if phase == "stop":
            if row is not None:
                self._rows[worker_id] = replace(row, heartbeat_at=now, stopped_at=now)
            return
        started_at = now if phase == "start" or row is None else row.started_at
        self._rows[worker_id] = _Row(registration, started_at, now, None)
        self._purge(now)

    def _purge(self, now: datetime) -> None:
        """Q21.4: delete up to a batch of the rows unheard of for a day, oldest first."""
        old = [
            (row.heartbeat_at, worker_id)
            for worker_id, row in self._rows.items()
            if (now - row.heartbeat_at).total_seconds() > WORKER_PURGE_AFTER_S
        ]
        for _, worker_id in sorted(old)[:WORKER_PURGE_BATCH]:
            del self._rows[worker_id]

    def list(self, gone_after_s: float, limit: int, now: datetime) -> list[WorkerInfo]:
        """Q21.4: up to ``limit`` rows, the latest heartbeat first."""
        infos = [
            WorkerInfo(
                worker_id=row.registration.worker_id,
                host=row.registration.host,
                pid=row.registration.pid,
                queues=row.registration.queues,
                concurrency=row.registration.concurrency,
                version=row.registration.version,
                started_at=row.started_at,
                heartbeat_at=row.heartbeat_at,
                stopped_at=row.stopped_at,
                state=worker_state(row.heartbeat_at, row.stopped_at, now, gone_after_s),
                now=now,
            )
            for row in self._rows.values()
        ]
        return sorted(infos, key=list_order_key)[:limit]
