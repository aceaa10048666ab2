"""Q7 cancel: ``queue.cancel`` of pending and processing rows; dead, unknown and other
queues' rows are not touched."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import InvalidArgument
from ._helpers import (
    _assert_gone,
    _assert_state,
    _check,
    _claim_id,
    _get,
    _nothing_claimable,
    _raises,
)

if TYPE_CHECKING:
    from .._harness import EngineHarness


@_check
async def q7_cancel_deletes_a_pending_row(harness: EngineHarness) -> None:
    """Q7: cancel deletes a pending row (delayed or ready); a second cancel is False."""
    async with harness.open_store() as store:
        queue = store.queue("cancel-pending")
        ready = await queue.enqueue(b"ready")
        delayed = await queue.enqueue(b"delayed", delay_s=60)
        for job_id in [ready, delayed]:
            assert await queue.cancel(job_id) is True, (
                f"cancel of pending job {job_id} returned False"
            )
            await _assert_gone(queue, job_id, "cancel of a pending job")
            assert await queue.cancel(job_id) is False, "a second cancel returned True"
        await harness.advance(60)
        await _nothing_claimable(queue, "after cancelling every pending job")


@_check
async def q7_cancel_deletes_a_processing_row_and_refuses_its_holder(harness: EngineHarness) -> None:
    """Q7: cancel deletes a processing row; the holder is not interrupted, but its
    heartbeat, ack, retry and fail return False afterwards."""
    async with harness.open_store() as store:
        queue = store.queue("cancel-processing")
        ids = await queue.enqueue_many([b"ack", b"retry", b"fail"])
        handles = {h.id: h for h in await queue.claim_batch("holder", 3)}
        for job_id in ids:
            assert await queue.cancel(job_id) is True, (
                f"cancel of processing job {job_id} returned False"
            )
            await _assert_gone(queue, job_id, "cancel of a processing job")
        first, second, third = (handles[i] for i in ids)
        assert await first.heartbeat() is False, "heartbeat of a cancelled job was not refused"
        assert await first.ack() is False, "ack of a cancelled job was not refused"
        assert await second.retry(delay_s=0) is False, "retry of a cancelled job was not refused"
        assert await third.fail() is False, "fail of a cancelled job was not refused"
        for job_id in ids:
            await _assert_gone(queue, job_id, "a refused operation on a cancelled job")


@_check
async def q7_cancel_does_not_touch_dead_unknown_or_other_queue_rows(harness: EngineHarness) -> None:
    """Q7: cancel returns False for a dead row (which stays), an unknown id and another
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
