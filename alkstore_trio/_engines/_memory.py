"""The in-memory engine: an engine actor that owns the job table.

One trio task (the actor) owns a :class:`~alkstore_trio._core.JobTable`. Callers never
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
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import trio

from .._core import EnqueueSpec, Job, JobState, JobTable, StoreStats, SweepResult
from .._errors import EngineError, HandleConsumed, InvalidArgument, StoreClosed
from ._nursery import open_background_nursery

if TYPE_CHECKING:
    from ._protocol import SqlParams
from ._wake import WakeHub, WakeListener

T = TypeVar("T")


class Clock(Protocol):
    """Anything with ``now()`` returning a timezone-aware UTC datetime."""

    def now(self) -> datetime:
        """The current time."""
        ...


# A request: the transition to run, and the channel that gets its outcome.
_Reply = trio.MemorySendChannel[tuple[bool, object]]
_Request = tuple[Callable[[JobTable, datetime], object], _Reply]


class MemoryBackend:
    """The in-memory engine (see the module docstring). Construct it with
    :func:`open_memory_backend`, which runs its actor."""

    def __repr__(self) -> str:
        return "memory"

    def __init__(self, clock: Clock, inbox: trio.MemorySendChannel[_Request]) -> None:
        self._clock = clock
        self._inbox = inbox
        self._table = JobTable()
        self.wakes = WakeHub()
        self._closed = False

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

    async def _call(self, transition: Callable[[JobTable, datetime], T]) -> T:
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closed:
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

    # -- the backend protocol ----------------------------------------------------------

    async def enqueue(self, specs: Sequence[EnqueueSpec]) -> list[int]:
        def run(table: JobTable, now: datetime) -> list[int]:
            ids = table.enqueue(specs, now)
            self.wakes.publish({spec.queue for spec in specs})
            return ids

        return await self._call(run)

    async def claim(self, queue: str, worker_id: str, n: int) -> list[Job]:
        return await self._call(lambda table, now: table.claim(queue, worker_id, n, now))

    async def heartbeat(self, queue: str, job_id: int, token: int, extend_s: float | None) -> bool:
        return await self._call(
            lambda table, now: table.heartbeat(queue, job_id, token, extend_s, now)
        )

    async def ack(self, queue: str, job_id: int, token: int) -> bool:
        return await self._call(lambda table, now: table.ack(queue, job_id, token, now))

    async def retry(
        self, queue: str, job_id: int, token: int, error: str | None, delay_s: float | None
    ) -> bool:
        return await self._call(
            lambda table, now: table.retry(queue, job_id, token, error, delay_s, now)
        )

    async def fail(self, queue: str, job_id: int, token: int, error: str | None) -> bool:
        return await self._call(lambda table, now: table.fail(queue, job_id, token, error, now))

    async def ack_batch(self, queue: str, job_ids: Sequence[int]) -> int:
        return await self._call(lambda table, now: table.ack_batch(queue, job_ids, now))

    async def heartbeat_claims(
        self, queue: str, claims: Sequence[tuple[int, int]], extend_s: float | None
    ) -> list[int]:
        return await self._call(
            lambda table, now: table.heartbeat_claims(queue, claims, extend_s, now)
        )

    async def ack_claims(self, queue: str, claims: Sequence[tuple[int, int]]) -> list[int]:
        return await self._call(lambda table, now: table.ack_claims(queue, claims, now))

    async def ack_claims_and_claim(
        self, queue: str, claims: Sequence[tuple[int, int]], worker_id: str, n: int
    ) -> tuple[list[int], list[Job]]:
        return await self._call(
            lambda table, now: table.ack_claims_and_claim(queue, claims, worker_id, n, now)
        )

    async def retry_claims(
        self, queue: str, items: Sequence[tuple[int, int, str | None, float | None]]
    ) -> list[bool]:
        return await self._call(lambda table, now: table.retry_claims(queue, items, now))

    async def fail_claims(
        self, queue: str, items: Sequence[tuple[int, int, str | None]]
    ) -> list[bool]:
        return await self._call(lambda table, now: table.fail_claims(queue, items, now))

    async def cancel(self, queue: str, job_id: int) -> bool:
        return await self._call(lambda table, now: table.cancel(queue, job_id))

    async def get_job(self, queue: str, job_id: int) -> Job | None:
        return await self._call(lambda table, now: table.get(queue, job_id))

    async def sweep_expired(self, queue: str, retention_s: float | None) -> SweepResult:
        return await self._call(lambda table, now: table.sweep_expired(queue, retention_s, now))

    async def find_job(self, job_id: int) -> Job | None:
        return await self._call(lambda table, now: table.find(job_id))

    async def list_jobs(
        self, queue: str, state: JobState, limit: int, after_id: int | None
    ) -> list[Job]:
        return await self._call(lambda table, now: table.list_jobs(queue, state, limit, after_id))

    async def stats(self, queue: str | None) -> StoreStats:
        return await self._call(lambda table, now: table.stats(queue, now))

    async def requeue_dead(self, queue: str, job_ids: Sequence[int] | None) -> int:
        def run(table: JobTable, now: datetime) -> int:
            count = table.requeue_dead(queue, job_ids, now)
            if count:
                self.wakes.publish({queue})
            return count

        return await self._call(run)

    async def purge_dead(self, queue: str, older_than_s: float | None, *, dry_run: bool) -> int:
        return await self._call(
            lambda table, now: table.purge_dead(queue, older_than_s, now, dry_run=dry_run)
        )

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[MemoryTransaction]:
        if self._closed:
            raise StoreClosed("the store is closed")
        tx = MemoryTransaction(self)
        try:
            yield tx
        except BaseException:
            tx._finished = True
            raise
        await tx._commit()

    def open_wake_listener(
        self, queues: frozenset[str]
    ) -> AbstractAsyncContextManager[WakeListener]:
        if self._closed:
            raise StoreClosed("the store is closed")
        return self.wakes.open_listener(queues)

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()

    def close(self) -> None:
        """Stop taking requests (those already sent are still answered). Idempotent."""
        self._closed = True
        self._inbox.close()
        self.wakes.close()


class MemoryTransaction:
    """Q10 on the in-memory engine: rows are buffered with reserved ids and inserted, with
    one wake per touched queue, by one actor request at commit."""

    def __init__(self, backend: MemoryBackend) -> None:
        self._backend = backend
        self._rows: list[tuple[int, EnqueueSpec]] = []
        self._finished = False

    async def enqueue(self, specs: Sequence[EnqueueSpec]) -> list[int]:
        if self._finished:
            raise HandleConsumed("this transaction already ended; open a new one")
        ids = await self._backend._call(lambda table, now: table.reserve_ids(len(specs)))
        self._rows.extend(zip(ids, specs, strict=True))
        return ids

    async def fetch(self, sql: str, params: SqlParams | None) -> list[tuple[Any, ...]]:
        await trio.lowlevel.checkpoint()
        raise InvalidArgument(
            "the in-memory engine runs no SQL: tx.execute() and tx.fetch() need a PostgreSQL store"
        )

    async def _commit(self) -> None:
        if self._finished:
            raise HandleConsumed("this transaction already ended")
        self._finished = True
        rows = self._rows
        if not rows:
            await trio.lowlevel.checkpoint()
            return
        backend = self._backend

        def run(table: JobTable, now: datetime) -> None:
            table.insert(rows, now)
            backend.wakes.publish({spec.queue for _, spec in rows})

        await backend._call(run)


@asynccontextmanager
async def open_memory_backend(clock: Clock) -> AsyncIterator[MemoryBackend]:
    """Run an in-memory engine actor for the duration of the block."""
    inbox, requests = trio.open_memory_channel[_Request](math.inf)
    backend = MemoryBackend(clock, inbox)
    async with open_background_nursery() as nursery:
        nursery.start_soon(backend._serve, requests)
        try:
            yield backend
        finally:
            backend.close()
