"""Every pure transition of ``_core/_transitions.py`` (Q2-Q9), as functions of
(row, now, inputs). Sync tests, no event loop, no clock reads."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta, timezone

import pytest

from alkstore_trio._core import (
    CLAIM_ORDER,
    EXPIRED,
    FAILED,
    MAX_ATTEMPTS_EXCEEDED,
    EnqueueSpec,
    Job,
    QueueOpts,
    claim_order_key,
    dead,
    enqueue_specs,
    enqueued_job,
    failed,
    heartbeaten,
    is_ackable,
    is_claimable,
    is_expired,
    is_purgeable,
    is_reclaimable,
    is_valid_claim,
    needs_pre_claim_sweep,
    released,
    requeued,
    retried,
)
from alkstore_trio._core import claimed as claimed_with

T0 = datetime(2000, 1, 1, tzinfo=UTC)
ONE_US = timedelta(microseconds=1)


def s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def spec(
    *,
    queue: str = "q",
    payload: bytes = b"p",
    priority: int = 0,
    delay_s: float | None = None,
    run_at: datetime | None = None,
    max_attempts: int = 3,
    visibility_timeout_s: float = 30.0,
    backoff_base_s: float = 5.0,
    expires_in_s: float | None = None,
) -> EnqueueSpec:
    return EnqueueSpec(
        queue=queue,
        payload=payload,
        priority=priority,
        delay_s=delay_s,
        run_at=run_at,
        max_attempts=max_attempts,
        visibility_timeout_s=visibility_timeout_s,
        backoff_base_s=backoff_base_s,
        expires_in_s=expires_in_s,
    )


def pending(job_id: int = 1, now: datetime = T0, **kwargs: object) -> Job:
    return enqueued_job(spec(**kwargs), job_id, now)  # type: ignore[arg-type]


def claimed(job: Job, worker: str, now: datetime, token: int | None = None) -> Job:
    """A claim whose token is its attempt number unless given (Q19.8: the engines draw
    tokens; these rules only need them to differ between claims)."""
    return claimed_with(job, worker, now, job.attempts + 1 if token is None else token)


def processing(claim_at: datetime = T0, worker: str = "w", **kwargs: object) -> Job:
    return claimed(pending(**kwargs), worker, claim_at)


# -- Q2 enqueued_job -----------------------------------------------------------------------


def test_q2_enqueued_job_is_a_fresh_pending_row():
    job = enqueued_job(spec(payload=b"\x00data", priority=7, max_attempts=4), 42, T0)
    assert job.id == 42
    assert job.queue == "q"
    assert job.payload == b"\x00data"
    assert job.priority == 7
    assert job.state == "pending"
    assert job.attempts == 0
    assert job.max_attempts == 4
    assert job.run_at == T0
    assert job.enqueued_at == T0
    assert job.visibility_timeout_s == 30.0
    assert job.backoff_base_s == 5.0
    assert job.expires_at is None
    assert job.claimed_by is None
    assert job.claimed_at is None
    assert job.claim_expires_at is None
    assert job.last_error is None
    assert job.died_at is None


def test_q2_neither_delay_nor_run_at_means_now():
    assert pending(now=T0 + s(9)).run_at == T0 + s(9)


def test_q2_delay_is_relative_to_now():
    assert pending(delay_s=90).run_at == T0 + s(90)
    assert pending(delay_s=0).run_at == T0
    assert pending(delay_s=0.25).run_at == T0 + timedelta(milliseconds=250)


def test_q2_delay_wins_over_run_at():
    job = pending(delay_s=10, run_at=T0 + s(1000))
    assert job.run_at == T0 + s(10)
    job = pending(delay_s=-5, run_at=T0 + s(1000))
    assert job.run_at == T0


def test_q2_1_negative_delay_means_now():
    job = pending(delay_s=-30)
    assert job.run_at == T0
    assert is_claimable(job, T0)


def test_q2_run_at_is_taken_as_given():
    future = T0 + s(3600)
    past = T0 - s(3600)
    assert pending(run_at=future).run_at == future
    assert pending(run_at=past).run_at == past
    assert not is_claimable(pending(run_at=future), T0)
    assert is_claimable(pending(run_at=past), T0)


def test_q2_expires_at_is_relative_to_enqueue_time_not_run_at():
    job = pending(now=T0 + s(5), delay_s=100, expires_in_s=60)
    assert job.expires_at == T0 + s(65)
    assert job.run_at == T0 + s(105)
    assert pending(expires_in_s=None).expires_at is None


def test_q2_microsecond_resolution():
    assert pending(delay_s=1e-6).run_at == T0 + ONE_US
    assert pending(expires_in_s=1.5e-6).expires_at is not None


def test_q8_enqueued_job_timestamps_are_utc_even_for_a_non_utc_run_at():
    """Q8: timestamps are timezone-aware UTC datetimes. A ``run_at`` given in another
    zone (accepted by validation) must be stored as the same instant in UTC."""
    plus2 = timezone(timedelta(hours=2))
    local = datetime(2030, 6, 1, 14, 0, tzinfo=plus2)
    (checked,) = enqueue_specs(
        "q",
        QueueOpts(),
        [b"x"],
        max_payload_bytes=10,
        priority=0,
        delay_s=None,
        run_at=local,
        max_attempts=None,
    )
    job = enqueued_job(checked, 1, T0)
    assert job.run_at == local  # the same instant
    assert job.run_at.utcoffset() == timedelta(0)
    assert job.run_at.tzinfo == UTC


def test_q8_job_repr_hides_the_payload():
    assert "TOPSECRET" not in repr(pending(payload=b"TOPSECRET"))


def test_q8_job_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        pending().attempts = 5  # type: ignore[misc]


# -- Q3 claimed, ordering, claimability -----------------------------------------------------


def test_q3_claimed_sets_the_claim_fields():
    job = pending(visibility_timeout_s=45)
    now = T0 + s(10)
    after = claimed(job, "worker-7", now)
    assert after.state == "processing"
    assert after.attempts == 1
    assert after.claimed_by == "worker-7"
    assert after.claimed_at == now
    assert after.claim_expires_at == now + s(45)
    # Everything else is untouched.
    assert (
        dataclasses.replace(
            after,
            state="pending",
            attempts=0,
            claimed_by=None,
            claimed_at=None,
            claim_expires_at=None,
            claim_token=None,
        )
        == job
    )
    assert job.state == "pending", "the input row is not mutated"


def test_q3_a_reclaim_consumes_an_attempt():
    first = processing(visibility_timeout_s=30)
    later = T0 + s(31)
    assert is_reclaimable(first, later)
    second = claimed(first, "other", later)
    assert second.attempts == 2
    assert second.claimed_by == "other"
    assert second.claimed_at == later
    assert second.claim_expires_at == later + s(30)


def test_q3_claim_order_key_is_priority_desc_run_at_asc_id_asc():
    rows = [
        pending(job_id=1, priority=0, run_at=T0),
        pending(job_id=2, priority=5, run_at=T0 + s(2)),
        pending(job_id=3, priority=5, run_at=T0 + s(1)),
        pending(job_id=4, priority=-1, run_at=T0 - s(100)),
        pending(job_id=5, priority=5, run_at=T0 + s(1)),
        pending(job_id=6, priority=2**31 - 1, run_at=T0 + s(50)),
        pending(job_id=7, priority=0, run_at=T0 - s(1)),
    ]
    ordered = [job.id for job in sorted(rows, key=claim_order_key)]
    assert ordered == [6, 3, 5, 2, 7, 1, 4]


def test_q3_pending_is_claimable_once_run_at_has_come():
    job = pending(delay_s=10)
    assert not is_claimable(job, T0)
    assert not is_claimable(job, T0 + s(10) - ONE_US)
    assert is_claimable(job, T0 + s(10))
    assert is_claimable(job, T0 + s(1000))


def test_q3_expired_rows_are_never_claimable():
    job = pending(expires_in_s=60)
    assert is_claimable(job, T0 + s(60)), "at expires_at it has not expired yet"
    assert not is_claimable(job, T0 + s(60) + ONE_US)
    lapsed = processing(expires_in_s=60, visibility_timeout_s=10)
    assert is_claimable(lapsed, T0 + s(11))
    assert not is_claimable(lapsed, T0 + s(61))


def test_q3_processing_row_is_claimable_only_when_reclaimable_with_attempts_left():
    job = processing(visibility_timeout_s=30, max_attempts=2)
    assert not is_claimable(job, T0 + s(30)), "valid claim"
    assert is_claimable(job, T0 + s(30) + ONE_US)
    spent = claimed(job, "w", T0 + s(31))
    assert spent.attempts == 2
    assert not is_claimable(spent, T0 + s(1000)), "attempts spent: pre-claim sweep instead"
    assert needs_pre_claim_sweep(spent, T0 + s(1000))


def test_q3_dead_rows_are_never_claimable():
    job = dead(processing(), T0 + s(1), "boom")
    assert not is_claimable(job, T0 + s(10**6))
    assert not is_reclaimable(job, T0 + s(10**6))
    assert not needs_pre_claim_sweep(job, T0 + s(10**6))


def test_q3_needs_pre_claim_sweep_only_for_lapsed_rows_at_budget():
    job = processing(visibility_timeout_s=30, max_attempts=1)
    assert job.attempts == 1
    assert not needs_pre_claim_sweep(job, T0 + s(30))
    assert needs_pre_claim_sweep(job, T0 + s(30) + ONE_US)
    assert not needs_pre_claim_sweep(pending(max_attempts=1), T0 + s(10**6))
    with_budget = processing(visibility_timeout_s=30, max_attempts=2)
    assert not needs_pre_claim_sweep(with_budget, T0 + s(31))


def test_q3_pre_claim_sweep_applies_to_expired_rows_too():
    job = processing(visibility_timeout_s=30, max_attempts=1, expires_in_s=10)
    assert is_expired(job, T0 + s(31))
    assert needs_pre_claim_sweep(job, T0 + s(31))


# -- validity, reclaimability, ackability: the boundary at the deadline ----------------------


def test_q4_valid_claim_boundary_is_inclusive_at_the_deadline():
    job = processing(visibility_timeout_s=30)
    deadline = T0 + s(30)
    assert job.claim_expires_at == deadline
    assert is_valid_claim(job, 1, T0)
    assert is_valid_claim(job, 1, deadline)
    assert not is_valid_claim(job, 1, deadline + ONE_US)


def test_q4_reclaimable_strictly_after_the_deadline():
    job = processing(visibility_timeout_s=30)
    deadline = T0 + s(30)
    assert not is_reclaimable(job, deadline - ONE_US)
    assert not is_reclaimable(job, deadline)
    assert is_reclaimable(job, deadline + ONE_US)


def test_q4_at_every_instant_exactly_one_of_valid_or_reclaimable():
    job = processing(visibility_timeout_s=30)
    for offset_us in (-1, 0, 1):
        now = T0 + s(30) + timedelta(microseconds=offset_us)
        assert is_valid_claim(job, 1, now) != is_reclaimable(job, now)


def test_q4_valid_claim_needs_the_matching_token():
    job = processing()
    assert is_valid_claim(job, 1, T0)
    assert not is_valid_claim(job, 0, T0)
    assert not is_valid_claim(job, 2, T0)
    reclaimed = claimed(job, "other", T0 + s(31))
    assert not is_valid_claim(reclaimed, 1, T0 + s(31)), "the old holder's token is stale"
    assert is_valid_claim(reclaimed, 2, T0 + s(31))


def test_q4_pending_and_dead_rows_are_never_a_valid_claim():
    assert not is_valid_claim(pending(), 0, T0)
    gone = dead(processing(), T0, "x")
    assert gone.claim_expires_at is not None
    assert not is_valid_claim(gone, 1, T0)
    assert not is_ackable(gone, T0)


def test_q6_ackable_is_processing_within_deadline_without_token():
    job = processing(visibility_timeout_s=30)
    assert is_ackable(job, T0 + s(30))
    assert not is_ackable(job, T0 + s(30) + ONE_US)
    assert not is_ackable(pending(), T0)
    assert is_ackable(claimed(job, "x", T0 + s(31)), T0 + s(31))


# -- Q4 heartbeaten ------------------------------------------------------------------------


def test_q4_heartbeat_is_an_absolute_reset():
    job = processing(visibility_timeout_s=30)
    now = T0 + s(20)
    beat = heartbeaten(job, now, 100)
    assert beat.claim_expires_at == now + s(100)
    again = heartbeaten(beat, now, 100)
    assert again.claim_expires_at == now + s(100), "not additive"


def test_q4_heartbeat_can_shorten_the_deadline():
    job = heartbeaten(processing(visibility_timeout_s=30), T0, 1000)
    shorter = heartbeaten(job, T0 + s(1), 5)
    assert shorter.claim_expires_at == T0 + s(6)


def test_q4_heartbeat_default_is_the_rows_visibility_timeout():
    job = processing(visibility_timeout_s=45)
    assert heartbeaten(job, T0 + s(40), None).claim_expires_at == T0 + s(85)


def test_q4_heartbeat_keeps_claimed_at_and_attempts():
    job = processing(visibility_timeout_s=45)
    beat = heartbeaten(job, T0 + s(40), 10)
    assert beat.claimed_at == job.claimed_at == T0
    assert beat.attempts == job.attempts == 1
    assert beat.claimed_by == job.claimed_by
    assert beat.state == "processing"
    assert dataclasses.replace(beat, claim_expires_at=job.claim_expires_at) == job


# -- Q4 retried ----------------------------------------------------------------------------


def test_q4_retried_below_budget_goes_back_to_pending_after_the_delay():
    job = processing(max_attempts=3)
    now = T0 + s(10)
    after = retried(job, now, "oops", 7)
    assert after.state == "pending"
    assert after.run_at == now + s(7)
    assert after.last_error == "oops"
    assert after.claimed_by is None
    assert after.claimed_at is None
    assert after.claim_expires_at is None
    assert after.attempts == 1, "the attempt counter is kept"
    assert after.died_at is None
    assert not is_claimable(after, now + s(7) - ONE_US)
    assert is_claimable(after, now + s(7))


def test_q4_retried_with_zero_delay_is_ready_now():
    after = retried(processing(), T0 + s(3), None, 0)
    assert after.run_at == T0 + s(3)
    assert is_claimable(after, T0 + s(3))


def test_q4_retried_without_error_clears_last_error():
    job = retried(processing(), T0, "first", 0)
    job = claimed(job, "w", T0 + s(1))
    after = retried(job, T0 + s(2), None, 0)
    assert after.last_error is None


def test_q4_retried_below_budget_needs_a_resolved_delay():
    with pytest.raises(ValueError, match="delay"):
        retried(processing(max_attempts=3), T0, None, None)


def test_q4_retried_at_budget_is_dead_with_the_error():
    job = processing(max_attempts=1)
    after = retried(job, T0 + s(5), "gave up", None)
    assert after.state == "dead"
    assert after.last_error == "gave up"
    assert after.died_at == T0 + s(5)


def test_q4_retried_at_budget_without_error_says_max_attempts_exceeded():
    after = retried(processing(max_attempts=1), T0 + s(5), None, 99)
    assert after.state == "dead"
    assert after.last_error == MAX_ATTEMPTS_EXCEEDED == "max attempts exceeded"
    assert after.run_at == T0, "the delay is ignored at budget"


def test_q4_retried_at_budget_with_empty_error_keeps_the_empty_error():
    after = retried(processing(max_attempts=1), T0, "", None)
    assert after.last_error == ""


def test_q4_retried_above_budget_is_dead_too():
    # max_attempts lowered below attempts cannot happen through the API, but the rule is
    # ">= max_attempts".
    job = dataclasses.replace(processing(max_attempts=3), attempts=5)
    assert retried(job, T0, None, 1).state == "dead"


# -- Q4 failed and the dead-letter move (decision 1) ----------------------------------------


def test_q4_failed_defaults_to_failed():
    after = failed(processing(), T0 + s(2), None)
    assert after.state == "dead"
    assert after.last_error == FAILED == "failed"
    assert after.died_at == T0 + s(2)


def test_q4_failed_keeps_the_given_error_even_empty():
    assert failed(processing(), T0, "bad input").last_error == "bad input"
    assert failed(processing(), T0, "").last_error == ""


def test_q4_failed_works_at_any_attempt_count():
    assert failed(processing(max_attempts=10), T0, None).state == "dead"


def test_decision_1_dead_keeps_the_claim_fields():
    job = processing(claim_at=T0 + s(3), worker="worker-9", visibility_timeout_s=30)
    gone = dead(job, T0 + s(10), "why")
    assert gone.state == "dead"
    assert gone.last_error == "why"
    assert gone.died_at == T0 + s(10)
    assert gone.attempts == job.attempts == 1
    assert gone.claimed_by == "worker-9"
    assert gone.claimed_at == T0 + s(3)
    assert gone.claim_expires_at == T0 + s(33)
    assert dataclasses.replace(gone, state="processing", last_error=None, died_at=None) == job


def test_decision_1_dead_from_pending_has_no_claim_fields():
    gone = dead(pending(expires_in_s=5), T0 + s(6), EXPIRED)
    assert gone.last_error == EXPIRED == "expired"
    assert gone.claimed_by is None
    assert gone.attempts == 0


def test_decision_1_failed_and_retried_at_budget_keep_claim_fields():
    job = processing(worker="w1", max_attempts=1)
    for gone in (failed(job, T0, None), retried(job, T0, None, None)):
        assert gone.claimed_by == "w1"
        assert gone.claimed_at == T0
        assert gone.claim_expires_at == job.claim_expires_at


# -- Q9 expiry and retention ---------------------------------------------------------------


def test_q9_expired_strictly_after_expires_at():
    job = pending(expires_in_s=60)
    assert not is_expired(job, T0 + s(60))
    assert is_expired(job, T0 + s(60) + ONE_US)
    assert not is_expired(pending(expires_in_s=None), T0 + s(10**9))


def test_q9_is_purgeable_never_with_retention_none():
    gone = dead(processing(), T0, "x")
    assert not is_purgeable(gone, T0 + s(10**9), None)


def test_q9_is_purgeable_with_zero_retention_right_after_death():
    gone = dead(processing(), T0, "x")
    assert not is_purgeable(gone, T0, 0), "died_at + 0 < now is strict"
    assert is_purgeable(gone, T0 + ONE_US, 0)


def test_q9_is_purgeable_with_positive_retention_is_strict():
    gone = dead(processing(), T0 + s(5), "x")
    assert not is_purgeable(gone, T0 + s(65), 60)
    assert is_purgeable(gone, T0 + s(65) + ONE_US, 60)


def test_q9_live_rows_are_never_purgeable():
    assert not is_purgeable(pending(), T0 + s(10**6), 0)
    assert not is_purgeable(processing(), T0 + s(10**6), 0)


def test_q3_claim_order_key_sorts_as_the_declared_claim_order():
    # CLAIM_ORDER is the rule as data (the SQL renders it); claim_order_key must sort
    # exactly as sorting field by field in that order would.
    rng = random.Random(3)
    rows = [
        pending(job_id=i, priority=rng.randint(-2, 2), run_at=T0 + s(rng.randint(0, 3)))
        for i in range(1, 60)
    ]
    by_fields = list(rows)
    for field, direction in reversed(CLAIM_ORDER):
        by_fields.sort(key=lambda row: getattr(row, field), reverse=direction == "DESC")
    assert sorted(rows, key=claim_order_key) == by_fields


# -- Q19.8 claim tokens and release -----------------------------------------------------


def test_q19_8_v_compares_the_claim_token_not_the_attempt_count():
    job = claimed(pending(), "w", T0, token=9_000)
    assert job.attempts == 1
    assert job.claim_token == 9_000
    assert is_valid_claim(job, 9_000, T0)
    assert not is_valid_claim(job, 1, T0), "the attempt count is no token"


def test_q19_8_released_gives_the_attempt_back_and_clears_the_claim():
    job = claimed(pending(), "w", T0, token=77)
    back = released(job, T0 + s(3), "worker stopped")
    assert (back.state, back.attempts, back.run_at, back.last_error) == (
        "pending",
        0,
        T0 + s(3),
        "worker stopped",
    )
    assert (back.claimed_by, back.claimed_at, back.claim_expires_at, back.claim_token) == (
        None,
        None,
        None,
        None,
    )
    assert not is_valid_claim(back, 77, T0 + s(3))


def test_q19_8_retry_and_redrive_clear_the_token_and_dead_rows_keep_it():
    job = claimed(pending(), "w", T0, token=5)
    assert retried(job, T0, "again", 0).claim_token is None
    gone = failed(job, T0, None)
    assert gone.claim_token == 5, "D1: a dead row keeps its claim fields"
    assert requeued(gone, T0).claim_token is None
