"""The backend protocol: what an engine must provide to the public ``Store`` facade.

Arguments arrive validated and canonical (see ``alkstore_trio._core._validate``); an
engine only reads its clock, applies the contract's transitions atomically and reports
refusals as ``False``. Driver exceptions become :class:`~alkstore_trio.EngineError` at this
boundary; a call after :meth:`Backend.aclose` raises :class:`~alkstore_trio.StoreClosed`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from .._core import EnqueueSpec, Job, JobState, StoreStats, SweepResult
    from ._wake import WakeListener


#: Values for a statement's ``%s`` (a sequence) or ``%(name)s`` (a mapping) placeholders.
SqlParams: TypeAlias = Sequence[object] | Mapping[str, object]


class TransactionBackend(Protocol):
    """One open engine transaction (Q10)."""

    async def enqueue(self, specs: Sequence[EnqueueSpec]) -> list[int]:
        """Write rows that become visible, and wake their queues, only at commit."""
        ...

    async def fetch(self, sql: str, params: SqlParams | None) -> list[tuple[Any, ...]]:
        """Run the caller's own statement in the transaction; its rows (or ``[]``)."""
        ...


class Backend(Protocol):
    """One engine instance behind one store."""

    async def enqueue(self, specs: Sequence[EnqueueSpec]) -> list[int]:
        """Q2: insert all rows atomically with one clock read; wake their queues."""
        ...

    async def claim(self, queue: str, worker_id: str, n: int) -> list[Job]:
        """Q3: pre-claim sweep and up to ``n`` claims (``n >= 1``), atomically."""
        ...

    async def heartbeat(self, queue: str, job_id: int, token: int, extend_s: float | None) -> bool:
        """Q4 heartbeat under the validity predicate."""
        ...

    async def ack(self, queue: str, job_id: int, token: int) -> bool:
        """Q4 ack under the validity predicate."""
        ...

    async def retry(
        self, queue: str, job_id: int, token: int, error: str | None, delay_s: float | None
    ) -> bool:
        """Q4 retry under the validity predicate; ``delay_s`` is resolved by the caller
        (``None`` only when the claim was the last allowed one)."""
        ...

    async def fail(self, queue: str, job_id: int, token: int, error: str | None) -> bool:
        """Q4 fail under the validity predicate."""
        ...

    async def ack_batch(self, queue: str, job_ids: Sequence[int]) -> int:
        """Q6: distinct ids; count of rows deleted."""
        ...

    async def heartbeat_claims(
        self, queue: str, claims: Sequence[tuple[int, int]], extend_s: float | None
    ) -> list[int]:
        """R2: renew each (job id, claim token) whose claim is valid (Q4's V) in this
        queue (an absolute reset, as :meth:`heartbeat`), atomically in one statement;
        the ids renewed."""
        ...

    async def ack_claims(self, queue: str, claims: Sequence[tuple[int, int]]) -> list[int]:
        """R2: delete each (job id, claim token) whose claim is valid (Q4's V) in this
        queue, atomically in one statement; the ids deleted."""
        ...

    async def ack_claims_and_claim(
        self, queue: str, claims: Sequence[tuple[int, int]], worker_id: str, n: int
    ) -> tuple[list[int], list[Job]]:
        """R2 (D21): :meth:`ack_claims`, then :meth:`claim` (the pre-claim sweep and up
        to ``n`` claims, ``n >= 1``), atomically in one step with one clock read; the ids
        deleted and the jobs claimed (claim order)."""
        ...

    async def retry_claims(
        self, queue: str, items: Sequence[tuple[int, int, str | None, float | None]]
    ) -> list[bool]:
        """R2 (D20): retry each (job id, claim token, error, delay_s) whose claim is valid
        (Q4's V) in this queue, exactly as :meth:`retry` (dead at budget, else pending
        after ``delay_s``), atomically in one statement with one clock read; one bool
        per item, in order. A job listed twice is retried at most once, by its first
        item with a valid claim; its later items are refused."""
        ...

    async def fail_claims(
        self, queue: str, items: Sequence[tuple[int, int, str | None]]
    ) -> list[bool]:
        """R2 (D20): fail each (job id, claim token, error) whose claim is valid (Q4's V)
        in this queue, exactly as :meth:`fail`, atomically in one statement with one clock
        read; one bool per item, in order (a job listed twice as in
        :meth:`retry_claims`)."""
        ...

    async def cancel(self, queue: str, job_id: int) -> bool:
        """Q7."""
        ...

    async def get_job(self, queue: str, job_id: int) -> Job | None:
        """Q8."""
        ...

    async def sweep_expired(self, queue: str, retention_s: float | None) -> SweepResult:
        """Q9, atomically."""
        ...

    async def find_job(self, job_id: int) -> Job | None:
        """D26: the row with this id, live or dead, of any queue."""
        ...

    async def list_jobs(
        self, queue: str, state: JobState, limit: int, after_id: int | None
    ) -> list[Job]:
        """D26: up to ``limit`` (>= 1) rows of this queue in this state, by id
        ascending, with ids above ``after_id`` (all for ``None``)."""
        ...

    async def stats(self, queue: str | None) -> StoreStats:
        """D22: the counts of every queue with rows or counted jobs (only ``queue``'s,
        rows or not, when given), with each queue's counters of jobs acked,
        dead-lettered and cancelled (D27), read atomically at one clock read."""
        ...

    async def requeue_dead(self, queue: str, job_ids: Sequence[int] | None) -> int:
        """D24: move this queue's dead rows with these distinct ids (every one for
        ``None``) back to pending, ready now, attempts reset, atomically; wake the queue
        when any moved. Ids that are not dead rows of this queue are ignored. The
        count moved."""
        ...

    async def purge_dead(self, queue: str, older_than_s: float | None, *, dry_run: bool) -> int:
        """D25: delete this queue's dead rows with ``died_at + older_than_s < now`` (every
        one for ``None``), atomically; the count deleted. D29: with ``dry_run``, count
        them and delete nothing."""
        ...

    def transaction(self) -> AbstractAsyncContextManager[TransactionBackend]:
        """Q10: commit on a clean exit, roll back on any exception."""
        ...

    def open_wake_listener(
        self, queues: frozenset[str]
    ) -> AbstractAsyncContextManager[WakeListener]:
        """A subscription to these queues' wakes, from the moment it is entered."""
        ...

    async def aclose(self) -> None:
        """Close the engine; every later call raises ``StoreClosed``. Idempotent."""
        ...
