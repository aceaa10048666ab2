"""Q19.7 progress: a heartbeat may carry a progress text that ``get_job`` shows from then
on, kept into history and dead rows; validated without effect."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import InvalidArgument, QueueOpts
from ._helpers import _after, _check, _claim_id, _get, _raises

if TYPE_CHECKING:
    from .._harness import EngineHarness


@_check
async def q19_7_a_heartbeat_carries_progress_that_get_job_shows(harness: EngineHarness) -> None:
    """Q19.7: ``heartbeat(progress=...)`` renews the claim and stores the text in the same
    step; a heartbeat without one keeps it; ``heartbeat_handles(progress=...)`` sets one
    per handle (``None``: keeps the job's); ``list_jobs`` shows it too."""
    async with harness.open_store() as store:
        queue = store.queue("progress-shown", QueueOpts(visibility_timeout_s=10))
        first, second = await queue.enqueue_many([b"a", b"b"])
        assert (await _get(queue, first)).progress is None, "a new job has a progress"
        one = await _claim_id(queue, first)
        two = await _claim_id(queue, second)
        await harness.advance(5)
        assert await one.heartbeat(progress="1 of 3") is True, "heartbeat refused"
        row = await _get(queue, first)
        assert row.progress == "1 of 3", f"get_job shows progress {row.progress!r}"
        renewed_until = _after(await harness.now(), 10)
        assert row.claim_expires_at == renewed_until, f"not renewed: {row.claim_expires_at}"
        assert await one.heartbeat() is True, "a plain heartbeat refused"
        assert (await _get(queue, first)).progress == "1 of 3", "a plain heartbeat cleared it"
        renewed = await queue.heartbeat_handles([one, two], progress=[None, "half"])
        assert renewed == [True, True], f"heartbeat_handles answered {renewed}"
        assert (await _get(queue, first)).progress == "1 of 3", "None replaced the progress"
        assert (await _get(queue, second)).progress == "half", "the news was not stored"
        assert await one.heartbeat(progress="") is True, "an empty progress refused"
        assert (await _get(queue, first)).progress == "", "an empty text is a text"
        listed = {job.id: job.progress for job in await queue.list_jobs("processing")}
        assert listed == {first: "", second: "half"}, f"list_jobs shows {listed}"


@_check
async def q19_7_progress_is_kept_into_history_and_dead_rows(harness: EngineHarness) -> None:
    """Q19.7: the progress stays with the job when it is kept as completed (Q19.2), when
    it dies, across a retry; a redrive (D24) clears it (a new run reports its own)."""
    async with harness.open_store() as store:
        queue = store.queue(
            "progress-kept", QueueOpts(visibility_timeout_s=10, keep_completed_s=60)
        )
        kept, dying = await queue.enqueue_many([b"k", b"d"])
        handle = await _claim_id(queue, kept)
        assert await handle.heartbeat(progress="done soon") is True, "heartbeat refused"
        assert await handle.ack(b"r") is True, "ack refused"
        row = await _get(queue, kept)
        assert (row.state, row.progress) == ("completed", "done soon"), f"history: {row!r}"
        assert [j.progress for j in await queue.list_jobs("completed")] == ["done soon"]
        handle = await _claim_id(queue, dying)
        assert await handle.heartbeat(progress="step 2") is True, "heartbeat refused"
        assert await handle.retry("again", delay_s=0) is True, "retry refused"
        assert (await _get(queue, dying)).progress == "step 2", "a retry lost the progress"
        handle = await _claim_id(queue, dying)
        assert await handle.fail("boom") is True, "fail refused"
        row = await _get(queue, dying)
        assert (row.state, row.progress) == ("dead", "step 2"), f"dead row: {row!r}"
        assert [j.progress for j in await queue.list_jobs("dead")] == ["step 2"]
        assert await queue.requeue_dead([dying]) == 1, "redrive refused"
        assert (await _get(queue, dying)).progress is None, "a redrive kept the progress"


@_check
async def q19_7_a_refused_heartbeat_stores_no_progress(harness: EngineHarness) -> None:
    """Q19.7/V: a stale claim's heartbeat with progress is refused and changes nothing;
    the holder's progress stands."""
    async with harness.open_store() as store:
        queue = store.queue("progress-stale", QueueOpts(visibility_timeout_s=10))
        job_id = await queue.enqueue(b"x")
        stale = await _claim_id(queue, job_id)
        await harness.advance(11)
        holder = await _claim_id(queue, job_id, "other")
        assert await holder.heartbeat(progress="mine") is True, "the holder was refused"
        assert await stale.heartbeat(progress="stale") is False, "a stale claim renewed"
        renewed = await queue.heartbeat_handles([stale], progress=["stale"])
        assert renewed == [False], "a stale claim renewed through heartbeat_handles"
        assert (await _get(queue, job_id)).progress == "mine", "a refused heartbeat wrote"


@_check
async def q19_7_progress_is_validated_without_effect(harness: EngineHarness) -> None:
    """Q19.7: a progress text of more than 1,024 characters, with NUL, with a lone
    surrogate or not a str raises InvalidArgument; the claim is not renewed."""
    async with harness.open_store() as store:
        queue = store.queue("progress-bad", QueueOpts(visibility_timeout_s=10))
        job_id = await queue.enqueue(b"x")
        handle = await _claim_id(queue, job_id)
        before = await _get(queue, job_id)
        await harness.advance(1)
        for bad in ("x" * 1025, "a\x00b", "\ud800", b"bytes", 7):
            await _raises(InvalidArgument, f"progress={bad!r:.20}", handle.heartbeat, progress=bad)
            await _raises(
                InvalidArgument,
                f"heartbeat_handles progress={bad!r:.20}",
                queue.heartbeat_handles,
                [handle],
                progress=[bad],
            )
        await _raises(
            InvalidArgument, "one entry per handle", queue.heartbeat_handles, [handle], progress=[]
        )
        assert await _get(queue, job_id) == before, "a refused call changed the row"
        assert await handle.heartbeat(progress="x" * 1024) is True, "1,024 characters refused"
