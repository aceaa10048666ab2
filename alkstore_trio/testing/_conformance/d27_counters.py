"""D27 (a decision where the contract is silent): the per-queue counters of finished jobs
in ``store.stats()``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ... import Queue, QueueOpts, SweepResult
from ._helpers import INSTANT_S, _assert_state, _check, _claim, _claim_id

if TYPE_CHECKING:
    from .._harness import EngineHarness


async def _totals(store: Any, queue: Queue) -> tuple[int, int, int]:
    """``(acked_total, dead_lettered_total, cancelled_total)`` of ``queue`` (D27)."""
    (entry,) = (await store.stats(queue)).queues
    return entry.acked_total, entry.dead_lettered_total, entry.cancelled_total


async def _assert_totals(store: Any, queue: Queue, want: tuple[int, int, int], after: str) -> None:
    got = await _totals(store, queue)
    assert got == want, (
        f"after {after}, {queue.name!r} (acked_total, dead_lettered_total, cancelled_total) "
        f"= {got}, expected {want}"
    )


@_check
async def d27_stats_count_each_queues_acked_jobs(harness: EngineHarness) -> None:
    """D27: a queue's ``acked_total`` counts its jobs deleted by an ack, whichever call
    acked them (``ack``, ``ack_batch``, ``ack_handles``, ``ack_handles_and_claim``); a
    refused ack counts nothing, and no other queue's counters move."""
    async with harness.open_store() as store:
        queue = store.queue("count-acked", QueueOpts(visibility_timeout_s=10))
        other = store.queue("count-acked-other")
        await other.enqueue(b"bystander")
        await queue.enqueue_many([b"%d" % i for i in range(7)])
        await _assert_totals(store, queue, (0, 0, 0), "enqueues only")
        assert await (await _claim(queue)).ack() is True, "ack was refused"
        await _assert_totals(store, queue, (1, 0, 0), "one ack")
        h2, h3 = await queue.claim_batch("worker", 2)
        assert await queue.ack_batch([h2.id, h3.id, 10**12]) == 2, "ack_batch miscounted"
        await _assert_totals(store, queue, (3, 0, 0), "ack_batch of two jobs")
        h4, h5 = await queue.claim_batch("worker", 2)
        assert await queue.ack_handles([h4, h5]) == [True, True], "ack_handles refused"
        await _assert_totals(store, queue, (5, 0, 0), "ack_handles of two jobs")
        acked, claimed = await queue.ack_handles_and_claim([await _claim(queue)], "worker", 1)
        assert (acked, len(claimed)) == ([True], 1), "ack_handles_and_claim misbehaved"
        await _assert_totals(store, queue, (6, 0, 0), "ack_handles_and_claim of one job")
        await harness.advance(10 + INSTANT_S)
        assert await claimed[0].ack() is False, "a lapsed claim was acked"
        await _assert_totals(store, queue, (6, 0, 0), "a refused ack")
        await _assert_totals(store, other, (0, 0, 0), "acks of another queue")


@_check
async def d27_stats_count_each_queues_dead_letter_moves(harness: EngineHarness) -> None:
    """D27: a queue's ``dead_lettered_total`` counts every move of its jobs to dead:
    ``fail``, ``retry`` at budget, ``fail_handles``, ``retry_handles`` at budget, the
    pre-claim sweep of ``claim_one`` and of ``ack_handles_and_claim``, and the expiry
    sweep; a job redriven and dead again counts twice. A retry below budget, a redrive
    and a purge count nothing."""
    async with harness.open_store() as store:
        opts = QueueOpts(visibility_timeout_s=10, max_attempts=1, expires_in_s=1000)
        queue = store.queue("count-dead", opts)
        again = store.queue("count-dead-retry", QueueOpts(max_attempts=2))
        ids = await queue.enqueue_many([b"%d" % i for i in range(8)])
        assert await (await _claim_id(queue, ids[0])).fail("boom") is True, "fail refused"
        await _assert_totals(store, queue, (0, 1, 0), "fail")
        assert await (await _claim_id(queue, ids[1])).retry("again") is True, "retry refused"
        await _assert_totals(store, queue, (0, 2, 0), "retry at budget")
        (h2,) = await queue.claim_batch("worker", 1)
        assert await queue.fail_handles([(h2, None)]) == [True], "fail_handles refused"
        await _assert_totals(store, queue, (0, 3, 0), "fail_handles")
        (h3,) = await queue.claim_batch("worker", 1)
        assert await queue.retry_handles([(h3, None, None)]) == [True], "retry_handles refused"
        await _assert_totals(store, queue, (0, 4, 0), "retry_handles at budget")
        await _claim_id(queue, ids[4])
        await harness.advance(10 + INSTANT_S)
        await _claim_id(queue, ids[5])  # its pre-claim sweep buries job 4
        await _assert_state(queue, ids[4], "dead", "a lapsed claim at budget")
        await _assert_totals(store, queue, (0, 5, 0), "claim_one's pre-claim sweep")
        held = await _claim_id(queue, ids[6])
        assert await held.heartbeat(1000) is True, "heartbeat refused"
        await harness.advance(10 + INSTANT_S)
        acked, claimed = await queue.ack_handles_and_claim([held], "worker", 1)
        assert (acked, [h.id for h in claimed]) == ([True], [ids[7]]), (
            f"ack_handles_and_claim acked {acked} and claimed {[h.id for h in claimed]}"
        )
        await _assert_state(queue, ids[5], "dead", "a lapsed claim at budget")
        await _assert_totals(store, queue, (1, 6, 0), "ack_handles_and_claim's sweep")
        await harness.advance(1000)
        assert await queue.sweep_expired() == SweepResult(1, 0), "job 7 did not expire"
        await _assert_totals(store, queue, (1, 7, 0), "the expiry sweep")
        assert await queue.requeue_dead([ids[0]]) == 1, "the redrive moved nothing"
        await _assert_totals(store, queue, (1, 7, 0), "a redrive")
        assert await (await _claim_id(queue, ids[0])).fail() is True, "fail refused"
        await _assert_totals(store, queue, (1, 8, 0), "the redriven job's second death")
        assert await queue.purge_dead() == 7, "purge_dead missed dead rows"
        await _assert_totals(store, queue, (1, 8, 0), "a purge")
        await again.enqueue(b"twice")
        assert await (await _claim(again)).retry(delay_s=0) is True, "retry refused"
        await _assert_totals(store, again, (0, 0, 0), "a retry below budget")
        await _assert_state(again, (await _claim(again)).id, "processing", "a retried job")


@_check
async def d27_stats_count_each_queues_cancelled_jobs(harness: EngineHarness) -> None:
    """D27: a queue's ``cancelled_total`` counts its live jobs recorded cancelled (Q19.5:
    a pending one at ``cancel``, a processing one once its holder settled it); a refused
    cancel (dead, unknown or another queue's job) counts nothing."""
    async with harness.open_store() as store:
        queue = store.queue("count-cancelled")
        other = store.queue("count-cancelled-other")
        pending, processing, dead = await queue.enqueue_many([b"p", b"c", b"d"])
        assert await queue.cancel(pending) is True, "cancel of a pending job refused"
        await _assert_totals(store, queue, (0, 0, 1), "a pending job's cancel")
        holder = await _claim_id(queue, processing)
        assert await queue.cancel(processing) is True, "cancel of a processing job refused"
        # Q19.5: counted when finalized (its holder settled it), not when it began.
        await _assert_totals(store, queue, (0, 0, 1), "a processing job's cancel")
        assert await queue.settle_cancelled([holder]) == [True], "settle_cancelled refused"
        await _assert_totals(store, queue, (0, 0, 2), "a processing job's settled cancel")
        assert await (await _claim_id(queue, dead)).fail() is True, "fail refused"
        assert await queue.cancel(dead) is False, "a dead job was cancelled"
        assert await queue.cancel(10**12) is False, "an unknown job was cancelled"
        theirs = await other.enqueue(b"theirs")
        assert await queue.cancel(theirs) is False, "another queue's job was cancelled"
        await _assert_totals(store, queue, (0, 1, 2), "refused cancels")
        await _assert_totals(store, other, (0, 0, 0), "cancels in another queue")


@_check
async def d27_stats_list_queues_with_counted_jobs_even_without_rows(
    harness: EngineHarness,
) -> None:
    """D27: ``store.stats()`` lists a queue whose jobs all finished (no rows left) with
    its counters; a queue that never counted anything and has no rows is listed only
    when asked for, with zeros. ``finished_total`` is acked plus dead-lettered."""
    async with harness.open_store() as store:
        drained = store.queue("count-drained")
        waiting = store.queue("count-waiting")
        first, second = await drained.enqueue_many([b"ok", b"bad"])
        assert await (await _claim_id(drained, first)).ack() is True, "ack refused"
        assert await (await _claim_id(drained, second)).fail() is True, "fail refused"
        assert await drained.purge_dead() == 1, "purge_dead missed the dead row"
        await waiting.enqueue(b"later", delay_s=60)
        stats = await store.stats()
        listed = [
            (e.queue, e.live, e.dead, e.acked_total, e.dead_lettered_total) for e in stats.queues
        ]
        assert listed == [("count-drained", 0, 0, 1, 1), ("count-waiting", 1, 0, 0, 0)], (
            f"stats() listed {listed}"
        )
        entry = stats.queue("count-drained")
        assert entry is not None, "stats().queue('count-drained') is None"
        assert entry.finished_total == 2, f"finished_total = {entry.finished_total}, expected 2"
        (never,) = (await store.stats("count-never")).queues
        got = (never.queue, never.acked_total, never.dead_lettered_total, never.cancelled_total)
        assert got == ("count-never", 0, 0, 0), f"stats('count-never') = {never!r}"
