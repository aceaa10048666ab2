"""``ForwardingEngine``: an engine that hands every call to another engine.

The base of engine middleware written outside the library: subclass it and override the
operations to watch or change (count statements, inject faults, trace, log), and hand
the instance to ``open_store``. It forwards exactly the protocol's methods and nothing
else (no ``__getattr__``), so a store running on it uses nothing but the seam.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence
    from contextlib import AbstractAsyncContextManager
    from datetime import datetime

    from .._core import (
        Enqueued,
        EnqueueSpec,
        Job,
        JobState,
        QueueLimits,
        StoreStats,
        SweepResult,
    )
    from .._core._filters import JobPage  # D26.1
    from .._core._periodic import Periodic, PeriodicInfo, PeriodicTick  # Q17
    from .._core._workers import BeatPhase, WorkerInfo, WorkerRegistration  # Q21
    from ._protocol import (
        Claim,
        Completion,
        Engine,
        EngineTransaction,
        FailItem,
        ProgressItem,
        RetryItem,
    )
    from ._wake import DoneListener, WakeListener


class ForwardingEngine:
    """An :class:`~alkstore_trio.engine.Engine` that forwards every call to ``inner``.

    Example: count the statements a worker sends::

        class Counting(ForwardingEngine):
            acks = 0

            async def ack(self, queue, claims):
                self.acks += 1
                return await super().ack(queue, claims)

        async with open_store(Counting(MemoryEngine())) as store:
            ...

    Args:
        inner: The engine that does the work (not opened yet: :meth:`open` opens it).
    """

    def __init__(self, inner: Engine) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    # -- lifecycle, transactions, wakes -------------------------------------------------

    def open(self) -> AbstractAsyncContextManager[object]:
        return self.inner.open()

    def transaction(self) -> AbstractAsyncContextManager[EngineTransaction]:
        return self.inner.transaction()

    def open_wake_listener(
        self, queues: frozenset[str]
    ) -> AbstractAsyncContextManager[WakeListener]:
        return self.inner.open_wake_listener(queues)

    def open_done_listener(
        self, queue: str, job_ids: frozenset[int]
    ) -> AbstractAsyncContextManager[DoneListener]:
        return self.inner.open_done_listener(queue, job_ids)

    async def aclose(self) -> None:
        await self.inner.aclose()

    # -- the work path -----------------------------------------------------------------

    async def enqueue(self, specs: Sequence[EnqueueSpec]) -> list[Enqueued]:
        return await self.inner.enqueue(specs)

    async def claim(self, queue: str, worker_id: str, n: int) -> list[Job]:
        return await self.inner.claim(queue, worker_id, n)

    async def heartbeat(
        self, queue: str, claims: Sequence[Claim], extend_s: float | None
    ) -> list[int]:
        return await self.inner.heartbeat(queue, claims, extend_s)

    async def heartbeat_progress(
        self, queue: str, items: Sequence[ProgressItem], extend_s: float | None
    ) -> list[int]:
        return await self.inner.heartbeat_progress(queue, items, extend_s)

    async def ack(self, queue: str, claims: Sequence[Claim]) -> list[int]:
        return await self.inner.ack(queue, claims)

    async def ack_and_claim(
        self, queue: str, claims: Sequence[Claim], worker_id: str, n: int
    ) -> tuple[list[int], list[Job]]:
        return await self.inner.ack_and_claim(queue, claims, worker_id, n)

    async def complete(self, queue: str, items: Sequence[Completion]) -> list[int]:
        return await self.inner.complete(queue, items)

    async def complete_and_claim(
        self, queue: str, items: Sequence[Completion], worker_id: str, n: int
    ) -> tuple[list[int], list[Job]]:
        return await self.inner.complete_and_claim(queue, items, worker_id, n)

    async def retry(self, queue: str, items: Sequence[RetryItem]) -> list[bool]:
        return await self.inner.retry(queue, items)

    async def release(self, queue: str, claims: Sequence[Claim], error: str | None) -> list[int]:
        return await self.inner.release(queue, claims, error)

    async def fail(self, queue: str, items: Sequence[FailItem]) -> list[bool]:
        return await self.inner.fail(queue, items)

    async def ack_batch(self, queue: str, job_ids: Sequence[int]) -> int:
        return await self.inner.ack_batch(queue, job_ids)

    # Q19.5
    async def settle_cancelled(self, queue: str, claims: Sequence[Claim]) -> list[int]:
        return await self.inner.settle_cancelled(queue, claims)

    async def cancelling_among(self, queue: str, job_ids: Sequence[int]) -> list[int]:
        return await self.inner.cancelling_among(queue, job_ids)

    # Q16 / R11
    async def next_due_in_s(self, queue: str) -> float | None:
        return await self.inner.next_due_in_s(queue)

    # -- the operator path -------------------------------------------------------------

    async def get_job(self, job_id: int, queue: str | None) -> Job | None:
        return await self.inner.get_job(job_id, queue)

    async def list_jobs(
        self, queue: str, state: JobState, limit: int, after_id: int | None
    ) -> list[Job]:
        return await self.inner.list_jobs(queue, state, limit, after_id)

    async def find_jobs(
        self,
        queue: str,
        state: JobState,
        limit: int,
        after_id: int | None,
        key: str | None,
        header: tuple[str, str] | None,
    ) -> JobPage:
        return await self.inner.find_jobs(queue, state, limit, after_id, key, header)

    async def stats(self, queue: str | None) -> StoreStats:
        return await self.inner.stats(queue)

    async def cancel(self, queue: str, job_id: int) -> bool:
        return await self.inner.cancel(queue, job_id)

    async def requeue_dead(self, queue: str, job_ids: Sequence[int] | None) -> int:
        return await self.inner.requeue_dead(queue, job_ids)

    async def purge_dead(
        self,
        queue: str,
        older_than_s: float | None,
        *,
        dry_run: bool,
        ids: Sequence[int] | None = None,
    ) -> int:
        if ids is None:  # an inner engine written before D25.1 need not know ids
            return await self.inner.purge_dead(queue, older_than_s, dry_run=dry_run)
        return await self.inner.purge_dead(queue, older_than_s, dry_run=dry_run, ids=ids)

    async def sweep_expired(self, queue: str, retention_s: float | None) -> SweepResult:
        return await self.inner.sweep_expired(queue, retention_s)

    # Q16
    async def reschedule(
        self,
        queue: str,
        job_id: int,
        delay_s: float | None,
        run_at: datetime | None,
        priority: int | None,
    ) -> bool:
        return await self.inner.reschedule(queue, job_id, delay_s, run_at, priority)

    # -- Q17 periodic jobs ---------------------------------------------------------------

    async def fire_periodic(self, schedules: Sequence[Periodic]) -> PeriodicTick:
        return await self.inner.fire_periodic(schedules)

    async def list_periodic(self, stale_after_s: float) -> list[PeriodicInfo]:
        return await self.inner.list_periodic(stale_after_s)

    async def delete_periodic(self, name: str) -> bool:
        return await self.inner.delete_periodic(name)

    # -- Q21 the worker registry -----------------------------------------------------------

    async def beat_worker(self, registration: WorkerRegistration, phase: BeatPhase) -> None:
        await self.inner.beat_worker(registration, phase)

    async def list_workers(self, gone_after_s: float, limit: int) -> list[WorkerInfo]:
        return await self.inner.list_workers(gone_after_s, limit)

    # Q18: queue controls.
    async def set_paused(self, queue: str, paused: bool) -> None:
        await self.inner.set_paused(queue, paused)

    async def set_limits(self, queue: str, limits: QueueLimits, refill: bool) -> None:
        await self.inner.set_limits(queue, limits, refill)
