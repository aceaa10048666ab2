"""The reference model: the queue contract (Q1-Q10) written as naively as possible.

Why a second implementation: the pure core (``alkstore_trio._core``) is written to be
fast (heaps, generations, stale entries), and fast code hides bugs. This model is written
to be *obviously* correct instead: every row sits in one plain dict, and every operation
is a linear scan that reads like the contract's sentence. A claim sorts every row of the
queue by the contract's order and takes the first ``n``; a sweep looks at every row. It
shares nothing with the core but the record types (``Job``, ``QueueOpts``,
``SweepResult``), so a mistake in the core's transitions, claim order, backoff curve or
indexes shows up as a disagreement with the model.

The model is synchronous, reads no clock (``now``, a UTC datetime, is an argument of every
operation that depends on time) and validates nothing: it is fed only arguments the public
API already accepted. Claim tokens (Q19.8) are opaque: a caller checking an engine
passes the tokens the engine's claim handed out (``claim(..., tokens=)``), and the model
draws its own otherwise. It also mirrors two decisions of the public facade that an
engine cannot see (``docs/dev/decisions-foundation.md``): the backoff draw (decision 2: one
``rng.randint`` per ``retry`` without ``delay_s`` whose claim's ``attempts`` is below
``max_attempts``, made before the validity check) and transaction ids (decision 7).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from .._core import (
    DEFAULT_OPTS,
    Enqueued,
    Headers,
    Job,
    JobState,
    QueueLimits,
    QueueOpts,
    StoreStats,
    SweepResult,
)
from . import _model_cancel  # Q19.5
from ._model_backoff import _after, _Stamps, model_backoff_delay_s
from ._model_history import ModelHistory  # Q19.1-Q19.3
from ._model_limits import ModelLimits, live_by_key, live_leases  # Q18.7-Q18.11
from ._model_stats import queue_stats, reclaimable  # D22
from ._model_tx import ModelTransaction
from ._periodic_model import PeriodicModel  # Q17

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

__all__ = ["ModelTransaction", "ReferenceModel", "model_backoff_delay_s"]

#: The ``last_error`` texts the contract prescribes (Q3, Q4, Q9).
_MAX_ATTEMPTS_EXCEEDED = "max attempts exceeded"
_FAILED = "failed"
_EXPIRED = "expired"
#: The stamps of a row enqueued by queue name, without a handle (Q1).


class ReferenceModel:
    """A naive, obviously-correct oracle of the queue contract (Q1-Q10).

    Every row, live or dead, is one :class:`~alkstore_trio.Job` in a plain dict; every
    operation is a linear scan. Methods mirror the public API, with the queue name as first
    argument, claim tokens passed explicitly, and the time passed as ``now``. Arguments
    are not validated: feed the model only what the public API accepted.

    Args:
        rng: The random source of the backoff draw. Seed it like the store's
            (``open_store(..., rng=random.Random(seed))``) and the model draws the same
            delays in the same situations (decision 2). Default: ``random.Random(0)``.

    Example::

        model = ReferenceModel(rng=random.Random(7))
        job_id = model.enqueue("emails", b"hi", opts=QueueOpts(), now=t0)
        (job,) = model.claim("emails", "w1", 1, now=t0)
        assert model.ack("emails", job.id, job.claim_token, now=t0)
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = random.Random(0) if rng is None else rng
        self._rows: dict[int, Job] = {}
        #: Q19.2: the kept rows of acked jobs.
        self.kept = ModelHistory()
        self._stamps: dict[int, _Stamps] = {}
        self._next_id = 1
        #: Q19.8: the model's own tokens, and each claim's post-claim attempts (the draw).
        self._last_token = 0
        self._claim_attempts: dict[tuple[int, int], int] = {}
        #: D27: per queue, how many jobs left the live rows by each outcome.
        self._finished: dict[str, Counter[str]] = {}
        #: Q17: the periodic schedules' rows (``fire``/``list``: Q17.2-Q17.6).
        self.periodic = PeriodicModel()
        #: Q18: the paused queues, and the queues' limits (Q18.7-Q18.11).
        self._paused: set[str] = set()
        self.limits = ModelLimits()
        #: Q15: per (queue, key), the end of its window and the job that opened it.
        self._windows: dict[tuple[str, str], tuple[datetime, int]] = {}

    # -- reading -----------------------------------------------------------------------

    def get_job(self, queue: str, job_id: int) -> Job | None:
        """Q8: this queue's row with this id, live, dead or kept; ``None`` otherwise."""
        job = self.find_job(job_id)
        if job is None or job.queue != queue:
            return None
        return job

    def jobs(self) -> list[Job]:
        """Every row, live and dead, in id order."""
        return [self._rows[job_id] for job_id in sorted(self._rows)]

    def find_job(self, job_id: int) -> Job | None:
        """D26: the row with this id, live, dead or kept (Q19.2), of any queue."""
        return self._rows.get(job_id) or self.kept.rows.get(job_id)

    def list_jobs(
        self, queue: str, state: JobState, *, limit: int = 100, after_id: int | None = None
    ) -> list[Job]:
        """D26: this queue's rows in ``state`` with ids above ``after_id``, by id, the
        first ``limit``."""
        if state in ("completed", "cancelled"):
            return self.kept.listed(queue, state, after_id)[:limit]
        rows = [
            job
            for job in self.jobs()
            if job.queue == queue and job.state == state and (after_id is None or job.id > after_id)
        ]
        return rows[:limit]

    def stats(self, queue: str | None = None, *, now: datetime) -> StoreStats:
        """D22: per queue with rows or counted jobs (or ``queue`` alone, rows or not),
        counted one row at a time, with the queue's counters (D27); ``ids_issued`` is
        every id handed out (D23)."""
        if queue is None:
            names = {job.queue for job in self.jobs()} | set(self._finished) | self._paused
            names |= self.limits.limited_queues()
        else:
            names = {queue}
        entries = [
            queue_stats(
                name,
                [job for job in self.jobs() if job.queue == name],
                self._finished.get(name, Counter()),
                paused=name in self._paused,
                limits=self.limits.stats(name),
                now=now,
            )
            for name in sorted(names)
        ]
        return StoreStats(now=now, ids_issued=self._next_id - 1, queues=tuple(entries))

    def issued_ids(self) -> list[int]:
        """Every id handed out so far (enqueued or reserved by a transaction), in order."""
        return list(range(1, self._next_id))

    # -- Q2 enqueue --------------------------------------------------------------------

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
        now: datetime,
    ) -> Enqueued:
        """Q2: one new pending row stamped with ``opts``; returns its id (Q15: or the id
        of the job holding ``unique_key``, with ``created=False``).

        Args:
            queue: The queue name.
            payload: The job's bytes.
            opts: The stamps (the enqueuing handle's options); ``None`` = the defaults.
            priority: Larger runs first.
            delay_s: Run at ``now + delay_s`` (wins over ``run_at``).
            run_at: Run at this time.
            max_attempts: The per-job override of ``opts.max_attempts``.
            headers: The job's headers (D30); ``None`` for none.
            unique_key: The job's unique key (Q15); ``None`` for none.
            unique_for_s: The key's window (Q15.5), with a key.
            concurrency_key: The job's concurrency key (Q18.8); ``None`` for none.
            now: The operation's clock read.
        """
        (job_id,) = self.enqueue_many(
            queue,
            [payload],
            opts=opts,
            priority=priority,
            delay_s=delay_s,
            run_at=run_at,
            max_attempts=max_attempts,
            headers=headers,
            unique_keys=None if unique_key is None else [unique_key],
            unique_for_s=unique_for_s,
            concurrency_keys=None if concurrency_key is None else [concurrency_key],
            now=now,
        )
        return job_id

    def enqueue_many(
        self,
        queue: str,
        payloads: Sequence[bytes | bytearray | memoryview],
        *,
        opts: QueueOpts | None = None,
        priority: int = 0,
        delay_s: float | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        headers: Mapping[str, str] | None = None,
        unique_keys: Sequence[str | None] | None = None,
        unique_for_s: float | None = None,
        concurrency_keys: Sequence[str | None] | None = None,
        now: datetime,
    ) -> list[Enqueued]:
        """Q2: many rows with one ``now``, ids in payload order (``[]`` for none).

        Takes the same arguments as :meth:`enqueue`, applied to every payload, but one key
        per payload (``unique_keys``, Q15): a payload whose key is held (also by an
        earlier payload of the call) creates nothing and gets the holder's id; and one
        concurrency key per payload (``concurrency_keys``, Q18.8).
        """
        ids: list[Enqueued] = []
        keys = [None] * len(payloads) if unique_keys is None else unique_keys
        groups = [None] * len(payloads) if concurrency_keys is None else concurrency_keys
        for payload, key, group in zip(payloads, keys, groups, strict=True):
            held = None if key is None else self._key_holder(queue, key, now)
            if held is not None:
                ids.append(Enqueued.existing(held))
                continue
            job_id = self._reserve_id()
            self._insert(
                job_id,
                queue,
                bytes(payload),
                DEFAULT_OPTS if opts is None else opts,
                priority=priority,
                delay_s=delay_s,
                run_at=run_at,
                max_attempts=max_attempts,
                headers=headers,
                unique_key=key,
                unique_for_s=unique_for_s,
                concurrency_key=group,
                now=now,
            )
            ids.append(Enqueued(job_id))
        return ids

    # -- Q10 transactions --------------------------------------------------------------

    def transaction(self) -> ModelTransaction:
        """Q10: a transaction that reserves ids now and inserts rows at commit."""
        return ModelTransaction(self)

    # -- Q3 claim ----------------------------------------------------------------------

    def claim(
        self,
        queue: str,
        worker_id: str,
        n: int,
        *,
        now: datetime,
        tokens: Mapping[int, int] | None = None,
    ) -> list[Job]:
        """Q3: the pre-claim sweep, then up to ``n`` claims, best first.

        Args:
            tokens: Q19.8: the claim token of each job id (the engine's); a job not in
                it gets a token of the model's own.

        Returns:
            Snapshots of the claimed rows (post-claim ``attempts``), in claim order.
        """
        if n <= 0:
            return []
        # 1. Pre-claim sweep: lapsed claims with no attempts left go to dead.
        for job in self._live(queue):
            if reclaimable(job, now) and job.attempts >= job.max_attempts:
                self._kill(job, _MAX_ATTEMPTS_EXCEEDED, now)
        if queue in self._paused:
            return []  # Q18: a paused queue hands nothing out (the sweep ran).
        # 2. Pick: every claimable row, sorted by the contract's order, the first n.
        candidates = []
        for job in self._live(queue):
            if self._expired(job, now):
                continue
            ready = job.state == "pending" and job.run_at <= now
            reclaim = reclaimable(job, now) and job.attempts < job.max_attempts
            if ready or reclaim:
                candidates.append(job)
        candidates.sort(key=lambda job: (-job.priority, job.run_at, job.id))
        # Q18.8: each key's best jobs up to its free slots; then Q18.7/Q18.9: no more
        # than the limits allow.
        picked = self.limits.pick(queue, candidates, live_by_key(self._live(queue), now))
        live = len(live_leases(self._live(queue), now))
        take = self.limits.take(queue, live, n, len(picked), now, len(picked) < len(candidates))
        # 3. Claim them.
        out = []
        for job in picked[:take]:
            token = None if tokens is None else tokens.get(job.id)
            if token is None:
                self._last_token += 1
                token = self._last_token
            self._claim_attempts[(job.id, token)] = job.attempts + 1
            claimed = replace(
                job,
                state="processing",
                attempts=job.attempts + 1,
                claim_token=token,
                claimed_by=worker_id,
                claimed_at=now,
                claim_expires_at=_after(now, job.visibility_timeout_s),
            )
            self._rows[job.id] = claimed
            out.append(claimed)
        # Q19.7: a claim reads no progress (the row keeps it; get_job shows it).
        return [replace(job, progress=None) for job in out]

    # Q18: queue controls.
    def set_limits(self, queue: str, limits: QueueLimits, *, refill: bool, now: datetime) -> None:
        """Q18.11: the queue's limits from now on (``refill``: the bucket starts full)."""
        self.limits.update(queue, limits, refill, now)

    def set_paused(self, queue: str, paused: bool) -> None:
        """Q18: pause (no claim hands out the queue's jobs) or resume the queue."""
        if paused:
            self._paused.add(queue)
        else:
            self._paused.discard(queue)

    # -- Q4 handle operations ----------------------------------------------------------

    def heartbeat(
        self,
        queue: str,
        job_id: int,
        token: int,
        extend_s: float | None = None,
        *,
        now: datetime,
        progress: str | None = None,
    ) -> bool:
        """Q4 heartbeat: ``claim_expires_at = now + (extend_s or visibility_timeout_s)``;
        Q19.7: a ``progress`` text (``None``: no news) becomes the job's."""
        job = self._valid(queue, job_id, token, now)
        if job is None:
            return False
        extend = job.visibility_timeout_s if extend_s is None else extend_s
        news = job.progress if progress is None else progress
        self._rows[job_id] = replace(job, claim_expires_at=_after(now, extend), progress=news)
        return True

    def ack(
        self, queue: str, job_id: int, token: int, *, now: datetime, result: bytes | None = None
    ) -> bool:
        """Q4 ack: delete the validly claimed row; Q19.2: keep it (with its result) when
        its stamp says so."""
        job = self._valid(queue, job_id, token, now)
        if job is None:
            return False
        del self._rows[job_id]
        self.kept.finish(job, result, now)
        self._count(queue, "acked")
        return True

    def ack_claims(
        self,
        queue: str,
        claims: Iterable[tuple[int, int]],
        *,
        now: datetime,
        results: Sequence[bytes | None] | None = None,
    ) -> list[int]:
        """Q13 (D18): ack each (job id, claim token) in turn, as :meth:`ack` would, all at
        one ``now``, with its result (Q19.1); returns the ids finished."""
        pairs = list(claims)
        given = [None] * len(pairs) if results is None else results
        return [
            job_id
            for (job_id, token), result in zip(pairs, given, strict=True)
            if self.ack(queue, job_id, token, now=now, result=result)
        ]

    def ack_claims_and_claim(
        self,
        queue: str,
        claims: Iterable[tuple[int, int]],
        worker_id: str,
        n: int,
        *,
        now: datetime,
        results: Sequence[bytes | None] | None = None,
        tokens: Mapping[int, int] | None = None,
    ) -> tuple[list[int], list[Job]]:
        """Q13 (D21): :meth:`ack_claims`, then :meth:`claim`, both at one ``now``; returns
        the ids finished and the claimed snapshots (none when ``n <= 0``)."""
        acked = self.ack_claims(queue, claims, now=now, results=results)
        return acked, self.claim(queue, worker_id, n, now=now, tokens=tokens)

    def heartbeat_claims(
        self,
        queue: str,
        claims: Iterable[tuple[int, int]],
        extend_s: float | None = None,
        *,
        now: datetime,
    ) -> list[int]:
        """Q13 (D19): heartbeat each (job id, claim token) in turn, as :meth:`heartbeat`
        would, all at one ``now``; returns the ids renewed."""
        return [
            job_id
            for job_id, token in claims
            if self.heartbeat(queue, job_id, token, extend_s, now=now)
        ]

    def retry(
        self,
        queue: str,
        job_id: int,
        token: int,
        error: str | None = None,
        delay_s: float | None = None,
        *,
        now: datetime,
    ) -> bool:
        """Q4 retry: dead at budget, else pending again after the delay.

        Like ``JobHandle.retry`` (decision 2), the backoff delay is drawn from
        :attr:`rng` before the validity check, whenever ``delay_s`` is ``None`` and the
        claim's ``attempts`` is below the job's ``max_attempts``.
        """
        stamps = self._stamps.get(job_id)
        attempt = self._claim_attempts.get((job_id, token), 0)  # 0: not a claim's token
        delay = delay_s
        if delay is None and stamps is not None and 0 < attempt < stamps.max_attempts:
            delay = model_backoff_delay_s(stamps.backoff_base_s, attempt, self.rng)
        job = self._valid(queue, job_id, token, now)
        if job is None:
            return False
        if job.attempts >= job.max_attempts:
            self._kill(job, _MAX_ATTEMPTS_EXCEEDED if error is None else error, now)
            return True
        assert delay is not None
        self._rows[job_id] = replace(
            job,
            state="pending",
            run_at=_after(now, delay),
            last_error=error,
            claimed_by=None,
            claimed_at=None,
            claim_expires_at=None,
            claim_token=None,
        )
        return True

    def release(
        self, queue: str, job_id: int, token: int, error: str | None = None, *, now: datetime
    ) -> bool:
        """Q19.8 release: pending again, ready now, the attempt given back, ``last_error =
        error``, claim fields and token cleared."""
        job = self._valid(queue, job_id, token, now)
        if job is None:
            return False
        self._rows[job_id] = replace(
            job,
            state="pending",
            attempts=job.attempts - 1,
            run_at=now,
            last_error=error,
            claimed_by=None,
            claimed_at=None,
            claim_expires_at=None,
            claim_token=None,
        )
        return True

    def fail(
        self, queue: str, job_id: int, token: int, error: str | None = None, *, now: datetime
    ) -> bool:
        """Q4 fail: dead now, ``last_error = error`` or ``"failed"``."""
        job = self._valid(queue, job_id, token, now)
        if job is None:
            return False
        self._kill(job, _FAILED if error is None else error, now)
        return True

    def retry_claims(
        self,
        queue: str,
        items: Iterable[tuple[int, int, str | None, float | None]],
        *,
        now: datetime,
    ) -> list[bool]:
        """Q13 (D20): retry each (job id, claim token, error, delay_s) in turn, as
        :meth:`retry` would (backoff draws included, in item order), all at one ``now``;
        one bool per item. A job listed twice is retried by its first valid item only:
        by the time the later ones come, its claim is finished."""
        return [
            self.retry(queue, job_id, token, error, delay_s, now=now)
            for job_id, token, error, delay_s in items
        ]

    def fail_claims(
        self, queue: str, items: Iterable[tuple[int, int, str | None]], *, now: datetime
    ) -> list[bool]:
        """Q13 (D20): fail each (job id, claim token, error) in turn, as :meth:`fail` would,
        all at one ``now``; one bool per item."""
        return [self.fail(queue, job_id, token, error, now=now) for job_id, token, error in items]

    # -- Q6, Q7, Q9 --------------------------------------------------------------------

    def ack_batch(self, queue: str, ids: Iterable[int], *, now: datetime) -> int:
        """Q6: delete each distinct id of this queue that is processing within its
        deadline, whoever holds it; returns how many were deleted."""
        count = 0
        for job_id in dict.fromkeys(ids):
            job = self._rows.get(job_id)
            if (
                job is not None
                and job.queue == queue
                and job.state == "processing"
                and job.claim_expires_at is not None
                and now <= job.claim_expires_at
            ):
                del self._rows[job_id]
                self.kept.finish(job, None, now)
                self._count(queue, "acked")
                count += 1
        return count

    def cancel(self, queue: str, job_id: int, *, now: datetime) -> bool:
        """Q19.5: cancel this queue's live row (:mod:`._model_cancel`)."""
        return _model_cancel.cancel(self, queue, job_id, now)

    def settle_cancelled(
        self, queue: str, claims: Iterable[tuple[int, int]], *, now: datetime
    ) -> list[int]:
        """Q19.5: the holders finalize their cancelling claims; the ids finalized."""
        return _model_cancel.settle(self, queue, claims, now)

    def cancelling_among(self, queue: str, job_ids: Iterable[int]) -> list[int]:
        """Q19.5: which of these ids are cancelling rows of this queue."""
        return _model_cancel.among(self, queue, job_ids)

    def sweep_expired(self, queue: str, retention_s: float | None, *, now: datetime) -> SweepResult:
        """Q19.5: lapsed cancelling rows are finalized; Q9: expired live rows (never a
        cancelling one) go to dead, then dead rows past ``retention_s`` are deleted."""
        cancelled = _model_cancel.sweep(self, queue, now)
        expired = 0
        for job in self._live(queue):
            if self._expired(job, now) and job.state != "cancelling":
                self._kill(job, _EXPIRED, now)
                expired += 1
        purged = 0
        if retention_s is not None:
            for job in list(self._rows.values()):
                if (
                    job.queue == queue
                    and job.state == "dead"
                    and job.died_at is not None
                    and _after(job.died_at, retention_s) < now
                ):
                    del self._rows[job.id]
                    purged += 1
        return SweepResult(expired, purged, self.kept.purge(queue, now), cancelled)

    # -- D24, D25: the operator's redrive and purge -------------------------------------

    def requeue_dead(self, queue: str, ids: Iterable[int] | None, *, now: datetime) -> int:
        """D24: each dead row of this queue among ``ids`` (every one for ``None``) is
        pending again, ready now, with 0 attempts, enqueued now, its time to live
        restarted, its claim fields and ``died_at`` cleared and ``last_error`` kept;
        returns how many. Q15.4: in id order, skipping rows whose key a live row holds."""
        wanted = None if ids is None else set(ids)
        count = 0
        for job in self.jobs():
            if job.queue != queue or job.state != "dead":
                continue
            if wanted is not None and job.id not in wanted:
                continue
            if job.unique_key is not None and self._live_holder(queue, job.unique_key):
                continue  # Q15.4: a live job holds its key (maybe one moved just now)
            ttl = None if job.expires_at is None else job.expires_at - job.enqueued_at
            self._rows[job.id] = replace(
                job,
                state="pending",
                attempts=0,
                run_at=now,
                enqueued_at=now,
                expires_at=None if ttl is None else now + ttl,
                claimed_by=None,
                claimed_at=None,
                claim_expires_at=None,
                claim_token=None,
                died_at=None,
                progress=None,  # Q19.7: a redriven job reports anew
            )
            count += 1
        return count

    def purge_dead(
        self,
        queue: str,
        older_than_s: float | None,
        *,
        dry_run: bool = False,
        ids: Iterable[int] | None = None,
        now: datetime,
    ) -> int:
        """D25: delete this queue's dead rows with ``died_at + older_than_s < now`` (every
        one for ``None``); returns how many. D29: with ``dry_run``, only count them.
        D25.1: with ``ids``, only the dead rows among them."""
        wanted = None if ids is None else set(ids)
        doomed = [
            job.id
            for job in self.jobs()
            if job.queue == queue
            and job.state == "dead"
            and job.died_at is not None
            and (wanted is None or job.id in wanted)
            and (older_than_s is None or _after(job.died_at, older_than_s) < now)
        ]
        if not dry_run:
            for job_id in doomed:
                del self._rows[job_id]
        return len(doomed)

    # -- Q16: rescheduling and the next due time ------------------------------------------

    def reschedule(
        self,
        queue: str,
        job_id: int,
        *,
        delay_s: float | None,
        run_at: datetime | None,
        priority: int | None,
        now: datetime,
    ) -> bool:
        """Q16: a pending row of this queue gets ``run_at`` = now + delay (a negative delay
        is now), or ``run_at`` as given, or keeps it; and the priority, or keeps it."""
        job = self._rows.get(job_id)
        if job is None or job.queue != queue or job.state != "pending":
            return False
        new_run_at = job.run_at
        if delay_s is not None:
            new_run_at = _after(now, max(delay_s, 0.0))
        elif run_at is not None:
            new_run_at = run_at.astimezone(UTC)
        new_priority = job.priority if priority is None else priority
        self._rows[job_id] = replace(job, run_at=new_run_at, priority=new_priority)
        return True

    def next_due_in_s(self, queue: str, *, now: datetime) -> float | None:
        """Q16: seconds until the earliest ``run_at`` after now of this queue's pending
        rows, or ``None``."""
        later = [
            job.run_at
            for job in self._rows.values()
            if job.queue == queue and job.state == "pending" and job.run_at > now
        ]
        due = (min(later) - now).total_seconds() if later else None
        ready = [
            job
            for job in self._live(queue)
            if job.state == "pending" and job.run_at <= now and not self._expired(job, now)
        ]
        leases = live_leases(self._live(queue), now)
        earliest = (min(leases) - now).total_seconds() if leases else None
        # Q18.9: ready jobs held back by a limit are due when it lets one out (Q18.8:
        # when every ready job's key is full, its keys' earliest lease lapse).
        by_key = live_by_key(self._live(queue), now)
        key_s = self.limits.key_wait_s(queue, [job.concurrency_key for job in ready], by_key, now)
        wait = self.limits.wait_s(queue, len(leases), earliest, now, key_s) if ready else None
        return due if wait is None else wait if due is None else min(due, wait)

    # -- internals ---------------------------------------------------------------------

    def _live_holder(self, queue: str, key: str) -> int | None:
        """Q15: the live row of ``queue`` with this key, if any."""
        for job in self._live(queue):
            if job.unique_key == key:
                return job.id
        return None

    def _key_holder(self, queue: str, key: str, now: datetime) -> int | None:
        """Q15: who holds the key at ``now``: its live row, else an open window's job."""
        live = self._live_holder(queue, key)
        if live is not None:
            return live
        window = self._windows.get((queue, key))
        return window[1] if window is not None and now < window[0] else None

    def _reserve_id(self) -> int:
        job_id = self._next_id
        self._next_id += 1
        return job_id

    def _insert(
        self,
        job_id: int,
        queue: str,
        payload: bytes,
        opts: QueueOpts,
        *,
        priority: int,
        delay_s: float | None,
        run_at: datetime | None,
        max_attempts: int | None,
        headers: Mapping[str, str] | None,
        now: datetime,
        unique_key: str | None = None,
        unique_for_s: float | None = None,
        concurrency_key: str | None = None,
    ) -> None:
        if unique_key is not None and unique_for_s is not None:
            self._windows[(queue, unique_key)] = (_after(now, unique_for_s), job_id)
        if delay_s is not None:
            resolved_run_at = _after(now, max(delay_s, 0))  # Q2.1: a negative delay is now
        elif run_at is not None:
            resolved_run_at = run_at.astimezone(UTC)  # Q8: every timestamp reads back in UTC
        else:
            resolved_run_at = now
        resolved_max = opts.max_attempts if max_attempts is None else max_attempts
        self._stamps[job_id] = _Stamps(queue, resolved_max, float(opts.backoff_base_s))
        self._rows[job_id] = Job(
            id=job_id,
            queue=queue,
            payload=payload,
            priority=priority,
            state="pending",
            attempts=0,
            max_attempts=resolved_max,
            run_at=resolved_run_at,
            enqueued_at=now,
            visibility_timeout_s=float(opts.visibility_timeout_s),
            backoff_base_s=float(opts.backoff_base_s),
            expires_at=None if opts.expires_in_s is None else _after(now, opts.expires_in_s),
            claimed_by=None,
            claimed_at=None,
            claim_expires_at=None,
            last_error=None,
            died_at=None,
            headers=Headers(headers or {}),
            unique_key=unique_key,
            concurrency_key=concurrency_key,
            keep_completed_s=opts.keep_completed_s,
        )

    def _live(self, queue: str) -> list[Job]:
        return [job for job in self.jobs() if job.queue == queue and job.state != "dead"]

    @staticmethod
    def _expired(job: Job, now: datetime) -> bool:
        return job.expires_at is not None and now > job.expires_at

    def _valid(self, queue: str, job_id: int, token: int, now: datetime) -> Job | None:
        """The validity predicate V, or ``None`` when it does not hold."""
        job = self._rows.get(job_id)
        if (
            job is None
            or job.queue != queue
            or job.state != "processing"
            or job.claim_token != token
            or job.claim_expires_at is None
            or now > job.claim_expires_at
        ):
            return None
        return job

    def _kill(self, job: Job, error: str, now: datetime) -> None:
        """A dead-letter move; the claim fields are kept (decision 1). Counted (D27)."""
        self._rows[job.id] = replace(job, state="dead", last_error=error, died_at=now)
        self._count(job.queue, "dead_lettered")

    def _count(self, queue: str, outcome: str) -> None:
        """D27: one more job of ``queue`` left the live rows with this outcome."""
        self._finished.setdefault(queue, Counter())[outcome] += 1
