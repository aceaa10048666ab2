"""Q19.5 cancel (it replaces Q7): ``queue.cancel`` finalizes a pending row at once and
makes a processing row *cancelling* (live, out of every claim, its holder refused) until
its holder settles it (``settle_cancelled``) or the sweep finds its lease lapsed; dead,
unknown and other queues' rows are not touched."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ... import InvalidArgument, QueueOpts, SweepResult
from ._helpers import (
    INSTANT_S,
    _assert_gone,
    _assert_state,
    _check,
    _claim_id,
    _get,
    _nothing_claimable,
    _raises,
)

if TYPE_CHECKING:
    from ... import Queue, Store
    from .._harness import EngineHarness


async def _cancel_counts(store: Store, queue: Queue) -> tuple[int, int, int]:
    """(processing, cancelling, cancelled_total) of ``queue``."""
    entry = (await store.stats()).queue(queue.name)
    assert entry is not None, f"stats() does not list queue {queue.name!r}"
    return entry.processing, entry.cancelling, entry.cancelled_total


@_check
async def q19_5_cancel_finalizes_a_pending_row_at_once(harness: EngineHarness) -> None:
    """Q19.5: cancel finalizes a pending row (delayed or ready) at once, counted as
    cancelled; a second cancel is False."""
    async with harness.open_store() as store:
        queue = store.queue("cancel-pending")
        ready = await queue.enqueue(b"ready")
        delayed = await queue.enqueue(b"delayed", delay_s=60)
        for count, job_id in enumerate([ready, delayed], start=1):
            assert await queue.cancel(job_id) is True, (
                f"cancel of pending job {job_id} returned False"
            )
            await _assert_gone(queue, job_id, "cancel of a pending job")
            assert await queue.cancel(job_id) is False, "a second cancel returned True"
            seen = await _cancel_counts(store, queue)
            assert seen == (0, 0, count), f"(processing, cancelling, cancelled) = {seen}"
        await harness.advance(60)
        await _nothing_claimable(queue, "after cancelling every pending job")


@_check
async def q19_5_cancel_makes_a_processing_row_cancelling_and_refuses_its_holder(
    harness: EngineHarness,
) -> None:
    """Q19.5: cancel of a processing row under a live lease makes it ``cancelling`` (its
    claim fields and token kept), counted in ``stats().cancelling``, not yet cancelled;
    its holder's heartbeat, ack, retry, release and fail are refused and change nothing;
    no claim hands it out, even after its lease lapsed; a second cancel is True again."""
    async with harness.open_store() as store:
        queue = store.queue("cancel-processing", QueueOpts(visibility_timeout_s=100))
        ids = await queue.enqueue_many([b"ack", b"retry", b"fail", b"release"])
        handles = {h.id: h for h in await queue.claim_batch("holder", 4)}
        for job_id in ids:
            before = await _get(queue, job_id)
            assert await queue.cancel(job_id) is True, f"cancel of job {job_id} returned False"
            after = await _assert_state(queue, job_id, "cancelling", "cancel of a processing job")
            claim, kept = (
                (
                    job.attempts,
                    job.claim_token,
                    job.claimed_by,
                    job.claimed_at,
                    job.claim_expires_at,
                )
                for job in (after, before)
            )
            assert claim == kept, f"cancel changed the claim fields of job {job_id}: {claim}"
        seen = await _cancel_counts(store, queue)
        assert seen == (0, 4, 0), f"(processing, cancelling, cancelled) = {seen}, not (0, 4, 0)"
        first, second, third, fourth = (handles[i] for i in ids)
        assert await first.heartbeat() is False, "heartbeat of a cancelling job was not refused"
        assert await first.ack() is False, "ack of a cancelling job was not refused"
        assert await second.retry(delay_s=0) is False, "retry of a cancelling job was not refused"
        assert await third.fail() is False, "fail of a cancelling job was not refused"
        assert await fourth.release() is False, "release of a cancelling job was not refused"
        assert await queue.ack_batch(ids) == 0, "ack_batch acked a cancelling job"
        for job_id in ids:
            await _assert_state(queue, job_id, "cancelling", "a refused operation")
            assert await queue.cancel(job_id) is True, "a second cancel of a cancelling job"
        await harness.advance(100 + INSTANT_S)
        await _nothing_claimable(queue, "with only cancelling rows, their leases lapsed")
        assert await queue.cancelling_among([*ids, 10**12]) == ids, "cancelling_among"


@_check
async def q19_5_settle_cancelled_finalizes_its_holders_claim_and_frees_the_key(
    harness: EngineHarness,
) -> None:
    """Q19.5/Q15.3: ``settle_cancelled`` finalizes a cancelling row claimed with the
    handle's token, even after its lease lapsed (counted as cancelled); it refuses a
    processing claim and a stale token. The unique key stays held until then."""
    async with harness.open_store() as store:
        queue = store.queue("cancel-settle", QueueOpts(visibility_timeout_s=10))
        keyed = await queue.enqueue(b"keyed", unique_key="k")
        plain = await queue.enqueue(b"plain")
        held = await _claim_id(queue, keyed, "holder")
        other = await _claim_id(queue, plain, "holder")
        assert await queue.cancel(keyed) is True, "cancel refused"
        again = await queue.enqueue(b"again", unique_key="k")
        assert (int(again), again.created) == (keyed, False), "the key freed while cancelling"
        assert await queue.settle_cancelled([other]) == [False], "settled a processing claim"
        await _assert_state(queue, plain, "processing", "a refused settle")
        await harness.advance(10 + INSTANT_S)
        assert await queue.settle_cancelled([held]) == [True], "a late settle was refused"
        await _assert_gone(queue, keyed, "settle_cancelled")
        assert await queue.settle_cancelled([held]) == [False], "settled twice"
        seen = await _cancel_counts(store, queue)
        assert seen == (1, 0, 1), f"(processing, cancelling, cancelled) = {seen}, not (1, 0, 1)"
        fresh = await queue.enqueue(b"fresh", unique_key="k")
        assert fresh.created, "the key stayed held after the cancel was settled"
        # A stale token: the job was reclaimed and cancelled under the new claim.
        reclaimed = store.queue("cancel-settle-stale", QueueOpts(visibility_timeout_s=10))
        job_id = await reclaimed.enqueue(b"job")
        stale = await _claim_id(reclaimed, job_id, "first")
        await harness.advance(10 + INSTANT_S)
        await _claim_id(reclaimed, job_id, "second")
        assert await reclaimed.cancel(job_id) is True, "cancel refused"
        assert await reclaimed.settle_cancelled([stale]) == [False], "a stale token settled"
        await _assert_state(reclaimed, job_id, "cancelling", "a stale settle")


@_check
async def q19_5_a_lapsed_cancelling_row_is_finalized_by_cancel_or_the_sweep(
    harness: EngineHarness,
) -> None:
    """Q19.5: a processing or cancelling row whose lease lapsed is finalized by cancel at
    once; the sweep finalizes lapsed cancelling rows (``SweepResult.cancelled``) and
    never expires a cancelling row (a cancelled job is never dead)."""
    async with harness.open_store() as store:
        queue = store.queue("cancel-lapsed", QueueOpts(visibility_timeout_s=10, expires_in_s=5))
        lapsed, swept, marked = await queue.enqueue_many([b"lapsed", b"swept", b"marked"])
        for job_id in (lapsed, swept, marked):
            await _claim_id(queue, job_id)
        assert await queue.cancel(swept) is True, "cancel refused"
        assert await queue.cancel(marked) is True, "cancel refused"
        await harness.advance(5 + INSTANT_S)  # expired, leases live
        assert await queue.sweep_expired() == SweepResult(1, 0, 0), "expired a cancelling row"
        await _assert_state(queue, swept, "cancelling", "an expired cancelling row after a sweep")
        await harness.advance(5)  # the leases lapsed
        assert await queue.cancel(marked) is True, "cancel of a lapsed cancelling row"
        await _assert_gone(queue, marked, "cancel of a lapsed cancelling row")
        assert await queue.sweep_expired() == SweepResult(0, 0, cancelled=1), (
            "the sweep's cancelled"
        )
        await _assert_gone(queue, swept, "the sweep of a lapsed cancelling row")
        await _assert_state(queue, lapsed, "dead", "the expired processing row")
        entry = (await store.stats()).queue(queue.name)
        assert entry is not None
        assert (entry.cancelled_total, entry.dead_lettered_total) == (2, 1), f"{entry!r}"


@_check
async def q19_5_cancel_does_not_touch_dead_unknown_or_other_queue_rows(
    harness: EngineHarness,
) -> None:
    """Q19.5: cancel returns False for a dead row (which stays), an unknown id and another
    queue's row (which stays live)."""
    async with harness.open_store() as store:
        queue = store.queue("cancel-misses")
        other = store.queue("cancel-other")
        dead = await queue.enqueue(b"dead")
        assert await (await _claim_id(queue, dead)).fail("gone") is True, "fail was refused"
        foreign = await other.enqueue(b"foreign")
        before = await _get(queue, dead)
        assert await queue.cancel(dead) is False, "cancel of a dead job returned True"
        after = await _get(queue, dead)
        assert after == before, "cancel changed a dead row"
        assert await queue.cancel(foreign) is False, "cancel of another queue's job returned True"
        await _assert_state(other, foreign, "pending", "cancel from another queue")
        for unknown in [foreign + 1_000_000, 0, -1]:
            assert await queue.cancel(unknown) is False, f"cancel({unknown}) returned True"
        await _raises(InvalidArgument, "cancel('1')", queue.cancel, "1")
        assert await queue.cancelling_among([foreign, dead]) == [], "cancelling_among"


@_check
async def q19_5_a_kept_job_recorded_cancelled_moves_to_history_as_cancelled(
    harness: EngineHarness,
) -> None:
    """Q19.5 with Q19.2/Q19.3: a job whose stamp ``keep_completed_s`` is set and that is
    recorded cancelled (by ``cancel`` at once, by its holder's ``settle_cancelled`` or by
    the sweep) reads back as ``"cancelled"``: the row as it was, ``completed_at`` when it
    was recorded cancelled, no result; ``list_jobs("cancelled")`` lists it and
    ``list_jobs("completed")`` does not; its unique key is free, a cancel leaves it
    alone, ``stats`` counts it once in ``cancelled_total``; an unkept job is deleted; the
    sweep purges the kept rows after ``keep_completed_s``."""
    async with harness.open_store() as store:
        queue = store.queue("cancel-kept", QueueOpts(keep_completed_s=100, visibility_timeout_s=10))
        pending = await queue.enqueue(b"p", unique_key="k")
        settled = await queue.enqueue(b"s")
        lapsed = await queue.enqueue(b"l")
        before = await _get(queue, pending)
        t0 = await harness.now()
        assert await queue.cancel(pending) is True, "cancel of a kept pending job"
        want = dataclasses.replace(before, state="cancelled", completed_at=t0, result=None)
        assert await _get(queue, pending) == want, "the kept pending job as cancelled"
        assert (await queue.enqueue(b"again", unique_key="k")).created, "the key stayed held"
        holder = await _claim_id(queue, settled, "holder")
        await _claim_id(queue, lapsed, "holder")
        claimed = {job_id: await _get(queue, job_id) for job_id in (settled, lapsed)}
        assert await queue.cancel(settled) is True, "cancel of a kept processing job"
        assert await queue.cancel(lapsed) is True, "cancel of a kept processing job"
        await harness.advance(2)
        t1 = await harness.now()
        assert await queue.settle_cancelled([holder]) == [True], "settle of a kept job"
        await harness.advance(10)
        t2 = await harness.now()
        assert (await queue.sweep_expired()).cancelled == 1, "the sweep's lapsed cancel"
        for job_id, at in ((settled, t1), (lapsed, t2)):
            want = dataclasses.replace(
                claimed[job_id], state="cancelled", completed_at=at, result=None
            )
            assert await _get(queue, job_id) == want, f"kept cancelled job {job_id}"
            assert await store.get_job(job_id) == want, f"find_job of kept job {job_id}"
        listed = [job.id for job in await queue.list_jobs("cancelled")]
        assert listed == [pending, settled, lapsed], f"list_jobs('cancelled') = {listed}"
        assert await queue.list_jobs("completed") == [], "a cancelled job listed as completed"
        assert await queue.cancel(pending) is False, "cancel touched a kept cancelled row"
        seen = await _cancel_counts(store, queue)
        assert seen == (0, 0, 3), f"(processing, cancelling, cancelled) = {seen}"
        plain = store.queue("cancel-unkept")
        gone = await plain.enqueue(b"x")
        assert await plain.cancel(gone) is True
        await _assert_gone(plain, gone, "an unkept cancelled job")
        await harness.advance(100 + INSTANT_S)  # past the last one's completed_at + 100
        swept = await queue.sweep_expired()
        assert swept.purged_completed == 3, f"the purge of the kept cancelled rows: {swept}"
        for job_id in (pending, settled, lapsed):
            await _assert_gone(queue, job_id, "a purged kept cancelled job")
