"""Q18 queue controls: pause and resume (the barrier on claims, what a pause leaves
alone, the wake on resume, and the paused state in stats)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import QueueOpts
from ._helpers import (
    _assert_dead,
    _assert_state,
    _check,
    _claim,
    _no_wake,
    _nothing_claimable,
    _wait_for_wakes,
)

if TYPE_CHECKING:
    from .._harness import EngineHarness


@_check
async def q18_a_paused_queue_hands_out_no_job_until_resumed(harness: EngineHarness) -> None:
    """Q18.1/Q18.2: after pause, claim_one, claim_batch and the claim of
    ack_handles_and_claim return no jobs (twice paused is still paused); other queues
    are not paused; after resume the jobs are claimed in the usual order."""
    async with harness.open_store() as store:
        queue = store.queue("pause-claims")
        other = store.queue("pause-claims-other")
        ids = await queue.enqueue_many([b"a", b"b", b"c"])
        held = await _claim(queue, "holder", "before the pause")
        theirs = await other.enqueue(b"theirs")
        await queue.pause()
        await queue.pause()
        assert await queue.claim_one("w") is None, "claim_one handed out a job of a paused queue"
        await _nothing_claimable(queue, "claim_batch of a paused queue")
        acked, claimed = await queue.ack_handles_and_claim([held], "w", 5)
        assert acked == [True], f"ack_handles_and_claim on a paused queue acked {acked}"
        assert claimed == [], (
            f"ack_handles_and_claim handed out {[h.id for h in claimed]} of a paused queue"
        )
        got = await other.claim_one("w")
        assert got is not None, "pausing a queue paused another one"
        assert got.id == theirs, f"the other queue handed out {got.id}, expected {theirs}"
        await queue.resume()
        after = [h.id for h in await queue.claim_batch("w", 5)]
        assert after == ids[1:], f"after resume claimed {after}, expected {ids[1:]}"


@_check
async def q18_a_pause_leaves_enqueues_and_held_jobs_alone(harness: EngineHarness) -> None:
    """Q18.3: on a paused queue, enqueues (direct and in a transaction) are accepted and
    pending; jobs claimed before the pause heartbeat, ack, retry and fail as ever; a
    cancel works."""
    async with harness.open_store() as store:
        queue = store.queue("pause-alone", QueueOpts(max_attempts=3))
        await queue.enqueue_many([b"hb-ack", b"retry", b"fail"])
        first, second, third = await queue.claim_batch("holder", 3)
        await queue.pause()
        fresh = await queue.enqueue(b"fresh")
        async with store.transaction() as tx:
            in_tx = await tx.enqueue(queue, b"in tx")
        for job_id in (fresh, in_tx):
            await _assert_state(queue, job_id, "pending", "an enqueue on a paused queue")
        assert await first.heartbeat(60) is True, "heartbeat refused on a paused queue"
        assert await first.ack() is True, "ack refused on a paused queue"
        assert await second.retry(delay_s=0) is True, "retry refused on a paused queue"
        await _assert_state(queue, second.id, "pending", "a retry on a paused queue")
        assert await third.fail("stop") is True, "fail refused on a paused queue"
        await _assert_dead(harness, queue, third.id, "stop", "a fail on a paused queue")
        assert await queue.cancel(fresh) is True, "cancel refused on a paused queue"
        await _nothing_claimable(queue, "a paused queue with pending jobs")


@_check
async def q18_a_claim_on_a_paused_queue_still_sweeps(harness: EngineHarness) -> None:
    """Q18.3: the pre-claim sweep of a claim on a paused queue dead-letters a lapsed
    claim at its budget, and hands out nothing (not even a reclaim)."""
    async with harness.open_store() as store:
        queue = store.queue("pause-sweep", QueueOpts(visibility_timeout_s=5, max_attempts=1))
        spent = await queue.enqueue(b"spent")
        await _claim(queue, "dies", "the last attempt")
        lapsed = await store.queue("pause-sweep", QueueOpts(visibility_timeout_s=5)).enqueue(
            b"lapsed"
        )
        await _claim(queue, "dies", "an attempt with more left")
        await queue.pause()
        await harness.advance(6)
        await _nothing_claimable(queue, "a paused queue with a lapsed claim")
        await _assert_dead(
            harness, queue, spent, "max attempts exceeded", "a claim on a paused queue"
        )
        await _assert_state(queue, lapsed, "processing", "a lapsed claim on a paused queue")
        await queue.resume()
        got = await queue.claim_one("w")
        assert got is not None, "the lapsed claim was not reclaimed after resume"
        assert got.id == lapsed, f"after resume claimed {got.id}, expected {lapsed}"


@_check
async def q18_resume_wakes_the_queue_and_pause_does_not(harness: EngineHarness) -> None:
    """Q18.4: resume signals the queue's wake channel; pause signals nothing."""
    async with harness.open_store() as store:
        queue = store.queue("pause-wake")
        async with store.open_wake_listener([queue]) as listener:
            await queue.pause()
            await _no_wake(listener, "pause")
            await queue.resume()
            await _wait_for_wakes(listener, {"pause-wake"}, "resume")


@_check
async def q18_stats_show_the_paused_state(harness: EngineHarness) -> None:
    """Q18.5: stats show paused; stats of every queue list a paused queue without rows,
    and not after its resume."""
    async with harness.open_store() as store:
        queue = store.queue("pause-stats")
        empty = store.queue("pause-stats-empty")
        await queue.enqueue(b"x")
        await queue.pause()
        await empty.pause()
        every = await store.stats()
        names = {entry.queue: entry.paused for entry in every.queues}
        assert names.get("pause-stats") is True, f"stats() of every queue: {names}"
        assert names.get("pause-stats-empty") is True, (
            f"stats() did not list the paused queue without rows: {names}"
        )
        one = (await store.stats("pause-stats")).queue("pause-stats")
        assert one is not None, "stats(name) of a paused queue did not list it"
        assert one.paused, f"stats(name) of a paused queue: {one}"
        assert one.pending_ready == 1, f"stats(name) of a paused queue: {one}"
        await queue.resume()
        await empty.resume()
        every = await store.stats()
        names = {entry.queue: entry.paused for entry in every.queues}
        assert names.get("pause-stats") is False, f"stats() after resume: {names}"
        assert "pause-stats-empty" not in names, f"a resumed empty queue is listed: {names}"
