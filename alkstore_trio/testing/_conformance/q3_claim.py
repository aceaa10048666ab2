"""Q3 claim: the claim order, batches and their extent guard (D5), the claim fields,
reclaims, the pre-claim sweep and the exactly-once handout."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import trio

from ... import InvalidArgument, JobHandle, QueueOpts
from ._helpers import (
    INSTANT_S,
    MAX_ATTEMPTS_EXCEEDED,
    _after,
    _assert_dead,
    _assert_state,
    _check,
    _claim,
    _claim_id,
    _get,
    _raises,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._harness import EngineHarness


@_check
async def q3_claim_order_is_priority_then_run_at_then_id(harness: EngineHarness) -> None:
    """Q3: claimable rows are handed out by priority DESC, then run_at ASC, then id ASC;
    rows not yet due wait."""
    async with harness.open_store() as store:
        now = await harness.now()
        queue = store.queue("order")
        a = await queue.enqueue(b"a", priority=0, run_at=_after(now, -10))
        b = await queue.enqueue(b"b", priority=5)
        c = await queue.enqueue(b"c", priority=5, run_at=_after(now, -5))
        d = await queue.enqueue(b"d", priority=0, run_at=_after(now, -10))
        e = await queue.enqueue(b"e", priority=-3, delay_s=-100)
        f = await queue.enqueue(b"f", priority=5, run_at=_after(now, -5))
        g = await queue.enqueue(b"g", priority=10, delay_s=5)
        expected = [c, f, b, a, d, e]
        got = []
        while (handle := await queue.claim_one("w")) is not None:
            got.append(handle.id)
        assert got == expected, f"claim order was {got}, expected {expected} (priority, run_at, id)"
        await harness.advance(5)
        await _claim_id(queue, g)


@_check
async def q3_reclaimable_rows_take_their_place_in_the_order(harness: EngineHarness) -> None:
    """Q3: a lapsed claim with attempts left competes with pending rows in the same
    order (priority DESC, run_at ASC, id ASC)."""
    async with harness.open_store() as store:
        queue = store.queue("reclaim-order", QueueOpts(visibility_timeout_s=10))
        middle = await queue.enqueue(b"middle", priority=1)
        await _claim_id(queue, middle, "w1")
        low = await queue.enqueue(b"low", priority=0)
        high = await queue.enqueue(b"high", priority=2)
        await harness.advance(11)
        got = [h.id for h in [await _claim(queue, "w2") for _ in range(3)]]
        assert got == [high, middle, low], (
            f"claim order with a reclaimable row was {got}, expected {[high, middle, low]}"
        )


@_check
async def q3_claim_batch_takes_the_best_n(harness: EngineHarness) -> None:
    """Q3: claim_batch(n) claims the n best claimable rows, at most what there is; an
    empty or drained queue gives ``[]`` / ``None``."""
    async with harness.open_store() as store:
        queue = store.queue("batch")
        assert await queue.claim_one("w") is None, "claim_one on an empty queue returned a job"
        assert await queue.claim_batch("w", 5) == [], "claim_batch on an empty queue returned jobs"
        ids = {p: await queue.enqueue(b"%d" % p, priority=p) for p in [1, 4, 2, 5, 3]}
        first = await queue.claim_batch("w", 3)
        assert {h.id for h in first} == {ids[5], ids[4], ids[3]}, (
            f"claim_batch(3) took {sorted(h.id for h in first)}, expected the priorities 5, 4, 3"
        )
        rest = await queue.claim_batch("w", 10)
        assert {h.id for h in rest} == {ids[1], ids[2]}, (
            f"claim_batch(10) took {sorted(h.id for h in rest)}, expected the 2 remaining jobs"
        )
        assert await queue.claim_batch("w", 10) == [], "a drained queue still handed out jobs"


@_check
async def q3_claim_batch_with_n_at_most_zero_has_no_effect(harness: EngineHarness) -> None:
    """Q3 and decision 5: ``n <= 0`` returns ``[]`` before any effect, not even the
    pre-claim sweep; worker_id and the type of n are still validated."""
    async with harness.open_store() as store:
        queue = store.queue("zero-n", QueueOpts(visibility_timeout_s=10, max_attempts=1))
        spent = await queue.enqueue(b"spent", priority=1)
        await _claim_id(queue, spent)
        await harness.advance(11)
        ready = await queue.enqueue(b"ready")
        for n in [0, -1, -(2**40)]:
            got = await queue.claim_batch("w", n)
            assert got == [], f"claim_batch('w', {n}) returned {got!r}, expected []"
        await _raises(InvalidArgument, "claim_batch('', 0)", queue.claim_batch, "", 0)
        job = await _assert_state(queue, spent, "processing", "after claim_batch(n <= 0)")
        assert job.attempts == 1, (
            f"after claim_batch(n <= 0) the lapsed row has {job.attempts} attempts"
        )
        job = await _assert_state(queue, ready, "pending", "after claim_batch(n <= 0)")
        assert job.attempts == 0, f"claim_batch(n <= 0) claimed job {ready}"
        await _claim_id(queue, ready)
        await _assert_dead(harness, queue, spent, MAX_ATTEMPTS_EXCEEDED, "the next real claim")


@_check
async def q3_claim_batch_n_must_be_an_int(harness: EngineHarness) -> None:
    """Q3: n must be an int: a float, str or None is InvalidArgument and claims nothing."""
    async with harness.open_store() as store:
        queue = store.queue("n-type")
        job_id = await queue.enqueue(b"x")
        for bad in [1.0, 2.5, "1", None, float("nan")]:
            await _raises(
                InvalidArgument, f"claim_batch('w', {bad!r})", queue.claim_batch, "w", bad
            )
        await _assert_state(queue, job_id, "pending", "after rejected n values")


@_check
async def q3_worker_id_must_be_a_non_empty_str(harness: EngineHarness) -> None:
    """Q3 and decision 9: worker_id is a non-empty str of at most 200 characters without
    NUL or lone surrogates; anything else is InvalidArgument and claims nothing."""
    async with harness.open_store() as store:
        queue = store.queue("worker-ids")
        ids = await queue.enqueue_many([b"1", b"2"])
        for bad in ["", None, 7, b"worker", ["w"], "w\x00", "\ud800", "w" * 201]:
            shown = bad if not isinstance(bad, str) or len(bad) < 20 else f"<{len(bad)} chars>"
            await _raises(InvalidArgument, f"claim_one({shown!r})", queue.claim_one, bad)
            await _raises(InvalidArgument, f"claim_batch({shown!r}, 1)", queue.claim_batch, bad, 1)
        for job_id in ids:
            await _assert_state(queue, job_id, "pending", "after rejected worker ids")
        for worker in ["w" * 200, "wörker-ü 1"]:
            handle = await _claim(queue, worker)
            job = await _get(queue, handle.id)
            assert job.claimed_by == worker, (
                f"claimed_by is {job.claimed_by!r}, expected {worker!r}"
            )


@_check
async def q3_claim_sets_the_claim_fields(harness: EngineHarness) -> None:
    """Q3: a claim sets state processing, attempts + 1, claimed_by, claimed_at = now and
    claim_expires_at = now + the row's own visibility_timeout_s; the handle's snapshot is
    the claimed row."""
    async with harness.open_store() as store:
        short = store.queue("fields", QueueOpts(visibility_timeout_s=17))
        long = store.queue("fields", QueueOpts(visibility_timeout_s=1000))
        short_id = await short.enqueue(b"short", priority=1)
        long_id = await long.enqueue(b"long")
        await harness.advance(2)
        now = await harness.now()
        handles = await short.claim_batch("worker-7", 2)
        assert {h.id for h in handles} == {short_id, long_id}, (
            "claim_batch(2) did not take both jobs"
        )
        for handle in handles:
            own = 17 if handle.id == short_id else 1000
            row = await _get(short, handle.id)
            assert handle.job == row, (
                f"the handle's snapshot {handle.job!r} differs from the row {row!r}"
            )
            assert handle.id == row.id, "handle.id differs from the row's id"
            seen = (row.state, row.attempts, row.claimed_by, row.claimed_at, row.claim_expires_at)
            expected = ("processing", 1, "worker-7", now, _after(now, own))
            assert seen == expected, (
                f"claimed job {row.id}: (state, attempts, claimed_by, claimed_at, "
                f"claim_expires_at) = {seen!r}, expected {expected!r}"
            )
            assert row.run_at == row.enqueued_at, "a claim changed run_at"


@_check
async def q3_delayed_rows_are_not_claimable_until_due(harness: EngineHarness) -> None:
    """Q3: a pending row is claimable when ``run_at <= now``: not before, exactly at."""
    async with harness.open_store() as store:
        queue = store.queue("delayed")
        job_id = await queue.enqueue(b"x", delay_s=30)
        assert await queue.claim_one("w") is None, "a job delayed 30 s was claimable at once"
        await harness.advance(30 - INSTANT_S)
        assert await queue.claim_one("w") is None, "a delayed job was claimable before run_at"
        await harness.advance(INSTANT_S)
        await _claim_id(queue, job_id)


@_check
async def q3_expired_rows_are_never_claimed(harness: EngineHarness) -> None:
    """Q3: a row with ``now > expires_at`` is never claimed, pending or lapsed (it waits for
    the sweep); at ``now == expires_at`` it is not expired yet."""
    async with harness.open_store() as store:
        queue = store.queue("expired", QueueOpts(expires_in_s=60, visibility_timeout_s=10))
        first = await queue.enqueue(b"first", priority=1)
        second = await queue.enqueue(b"second")
        await harness.advance(60)
        await _claim_id(queue, first)
        await harness.advance(INSTANT_S)
        assert await queue.claim_one("w") is None, "an expired pending job was claimed"
        await harness.advance(11)
        assert await queue.claim_one("w") is None, "an expired, lapsed claim was reclaimed"
        await _assert_state(queue, second, "pending", "an expired row before the sweep")
        job = await _assert_state(queue, first, "processing", "an expired lapsed row")
        assert job.attempts == 1, f"an expired row was reclaimed: attempts {job.attempts}"


@_check
async def q3_reclaim_after_the_deadline_consumes_an_attempt(harness: EngineHarness) -> None:
    """Q3: after the deadline another worker reclaims the row: attempts + 1, new
    claimed_by / claimed_at / deadline."""
    async with harness.open_store() as store:
        queue = store.queue("reclaim", QueueOpts(visibility_timeout_s=30))
        job_id = await queue.enqueue(b"x")
        first = await _claim_id(queue, job_id, "w1")
        assert first.job.attempts == 1, f"first claim shows attempts {first.job.attempts}"
        await harness.advance(31)
        now = await harness.now()
        second = await _claim_id(queue, job_id, "w2")
        row = await _get(queue, job_id)
        seen = (row.attempts, row.claimed_by, row.claimed_at, row.claim_expires_at)
        expected = (2, "w2", now, _after(now, 30))
        assert seen == expected, (
            f"reclaimed row: (attempts, claimed_by, claimed_at, claim_expires_at) = {seen!r}, "
            f"expected {expected!r}"
        )
        assert second.job.attempts == 2, (
            f"the reclaim's snapshot shows attempts {second.job.attempts}"
        )


@_check
async def q3_reclaimed_holder_is_refused_and_the_row_untouched(harness: EngineHarness) -> None:
    """Q3/Q4: once another worker reclaimed the row, the first holder's heartbeat, ack,
    retry and fail return False and change nothing; the new holder's work."""
    async with harness.open_store() as store:
        queue = store.queue("loser", QueueOpts(visibility_timeout_s=30))
        ids = await queue.enqueue_many([b"hb", b"ack", b"retry", b"fail"])
        losers = {h.id: h for h in await queue.claim_batch("loser", 4)}
        assert set(losers) == set(ids), "claim_batch(4) did not claim the 4 jobs"
        await harness.advance(31)
        winners = {h.id: h for h in await queue.claim_batch("winner", 4)}
        assert set(winners) == set(ids), "the 4 lapsed jobs were not all reclaimed"
        operations: list[tuple[str, Callable[[JobHandle], Awaitable[bool]]]] = [
            ("heartbeat", lambda h: h.heartbeat()),
            ("ack", lambda h: h.ack()),
            ("retry", lambda h: h.retry("late", delay_s=0)),
            ("fail", lambda h: h.fail("late")),
        ]
        for job_id, (name, operation) in zip(ids, operations, strict=True):
            before = await _get(queue, job_id)
            result = await operation(losers[job_id])
            assert result is False, (
                f"the reclaimed holder's {name} returned {result!r}, expected False"
            )
            after = await _get(queue, job_id)
            assert after == before, f"the refused {name} changed the row: {before!r} -> {after!r}"
        for job_id in ids:
            assert await winners[job_id].ack() is True, (
                f"the new holder of job {job_id} could not ack"
            )


@_check
async def q3_pre_claim_sweep_dead_letters_lapsed_claims_at_budget(harness: EngineHarness) -> None:
    """Q3 step 1: a lapsed claim with no attempts left stays processing until the next
    claim on *its* queue, which dead-letters it ("max attempts exceeded"), whether or not
    that claim hands anything out."""
    async with harness.open_store() as store:
        queue = store.queue("budget", QueueOpts(visibility_timeout_s=10, max_attempts=2))
        other = store.queue("budget-elsewhere")
        await other.enqueue(b"other")
        spent = await queue.enqueue(b"spent")
        await _claim_id(queue, spent, "w1")
        await harness.advance(11)
        await _claim_id(queue, spent, "w2")
        await harness.advance(11)
        job = await _assert_state(
            queue, spent, "processing", "a lapsed row at budget before a claim"
        )
        assert job.attempts == 2, f"attempts is {job.attempts}, expected 2"
        await _claim(other, "w3", "claim on another queue: ")
        await _assert_state(queue, spent, "processing", "after a claim on another queue")
        assert await queue.claim_one("w3") is None, "a lapsed claim at its budget was reclaimed"
        dead = await _assert_dead(harness, queue, spent, MAX_ATTEMPTS_EXCEEDED, "pre-claim sweep")
        now = await harness.now()
        assert dead.died_at == now, f"died_at is {dead.died_at}, expected the claim's now ({now})"
        assert (dead.attempts, dead.claimed_by) == (2, "w2"), (
            f"decision 1: the dead row keeps attempts and claimed_by; got "
            f"{(dead.attempts, dead.claimed_by)!r}, expected (2, 'w2')"
        )
        # The same when the sweeping claim does hand something out.
        once = store.queue("budget-once", QueueOpts(visibility_timeout_s=10, max_attempts=1))
        lapsed = await once.enqueue(b"lapsed", priority=9)
        await _claim_id(once, lapsed)
        await harness.advance(11)
        fresh = await once.enqueue(b"fresh")
        await _claim_id(once, fresh)
        await _assert_dead(
            harness, once, lapsed, MAX_ATTEMPTS_EXCEEDED, "sweep by a fruitful claim"
        )


@_check
async def q3_concurrent_claims_hand_out_each_job_exactly_once(harness: EngineHarness) -> None:
    """Q3: ten trio tasks claiming concurrently (claim_one and claim_batch) hand out every
    job exactly once; after the leases lapse, concurrent reclaims again hand out each
    (job id, attempts) pair exactly once, and the old holders are refused."""
    async with harness.open_store() as store:
        queue = store.queue("exactly-once", QueueOpts(visibility_timeout_s=60, max_attempts=5))
        ids = await queue.enqueue_many([b"%d" % i for i in range(64)])

        async def claim_everything(rounds: list[tuple[str, JobHandle]]) -> None:
            async def claimer(worker: str, k: int) -> None:
                while True:
                    if k == 1:
                        handle = await queue.claim_one(worker)
                        batch = [] if handle is None else [handle]
                    else:
                        batch = await queue.claim_batch(worker, k)
                    if not batch:
                        return
                    rounds.extend((worker, h) for h in batch)
                    await trio.lowlevel.checkpoint()

            async with trio.open_nursery() as nursery:
                for i in range(10):
                    nursery.start_soon(claimer, f"worker-{i}", 1 + i % 4)

        first_round: list[tuple[str, JobHandle]] = []
        second_round: list[tuple[str, JobHandle]] = []
        for attempt in [1, 2]:
            handouts: list[tuple[str, JobHandle]] = first_round if attempt == 1 else []
            await claim_everything(handouts)
            counts = Counter(h.id for _, h in handouts)
            twice = sorted(job_id for job_id, n in counts.items() if n > 1)
            assert not twice, f"round {attempt}: jobs handed out more than once: {twice}"
            missing = sorted(set(ids) - set(counts))
            assert not missing, f"round {attempt}: jobs never handed out: {missing}"
            tokens = {h.job.attempts for _, h in handouts}
            assert tokens == {attempt}, f"round {attempt}: claim tokens were {sorted(tokens)}"
            for worker, handle in handouts:
                row = await _get(queue, handle.id)
                assert row.claimed_by == worker, (
                    f"round {attempt}: job {handle.id} was handed to {worker} but the row says "
                    f"{row.claimed_by!r}"
                )
            if attempt == 1:
                await harness.advance(61)
            else:
                second_round = handouts
        refused = [await h.ack() for _, h in first_round]
        assert not any(refused), (
            f"{sum(refused)} acks of first-round holders succeeded after reclaim"
        )
        acked = [await h.ack() for _, h in second_round]
        assert all(acked), f"{acked.count(False)} acks of second-round holders were refused"
