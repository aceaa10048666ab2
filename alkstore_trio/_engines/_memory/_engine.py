"""The in-memory engine: an engine actor that owns the job table.

One trio task (the actor) owns a :class:`~._table.JobTable`. Callers never
touch the table: they send a request (a function of the table and ``now``) over a memory
channel, with a fresh one-slot reply channel, and wait for the answer. The actor reads
the clock once per request and runs it to completion before taking the next one, so every
transition is atomic and they are totally ordered, without locks.

Once a request is sent, the caller waits for its reply shielded from cancellation: the
actor answers within microseconds, and this way a cancelled caller never leaves an
operation half-known (it either was not sent, or it completed and its result returned).
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import trio

from ..._core._filters import JobPage, filtered_page
from ..._core._reschedule import RescheduleSpec, due_in_s, spec_due_in_s
from ..._core._transitions import PURGE_BATCH, PURGE_BUDGET_S
from ..._errors import ClaimLost, EngineError, HandleConsumed, InvalidArgument, StoreClosed
from .._nursery import open_background_nursery
from .._wake import DoneListener, WakeHub, WakeListener
from ._periodic import PeriodicRows
from ._redrive import KeyHeld
from ._table import JobTable
from ._workers import WorkerRows

if TYPE_CHECKING:
    from ..._core import (
        Enqueued,
        EnqueueSpec,
        Job,
        JobState,
        QueueLimits,
        StoreStats,
        SweepResult,
    )
    from ..._core._periodic import Periodic, PeriodicInfo, PeriodicTick  # Q17
    from ..._core._workers import BeatPhase, WorkerInfo, WorkerRegistration  # Q21
    from .._protocol import Claim, Completion, FailItem, ProgressItem, RetryItem, SqlParams
    from ._table import UniqueKey

T = TypeVar("T")


class Clock(Protocol):
    """Anything with ``now()`` returning a timezone-aware UTC datetime."""

    def now(self) -> datetime:
        """The current time."""
        ...


class WallClock:
    """The default clock of the in-memory engine: ``datetime.now(timezone.utc)``."""

    def now(self) -> datetime:
        """The current UTC time."""
        return datetime.now(UTC)


# A request: the transition to run, and the channel that gets its outcome.
_Reply = trio.MemorySendChannel[tuple[bool, object]]
_Request = tuple[Callable[[JobTable, datetime], object], _Reply]


class MemoryEngine:
    """The embedded in-memory engine: one trio task (the engine actor) owns the job table
    and runs every transition, so they are atomic and totally ordered without locks.

    Example::

        engine = MemoryEngine(clock=ManualClock())
        async with alkstore_trio.open_store(engine) as store:
            ...

    ``open_store("memory://", clock=...)`` makes one for you. An instance serves one
    store, once; its rows live as long as that store is open.

    Args:
        clock: Anything with ``now()`` returning a timezone-aware UTC datetime (default:
            the wall clock). Tests pass a :class:`alkstore_trio.testing.ManualClock`.

    Raises:
        InvalidArgument: ``clock`` has no ``now()`` method.
    """

    def __repr__(self) -> str:
        return "memory"

    def __init__(self, clock: Clock | None = None) -> None:
        if clock is not None and (
            isinstance(clock, type) or not callable(getattr(clock, "now", None))
        ):
            raise InvalidArgument(
                "clock must have a now() method returning an aware datetime; "
                f"got {type(clock).__name__}"
            )
        self._clock: Clock = clock or WallClock()
        self._inbox: trio.MemorySendChannel[_Request] | None = None
        self._table = JobTable()
        self._periodic = PeriodicRows()  # Q17
        self._workers = WorkerRows()  # Q21
        self.wakes = WakeHub()
        self._opened = False
        self._closed = False

    @asynccontextmanager
    async def open(self) -> AsyncIterator[None]:
        """Run the engine actor for the duration of the block."""
        if self._opened:
            raise InvalidArgument("this MemoryEngine was opened before; make a new one per store")
        self._opened = True
        inbox, requests = trio.open_memory_channel[_Request](math.inf)
        self._inbox = inbox
        async with open_background_nursery() as nursery:
            nursery.start_soon(self._serve, requests)
            try:
                yield
            finally:
                self.close()

    # -- the actor ---------------------------------------------------------------------

    async def _serve(self, requests: trio.MemoryReceiveChannel[_Request]) -> None:
        """The engine actor: run requests one at a time, each with one clock read."""
        try:
            async for transition, reply in requests:
                try:
                    now = self._clock.now()
                    if now.tzinfo is None:
                        raise EngineError(f"clock.now() returned the naive datetime {now!r}")
                    outcome: tuple[bool, object] = (True, transition(self._table, now))
                except Exception as exc:
                    outcome = (False, exc)
                self._publish_done()
                with suppress(trio.BrokenResourceError):
                    reply.send_nowait(outcome)
        finally:
            # Whoever still waits (only possible if the actor itself is cancelled) must
            # hear that the store is gone rather than wait forever: close every queued
            # request's reply channel, so its caller gets StoreClosed.
            while True:
                try:
                    _, reply = requests.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break
                reply.close()
            requests.close()
            self._closed = True
            self.wakes.close()

    def _publish_done(self) -> None:
        """Q19.4: announce the jobs the transition finalized, still inside it (no other
        request runs in between)."""
        by_queue: dict[str, list[int]] = {}
        for queue, job_id in self._table.take_done():
            by_queue.setdefault(queue, []).append(job_id)
        for queue, ids in by_queue.items():
            self.wakes.publish_done(queue, ids)

    async def _call(self, transition: Callable[[JobTable, datetime], T]) -> T:
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closed or self._inbox is None:
            raise StoreClosed("the store is closed")
        reply_send, reply_receive = trio.open_memory_channel(1)
        try:
            self._inbox.send_nowait((transition, reply_send))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise StoreClosed("the store is closed") from None
        with trio.CancelScope(shield=True):
            try:
                ok, value = await reply_receive.receive()
            except trio.EndOfChannel:
                raise StoreClosed("the store was closed before answering") from None
        if ok:
            return value  # type: ignore[no-any-return]
        assert isinstance(value, Exception)
        if isinstance(value, EngineError):
            raise value
        raise EngineError(f"the in-memory engine failed: {type(value).__name__}") from value

    async def _call_when_free(
        self,
        transition: Callable[[JobTable, datetime], T],
        waiter: MemoryTransaction | None = None,
    ) -> T:
        """Q15: :meth:`_call`, run again after waiting each time it met a unique key that
        an open transaction holds, until the holder committed or rolled back (as
        PostgreSQL makes a conflicting insert wait). A wait that would close a cycle of
        transactions waiting for each other raises :class:`EngineError`, as PostgreSQL's
        deadlock detection does."""

        def run(table: JobTable, now: datetime) -> T | KeyHeld:
            try:
                return transition(table, now)
            except KeyHeld as held:
                return held

        while True:
            outcome = await self._call(run)
            if not isinstance(outcome, KeyHeld):
                return outcome
            holder = outcome.holder
            assert isinstance(holder, MemoryTransaction)
            await holder._wait_finished(waiter)

    # -- the work path -----------------------------------------------------------------

    async def enqueue(self, specs: Sequence[EnqueueSpec]) -> list[Enqueued]:
        def run(table: JobTable, now: datetime) -> list[Enqueued]:
            ids, made = table.enqueue_rows(specs, now)
            _publish_specs(self.wakes, made, now)
            return ids

        return await self._call_when_free(run)

    async def claim(self, queue: str, worker_id: str, n: int) -> list[Job]:
        return await self._call(lambda table, now: table.claim(queue, worker_id, n, now))

    async def heartbeat(
        self, queue: str, claims: Sequence[Claim], extend_s: float | None
    ) -> list[int]:
        return await self._call(lambda table, now: table.heartbeat(queue, claims, extend_s, now))

    async def heartbeat_progress(
        self, queue: str, items: Sequence[ProgressItem], extend_s: float | None
    ) -> list[int]:
        return await self._call(
            lambda table, now: table.heartbeat_progress(queue, items, extend_s, now)
        )

    async def ack(self, queue: str, claims: Sequence[Claim]) -> list[int]:
        def run(table: JobTable, now: datetime) -> list[int]:
            acked = table.ack(queue, claims, now)
            self._freed(table, queue, len(acked))
            return acked

        return await self._call(run)

    async def ack_and_claim(
        self, queue: str, claims: Sequence[Claim], worker_id: str, n: int
    ) -> tuple[list[int], list[Job]]:
        def run(table: JobTable, now: datetime) -> tuple[list[int], list[Job]]:
            acked, jobs = table.ack_and_claim(queue, claims, worker_id, n, now)
            self._freed(table, queue, len(acked) - len(jobs))
            return acked, jobs

        return await self._call(run)

    async def complete(self, queue: str, items: Sequence[Completion]) -> list[int]:
        def run(table: JobTable, now: datetime) -> list[int]:
            done = table.complete(queue, items, now)
            self._freed(table, queue, len(done))
            return done

        return await self._call(run)

    async def complete_and_claim(
        self, queue: str, items: Sequence[Completion], worker_id: str, n: int
    ) -> tuple[list[int], list[Job]]:
        def run(table: JobTable, now: datetime) -> tuple[list[int], list[Job]]:
            done, jobs = table.complete_and_claim(queue, items, worker_id, n, now)
            self._freed(table, queue, len(done) - len(jobs))
            return done, jobs

        return await self._call(run)

    async def retry(self, queue: str, items: Sequence[RetryItem]) -> list[bool]:
        def run(table: JobTable, now: datetime) -> list[bool]:
            done = table.retry(queue, items, now)
            self._freed(table, queue, sum(done))
            return done

        return await self._call(run)

    async def release(self, queue: str, claims: Sequence[Claim], error: str | None) -> list[int]:
        def run(table: JobTable, now: datetime) -> list[int]:
            released = table.release_claims(queue, claims, error, now)
            if released:
                self.wakes.publish({queue})  # Q19.8: others take them at once
            return released

        return await self._call(run)

    async def fail(self, queue: str, items: Sequence[FailItem]) -> list[bool]:
        def run(table: JobTable, now: datetime) -> list[bool]:
            done = table.fail(queue, items, now)
            self._freed(table, queue, sum(done))
            return done

        return await self._call(run)

    async def ack_batch(self, queue: str, job_ids: Sequence[int]) -> int:
        def run(table: JobTable, now: datetime) -> int:
            count = table.ack_batch(queue, job_ids, now)
            self._freed(table, queue, count)
            return count

        return await self._call(run)

    async def settle_cancelled(self, queue: str, claims: Sequence[Claim]) -> list[int]:
        def run(table: JobTable, now: datetime) -> list[int]:
            settled = table.settle_cancelled(queue, claims, now)
            self._freed(table, queue, len(settled))  # a cancelling lease held a slot
            return settled

        return await self._call(run)

    async def cancelling_among(self, queue: str, job_ids: Sequence[int]) -> list[int]:
        return await self._call(lambda table, now: table.cancelling_among(queue, job_ids))

    def _freed(self, table: JobTable, queue: str, freed: int) -> None:
        """Q18.7: settling ``freed`` leases of a limited queue (more than its claim took
        back) frees slots: wake the queue, so idle workers claim them at once. The wake
        says "due now" (R11): a worker that knew a later due time for the queue (the
        lease lapse it waited for, Q18.9) looks the queue up again if the claim this wake
        starts comes back short, say because a rate limit throttled it."""
        if freed > 0 and table.limits.limited(queue):
            self.wakes.publish_due(queue, 0.0)

    # Q16 / R11
    async def next_due_in_s(self, queue: str) -> float | None:
        return await self._call(lambda table, now: table.next_due_in_s(queue, now))

    # -- the operator path -------------------------------------------------------------

    async def cancel(self, queue: str, job_id: int) -> bool:
        def run(table: JobTable, now: datetime) -> bool:
            cancelled, announce = table.cancel(queue, job_id, now)
            if announce:
                # Q19.5/R15: the holder hears of it in the same transition ("at once").
                self.wakes.publish_cancel(queue, job_id)
            return cancelled

        return await self._call(run)

    async def get_job(self, job_id: int, queue: str | None) -> Job | None:
        return await self._call(lambda table, now: table.get(job_id, queue))

    async def sweep_expired(self, queue: str, retention_s: float | None) -> SweepResult:
        swept = await self._call(lambda table, now: table.sweep_expired(queue, retention_s, now))
        # Q19.3: the purge of kept rows goes on in batches, each a transition of its own
        # (other operations run between them), as on PostgreSQL.
        purged, batch = swept.purged_completed, swept.purged_completed
        deadline = time.monotonic() + PURGE_BUDGET_S
        while batch == PURGE_BATCH and time.monotonic() < deadline:
            batch = await self._call(lambda table, now: table.history.purge(queue, now))
            purged += batch
        return swept._replace(purged_completed=purged)

    async def list_jobs(
        self, queue: str, state: JobState, limit: int, after_id: int | None
    ) -> list[Job]:
        return await self._call(lambda table, now: table.list_jobs(queue, state, limit, after_id))

    async def find_jobs(
        self,
        queue: str,
        state: JobState,
        limit: int,
        after_id: int | None,
        key: str | None,
        header: tuple[str, str] | None,
    ) -> JobPage:
        """D26.1 over every row ``list_jobs`` would list (a linear scan, as that one)."""

        def page(table: JobTable, now: datetime) -> JobPage:
            rows = table.list_jobs(queue, state, 2**63, after_id)
            return filtered_page(rows, key, header, limit)

        return await self._call(page)

    async def stats(self, queue: str | None) -> StoreStats:
        return await self._call(lambda table, now: table.stats(queue, now))

    async def requeue_dead(self, queue: str, job_ids: Sequence[int] | None) -> int:
        def run(table: JobTable, now: datetime) -> int:
            count = table.requeue_dead(queue, job_ids, now)
            if count:
                self.wakes.publish({queue})
            return count

        return await self._call_when_free(run)

    async def purge_dead(
        self,
        queue: str,
        older_than_s: float | None,
        *,
        dry_run: bool,
        ids: Sequence[int] | None = None,
    ) -> int:
        return await self._call(
            lambda table, now: table.purge_dead(queue, older_than_s, now, dry_run=dry_run, ids=ids)
        )

    # Q16
    async def reschedule(
        self,
        queue: str,
        job_id: int,
        delay_s: float | None,
        run_at: datetime | None,
        priority: int | None,
    ) -> bool:
        spec = RescheduleSpec(delay_s, run_at, priority)

        def run(table: JobTable, now: datetime) -> bool:
            job = table.reschedule(queue, job_id, spec, now)
            if job is not None:
                self.wakes.publish_due(queue, due_in_s(job.run_at, now))
            return job is not None

        return await self._call(run)

    # -- Q17 periodic jobs ---------------------------------------------------------------

    async def fire_periodic(self, schedules: Sequence[Periodic]) -> PeriodicTick:
        def run(table: JobTable, now: datetime) -> PeriodicTick:
            tick = self._periodic.fire(schedules, table, now)
            if tick.fired:
                by_name = {p.name: p.queue for p in schedules}
                self.wakes.publish({by_name[f.name] for f in tick.fired})
            return tick

        return await self._call(run)

    async def list_periodic(self, stale_after_s: float) -> list[PeriodicInfo]:
        return await self._call(lambda table, now: self._periodic.list(stale_after_s, now))

    async def delete_periodic(self, name: str) -> bool:
        return await self._call(lambda table, now: self._periodic.delete(name))

    # -- Q21 the worker registry -----------------------------------------------------------

    async def beat_worker(self, registration: WorkerRegistration, phase: BeatPhase) -> None:
        await self._call(lambda table, now: self._workers.beat(registration, phase, now))

    async def list_workers(self, gone_after_s: float, limit: int) -> list[WorkerInfo]:
        return await self._call(lambda table, now: self._workers.list(gone_after_s, limit, now))

    # Q18: queue controls.
    async def set_paused(self, queue: str, paused: bool) -> None:
        def run(table: JobTable, now: datetime) -> None:
            table.set_paused(queue, paused)
            if not paused:
                self.wakes.publish({queue})

        await self._call(run)

    async def set_limits(self, queue: str, limits: QueueLimits, refill: bool) -> None:
        def run(table: JobTable, now: datetime) -> None:
            table.set_limits(queue, limits, refill, now)
            self.wakes.publish({queue})

        await self._call(run)

    # -- lifecycle, transactions, wakes -------------------------------------------------

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[MemoryTransaction]:
        if self._closed:
            raise StoreClosed("the store is closed")
        tx = MemoryTransaction(self)
        try:
            yield tx
        except BaseException:
            tx._finished = True
            tx._release()
            raise
        await tx._commit()

    def open_wake_listener(
        self, queues: frozenset[str]
    ) -> AbstractAsyncContextManager[WakeListener]:
        if self._closed:
            raise StoreClosed("the store is closed")
        return self.wakes.open_listener(queues)

    def open_done_listener(
        self, queue: str, job_ids: frozenset[int]
    ) -> AbstractAsyncContextManager[DoneListener]:
        if self._closed:
            raise StoreClosed("the store is closed")
        return self.wakes.open_done_listener(queue, job_ids)

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()

    def close(self) -> None:
        """Stop taking requests (those already sent are still answered). Idempotent."""
        self._closed = True
        if self._inbox is not None:
            self._inbox.close()
        self.wakes.close()


class MemoryTransaction:
    """Q10 on the in-memory engine: rows are buffered with reserved ids and inserted, with
    one wake per touched queue, by one actor request at commit."""

    def __init__(self, backend: MemoryEngine) -> None:
        self._backend = backend
        self._rows: list[tuple[int, EnqueueSpec]] = []
        #: Q19.6: the completions to apply at the commit, per queue.
        self._completions: list[tuple[str, list[Completion]]] = []
        self._finished = False
        # Q15: the unique keys this transaction holds until it ends, who waits for it,
        # and whom it waits for (to find a cycle of waits: a deadlock).
        self._keys: list[UniqueKey] = []
        self._done = trio.Event()
        self._waiting_for: MemoryTransaction | None = None

    async def enqueue(self, specs: Sequence[EnqueueSpec]) -> list[Enqueued]:
        if self._finished:
            raise HandleConsumed("this transaction already ended; open a new one")
        results, rows = await self._backend._call_when_free(
            lambda table, now: table.hold(specs, now, self), waiter=self
        )
        self._rows.extend(rows)
        self._keys.extend(
            (spec.queue, spec.unique_key) for _, spec in rows if spec.unique_key is not None
        )
        return results

    async def _wait_finished(self, waiter: MemoryTransaction | None) -> None:
        """Q15: wait until this transaction ends; ``waiter`` is the transaction that
        waits (``None``: an enqueue or redrive outside a transaction)."""
        if waiter is not None:
            holder: MemoryTransaction | None = self
            while holder is not None:
                if holder is waiter:
                    raise EngineError(
                        "deadlock detected: two transactions wait for each other's unique "
                        "keys; this one was refused (retry it)"
                    )
                holder = holder._waiting_for
            waiter._waiting_for = self
        try:
            await self._done.wait()
        finally:
            if waiter is not None:
                waiter._waiting_for = None

    def _release(self) -> None:
        """Q15: the transaction ended: drop the holds left (all of them on a rollback)
        and let its waiters run again. Synchronous, so it runs even when cancelled: the
        actor changes the table only inside a request, which never spans a checkpoint."""
        self._backend._table.release(self._keys, self)
        self._done.set()

    async def fetch(self, sql: str, params: SqlParams | None) -> list[tuple[Any, ...]]:
        await trio.lowlevel.checkpoint()
        raise InvalidArgument(
            "the in-memory engine runs no SQL: tx.execute() and tx.fetch() need a PostgreSQL store"
        )

    async def complete(self, queue: str, items: Sequence[Completion]) -> list[int]:
        """Q19.6: the claims valid now; their completion is applied at the commit, in
        the same actor request as the buffered rows (one clock read). A claim lost in
        between (the caller awaited something after ``complete``) fails the commit with
        ``ClaimLost``: nothing is inserted."""
        if self._finished:
            raise HandleConsumed("this transaction already ended; open a new one")

        def run(table: JobTable, now: datetime) -> list[int]:
            return [
                i.job_id for i in items if table._valid(queue, i.job_id, i.token, now) is not None
            ]

        done = await self._backend._call(run)
        if done:
            self._completions.append((queue, [i for i in items if i.job_id in done]))
        return done

    async def _commit(self) -> None:
        if self._finished:
            raise HandleConsumed("this transaction already ended")
        self._finished = True
        rows, completions = self._rows, self._completions
        try:
            if not rows and not completions:
                await trio.lowlevel.checkpoint()
                return
            backend = self._backend

            def run(table: JobTable, now: datetime) -> None:
                for queue, items in completions:  # Q19.6: all or nothing, then the rows
                    if not all(
                        table._valid(queue, i.job_id, i.token, now) is not None for i in items
                    ):
                        raise ClaimLost(f"queue {queue!r}: a claim was lost before the commit")
                for queue, items in completions:
                    backend._freed(table, queue, len(table.complete(queue, items, now)))
                table.insert(rows, now)
                _publish_specs(backend.wakes, [spec for _, spec in rows], now)

            await backend._call(run)
        finally:
            self._release()


def _publish_specs(wakes: WakeHub, specs: Sequence[EnqueueSpec], now: datetime) -> None:
    """Wake the queues of these enqueued rows: once for the rows ready now, once with
    the earliest due time of the delayed ones (R11)."""
    ready: set[str] = set()
    due: dict[str, float] = {}
    for spec in specs:
        # The usual row, ready now, costs what the set of queues cost before R11.
        seconds = None if spec.delay_s is None and spec.run_at is None else spec_due_in_s(spec, now)
        if seconds is None:
            ready.add(spec.queue)
        else:
            due[spec.queue] = min(seconds, due.get(spec.queue, seconds))
    wakes.publish(ready)
    for queue, seconds in due.items():
        wakes.publish_due(queue, seconds)
