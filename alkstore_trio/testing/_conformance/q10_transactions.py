"""Q10 transactions: rows and wakes only after the commit, rollback on an exception,
stamps, validation, and finished transactions (D7)."""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import TYPE_CHECKING

import trio

from ... import HandleConsumed, InvalidArgument, QueueOpts
from ._helpers import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    _after,
    _check,
    _claim_id,
    _get,
    _no_wake,
    _nothing_claimable,
    _raises,
    _wait_for_wakes,
)

if TYPE_CHECKING:
    from .._harness import EngineHarness


class _Rollback(Exception):
    """Raised inside a transaction block to roll it back."""


@_check
async def q10_transaction_rows_appear_and_wake_only_after_commit(harness: EngineHarness) -> None:
    """Q10: rows enqueued in a transaction are invisible and unclaimable, and wake nobody,
    until the block commits; then all are visible and their queues woken."""
    async with harness.open_store() as store:
        first = store.queue("tx-first")
        second = store.queue("tx-second")
        async with store.open_wake_listener([first, second]) as listener:
            async with store.transaction() as tx:
                one = await tx.enqueue(first, b"one", priority=2)
                two = await tx.enqueue("tx-second", b"two", delay_s=1)
                three = await tx.enqueue(first, bytearray(b"three"), max_attempts=9)
                assert one < two < three, f"transaction ids {[one, two, three]} do not increase"
                for queue, job_id in [(first, one), (second, two), (first, three)]:
                    seen = await queue.get_job(job_id)
                    assert seen is None, f"job {job_id} is visible before the commit: {seen!r}"
                assert await first.claim_one("early") is None, "claimed a row before the commit"
                assert await second.claim_one("early") is None, "claimed a row before the commit"
                await _no_wake(listener, "inside the transaction")
            now = await harness.now()
            await _wait_for_wakes(listener, {"tx-first", "tx-second"}, "after the commit")
        for queue, job_id, payload in [
            (first, one, b"one"),
            (second, two, b"two"),
            (first, three, b"three"),
        ]:
            job = await _get(queue, job_id, "after the commit: ")
            assert (job.state, job.payload, job.enqueued_at) == ("pending", payload, now), (
                f"committed job {job_id}: (state, payload, enqueued_at) = "
                f"{(job.state, job.payload, job.enqueued_at)!r}"
            )
        assert (await _get(first, one)).priority == 2, "the transaction lost the priority"
        assert (await _get(first, three)).max_attempts == 9, "the transaction lost max_attempts"
        assert (await _get(second, two)).run_at == _after(now, 1), "the transaction lost delay_s"
        await _claim_id(first, one)


@_check
async def q10_transaction_rolls_back_on_exception(harness: EngineHarness) -> None:
    """Q10: an exception (or cancellation) inside the block rolls every row back: no row,
    no wake; the exception propagates; the rolled-back ids are never used again."""
    async with harness.open_store() as store:
        queue = store.queue("tx-rollback")
        async with store.open_wake_listener([queue, "tx-rollback-2"]) as listener:
            propagated = False
            try:
                async with store.transaction() as tx:
                    lost = [await tx.enqueue(queue, b"a"), await tx.enqueue("tx-rollback-2", b"b")]
                    raise _Rollback
            except _Rollback:
                propagated = True
            assert propagated, "the exception raised inside the transaction did not propagate"
            with trio.CancelScope() as scope:
                async with store.transaction() as tx:
                    lost.append(await tx.enqueue(queue, b"c"))
                    scope.cancel()
                    await trio.lowlevel.checkpoint()
            assert scope.cancelled_caught, "the cancellation did not reach the cancel scope"
            await _no_wake(listener, "after rolled-back transactions")
        for job_id in lost:
            assert await queue.get_job(job_id) is None, f"rolled-back job {job_id} is visible"
            assert await store.queue("tx-rollback-2").get_job(job_id) is None, (
                f"rolled-back job {job_id} is visible"
            )
        await _nothing_claimable(queue, "after rolled-back transactions")
        await _nothing_claimable(store.queue("tx-rollback-2"), "after rolled-back transactions")
        fresh = await queue.enqueue(b"fresh")
        assert fresh > max(lost), f"id {fresh} reuses or precedes rolled-back ids {lost}"


@_check
async def q10_transaction_stamps_handle_opts_or_the_defaults(harness: EngineHarness) -> None:
    """Q1/Q10: a row enqueued in a transaction through a queue handle carries the handle's
    stamps; one enqueued by bare name carries the defaults 300 / 3 / 5 / None."""
    async with harness.open_store() as store:
        opts = QueueOpts(
            visibility_timeout_s=45, max_attempts=6, backoff_base_s=0.5, expires_in_s=99
        )
        handle = store.queue("tx-stamps", opts)
        async with store.transaction() as tx:
            stamped = await tx.enqueue(handle, b"stamped")
            bare = await tx.enqueue("tx-stamps", b"bare")
        now = await harness.now()
        for job_id, expected in [
            (stamped, (45, 6, 0.5, _after(now, 99))),
            (bare, (300, 3, 5, None)),
        ]:
            job = await _get(handle, job_id)
            seen = (job.visibility_timeout_s, job.max_attempts, job.backoff_base_s, job.expires_at)
            assert seen == expected, (
                f"transactional job {job_id}: (visibility_timeout_s, max_attempts, "
                f"backoff_base_s, expires_at) = {seen!r}, expected {expected!r}"
            )


@_check
async def q10_transaction_validates_arguments_without_effect(harness: EngineHarness) -> None:
    """Q10/Q12 and decision 7: bad arguments to tx.enqueue are InvalidArgument at once and
    buffer nothing (the transaction can still commit its good rows); a queue handle of
    another store is InvalidArgument."""
    async with harness.open_store() as store:
        queue = store.queue("tx-validate")
        async with store.transaction() as tx:
            await _raises(InvalidArgument, "tx.enqueue(str payload)", tx.enqueue, queue, "text")
            await _raises(
                InvalidArgument,
                "tx.enqueue(priority=2**31)",
                tx.enqueue,
                queue,
                b"x",
                priority=2**31,
            )
            await _raises(
                InvalidArgument,
                "tx.enqueue(1 MiB + 1)",
                tx.enqueue,
                queue,
                b"x" * (DEFAULT_MAX_PAYLOAD_BYTES + 1),
            )
            await _raises(
                InvalidArgument,
                "tx.enqueue(naive run_at)",
                tx.enqueue,
                queue,
                b"x",
                run_at=datetime(2030, 1, 1),
            )
            await _raises(InvalidArgument, "tx.enqueue(queue=5)", tx.enqueue, 5, b"x")
            good = await tx.enqueue(queue, b"good")
        handles = await queue.claim_batch("w", 10)
        assert [h.id for h in handles] == [good], (
            f"after rejected tx.enqueue calls the commit produced {[h.id for h in handles]}, "
            f"expected only [{good}]"
        )
        async with harness.open_store() as elsewhere:
            foreign = elsewhere.queue("tx-validate")
            async with store.transaction() as tx:
                await _raises(
                    InvalidArgument, "tx.enqueue(another store's handle)", tx.enqueue, foreign, b"x"
                )


@_check
async def q10_finished_transaction_is_consumed(harness: EngineHarness) -> None:
    """Decision 7: a transaction whose block ended (committed or rolled back) raises
    HandleConsumed on enqueue and enqueues nothing."""
    async with harness.open_store() as store:
        queue = store.queue("tx-finished")
        async with store.transaction() as committed:
            await committed.enqueue(queue, b"x")
        await _raises(
            HandleConsumed, "enqueue on a committed transaction", committed.enqueue, queue, b"y"
        )
        with contextlib.suppress(_Rollback):
            async with store.transaction() as rolled_back:
                raise _Rollback
        await _raises(
            HandleConsumed, "enqueue on a rolled-back transaction", rolled_back.enqueue, queue, b"z"
        )
        handles = await queue.claim_batch("w", 10)
        assert [h.job.payload for h in handles] == [b"x"], (
            f"expected only the committed row; claimed {[h.job.payload for h in handles]}"
        )
