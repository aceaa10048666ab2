"""``JobTable``, the indexed in-memory table, driven directly (Q2-Q9).

Beyond the rules themselves this pins the table's own machinery: the heaps with lazily
discarded stale entries (a row is never handed out twice and never resurrected), the
rebuild when the clock runs backwards, atomicity when a transition raises, and that a
claim costs O(log n), not a scan. Sync tests, no event loop.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from alkstore_trio._core import (
    EXPIRED,
    FAILED,
    MAX_ATTEMPTS_EXCEEDED,
    EnqueueSpec,
    Job,
    SweepResult,
    _transitions,
)
from alkstore_trio._engines._memory._table import JobTable
from alkstore_trio.engine import Claim, FailItem, RetryItem

T0 = datetime(2000, 1, 1, tzinfo=UTC)
ONE_US = timedelta(microseconds=1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


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


def add(table: JobTable, now: datetime = T0, **kwargs: object) -> int:
    (job_id,) = table.enqueue([spec(**kwargs)], now)  # type: ignore[arg-type]
    return job_id


def ids(jobs: list[Job]) -> list[int]:
    return [job.id for job in jobs]


def claim_one(table: JobTable, now: datetime, queue: str = "q", worker: str = "w") -> Job | None:
    jobs = table.claim(queue, worker, 1, now)
    assert len(jobs) <= 1
    return jobs[0] if jobs else None


def drain(table: JobTable, now: datetime, queue: str = "q", n: int = 1000) -> list[int]:
    out: list[int] = []
    while batch := table.claim(queue, "drain", n, now):
        out.extend(ids(batch))
    return out


# -- Q2 enqueue, ids -----------------------------------------------------------------------


def test_q2_ids_increase_in_enqueue_order_from_one():
    table = JobTable()
    assert table.enqueue([spec(), spec()], T0) == [1, 2]
    assert add(table) == 3
    assert table.enqueue([], T0) == []
    assert add(table, queue="other") == 4


def test_q10_reserved_ids_are_never_reused():
    table = JobTable()
    assert table.reserve_ids(3) == [1, 2, 3]
    assert add(table) == 4
    assert table.insert([(2, spec(payload=b"late"))], at(5)) == [2]
    job = table.get(2, "q")
    assert job is not None
    assert job.payload == b"late"
    assert job.enqueued_at == at(5)
    assert table.get(1, "q") is None, "a reserved id that was never inserted has no row"
    assert table.reserve_ids(0) == []
    assert add(table) == 5


def test_q8_get_is_scoped_to_the_queue_and_sees_dead_rows():
    table = JobTable()
    job_id = add(table, queue="a")
    assert table.get(job_id, "a") is not None
    assert table.get(job_id, "b") is None
    assert table.get(999, "a") is None
    (job,) = table.claim("a", "w", 1, T0)
    assert table.fail("a", [FailItem(job_id, job.claim_token, None)], T0)[0]
    gone = table.get(job_id, "a")
    assert gone is not None
    assert gone.state == "dead"
    assert table.get(job_id, "b") is None


def test_q8_jobs_lists_live_and_dead_rows_in_id_order():
    table = JobTable()
    first, second, third = (add(table) for _ in range(3))
    (job,) = table.claim("q", "w", 1, T0)
    table.fail("q", [FailItem(job.id, job.claim_token, None)], T0)[0]
    assert [j.id for j in table.jobs()] == [first, second, third]
    assert [j.state for j in table.jobs()] == ["dead", "pending", "pending"]
    assert len(table) == 3
    table.cancel("q", second, T0)
    assert len(table) == 2


# -- Q3 claim ------------------------------------------------------------------------------


def test_q3_claim_order_priority_desc_run_at_asc_id_asc():
    table = JobTable()
    a = add(table, priority=0)
    b = add(table, priority=5, run_at=at(-1))
    c = add(table, priority=5, run_at=at(-2))
    d = add(table, priority=5, run_at=at(-2))
    e = add(table, priority=-3)
    f = add(table, priority=0, run_at=at(-10))
    assert ids(table.claim("q", "w", 10, T0)) == [c, d, b, f, a, e]


def test_q3_claim_takes_at_most_n_best_first():
    table = JobTable()
    job_ids = [add(table, priority=p) for p in (1, 3, 2)]
    assert ids(table.claim("q", "w", 2, T0)) == [job_ids[1], job_ids[2]]
    assert ids(table.claim("q", "w", 2, T0)) == [job_ids[0]]
    assert table.claim("q", "w", 2, T0) == []


@pytest.mark.parametrize("n", [0, -1, -(10**9)])
def test_q3_claim_of_zero_or_fewer_does_nothing(n):
    table = JobTable()
    job_id = add(table, max_attempts=1, visibility_timeout_s=1)
    assert len(table.claim("q", "w", 1, T0)) == 1
    assert table.claim("q", "w", n, at(100)) == []
    row = table.get(job_id, "q")
    assert row is not None
    assert row.state == "processing", "no pre-claim sweep either (decision 5)"


def test_q3_claim_of_unknown_queue_is_empty():
    table = JobTable()
    add(table, queue="a")
    assert table.claim("b", "w", 5, T0) == []


def test_q3_claim_sets_claim_fields_and_returns_the_post_claim_snapshot():
    table = JobTable()
    job_id = add(table, visibility_timeout_s=45)
    (job,) = table.claim("q", "worker-1", 1, at(3))
    assert job.id == job_id
    assert job.state == "processing"
    assert job.attempts == 1
    assert job.claimed_by == "worker-1"
    assert job.claimed_at == at(3)
    assert job.claim_expires_at == at(48)
    assert table.get(job_id, "q") == job


def test_q3_delayed_rows_become_claimable_when_due():
    table = JobTable()
    late = add(table, delay_s=10)
    early = add(table, delay_s=5)
    assert table.claim("q", "w", 5, at(4)) == []
    assert ids(table.claim("q", "w", 5, at(5))) == [early]
    assert table.claim("q", "w", 5, at(10) - ONE_US) == []
    assert ids(table.claim("q", "w", 5, at(10))) == [late]


def test_q3_a_due_row_and_a_ready_row_are_ordered_together():
    table = JobTable()
    ready = add(table, priority=1)
    due = add(table, priority=2, delay_s=5)
    assert ids(table.claim("q", "w", 5, at(6))) == [due, ready]


def test_q3_claims_are_scoped_to_their_queue():
    table = JobTable()
    a = add(table, queue="a")
    b = add(table, queue="b")
    assert ids(table.claim("a", "w", 10, T0)) == [a]
    assert ids(table.claim("b", "w", 10, T0)) == [b]


def test_q3_processing_rows_are_not_claimed_while_valid():
    table = JobTable()
    add(table, visibility_timeout_s=30)
    assert len(table.claim("q", "w", 1, T0)) == 1
    assert table.claim("q", "w", 1, at(30)) == [], "at the deadline the claim still holds"


def test_q3_reclaim_consumes_an_attempt():
    table = JobTable()
    job_id = add(table, visibility_timeout_s=30, max_attempts=3)
    (first,) = table.claim("q", "w1", 1, T0)
    (second,) = table.claim("q", "w2", 1, at(30) + ONE_US)
    assert second.id == job_id
    assert second.attempts == 2
    assert second.claimed_by == "w2"
    assert second.claim_expires_at == at(60) + ONE_US
    assert not bool(table.ack("q", [Claim(job_id, first.claim_token)], at(31))), (
        "the old token is refused"
    )
    assert bool(table.ack("q", [Claim(job_id, second.claim_token)], at(31)))


def test_q3_reclaimed_rows_keep_their_place_in_the_claim_order():
    table = JobTable()
    old = add(table, priority=0, visibility_timeout_s=10)
    table.claim("q", "w", 1, T0)
    newer = add(table, at(5), priority=0)
    urgent = add(table, at(5), priority=9)
    assert ids(table.claim("q", "w", 5, at(11))) == [urgent, old, newer]


def test_q3_pre_claim_sweep_dead_letters_lapsed_rows_at_budget():
    table = JobTable()
    spent = add(table, visibility_timeout_s=10, max_attempts=1)
    (job,) = table.claim("q", "w", 1, T0)
    other = add(table, at(5))
    assert ids(table.claim("q", "w", 1, at(11))) == [other]
    gone = table.get(spent, "q")
    assert gone is not None
    assert gone.state == "dead"
    assert gone.last_error == MAX_ATTEMPTS_EXCEEDED
    assert gone.died_at == at(11)
    assert gone.claimed_by == "w", "decision 1: claim fields kept"
    assert gone.attempts == 1
    assert not bool(table.ack("q", [Claim(spent, job.claim_token)], at(11)))


def test_q3_pre_claim_sweep_runs_even_when_nothing_is_claimable():
    table = JobTable()
    spent = add(table, visibility_timeout_s=10, max_attempts=1)
    table.claim("q", "w", 1, T0)
    assert table.claim("q", "w", 1, at(11)) == []
    row = table.get(spent, "q")
    assert row is not None
    assert row.state == "dead"


def test_q3_pre_claim_sweep_sweeps_every_lapsed_row_at_budget_even_with_n_1():
    table = JobTable()
    spent = [add(table, visibility_timeout_s=10, max_attempts=1) for _ in range(5)]
    table.claim("q", "w", 5, T0)
    fresh = add(table, at(1))
    assert ids(table.claim("q", "w", 1, at(11))) == [fresh]
    assert all(table.get(job_id, "q").state == "dead" for job_id in spent)  # type: ignore[union-attr]


def test_q3_pre_claim_sweep_is_scoped_to_the_queue():
    table = JobTable()
    spent = add(table, queue="b", visibility_timeout_s=10, max_attempts=1)
    table.claim("b", "w", 1, T0)
    add(table, queue="a")
    table.claim("a", "w", 1, at(11))
    row = table.get(spent, "b")
    assert row is not None
    assert row.state == "processing"
    assert table.claim("b", "w", 1, at(11)) == []
    assert table.get(spent, "b").state == "dead"  # type: ignore[union-attr]


def test_q3_pre_claim_sweep_does_not_touch_valid_claims_at_budget():
    table = JobTable()
    job_id = add(table, visibility_timeout_s=10, max_attempts=1)
    table.claim("q", "w", 1, T0)
    table.claim("q", "w", 1, at(10))
    row = table.get(job_id, "q")
    assert row is not None
    assert row.state == "processing"


def test_q3_expired_rows_are_never_claimed_and_stay_for_the_sweep():
    table = JobTable()
    stale = add(table, expires_in_s=5)
    fresh = add(table)
    assert ids(table.claim("q", "w", 5, at(6))) == [fresh]
    row = table.get(stale, "q")
    assert row is not None
    assert row.state == "pending"
    assert table.sweep_expired("q", None, at(6)) == SweepResult(1, 0)


def test_q3_a_lapsed_expired_row_is_not_reclaimed():
    table = JobTable()
    job_id = add(table, expires_in_s=20, visibility_timeout_s=10)
    table.claim("q", "w", 1, T0)
    assert table.claim("q", "w", 1, at(21)) == []
    assert table.get(job_id, "q").state == "processing"  # type: ignore[union-attr]


# -- Q4 handle operations on the table -----------------------------------------------------


def test_q4_heartbeat_is_an_absolute_reset_and_moves_the_lease():
    table = JobTable()
    job_id = add(table, visibility_timeout_s=10)
    (job,) = table.claim("q", "w", 1, T0)
    assert bool(table.heartbeat("q", [Claim(job_id, job.claim_token)], 100, at(5)))
    assert table.get(job_id, "q").claim_expires_at == at(105)  # type: ignore[union-attr]
    assert table.claim("q", "x", 1, at(50)) == [], "the old lease entry is stale"
    assert bool(table.heartbeat("q", [Claim(job_id, job.claim_token)], None, at(50)))
    assert table.get(job_id, "q").claim_expires_at == at(60)  # type: ignore[union-attr]
    assert table.claim("q", "x", 1, at(60)) == []
    (again,) = table.claim("q", "x", 1, at(60) + ONE_US)
    assert again.attempts == 2


def test_q4_late_heartbeat_is_refused_and_changes_nothing():
    table = JobTable()
    job_id = add(table, visibility_timeout_s=10)
    (job,) = table.claim("q", "w", 1, T0)
    before = table.get(job_id, "q")
    assert not bool(table.heartbeat("q", [Claim(job_id, job.claim_token)], 100, at(10) + ONE_US))
    assert table.get(job_id, "q") == before


@pytest.mark.parametrize("operation", ["heartbeat", "ack", "retry", "fail"])
def test_q4_operations_are_refused_for_wrong_token_queue_or_id(operation):
    table = JobTable()
    job_id = add(table, queue="a")
    (job,) = table.claim("a", "w", 1, T0)
    calls = {
        "heartbeat": lambda q, i, tok: bool(table.heartbeat(q, [Claim(i, tok)], None, at(1))),
        "ack": lambda q, i, tok: bool(table.ack(q, [Claim(i, tok)], at(1))),
        "retry": lambda q, i, tok: table.retry(q, [RetryItem(i, tok, None, 0)], at(1))[0],
        "fail": lambda q, i, tok: table.fail(q, [FailItem(i, tok, None)], at(1))[0],
    }
    call = calls[operation]
    assert not call("a", job_id, job.claim_token + 1)
    assert not call("a", job_id, 0)
    assert not call("b", job_id, job.claim_token)
    assert not call("a", 999, job.claim_token)
    assert table.get(job_id, "a") == job
    assert call("a", job_id, job.claim_token)


def test_q4_ack_deletes_the_row():
    table = JobTable()
    job_id = add(table)
    (job,) = table.claim("q", "w", 1, T0)
    assert bool(table.ack("q", [Claim(job_id, job.claim_token)], at(1)))
    assert table.get(job_id, "q") is None
    assert not bool(table.ack("q", [Claim(job_id, job.claim_token)], at(1)))
    assert len(table) == 0


def test_q4_retry_below_budget_makes_the_row_claimable_after_the_delay():
    table = JobTable()
    job_id = add(table, max_attempts=3)
    (job,) = table.claim("q", "w", 1, T0)
    assert table.retry("q", [RetryItem(job_id, job.claim_token, "boom", 20)], at(1))[0]
    row = table.get(job_id, "q")
    assert row is not None
    assert row.state == "pending"
    assert row.last_error == "boom"
    assert table.claim("q", "w", 1, at(21) - ONE_US) == []
    (again,) = table.claim("q", "w", 1, at(21))
    assert again.attempts == 2
    assert again.last_error == "boom"


def test_q4_retry_at_budget_dead_letters():
    table = JobTable()
    job_id = add(table, max_attempts=1)
    (job,) = table.claim("q", "w", 1, T0)
    assert table.retry("q", [RetryItem(job_id, job.claim_token, None, None)], at(1))[0]
    row = table.get(job_id, "q")
    assert row is not None
    assert row.state == "dead"
    assert row.last_error == MAX_ATTEMPTS_EXCEEDED
    assert table.claim("q", "w", 1, at(10**6)) == []


def test_q4_fail_dead_letters_now():
    table = JobTable()
    job_id = add(table, max_attempts=5)
    (job,) = table.claim("q", "w", 1, T0)
    assert table.fail("q", [FailItem(job_id, job.claim_token, None)], at(2))[0]
    row = table.get(job_id, "q")
    assert row is not None
    assert (row.state, row.last_error, row.died_at) == ("dead", FAILED, at(2))
    assert not table.fail("q", [FailItem(job_id, job.claim_token, None)], at(2))[0]


# -- Q6 ack_batch --------------------------------------------------------------------------


def test_q6_ack_batch_counts_only_valid_processing_rows_of_this_queue():
    table = JobTable()
    valid_a = add(table, visibility_timeout_s=100)
    valid_b = add(table, visibility_timeout_s=100)
    lapsed = add(table, visibility_timeout_s=5)
    table.claim("q", "w1", 1, T0)
    table.claim("q", "w2", 1, T0)
    table.claim("q", "w3", 1, T0)
    dead_id = add(table)
    (dying,) = table.claim("q", "w", 1, T0)
    table.fail("q", [FailItem(dead_id, dying.claim_token, None)], T0)[0]
    pending_id = add(table)
    other_queue = add(table, queue="other")
    table.claim("other", "w", 1, T0)

    count = table.ack_batch(
        "q",
        [valid_a, lapsed, pending_id, dead_id, other_queue, 10**12, valid_a, valid_b, valid_b],
        at(10),
    )
    assert count == 2
    assert table.get(valid_a, "q") is None
    assert table.get(valid_b, "q") is None
    assert table.get(lapsed, "q").state == "processing"  # type: ignore[union-attr]
    assert table.get(pending_id, "q").state == "pending"  # type: ignore[union-attr]
    assert table.get(dead_id, "q").state == "dead"  # type: ignore[union-attr]
    assert table.get(other_queue, "other").state == "processing"  # type: ignore[union-attr]


def test_q6_ack_batch_boundary_at_the_deadline():
    table = JobTable()
    lapsed = add(table, visibility_timeout_s=10)
    at_deadline = add(table, visibility_timeout_s=10)
    table.claim("q", "w", 1, T0)
    table.claim("q", "w", 1, T0 + ONE_US)
    assert table.ack_batch("q", [lapsed, at_deadline], at(10) + ONE_US) == 1
    assert table.get(at_deadline, "q") is None
    assert table.get(lapsed, "q") is not None


def test_q6_ack_batch_empty():
    assert JobTable().ack_batch("q", [], T0) == 0


def test_r2_ack_claims_deletes_only_valid_claims_with_their_token():
    table = JobTable()
    valid = add(table, visibility_timeout_s=100)
    stale_token = add(table, visibility_timeout_s=5)
    lapsed = add(table, visibility_timeout_s=5)
    other_queue = add(table, queue="other", visibility_timeout_s=100)
    (v,) = table.claim("q", "w1", 1, T0)
    (s,) = table.claim("q", "w1", 1, T0)
    (lp,) = table.claim("q", "w1", 1, T0)
    (o,) = table.claim("other", "w1", 1, T0)
    (reclaimed,) = table.claim("q", "w2", 1, at(6))  # stale_token, attempts now 2
    assert reclaimed.id == stale_token
    claims = [(valid, v.claim_token), (stale_token, s.claim_token), (lapsed, lp.claim_token)]
    claims += [(other_queue, o.claim_token), (10**12, 1), (valid, v.claim_token)]
    assert table.ack("q", claims, at(6)) == [valid]
    assert table.get(valid, "q") is None
    assert table.get(stale_token, "q").attempts == 2  # type: ignore[union-attr]
    assert table.get(lapsed, "q").state == "processing"  # type: ignore[union-attr]
    assert table.get(other_queue, "other").state == "processing"  # type: ignore[union-attr]
    assert table.ack("q", [(stale_token, reclaimed.claim_token)], at(6)) == [stale_token]
    assert table.ack("q", [], at(6)) == []


def test_r2_ack_claims_and_claim_acks_then_claims_at_one_now():
    table = JobTable()
    done = add(table, priority=9, visibility_timeout_s=100)
    lapsed = add(table, priority=8, visibility_timeout_s=5)
    spent = add(table, priority=7, visibility_timeout_s=5, max_attempts=1)
    fresh = add(table, priority=1)
    (d, lp, sp) = table.claim("q", "w1", 3, T0)
    acked, claimed = table.ack_and_claim(
        "q", [(done, d.claim_token), (lapsed, lp.claim_token)], "w2", 5, at(6)
    )
    # The valid ack went through; the lapsed one was refused and its job reclaimed by
    # the claim part (attempt 2); the spent one was swept; the fresh one claimed.
    assert acked == [done]
    assert table.get(done, "q") is None
    assert [(job.id, job.attempts, job.claimed_by) for job in claimed] == [
        (lapsed, 2, "w2"),
        (fresh, 1, "w2"),
    ]
    assert all(job.claimed_at == at(6) for job in claimed)
    dead = table.get(spent, "q")
    assert dead is not None
    assert (dead.state, dead.last_error) == ("dead", MAX_ATTEMPTS_EXCEEDED)
    assert sp.attempts == 1


def test_r2_ack_claims_and_claim_with_n_zero_only_acks():
    table = JobTable()
    done = add(table, visibility_timeout_s=100)
    spent = add(table, visibility_timeout_s=5, max_attempts=1)
    add(table)
    (d,) = table.claim("q", "w1", 1, T0)
    table.claim("q", "w1", 1, at(1))
    assert table.ack_and_claim("q", [(done, d.claim_token)], "w2", 0, at(10)) == ([done], [])
    assert table.get(spent, "q").state == "processing"  # type: ignore[union-attr]


def test_r2_heartbeat_claims_renews_only_valid_claims_with_their_token():
    table = JobTable()
    valid = add(table, visibility_timeout_s=100)
    stale_token = add(table, visibility_timeout_s=5)
    lapsed = add(table, visibility_timeout_s=5)
    short = add(table, visibility_timeout_s=10)
    other_queue = add(table, queue="other", visibility_timeout_s=100)
    (v,) = table.claim("q", "w1", 1, T0)
    (s,) = table.claim("q", "w1", 1, T0)
    (lp,) = table.claim("q", "w1", 1, T0)
    (sh,) = table.claim("q", "w1", 1, T0)
    (o,) = table.claim("other", "w1", 1, T0)
    (reclaimed,) = table.claim("q", "w2", 1, at(6))  # stale_token, attempts now 2
    assert reclaimed.id == stale_token
    claims = [(valid, v.claim_token), (stale_token, s.claim_token), (lapsed, lp.claim_token)]
    claims += [(short, sh.claim_token), (other_queue, o.claim_token), (10**12, 1)]
    claims += [(valid, v.claim_token)]
    before = {job_id: table.get(job_id, "q") for job_id in (stale_token, lapsed)}
    # Default: each row's own visibility_timeout_s, an absolute reset from now.
    assert table.heartbeat("q", claims, None, at(6)) == [valid, short]
    assert table.get(valid, "q").claim_expires_at == at(106)  # type: ignore[union-attr]
    assert table.get(short, "q").claim_expires_at == at(16)  # type: ignore[union-attr]
    for job_id, row in before.items():
        assert table.get(job_id, "q") == row
    assert table.get(other_queue, "other").claim_expires_at == at(100)  # type: ignore[union-attr]
    # Renewed claims are not reclaimable at their old deadline; attempts do not change.
    assert [job.id for job in table.claim("q", "w3", 10, at(11))] == [lapsed]
    assert table.get(short, "q").attempts == 1  # type: ignore[union-attr]
    # An explicit extend_s may shorten the lease.
    claims = [(valid, v.claim_token), (short, sh.claim_token)]
    assert table.heartbeat("q", claims, 2, at(12)) == [valid, short]
    assert table.get(valid, "q").claim_expires_at == at(14)  # type: ignore[union-attr]
    assert table.heartbeat("q", [], None, at(12)) == []


def test_r2_retry_claims_retries_only_valid_claims_with_their_token():
    table = JobTable()
    again = add(table, visibility_timeout_s=100)
    spent = add(table, visibility_timeout_s=100, max_attempts=1)
    spent_default = add(table, visibility_timeout_s=100, max_attempts=1)
    stale_token = add(table, visibility_timeout_s=5)
    lapsed = add(table, visibility_timeout_s=5)
    other_queue = add(table, queue="other", visibility_timeout_s=100)
    tokens = {job.id: job.claim_token for job in table.claim("q", "w1", 5, T0)}
    (o,) = table.claim("other", "w1", 1, T0)
    (reclaimed,) = table.claim("q", "w2", 1, at(6))
    assert reclaimed.id == stale_token  # attempts now 2
    before = {job_id: table.get(job_id, "q") for job_id in (stale_token, lapsed)}
    items = [
        (lapsed, tokens[lapsed], "late", 0.0),
        (again, tokens[again], "boom", 7.0),
        (stale_token, tokens[stale_token], None, 0.0),
        (spent, tokens[spent], "last", 3.0),
        (other_queue, o.claim_token, None, 0.0),
        (spent_default, tokens[spent_default], None, None),
        (10**12, 1, None, 0.0),
    ]
    assert table.retry("q", items, at(6)) == [False, True, False, True, False, True, False]
    row = table.get(again, "q")
    assert row is not None
    assert (row.state, row.run_at, row.last_error, row.attempts) == ("pending", at(13), "boom", 1)
    assert (row.claimed_by, row.claimed_at, row.claim_expires_at) == (None, None, None)
    for job_id, last_error in ((spent, "last"), (spent_default, MAX_ATTEMPTS_EXCEEDED)):
        dead = table.get(job_id, "q")
        assert dead is not None
        assert (dead.state, dead.last_error, dead.died_at) == ("dead", last_error, at(6))
        assert (dead.claimed_by, dead.claimed_at) == ("w1", T0)
    for job_id, before_row in before.items():
        assert table.get(job_id, "q") == before_row
    assert table.get(other_queue, "other").state == "processing"  # type: ignore[union-attr]
    # Due at 13 s, after the lapsed claims that were ready before it.
    assert ids(table.claim("q", "w3", 10, at(13) - ONE_US)) == [stale_token, lapsed]
    assert ids(table.claim("q", "w3", 10, at(13))) == [again]
    assert table.retry("q", [], at(13)) == []


def test_r2_fail_claims_dead_letters_only_valid_claims_with_their_token():
    table = JobTable()
    named = add(table, visibility_timeout_s=100, max_attempts=10)
    unnamed = add(table, visibility_timeout_s=100, max_attempts=10)
    stale_token = add(table, visibility_timeout_s=5)
    lapsed = add(table, visibility_timeout_s=5)
    tokens = {job.id: job.claim_token for job in table.claim("q", "w1", 4, T0)}
    (reclaimed,) = table.claim("q", "w2", 1, at(6))
    assert reclaimed.id == stale_token
    before = {job_id: table.get(job_id, "q") for job_id in (stale_token, lapsed)}
    items = [
        (lapsed, tokens[lapsed], "x"),
        (named, tokens[named], "bad input"),
        (stale_token, tokens[stale_token], "x"),
        (unnamed, tokens[unnamed], None),
    ]
    assert table.fail("q", items, at(6)) == [False, True, False, True]
    for job_id, last_error in ((named, "bad input"), (unnamed, FAILED)):
        dead = table.get(job_id, "q")
        assert dead is not None
        assert (dead.state, dead.last_error, dead.died_at, dead.attempts) == (
            "dead",
            last_error,
            at(6),
            1,
        )
    for job_id, before_row in before.items():
        assert table.get(job_id, "q") == before_row
    assert table.fail("q", [], at(6)) == []


def test_r2_retry_and_fail_claims_apply_a_job_listed_twice_once_by_its_first_valid_item():
    """D20: items are taken in order, each under V; once a job's claim is finished by one
    item, every later item of that job is refused. An earlier item with a wrong token
    does not block a later valid one."""
    table = JobTable()
    retried = add(table, visibility_timeout_s=100)
    failed = add(table, visibility_timeout_s=100)
    tokens = {job.id: job.claim_token for job in table.claim("q", "w", 2, T0)}
    items = [
        (retried, tokens[retried] + 1, "wrong token", 0.0),
        (retried, tokens[retried], "first", 3.0),
        (retried, tokens[retried], "second", 0.0),
    ]
    assert table.retry("q", items, at(1)) == [False, True, False]
    row = table.get(retried, "q")
    assert row is not None
    assert (row.state, row.last_error, row.run_at) == ("pending", "first", at(4))
    fails = [(failed, tokens[failed], "first"), (failed, tokens[failed], "second")]
    assert table.fail("q", fails, at(1)) == [True, False]
    assert table.get(failed, "q").last_error == "first"  # type: ignore[union-attr]


# -- Q19.5 cancel --------------------------------------------------------------------------


def test_q19_5_cancel_finalizes_pending_marks_processing_and_leaves_dead():
    table = JobTable()
    waiting = add(table, delay_s=100)
    held = add(table)
    (job,) = table.claim("q", "w", 1, T0)
    assert job.id == held
    assert table.cancel("q", waiting, T0) == (True, False)  # finalized, nobody to tell
    assert table.get(waiting, "q") is None
    assert table.cancel("q", held, T0) == (True, True)  # cancelling, its holder told
    assert table.cancel("q", held, T0) == (True, True)  # and told again
    assert table.get(held, "q").state == "cancelling"  # type: ignore[union-attr]
    assert not bool(table.ack("q", [Claim(held, job.claim_token)], at(1))), (
        "the holder's ack is refused"
    )
    assert table.cancelling_among("q", [held, waiting, held]) == [held]
    assert table.settle_cancelled("q", [Claim(held, job.claim_token)], at(1)) == [held]
    assert table.cancel("q", held, at(1)) == (False, False)
    dead_id = add(table)
    (dying,) = table.claim("q", "w", 1, T0)
    table.fail("q", [FailItem(dead_id, dying.claim_token, None)], T0)[0]
    assert table.cancel("q", dead_id, T0) == (False, False)
    assert table.get(dead_id, "q") is not None
    assert table.cancel("q", 12345, T0) == (False, False)


def test_q19_5_a_cancelling_row_survives_a_clock_set_back_and_lapses_to_the_sweep():
    table = JobTable()
    job_id = add(table, visibility_timeout_s=10)
    assert ids(table.claim("q", "w", 1, at(5))) == [job_id]
    assert table.cancel("q", job_id, at(6)) == (True, True)
    # A clock set back rebuilds the heaps: the cancelling row stays out of every claim.
    assert table.claim("q", "w", 10, at(1)) == []
    assert table.claim("q", "w", 10, at(30)) == []
    assert table.sweep_expired("q", None, at(30)) == SweepResult(0, 0, cancelled=1)
    assert table.get(job_id, "q") is None


def test_q19_5_cancel_is_scoped_to_the_queue():
    table = JobTable()
    job_id = add(table, queue="a")
    assert table.cancel("b", job_id, T0) == (False, False)
    assert table.get(job_id, "a") is not None


# -- Q9 sweep ------------------------------------------------------------------------------


def test_q9_sweep_dead_letters_expired_pending_and_processing_rows():
    table = JobTable()
    held = add(table, expires_in_s=10, visibility_timeout_s=1000)
    waiting = add(table, expires_in_s=10, delay_s=100)
    fresh = add(table, expires_in_s=20)
    forever = add(table)
    (job,) = table.claim("q", "w", 1, T0)
    assert job.id == held
    assert table.sweep_expired("q", None, at(10)) == SweepResult(0, 0), "not past expires_at"
    assert table.sweep_expired("q", None, at(10) + ONE_US) == SweepResult(2, 0)
    for job_id in (held, waiting):
        row = table.get(job_id, "q")
        assert row is not None
        assert (row.state, row.last_error, row.died_at) == ("dead", EXPIRED, at(10) + ONE_US)
    assert table.get(fresh, "q").state == "pending"  # type: ignore[union-attr]
    assert table.get(forever, "q").state == "pending"  # type: ignore[union-attr]
    assert not bool(table.ack("q", [Claim(held, job.claim_token)], at(11)))
    assert table.sweep_expired("q", None, at(11)) == SweepResult(0, 0)


def test_q9_sweep_skips_rows_that_already_left():
    table = JobTable()
    acked = add(table, expires_in_s=10)
    cancelled = add(table, expires_in_s=10)
    (job,) = table.claim("q", "w", 1, T0)
    bool(table.ack("q", [Claim(acked, job.claim_token)], T0))
    table.cancel("q", cancelled, T0)
    assert table.sweep_expired("q", None, at(11)) == SweepResult(0, 0)


def test_q9_retention_none_keeps_dead_rows_forever():
    table = JobTable()
    job_id = add(table, expires_in_s=1)
    assert table.sweep_expired("q", None, at(2)) == SweepResult(1, 0)
    assert table.sweep_expired("q", None, at(10**9)) == SweepResult(0, 0)
    assert table.get(job_id, "q") is not None


def test_q9_retention_zero_purges_on_the_next_instant():
    table = JobTable()
    job_id = add(table, expires_in_s=1)
    assert table.sweep_expired("q", 0, at(2)) == SweepResult(1, 0), "died_at + 0 < now is false"
    assert table.sweep_expired("q", 0, at(2) + ONE_US) == SweepResult(0, 1)
    assert table.get(job_id, "q") is None
    assert len(table) == 0


def test_q9_retention_purges_in_died_at_order_strictly_after_retention():
    table = JobTable()
    first = add(table, max_attempts=1)
    second = add(table, max_attempts=1)
    third = add(table, max_attempts=5)
    jobs = table.claim("q", "w", 3, T0)
    tokens = {job.id: job.claim_token for job in jobs}
    table.fail("q", [FailItem(first, tokens[first], None)], at(10))[0]
    table.retry("q", [RetryItem(second, tokens[second], None, None)], at(20))[0]  # at budget: dead
    table.fail("q", [FailItem(third, tokens[third], "x")], at(30))[0]
    assert table.sweep_expired("q", 60, at(70)) == SweepResult(0, 0)
    assert table.sweep_expired("q", 60, at(80) + ONE_US) == SweepResult(0, 2)
    assert table.get(third, "q") is not None
    assert table.sweep_expired("q", 60, at(91)) == SweepResult(0, 1)


def test_q9_pre_claim_swept_rows_are_purged_by_retention():
    table = JobTable()
    job_id = add(table, max_attempts=1, visibility_timeout_s=5)
    table.claim("q", "w", 1, T0)
    table.claim("q", "w", 1, at(6))
    assert table.sweep_expired("q", 1, at(8)) == SweepResult(0, 1)
    assert table.get(job_id, "q") is None


def test_q9_sweep_is_scoped_to_the_queue():
    table = JobTable()
    a = add(table, queue="a", expires_in_s=1)
    b = add(table, queue="b", expires_in_s=1)
    assert table.sweep_expired("a", 0, at(5)) == SweepResult(1, 0)
    assert table.get(b, "b").state == "pending"  # type: ignore[union-attr]
    assert table.sweep_expired("a", 0, at(6)) == SweepResult(0, 1)
    assert table.get(a, "a") is None
    assert table.sweep_expired("b", None, at(6)) == SweepResult(1, 0)
    assert table.sweep_expired("unknown", 0, at(6)) == SweepResult(0, 0)


def test_q9_sweep_then_purge_in_one_call_with_zero_retention():
    table = JobTable()
    add(table, expires_in_s=1)
    # Expired and purged need died_at + 0 < now; died_at == now, so not in the same call.
    assert table.sweep_expired("q", 0, at(5)) == SweepResult(1, 0)


# -- stale heap entries --------------------------------------------------------------------


def test_q3_heartbeaten_many_times_is_handed_out_once():
    table = JobTable()
    job_id = add(table, visibility_timeout_s=10)
    (job,) = table.claim("q", "w", 1, T0)
    for i in range(500):
        assert bool(
            table.heartbeat("q", [Claim(job_id, job.claim_token)], 1 + (i % 7), at(i * 0.001))
        )
    # Every older lease entry has lapsed by now; only the newest may surface.
    later = at(100)
    reclaimed = table.claim("q", "x", 100, later)
    assert ids(reclaimed) == [job_id]
    assert reclaimed[0].attempts == 2
    assert table.claim("q", "x", 100, at(100)) == []


def test_q3_retried_many_times_is_handed_out_once_per_claim():
    table = JobTable()
    job_id = add(table, max_attempts=10**6)
    others = [add(table, priority=-1) for _ in range(3)]
    for i in range(300):
        (job,) = table.claim("q", "w", 1, at(i))
        assert job.id == job_id
        assert job.attempts == i + 1
        assert table.retry("q", [RetryItem(job_id, job.claim_token, None, 0)], at(i))[0]
    batch = table.claim("q", "w", 1000, at(301))
    assert ids(batch) == [job_id, *others]


def test_q3_retried_with_delays_leaves_no_early_ghosts():
    table = JobTable()
    job_id = add(table, max_attempts=1000)
    for i in range(50):
        (job,) = table.claim("q", "w", 1, at(i * 100))
        assert table.retry("q", [RetryItem(job_id, job.claim_token, None, 50 + i)], at(i * 100))[0]
    # The latest retry set run_at = 4900 + 99. Earlier (stale) delayed entries surface
    # first but must not hand the job out early.
    assert table.claim("q", "w", 10, at(4900 + 98)) == []
    assert ids(table.claim("q", "w", 10, at(4900 + 99))) == [job_id]


@pytest.mark.parametrize("how", ["cancel", "ack", "fail", "retry_at_budget", "ack_batch"])
def test_q3_finished_jobs_are_never_resurrected(how):
    table = JobTable()
    job_id = add(table, visibility_timeout_s=10, max_attempts=1, expires_in_s=50)
    (job,) = table.claim("q", "w", 1, T0)
    for i in range(20):
        bool(table.heartbeat("q", [Claim(job_id, job.claim_token)], 1 + i, at(0.5)))
    if how == "cancel":  # Q19.5: cancelling, then settled by its holder
        assert table.cancel("q", job_id, at(1)) == (True, True)
        assert table.settle_cancelled("q", [Claim(job_id, job.claim_token)], at(1)) == [job_id]
    elif how == "ack":
        assert bool(table.ack("q", [Claim(job_id, job.claim_token)], at(1)))
    elif how == "fail":
        assert table.fail("q", [FailItem(job_id, job.claim_token, None)], at(1))[0]
    elif how == "retry_at_budget":
        assert table.retry("q", [RetryItem(job_id, job.claim_token, None, None)], at(1))[0]
    else:
        assert table.ack_batch("q", [job_id], at(1)) == 1
    before = table.get(job_id, "q")
    for t in (5, 15, 25, 40, 60, 1000):
        assert table.claim("q", "x", 100, at(t)) == []
        assert table.sweep_expired("q", None, at(t)).expired == 0
    # Even a clock set back (a heap rebuild) does not bring it back.
    assert table.claim("q", "x", 100, at(2)) == []
    assert table.get(job_id, "q") == before


def test_q3_cancelled_pending_and_delayed_rows_are_never_handed_out():
    table = JobTable()
    ready = add(table)
    delayed = add(table, delay_s=10)
    keep = add(table, priority=-1)
    table.cancel("q", ready, T0)
    table.cancel("q", delayed, T0)
    assert drain(table, at(20)) == [keep]


def test_q3_no_row_is_handed_out_twice_within_one_claim_under_churn():
    table = JobTable()
    job_ids = [add(table, visibility_timeout_s=5, max_attempts=10**6) for _ in range(50)]
    now = T0
    for round_ in range(20):
        now = at(round_ * 10)
        batch = table.claim("q", "w", 1000, now)
        handed = ids(batch)
        assert len(handed) == len(set(handed))
        assert sorted(handed) == job_ids, "every job, each once (lapsed ones reclaimed)"
        for job in batch[::3]:
            bool(table.heartbeat("q", [Claim(job.id, job.claim_token)], 1, now))
            bool(table.heartbeat("q", [Claim(job.id, job.claim_token)], 2, now))
        for job in batch[1::3]:
            table.retry("q", [RetryItem(job.id, job.claim_token, None, 0)], now)[0]


# -- a clock set backwards: the heaps are rebuilt ------------------------------------------


def test_q3_clock_backwards_a_promoted_row_stops_being_claimable_then_comes_back():
    table = JobTable()
    target = add(table, delay_s=10)
    blocker = add(table, priority=5, delay_s=10)
    # At t=20 both rows become ready; only the blocker is taken.
    assert ids(table.claim("q", "w", 1, at(20))) == [blocker]
    # Time runs back to t=5: the target's run_at (t=10) has not come.
    assert table.claim("q", "w", 1, at(5)) == []
    # It must not have been dropped from the indexes on the way.
    assert ids(table.claim("q", "w", 1, at(10))) == [target]


def test_q3_clock_backwards_a_lapsed_claim_is_valid_again_then_lapses_again():
    table = JobTable()
    held = add(table, visibility_timeout_s=30, max_attempts=5)
    (job,) = table.claim("q", "w", 1, T0)
    blocker = add(table, at(1), priority=9)
    # At t=40 the lease lapsed and moved to the ready heap; the blocker is taken first.
    assert ids(table.claim("q", "w", 1, at(40))) == [blocker]
    # Back to t=20: the claim is valid again, so it is not reclaimable.
    assert table.claim("q", "x", 5, at(20)) == []
    # The holder's claim is valid again: it can heartbeat (deadline t=50) ...
    assert bool(table.heartbeat("q", [Claim(held, job.claim_token)], None, at(20)))
    # ... and the stale ready entry from t=40 must not hand the row out early.
    assert table.claim("q", "x", 5, at(40)) == []
    assert table.claim("q", "x", 5, at(50)) == []
    (again,) = table.claim("q", "x", 5, at(50) + ONE_US)
    assert again.id == held


def test_q3_clock_backwards_reclaim_is_withheld_until_the_deadline_passes_again():
    table = JobTable()
    held = add(table, visibility_timeout_s=30, max_attempts=5)
    (job,) = table.claim("q", "w", 1, T0)
    blocker = add(table, at(1), priority=9)
    assert ids(table.claim("q", "w", 1, at(40))) == [blocker]
    assert table.claim("q", "x", 5, at(20)) == []
    assert table.claim("q", "x", 5, at(30)) == []
    (again,) = table.claim("q", "x", 5, at(30) + ONE_US)
    assert again.id == held
    assert again.attempts == job.attempts + 1


def test_q4_clock_backwards_the_holder_may_heartbeat_again():
    table = JobTable()
    held = add(table, visibility_timeout_s=30)
    (job,) = table.claim("q", "w", 1, T0)
    assert not bool(table.heartbeat("q", [Claim(held, job.claim_token)], None, at(31)))
    assert bool(table.heartbeat("q", [Claim(held, job.claim_token)], 100, at(10)))
    assert table.claim("q", "x", 1, at(50)) == [], "the new deadline is t=110"
    assert len(table.claim("q", "x", 1, at(110) + ONE_US)) == 1


def test_q3_clock_backwards_an_expired_row_dropped_by_a_claim_comes_back():
    table = JobTable()
    stale = add(table, expires_in_s=10)
    # At t=20 the claim pops the expired row and discards it (left for the sweep).
    assert table.claim("q", "w", 5, at(20)) == []
    # Back at t=5 it is not expired: it must be claimable.
    assert ids(table.claim("q", "w", 5, at(5))) == [stale]


def test_q3_clock_backwards_then_forwards_hands_each_job_out_exactly_once():
    table = JobTable()
    job_ids = [add(table, delay_s=i, priority=i % 3, visibility_timeout_s=1000) for i in range(30)]
    handed: list[tuple[int, int]] = []
    for now_s in (5, 0, 12, 3, 20, 29, 1, 40):
        for job in table.claim("q", "w", 2, at(now_s)):
            assert job.run_at <= at(now_s), "never handed out before its run_at"
            handed.append((job.id, job.attempts))
    handed.extend((job_id, 1) for job_id in drain(table, at(100)))
    assert len(handed) == len(set(handed))
    assert sorted(job_id for job_id, _ in handed) == job_ids
    assert {attempts for _, attempts in handed} == {1}


def test_q3_clock_backwards_pre_claim_sweep_only_after_the_deadline():
    table = JobTable()
    job_id = add(table, visibility_timeout_s=30, max_attempts=1)
    table.claim("q", "w", 1, T0)
    add(table, at(1))
    table.claim("q", "w", 1, at(10))  # observe t=10, lease pushed
    table.claim("q", "w", 1, at(5))  # backwards: rebuild
    assert table.get(job_id, "q").state == "processing"  # type: ignore[union-attr]
    table.claim("q", "w", 1, at(31))
    assert table.get(job_id, "q").state == "dead"  # type: ignore[union-attr]


# -- atomicity when a transition raises ----------------------------------------------------


def test_q3_a_claim_that_raises_leaves_the_row_claimable(monkeypatch):
    """A claim either completes or changes nothing (the table's promise). If the claim
    transition raises (the engine turns that into EngineError and keeps serving), the row
    must still be handed out by the next claim: it must not be stranded."""
    table = JobTable()
    job_id = add(table)
    real = _transitions.claimed

    def broken(job, worker_id, now, token):
        raise RuntimeError("transition failed")

    monkeypatch.setattr(_transitions, "claimed", broken)
    with pytest.raises(RuntimeError):
        table.claim("q", "w", 1, T0)
    monkeypatch.setattr(_transitions, "claimed", real)
    assert table.get(job_id, "q").state == "pending"  # type: ignore[union-attr]
    assert ids(table.claim("q", "w", 1, T0)) == [job_id]


def test_r2_retry_claims_that_raises_changes_nothing():
    """A batch is one transition: when one item's transition raises (below budget without
    a resolved delay, which the facade never sends), no item has taken effect."""
    table = JobTable()
    first = add(table, visibility_timeout_s=100)
    second = add(table, visibility_timeout_s=100)
    tokens = {job.id: job.claim_token for job in table.claim("q", "w", 2, T0)}
    before = list(table.jobs())
    items = [(first, tokens[first], "ok", 0.0), (second, tokens[second], None, None)]
    with pytest.raises(ValueError, match="resolved delay"):
        table.retry("q", items, at(1))
    assert list(table.jobs()) == before
    assert table.retry("q", items[:1], at(1)) == [True]
    assert ids(table.claim("q", "w", 10, at(1))) == [first]


# -- performance: O(log n) claims, not scans -----------------------------------------------


@contextmanager
def timed() -> Iterator[list[float]]:
    """CPU time of the block in this thread, with the cyclic GC paused so a collection of
    the 100,000 rows does not land inside a measurement. CPU, not wall time: the bounds
    are about the algorithm's cost, which other processes busy on the machine (a parallel
    test worker) do not change; on an idle machine the two are the same."""
    result: list[float] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    start = time.thread_time()
    try:
        yield result
    finally:
        result.append(time.thread_time() - start)
        if gc_was_enabled:
            gc.enable()


def big_table(n: int) -> JobTable:
    table = JobTable()
    table.enqueue([spec(priority=i % 7, visibility_timeout_s=30) for i in range(n)], T0)
    return table


def test_q3_perf_100k_jobs_claimed_in_batches_of_1_and_100_with_enqueues():
    """With 100,000 queued jobs a claim pops from a heap (O(log n)); a claim that scanned
    the table would cost ~100,000 row checks each, i.e. minutes for this test."""
    table = big_table(100_000)
    small = big_table(2_000)
    seen: set[int] = set()

    with timed() as big_singles:
        for _ in range(1_000):
            (job,) = table.claim("q", "w", 1, at(1))
            seen.add(job.id)
    with timed() as small_singles:
        for _ in range(1_000):
            assert len(small.claim("q", "w", 1, at(1))) == 1
    assert len(seen) == 1_000
    assert big_singles[0] < 0.5, f"1,000 single claims of 100,000 rows: {big_singles[0]:.3f}s"
    # The cost hardly depends on the table size (a scan would be ~50x slower here).
    assert big_singles[0] < 10 * small_singles[0] + 0.05, (big_singles, small_singles)

    # Drain the rest: single claims, batches of 100 and new enqueues, interleaved.
    added = 0
    with timed() as drain_time:
        while True:
            now = at(2 + added * 0.001)
            singles = table.claim("q", "w", 1, now)
            batch = table.claim("q", "w", 100, now)
            for job in (*singles, *batch):
                assert job.id not in seen, "handed out twice"
                seen.add(job.id)
            if not singles and not batch:
                break
            if added < 500:
                add(table, now, priority=added % 11)
                added += 1
    assert len(seen) == 100_000 + added
    assert drain_time[0] < 5.0, f"draining 100,000 rows took {drain_time[0]:.3f}s"


def test_q3_perf_lapsed_leases_are_reclaimed_without_a_scan():
    table = big_table(10_000)
    while table.claim("q", "w", 1000, T0):
        pass
    # 10,000 leases lapse together; single claims then pick them up one by one.
    with timed() as elapsed:
        for _ in range(1_000):
            (job,) = table.claim("q", "x", 1, at(31))
            assert job.attempts == 2
    assert elapsed[0] < 1.0, f"1,000 reclaims took {elapsed[0]:.3f}s"


# -- D24/D25: redrive and purge leave stale heap entries behind ------------------------


def test_d24_a_redriven_row_is_not_expired_by_its_old_expiry_entry():
    table = JobTable()
    job_id = add(table, expires_in_s=10, delay_s=1000)
    assert table.sweep_expired("q", None, at(11)) == SweepResult(1, 0)
    assert table.requeue_dead("q", [job_id], at(20)) == 1
    # The heap still holds the old (T0 + 10 s) entry: it must not expire the row.
    table._index("q").expiry.append((at(10), job_id))
    assert table.sweep_expired("q", None, at(25)) == SweepResult(0, 0)
    job = table.get(job_id, "q")
    assert job is not None
    assert (job.state, job.expires_at) == ("pending", at(30))
    assert table.sweep_expired("q", None, at(30) + ONE_US) == SweepResult(1, 0)


def test_d24_a_row_dead_again_after_a_redrive_keeps_its_new_retention():
    table = JobTable()
    job_id = add(table)
    (job,) = table.claim("q", "w", 1, T0)
    assert table.fail("q", [FailItem(job_id, job.claim_token, None)], T0)[0]
    assert table.requeue_dead("q", None, at(50)) == 1
    (job,) = table.claim("q", "w", 1, at(50))
    assert job.attempts == 1
    assert table.fail("q", [FailItem(job_id, job.claim_token, None)], at(50))[0]
    # The entry of the first death (T0) surfaces first: it must not purge the second.
    assert table.sweep_expired("q", 10, at(20)) == SweepResult(0, 0)
    assert table.get(job_id, "q") is not None
    assert table.sweep_expired("q", 10, at(60) + ONE_US) == SweepResult(0, 1)


def test_d25_purge_dead_then_sweep_counts_nothing_twice():
    table = JobTable()
    job_id = add(table)
    (job,) = table.claim("q", "w", 1, T0)
    assert table.fail("q", [FailItem(job_id, job.claim_token, None)], T0)[0]
    assert table.purge_dead("q", 5, at(5)) == 0
    assert table.purge_dead("q", 5, at(5) + ONE_US) == 1
    assert table.sweep_expired("q", 0, at(100)) == SweepResult(0, 0)


def test_d24_a_redriven_row_is_claimed_by_its_new_run_at_not_an_entry_of_its_first_life():
    """Regression (found by the engine-vs-model state machine): a row's heap entries are
    fenced by a generation; a redriven row must get one never used before, or the ready
    entry of its first life (older run_at) becomes valid again and jumps the queue."""
    table = JobTable()
    first = add(table, delay_s=-3, expires_in_s=10)  # ready entry keyed at T0 - 3 s
    assert table.sweep_expired("q", None, at(11)) == SweepResult(1, 0)
    older = add(table, at(12))  # run_at T0 + 12 s
    assert table.requeue_dead("q", [first], at(13)) == 1  # run_at T0 + 13 s now
    assert ids(table.claim("q", "w", 2, at(14))) == [older, first]
