"""The public face of every engine: :class:`Store`, :class:`Queue`, :class:`JobHandle`
and :class:`Transaction`.

These classes hold everything that must be identical on every engine: argument
validation (so bad input fails the same way, before any I/O), the closed-store check
(Q11), the one-shot rule of job handles (Q4) and the backoff draw (Q5). They then call
the engine through the :class:`~alkstore_trio._engines._protocol.Backend` protocol.
None of them is constructed by users: :func:`alkstore_trio.open_store` makes the store,
and the store makes the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, final

import trio

from ._core import (
    DEFAULT_OPTS,
    EnqueueSpec,
    Job,
    JobState,
    QueueOpts,
    StoreStats,
    SweepResult,
    backoff_delay_s,
    enqueue_specs,
)
from ._core import _validate as v
from ._errors import HandleConsumed, InvalidArgument, StoreClosed

if TYPE_CHECKING:
    import random
    from collections.abc import AsyncIterator, Awaitable, Iterable, Iterator
    from datetime import datetime

    from ._engines._protocol import Backend, SqlParams, TransactionBackend
    from ._engines._wake import WakeListener

_T = TypeVar("_T")

#: The most rows one :meth:`Queue.list_jobs` call returns (D26): payloads come along.
LIST_LIMIT_MAX = 1000
_STATES: tuple[JobState, ...] = ("pending", "processing", "dead")


@final
class Store:
    """An open job store on one engine. Made by :func:`alkstore_trio.open_store`.

    A store hands out :class:`Queue` handles (no I/O), opens transactions and wake
    listeners, and is closed by leaving its ``async with`` block or by :meth:`aclose`.
    After that, every operation on it and on everything it made raises
    :class:`StoreClosed`.
    """

    def __init__(self, backend: Backend, *, rng: random.Random, max_payload_bytes: int) -> None:
        self._backend = backend
        self._rng = rng
        self._max_payload_bytes = max_payload_bytes
        self._closed = False

    def __repr__(self) -> str:
        # The engine and where, never a DSN (it may hold a password).
        return f"<Store {self._backend!r}{' closed' if self._closed else ''}>"

    @property
    def closed(self) -> bool:
        """Whether the store was closed."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed("the store is closed; open a new one with open_store()")

    def queue(self, name: str, opts: QueueOpts | None = None) -> Queue:
        """A handle on the queue ``name`` (Q1). Queues are names: this does no I/O.

        Args:
            name: 1-63 characters from ``[A-Za-z0-9_.:-]``, starting with a letter or
                digit; names starting with ``alk_`` are reserved.
            opts: The stamps written onto every row this handle enqueues, and the
                retention its sweeps apply. Defaults to ``QueueOpts()``.

        Raises:
            InvalidArgument: the name or the options are invalid.
            StoreClosed: the store is closed.
        """
        self._check_open()
        checked = v.check_queue_name(name)
        if opts is None:
            opts = DEFAULT_OPTS
        elif not isinstance(opts, QueueOpts):
            raise InvalidArgument(f"opts must be a QueueOpts or None; got {type(opts).__name__}")
        return Queue(self, checked, opts)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """An atomic unit of enqueues (Q10).

        Rows enqueued through the transaction become visible, and wake their queues, only
        when the block exits cleanly; an exception (including cancellation) rolls them
        all back. On PostgreSQL it is a real database transaction, in which your own
        statements can run too.

        Raises:
            StoreClosed: the store is closed (also when it closes before the commit).
        """
        self._check_open()
        async with self._backend.transaction() as tx_backend:
            tx = Transaction(self, tx_backend)
            try:
                yield tx
            finally:
                tx._finished = True
            self._check_open()

    def open_wake_listener(
        self, queues: str | Queue | Iterable[str | Queue]
    ) -> AbstractAsyncContextManager[WakeListener]:
        """Subscribe to the wakes of some queues, for the duration of an ``async with``.

        A wake is sent after every committed enqueue into a queue. Listeners latch wakes,
        so a claim loop that claims until nothing is left and then waits never misses
        one. Wakes are best effort: keep a re-poll timeout as a safety net.

        Args:
            queues: Queue names or handles of this store (at least one); a single name
                or handle is accepted too.

        Raises:
            InvalidArgument: a name is invalid or no queue was given.
            StoreClosed: the store is closed.
        """
        self._check_open()
        if isinstance(queues, str | Queue):
            queues = [queues]  # one queue, not the letters of its name
        names = frozenset(self._queue_name(q) for q in queues)
        if not names:
            raise InvalidArgument("queues must name at least one queue; got none")
        return self._backend.open_wake_listener(names)

    async def stats(self, queue: str | Queue | None = None) -> StoreStats:
        """Count every queue's rows by state, at one instant of the engine's clock (D22).

        For each queue with rows or counted jobs (or only ``queue``, listed even when
        empty): ready and delayed pending rows, processing rows and how many of them
        lapsed, dead rows, how long the oldest ready row has waited, and how many jobs
        the queue acked, dead-lettered and cancelled so far (D27: cumulative counters;
        two readings give rates). Counting is proportional to the rows counted (on
        PostgreSQL it walks the partial indexes, not the table), so poll it every few
        seconds, not in a tight loop.

        Args:
            queue: A queue name or handle of this store, or ``None`` for every queue.

        Returns:
            A frozen :class:`StoreStats`, with the clock read and the ids issued so far.

        Raises:
            InvalidArgument: ``queue`` is not a valid queue name or a handle of this store.
            StoreClosed: the store is closed.
        """
        self._check_open()
        name = None if queue is None else self._queue_name(queue)
        return await self._backend.stats(name)

    async def get_job(self, job_id: int) -> Job | None:
        """Read the job with this id, live or dead, whatever its queue (D26).

        :meth:`Queue.get_job` is the same lookup confined to one queue (Q8); this one is
        for an operator who has only an id (``alkstore-trio jobs show ID``).

        Returns:
            The job, or ``None`` when no row has this id (never enqueued, acked,
            cancelled or purged).

        Raises:
            InvalidArgument: ``job_id`` is not an int in the 64-bit range.
            StoreClosed: the store is closed.
        """
        self._check_open()
        checked = v.check_job_id(job_id)
        return await self._backend.find_job(checked)

    async def aclose(self) -> None:
        """Close the store. Closing twice is harmless."""
        self._closed = True
        await self._backend.aclose()

    def _queue_name(self, queue: object) -> str:
        if isinstance(queue, Queue):
            if queue._store is not self:
                raise InvalidArgument(f"queue handle {queue.name!r} belongs to another store")
            return queue.name
        return v.check_queue_name(queue)

    def _specs(
        self,
        queue: str,
        opts: QueueOpts,
        payloads: Sequence[object],
        priority: object,
        delay_s: object,
        run_at: object,
        max_attempts: object,
        headers: object,
    ) -> list[EnqueueSpec]:
        return enqueue_specs(
            queue,
            opts,
            payloads,
            max_payload_bytes=self._max_payload_bytes,
            priority=priority,
            delay_s=delay_s,
            run_at=run_at,
            max_attempts=max_attempts,
            headers=headers,
        )


@final
class Queue:
    """A handle on one queue of a store (Q1), made by :meth:`Store.queue`.

    It carries its :class:`QueueOpts`; every row it enqueues is stamped with them.
    """

    def __init__(self, store: Store, name: str, opts: QueueOpts) -> None:
        self._store = store
        self._backend = store._backend
        self._name = name
        self._opts = opts

    @property
    def name(self) -> str:
        """The queue's name."""
        return self._name

    @property
    def opts(self) -> QueueOpts:
        """The options this handle stamps onto the rows it enqueues."""
        return self._opts

    def __repr__(self) -> str:
        return f"<Queue {self._name!r} {self._opts!r}>"

    async def enqueue(
        self,
        payload: bytes | bytearray | memoryview,
        *,
        priority: int = 0,
        delay_s: float | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> int:
        """Enqueue one job (Q2) and wake the queue.

        Args:
            payload: The job's bytes, stored and returned exactly (at most the store's
                ``max_payload_bytes``; default 1 MiB).
            priority: A 32-bit signed int; larger runs first.
            delay_s: Run no earlier than ``delay_s`` seconds from now (wins over
                ``run_at``; a negative delay means now).
            run_at: Run no earlier than this timezone-aware datetime.
            max_attempts: Override the handle's ``max_attempts`` for this job (>= 1).
            headers: Metadata kept beside the payload for the job's life and shown as
                :attr:`Job.headers` (D30), e.g. a trace context: at most 64 str names
                (1-256 characters) to str values, 16 KiB in all, no NUL characters.

        Returns:
            The new job's id (ids increase in enqueue order).

        Raises:
            InvalidArgument: an argument is invalid; nothing was enqueued.
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        specs = self._store._specs(
            self._name, self._opts, [payload], priority, delay_s, run_at, max_attempts, headers
        )
        (job_id,) = await self._backend.enqueue(specs)
        return job_id

    async def enqueue_many(
        self,
        payloads: Iterable[bytes | bytearray | memoryview],
        *,
        priority: int = 0,
        delay_s: float | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> list[int]:
        """Enqueue many jobs atomically (all or none) with one clock read and one wake.

        Takes the same options as :meth:`enqueue`, applied to every job (each job gets
        the same ``headers``).

        Returns:
            The new ids, in the order of ``payloads`` (empty for no payloads).

        Raises:
            InvalidArgument: an argument or any payload is invalid; nothing was enqueued.
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        if isinstance(payloads, bytes | bytearray | memoryview | str):
            raise InvalidArgument(
                "payloads must be an iterable of payloads (e.g. a list of bytes), not a "
                f"single {type(payloads).__name__}"
            )
        try:
            items = list(payloads)
        except TypeError:
            raise InvalidArgument(
                f"payloads must be an iterable of bytes; got a {type(payloads).__name__}"
            ) from None
        specs = self._store._specs(
            self._name, self._opts, items, priority, delay_s, run_at, max_attempts, headers
        )
        if not specs:
            await trio.lowlevel.checkpoint()
            return []
        return await self._backend.enqueue(specs)

    async def claim_one(self, worker_id: str) -> JobHandle | None:
        """Claim the best claimable job, if any (Q3).

        Returns:
            A handle on the claimed job, or ``None`` when nothing is claimable.

        Raises:
            InvalidArgument: ``worker_id`` is not a non-empty str.
            StoreClosed: the store is closed.
        """
        handles = await self.claim_batch(worker_id, 1)
        return handles[0] if handles else None

    async def claim_batch(self, worker_id: str, n: int) -> list[JobHandle]:
        """Claim up to ``n`` jobs in one atomic step (Q3).

        First every lapsed claim of this queue with no attempts left is dead-lettered
        (``"max attempts exceeded"``); then up to ``n`` rows are claimed, best first
        (priority DESC, run_at ASC, id ASC): ready pending rows, and lapsed claims with
        attempts left (a reclaim consumes an attempt). Expired rows are never claimed.

        Args:
            worker_id: Who claims (stored as ``claimed_by``); a non-empty str.
            n: How many at most; ``n <= 0`` claims nothing and returns ``[]``.

        Raises:
            InvalidArgument: ``worker_id`` or ``n`` is invalid.
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        checked_worker = v.check_worker_id(worker_id)
        count = v.check_batch_size(n)
        if count <= 0:
            await trio.lowlevel.checkpoint()
            return []
        jobs = await self._backend.claim(self._name, checked_worker, count)
        return [JobHandle(self, job) for job in jobs]

    async def ack_batch(self, ids: Iterable[int]) -> int:
        """Delete every listed job of this queue that is processing within its deadline
        (Q6), whoever claimed it.

        Returns:
            How many rows were deleted; ids that are lapsed, pending, dead, unknown or of
            another queue are silently not counted.

        Raises:
            InvalidArgument: ``ids`` is not an iterable of ints.
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        checked = v.check_job_ids(ids)
        if not checked:
            await trio.lowlevel.checkpoint()
            return 0
        return await self._backend.ack_batch(self._name, checked)

    async def ack_handles(self, handles: Iterable[JobHandle]) -> list[bool]:
        """Ack many claimed jobs of this queue with one statement (R2; see D18).

        Each job is deleted only if its handle's claim is still valid (Q4's predicate,
        claim token included), so a stale claim is refused per job, exactly as
        :meth:`JobHandle.ack` would refuse it. Afterwards every handle is consumed.

        Returns:
            One bool per handle, in order: ``True`` if its job was deleted, ``False`` if
            its claim was no longer valid (the row is left untouched).

        Raises:
            InvalidArgument: an item is not a job handle of this store and queue, or a job
                appears twice.
            HandleConsumed: a handle was already used for ack, retry or fail (nothing was
                done).
            StoreClosed: the store is closed.
        """
        checked = self._checked_handles(handles)
        for handle in checked:
            handle._check_usable()
        if not checked:
            await trio.lowlevel.checkpoint()
            return []
        claims = [(handle.id, handle._job.attempts) for handle in checked]
        deleted = set(await _consume_all(checked, self._backend.ack_claims(self._name, claims)))
        return [handle.id in deleted for handle in checked]

    async def ack_handles_and_claim(
        self, handles: Iterable[JobHandle], worker_id: str, n: int
    ) -> tuple[list[bool], list[JobHandle]]:
        """Ack many claimed jobs of this queue, then claim up to ``n`` more, in one atomic
        step (R2; see D21): on PostgreSQL one statement, so a worker's finished jobs and
        its next ones cost one round trip.

        Exactly :meth:`ack_handles` followed by :meth:`claim_batch` with no other
        operation between them: each handle's job is deleted only if its claim is still
        valid (a stale claim is refused per job), then the pre-claim sweep runs and up to
        ``n`` jobs are claimed, best first. Afterwards every handle is consumed.

        Args:
            handles: Distinct unconsumed handles of jobs of this queue (may be empty:
                then this is a ``claim_batch``).
            worker_id: Who claims (stored as ``claimed_by``); a non-empty str.
            n: How many to claim at most; ``n <= 0`` claims nothing (no pre-claim sweep
                either): then this is an ``ack_handles``.

        Returns:
            One bool per handle, in order (``True`` if its job was deleted), and the
            handles of the jobs claimed, best first.

        Raises:
            InvalidArgument: an item is not a job handle of this store and queue, a job
                appears twice, or ``worker_id`` or ``n`` is invalid (nothing was done).
            HandleConsumed: a handle was already used for ack, retry or fail (nothing was
                done).
            StoreClosed: the store is closed.
        """
        checked = self._checked_handles(handles)
        for handle in checked:
            handle._check_usable()
        checked_worker = v.check_worker_id(worker_id)
        count = v.check_batch_size(n)
        claims = [(handle.id, handle._job.attempts) for handle in checked]
        if count <= 0:
            if not checked:
                await trio.lowlevel.checkpoint()
                return [], []
            deleted = await _consume_all(checked, self._backend.ack_claims(self._name, claims))
            jobs: list[Job] = []
        elif not checked:
            jobs = await self._backend.claim(self._name, checked_worker, count)
            deleted = []
        else:
            deleted, jobs = await _consume_all(
                checked,
                self._backend.ack_claims_and_claim(self._name, claims, checked_worker, count),
            )
        acked = set(deleted)
        return [handle.id in acked for handle in checked], [JobHandle(self, job) for job in jobs]

    async def heartbeat_handles(
        self, handles: Iterable[JobHandle], extend_s: float | None = None
    ) -> list[bool]:
        """Renew many claims of this queue with one statement (R2; see D19).

        Each claim is renewed only if it is still valid (Q4's predicate, claim token
        included): its deadline becomes now + ``extend_s`` (an absolute reset), exactly as
        :meth:`JobHandle.heartbeat` would do it. A stale claim is refused per job. Like
        ``heartbeat``, this does not consume the handles.

        Args:
            handles: Distinct unconsumed handles of jobs of this queue.
            extend_s: Seconds (> 0); defaults to each row's ``visibility_timeout_s``.

        Returns:
            One bool per handle, in order: ``True`` if its claim was renewed, ``False`` if
            it was no longer valid (lapsed, reclaimed, cancelled; the row is left
            untouched), in which case that work should stop.

        Raises:
            InvalidArgument: an item is not a job handle of this store and queue, a job
                appears twice, or ``extend_s`` is invalid.
            HandleConsumed: a handle was already used for ack, retry or fail (nothing was
                done).
            StoreClosed: the store is closed.
        """
        checked = self._checked_handles(handles)
        extend = v.check_optional_duration("extend_s", extend_s, min_s=0, min_inclusive=False)
        for handle in checked:
            handle._check_usable()
        if not checked:
            await trio.lowlevel.checkpoint()
            return []
        claims = [(handle.id, handle._job.attempts) for handle in checked]
        renewed = set(await self._backend.heartbeat_claims(self._name, claims, extend))
        return [handle.id in renewed for handle in checked]

    async def retry_handles(
        self, items: Iterable[tuple[JobHandle, str | None, float | None]]
    ) -> list[bool]:
        """Retry many claimed jobs of this queue with one statement (R2; see D20).

        Each ``(handle, error, delay_s)`` item is applied exactly as
        ``handle.retry(error, delay_s)`` would be, fenced by the handle's claim (Q4's
        predicate, claim token included): on the claim's last allowed attempt the job
        moves to dead (``last_error = error``, or ``"max attempts exceeded"``); otherwise
        it is pending again after ``delay_s`` seconds (``0`` = at once), or after the
        backoff curve's delay when ``delay_s`` is ``None`` (drawn here from the store's
        random source, one draw per such item, in order, as ``retry`` draws). A stale
        claim is refused per job. Afterwards every handle is consumed.

        Args:
            items: ``(handle, error, delay_s)`` tuples: distinct unconsumed handles of
                jobs of this queue, each with its error text (or ``None``) and delay
                (finite seconds >= 0, or ``None`` for the backoff curve).

        Returns:
            One bool per item, in order: ``True`` if its job was retried or
            dead-lettered, ``False`` if its claim was no longer valid (the row is left
            untouched).

        Raises:
            InvalidArgument: an item is not such a tuple, a handle is not a job handle of
                this store and queue, a job appears twice, or an error or delay is
                invalid (nothing was done, nothing drawn).
            HandleConsumed: a handle was already used for ack, retry or fail (nothing was
                done).
            StoreClosed: the store is closed.
        """
        rows = self._checked_items(items, ("handle", "error", "delay_s"))
        checked = self._checked_handles([row[0] for row in rows], where="items")
        for handle in checked:
            handle._check_usable()
        resolved: list[tuple[JobHandle, str | None, float | None]] = []
        for index, (handle, error, delay_s) in enumerate(rows):
            with _naming_item(index, handle):
                resolved.append(
                    (
                        handle,
                        v.check_error_text(error),
                        v.check_optional_duration("delay_s", delay_s, min_s=0),
                    )
                )
        if not resolved:
            await trio.lowlevel.checkpoint()
            return []
        rng = self._store._rng
        claims: list[tuple[int, int, str | None, float | None]] = []
        for handle, error, delay in resolved:
            job = handle._job
            if delay is None and job.attempts < job.max_attempts:
                delay = float(backoff_delay_s(job.backoff_base_s, job.attempts, rng))
            claims.append((job.id, job.attempts, error, delay))
        return await _consume_all(checked, self._backend.retry_claims(self._name, claims))

    async def fail_handles(self, items: Iterable[tuple[JobHandle, str | None]]) -> list[bool]:
        """Fail many claimed jobs of this queue with one statement (R2; see D20).

        Each ``(handle, error)`` item is applied exactly as ``handle.fail(error)`` would
        be, fenced by the handle's claim (Q4's predicate, claim token included): the job
        moves to dead now with ``last_error = error`` (or ``"failed"``). A stale claim is
        refused per job. Afterwards every handle is consumed.

        Args:
            items: ``(handle, error)`` tuples: distinct unconsumed handles of jobs of this
                queue, each with its error text (or ``None``).

        Returns:
            One bool per item, in order: ``True`` if its job was dead-lettered, ``False``
            if its claim was no longer valid (the row is left untouched).

        Raises:
            InvalidArgument: an item is not such a tuple, a handle is not a job handle of
                this store and queue, a job appears twice, or an error is invalid
                (nothing was done).
            HandleConsumed: a handle was already used for ack, retry or fail (nothing was
                done).
            StoreClosed: the store is closed.
        """
        rows = self._checked_items(items, ("handle", "error"))
        checked = self._checked_handles([row[0] for row in rows], where="items")
        for handle in checked:
            handle._check_usable()
        claims: list[tuple[int, int, str | None]] = []
        for index, (handle, error) in enumerate(rows):
            with _naming_item(index, handle):
                claims.append((handle.id, handle._job.attempts, v.check_error_text(error)))
        if not claims:
            await trio.lowlevel.checkpoint()
            return []
        return await _consume_all(checked, self._backend.fail_claims(self._name, claims))

    def _checked_items(
        self, items: Iterable[Any], fields: tuple[str, ...]
    ) -> list[tuple[Any, ...]]:
        """The items as a list, once each is known to be a tuple of ``fields`` (the store
        must be open)."""
        self._store._check_open()
        shape = f"({', '.join(fields)}) tuples"
        if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
            raise InvalidArgument(
                f"items must be an iterable of {shape}; got a {type(items).__name__}"
            )
        checked = list(items)
        for index, item in enumerate(checked):
            if not isinstance(item, tuple) or len(item) != len(fields):
                shown = (
                    f"a tuple of {len(item)}"
                    if isinstance(item, tuple)
                    else f"a {type(item).__name__}"
                )
                raise InvalidArgument(f"items must hold {shape}; item {index} is {shown}")
            if not isinstance(item[0], JobHandle):
                raise InvalidArgument(
                    f"the first field of each item must be a job handle; item {index} "
                    f"holds a {type(item[0]).__name__}"
                )
        return checked

    def _checked_handles(
        self, handles: Iterable[JobHandle], *, where: str = "handles"
    ) -> list[JobHandle]:
        """The handles as a list, once each is known to be a job handle of this store
        and queue and no job appears twice (the store must be open). ``where`` names
        the argument they came from in messages."""
        self._store._check_open()
        if isinstance(handles, (str, bytes)) or not hasattr(handles, "__iter__"):
            raise InvalidArgument(
                f"handles must be an iterable of job handles; got a {type(handles).__name__}"
            )
        checked = list(handles)
        seen: set[int] = set()
        for handle in checked:
            if not isinstance(handle, JobHandle):
                raise InvalidArgument(
                    f"{where} must hold job handles; got a {type(handle).__name__}"
                )
            if handle._queue._store is not self._store or handle._job.queue != self._name:
                raise InvalidArgument(
                    f"job handle {handle.id} belongs to another store or queue "
                    f"(queue {handle._job.queue!r}), not to queue {self._name!r}"
                )
            if handle.id in seen:
                raise InvalidArgument(f"job {handle.id} appears twice in {where}")
            seen.add(handle.id)
        return checked

    async def cancel(self, job_id: int) -> bool:
        """Delete this queue's live job, pending or processing (Q7).

        Not an interrupt: a worker holding the job keeps running, and its later
        operations on the job return ``False``.

        Returns:
            ``False`` when there is no live row (dead rows are not touched).
        """
        self._store._check_open()
        checked = v.check_job_id(job_id)
        return await self._backend.cancel(self._name, checked)

    async def get_job(self, job_id: int) -> Job | None:
        """Read this queue's job, live or dead (Q8); ``None`` if there is none."""
        self._store._check_open()
        checked = v.check_job_id(job_id)
        return await self._backend.get_job(self._name, checked)

    async def list_jobs(
        self, state: JobState, *, limit: int = 100, after_id: int | None = None
    ) -> list[Job]:
        """List this queue's jobs in one state, by id, a page at a time (D26).

        To walk every page, pass the last id of a page as the next call's ``after_id``
        until a page comes back shorter than ``limit``. Rows move between states while
        you walk, so a listing is a series of snapshots, not one.

        Args:
            state: ``"pending"``, ``"processing"`` or ``"dead"``.
            limit: The most jobs to return, 1 to 1000 (payloads come along).
            after_id: Only jobs with a larger id; ``None`` starts at the first.

        Returns:
            Up to ``limit`` jobs, ids ascending.

        Raises:
            InvalidArgument: ``state``, ``limit`` or ``after_id`` is invalid.
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        if not isinstance(state, str) or state not in _STATES:
            shown = repr(state)[:40] if isinstance(state, str) else f"a {type(state).__name__}"
            raise InvalidArgument(
                f"state must be one of 'pending', 'processing' or 'dead'; got {shown}"
            )
        checked_limit = v.check_int("limit", limit, lo=1, hi=LIST_LIMIT_MAX)
        checked_after = (
            None
            if after_id is None
            else v.check_int("after_id", after_id, lo=-v.JOB_ID_MAX - 1, hi=v.JOB_ID_MAX)
        )
        return await self._backend.list_jobs(self._name, state, checked_limit, checked_after)

    async def requeue_dead(
        self,
        ids: Iterable[int] | None = None,
        *,
        all: bool = False,
    ) -> int:
        """Redrive dead jobs of this queue: back to pending, ready now, with their
        attempts reset to 0, in one atomic step (D24).

        Each redriven row keeps its id, payload, priority, stamps and ``last_error``;
        ``enqueued_at`` becomes now and an ``expires_at`` keeps its distance from it (the
        job gets its whole time to live again). The queue is woken, so idle workers
        claim the jobs at once.

        Args:
            ids: The job ids to redrive. Ids that are not dead rows of this queue (live,
                unknown, purged, of another queue) are ignored: count them out with the
                return value.
            all: ``True`` to redrive every dead job of this queue instead (then leave
                ``ids`` out).

        Returns:
            How many jobs were moved back to pending.

        Raises:
            InvalidArgument: neither or both of ``ids`` and ``all=True`` were given, or
                ``ids`` is not an iterable of job ids (nothing was moved).
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        if not isinstance(all, bool):
            raise InvalidArgument(f"all must be True or False; got a {type(all).__name__}")
        if all and ids is not None:
            raise InvalidArgument("pass either ids=[...] or all=True to requeue_dead, not both")
        if not all and ids is None:
            raise InvalidArgument(
                "requeue_dead needs the ids to redrive (ids=[...]) or all=True for every "
                "dead job of the queue"
            )
        checked = None if ids is None else v.check_job_ids(ids)
        if checked == []:
            await trio.lowlevel.checkpoint()
            return 0
        return await self._backend.requeue_dead(self._name, checked)

    async def purge_dead(self, older_than_s: float | None = None, *, dry_run: bool = False) -> int:
        """Delete dead jobs of this queue for good (D25), as a sweep's retention would
        (Q9), but on demand and with the caller's age limit.

        Args:
            older_than_s: Only jobs with ``died_at + older_than_s < now`` (a number of
                seconds >= 0); ``None`` deletes every dead job of this queue.
            dry_run: Delete nothing; count the jobs that would be deleted now (D29).

        Returns:
            How many dead jobs were deleted (or, with ``dry_run``, match).

        Raises:
            InvalidArgument: ``older_than_s`` is not a finite number of seconds >= 0, or
                ``dry_run`` is not a bool.
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        checked = v.check_optional_duration("older_than_s", older_than_s, min_s=0)
        if not isinstance(dry_run, bool):
            raise InvalidArgument(f"dry_run must be True or False; got a {type(dry_run).__name__}")
        return await self._backend.purge_dead(self._name, checked, dry_run=dry_run)

    async def sweep_expired(self) -> SweepResult:
        """Dead-letter this queue's expired live jobs (``"expired"``), then delete its dead
        jobs older than this handle's ``dead_letter_retention_s`` (Q9). Atomic.

        Returns:
            How many rows expired and how many dead rows were purged.
        """
        self._store._check_open()
        return await self._backend.sweep_expired(self._name, self._opts.dead_letter_retention_s)


async def _consume_all(handles: Sequence[JobHandle], operation: Awaitable[_T]) -> _T:
    """Run a one-shot operation over many handles, as :meth:`JobHandle._consume` does
    for one: the handles are consumed while it runs and after it returned; if it raised
    (engine failure, cancellation), they all stay usable, so it can be repeated."""
    for handle in handles:
        handle._consumed = True
    try:
        return await operation
    except BaseException:
        for handle in handles:
            handle._consumed = False
        raise


@contextmanager
def _naming_item(index: int, handle: JobHandle) -> Iterator[None]:
    """Prefix an InvalidArgument raised for one item with its position and handle."""
    try:
        yield
    except InvalidArgument as exc:
        raise InvalidArgument(f"item {index} ({handle!r}): {exc}") from None


@final
class JobHandle:
    """A claim on one job, made by :meth:`Queue.claim_batch` (Q4).

    Every operation is fenced by the claim token (the job's ``attempts`` at claim time)
    and the deadline: once the claim lapsed, or the job was reclaimed, cancelled or
    finished, operations return ``False`` and change nothing. ``ack``, ``retry`` and
    ``fail`` are one-shot; ``heartbeat`` is repeatable.
    """

    def __init__(self, queue: Queue, job: Job) -> None:
        self._queue = queue
        self._job = job
        self._consumed = False

    @property
    def job(self) -> Job:
        """The job as it was right after the claim (``attempts`` is the claim token)."""
        return self._job

    @property
    def id(self) -> int:
        """The job's id."""
        return self._job.id

    def __repr__(self) -> str:
        return (
            f"<JobHandle id={self._job.id} queue={self._job.queue!r} attempt={self._job.attempts}>"
        )

    def _check_usable(self) -> None:
        self._queue._store._check_open()
        if self._consumed:
            raise HandleConsumed(
                f"job handle {self._job.id} was already used for ack, retry or fail"
            )

    async def heartbeat(self, extend_s: float | None = None) -> bool:
        """Renew the claim: the deadline becomes now + ``extend_s`` (an absolute reset).

        Args:
            extend_s: Seconds (> 0); defaults to the row's ``visibility_timeout_s``.

        Returns:
            ``True`` if renewed; ``False`` if the claim was no longer valid (lapsed,
            reclaimed, cancelled), in which case the work should stop.
        """
        self._check_usable()
        extend = v.check_optional_duration("extend_s", extend_s, min_s=0, min_inclusive=False)
        job = self._job
        return await self._queue._backend.heartbeat(job.queue, job.id, job.attempts, extend)

    async def ack(self) -> bool:
        """Finish the job: delete its row. One-shot.

        Returns:
            ``True`` if deleted; ``False`` if the claim was no longer valid.
        """
        self._check_usable()
        job = self._job
        return await self._consume(self._queue._backend.ack(job.queue, job.id, job.attempts))

    async def retry(self, error: str | None = None, delay_s: float | None = None) -> bool:
        """Give the job back to run again later, or dead-letter it at its budget. One-shot.

        If this claim was the job's last allowed attempt, the row moves to dead with
        ``last_error = error`` (or ``"max attempts exceeded"``). Otherwise it is pending
        again after ``delay_s`` seconds (``0`` = at once), or after the backoff curve's
        delay when ``delay_s`` is ``None``.

        Returns:
            ``True`` if applied; ``False`` if the claim was no longer valid.
        """
        self._check_usable()
        checked_error = v.check_error_text(error)
        delay = v.check_optional_duration("delay_s", delay_s, min_s=0)
        job = self._job
        if delay is None and job.attempts < job.max_attempts:
            delay = float(
                backoff_delay_s(job.backoff_base_s, job.attempts, self._queue._store._rng)
            )
        return await self._consume(
            self._queue._backend.retry(job.queue, job.id, job.attempts, checked_error, delay)
        )

    async def fail(self, error: str | None = None) -> bool:
        """Dead-letter the job now, with ``last_error = error`` (or ``"failed"``). One-shot.

        Returns:
            ``True`` if applied; ``False`` if the claim was no longer valid.
        """
        self._check_usable()
        checked_error = v.check_error_text(error)
        job = self._job
        return await self._consume(
            self._queue._backend.fail(job.queue, job.id, job.attempts, checked_error)
        )

    async def _consume(self, operation: object) -> bool:
        """Run a one-shot operation. The handle is consumed while it runs and after it
        returned; if it raised (engine failure, cancellation), the handle stays usable,
        so the operation can be repeated (the claim token makes that safe)."""
        self._consumed = True
        try:
            result: bool = await operation  # type: ignore[misc]
        except BaseException:
            self._consumed = False
            raise
        return result


@final
class Transaction:
    """An open transaction of a store (Q10), made by :meth:`Store.transaction`."""

    def __init__(self, store: Store, backend: TransactionBackend) -> None:
        self._store = store
        self._backend = backend
        self._finished = False

    async def enqueue(
        self,
        queue: Queue | str,
        payload: bytes | bytearray | memoryview,
        *,
        priority: int = 0,
        delay_s: float | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> int:
        """Enqueue one job inside the transaction; visible (and woken) only at commit.

        Args:
            queue: A queue handle of this store (its opts are stamped) or a queue name
                (the default stamps 300 / 3 / 5 / None are used).
            payload: As :meth:`Queue.enqueue`; so are the keyword options.

        Returns:
            The new job's id (if the transaction rolls back, the id is never used).

        Raises:
            InvalidArgument: an argument is invalid; nothing was buffered.
            HandleConsumed: the transaction already ended.
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        if self._finished:
            raise HandleConsumed("this transaction already ended; open a new one")
        name = self._store._queue_name(queue)
        opts = queue.opts if isinstance(queue, Queue) else DEFAULT_OPTS
        specs = self._store._specs(
            name, opts, [payload], priority, delay_s, run_at, max_attempts, headers
        )
        (job_id,) = await self._backend.enqueue(specs)
        return job_id

    async def execute(self, sql: str, params: SqlParams | None = None) -> None:
        """Run your own statement inside the transaction (PostgreSQL only), so that your
        business rows and your jobs commit or roll back together.

        Args:
            sql: One statement, with ``%s`` (or ``%(name)s``) placeholders. Never
                format values into it: pass them in ``params``.
            params: The values for the placeholders, sent separately from the query.

        Raises:
            InvalidArgument: ``sql`` is not a non-empty str, or the engine runs no SQL
                (the in-memory engine).
            EngineError: the database rejected the statement (the transaction then
                rolls back when the block ends); the driver's error is ``__cause__``.
        """
        await self.fetch(sql, params)

    async def fetch(self, sql: str, params: SqlParams | None = None) -> list[tuple[Any, ...]]:
        """Like :meth:`execute`, and return the statement's rows as tuples (``[]`` when it
        returns none)."""
        self._store._check_open()
        if self._finished:
            raise HandleConsumed("this transaction already ended; open a new one")
        if not isinstance(sql, str) or not sql.strip():
            raise InvalidArgument(f"sql must be a non-empty str; got {type(sql).__name__}")
        if params is not None and (
            isinstance(params, str | bytes) or not isinstance(params, Sequence | Mapping)
        ):
            raise InvalidArgument(
                f"params must be a sequence or a mapping of values; got {type(params).__name__}"
            )
        return await self._backend.fetch(sql, params)
