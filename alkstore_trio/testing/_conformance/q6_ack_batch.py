"""Q6 batch ack by id: ``queue.ack_batch`` (D6 for the empty batch)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import InvalidArgument, QueueOpts
from ._helpers import INSTANT_S, _assert_gone, _assert_state, _check, _claim_id, _raises

if TYPE_CHECKING:
    from .._harness import EngineHarness


@_check
async def q6_ack_batch_deletes_only_valid_claims_of_this_queue(harness: EngineHarness) -> None:
    """Q6: ack_batch deletes each distinct id that is processing within its deadline in
    this queue, whoever claimed it; lapsed, pending, dead, unknown, other-queue ids and
    duplicates are not counted."""
    async with harness.open_store() as store:
        short = store.queue("batch-ack", QueueOpts(visibility_timeout_s=10))
        long = store.queue("batch-ack", QueueOpts(visibility_timeout_s=1000))
        other = store.queue("batch-ack-other", QueueOpts(visibility_timeout_s=1000))
        lapsed = await short.enqueue(b"lapsed", priority=4)
        valid_a = await long.enqueue(b"valid-a", priority=3)
        valid_b = await long.enqueue(b"valid-b", priority=2)
        dead = await long.enqueue(b"dead", priority=1)
        pending = await long.enqueue(b"pending", delay_s=10_000)
        foreign = await other.enqueue(b"foreign")
        a_handles = {h.id: h for h in await long.claim_batch("worker-a", 2)}
        assert set(a_handles) == {lapsed, valid_a}, "worker-a did not claim the two best jobs"
        b_handle = await _claim_id(long, valid_b, "worker-b")
        assert await (await _claim_id(long, dead, "worker-c")).fail() is True, "fail was refused"
        foreign_handle = await _claim_id(other, foreign)
        await harness.advance(11)
        unknown = max(lapsed, valid_a, valid_b, dead, pending, foreign) + 1_000_000
        mixed = [lapsed, valid_a, valid_b, pending, dead, unknown, foreign, valid_a, valid_b, -5]
        count = await long.ack_batch(mixed)
        assert count == 2, f"ack_batch({mixed}) returned {count}, expected 2"
        await _assert_gone(long, valid_a, "ack_batch of a valid claim")
        await _assert_gone(long, valid_b, "ack_batch of a valid claim")
        await _assert_state(long, lapsed, "processing", "ack_batch of a lapsed claim")
        await _assert_state(long, pending, "pending", "ack_batch of a pending job")
        await _assert_state(long, dead, "dead", "ack_batch of a dead job")
        await _assert_state(other, foreign, "processing", "ack_batch from another queue")
        assert await b_handle.ack() is False, "the holder could ack a row ack_batch deleted"
        assert await a_handles[lapsed].heartbeat() is False, "the lapsed claim came back to life"
        assert await foreign_handle.ack() is True, "the other queue's job was disturbed"


@_check
async def q6_ack_batch_counts_a_claim_at_its_deadline_instant(harness: EngineHarness) -> None:
    """Q6: ``now <= claim_expires_at`` counts; one instant later does not."""
    async with harness.open_store() as store:
        queue = store.queue("batch-deadline", QueueOpts(visibility_timeout_s=30))
        ids = await queue.enqueue_many([b"a", b"b"])
        await queue.claim_batch("w", 2)
        await harness.advance(30)
        assert await queue.ack_batch([ids[0]]) == 1, "ack_batch at now == deadline did not count"
        await harness.advance(INSTANT_S)
        assert await queue.ack_batch([ids[1]]) == 0, "ack_batch one instant late counted"
        await _assert_state(queue, ids[1], "processing", "a lapsed claim after ack_batch")


@_check
async def q6_ack_batch_of_nothing_returns_zero(harness: EngineHarness) -> None:
    """Q6: an empty list (or empty iterable) returns 0; ids must be ints."""
    async with harness.open_store() as store:
        queue = store.queue("batch-empty")
        job_id = await queue.enqueue(b"x")
        await _claim_id(queue, job_id)
        assert await queue.ack_batch([]) == 0, "ack_batch([]) did not return 0"
        assert await queue.ack_batch(iter(())) == 0, "ack_batch(empty iterator) did not return 0"
        for bad in [[1.0], ["1"], [None], "12", 5, [True], [2**63]]:
            await _raises(InvalidArgument, f"ack_batch({bad!r})", queue.ack_batch, bad)
        await _assert_state(queue, job_id, "processing", "after rejected ack_batch calls")
        assert await queue.ack_batch((job_id,)) == 1, "ack_batch of a tuple did not count"
