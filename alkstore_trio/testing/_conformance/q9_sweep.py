"""Q9 sweep: ``sweep_expired`` dead-letters expired live rows and purges dead rows past
the sweeping handle's retention, in its own queue only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import QueueOpts, SweepResult
from ._helpers import (
    EXPIRED,
    INSTANT_S,
    _assert_dead,
    _assert_gone,
    _assert_state,
    _check,
    _claim_id,
)

if TYPE_CHECKING:
    from .._harness import EngineHarness


@_check
async def q9_sweep_dead_letters_expired_pending_and_processing_rows(harness: EngineHarness) -> None:
    """Q9: sweep_expired moves every live row with now > expires_at, pending or
    processing, to dead with "expired" (claim fields kept, decision 1); at
    now == expires_at nothing expires; unexpiring and younger rows stay."""
    async with harness.open_store() as store:
        queue = store.queue("sweep", QueueOpts(expires_in_s=60, visibility_timeout_s=1000))
        forever = store.queue("sweep")
        pending = await queue.enqueue(b"pending", delay_s=-1)
        processing = await queue.enqueue(b"processing", priority=1)
        holder = await _claim_id(queue, processing, "holder")
        immortal = await forever.enqueue(b"immortal", delay_s=1_000_000)
        await harness.advance(30)
        younger = await queue.enqueue(b"younger", delay_s=1_000_000)
        await harness.advance(30)
        result = await queue.sweep_expired()
        assert result == SweepResult(0, 0), f"at now == expires_at the sweep returned {result!r}"
        assert isinstance(result, SweepResult), f"sweep_expired returned a {type(result).__name__}"
        await harness.advance(INSTANT_S)
        result = await queue.sweep_expired()
        assert result == SweepResult(expired=2, purged=0), (
            f"sweep_expired returned {result!r}, expected SweepResult(expired=2, purged=0)"
        )
        await _assert_dead(harness, queue, pending, EXPIRED, "an expired pending row")
        dead = await _assert_dead(harness, queue, processing, EXPIRED, "an expired processing row")
        now = await harness.now()
        assert (dead.died_at, dead.attempts, dead.claimed_by) == (now, 1, "holder"), (
            f"expired processing row: (died_at, attempts, claimed_by) = "
            f"{(dead.died_at, dead.attempts, dead.claimed_by)!r}, expected ({now}, 1, 'holder')"
        )
        assert await holder.ack() is False, "the holder of an expired row could still ack"
        await _assert_state(queue, immortal, "pending", "a row without expiry")
        await _assert_state(queue, younger, "pending", "a row not yet expired")
        again = await queue.sweep_expired()
        assert again == SweepResult(0, 0), f"a second sweep returned {again!r}"


@_check
async def q9_retention_none_keeps_dead_rows_forever(harness: EngineHarness) -> None:
    """Q9: with dead_letter_retention_s=None no dead row is ever purged."""
    async with harness.open_store() as store:
        queue = store.queue("keep-dead")
        dead = await queue.enqueue(b"x")
        assert await (await _claim_id(queue, dead)).fail() is True, "fail was refused"
        await harness.advance(10 * 365 * 24 * 3600)
        result = await queue.sweep_expired()
        assert result == SweepResult(0, 0), f"sweep with retention None returned {result!r}"
        await _assert_state(queue, dead, "dead", "a dead row under retention None")


@_check
async def q9_retention_zero_purges_dead_rows_after_their_death_instant(
    harness: EngineHarness,
) -> None:
    """Q9: retention 0 purges a dead row once ``died_at + 0 < now``: not at the instant
    it died, one instant later yes."""
    async with harness.open_store() as store:
        queue = store.queue("purge-now", QueueOpts(dead_letter_retention_s=0))
        dead = await queue.enqueue(b"x")
        assert await (await _claim_id(queue, dead)).fail() is True, "fail was refused"
        result = await queue.sweep_expired()
        assert result == SweepResult(0, 0), f"retention 0 purged at the death instant: {result!r}"
        await _assert_state(queue, dead, "dead", "a row that just died")
        await harness.advance(INSTANT_S)
        result = await queue.sweep_expired()
        assert result == SweepResult(0, 1), f"retention 0 one instant later returned {result!r}"
        await _assert_gone(queue, dead, "a purged dead row")


@_check
async def q9_retention_purges_dead_rows_after_the_retention(harness: EngineHarness) -> None:
    """Q9: a positive retention purges dead rows with ``died_at + retention < now`` (and
    the expired rows the same sweep kills are not purged by it)."""
    async with harness.open_store() as store:
        queue = store.queue("purge-later", QueueOpts(dead_letter_retention_s=100, expires_in_s=150))
        old = await queue.enqueue(b"old")
        assert await (await _claim_id(queue, old)).fail() is True, "fail was refused"
        await harness.advance(50)
        young = await queue.enqueue(b"young")
        assert await (await _claim_id(queue, young)).fail() is True, "fail was refused"
        expiring = await queue.enqueue(b"expiring", delay_s=1_000_000)
        await harness.advance(50)
        assert await queue.sweep_expired() == SweepResult(0, 0), "purged at died_at + retention"
        await harness.advance(INSTANT_S)
        result = await queue.sweep_expired()
        assert result == SweepResult(0, 1), f"expected to purge only the old row; got {result!r}"
        await _assert_gone(queue, old, "a dead row past its retention")
        await _assert_state(queue, young, "dead", "a dead row within its retention")
        await harness.advance(150)
        result = await queue.sweep_expired()
        assert result == SweepResult(1, 1), f"expected 1 expired and 1 purged; got {result!r}"
        await _assert_dead(harness, queue, expiring, EXPIRED, "a row expired by this sweep")
        await _assert_gone(queue, young, "a dead row past its retention")


@_check
async def q9_sweep_is_scoped_to_its_queue(harness: EngineHarness) -> None:
    """Q9: a sweep expires and purges only its own queue's rows."""
    async with harness.open_store() as store:
        opts = QueueOpts(expires_in_s=10, dead_letter_retention_s=0)
        mine = store.queue("sweep-mine", opts)
        theirs = store.queue("sweep-theirs", opts)
        rows = {}
        for queue in [mine, theirs]:
            dead = await queue.enqueue(b"dead")
            assert await (await _claim_id(queue, dead)).fail() is True, "fail was refused"
            live = await queue.enqueue(b"live", delay_s=1000)
            rows[queue.name] = (dead, live)
        await harness.advance(11)
        result = await mine.sweep_expired()
        assert result == SweepResult(1, 1), f"the sweep of one queue returned {result!r}"
        dead, live = rows["sweep-theirs"]
        await _assert_state(theirs, dead, "dead", "another queue's dead row")
        await _assert_state(theirs, live, "pending", "another queue's expired row")
        result = await theirs.sweep_expired()
        assert result == SweepResult(1, 1), f"the other queue's own sweep returned {result!r}"


@_check
async def q9_retention_is_that_of_the_sweeping_handle(harness: EngineHarness) -> None:
    """Q1/Q9: dead_letter_retention_s is not stamped on rows: the sweeping handle's own
    retention decides."""
    async with harness.open_store() as store:
        keeper = store.queue("retention-handle")
        purger = store.queue("retention-handle", QueueOpts(dead_letter_retention_s=0))
        dead = await keeper.enqueue(b"x")
        assert await (await _claim_id(keeper, dead)).fail() is True, "fail was refused"
        await harness.advance(1)
        result = await keeper.sweep_expired()
        assert result == SweepResult(0, 0), f"a handle with retention None purged: {result!r}"
        result = await purger.sweep_expired()
        assert result == SweepResult(0, 1), f"a handle with retention 0 returned {result!r}"
        await _assert_gone(keeper, dead, "a purged dead row")
