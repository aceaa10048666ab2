"""D24 (a decision where the contract is silent): ``queue.requeue_dead``, the redrive of
dead rows back to pending."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ... import InvalidArgument, QueueOpts, SweepResult
from ._helpers import (
    INSTANT_S,
    _after,
    _any,
    _assert_state,
    _check,
    _claim_id,
    _dead_job,
    _get,
    _raises,
    _wait_for_wakes,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._harness import EngineHarness


@_check
async def d24_requeue_dead_moves_listed_dead_rows_back_to_pending_with_attempts_reset(
    harness: EngineHarness,
) -> None:
    """D24: ``requeue_dead(ids)`` moves the listed dead rows of this queue back to pending,
    ready now, attempts 0, enqueued now, claim fields and ``died_at`` cleared, id,
    payload, priority, stamps and ``last_error`` kept; ids that are live, unknown or of
    another queue are ignored; the count is returned; the queue is woken and the jobs
    are claimable at once."""
    async with harness.open_store() as store:
        opts = QueueOpts(max_attempts=2, visibility_timeout_s=30, backoff_base_s=7)
        queue = store.queue("redrive", opts)
        other = store.queue("redrive-other")
        dead = await _dead_job(queue, b"\x00dead", "went wrong")
        before = await _get(queue, dead)
        theirs = await _dead_job(other, b"theirs")
        live = await queue.enqueue(b"live", delay_s=100)
        await harness.advance(5)
        async with store.open_wake_listener([queue]) as listener:
            count = await queue.requeue_dead([dead, theirs, live, 10**12, dead])
            assert count == 1, f"requeue_dead returned {count}, expected 1"
            await _wait_for_wakes(listener, {"redrive"}, "requeue_dead")
        now = await harness.now()
        job = await _get(queue, dead)
        expected = dataclasses.replace(
            before,
            state="pending",
            attempts=0,
            run_at=now,
            enqueued_at=now,
            claimed_by=None,
            claimed_at=None,
            claim_expires_at=None,
            claim_token=None,  # Q19.8: no old holder's token is valid again
            died_at=None,
        )
        assert job == expected, f"the redriven row is {job!r}, expected {expected!r}"
        assert job.payload == b"\x00dead", "the redriven row lost its payload"
        await _assert_state(other, theirs, "dead", "another queue's dead row")
        await _assert_state(queue, live, "pending", "a live row listed for redrive")
        handle = await _claim_id(queue, dead)
        assert handle.job.attempts == 1, (
            f"the redriven job's claim is attempt {handle.job.attempts}"
        )
        assert await queue.requeue_dead([dead]) == 0, "a processing row was redriven"
        assert await queue.requeue_dead([]) == 0, "requeue_dead([]) moved rows"


@_check
async def d24_requeue_dead_all_redrives_every_dead_row_of_the_queue_only(
    harness: EngineHarness,
) -> None:
    """D24: ``requeue_dead(all=True)`` redrives every dead row of this queue, and no
    other queue's; a second call finds nothing."""
    async with harness.open_store() as store:
        queue = store.queue("redrive-all")
        other = store.queue("redrive-all-other")
        mine = [await _dead_job(queue, b"m1"), await _dead_job(queue, b"m2")]
        theirs = await _dead_job(other, b"t")
        assert await queue.requeue_dead(all=True) == 2, "requeue_dead(all=True) miscounted"
        for job_id in mine:
            await _assert_state(queue, job_id, "pending", "a redriven row")
        await _assert_state(other, theirs, "dead", "another queue's dead row")
        assert await queue.requeue_dead(all=True) == 0, "a second redrive found rows"
        stats = await store.stats(queue)
        assert (stats.queues[0].pending_ready, stats.queues[0].dead) == (2, 0), (
            f"stats after the redrive: {stats.queues[0]!r}"
        )


@_check
async def d24_requeue_dead_restarts_the_time_to_live(harness: EngineHarness) -> None:
    """D24: a redriven row's ``expires_at`` keeps its distance from ``enqueued_at``, which
    becomes now: a job that died of expiry gets its whole time to live again (and the
    sweep expires it only after that)."""
    async with harness.open_store() as store:
        queue = store.queue("redrive-ttl", QueueOpts(expires_in_s=20))
        job_id = await queue.enqueue(b"x", delay_s=1000)
        await harness.advance(20 + INSTANT_S)
        assert await queue.sweep_expired() == SweepResult(1, 0), "the row did not expire"
        await harness.advance(100)
        assert await queue.requeue_dead([job_id]) == 1, "the expired row was not redriven"
        now = await harness.now()
        job = await _get(queue, job_id)
        assert job.expires_at == _after(now, 20), (
            f"redriven expires_at is {job.expires_at!r}, expected {_after(now, 20)!r}"
        )
        await harness.advance(20)
        assert await queue.sweep_expired() == SweepResult(0, 0), "expired before its new TTL"
        await harness.advance(INSTANT_S)
        assert await queue.sweep_expired() == SweepResult(1, 0), "did not expire after it"


@_check
async def d24_requeue_dead_rejects_bad_arguments_without_effect(harness: EngineHarness) -> None:
    """D24: neither or both of ``ids`` and ``all=True``, a non-bool ``all``, or ids that
    are not an iterable of 64-bit ints raise InvalidArgument, and nothing is moved."""
    async with harness.open_store() as store:
        queue = store.queue("redrive-bad")
        dead = await _dead_job(queue, b"x")
        bad: list[tuple[str, Callable[[], Awaitable[int]]]] = [
            ("requeue_dead()", lambda: queue.requeue_dead()),
            ("requeue_dead([id], all=True)", lambda: queue.requeue_dead([dead], all=True)),
            ("requeue_dead(all=1)", lambda: queue.requeue_dead(all=_any(1))),
            ("requeue_dead('12')", lambda: queue.requeue_dead(_any("12"))),
            ("requeue_dead(7)", lambda: queue.requeue_dead(_any(7))),
            ("requeue_dead([id, 'x'])", lambda: queue.requeue_dead(_any([dead, "x"]))),
            ("requeue_dead([id, 2**63])", lambda: queue.requeue_dead([dead, 2**63])),
            ("requeue_dead([True])", lambda: queue.requeue_dead(_any([True]))),
        ]
        for what, call in bad:
            await _raises(InvalidArgument, what, call)
        await _assert_state(queue, dead, "dead", "a dead row after rejected redrives")
