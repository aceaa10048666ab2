"""The engine seam: what an engine provides to the public ``Store`` facade.

The seam is split by who uses it, so that a new operation is one method in one place:

- :class:`WorkPath`: producers and workers (enqueue, claim, heartbeat, ack, retry, fail).
  Every operation on claims takes a list: one ack is a batch of one (Q13), and an engine
  may still choose a one-row statement inside.
- :class:`OperatorPath`: reads and operator actions (get, list, stats, cancel, redrive,
  purge, sweep).
- :class:`Engine`: both paths, plus the lifecycle (``open``/``aclose``), transactions
  (Q10) and wake listeners.

Arguments arrive validated and canonical (``alkstore_trio._core._validate`` has checked
them in the store facade): an engine reads its clock once per operation, applies the
contract's transitions atomically and reports refusals as ``False`` or by leaving an id
out, never as an exception. Driver exceptions become :class:`~alkstore_trio.EngineError`
at this boundary; a call after :meth:`Engine.aclose` raises
:class:`~alkstore_trio.StoreClosed`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeAlias

if TYPE_CHECKING:
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
    from ._wake import DoneListener, WakeListener


#: Values for a statement's ``%s`` (a sequence) or ``%(name)s`` (a mapping) placeholders.
SqlParams: TypeAlias = Sequence[object] | Mapping[str, object]


class Claim(NamedTuple):
    """One claim to act on: the job's id and its claim token (``Job.claim_token`` of the
    claimed job, Q19.8; not its attempt count)."""

    job_id: int
    token: int


class Completion(NamedTuple):
    """One claim to ack with its result (Q19.1): stored with the ack when the job is kept
    (its stamp ``keep_completed_s`` is not ``None``), else discarded."""

    job_id: int
    token: int
    result: bytes | None


class ProgressItem(NamedTuple):
    """One claim to renew with its news (Q19.7): ``progress`` replaces the job's progress
    text when it is not ``None``."""

    job_id: int
    token: int
    progress: str | None


class RetryItem(NamedTuple):
    """One claim to retry (Q4, Q13): back to pending after ``delay_s`` seconds, or dead
    with ``error`` when the claim was the job's last allowed attempt (then ``delay_s`` is
    ``None``; the store resolves the backoff draw before calling the engine, D2)."""

    job_id: int
    token: int
    error: str | None
    delay_s: float | None


class FailItem(NamedTuple):
    """One claim to fail (Q4, Q13): dead now with ``error`` (``None``: ``"failed"``)."""

    job_id: int
    token: int
    error: str | None


class EngineTransaction(Protocol):
    """One open engine transaction (Q10)."""

    async def enqueue(self, specs: Sequence[EnqueueSpec]) -> list[Enqueued]:
        """Write rows that become visible, and wake their queues, only at commit. Q15: a
        key held (by a live job, a window, or this transaction) creates nothing; a key
        this transaction enqueues is held against everyone else until it ends."""
        ...

    async def fetch(self, sql: str, params: SqlParams | None) -> list[tuple[Any, ...]]:
        """Run the caller's own statement in the transaction; its rows (or ``[]``).
        An engine without SQL raises ``InvalidArgument``."""
        ...

    async def complete(self, queue: str, items: Sequence[Completion]) -> list[int]:
        """Q19.6: :meth:`WorkPath.complete` inside the transaction, fenced by V as there:
        the ids finished, which take effect at commit together with the transaction's
        other effects (or never). The store calls it last, right before the commit."""
        ...


class WorkPath(Protocol):
    """The operations of producers and workers: the hot path.

    The claim operations take claims of one queue. Each claim is checked against Q4's
    validity predicate V (row live in this queue, processing, token equal to its
    claim token, now <= deadline) inside the same atomic step as its effect, with one clock
    read for the whole batch (Q13).
    """

    async def enqueue(self, specs: Sequence[EnqueueSpec]) -> list[Enqueued]:
        """Q2: insert all rows atomically with one clock read; wake their queues. One
        :class:`~alkstore_trio.Enqueued` per spec, in order (``specs`` is never empty).
        Q15: a spec with a ``unique_key`` that a live job of its queue (or an earlier
        spec of the call, or an open ``unique_for_s`` window) holds creates nothing and
        returns that job's id with ``created=False``; under any concurrency."""
        ...

    async def claim(self, queue: str, worker_id: str, n: int) -> list[Job]:
        """Q3: the pre-claim sweep and up to ``n`` claims (``n >= 1``), atomically; the
        jobs claimed, in claim order (``alkstore_trio._core.claim_order_key``)."""
        ...

    async def heartbeat(
        self, queue: str, claims: Sequence[Claim], extend_s: float | None
    ) -> list[int]:
        """Q4/Q13: renew each distinct valid claim (an absolute reset to now + ``extend_s``,
        default the row's ``visibility_timeout_s``); the ids renewed."""
        ...

    async def heartbeat_progress(
        self, queue: str, items: Sequence[ProgressItem], extend_s: float | None
    ) -> list[int]:
        """Q19.7: :meth:`heartbeat`, and each renewed claim's job takes the item's
        ``progress`` text (``None``: keeps its own), in the same atomic step; the ids
        renewed. The store sends it only when some item has news."""
        ...

    async def ack(self, queue: str, claims: Sequence[Claim]) -> list[int]:
        """Q4/Q13: finish each distinct valid claim: its row is deleted, or (Q19.2) moved
        to history as ``completed`` when its stamp ``keep_completed_s`` is not ``None``;
        the ids finished."""
        ...

    async def complete(self, queue: str, items: Sequence[Completion]) -> list[int]:
        """Q19.1/Q19.2: :meth:`ack` with a result per claim (distinct claims), stored on
        the kept rows in the same atomic step; an unkept row's result is discarded. The
        ids finished."""
        ...

    async def complete_and_claim(
        self, queue: str, items: Sequence[Completion], worker_id: str, n: int
    ) -> tuple[list[int], list[Job]]:
        """Q19.1 (D21): :meth:`complete`, then :meth:`claim` (``n >= 1``), atomically, as
        :meth:`ack_and_claim` does for :meth:`ack`."""
        ...

    async def ack_and_claim(
        self, queue: str, claims: Sequence[Claim], worker_id: str, n: int
    ) -> tuple[list[int], list[Job]]:
        """Q13 (D21): :meth:`ack`, then :meth:`claim` (``n >= 1``), atomically in one step
        with one clock read; the ids deleted and the jobs claimed (claim order)."""
        ...

    async def retry(self, queue: str, items: Sequence[RetryItem]) -> list[bool]:
        """Q4/Q13 (D20): retry each item whose claim is valid; one bool per item, in
        order. A job listed twice is retried at most once, by its first item with a
        valid claim; its later items are refused."""
        ...

    async def release(self, queue: str, claims: Sequence[Claim], error: str | None) -> list[int]:
        """Q19.8: give each distinct valid claim's job back: pending, ready now,
        ``attempts - 1`` (the attempt given back), ``last_error = error``, claim fields
        and token cleared; wake the queue when any was released. The ids released."""
        ...

    async def fail(self, queue: str, items: Sequence[FailItem]) -> list[bool]:
        """Q4/Q13 (D20): fail each item whose claim is valid; one bool per item, in order
        (a job listed twice as in :meth:`retry`)."""
        ...

    async def ack_batch(self, queue: str, job_ids: Sequence[int]) -> int:
        """Q6: finish each of these distinct ids that is processing within its deadline
        in this queue, whoever holds it (no token check), as :meth:`ack` does (a kept
        row moves to history, Q19.2); how many."""
        ...

    # Q19.5: a cancelled claim's holder stops and settles it.
    async def settle_cancelled(self, queue: str, claims: Sequence[Claim]) -> list[int]:
        """Q19.5: finalize as cancelled each distinct claim whose row of this queue is
        cancelling under that claim token (no lease check: the holder may settle late);
        counted as cancelled (D27). The ids finalized."""
        ...

    async def cancelling_among(self, queue: str, job_ids: Sequence[int]) -> list[int]:
        """Q19.5: which of these ids are cancelling rows of this queue (a read; workers
        ask it for the claims they hold, in case an announcement was lost)."""
        ...

    # Q16 / R11 (due times): how a worker learns when its queue's next delayed job is due.
    async def next_due_in_s(self, queue: str) -> float | None:
        """Q16: the seconds from now until the earliest ``run_at`` later than now among
        this queue's pending rows (on the engine's clock), or ``None`` when there is
        none. A read; workers ask it when a claim came back short (R11)."""
        ...

    # Q17 periodic jobs: the workers' half.
    async def fire_periodic(self, schedules: Sequence[Periodic]) -> PeriodicTick:
        """Q17.2/Q17.3: in one atomic step with one clock read, for each schedule
        (distinct names, never empty): make its row when missing, adopt this definition
        when the row's expression or time zone differ (``next_fire_at`` recomputed from
        now), stamp ``last_seen_at``; then enqueue one job per fire time owed
        (``alkstore_trio._core._periodic.plan_fires``) and advance the row. Concurrent
        calls for one name are serialized by the engine, so each fire time is enqueued
        at most once; an engine may instead skip a row another call is firing (Q17.9),
        answering a delay of at most ``PERIODIC_HELD_RECHECK_S`` for it. The jobs
        enqueued, and the delay until the earliest next fire."""
        ...

    # Q21 the worker registry: the workers' half.
    async def beat_worker(self, registration: WorkerRegistration, phase: BeatPhase) -> None:
        """Q21.2: in one atomic step with one clock read, write the worker's row:
        ``"start"`` afresh (started and beat now, not stopped), ``"beat"`` beat now and
        not stopped (a missing row made again, started now), ``"stop"`` beat and stopped
        now (a missing row stays missing). A start or a beat also deletes up to
        ``WORKER_PURGE_BATCH`` rows whose heartbeat is older than
        ``WORKER_PURGE_AFTER_S`` (Q21.4)."""
        ...


class OperatorPath(Protocol):
    """Reads and operator actions: off the hot path."""

    async def get_job(self, job_id: int, queue: str | None) -> Job | None:
        """Q8 (a queue's row) and D26 (``queue=None``: the row of any queue): the row with
        this id, live, dead or (Q19.2) kept, with its result."""
        ...

    async def list_jobs(
        self, queue: str, state: JobState, limit: int, after_id: int | None
    ) -> list[Job]:
        """D26: up to ``limit`` (>= 1) rows of this queue in this state (Q19.2:
        ``"completed"`` and, Q19.5, ``"cancelled"`` list the kept rows), by id
        ascending, with ids above ``after_id`` (all for ``None``)."""
        ...

    async def find_jobs(
        self,
        queue: str,
        state: JobState,
        limit: int,
        after_id: int | None,
        key: str | None,
        header: tuple[str, str] | None,
    ) -> JobPage:
        """D26.1: :func:`~alkstore_trio._core._filters.filtered_page` over the rows
        ``list_jobs`` would list (ids above ``after_id`` in ``state``): those whose
        unique or concurrency key equals ``key`` and whose header ``header[0]`` equals
        ``header[1]`` (``None``: no such filter), a header filter examining at most
        ``HEADER_SCAN_ROWS`` rows."""
        ...

    async def stats(self, queue: str | None) -> StoreStats:
        """D22: the counts of every queue with rows or counted jobs (only ``queue``'s,
        rows or not, when given), with each queue's counters of jobs acked,
        dead-lettered and cancelled (D27), read atomically at one clock read."""
        ...

    async def cancel(self, queue: str, job_id: int) -> bool:
        """Q19.5: cancel this queue's live row: a pending one (or one whose lease lapsed)
        is finalized as cancelled at once (counted, D27); a processing one becomes
        cancelling and its holder is told on the queue's wake channel (``cancel:<id>``),
        as is an already cancelling one again. False when there is no live row."""
        ...

    async def requeue_dead(self, queue: str, job_ids: Sequence[int] | None) -> int:
        """D24: move this queue's dead rows with these distinct ids (every one for
        ``None``) back to pending, ready now, attempts reset, atomically; wake the queue
        when any moved. Ids that are not dead rows of this queue are ignored; Q15: so
        are rows whose unique key a live job holds, and of rows sharing a key all but
        the lowest id. The count moved."""
        ...

    async def purge_dead(
        self,
        queue: str,
        older_than_s: float | None,
        *,
        dry_run: bool,
        ids: Sequence[int] | None = None,
    ) -> int:
        """D25: delete this queue's dead rows with ``died_at + older_than_s < now`` (every
        one for ``None``), atomically; the count deleted. D29: with ``dry_run``, count
        them and delete nothing. D25.1: with ``ids`` (checked, never empty; the store
        passes it only when given), only the rows with those ids; other ids are
        ignored."""
        ...

    async def sweep_expired(self, queue: str, retention_s: float | None) -> SweepResult:
        """Q9, atomically; then Q19.3: purge the kept rows past ``completed_at +
        keep_completed_s`` in batches (not atomically as a whole)."""
        ...

    # Q16: rescheduling a pending job.
    async def reschedule(
        self,
        queue: str,
        job_id: int,
        delay_s: float | None,
        run_at: datetime | None,
        priority: int | None,
    ) -> bool:
        """Q16: if this queue's row ``job_id`` is pending, set its ``run_at`` to now +
        ``delay_s`` (>= 0), or to ``run_at``, or keep it (both ``None``), and its priority
        (``None``: keep it), atomically; then wake the queue with the new due time
        (R11). ``False``, and no effect, for a processing, dead or missing row."""
        ...

    # Q17 periodic jobs: the operators' half.
    async def list_periodic(self, stale_after_s: float) -> list[PeriodicInfo]:
        """Q17.6: every schedule's row by name, at one clock read; ``stale`` when its
        ``last_seen_at`` is more than ``stale_after_s`` before now."""
        ...

    async def delete_periodic(self, name: str) -> bool:
        """Q17.10: delete the schedule row ``name`` (waiting for a call firing it);
        ``True`` if there was one. A worker that still declares the name makes it again
        at its next call, as a new row."""
        ...

    # Q18: queue controls.
    async def set_paused(self, queue: str, paused: bool) -> None:
        """Q18: pause (``True``) or resume (``False``) the queue, persistently. When it
        returns after a pause, no claim of the queue hands out a job until a resume: any
        claim still in flight when the pause began has finished. A resume wakes the
        queue."""
        ...

    async def set_limits(self, queue: str, limits: QueueLimits, refill: bool) -> None:
        """Q18.7-Q18.9: the queue's limits from now on, persistently (no limit set:
        :data:`~alkstore_trio.QueueLimits` with every field ``None``). When it returns,
        every claim of the queue obeys them: as for a pause, claims in flight have
        finished first. ``refill`` starts the rate limit's token bucket full (else it
        keeps its tokens). The queue is woken. The limits and the throttle counts are
        read back through :meth:`stats` (``QueueStats.limits``, ``.throttled``)."""
        ...

    # Q21 the worker registry: the operators' half.
    async def list_workers(self, gone_after_s: float, limit: int) -> list[WorkerInfo]:
        """Q21.4: up to ``limit`` rows at one clock read, the latest heartbeat first
        (ties by ``worker_id``), each with its state at that read."""
        ...


class Engine(WorkPath, OperatorPath, Protocol):
    """One engine instance, serving one store (Q14).

    ``open_store(engine)`` enters :meth:`open` for the store's lifetime and calls the
    two paths only inside it. An instance is opened at most once.
    """

    def open(self) -> AbstractAsyncContextManager[object]:
        """Start the engine (connect, check the schema, start background tasks) for the
        ``async with`` block, and close it at the end. Raises ``InvalidArgument`` when
        the instance was opened before."""
        ...

    def transaction(self) -> AbstractAsyncContextManager[EngineTransaction]:
        """Q10: commit on a clean exit, roll back on any exception."""
        ...

    def open_wake_listener(
        self, queues: frozenset[str]
    ) -> AbstractAsyncContextManager[WakeListener]:
        """A subscription to these queues' wakes, from the moment it is entered
        (:class:`~alkstore_trio.engine.WakeHub` makes the listeners)."""
        ...

    def open_done_listener(
        self, queue: str, job_ids: frozenset[int]
    ) -> AbstractAsyncContextManager[DoneListener]:
        """Q19.4: a subscription to the done announcements of these jobs of ``queue``,
        from the moment it is entered (:meth:`WakeHub.open_done_listener
        <alkstore_trio.engine.WakeHub.open_done_listener>` makes the listeners). An
        engine announces a job (``WakeHub.publish_done``) when a transition made it
        final: completed, cancelled or dead. It may leave some finalizations
        unannounced (PostgreSQL: sweeps, unkept acks) or lose announcements (then it
        calls ``WakeHub.publish_all``): waiters also re-read on a timer."""
        ...

    async def aclose(self) -> None:
        """Close the engine early; every later call raises ``StoreClosed``. Idempotent."""
        ...
