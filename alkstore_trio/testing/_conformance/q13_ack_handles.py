"""Q13, batched claim operations, acks: ``queue.ack_handles`` (D18) and the fused
``queue.ack_handles_and_claim`` (D21, with Q3's claim and pre-claim sweep)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import HandleConsumed, InvalidArgument, QueueOpts
from ._helpers import (
    INSTANT_S,
    MAX_ATTEMPTS_EXCEEDED,
    _after,
    _assert_dead,
    _assert_gone,
    _assert_state,
    _check,
    _claim,
    _claim_id,
    _get,
    _raises,
)

if TYPE_CHECKING:
    from .._harness import EngineHarness


@_check
async def q13_ack_handles_acks_valid_claims_in_one_call_and_refuses_stale_ones(
    harness: EngineHarness,
) -> None:
    """Q4/R2 (D18): ``queue.ack_handles`` acks each handle under V, token included: valid
    claims are deleted; lapsed, reclaimed-by-another-worker (still held, or given back)
    and cancelled claims are refused per handle (False, row untouched); the result is one
    bool per handle, in order; afterwards every handle is consumed."""
    async with harness.open_store() as store:
        short = store.queue("ack-handles", QueueOpts(visibility_timeout_s=10))
        long = store.queue("ack-handles", QueueOpts(visibility_timeout_s=1000))
        reclaimed = await short.enqueue(b"reclaimed", priority=6)
        given_back = await short.enqueue(b"given-back", priority=5)
        valid_a = await long.enqueue(b"valid-a", priority=3)
        cancelled = await long.enqueue(b"cancelled", priority=2)
        valid_b = await long.enqueue(b"valid-b", priority=1)
        lapsed = await short.enqueue(b"lapsed", priority=0)
        stale = {h.id: h for h in await long.claim_batch("worker-a", 6)}
        assert len(stale) == 6, f"claim_batch(6) claimed {sorted(stale)}"
        await harness.advance(11)
        # Another worker reclaims the two best lapsed jobs: it keeps one (processing under
        # a newer token) and gives the other back (pending, attempts moved on).
        winners = {h.id: h for h in await long.claim_batch("worker-b", 2)}
        assert set(winners) == {reclaimed, given_back}, f"worker-b reclaimed {sorted(winners)}"
        assert await winners[given_back].retry("again", delay_s=10_000) is True, "retry refused"
        assert await long.cancel(cancelled) is True, "cancel refused"
        order = [lapsed, valid_a, reclaimed, cancelled, valid_b, given_back]
        expected = [False, True, False, False, True, False]
        handles = [stale[job_id] for job_id in order]
        refused = (lapsed, reclaimed, given_back)
        before = {job_id: await _get(long, job_id) for job_id in refused}
        results = await long.ack_handles(handles)
        assert results == expected, (
            f"ack_handles over {order} (lapsed, valid, reclaimed, cancelled, valid, given "
            f"back) returned {results}, expected {expected}"
        )
        await _assert_gone(long, valid_a, "ack_handles of a valid claim")
        await _assert_gone(long, valid_b, "ack_handles of a valid claim")
        # Q19.5: a cancelled claim's ack is refused; the row stays cancelling.
        await _assert_state(long, cancelled, "cancelling", "ack_handles of a cancelled claim")
        for job_id, row in before.items():
            after = await _get(long, job_id)
            assert after == row, f"a refused ack_handles changed job {job_id}: {row!r} -> {after!r}"
        for job_id, handle in zip(order, handles, strict=True):
            await _raises(HandleConsumed, f"ack() of handle {job_id} after ack_handles", handle.ack)
        await _raises(HandleConsumed, "ack_handles of consumed handles", long.ack_handles, handles)
        assert await winners[reclaimed].ack() is True, "the new holder could not ack"


@_check
async def q13_ack_handles_rejects_foreign_consumed_and_duplicate_handles_without_effect(
    harness: EngineHarness,
) -> None:
    """Q4/R2 (D18): a handle of another queue or store, a non-handle or a job listed twice
    is InvalidArgument; a consumed handle is HandleConsumed; either way nothing is acked
    and no handle is consumed. An empty list returns []."""
    async with harness.open_store() as store, harness.open_store() as elsewhere:
        queue = store.queue("ack-handles-check")
        other = store.queue("ack-handles-other")
        far = elsewhere.queue("ack-handles-check")
        ids = await queue.enqueue_many([b"a", b"b", b"c"])
        await other.enqueue(b"o")
        await far.enqueue(b"f")
        mine = await queue.claim_batch("w", 3)
        assert [h.id for h in mine] == ids, f"claimed {[h.id for h in mine]}, expected {ids}"
        foreign = await _claim(other, "w")
        remote = await _claim(far, "w")
        assert await queue.ack_handles([]) == [], "ack_handles([]) did not return []"
        bad_calls: list[tuple[str, object]] = [
            ("another queue's handle", [mine[0], foreign]),
            ("another store's handle", [mine[0], remote]),
            ("a job id", [mine[0], ids[1]]),
            ("a handle twice", [mine[0], mine[0]]),
            ("not an iterable", 5),
        ]
        for what, bad in bad_calls:
            await _raises(InvalidArgument, f"ack_handles with {what}", queue.ack_handles, bad)
        assert await mine[2].ack() is True, "ack refused"
        await _raises(HandleConsumed, "ack_handles with a consumed handle", queue.ack_handles, mine)
        for job_id in ids[:2]:
            await _assert_state(queue, job_id, "processing", "after rejected ack_handles calls")
        assert await queue.ack_handles(iter(mine[:2])) == [True, True], (
            "ack_handles of the untouched handles after the rejected calls did not ack them"
        )
        assert await foreign.ack() is True, "the other queue's handle was consumed or disturbed"
        assert await remote.ack() is True, "the other store's handle was consumed or disturbed"


@_check
async def q13_ack_handles_and_claim_acks_valid_claims_then_claims_the_best_n(
    harness: EngineHarness,
) -> None:
    """Q3/Q4/R2 (D21): ``queue.ack_handles_and_claim(handles, worker_id, n)`` is
    ``ack_handles(handles)`` then ``claim_batch(worker_id, n)`` in one atomic step: valid
    claims are deleted, lapsed, reclaimed and cancelled ones refused per handle (False,
    row untouched by the ack); then the n best claimable rows are claimed, best first,
    for ``worker_id``, at the same instant; every handle is consumed."""
    async with harness.open_store() as store:
        short = store.queue("ack-and-claim", QueueOpts(visibility_timeout_s=10))
        long = store.queue("ack-and-claim", QueueOpts(visibility_timeout_s=1000))
        reclaimed = await short.enqueue(b"reclaimed", priority=9)
        valid_a = await long.enqueue(b"valid-a", priority=8)
        cancelled = await long.enqueue(b"cancelled", priority=7)
        valid_b = await long.enqueue(b"valid-b", priority=6)
        lapsed = await short.enqueue(b"lapsed", priority=-5)
        stale = {h.id: h for h in await long.claim_batch("worker-a", 5)}
        assert len(stale) == 5, f"claim_batch(5) claimed {sorted(stale)}"
        await harness.advance(11)
        winner = await _claim(long, "worker-b", "the reclaim of the best lapsed job: ")
        assert winner.id == reclaimed, f"worker-b reclaimed {winner.id}, expected {reclaimed}"
        assert await long.cancel(cancelled) is True, "cancel refused"
        fresh_high = await long.enqueue(b"fresh-high", priority=3)
        fresh_mid = await long.enqueue(b"fresh-mid", priority=2)
        fresh_low = await long.enqueue(b"fresh-low", priority=1)
        order = [lapsed, valid_a, reclaimed, cancelled, valid_b]
        handles = [stale[job_id] for job_id in order]
        before = await _get(long, reclaimed)
        now = await harness.now()
        results, claimed = await long.ack_handles_and_claim(handles, "worker-c", 2)
        assert results == [False, True, False, False, True], (
            f"ack_handles_and_claim acks over {order} (lapsed, valid, reclaimed, cancelled, "
            f"valid) returned {results}, expected [False, True, False, False, True]"
        )
        assert [h.id for h in claimed] == [fresh_high, fresh_mid], (
            f"ack_handles_and_claim(n=2) claimed {[h.id for h in claimed]}, expected the two "
            f"best claimable jobs {[fresh_high, fresh_mid]} (priorities 3 and 2)"
        )
        for handle in claimed:
            job = handle.job
            seen = (job.state, job.attempts, job.claimed_by, job.claimed_at)
            assert seen == ("processing", 1, "worker-c", now), (
                f"claimed job {job.id} is {seen}, expected ('processing', 1, 'worker-c', {now})"
            )
            assert job.claim_expires_at == _after(now, 1000), (
                f"claimed job {job.id} has claim_expires_at {job.claim_expires_at}, "
                f"expected now + its visibility_timeout_s ({_after(now, 1000)})"
            )
            assert await _get(long, job.id) == job, f"the snapshot of job {job.id} is not the row"
        for job_id in (valid_a, valid_b):
            await _assert_gone(long, job_id, "ack_handles_and_claim of a valid claim")
        await _assert_state(long, cancelled, "cancelling", "ack_handles_and_claim, cancelled claim")
        assert await _get(long, reclaimed) == before, "a refused ack changed the reclaimed row"
        for job_id, handle in zip(order, handles, strict=True):
            await _raises(
                HandleConsumed, f"ack() of handle {job_id} after ack_handles_and_claim", handle.ack
            )
        # The lapsed row (attempts left) and the last fresh one are what remains.
        rest, more = await long.ack_handles_and_claim([], "worker-d", 10)
        assert rest == [], f"ack_handles_and_claim([]) acked {rest}"
        assert [h.id for h in more] == [fresh_low, lapsed], (
            f"ack_handles_and_claim([], n=10) claimed {[h.id for h in more]}, expected "
            f"{[fresh_low, lapsed]}"
        )
        assert await winner.ack() is True, "the new holder could not ack"


@_check
async def q13_ack_handles_and_claim_claims_after_the_acks_took_effect(
    harness: EngineHarness,
) -> None:
    """R2 (D21): the claim part runs after the acks: an acked job is never handed out
    again; a claim whose ack was refused because it lapsed is reclaimed by the same call
    when it is among the best (a reclaim consumes an attempt); with nothing else left
    the call hands out only what remains."""
    async with harness.open_store() as store:
        queue = store.queue("ack-then-claim", QueueOpts(visibility_timeout_s=10))
        done = await queue.enqueue(b"done", priority=5)
        late = await queue.enqueue(b"late", priority=4)
        held = {h.id: h for h in await queue.claim_batch("w1", 2)}
        assert set(held) == {done, late}, f"claim_batch(2) claimed {sorted(held)}"
        await harness.advance(10)
        # At the deadline instant both claims are valid: both acks go through and the
        # claim finds nothing (neither acked row comes back).
        results, claimed = await queue.ack_handles_and_claim(held.values(), "w2", 10)
        assert results == [True, True], f"acks at the deadline instant returned {results}"
        assert claimed == [], (
            f"the claim after the acks handed out {[h.id for h in claimed]}, expected nothing"
        )
        await _assert_gone(queue, done, "an acked job")
        await _assert_gone(queue, late, "an acked job")
        # One instant after its deadline a claim's ack is refused, and the same call
        # reclaims the job (attempt 2), beside the valid claim it acked.
        first = await queue.enqueue(b"first", priority=3)
        second = await queue.enqueue(b"second", priority=2)
        a = await _claim_id(queue, first, "w1")
        await harness.advance(5)
        b = await _claim_id(queue, second, "w1")
        await harness.advance(5 + INSTANT_S)
        results, claimed = await queue.ack_handles_and_claim([a, b], "w2", 10)
        assert results == [False, True], (
            f"acks of (lapsed, valid) returned {results}, expected [False, True]"
        )
        assert [(h.id, h.job.attempts, h.job.claimed_by) for h in claimed] == [(first, 2, "w2")], (
            f"the claim after the acks handed out "
            f"{[(h.id, h.job.attempts, h.job.claimed_by) for h in claimed]}, expected the "
            f"lapsed job {first} reclaimed by 'w2' on attempt 2"
        )
        await _assert_gone(queue, second, "the acked job")
        assert await claimed[0].ack() is True, "the reclaimed job's new handle could not ack"


@_check
async def q13_ack_handles_and_claim_runs_the_pre_claim_sweep_like_claim_batch(
    harness: EngineHarness,
) -> None:
    """Q3/R2 (D21): with ``n >= 1`` the claim part runs the pre-claim sweep (a lapsed
    claim at its budget is dead-lettered, "max attempts exceeded", died now), whether or
    not it hands anything out; with ``n <= 0`` only the acks run: no sweep, no claim
    (decision 5)."""
    async with harness.open_store() as store:
        queue = store.queue("ack-claim-sweep", QueueOpts(visibility_timeout_s=10, max_attempts=1))
        spent = await queue.enqueue(b"spent", priority=9)
        kept = await queue.enqueue(b"kept")
        await _claim_id(queue, spent, "w1")
        await harness.advance(5)
        kept_handle = await _claim_id(queue, kept, "w1")
        await harness.advance(6)
        ready = await queue.enqueue(b"ready")
        results, claimed = await queue.ack_handles_and_claim([kept_handle], "w2", 0)
        assert (results, claimed) == ([True], []), (
            f"ack_handles_and_claim(n=0) returned {(results, claimed)!r}, expected ([True], [])"
        )
        await _assert_gone(queue, kept, "an ack with n=0")
        job = await _assert_state(queue, spent, "processing", "after ack_handles_and_claim(n=0)")
        assert job.attempts == 1, f"n=0 touched the spent row: attempts {job.attempts}"
        await _assert_state(queue, ready, "pending", "after ack_handles_and_claim(n=0)")
        assert await queue.ack_handles_and_claim([], "w2", -3) == ([], []), (
            "ack_handles_and_claim([], n=-3) did not return ([], [])"
        )
        await _assert_state(queue, spent, "processing", "after ack_handles_and_claim([], n=-3)")
        results, claimed = await queue.ack_handles_and_claim([], "w2", 1)
        assert (results, [h.id for h in claimed]) == ([], [ready]), (
            f"ack_handles_and_claim([], n=1) returned {results}, "
            f"{[h.id for h in claimed]}, expected [], [{ready}]"
        )
        dead = await _assert_dead(harness, queue, spent, MAX_ATTEMPTS_EXCEEDED, "the sweep")
        assert dead.died_at == await harness.now(), "the sweep's died_at is not the call's now"
        # A fruitless call sweeps too.
        again = await queue.enqueue(b"again")
        held = await _claim_id(queue, again, "w3")
        await harness.advance(11)
        other = store.queue("ack-claim-sweep", QueueOpts(visibility_timeout_s=100))
        mine = await other.enqueue(b"mine")
        mine_handle = await _claim_id(other, mine, "w3")
        results, claimed = await other.ack_handles_and_claim([mine_handle], "w3", 5)
        assert (results, claimed) == ([True], []), (
            f"a fruitless ack_handles_and_claim returned {(results, claimed)!r}, "
            "expected ([True], [])"
        )
        await _assert_dead(harness, queue, held.id, MAX_ATTEMPTS_EXCEEDED, "a fruitless sweep")


@_check
async def q13_ack_handles_and_claim_rejects_bad_arguments_without_effect(
    harness: EngineHarness,
) -> None:
    """Q4/Q12/R2 (D21): a handle of another queue or store, a non-handle, a job listed
    twice, a bad ``worker_id`` or a non-int ``n`` is InvalidArgument; a consumed handle
    is HandleConsumed; either way nothing is acked, nothing is claimed or swept, and no
    handle is consumed."""
    async with harness.open_store() as store, harness.open_store() as elsewhere:
        queue = store.queue("ack-claim-check", QueueOpts(visibility_timeout_s=10, max_attempts=1))
        other = store.queue("ack-claim-other")
        far = elsewhere.queue("ack-claim-check")
        spent = await queue.enqueue(b"spent", priority=9)
        await _claim_id(queue, spent, "w0")
        await harness.advance(11)
        ids = await queue.enqueue_many([b"a", b"b", b"c"])
        mine = await queue.claim_batch("w", 3)
        assert [h.id for h in mine] == ids, f"claimed {[h.id for h in mine]}, expected {ids}"
        await _assert_dead(harness, queue, spent, MAX_ATTEMPTS_EXCEEDED, "setup sweep")
        waiting = await queue.enqueue(b"waiting")
        await other.enqueue(b"o")
        await far.enqueue(b"f")
        foreign = await _claim(other, "w")
        remote = await _claim(far, "w")
        # Make a new spent claim, so that a wrongly run claim would be seen sweeping it.
        lapsing_queue = store.queue(
            "ack-claim-check", QueueOpts(visibility_timeout_s=1, max_attempts=1)
        )
        lapsing = await lapsing_queue.enqueue(b"lapsing", priority=9)
        await _claim_id(queue, lapsing, "w0")
        await harness.advance(2)
        bad_calls: list[tuple[str, object, object, object]] = [
            ("another queue's handle", [mine[0], foreign], "w", 1),
            ("another store's handle", [mine[0], remote], "w", 1),
            ("a job id", [mine[0], ids[1]], "w", 1),
            ("a handle twice", [mine[0], mine[0]], "w", 1),
            ("not an iterable", 5, "w", 1),
            ("an empty worker_id", mine[:2], "", 1),
            ("a non-str worker_id", mine[:2], 7, 1),
            ("a float n", mine[:2], "w", 1.0),
            ("a bool n", mine[:2], "w", True),
            ("n=None", [], "w", None),
        ]
        for what, handles, worker, n in bad_calls:
            await _raises(
                InvalidArgument,
                f"ack_handles_and_claim with {what}",
                queue.ack_handles_and_claim,
                handles,
                worker,
                n,
            )
        assert await mine[2].ack() is True, "ack refused"
        await _raises(
            HandleConsumed,
            "ack_handles_and_claim with a consumed handle",
            queue.ack_handles_and_claim,
            mine,
            "w",
            1,
        )
        for job_id in ids[:2]:
            await _assert_state(queue, job_id, "processing", "after rejected calls")
        await _assert_state(queue, waiting, "pending", "after rejected calls")
        await _assert_state(queue, lapsing, "processing", "after rejected calls (no sweep)")
        results, claimed = await queue.ack_handles_and_claim(iter(mine[:2]), "w", 1)
        assert (results, [h.id for h in claimed]) == ([True, True], [waiting]), (
            "ack_handles_and_claim of the untouched handles after the rejected calls returned "
            f"{results}, {[h.id for h in claimed]}; expected [True, True], [{waiting}]"
        )
        await _assert_dead(harness, queue, lapsing, MAX_ATTEMPTS_EXCEEDED, "the call's sweep")
        assert await foreign.ack() is True, "the other queue's handle was consumed or disturbed"
        assert await remote.ack() is True, "the other store's handle was consumed or disturbed"
