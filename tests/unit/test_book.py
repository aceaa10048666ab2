"""The worker's claim book (R2, R5, R6, R7, R15, item 5), with no event loop: events in,
decisions out. Times are plain floats; handles are stand-ins with a ``job``."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from alkstore_trio._runtime._book import (
    ACK,
    CANCELLED,
    LEASE_UNCERTAIN,
    WORKER_STOPPED,
    ClaimBook,
    ClaimState,
    Outcome,
    Verdict,
    heartbeat_groups,
)


@dataclass
class FakeJob:
    id: int
    queue: str = "a"
    attempts: int = 1
    max_attempts: int = 3
    visibility_timeout_s: float = 30.0


@dataclass
class FakeHandle:
    job: FakeJob


_ids = iter(range(1, 1_000_000))


def handles(n, queue="a", **job):
    return [FakeHandle(FakeJob(next(_ids), queue, **job)) for _ in range(n)]


def book(queues=("a",), concurrency=10, batch=100, heartbeat=None):
    return ClaimBook(
        queues, concurrency=concurrency, claim_batch_max=batch, heartbeat_interval_s=heartbeat
    )


def claim_and_start(b, n=1, queue="a", at=0.0, **job):
    claims = b.claimed(queue, handles(n, queue, **job), n, sent_at=at, now=at)
    for claim in claims:
        assert b.start(claim, at)
    return claims


def finish(b, claim, result=ACK, at=1.0, **kw):
    b.finished(claim, result, **kw)
    return b.reported(claim, at)


# --- R2: claiming -----------------------------------------------------------------------


def test_r2_a_claim_asks_for_min_of_free_slots_and_the_batch_limit():
    b = book(concurrency=10, batch=4)
    assert b.wants_claim()
    assert b.claim_size("a") == 4
    b.claimed("a", handles(4), 4, sent_at=0, now=0)
    b.claimed("a", handles(4), 4, sent_at=0, now=0)
    assert b.claim_size("a") == 2
    b.claimed("a", handles(2), 2, sent_at=0, now=0)
    assert b.free == 0
    assert not b.wants_claim()
    assert b.claim_size("a") is None  # the round ends


def test_r2_a_full_claim_keeps_the_queue_woken_and_a_short_one_does_not():
    b = book(queues=("a", "b"))
    b.claimed("a", handles(3), 3, sent_at=0, now=0)
    assert b.woken == {"a", "b"}
    b.claimed("a", handles(1), 3, sent_at=0, now=0)
    assert b.woken == {"b"}
    assert b.claim_size("a") == 0  # skipped until woken
    b.wake({"a"})
    assert b.claim_size("a") > 0


def test_r2_queues_are_served_round_robin():
    b = book(queues=("a", "b", "c"))
    assert [b.claim_round() for _ in range(4)] == [
        ("a", "b", "c"),
        ("b", "c", "a"),
        ("c", "a", "b"),
        ("a", "b", "c"),
    ]


def test_r2_a_fused_claim_takes_the_queues_fair_share_of_the_freed_slots():
    b = book(queues=("a", "b"), concurrency=10)
    claim_and_start(b, 10)
    assert b.fused_claim_size("a", 4) == 2  # 4 freed, 2 queues woken
    b.claimed("b", handles(0, "b"), 5, sent_at=0, now=0)  # b is empty now
    assert b.fused_claim_size("a", 4) == 4


def test_r2_acks_of_an_idle_queue_go_alone_and_so_do_they_when_stopping():
    b = book(concurrency=10)
    claim_and_start(b, 2)
    b.claimed("a", [], 8, sent_at=0, now=0)  # short: idle
    assert b.fused_claim_size("a", 2) == 0
    b.wake({"a"})
    assert b.fused_claim_size("a", 2) == 10
    b.stop()
    assert b.fused_claim_size("a", 2) == 0


def test_r2_a_failed_claim_waits_for_the_next_wake_or_tick():
    b = book(queues=("a", "b"))
    b.claim_failed("a")
    assert b.woken == {"b"}
    b.tick()
    assert b.woken == {"a", "b"}


def test_r2_outcomes_go_out_as_one_statement_per_queue_and_kind():
    b = book(queues=("a", "b"))
    a1, a2, a3 = claim_and_start(b, 3, "a")
    (b1,) = claim_and_start(b, 1, "b")
    finish(b, a1, ACK)
    finish(b, a2, Outcome("retry", "boom", None))
    finish(b, a3, None)  # a BaseException escaped: released
    finish(b, b1, Outcome("fail", "no"))
    groups = b.settle_groups([a1, a2, a3, b1])
    assert groups == {
        ("a", "ack"): [a1],
        ("a", "retry"): [a2],
        ("a", "release"): [a3],  # R7: a stopped worker's release is its own statement
        ("b", "fail"): [b1],
    }
    assert a3.outcome == Outcome("release", WORKER_STOPPED, 0.0)


def test_r2_r8_an_outcome_whose_statement_failed_is_due_again_on_the_tick():
    b = book()
    claim, _other = claim_and_start(b, 2)
    finish(b, claim)
    assert b.tick() == [claim]  # the statement failed: still SETTLING
    assert b.settled(claim, True) == "ack"
    assert b.tick() == []


# --- R5 / item 5: starting and outcomes ---------------------------------------------------


def test_r5_the_lease_runs_from_when_the_claim_was_sent():
    b = book()
    (claim,) = b.claimed("a", handles(1, visibility_timeout_s=30), 1, sent_at=5.0, now=5.2)
    assert (claim.lease_until, claim.claimed_at, claim.state) == (35.0, 5.2, ClaimState.STARTING)
    assert claim.heartbeat_interval_s == 10.0  # a third of the visibility timeout
    assert (
        book(heartbeat=2.0).claimed("a", handles(1), 1, sent_at=0, now=0)[0].heartbeat_interval_s
        == 2.0
    )


def test_r5_item5_a_claim_whose_lease_lapsed_before_its_start_never_starts():
    b = book()
    (claim,) = b.claimed("a", handles(1, visibility_timeout_s=30), 1, sent_at=0, now=0)
    assert not b.start(claim, 30.0)  # the deadline itself is too late
    assert claim.state is ClaimState.LOST
    assert b.counts["lease_lost"] == 1
    b.finished(claim, None)
    assert b.reported(claim, 30.0) is Verdict.DISCARD
    assert claim not in b.claims
    assert b.settle_groups([claim]) == {}
    assert b.renewable([claim]) == {}


def test_r5_a_claim_started_before_its_deadline_runs():
    b = book()
    (claim,) = b.claimed("a", handles(1, visibility_timeout_s=30), 1, sent_at=0, now=0)
    assert b.start(claim, 29.999)
    assert claim.state is ClaimState.RUNNING
    assert not b.start(claim, 29.999)  # one start per claim


@pytest.mark.parametrize(
    ("outcome", "attempts", "result", "counter"),
    [
        (ACK, 1, "ack", "acked"),
        (ACK, 3, "ack", "acked"),
        (Outcome("retry", "e", 2.0), 1, "retry", "retried"),
        (Outcome("retry", "e", None), 3, "dead", "dead_lettered"),  # the last attempt
        (Outcome("fail", "e"), 1, "dead", "dead_lettered"),
    ],
)
def test_r5_outcomes_settle_as_the_contract_says(outcome, attempts, result, counter):
    b = book()
    (claim,) = claim_and_start(b, attempts=attempts, max_attempts=3)
    assert finish(b, claim, outcome) is Verdict.SEND
    assert b.settled(claim, True) == result
    assert b.counts[counter] == 1
    assert claim.state is ClaimState.DONE
    assert b.claims == set()


# --- R6: heartbeats and refusals -----------------------------------------------------------


def test_r6_a_renewal_pushes_the_deadline_while_the_scope_is_open():
    b = book()
    (claim,) = claim_and_start(b)
    assert b.renewed(claim, 10.0) == 40.0
    b.finished(claim, ACK)
    assert b.renewed(claim, 20.0) is None  # the scope is closed; the lease still moves
    assert claim.lease_until == 50.0


def test_r6_a_refused_renewal_loses_the_claim_once_and_discards_its_outcome():
    b = book()
    (claim,) = claim_and_start(b)
    assert b.refused(claim)
    assert not b.refused(claim)  # counted and logged once
    assert b.counts["lease_lost"] == 1
    assert b.renewable([claim]) == {}
    b.finished(claim, ACK)  # the handler returned before its cancellation landed
    assert b.reported(claim, 1.0) is Verdict.DISCARD
    assert b.settle_groups([claim]) == {}
    assert b.claims == set()


def test_r6_a_refused_outcome_is_lease_lost():
    b = book()
    (claim,) = claim_and_start(b)
    finish(b, claim)
    assert b.settled(claim, False) == "lost"
    assert (b.counts["lease_lost"], b.counts["acked"]) == (1, 0)
    assert b.claims == set()


def test_r6_a_handler_stopped_at_the_lease_deadline_is_lost():
    b = book()
    (claim,) = claim_and_start(b)
    b.finished(claim, None, deadline_hit=True)
    assert b.reported(claim, 30.0) is Verdict.LOSE
    assert b.counts["lease_lost"] == 1
    assert b.claims == set()


def test_r6_a_late_accepted_renewal_gives_the_stopped_handlers_job_back():
    b = book()
    (claim,) = claim_and_start(b)
    b.finished(claim, None, deadline_hit=True)  # stopped at 30
    b.renewed(claim, 10.0)  # ...the renewal sent at 10 is answered at 35
    assert b.reported(claim, 35.0) is Verdict.SEND
    assert claim.outcome == Outcome("release", LEASE_UNCERTAIN, 0.0)
    assert b.settled(claim, True) == "release"


def test_r6_heartbeat_actors_only_for_claims_still_running():
    b = book(heartbeat=5.0)
    running, done = claim_and_start(b, 2)
    b.finished(done, ACK)
    assert b.renewable([running, done, running]) == {"a": [running, done]}
    assert b.needs_heartbeat_actor(running)
    assert not b.needs_heartbeat_actor(done)
    running.heartbeat_scope = object()
    assert not b.needs_heartbeat_actor(running)  # it has one
    assert heartbeat_groups([running, done]) == {5.0: [running, done]}


# --- R7: graceful stop ---------------------------------------------------------------------


def test_r7_a_stop_stops_claiming():
    b = book()
    b.stop()
    assert not b.wants_claim()
    assert b.claim_size("a") is None


def test_r7_grace_over_cancels_running_and_unstarted_claims_and_releases_them():
    b = book()
    running = claim_and_start(b)[0]
    (unstarted,) = b.claimed("a", handles(1), 1, sent_at=0, now=0)
    settling = claim_and_start(b)[0]
    finish(b, settling)
    b.stop()
    assert set(b.grace_over()) == {running, unstarted}
    assert not b.start(unstarted, 1.0)  # never starts
    b.finished(unstarted, None)
    b.finished(running, None)
    assert b.reported(unstarted, 2.0) is Verdict.SEND
    assert b.reported(running, 2.0) is Verdict.SEND
    assert unstarted.outcome == running.outcome == Outcome("release", WORKER_STOPPED, 0.0)
    assert b.only_settling()
    assert b.settled(running, True) == "release"
    assert b.counts["released"] == 1


def test_r7_a_cancelled_handler_that_returned_anyway_keeps_its_outcome():
    b = book()
    (claim,) = claim_and_start(b)
    b.grace_over()
    b.finished(claim, ACK)
    assert b.reported(claim, 1.0) is Verdict.SEND
    assert claim.outcome is ACK


def test_r7_open_scopes_are_those_still_able_to_run():
    b = book()
    running, finished = claim_and_start(b, 2)
    b.finished(finished, ACK)
    assert b.open_scopes() == [running]


# --- R12 per-queue caps ----------------------------------------------------------------


def capped(caps, queues=("a", "b"), concurrency=10, prefetch=0):
    return ClaimBook(
        queues,
        concurrency=concurrency,
        claim_batch_max=100,
        heartbeat_interval_s=None,
        prefetch=prefetch,
        queue_concurrency=caps,
    )


def test_r12_2_a_claim_is_sized_by_the_queues_free_slots_and_the_workers():
    b = capped({"a": 3})
    assert b.claim_size("a") == 3
    assert b.claim_size("b") == 10
    claim_and_start(b, 2, "a")
    assert b.claim_size("a") == 1
    assert b.claim_size("b") == 8
    claim_and_start(b, 1, "a")
    assert b.claim_size("a") == 0  # at its cap: skipped, the round goes on
    assert b.claim_size("b") == 7


def test_r12_3_a_capped_queue_at_its_cap_takes_no_share_and_starves_none():
    b = capped({"a": 2}, concurrency=4)
    running_a = claim_and_start(b, 2, "a")
    running_b = claim_and_start(b, 2, "b")
    assert b.wants_claim() is False  # no free slot at all
    for claim in running_b:
        assert finish(b, claim) is Verdict.SEND
    # b's two acks free two slots; a is woken but at its cap: b's share is all of them.
    assert b.fused_claim_size("b", 2) == 2
    for claim in running_b:
        b.settled(claim, True)
    assert b.wants_claim() is True
    assert b.claim_size("a") == 0
    assert b.claim_size("b") == 2
    # Only a woken, at its cap: nothing to claim (and no spinning on it).
    b.woken.discard("b")
    assert b.wants_claim() is False
    # An ack of a frees a slot of a: its fused claim asks for it.
    assert finish(b, running_a[0]) is Verdict.SEND
    assert b.fused_claim_size("a", 1) == 1


def test_r12_4_prefetch_never_holds_a_capped_queue_beyond_its_cap():
    b = capped({"a": 2}, concurrency=2, prefetch=4)
    assert b.next_pipelined_claim() == ("a", 2)
    b.claim_answered()
    b.claimed("a", handles(2, "a"), 2, sent_at=0.0, now=0.0)
    assert b.next_pipelined_claim() == ("b", 4)  # the total's prefetch goes to b
    b.claim_answered()
    assert b.held == {"a": 2}


# --- R15: cancel announcements --------------------------------------------------------


def test_r15_an_announcement_aborts_a_running_claim_whose_outcome_is_cancelled():
    b = book()
    (claim,) = claim_and_start(b)
    aborted, unstarted = b.cancel_requested([claim.handle.job.id, 10**9], now=2.0)
    assert (aborted, unstarted) == ([claim], [])
    assert (claim.state, claim.aborted_at) == (ClaimState.ABORTING, 2.0)
    assert b.renewable([claim]) == {}  # its renewal would be refused: none is sent
    assert b.refused(claim) is False  # and a refusal does not lose it
    assert claim.state is ClaimState.ABORTING
    # Whatever the handler did while being cancelled, the job is cancelled.
    assert finish(b, claim, ACK, at=2.5) is Verdict.SEND
    assert claim.outcome is CANCELLED
    assert b.settle_groups([claim]) == {("a", "cancelled"): [claim]}
    assert b.settled(claim, True) == "cancelled"
    assert b.counts["cancelled"] == 1
    assert b.counts["lease_lost"] == 0
    assert claim not in b.claims


def test_r15_an_unstarted_claim_never_starts_and_is_settled_cancelled():
    b = book()
    (claim,) = b.claimed("a", handles(1), 1, sent_at=0.0, now=0.0)
    aborted, unstarted = b.cancel_requested([claim.handle.job.id], now=1.0)
    assert (aborted, unstarted) == ([], [claim])
    assert (claim.state, claim.outcome) == (ClaimState.FINISHED, CANCELLED)
    assert b.start(claim, 1.0) is False
    assert b.reported(claim, 1.0) is Verdict.SEND
    assert b.settled(claim, True) == "cancelled"


def test_r15_a_finished_claims_outcome_becomes_cancelled_and_a_settling_one_is_left():
    b = book()
    finished, settling = claim_and_start(b, 2)
    b.finished(finished, ACK)
    assert finish(b, settling, ACK) is Verdict.SEND
    ids = [c.handle.job.id for c in (finished, settling)]
    assert b.cancel_requested(ids, now=3.0) == ([], [])
    assert (finished.state, finished.outcome) == (ClaimState.FINISHED, CANCELLED)
    assert (settling.state, settling.outcome) == (ClaimState.SETTLING, ACK)
    # The settling ack is refused (the job is cancelling); the dispatcher's settle_cancelled
    # then settles it: recorded cancelled, not lost.
    assert b.settled(settling, False, cancelled=True) == "cancelled"
    assert (b.counts["cancelled"], b.counts["lease_lost"]) == (1, 0)


def test_r15_a_stop_being_cancelled_gives_way_to_the_cancel():
    b = book()
    (claim,) = claim_and_start(b)
    b.stop()
    assert b.grace_over() == [claim]
    aborted, _ = b.cancel_requested([claim.handle.job.id], now=1.0)
    assert aborted == [claim]
    assert b.open_scopes() == [claim]  # cancelled again if the worker must end
    b.finished(claim, None)
    assert claim.outcome is CANCELLED  # not a release


def test_r15_abortable_lists_the_claims_whose_handlers_run_or_have_yet_to_start():
    b = book(queues=("a", "b"))
    running = claim_and_start(b, 1, "a")
    waiting = b.claimed("b", handles(1, "b"), 1, sent_at=0.0, now=0.0)
    (done,) = claim_and_start(b, 1, "b")
    b.finished(done, ACK)
    assert b.abortable() == {"a": running, "b": waiting}


# --- R16: transactional completion ------------------------------------------------------


def test_r16_a_committed_transaction_completes_the_claim_and_nothing_is_sent():
    b = book()
    (claim,) = claim_and_start(b)
    assert b.committing(claim)
    assert claim.state is ClaimState.COMMITTING
    assert b.committed(claim, True) is False
    assert claim.in_tx
    assert claim.state is ClaimState.RUNNING
    assert b.renewable([claim]) == {}  # gone from the store: nothing to renew
    assert b.refused(claim) is False  # and a late refusal is no news
    assert finish(b, claim, Outcome("retry", "raised after the commit")) is Verdict.DISCARD
    assert b.settle_groups([claim]) == {}
    assert (b.counts["acked"], b.counts["completed_in_tx"], b.counts["lease_lost"]) == (1, 1, 0)
    assert not b.claims


def test_r16_a_refusal_during_the_commit_waits_for_its_outcome():
    b = book()
    committed, refused = claim_and_start(b, 2)
    for claim in (committed, refused):
        assert b.committing(claim)
        assert b.refused(claim) is False  # held: the heartbeat waited on the row lock
        assert claim.state is ClaimState.COMMITTING
        assert claim in b.renewable([claim])["a"]  # its lease still matters meanwhile
    assert b.committed(committed, True) is False
    assert committed.in_tx
    assert b.counts["lease_lost"] == 0
    assert b.committed(refused, False) is True  # rolled back: the claim is lost now
    assert refused.state is ClaimState.LOST
    assert b.counts["lease_lost"] == 1
    assert finish(b, refused, Outcome("lost")) is Verdict.DISCARD


def test_r16_only_a_running_claim_may_commit_and_only_once():
    b = book()
    (claim,) = claim_and_start(b)
    b.refused(claim)  # lost before the block ended
    assert b.committing(claim) is False
    (claim,) = claim_and_start(b)
    assert b.committing(claim)
    assert b.committed(claim, True) is False
    assert b.committing(claim) is False  # completed already
    assert b.committed(claim, True) is False  # not committing: no effect


def test_r16_a_cancel_announced_during_the_commit_is_settled_by_its_outcome():
    b = book()
    won, lost = claim_and_start(b, 2)
    for claim in (won, lost):
        assert b.committing(claim)
    aborted, unstarted = b.cancel_requested([won.handle.job.id, lost.handle.job.id], 2.0)
    assert (aborted, unstarted) == ([], [])  # the commit is not interrupted
    b.committed(won, True)  # the completion won: the job completed, not cancelled
    assert finish(b, won) is Verdict.DISCARD
    assert b.counts["completed_in_tx"] == 1
    b.committed(lost, False)  # refused (the row is cancelling): settle it as cancelled
    assert lost.state is ClaimState.ABORTING
    assert finish(b, lost, None) is Verdict.SEND
    assert lost.outcome is CANCELLED
