"""Every state transition of the contract (Q2-Q9) for one row, as a pure function of
(row, now, inputs).

Nothing here reads a clock, draws randomness on its own or does I/O: ``now`` and the
random source are arguments. The in-memory engine applies these functions to its table;
the PostgreSQL engine states the same rules in SQL, and the conformance suite checks both
against an independent reference model.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final

from ._records import EnqueueSpec, Job

if TYPE_CHECKING:
    import random

#: ``last_error`` of a row dead-lettered because its attempts ran out (Q3, Q4).
MAX_ATTEMPTS_EXCEEDED: Final = "max attempts exceeded"
#: ``last_error`` of a row failed without an error text (Q4).
FAILED: Final = "failed"
#: ``last_error`` of a row dead-lettered by the expiry sweep (Q9).
EXPIRED: Final = "expired"
#: Q19.3: the most kept rows one purge step deletes (PostgreSQL: one statement, about
#: 70-90 ms); a sweep repeats the step while a batch comes back full, for at most
#: PURGE_BUDGET_S seconds per queue and call (the next sweep goes on).
PURGE_BATCH: Final = 5000
PURGE_BUDGET_S: Final = 1.0
#: Largest backoff delay, in seconds (Q5).
BACKOFF_CAP_S: Final = 3600
_BACKOFF_MAX_EXPONENT: Final = 30


def backoff_delay_s(base_s: float, attempt: int, rng: random.Random) -> int:
    """Q5, equal jitter: the retry delay after claim number ``attempt`` (>= 1).

    ``cap = min(base_s * 2**min(attempt - 1, 30), 3600)`` and the delay is
    ``rng.randint(ceil(cap / 2), floor(cap))``: half the exponential curve is kept, half is
    jitter, so retries of many jobs that failed together spread out instead of stampeding.
    Exactly one ``randint`` call is made, so a seeded ``rng`` gives reproducible delays.
    When the interval holds no integer (a cap below 1 second), the delay is its lower end.
    """
    exponent = min(max(attempt, 1) - 1, _BACKOFF_MAX_EXPONENT)
    cap = min(base_s * 2**exponent, BACKOFF_CAP_S)
    # A positive cap halves to at least 1 s, even when cap / 2 underflows to 0.0 (a
    # subnormal base such as 5e-324).
    low = max(math.ceil(cap / 2), 1) if cap > 0 else 0
    high = max(low, math.floor(cap))
    return rng.randint(low, high)


def enqueued_job(spec: EnqueueSpec, job_id: int, now: datetime) -> Job:
    """Q2: the new pending row for ``spec``, resolved with one clock read ``now``.

    ``run_at`` is ``now + delay_s`` when a delay is given (it wins over ``run_at``; a
    negative delay makes the job ready now, Q2.1: ``run_at = now``), else ``run_at`` as
    given, else ``now``. ``expires_at`` is relative to the enqueue time.
    """
    if spec.delay_s is not None:
        # Q2.1: a negative delay means now (never a backdated row).
        run_at = now + timedelta(seconds=spec.delay_s) if spec.delay_s > 0 else now
    elif spec.run_at is not None:
        run_at = spec.run_at
    else:
        run_at = now
    expires_at = None if spec.expires_in_s is None else now + timedelta(seconds=spec.expires_in_s)
    return Job(
        id=job_id,
        queue=spec.queue,
        payload=spec.payload,
        priority=spec.priority,
        state="pending",
        attempts=0,
        max_attempts=spec.max_attempts,
        run_at=run_at,
        enqueued_at=now,
        visibility_timeout_s=spec.visibility_timeout_s,
        backoff_base_s=spec.backoff_base_s,
        expires_at=expires_at,
        claimed_by=None,
        claimed_at=None,
        claim_expires_at=None,
        last_error=None,
        died_at=None,
        headers=spec.headers,
        unique_key=spec.unique_key,
        concurrency_key=spec.concurrency_key,
        keep_completed_s=spec.keep_completed_s,
    )


def is_expired(job: Job, now: datetime) -> bool:
    """``expires_at`` is set and has passed."""
    return job.expires_at is not None and now > job.expires_at


def is_reclaimable(job: Job, now: datetime) -> bool:
    """A processing row whose deadline has passed (strictly: at the deadline the claim is
    still valid)."""
    return (
        job.state == "processing"
        and job.claim_expires_at is not None
        and now > job.claim_expires_at
    )


def is_valid_claim(job: Job, token: int, now: datetime) -> bool:
    """The validity predicate V: processing, the claim token matches (Q19.8: the claim's
    own token, not its attempt count), deadline not passed."""
    return (
        job.state == "processing"
        and job.claim_token == token
        and job.claim_expires_at is not None
        and now <= job.claim_expires_at
    )


def is_claimable(job: Job, now: datetime) -> bool:
    """Q3 step 2: ready pending, or reclaimable with attempts left; never expired."""
    if is_expired(job, now):
        return False
    if job.state == "pending":
        return job.run_at <= now
    return is_reclaimable(job, now) and job.attempts < job.max_attempts


def needs_pre_claim_sweep(job: Job, now: datetime) -> bool:
    """Q3 step 1: reclaimable with no attempts left; the next claim dead-letters it."""
    return is_reclaimable(job, now) and job.attempts >= job.max_attempts


def is_ackable(job: Job, now: datetime) -> bool:
    """Q6: processing and not past its deadline (no token check)."""
    return (
        job.state == "processing"
        and job.claim_expires_at is not None
        and now <= job.claim_expires_at
    )


#: Q3's claim order, best first, as (job field, direction): the one statement of the
#: rule. :func:`claim_order_key` is its sort key, and the PostgreSQL engine renders it
#: into the ORDER BY of its claim statements (the ``claim_order`` fragment).
CLAIM_ORDER: Final = (("priority", "DESC"), ("run_at", "ASC"), ("id", "ASC"))


def claim_order_key(job: Job) -> tuple[int, datetime, int]:
    """:data:`CLAIM_ORDER` as an ascending sort key: priority DESC, run_at ASC, id ASC."""
    return (-job.priority, job.run_at, job.id)


def claimed(job: Job, worker_id: str, now: datetime, token: int) -> Job:
    """Q3 step 3: the row after a claim (a reclaim consumes an attempt too), holding the
    fresh claim ``token`` (Q19.8: the engine draws it)."""
    return replace(
        job,
        state="processing",
        attempts=job.attempts + 1,
        claim_token=token,
        claimed_by=worker_id,
        claimed_at=now,
        claim_expires_at=now + timedelta(seconds=job.visibility_timeout_s),
    )


def as_claimed(jobs: list[Job]) -> list[Job]:
    """Q19.7: the jobs a claim hands out, as the claim shows them: without progress (a
    claim reads no progress: ``get_job`` shows it). The rows keep theirs; nothing is
    copied when no job has any (the usual case)."""
    if all(job.progress is None for job in jobs):
        return jobs
    return [job if job.progress is None else replace(job, progress=None) for job in jobs]


def heartbeaten(
    job: Job, now: datetime, extend_s: float | None, progress: str | None = None
) -> Job:
    """Q4: an absolute reset of the deadline; ``claimed_at`` and ``attempts`` unchanged.
    Q19.7: a ``progress`` text (``None``: no news) replaces the job's."""
    extend = job.visibility_timeout_s if extend_s is None else extend_s
    expires = now + timedelta(seconds=extend)
    if progress is None:
        return replace(job, claim_expires_at=expires)
    return replace(job, claim_expires_at=expires, progress=progress)


def dead(job: Job, now: datetime, error: str) -> Job:
    """A dead-letter move: the row as the dead store keeps it. Claim fields are kept, so
    an operator can see who held the job last."""
    return replace(job, state="dead", last_error=error, died_at=now)


def retried(job: Job, now: datetime, error: str | None, delay_s: float | None) -> Job:
    """Q4 retry: dead at budget, else pending again after ``delay_s``.

    The caller resolves the delay (an explicit one, or :func:`backoff_delay_s`) before the
    transition, because the random draw belongs to the caller; at budget it is ignored.
    """
    if job.attempts >= job.max_attempts:
        return dead(job, now, MAX_ATTEMPTS_EXCEEDED if error is None else error)
    if delay_s is None:
        raise ValueError("retried() below budget needs a resolved delay")
    return replace(
        job,
        state="pending",
        run_at=now + timedelta(seconds=delay_s),
        last_error=error,
        claimed_by=None,
        claimed_at=None,
        claim_expires_at=None,
        claim_token=None,
    )


def released(job: Job, now: datetime, error: str | None) -> Job:
    """Q19.8 release: pending again, ready now, the attempt given back (``attempts - 1``),
    ``last_error = error``, the claim fields and token cleared."""
    return replace(
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


def failed(job: Job, now: datetime, error: str | None) -> Job:
    """Q4 fail: dead now."""
    return dead(job, now, FAILED if error is None else error)


def requeued(job: Job, now: datetime) -> Job:
    """D24, a redrive: a dead row pending again, ready now, with its attempts reset.

    It is enqueued anew, keeping its id, payload, priority and stamps: ``enqueued_at``
    becomes ``now`` and an ``expires_at`` keeps its distance from it (the row gets its
    whole time to live again, else a row that died of expiry would expire at once).
    ``last_error`` is kept (why it died, until a new attempt overwrites it); the claim
    fields, the claim token (Q19.8: no old holder's token is valid again) and
    ``died_at`` are cleared, and so is the progress (Q19.7: a new run reports its own).
    """
    expires_at = None if job.expires_at is None else now + (job.expires_at - job.enqueued_at)
    return replace(
        job,
        state="pending",
        attempts=0,
        run_at=now,
        enqueued_at=now,
        expires_at=expires_at,
        claimed_by=None,
        claimed_at=None,
        claim_expires_at=None,
        claim_token=None,
        died_at=None,
        progress=None,
    )


def is_dead_older_than(job: Job, now: datetime, older_than_s: float | None) -> bool:
    """D25, ``purge_dead``: a dead row that died more than ``older_than_s`` ago
    (``died_at + older_than_s < now``, as Q9's retention), or any dead row for ``None``."""
    if job.state != "dead" or job.died_at is None:
        return False
    return older_than_s is None or job.died_at + timedelta(seconds=older_than_s) < now


def is_purgeable(job: Job, now: datetime, retention_s: float | None) -> bool:
    """Q9: a dead row whose retention ran out (``None`` keeps it forever): the sweep's
    side of :func:`is_dead_older_than`."""
    return retention_s is not None and is_dead_older_than(job, now, retention_s)


# --- Q19.5: two-phase cancel -----------------------------------------------------------


def cancel_step(job: Job, now: datetime) -> str:
    """Q19.5: what ``cancel`` does to a live row at ``now``: ``"finalize"`` (a pending
    row, or a processing or cancelling one whose lease lapsed: nobody holds it, so it is
    recorded cancelled at once) or ``"mark"`` (a processing or cancelling row under a
    live lease: it becomes cancelling, and its holder is told)."""
    if job.state == "pending" or is_cancel_lapsed(job, now):
        return "finalize"
    return "mark"


def is_cancel_lapsed(job: Job, now: datetime) -> bool:
    """Q19.5: a processing or cancelling row whose lease lapsed (``now >
    claim_expires_at``): a cancel, or the sweep for a cancelling row, finalizes it."""
    return (
        job.state in ("processing", "cancelling")
        and job.claim_expires_at is not None
        and now > job.claim_expires_at
    )


def cancelling(job: Job) -> Job:
    """Q19.5: a processing row after ``cancel``: live, out of every claim path, its claim
    fields kept so its holder can settle it (and the sweep can see its lease lapse)."""
    return replace(job, state="cancelling")


def is_settleable(job: Job, token: int) -> bool:
    """Q19.5: ``settle_cancelled``'s predicate: the row is cancelling and was claimed
    with this token (no lease check: the holder may settle late)."""
    return job.state == "cancelling" and job.claim_token == token


def completed(job: Job, now: datetime, result: bytes | None) -> Job:
    """Q19.2: a kept job after its ack, as history keeps it: every field as the claim
    left it (claim fields included, as for dead rows), ``completed_at = now`` and the
    handler's ``result`` (Q19.1)."""
    return replace(job, state="completed", completed_at=now, result=result)


def kept_cancelled(job: Job, now: datetime) -> Job:
    """Q19.5 with Q19.2: a kept job recorded cancelled, as history keeps it: every field as
    it was (a cancelling row's claim fields included), ``completed_at = now`` (when it
    was recorded cancelled) and no result."""
    return replace(job, state="cancelled", completed_at=now, result=None)


def purge_at(job: Job) -> datetime:
    """Q19.3: when a kept row may be purged: after ``completed_at + keep_completed_s``."""
    assert job.completed_at is not None
    assert job.keep_completed_s is not None
    return job.completed_at + timedelta(seconds=job.keep_completed_s)


def is_completed_purgeable(job: Job, now: datetime) -> bool:
    """Q19.3: a kept row (completed, or cancelled: Q19.5) whose time ran out
    (``completed_at + keep_completed_s < now``, strictly, as Q9's retention)."""
    return job.state in ("completed", "cancelled") and purge_at(job) < now
