"""The in-memory job table: live and dead rows plus the indexes that keep claims fast.

Why indexes: a claim must find the best claimable rows of one queue among possibly
hundreds of thousands. Scanning every row per claim is O(n); instead each queue keeps
heaps, and a claim only touches the rows it hands out (plus stale entries it discards).

- ``ready``: rows that are claimable by time alone, keyed by the claim order
  (priority DESC, run_at ASC, id ASC): pending rows whose ``run_at`` has come, and
  reclaimable rows with attempts left.
- ``delayed``: pending rows whose ``run_at`` is still ahead, keyed by ``run_at``; a claim
  first moves the ones that came due into ``ready``.
- ``leases``: processing rows keyed by deadline; a claim moves the lapsed ones into
  ``ready`` (or dead-letters them when their attempts are spent: the pre-claim sweep).
- ``cancelling``: cancelling rows (Q19.5) keyed by deadline, for the sweep
  (:mod:`._cancel`).
- ``expiry``: live rows with an ``expires_at``, for the sweep; ``dead``: dead rows by
  ``died_at``, for retention. Entries of both are stale when the row they name no longer
  has that ``expires_at`` or ``died_at`` (purged, or redriven from dead: D24).

Each queue also counts the jobs that left its live rows, by outcome (acked,
dead-lettered, cancelled: D27), from the table's creation on. Claim tokens (Q19.8) come
from one table-wide counter, so no token is ever handed out twice.

Q15 (unique jobs) keeps three dicts keyed by (queue, unique key), off the claim path:
``keys`` names the live row holding a key (set when a keyed row is inserted or
redriven, cleared when it leaves the live rows: ack, cancel, dead-letter move);
``windows`` the (expires_at, job id) of a key's ``unique_for_s`` window, with a heap per
queue so that the sweep drops the expired ones; ``held`` the keys an open transaction has
enqueued but not yet committed (:class:`KeyHeld` makes everyone else wait for it, as
PostgreSQL's locks do).

Heaps are never searched or edited in place. Every change to a live row bumps the row's
*generation*, and each heap entry carries the generation it was pushed with; an entry
whose generation no longer matches is stale and is dropped when it surfaces. This keeps
every operation O(log n) amortized.

The indexes assume time does not run backwards. A manual clock may be set back, so every
operation first reports its ``now``; if it is earlier than any ``now`` seen before, the
time-dependent heaps are rebuilt from the rows (O(n), and only then).

Everything here is pure and synchronous: rows change only through the functions of
the core's ``_transitions``, which also give the claim order (``claim_order_key``) and
the retention rules (``is_purgeable``, ``is_dead_older_than``) that the heaps and the
scans follow; ``now`` is always an argument. It is the in-memory engine's index, not part
of the contract: it lives with the engine, and the core stays the one copy of the rules.
"""

from __future__ import annotations

import heapq
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING

from ..._core import (
    Enqueued,
    EnqueueSpec,
    Job,
    JobState,
    QueueLimits,
    StoreStats,
    SweepResult,
)
from ..._core import _transitions as t
from .._protocol import Completion
from . import _cancel, _due, _per_key, _stats
from ._history import History
from ._limits import LimitBook
from ._redrive import KeyHeld, redrivable

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from ..._core._reschedule import RescheduleSpec
    from .._protocol import Claim, FailItem, RetryItem

#: A ``ready`` heap entry: the claim order key (Q3), then the row's generation.
_ReadyEntry = tuple[int, datetime, int, int]
#: Q15: a unique key, with its queue.
UniqueKey = tuple[str, str]


def _ready_entry(job: Job, gen: int) -> _ReadyEntry:
    return (*t.claim_order_key(job), gen)


class _QueueIndex:
    __slots__ = ("cancelling", "dead", "delayed", "expiry", "leases", "ready", "windows")

    def __init__(self) -> None:
        self.ready: list[_ReadyEntry] = []
        self.delayed: list[tuple[datetime, int, int]] = []
        self.leases: list[tuple[datetime, int, int]] = []
        self.cancelling: list[tuple[datetime, int, int]] = []  # Q19.5
        self.expiry: list[tuple[datetime, int]] = []
        self.dead: list[tuple[datetime, int]] = []
        self.windows: list[tuple[datetime, str]] = []  # Q15: (expires_at, key)


class _Finished:
    """One queue's counts of jobs that left the live rows (D27)."""

    __slots__ = ("acked", "cancelled", "dead_lettered")

    def __init__(self) -> None:
        self.acked = 0
        self.dead_lettered = 0
        self.cancelled = 0


class JobTable:
    """Every row of one in-memory engine, with the contract's operations over it.

    Every method that takes ``now`` is one atomic transition: it either completes or
    raises before changing anything.
    """

    def __init__(self) -> None:
        self._live: dict[int, Job] = {}
        self._gen: dict[int, int] = {}
        self._next_gen = 0
        self._dead: dict[int, Job] = {}
        #: Q19.2: the kept rows of acked jobs.
        self.history = History()
        self._queues: dict[str, _QueueIndex] = {}
        self._finished: dict[str, _Finished] = {}
        self._next_id = 1
        self._last_token = 0
        self._latest_now: datetime | None = None
        #: Q18: the paused queues, and every queue's limits (Q18.7-Q18.11).
        self._paused: set[str] = set()
        self.limits = LimitBook()
        # Q15: the live row of each key, each key's window, the keys held by open
        # transactions (holder, reserved id).
        self._keys: dict[UniqueKey, int] = {}
        self._windows: dict[UniqueKey, tuple[datetime, int]] = {}
        self._held: dict[UniqueKey, tuple[object, int]] = {}
        self._done: list[tuple[str, int]] = []  # Q19.4: rows finalized, see take_done

    # -- reading -----------------------------------------------------------------------

    def get(self, job_id: int, queue: str | None) -> Job | None:
        """Q8: the row with this id in this queue, live, dead or kept (Q19.2); D26: in
        whichever queue it is, for ``queue=None``."""
        job = self._live.get(job_id) or self._dead.get(job_id) or self.history.get(job_id)
        if job is None or (queue is not None and job.queue != queue):
            return None
        return job

    def list_jobs(self, queue: str, state: JobState, limit: int, after_id: int | None) -> list[Job]:
        """D26: up to ``limit`` rows of this queue in this state, by id, with ids above
        ``after_id``. A linear scan: the operator's listing is not a hot path."""
        if state in ("completed", "cancelled"):
            return self.history.list_jobs(queue, state, limit, after_id)
        rows = self._dead if state == "dead" else self._live
        floor = 0 if after_id is None else after_id
        found = [
            job
            for job in rows.values()
            if job.queue == queue and job.state == state and job.id > floor
        ]
        found.sort(key=lambda job: job.id)
        return found[:limit]

    def stats(self, queue: str | None, now: datetime) -> StoreStats:
        """D22: the counts of every queue with rows or counted jobs (or of ``queue``
        only, rows or not), at ``now``, with each queue's counters (D27); kept rows
        (Q19.2) are not counted."""
        self._observe(now)
        names = [*self._finished, *self._paused, *self.limits.listed()]
        return _stats.table_stats(
            [*self._live.values(), *self._dead.values()],
            queue,
            names,
            now,
            ids_issued=self._next_id - 1,
            entry=self._stats_entry,
        )

    def _stats_entry(self, name: str) -> _stats.Entry:
        finished = self._finished.get(name) or _Finished()
        limits, throttled = self.limits.stats(name)
        return (
            finished.acked, finished.dead_lettered, finished.cancelled,
            name in self._paused, limits, throttled,
        )  # fmt: skip

    def jobs(self) -> Iterator[Job]:
        """Every row, live and dead, in id order."""
        rows = [*self._live.values(), *self._dead.values(), *self.history]
        return iter(sorted(rows, key=lambda job: job.id))

    def __len__(self) -> int:
        return len(self._live) + len(self._dead) + len(self.history)

    # -- writing -----------------------------------------------------------------------

    def reserve_ids(self, count: int) -> list[int]:
        """Take ``count`` fresh ids (in increasing order) for rows inserted later."""
        first = self._next_id
        self._next_id += count
        return list(range(first, first + count))

    def insert(self, rows: Sequence[tuple[int, EnqueueSpec]], now: datetime) -> list[int]:
        """Q2/Q10: insert new pending rows with reserved ids, all with one ``now``. A keyed
        row (Q15) takes its key from its transaction's hold and opens its window."""
        self._observe(now)
        jobs = [t.enqueued_job(spec, job_id, now) for job_id, spec in rows]
        for job, (_, spec) in zip(jobs, rows, strict=True):
            self._set_live(job, now)
            if job.expires_at is not None:
                heapq.heappush(self._index(job.queue).expiry, (job.expires_at, job.id))
            if spec.unique_key is not None:
                self._take_key(job.id, spec, now)
        return [job.id for job in jobs]

    def enqueue(self, specs: Sequence[EnqueueSpec], now: datetime) -> list[Enqueued]:
        """Q2: insert new rows with fresh ids; Q15: a spec whose key is held creates
        nothing and gets the holder's id (``created=False``)."""
        return self.enqueue_rows(specs, now)[0]

    def enqueue_rows(
        self, specs: Sequence[EnqueueSpec], now: datetime
    ) -> tuple[list[Enqueued], Sequence[EnqueueSpec]]:
        """:meth:`enqueue`, and the specs that made a row (to wake their queues): all of
        them without keys, in one pass over the rows."""
        if all(spec.unique_key is None for spec in specs):
            ids = self.insert(list(zip(self.reserve_ids(len(specs)), specs, strict=True)), now)
            return list(map(Enqueued, ids)), specs
        results, rows = self._plan(specs, now, holder=None)
        self.insert(rows, now)
        return results, [spec for _, spec in rows]

    def hold(
        self, specs: Sequence[EnqueueSpec], now: datetime, holder: object
    ) -> tuple[list[Enqueued], list[tuple[int, EnqueueSpec]]]:
        """Q10/Q15: reserve ids for a transaction's rows, to be inserted at commit, and
        hold their keys for ``holder`` until it commits or calls :meth:`release`; the
        results and the rows to insert. Raises :class:`KeyHeld` (before any effect)
        when another open transaction holds one of the keys."""
        results, rows = self._plan(specs, now, holder)
        for job_id, spec in rows:
            if spec.unique_key is not None:
                self._held[(spec.queue, spec.unique_key)] = (holder, job_id)
        return results, rows

    def release(self, keys: Iterable[UniqueKey], holder: object) -> None:
        """Q15: drop ``holder``'s holds that are left on these keys (a transaction that
        rolled back: its rows never exist; after a commit there are none left)."""
        for key in keys:
            held = self._held.get(key)
            if held is not None and held[0] is holder:
                del self._held[key]

    def claim(self, queue: str, worker_id: str, n: int, now: datetime) -> list[Job]:
        """Q3: the pre-claim sweep, then up to ``n`` claims in the contract's order;
        Q18.7/Q18.9: no more than the queue's limits allow."""
        if n <= 0:
            return []
        self._observe(now)
        index = self._queues.get(queue)
        if index is None:
            return []
        self._promote_due(index, now)
        self._collect_lapsed(index, now)
        if queue in self._paused:
            # Q18: the pre-claim sweep ran; a paused queue hands nothing out.
            return []
        if not self.limits.limited(queue):
            return t.as_claimed(self._take(index, worker_id, n, now))
        live = self._live_leases(index, now)
        allowed = self.limits.allowance(queue, live, n, now)
        cap = self.limits.get(queue).max_running_per_key
        if cap is None:
            out, held = self._take(index, worker_id, allowed, now), False
            found = len(out) + (self._has_claimable(index, now) and len(out) < n)
        else:  # Q18.8
            out, found, held = _per_key.take(self, index, worker_id, allowed, cap, now)
        self.limits.claimed(queue, live, n, found, len(out), now, held)
        return t.as_claimed(out)

    def _take(self, index: _QueueIndex, worker_id: str, n: int, now: datetime) -> list[Job]:
        """Q3 step 3: claim the first ``n`` claimable rows of the queue's ready heap."""
        out: list[Job] = []
        ready = index.ready
        while ready and len(out) < n:
            _, _, job_id, gen = ready[0]
            if self._gen.get(job_id) != gen:
                heapq.heappop(ready)
                continue
            job = self._live[job_id]
            if not t.is_claimable(job, now):
                # Expired (left for the sweep); nothing else can surface here.
                heapq.heappop(ready)
                continue
            # Compute the claimed row before touching the heap, so that a failure here
            # leaves the row where it was (claimable by the next claim).
            job = t.claimed(job, worker_id, now, self.next_token())
            heapq.heappop(ready)
            self._set_live(job, now)
            out.append(job)
        return out

    def next_token(self) -> int:
        """Q19.8: a claim token never handed out before by this table."""
        self._last_token += 1
        return self._last_token

    def _has_claimable(self, index: _QueueIndex, now: datetime) -> bool:
        """Whether the ready heap holds a claimable row (stale and expired entries on
        top are dropped, as a claim would)."""
        ready = index.ready
        while ready:
            _, _, job_id, gen = ready[0]
            if self._gen.get(job_id) == gen and t.is_claimable(self._live[job_id], now):
                return True
            heapq.heappop(ready)
        return False

    def _leases(self, index: _QueueIndex, now: datetime) -> list[datetime]:
        """Q18.7: the deadlines of the queue's unexpired leases, processing or cancelling
        (a cancelled handler holds its slot until it stopped; stale heap entries do not
        count, nor lapsed ones)."""
        gens = self._gen
        return [
            expires
            for expires, job_id, gen in _per_key.holding(index)
            if gens.get(job_id) == gen and expires >= now
        ]

    def _live_leases(self, index: _QueueIndex, now: datetime) -> int:
        return len(self._leases(index, now))

    def _earliest_lease_s(self, index: _QueueIndex, now: datetime) -> float | None:
        leases = self._leases(index, now)
        return None if not leases else (min(leases) - now).total_seconds()

    def set_limits(self, queue: str, limits: QueueLimits, refill: bool, now: datetime) -> None:
        """Q18.11: the queue's new limits (one transition)."""
        self._observe(now)
        self.limits.set(queue, limits, refill, now)

    def set_paused(self, queue: str, paused: bool) -> None:
        """Q18: pause or resume the queue (one transition: exact by construction)."""
        if paused:
            self._paused.add(queue)
        else:
            self._paused.discard(queue)

    def heartbeat(
        self, queue: str, claims: Iterable[Claim], extend_s: float | None, now: datetime
    ) -> list[int]:
        """Q4/Q13: renew each valid (job id, claim token) of this queue, in one transition
        (an absolute reset); the ids renewed, in the order given."""
        return self.heartbeat_progress(queue, [(*claim, None) for claim in claims], extend_s, now)

    def heartbeat_progress(
        self, queue: str, items: Iterable[tuple[int, int, str | None]], extend_s: float | None,
        now: datetime,
    ) -> list[int]:  # fmt: skip
        """Q19.7: :meth:`heartbeat` with each item's progress (``None``: no news)."""
        self._observe(now)
        renewed: list[int] = []
        distinct: dict[tuple[int, int], str | None] = {}
        for job_id, token, progress in items:
            distinct.setdefault((job_id, token), progress)  # a claim's first item
        for (job_id, token), progress in distinct.items():
            job = self._valid(queue, job_id, token, now)
            if job is not None:
                self._set_live(t.heartbeaten(job, now, extend_s, progress), now)
                renewed.append(job_id)
        return renewed

    def ack_batch(self, queue: str, job_ids: Iterable[int], now: datetime) -> int:
        """Q6: finish each distinct, ackable row of this queue (deleted, or kept: Q19.2);
        count them."""
        self._observe(now)
        count = 0
        for job_id in dict.fromkeys(job_ids):
            job = self._live.get(job_id)
            if job is not None and job.queue == queue and t.is_ackable(job, now):
                self._finish(job, None, now)
                count += 1
        if count:
            self._counts(queue).acked += count
        return count

    def ack(self, queue: str, claims: Iterable[Claim], now: datetime) -> list[int]:
        """Q4/Q13: finish each (job id, claim token) whose claim is valid (Q4's V) in this
        queue, in one transition; the ids finished, in the order given."""
        return self.complete(queue, [Completion(*claim, None) for claim in claims], now)

    def complete(self, queue: str, items: Iterable[Completion], now: datetime) -> list[int]:
        """Q19.1/Q19.2: :meth:`ack` with results: a valid claim's row leaves the live
        rows, and moves to history with its result when its stamp keeps it (an unkept
        row's result is discarded). One transition; a claim listed twice counts once."""
        self._observe(now)
        finished: list[int] = []
        distinct: dict[tuple[int, int], bytes | None] = {}
        for item in items:
            distinct.setdefault((item.job_id, item.token), item.result)
        for (job_id, token), result in distinct.items():
            job = self._valid(queue, job_id, token, now)
            if job is not None:
                self._finish(job, result, now)
                finished.append(job_id)
        if finished:
            self._counts(queue).acked += len(finished)
        return finished

    def _finish(self, job: Job, result: bytes | None, now: datetime) -> None:
        """The ack's move: out of the live rows, into history when kept (Q19.2)."""
        self._drop_live(job.id)
        if job.keep_completed_s is not None:
            self.history.keep(t.completed(job, now, result))

    def ack_and_claim(
        self, queue: str, claims: Iterable[Claim], worker_id: str, n: int, now: datetime
    ) -> tuple[list[int], list[Job]]:
        """Q13 (D21): :meth:`ack`, then :meth:`claim`, in one transition at one ``now``;
        the ids deleted and the jobs claimed (none when ``n <= 0``). No other operation
        can run between the two steps: the caller runs this as one request."""
        acked = self.ack(queue, claims, now)
        return acked, self.claim(queue, worker_id, n, now)

    def complete_and_claim(
        self, queue: str, items: Iterable[Completion], worker_id: str, n: int, now: datetime
    ) -> tuple[list[int], list[Job]]:
        """Q19.1 (D21): :meth:`complete`, then :meth:`claim`, in one transition."""
        done = self.complete(queue, items, now)
        return done, self.claim(queue, worker_id, n, now)

    def retry(self, queue: str, items: Iterable[RetryItem], now: datetime) -> list[bool]:
        """Q4/Q13 (D20): retry each (job id, claim token, error, delay_s) in turn (dead at
        budget, else pending after ``delay_s``), all in one transition; one bool per
        item, in order.

        A job listed twice is retried at most once: by its first item whose claim is
        valid; every later item of that job is refused, its claim being finished by then.
        """
        finish = [
            (job_id, token, partial(t.retried, now=now, error=error, delay_s=delay_s))
            for job_id, token, error, delay_s in items
        ]
        return self._finish_claims(queue, finish, now)

    def release_claims(
        self, queue: str, claims: Iterable[Claim], error: str | None, now: datetime
    ) -> list[int]:
        """Q19.8: each distinct valid claim back to pending, ready now, its attempt given
        back, in one transition; the ids released, in the order given."""
        finish = [
            (job_id, token, partial(t.released, now=now, error=error))
            for job_id, token in dict.fromkeys(claims)
        ]
        done = self._finish_claims(queue, finish, now)
        return [job_id for (job_id, _, _), ok in zip(finish, done, strict=True) if ok]

    def fail(self, queue: str, items: Iterable[FailItem], now: datetime) -> list[bool]:
        """Q4/Q13 (D20): fail each (job id, claim token, error) in turn (dead now), all in
        one transition; one bool per item, in order (a job listed twice as in
        :meth:`retry`)."""
        finish = [
            (job_id, token, partial(t.failed, now=now, error=error))
            for job_id, token, error in items
        ]
        return self._finish_claims(queue, finish, now)

    def cancel(self, queue: str, job_id: int, now: datetime) -> tuple[bool, bool]:
        """Q19.5: cancel this queue's live row; (cancelled, announce to its holder)."""
        return _cancel.cancel(self, queue, job_id, now)

    def settle_cancelled(self, queue: str, claims: Iterable[Claim], now: datetime) -> list[int]:
        """Q19.5: the holders finalize their cancelling claims; the ids finalized."""
        return _cancel.settle(self, queue, claims, now)

    def cancelling_among(self, queue: str, job_ids: Iterable[int]) -> list[int]:
        """Q19.5: which of these ids are cancelling rows of this queue."""
        return _cancel.among(self, queue, job_ids)

    def requeue_dead(self, queue: str, job_ids: Iterable[int] | None, now: datetime) -> int:
        """D24: move this queue's dead rows with these ids (every one for ``None``) back
        to pending, ready now, attempts reset (:func:`~._transitions.requeued`); ids
        that are not dead rows of this queue are ignored. Q15: a row whose key a live
        row holds stays dead (skipped), and of dead rows sharing a key only the lowest
        id moves. Every new row is computed before any is stored. Returns how many
        moved."""
        self._observe(now)
        if job_ids is None:
            targets = [job for job in self._dead.values() if job.queue == queue]
        else:
            targets = [
                job
                for job_id in dict.fromkeys(job_ids)
                if (job := self._dead.get(job_id)) is not None and job.queue == queue
            ]
        targets = redrivable(targets, self._held, self._keys)
        revived = [t.requeued(job, now) for job in targets]
        for job in revived:
            del self._dead[job.id]
            self._set_live(job, now)
            if job.expires_at is not None:
                heapq.heappush(self._index(job.queue).expiry, (job.expires_at, job.id))
            if job.unique_key is not None:
                self._keys[(job.queue, job.unique_key)] = job.id
        return len(revived)

    def purge_dead(
        self,
        queue: str,
        older_than_s: float | None,
        now: datetime,
        *,
        dry_run: bool = False,
        ids: Sequence[int] | None = None,
    ) -> int:
        """D25: delete this queue's dead rows that died more than ``older_than_s`` ago
        (every one for ``None``); how many. D29: ``dry_run`` only counts them. D25.1:
        ``ids`` keeps only those rows."""
        self._observe(now)
        rows = self._dead.values() if ids is None else map(self._dead.get, set(ids))
        doomed = [
            job.id
            for job in rows
            if job and job.queue == queue and t.is_dead_older_than(job, now, older_than_s)
        ]
        if dry_run:
            return len(doomed)
        for job_id in doomed:
            del self._dead[job_id]
        return len(doomed)

    def sweep_expired(self, queue: str, retention_s: float | None, now: datetime) -> SweepResult:
        """Q19.5: finalize lapsed cancelling rows; Q9: dead-letter expired live rows (not
        cancelling ones: a cancelled job is never *expired*), then purge dead rows past
        retention; then Q19.3: the first batch of kept rows past their time (the engine
        purges the next batches as transitions of their own)."""
        self._observe(now)
        index = self._queues.get(queue)
        if index is None:
            return SweepResult(0, 0, self.history.purge(queue, now))
        cancelled = _cancel.sweep(self, index, now)
        expired = 0
        while index.expiry and index.expiry[0][0] < now:
            expires_at, job_id = heapq.heappop(index.expiry)
            job = self._live.get(job_id)
            # A row redriven from dead (D24) has a new expires_at; its old entry is stale.
            if job is not None and job.expires_at == expires_at and job.state != "cancelling":
                self._replace(t.dead(job, now, t.EXPIRED), now)
                expired += 1
        purged = 0
        # The heap is ordered by died_at, so the purgeable rows (Q9) come first.
        while index.dead:
            died_at, job_id = index.dead[0]
            job = self._dead.get(job_id)
            # Stale when the row was purged, or redriven and dead again since (D24).
            if job is None or job.died_at != died_at:
                heapq.heappop(index.dead)
                continue
            if not t.is_purgeable(job, now, retention_s):
                break
            heapq.heappop(index.dead)
            del self._dead[job_id]
            purged += 1
        self._drop_closed_windows(queue, index, now)
        # Q19.3: the first batch of the purge of kept rows; the engine runs the rest.
        return SweepResult(expired, purged, self.history.purge(queue, now), cancelled)

    # -- Q16: rescheduling, and the next due time (R11) --------------------------------

    def reschedule(
        self, queue: str, job_id: int, spec: RescheduleSpec, now: datetime
    ) -> Job | None:
        """Q16: a pending row's new ``run_at`` and priority (:mod:`._due`)."""
        return _due.reschedule(self, queue, job_id, spec, now)

    def next_due_in_s(self, queue: str, now: datetime) -> float | None:
        """Q16: seconds until this queue's next pending row is due (:mod:`._due`)."""
        return _due.next_due_in_s(self, queue, now)

    # -- internals ---------------------------------------------------------------------

    def _counts(self, queue: str) -> _Finished:
        finished = self._finished.get(queue)
        if finished is None:
            finished = self._finished[queue] = _Finished()
        return finished

    def _index(self, queue: str) -> _QueueIndex:
        index = self._queues.get(queue)
        if index is None:
            index = self._queues[queue] = _QueueIndex()
        return index

    def _valid(self, queue: str, job_id: int, token: int, now: datetime) -> Job | None:
        self._observe(now)
        job = self._live.get(job_id)
        if job is None or job.queue != queue or not t.is_valid_claim(job, token, now):
            return None
        return job

    def _finish_claims(
        self,
        queue: str,
        items: Iterable[tuple[int, int, Callable[[Job], Job]]],
        now: datetime,
    ) -> list[bool]:
        """Apply a one-shot transition to each valid (job id, claim token) in turn. Every
        new row is computed before any is stored, so a transition that raises leaves the
        table untouched; a job already finished by an earlier item is refused."""
        self._observe(now)
        results: list[bool] = []
        finished: dict[int, Job] = {}
        for job_id, token, transition in items:
            job = None if job_id in finished else self._valid(queue, job_id, token, now)
            if job is not None:
                finished[job_id] = transition(job)
            results.append(job is not None)
        for job in finished.values():
            self._replace(job, now)
        return results

    def _set_live(self, job: Job, now: datetime) -> None:
        """Store a live row under a new generation and index it by its state."""
        # Generations are unique across the table, never per row: a row that died and
        # was requeued (D24) must not bring its stale heap entries of an earlier life
        # back to validity.
        self._next_gen += 1
        gen = self._next_gen
        self._gen[job.id] = gen
        self._live[job.id] = job
        index = self._index(job.queue)
        if job.state == "processing":
            assert job.claim_expires_at is not None
            heapq.heappush(index.leases, (job.claim_expires_at, job.id, gen))
        elif job.state == "cancelling":
            assert job.claim_expires_at is not None
            heapq.heappush(index.cancelling, (job.claim_expires_at, job.id, gen))
        elif job.run_at <= now:
            heapq.heappush(index.ready, _ready_entry(job, gen))
        else:
            heapq.heappush(index.delayed, (job.run_at, job.id, gen))

    def take_done(self) -> list[tuple[str, int]]:
        """Q19.4: the (queue, id) of the rows finalized since the previous call."""
        done, self._done = self._done, []
        return done

    def _drop_live(self, job_id: int) -> None:
        job = self._live.pop(job_id)
        del self._gen[job_id]
        self._done.append((job.queue, job_id))
        if job.unique_key is not None:
            # Q15: the key frees when its job leaves the live rows.
            self._keys.pop((job.queue, job.unique_key), None)

    # -- Q15 unique keys ---------------------------------------------------------------

    def _holder_of(self, key: UniqueKey, now: datetime, holder: object) -> int | None:
        """The id that holds ``key`` for an enqueue by ``holder`` (``None``: outside a
        transaction): its own held row, the live row, or the job of an open window;
        ``None`` when the key is free. Raises :class:`KeyHeld` for another's hold."""
        held = self._held.get(key)
        if held is not None:
            if held[0] is holder:
                return held[1]
            raise KeyHeld(held[0])
        live = self._keys.get(key)
        if live is not None:
            return live
        window = self._windows.get(key)
        if window is not None and now < window[0]:
            return window[1]
        return None

    def _plan(
        self, specs: Sequence[EnqueueSpec], now: datetime, holder: object
    ) -> tuple[list[Enqueued], list[tuple[int, EnqueueSpec]]]:
        """Q15: which specs create a row (with fresh ids) and which find their key held
        (by a live row, a window, or an earlier spec of the same call); no effect but
        the ids reserved, and none at all when :class:`KeyHeld` is raised."""
        new: list[int] = []  # positions of the specs that create a row
        same: dict[int, int] = {}  # position -> position of the new spec with its key
        found: dict[int, int] = {}  # position -> id of the job holding its key
        first: dict[UniqueKey, int] = {}
        for pos, spec in enumerate(specs):
            if spec.unique_key is None:
                new.append(pos)
                continue
            key = (spec.queue, spec.unique_key)
            if key in first:
                same[pos] = first[key]
                continue
            held = self._holder_of(key, now, holder)
            if held is not None:
                found[pos] = held
                continue
            first[key] = pos
            new.append(pos)
        new_ids = dict(zip(new, self.reserve_ids(len(new)), strict=True))
        results = [
            Enqueued(new_ids[pos])
            if pos in new_ids
            else Enqueued.existing(new_ids[same[pos]] if pos in same else found[pos])
            for pos in range(len(specs))
        ]
        return results, [(new_ids[pos], specs[pos]) for pos in new]

    def _take_key(self, job_id: int, spec: EnqueueSpec, now: datetime) -> None:
        """Q15: a keyed row is live: it holds its key, and opens its window."""
        assert spec.unique_key is not None
        key = (spec.queue, spec.unique_key)
        self._held.pop(key, None)
        self._keys[key] = job_id
        if spec.unique_for_s is not None:
            expires_at = now + timedelta(seconds=spec.unique_for_s)
            self._windows[key] = (expires_at, job_id)
            heapq.heappush(self._index(spec.queue).windows, (expires_at, spec.unique_key))

    def _drop_closed_windows(self, queue: str, index: _QueueIndex, now: datetime) -> None:
        """Q15: forget the windows of this queue that closed (they refuse nothing)."""
        windows = index.windows
        while windows and windows[0][0] <= now:
            expires_at, key = heapq.heappop(windows)
            window = self._windows.get((queue, key))
            if window is not None and window[0] == expires_at:
                del self._windows[(queue, key)]

    def _replace(self, job: Job, now: datetime) -> None:
        """Store the result of a transition: live again, or moved to the dead store (and
        counted: every dead-letter move comes through here)."""
        if job.state == "dead":
            self._drop_live(job.id)
            self._dead[job.id] = job
            self._counts(job.queue).dead_lettered += 1
            assert job.died_at is not None
            heapq.heappush(self._index(job.queue).dead, (job.died_at, job.id))
        else:
            self._set_live(job, now)

    def _promote_due(self, index: _QueueIndex, now: datetime) -> None:
        delayed = index.delayed
        while delayed and delayed[0][0] <= now:
            _, job_id, gen = heapq.heappop(delayed)
            if self._gen.get(job_id) == gen:
                heapq.heappush(index.ready, _ready_entry(self._live[job_id], gen))

    def _collect_lapsed(self, index: _QueueIndex, now: datetime) -> None:
        """Lapsed leases: the pre-claim sweep (Q3 step 1) or back to ``ready``."""
        leases = index.leases
        while leases and leases[0][0] < now:
            _, job_id, gen = heapq.heappop(leases)
            if self._gen.get(job_id) != gen:
                continue
            job = self._live[job_id]
            if t.needs_pre_claim_sweep(job, now):
                self._replace(t.dead(job, now, t.MAX_ATTEMPTS_EXCEEDED), now)
            else:
                heapq.heappush(index.ready, _ready_entry(job, gen))

    def _observe(self, now: datetime) -> None:
        """Note ``now``; if time ran backwards, rebuild the time-dependent heaps."""
        latest = self._latest_now
        if latest is None or now >= latest:
            self._latest_now = now
            return
        self._latest_now = now
        for index in self._queues.values():
            index.ready.clear()
            index.delayed.clear()
            index.leases.clear()
            index.cancelling.clear()
        for job in self._live.values():
            gen = self._gen[job.id]
            index = self._queues[job.queue]
            if job.state == "processing":
                assert job.claim_expires_at is not None
                index.leases.append((job.claim_expires_at, job.id, gen))
            elif job.state == "cancelling":
                assert job.claim_expires_at is not None
                index.cancelling.append((job.claim_expires_at, job.id, gen))
            else:
                index.delayed.append((job.run_at, job.id, gen))
        for index in self._queues.values():
            heapq.heapify(index.leases)
            heapq.heapify(index.cancelling)
            heapq.heapify(index.delayed)
