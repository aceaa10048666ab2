"""Q19.6 transactional completion: ``tx.complete(handle)`` commits with the
transaction's other effects or not at all; a refused one raises ``ClaimLost`` and the
whole transaction rolls back. The effect here is ``tx.enqueue`` (every engine has it);
``tests/postgres/test_tx_complete.py`` checks the caller's own SQL on PostgreSQL."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from ... import ClaimLost, HandleConsumed, InvalidArgument, QueueOpts
from ._helpers import _assert_state, _check, _claim_id, _get, _raises

if TYPE_CHECKING:
    from .._harness import EngineHarness


class _Rollback(Exception):
    """Raised inside a transaction block to roll it back."""


@_check
async def q19_6_complete_commits_with_the_transactions_enqueues(harness: EngineHarness) -> None:
    """Q19.6: a valid claim completed in a transaction, after an enqueue in it: both land
    at the commit (the kept job completed with its result, the next step pending); the
    handle is consumed and the transaction takes nothing more."""
    async with harness.open_store() as store:
        queue = store.queue("txc-ok", QueueOpts(visibility_timeout_s=10, keep_completed_s=60))
        after = store.queue("txc-next")
        job_id = await queue.enqueue(b"x")
        handle = await _claim_id(queue, job_id)
        async with store.transaction() as tx:
            next_id = await tx.enqueue(after, b"next step")
            await tx.complete(handle, b"result")
            await _raises(HandleConsumed, "enqueue after complete", tx.enqueue, after, b"late")
            await _assert_state(queue, job_id, "processing", "before the commit")
        row = await _assert_state(queue, job_id, "completed", "after the commit")
        assert row.result == b"result", f"the result is {row.result!r}"
        await _assert_state(after, int(next_id), "pending", "the transaction's enqueue")
        await _raises(HandleConsumed, "the handle after complete", handle.ack)


@_check
async def q19_6_a_stale_claim_raises_claim_lost_and_nothing_commits(
    harness: EngineHarness,
) -> None:
    """Q19.6: completing a claim that is no longer valid (lapsed and reclaimed) raises
    ``ClaimLost``; the transaction's enqueue never lands, even when the caller caught the
    error and left the block cleanly (the block then raises it again); the new holder's
    claim is untouched and acks."""
    async with harness.open_store() as store:
        queue = store.queue("txc-stale", QueueOpts(visibility_timeout_s=10))
        after = store.queue("txc-stale-next")
        job_id = await queue.enqueue(b"x")
        stale = await _claim_id(queue, job_id)
        await harness.advance(11)
        holder = await _claim_id(queue, job_id, "other")
        ids: list[int] = []

        async def caught() -> None:
            async with store.transaction() as tx:
                ids.append(int(await tx.enqueue(after, b"effect")))
                with contextlib.suppress(ClaimLost):
                    await tx.complete(stale)

        await _raises(ClaimLost, "a caught ClaimLost", caught)
        assert await after.get_job(ids[0]) is None, "a stale claim's transaction committed"
        row = await _assert_state(queue, job_id, "processing", "after the refusal")
        assert row.claim_token == holder.job.claim_token, "the refusal changed the claim"
        assert await holder.ack() is True, "the holder's ack was refused"


@_check
async def q19_6_a_rolled_back_completion_leaves_the_claim(harness: EngineHarness) -> None:
    """Q19.6: a transaction that completes a claim and then rolls back leaves the job
    processing under that claim, and the handle usable again (it acks)."""
    async with harness.open_store() as store:
        queue = store.queue("txc-rollback", QueueOpts(visibility_timeout_s=10))
        job_id = await queue.enqueue(b"x")
        handle = await _claim_id(queue, job_id)

        async def rolled_back() -> None:
            async with store.transaction() as tx:
                await tx.complete(handle)
                raise _Rollback

        await _raises(_Rollback, "the rollback", rolled_back)
        row = await _get(queue, job_id)
        assert row.state == "processing", f"a rolled-back completion finished it: {row!r}"
        assert await handle.ack() is True, "the handle was not usable after the rollback"


@_check
async def q19_6_bad_complete_arguments_raise_without_effect(harness: EngineHarness) -> None:
    """Q19.6: ``complete`` of something that is not a job handle of this store, or with
    an invalid result, raises InvalidArgument and does nothing; the transaction goes on."""
    async with harness.open_store() as store:
        queue = store.queue("txc-bad", QueueOpts(visibility_timeout_s=10))
        job_id = await queue.enqueue(b"x")
        handle = await _claim_id(queue, job_id)
        too_big = b"x" * (store.max_result_bytes + 1)
        async with store.transaction() as tx:
            await _raises(InvalidArgument, "a job id", tx.complete, job_id)
            await _raises(InvalidArgument, "a str result", tx.complete, handle, "text")
            await _raises(InvalidArgument, "an oversized result", tx.complete, handle, too_big)
            await tx.complete(handle)
        await _raises(HandleConsumed, "complete after the block", tx.complete, handle)
        assert await queue.get_job(job_id) is None, "the valid completion did not land"
