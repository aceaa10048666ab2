"""A store's queue handle, :class:`Queue`: enqueue, claim, the batch operations on claims
(Q13), and the operator's reads and actions on one queue."""

from __future__ import annotations

from typing import TYPE_CHECKING, final, get_args

import trio

from .._core import Enqueued, Job, JobState, QueueOpts, SweepResult
from .._core import _validate as v
from .._core._filters import JobPage, check_header, check_key
from .._core._reschedule import check_reschedule
from .._engines._protocol import FailItem, ProgressItem
from .._errors import InvalidArgument
from ._controls import QueueControls
from ._handle import (
    JobHandle,
    _consume_all,
    checked_handles,
    checked_items,
    checked_progress,
    naming_item,
    retry_item,
)
from ._results import ack_items, checked_results
from ._wait import POLL_INTERVAL_S, wait_for

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from datetime import datetime

    from ._store import Store

#: The most rows one :meth:`Queue.list_jobs` call returns (D26): payloads come along.
LIST_LIMIT_MAX = 1000
#: D26: the states a listing takes (Q19.2's kept ``completed`` and ``cancelled`` too).
_STATES: tuple[JobState, ...] = get_args(JobState)


def _checked_listing(state: object, limit: object, after_id: object) -> tuple[int, int | None]:
    """D26: a listing's state, limit and after_id, checked."""
    if not isinstance(state, str) or state not in _STATES:
        shown = repr(state)[:40] if isinstance(state, str) else f"a {type(state).__name__}"
        raise InvalidArgument(
            "state must be one of 'pending', 'processing', 'cancelling', 'dead', "
            f"'completed' or 'cancelled'; got {shown}"
        )
    checked_limit = v.check_int("limit", limit, lo=1, hi=LIST_LIMIT_MAX)
    if after_id is None:
        return checked_limit, None
    return checked_limit, v.check_int("after_id", after_id, lo=-v.JOB_ID_MAX - 1, hi=v.JOB_ID_MAX)


@final
class Queue(QueueControls):
    """A handle on one queue of a store (Q1), made by :meth:`Store.queue`.

    It carries its :class:`QueueOpts`; every row it enqueues is stamped with them.
    """

    def __init__(self, store: Store, name: str, opts: QueueOpts) -> None:
        self._store = store
        self._engine = store._engine
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
        unique_key: str | None = None,
        unique_for_s: float | None = None,
        concurrency_key: str | None = None,
    ) -> Enqueued:
        """Enqueue one job (Q2) and wake the queue; with a ``unique_key``, only if no live
        job of this queue holds that key (Q15).

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
            unique_key: At most one live (pending or processing) job of this queue holds
                a key (Q15): when one does, nothing is enqueued and its id comes back
                with ``created=False``. 1-256 characters, no NUL. The key frees when
                its job is acked, cancelled or dead.
            unique_for_s: With ``unique_key``: the key also refuses new jobs for this
                many seconds after this job was created, whatever became of it (a
                throttle); the refusal returns the id of the job that opened the window.
            concurrency_key: Q18.8: the queue's ``max_running_per_key`` (see
                :meth:`set_limits`) counts and holds back the jobs of each key, e.g. a
                tenant id: 1-256 characters, no NUL. Kept for the job's life.

        Returns:
            The job's id as an :class:`~alkstore_trio.Enqueued` (an ``int``; ids
            increase in enqueue order): ``created`` is ``False`` when the key was held.

        Raises:
            InvalidArgument: an argument is invalid; nothing was enqueued.
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        keys = None if unique_key is None else [v.check_unique_key(unique_key)]
        groups = None if concurrency_key is None else [v.check_concurrency_key(concurrency_key)]
        specs = self._store._specs(
            self._name, self._opts, [payload], priority, delay_s, run_at, max_attempts,
            headers, keys, unique_for_s, groups,
        )  # fmt: skip
        (job_id,) = await self._engine.enqueue(specs)
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
        unique_keys: Iterable[str | None] | None = None,
        unique_for_s: float | None = None,
        concurrency_keys: Iterable[str | None] | None = None,
    ) -> list[Enqueued]:
        """Enqueue many jobs atomically (all or none) with one clock read and one wake.

        Takes the same options as :meth:`enqueue`, applied to every job (each job gets
        the same ``headers``), except the keys: ``unique_keys`` gives one key (or
        ``None``) per payload (Q15). A job whose key is held, by a live job or by an
        earlier payload of the same call, creates nothing. ``concurrency_keys`` gives
        one concurrency key (or ``None``) per payload (Q18.8).

        Returns:
            One :class:`~alkstore_trio.Enqueued` per payload, in order (empty for no
            payloads).

        Raises:
            InvalidArgument: an argument or any payload is invalid; nothing was enqueued.
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        items = v.check_payload_list(payloads)
        keys = None if unique_keys is None else v.check_unique_keys(unique_keys, len(items))
        groups = (
            None
            if concurrency_keys is None
            else v.check_concurrency_keys(concurrency_keys, len(items))
        )
        specs = self._store._specs(
            self._name, self._opts, items, priority, delay_s, run_at, max_attempts,
            headers, keys, unique_for_s, groups,
        )  # fmt: skip
        if not specs:
            await trio.lowlevel.checkpoint()
            return []
        return await self._engine.enqueue(specs)

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
        jobs = await self._engine.claim(self._name, checked_worker, count)
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
        return await self._engine.ack_batch(self._name, checked)

    async def ack_handles(
        self, handles: Iterable[JobHandle], results: Iterable[object] | None = None
    ) -> list[bool]:
        """Ack many claimed jobs of this queue with one statement (Q13; see D18).

        Each job is finished (deleted, or kept: Q19.2) only if its handle's claim is still
        valid (Q4's predicate, claim token included), so a stale claim is refused per
        job, exactly as :meth:`JobHandle.ack` would refuse it. Afterwards every handle
        is consumed.

        Args:
            handles: Distinct unconsumed handles of jobs of this queue.
            results: Q19.1: one result per handle (bytes-like or ``None``), stored with
                the kept jobs; ``None`` for no results.

        Returns:
            One bool per handle, in order: ``True`` if its job was finished, ``False`` if
            its claim was no longer valid (the row is left untouched).

        Raises:
            InvalidArgument: an item is not a job handle of this store and queue, a job
                appears twice, or ``results`` is not one valid result per handle.
            HandleConsumed: a handle was already used for ack, retry or fail (nothing was
                done).
            StoreClosed: the store is closed.
        """
        checked = checked_handles(self, handles)
        for handle in checked:
            handle._check_usable()
        given = checked_results(results, len(checked), self._store.max_result_bytes)
        if not checked:
            await trio.lowlevel.checkpoint()
            return []
        claims, items = ack_items(checked, given)
        done = (
            self._engine.ack(self._name, claims)
            if items is None
            else self._engine.complete(self._name, items)
        )
        deleted = set(await _consume_all(checked, done))
        return [handle.id in deleted for handle in checked]

    async def ack_handles_and_claim(
        self,
        handles: Iterable[JobHandle],
        worker_id: str,
        n: int,
        results: Iterable[object] | None = None,
    ) -> tuple[list[bool], list[JobHandle]]:
        """Ack many claimed jobs of this queue, then claim up to ``n`` more, in one atomic
        step (Q13; see D21): on PostgreSQL one statement, so a worker's finished jobs and
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
            results: Q19.1: one result per handle, as for :meth:`ack_handles`.

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
        checked = checked_handles(self, handles)
        for handle in checked:
            handle._check_usable()
        checked_worker = v.check_worker_id(worker_id)
        count = v.check_batch_size(n)
        given = checked_results(results, len(checked), self._store.max_result_bytes)
        if count <= 0:
            if not checked:
                await trio.lowlevel.checkpoint()
                return [], []
            return await self.ack_handles(checked, given), []
        if not checked:
            jobs = await self._engine.claim(self._name, checked_worker, count)
            deleted: list[int] = []
        else:
            claims, items = ack_items(checked, given)
            fused = (
                self._engine.ack_and_claim(self._name, claims, checked_worker, count)
                if items is None
                else self._engine.complete_and_claim(self._name, items, checked_worker, count)
            )
            deleted, jobs = await _consume_all(checked, fused)
        acked = set(deleted)
        return [handle.id in acked for handle in checked], [JobHandle(self, job) for job in jobs]

    async def heartbeat_handles(
        self,
        handles: Iterable[JobHandle],
        extend_s: float | None = None,
        *,
        progress: Iterable[str | None] | None = None,
    ) -> list[bool]:
        """Renew many claims of this queue with one statement (Q13; see D19).

        Each claim is renewed only if it is still valid (Q4's predicate, claim token
        included): its deadline becomes now + ``extend_s`` (an absolute reset), exactly as
        :meth:`JobHandle.heartbeat` would do it. A stale claim is refused per job. Like
        ``heartbeat``, this does not consume the handles.

        Args:
            handles: Distinct unconsumed handles of jobs of this queue.
            extend_s: Seconds (> 0); defaults to each row's ``visibility_timeout_s``.
            progress: Q19.7: one progress text per handle (``None``: keep the job's), as
                :meth:`JobHandle.heartbeat` takes it.

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
        checked = checked_handles(self, handles)
        extend = v.check_optional_duration("extend_s", extend_s, min_s=0, min_inclusive=False)
        news = None if progress is None else checked_progress(progress, len(checked))
        for handle in checked:
            handle._check_usable()
        if not checked:
            await trio.lowlevel.checkpoint()
            return []
        claims = [handle._claim for handle in checked]
        if news is None:
            renewed = set(await self._engine.heartbeat(self._name, claims, extend))
        else:
            items = [ProgressItem(*claim, text) for claim, text in zip(claims, news, strict=True)]
            renewed = set(await self._engine.heartbeat_progress(self._name, items, extend))
        return [handle.id in renewed for handle in checked]

    async def retry_handles(
        self, items: Iterable[tuple[JobHandle, str | None, float | None]]
    ) -> list[bool]:
        """Retry many claimed jobs of this queue with one statement (Q13; see D20).

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
        rows = checked_items(self._store, items, ("handle", "error", "delay_s"))
        checked = checked_handles(self, [row[0] for row in rows], where="items")
        for handle in checked:
            handle._check_usable()
        resolved: list[tuple[JobHandle, str | None, float | None]] = []
        for index, (handle, error, delay_s) in enumerate(rows):
            with naming_item(index, handle):
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
        claims = [retry_item(handle._job, error, delay, rng) for handle, error, delay in resolved]
        return await _consume_all(checked, self._engine.retry(self._name, claims))

    async def release_handles(
        self, handles: Iterable[JobHandle], error: str | None = None
    ) -> list[bool]:
        """Release many claimed jobs of this queue with one statement (Q19.8, Q13), each
        exactly as :meth:`JobHandle.release` would: pending again, ready now, its attempt
        given back, ``last_error = error``; a stale claim is refused per job. Afterwards
        every handle is consumed.

        Returns:
            One bool per handle, in order: ``True`` if its job was released.

        Raises:
            InvalidArgument: an item is not a job handle of this store and queue, a job
                appears twice, or ``error`` is invalid (nothing was done).
            HandleConsumed: a handle was already used (nothing was done).
            StoreClosed: the store is closed.
        """
        checked = checked_handles(self, handles)
        checked_error = v.check_error_text(error)
        for handle in checked:
            handle._check_usable()
        if not checked:
            await trio.lowlevel.checkpoint()
            return []
        claims = [handle._claim for handle in checked]
        engine = self._engine
        done = set(await _consume_all(checked, engine.release(self._name, claims, checked_error)))
        return [handle.id in done for handle in checked]

    async def fail_handles(self, items: Iterable[tuple[JobHandle, str | None]]) -> list[bool]:
        """Fail many claimed jobs of this queue with one statement (Q13; see D20).

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
        rows = checked_items(self._store, items, ("handle", "error"))
        checked = checked_handles(self, [row[0] for row in rows], where="items")
        for handle in checked:
            handle._check_usable()
        claims: list[FailItem] = []
        for index, (handle, error) in enumerate(rows):
            with naming_item(index, handle):
                claims.append(FailItem(handle.id, handle._claim.token, v.check_error_text(error)))
        if not claims:
            await trio.lowlevel.checkpoint()
            return []
        return await _consume_all(checked, self._engine.fail(self._name, claims))

    async def cancel(self, job_id: int) -> bool:
        """Cancel this queue's live job (Q19.5).

        A pending job is recorded cancelled at once. A processing one becomes
        ``"cancelling"``: its worker is told at once and cancels the handler (at its next
        trio checkpoint); it is recorded cancelled when the handler stopped, or when its
        lease lapsed. Once this returned ``True`` the job is never completed, retried or
        dead-lettered. Calling it again for a cancelling job tells the worker again.

        Returns:
            ``False`` when there is no live row (dead rows are not touched).
        """
        self._store._check_open()
        checked = v.check_job_id(job_id)
        return await self._engine.cancel(self._name, checked)

    async def settle_cancelled(self, handles: Iterable[JobHandle]) -> list[bool]:
        """Q19.5: their holder stopped: record each job cancelled if it is cancelling
        under the handle's claim token (no lease check). Handles may be consumed already
        (an ack refused as the job was cancelling). One bool per handle, in order."""
        checked = checked_handles(self, handles)
        if not checked:
            await trio.lowlevel.checkpoint()
            return []
        claims = [handle._claim for handle in checked]
        settled = set(
            await _consume_all(checked, self._engine.settle_cancelled(self._name, claims))
        )
        return [handle.id in settled for handle in checked]

    async def cancelling_among(self, job_ids: Iterable[int]) -> list[int]:
        """Q19.5: which of these job ids are this queue's cancelling jobs (a read)."""
        self._store._check_open()
        checked = list(dict.fromkeys(v.check_job_id(job_id) for job_id in job_ids))
        if not checked:
            await trio.lowlevel.checkpoint()
            return []
        return await self._engine.cancelling_among(self._name, checked)

    # --- Q16: rescheduling, and the next due time (R11) ---------------------------------

    async def reschedule(
        self,
        job_id: int,
        *,
        delay_s: float | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
    ) -> bool:
        """Change a pending job's due time or priority (Q16), and wake the queue so that
        workers start it on time (R11).

        Example::

            await queue.reschedule(job_id, delay_s=0)           # run it now
            await queue.reschedule(job_id, run_at=tomorrow_9am)  # or later
            await queue.reschedule(job_id, priority=10)          # keep its time

        Args:
            job_id: The job (of this queue).
            delay_s: Due ``delay_s`` seconds from now (a negative delay means now).
            run_at: Due at this timezone-aware datetime (give ``delay_s`` or ``run_at``,
                not both; neither keeps the job's ``run_at``).
            priority: Its new priority (a 32-bit signed int), or ``None`` to keep it.

        Returns:
            ``True`` if the job was pending and now has the new values; ``False`` (and
            nothing changed) when it is processing, dead or not a job of this queue.

        Raises:
            InvalidArgument: both ``delay_s`` and ``run_at``, nothing to change, or an
                invalid value (nothing changed).
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        checked = v.check_job_id(job_id)
        spec = check_reschedule(delay_s, run_at, priority)
        return await self._engine.reschedule(
            self._name, checked, spec.delay_s, spec.run_at, spec.priority
        )

    async def next_due_in_s(self) -> float | None:
        """How long until this queue's next delayed job is due (Q16): the seconds from
        now (on the store's clock) until the earliest ``run_at`` of its pending jobs that
        are not due yet, or ``None`` when there is none. Workers ask it when a claim came
        back short, to wake when that job is due (R11).

        Raises:
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        return await self._engine.next_due_in_s(self._name)

    # Q18: queue controls.
    async def get_job(self, job_id: int) -> Job | None:
        """Read this queue's job, live or dead (Q8); ``None`` if there is none."""
        self._store._check_open()
        checked = v.check_job_id(job_id)
        return await self._engine.get_job(checked, self._name)

    async def wait(self, job_id: int, *, poll_interval_s: float = POLL_INTERVAL_S) -> Job:
        """Wait until this queue's job is final, and return it (Q19.4): ``"completed"``
        (with its ``result``) or ``"cancelled"``, both kept jobs only, or ``"dead"`` (with
        its ``last_error``). Woken when the job finishes; it also reads the job every
        ``poll_interval_s`` seconds (> 0). A pure read: bound it with
        ``trio.fail_after(...)``, cancel it at any point. Raises :class:`JobGone` when the
        queue has no such job (never enqueued, not kept, or purged), ``InvalidArgument``
        for a bad argument, ``StoreClosed`` when the store closes."""
        return await wait_for(self, job_id, poll_interval_s)

    async def list_jobs(
        self, state: JobState, *, limit: int = 100, after_id: int | None = None
    ) -> list[Job]:
        """List this queue's jobs in one state, by id, a page at a time (D26).

        To walk every page, pass the last id of a page as the next call's ``after_id``
        until a page comes back shorter than ``limit``. Rows move between states while
        you walk, so a listing is a series of snapshots, not one.

        Args:
            state: ``"pending"``, ``"processing"``, ``"cancelling"``, ``"dead"`` or
                (Q19.2, kept rows) ``"completed"`` or ``"cancelled"``.
            limit: The most jobs to return, 1 to 1000 (payloads come along).
            after_id: Only jobs with a larger id; ``None`` starts at the first.

        Returns:
            Up to ``limit`` jobs, ids ascending.

        Raises:
            InvalidArgument: ``state``, ``limit`` or ``after_id`` is invalid.
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        checked_limit, checked_after = _checked_listing(state, limit, after_id)
        return await self._engine.list_jobs(self._name, state, checked_limit, checked_after)

    async def find_jobs(
        self,
        state: JobState,
        *,
        key: str | None = None,
        header: tuple[str, str] | None = None,
        limit: int = 100,
        after_id: int | None = None,
    ) -> JobPage:
        """List this queue's jobs in one state that match a key and/or a header, by id,
        a page at a time (D26.1). Exact matches only (no patterns).

        Args:
            state: As :meth:`list_jobs`.
            key: Only jobs whose ``unique_key`` or ``concurrency_key`` equals it.
            header: ``(name, value)``: only jobs whose header ``name`` equals ``value``.
                A header filter examines at most ``HEADER_SCAN_ROWS`` (10,000) rows a
                call: a page may then be short with more to search (``searched_to_id``).
            limit: The most jobs to return, 1 to 1000.
            after_id: Only jobs with a larger id; ``None`` starts at the first.

        Returns:
            A :class:`JobPage`: the jobs, ids ascending, and ``next_after_id``, the
            ``after_id`` of the next call (``None`` at the end).

        Raises:
            InvalidArgument: an argument is invalid (nothing is read).
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        checked_limit, checked_after = _checked_listing(state, limit, after_id)
        checked_key, checked_header = check_key(key), check_header(header)
        return await self._engine.find_jobs(
            self._name, state, checked_limit, checked_after, checked_key, checked_header
        )

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
        return await self._engine.requeue_dead(self._name, checked)

    async def purge_dead(
        self,
        older_than_s: float | None = None,
        *,
        dry_run: bool = False,
        ids: Iterable[int] | None = None,
    ) -> int:
        """Delete dead jobs of this queue for good (D25), as a sweep's retention would
        (Q9), but on demand and with the caller's age limit.

        Args:
            older_than_s: Only jobs with ``died_at + older_than_s < now`` (a number of
                seconds >= 0); ``None`` deletes every dead job of this queue.
            dry_run: Delete nothing; count the jobs that would be deleted now (D29).
            ids: D25.1: only the dead jobs with these ids (others are ignored: count
                them out with the return value); ``None``: every dead job of the queue.

        Returns:
            How many dead jobs were deleted (or, with ``dry_run``, match).

        Raises:
            InvalidArgument: ``older_than_s`` is not a finite number of seconds >= 0,
                ``dry_run`` is not a bool, or ``ids`` is not an iterable of job ids
                (nothing was deleted).
            StoreClosed: the store is closed.
        """
        self._store._check_open()
        checked = v.check_optional_duration("older_than_s", older_than_s, min_s=0)
        if not isinstance(dry_run, bool):
            raise InvalidArgument(f"dry_run must be True or False; got a {type(dry_run).__name__}")
        if ids is None:
            return await self._engine.purge_dead(self._name, checked, dry_run=dry_run)
        checked_ids = v.check_job_ids(ids)
        if not checked_ids:
            await trio.lowlevel.checkpoint()
            return 0
        return await self._engine.purge_dead(self._name, checked, dry_run=dry_run, ids=checked_ids)

    async def sweep_expired(self) -> SweepResult:
        """Dead-letter this queue's expired live jobs (``"expired"``), then delete its dead
        jobs older than this handle's ``dead_letter_retention_s`` (Q9). Atomic.

        Returns:
            How many rows expired and how many dead rows were purged.
        """
        self._store._check_open()
        return await self._engine.sweep_expired(self._name, self._opts.dead_letter_retention_s)
