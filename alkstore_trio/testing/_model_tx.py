"""Transactions of the reference model (Q10): ids reserved at once, rows inserted at
commit with the commit's clock, dropped on a rollback; Q15's keys held meanwhile."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .._core import DEFAULT_OPTS, Enqueued, QueueOpts

if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import datetime

    from ._model import ReferenceModel

__all__ = ["ModelTransaction"]


@dataclass(frozen=True)
class _PendingInsert:
    job_id: int
    queue: str
    payload: bytes
    opts: QueueOpts
    priority: int
    delay_s: float | None
    run_at: datetime | None
    max_attempts: int | None
    headers: Mapping[str, str] | None
    unique_key: str | None = None
    unique_for_s: float | None = None
    concurrency_key: str | None = None


@dataclass
class ModelTransaction:
    """A transaction of the :class:`ReferenceModel` (Q10, decision 7).

    :meth:`enqueue` reserves the id at once; :meth:`commit` inserts every row with the
    commit's ``now``; :meth:`rollback` drops them (their ids are never used again).
    Made by :meth:`ReferenceModel.transaction`.
    """

    model: ReferenceModel
    _rows: list[_PendingInsert] = field(default_factory=list)
    _state: Literal["open", "committed", "rolled back"] = "open"

    def enqueue(
        self,
        queue: str,
        payload: bytes | bytearray | memoryview,
        *,
        opts: QueueOpts | None = None,
        priority: int = 0,
        delay_s: float | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        headers: Mapping[str, str] | None = None,
        unique_key: str | None = None,
        unique_for_s: float | None = None,
        concurrency_key: str | None = None,
        now: datetime | None = None,
    ) -> Enqueued:
        """Reserve an id and buffer one row, as ``tx.enqueue`` does; Q15: with a key held
        (by a live row, an open window at ``now``, or a row of this transaction), buffer
        nothing and return the holder's id.

        Args:
            queue: The queue name.
            payload: The job's bytes.
            opts: The enqueuing handle's stamps; ``None`` for a bare queue name (the
                defaults 300 / 3 / 5 / None).
            priority: As Q2.
            delay_s: As Q2.
            run_at: As Q2.
            max_attempts: As Q2.
            headers: As D30 (``None`` for none).
            unique_key: As Q15.
            unique_for_s: As Q15.
            concurrency_key: As Q18.8.
            now: The clock read of ``tx.enqueue`` (needed with a key: Q15.6).

        Returns:
            The reserved job id, or the holder's (``created=False``).
        """
        if self._state != "open":
            raise RuntimeError(f"model transaction already {self._state}")
        if unique_key is not None:
            assert now is not None, "a keyed tx.enqueue needs its clock read"
            mine = [r.job_id for r in self._rows if (r.queue, r.unique_key) == (queue, unique_key)]
            held = mine[0] if mine else self.model._key_holder(queue, unique_key, now)
            if held is not None:
                return Enqueued.existing(held)
        job_id = self.model._reserve_id()
        self._rows.append(
            _PendingInsert(
                job_id=job_id,
                queue=queue,
                payload=bytes(payload),
                opts=DEFAULT_OPTS if opts is None else opts,
                priority=priority,
                delay_s=delay_s,
                run_at=run_at,
                max_attempts=max_attempts,
                headers=headers,
                unique_key=unique_key,
                unique_for_s=unique_for_s,
                concurrency_key=concurrency_key,
            )
        )
        return Enqueued(job_id)

    def commit(self, *, now: datetime) -> list[int]:
        """Insert the buffered rows, all resolved with this ``now``; returns their ids."""
        if self._state != "open":
            raise RuntimeError(f"model transaction already {self._state}")
        self._state = "committed"
        for row in self._rows:
            self.model._insert(
                row.job_id,
                row.queue,
                row.payload,
                row.opts,
                priority=row.priority,
                delay_s=row.delay_s,
                run_at=row.run_at,
                max_attempts=row.max_attempts,
                headers=row.headers,
                unique_key=row.unique_key,
                unique_for_s=row.unique_for_s,
                concurrency_key=row.concurrency_key,
                now=now,
            )
        return [row.job_id for row in self._rows]

    def rollback(self) -> None:
        """Drop the buffered rows."""
        if self._state != "open":
            raise RuntimeError(f"model transaction already {self._state}")
        self._state = "rolled back"
        self._rows.clear()
