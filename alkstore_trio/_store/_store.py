"""The public face of every engine: :class:`Store` and :class:`Transaction`.

These classes (with :class:`~._queue.Queue` and :class:`~._handle.JobHandle`) hold
everything that must be identical on every engine: argument validation (so bad input
fails the same way, before any I/O), the closed-store check (Q11), the one-shot rule of
job handles (Q4) and the backoff draw (Q5). They then call the engine through the
:class:`~alkstore_trio.engine.Engine` protocol. None of them is constructed by users:
:func:`alkstore_trio.open_store` makes the store, and the store makes the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, final

from .._core import DEFAULT_OPTS, Enqueued, EnqueueSpec, Job, QueueOpts, StoreStats, enqueue_specs
from .._core import _periodic as periodic  # Q17
from .._core import _validate as v
from .._core import _workers as workers  # Q21
from .._engines._protocol import Completion
from .._errors import ClaimLost, HandleConsumed, InvalidArgument, StoreClosed
from ._handle import JobHandle, _consume_all
from ._queue import Queue

if TYPE_CHECKING:
    import random
    from collections.abc import AsyncIterator, Iterable
    from datetime import datetime

    from .._core._periodic import Periodic, PeriodicInfo, PeriodicTick  # Q17
    from .._core._workers import BeatPhase, WorkerInfo, WorkerRegistration  # Q21
    from .._engines._protocol import Engine, EngineTransaction, SqlParams
    from .._engines._wake import WakeListener


@final
class Store:
    """An open job store on one engine. Made by :func:`alkstore_trio.open_store`.

    A store hands out :class:`Queue` handles (no I/O), opens transactions and wake
    listeners, and is closed by leaving its ``async with`` block or by :meth:`aclose`.
    After that, every operation on it and on everything it made raises
    :class:`StoreClosed`.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        rng: random.Random,
        max_payload_bytes: int,
        max_result_bytes: int = v.DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        self._engine = engine
        self._rng = rng
        self._max_payload_bytes = max_payload_bytes
        self._max_result_bytes = max_result_bytes
        self._closed = False

    def __repr__(self) -> str:
        # The engine and where, never a DSN (it may hold a password).
        return f"<Store {self._engine!r}{' closed' if self._closed else ''}>"

    @property
    def max_result_bytes(self) -> int:
        """Q19.1: the largest result an ack accepts, in bytes (``open_store``'s
        ``max_result_bytes``)."""
        return self._max_result_bytes

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
        tx: Transaction | None = None
        try:
            async with self._engine.transaction() as engine_tx:
                tx = Transaction(self, engine_tx)
                try:
                    yield tx
                finally:
                    tx._finished = True
                if tx._lost is not None:
                    raise tx._lost  # Q19.6: a refused completion never commits, even if caught
                self._check_open()
        except BaseException:
            if tx is not None and tx._completed is not None:
                tx._completed._consumed = False  # Q19.6: rolled back: the claim stands
            raise

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
        return self._engine.open_wake_listener(names)

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
        return await self._engine.stats(name)

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
        return await self._engine.get_job(checked, None)

    # -- Q17 periodic jobs ---------------------------------------------------------------

    async def fire_periodic(self, schedules: Iterable[Periodic]) -> PeriodicTick:
        """Enqueue the jobs these schedules owe now, exactly once across every caller
        (Q17.2); :class:`~alkstore_trio.Worker` calls it for its ``periodic=`` schedules.

        In one atomic step on the engine's clock: each schedule's row is made when
        missing, takes this definition when its expression or time zone differ (the next
        fire time is then recomputed from now: last writer wins, Q17.3) and is stamped as
        seen; each schedule then gets one job per fire time it owes (Q17.5's
        ``catch_up``), with the ``alk-periodic`` headers (Q17.4), and its row advances.
        A row that another call is firing at that moment may be left to it (Q17.9); the
        answer's delay then asks again within a second.

        Args:
            schedules: :class:`~alkstore_trio.Periodic` schedules with distinct names
                (at least one).

        Returns:
            The jobs enqueued and the seconds until the earliest next fire time.

        Raises:
            InvalidArgument: ``schedules`` is empty, holds something else or names a
                schedule twice, or a payload is over the store's ``max_payload_bytes``.
            StoreClosed: the store is closed.
        """
        self._check_open()
        # Name order: every engine enqueues (and numbers) the jobs in the same order.
        checked = tuple(sorted(periodic.check_schedules(schedules), key=lambda p: p.name))
        if not checked:
            raise InvalidArgument("schedules must hold at least one Periodic; got none")
        for p in checked:
            if len(p.payload) > self._max_payload_bytes:
                raise InvalidArgument(
                    f"Periodic {p.name!r}: payload of {len(p.payload)} bytes is over this "
                    f"store's max_payload_bytes={self._max_payload_bytes}"
                )
        return await self._engine.fire_periodic(checked)

    async def list_periodic(
        self, *, stale_after_s: float = periodic.PERIODIC_STALE_AFTER_S
    ) -> list[PeriodicInfo]:
        """Every schedule's row, by name (Q17.6): definition, next and last fire time,
        when a worker last declared it, and whether it is stale.

        Args:
            stale_after_s: A row not declared by any worker for longer than this lists
                as stale (> 0; default 600 s, ten times a worker's re-check).

        Raises:
            InvalidArgument: ``stale_after_s`` is not a duration > 0.
            StoreClosed: the store is closed.
        """
        self._check_open()
        checked = v.check_duration("stale_after_s", stale_after_s, min_s=0, min_inclusive=False)
        return await self._engine.list_periodic(checked)

    async def delete_periodic(self, name: str) -> bool:
        """Delete the schedule row ``name`` (Q17.10): for a stale row, whose schedule no
        worker declares any more.

        A worker that still declares the schedule makes its row again at its next call
        (within a minute), as a new row: the next fire time is recomputed from then and
        ``last_fire_at`` starts empty. Remove the schedule from the code first.

        Args:
            name: The schedule's name (1-200 characters of storable text).

        Returns:
            ``True`` if the row was deleted, ``False`` if there was none.

        Raises:
            InvalidArgument: ``name`` is not a valid schedule name.
            StoreClosed: the store is closed.
        """
        self._check_open()
        return await self._engine.delete_periodic(periodic.check_name(name))

    # -- Q21 the worker registry -----------------------------------------------------------

    async def beat_worker(self, registration: WorkerRegistration, phase: BeatPhase) -> None:
        """Write this worker's row in the registry (Q21.2); :class:`~alkstore_trio.Worker`
        calls it at start, every ``WORKER_BEAT_S`` and at its stop.

        One atomic step on the engine's clock: ``"start"`` writes the row afresh,
        ``"beat"`` stamps the heartbeat (making a purged row again), ``"stop"`` stamps
        the heartbeat and the stop. A start or a beat also purges a bounded batch of the
        rows unheard of for a day (Q21.4).

        Args:
            registration: The worker's :class:`~alkstore_trio.WorkerRegistration`.
            phase: ``"start"``, ``"beat"`` or ``"stop"``.

        Raises:
            InvalidArgument: ``registration`` is not a ``WorkerRegistration`` or
                ``phase`` is not one of the three.
            StoreClosed: the store is closed.
        """
        self._check_open()
        if not isinstance(registration, workers.WorkerRegistration):
            raise InvalidArgument(
                f"registration must be a WorkerRegistration; got {type(registration).__name__}"
            )
        checked = workers.check_phase(phase)
        await self._engine.beat_worker(registration, checked)

    async def list_workers(
        self,
        *,
        gone_after_s: float = workers.WORKER_GONE_AFTER_S,
        limit: int = workers.WORKERS_LIST_DEFAULT,
    ) -> list[WorkerInfo]:
        """The registered workers, the latest heartbeat first (Q21.4): what each serves,
        when it started and last beat, and whether it runs, stopped or is gone.

        Args:
            gone_after_s: A worker not stopped whose last beat is older than this reads
                as ``"gone"`` (> 0; default 60 s, four beats).
            limit: The most rows (1-10000; default 1000).

        Raises:
            InvalidArgument: ``gone_after_s`` or ``limit`` is invalid.
            StoreClosed: the store is closed.
        """
        self._check_open()
        gone = v.check_duration("gone_after_s", gone_after_s, min_s=0, min_inclusive=False)
        checked = v.check_int("limit", limit, lo=1, hi=workers.WORKERS_LIST_MAX)
        return await self._engine.list_workers(gone, checked)

    async def aclose(self) -> None:
        """Close the store. Closing twice is harmless."""
        self._closed = True
        await self._engine.aclose()

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
        unique_keys: Sequence[str | None] | None = None,
        unique_for_s: object = None,
        concurrency_keys: Sequence[str | None] | None = None,
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
            unique_keys=unique_keys,
            unique_for_s=unique_for_s,
            concurrency_keys=concurrency_keys,
        )


@final
class Transaction:
    """An open transaction of a store (Q10), made by :meth:`Store.transaction`."""

    def __init__(self, store: Store, engine_tx: EngineTransaction) -> None:
        self._store = store
        self._engine = engine_tx
        self._finished = False
        #: Q19.6: the handle completed in it, and the refusal of a completion (the
        #: transaction then never commits).
        self._completed: JobHandle | None = None
        self._lost: ClaimLost | None = None

    def _check_usable(self) -> None:
        self._store._check_open()
        if self._finished:
            raise HandleConsumed("this transaction already ended; open a new one")

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
        unique_key: str | None = None,
        unique_for_s: float | None = None,
        concurrency_key: str | None = None,
    ) -> Enqueued:
        """Enqueue one job inside the transaction; visible (and woken) only at commit.

        Args:
            queue: A queue handle of this store (its opts are stamped) or a queue name
                (the default stamps 300 / 3 / 5 / None are used).
            payload: As :meth:`Queue.enqueue`; so are the keyword options.

        With a ``unique_key`` (Q15), the key is checked now, against the live jobs and
        this transaction's own: a key held returns the holder's id with
        ``created=False``. A key this transaction enqueues is held until it ends: an
        enqueue of the same key elsewhere waits for the commit (and then finds the job)
        or the rollback (and then creates its own).

        Returns:
            The job's id as an :class:`~alkstore_trio.Enqueued` (if the transaction
            rolls back, a created id is never used).

        Raises:
            InvalidArgument: an argument is invalid; nothing was buffered.
            HandleConsumed: the transaction already ended.
            StoreClosed: the store is closed.
        """
        self._check_usable()
        name = self._store._queue_name(queue)
        opts = queue.opts if isinstance(queue, Queue) else DEFAULT_OPTS
        keys = None if unique_key is None else [v.check_unique_key(unique_key)]
        groups = None if concurrency_key is None else [v.check_concurrency_key(concurrency_key)]
        specs = self._store._specs(
            name, opts, [payload], priority, delay_s, run_at, max_attempts, headers, keys,
            unique_for_s, groups,
        )  # fmt: skip
        (job_id,) = await self._engine.enqueue(specs)
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
        self._check_usable()
        if not isinstance(sql, str) or not sql.strip():
            raise InvalidArgument(f"sql must be a non-empty str; got {type(sql).__name__}")
        if params is not None and (
            isinstance(params, str | bytes) or not isinstance(params, Sequence | Mapping)
        ):
            raise InvalidArgument(
                f"params must be a sequence or a mapping of values; got {type(params).__name__}"
            )
        return await self._engine.fetch(sql, params)

    async def complete(
        self, handle: JobHandle, result: bytes | bytearray | memoryview | None = None
    ) -> None:
        """Q19.6: ack the claim of ``handle`` inside this transaction, fenced by its claim
        token: the ack commits with the transaction's other effects, or not at all.
        Call it last: it ends the transaction's work (later calls raise
        :class:`~alkstore_trio.HandleConsumed`), and the job row stays locked until the
        commit. It consumes the handle.

        Args:
            handle: A job handle of this store, unconsumed.
            result: Q19.1: the job's result, kept with a kept job (as ``JobHandle.ack``).

        Raises:
            ClaimLost: the claim was no longer valid (reclaimed, cancelled, lapsed); the
                transaction rolls back whole when the block ends, even if this is caught.
            InvalidArgument: ``handle`` is not a job handle of this store, or ``result``
                is invalid (nothing was done).
            HandleConsumed: the handle or the transaction was used up.
        """
        self._check_usable()
        if not isinstance(handle, JobHandle) or handle._queue._store is not self._store:
            raise InvalidArgument(
                f"handle must be a job handle of this store; got {type(handle).__name__}"
            )
        handle._check_usable()
        checked = v.result_bytes(result, self._store.max_result_bytes)
        job = handle.job
        item = Completion(job.id, handle._claim.token, checked)
        done = await _consume_all([handle], self._engine.complete(job.queue, [item]))
        self._finished = True
        if done:
            self._completed = handle
        else:
            self._lost = ClaimLost(
                f"job {job.id}: the claim was no longer valid (reclaimed, cancelled or "
                "its lease lapsed); the transaction rolls back"
            )
            raise self._lost
