"""Q19.2 history and Q19.3 purge: a job whose stamp ``keep_completed_s`` is set stays
readable after its ack as ``"completed"``, listed by ``list_jobs("completed")``, never
counted by ``stats``, until a sweep purges it after ``completed_at + keep_completed_s``
(in batches)."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

from ... import InvalidArgument, QueueOpts, SweepResult
from ._helpers import (
    INSTANT_S,
    _any,
    _assert_gone,
    _assert_state,
    _assert_utc,
    _check,
    _claim_id,
    _get,
    _raises,
)

if TYPE_CHECKING:
    from .._harness import EngineHarness


@_check
async def q19_2_keep_completed_s_is_a_validated_stamp(harness: EngineHarness) -> None:
    """Q19.2 (Q1, D8): ``keep_completed_s`` is ``None`` (the default) or a finite
    duration >= 0; the handle that enqueues stamps it on the row, and a row enqueued by
    queue name gets ``None``."""
    for bad in (-1, math.nan, math.inf, True, "60"):
        await _raises(InvalidArgument, f"keep_completed_s={bad!r}", QueueOpts, keep_completed_s=bad)
    assert QueueOpts().keep_completed_s is None, "the default keeps something"
    assert QueueOpts(keep_completed_s=0).keep_completed_s == 0
    async with harness.open_store() as store:
        queue = store.queue("stamp", QueueOpts(keep_completed_s=90))
        stamped = await queue.enqueue(b"x")
        assert (await _get(queue, stamped)).keep_completed_s == 90, "the stamp is missing"
        async with store.transaction() as tx:
            in_tx = await tx.enqueue(queue, b"tx")
            by_name = await tx.enqueue("stamp", b"by name")
        assert (await _get(queue, in_tx)).keep_completed_s == 90, "tx.enqueue lost the stamp"
        assert (await _get(queue, by_name)).keep_completed_s is None, "a name got a stamp"


@_check
async def q19_2_a_kept_job_is_readable_after_its_ack(harness: EngineHarness) -> None:
    """Q19.2: after its ack a kept job reads back as ``"completed"``: the row as its
    claim left it (attempts, claim fields, headers, keys, stamps), with ``completed_at``
    the ack's now and its result; find_job finds it too; the unique key is free."""
    async with harness.open_store() as store:
        queue = store.queue("kept", QueueOpts(keep_completed_s=60, max_attempts=5))
        job_id = await queue.enqueue(b"\x00p", headers={"trace": "t1"}, unique_key="k", priority=3)
        handle = await _claim_id(queue, job_id, "holder")
        claimed = await _get(queue, job_id)
        await harness.advance(2)
        now = await harness.now()
        assert await handle.ack(result=b"done") is True, "the ack of a kept job was refused"
        kept = await _get(queue, job_id)
        expected = dataclasses.replace(claimed, state="completed", completed_at=now, result=b"done")
        assert kept == expected, f"kept row {kept!r} differs from {expected!r}"
        assert kept.payload == b"\x00p", f"kept payload {kept.payload!r}"
        assert dict(kept.headers) == {"trace": "t1"}, "the kept row lost its headers"
        assert kept.unique_key == "k", f"kept unique key {kept.unique_key!r}"
        _assert_utc(kept, "a kept row")
        assert await store.get_job(job_id) == kept, "find_job does not see the kept row"
        again = await queue.enqueue(b"again", unique_key="k")
        assert again.created, "a kept row still holds its unique key"
        assert await queue.cancel(job_id) is False, "cancel touched a kept row"


@_check
async def q19_2_unkept_jobs_are_deleted_and_ack_batch_keeps(harness: EngineHarness) -> None:
    """Q19.2: without the stamp an ack deletes the row (Q4); ``ack_batch`` (Q6) keeps a
    kept row as an ack does."""
    async with harness.open_store() as store:
        plain = store.queue("mixed")
        kept = store.queue("mixed", QueueOpts(keep_completed_s=0))
        gone = await plain.enqueue(b"gone")
        stays = await kept.enqueue(b"stays")
        first = await _claim_id(plain, gone)
        second = await _claim_id(plain, stays)
        assert await first.ack() is True
        await _assert_gone(plain, gone, "an unkept job after its ack")
        assert await plain.ack_batch([second.id]) == 1, "ack_batch refused a kept job"
        job = await _assert_state(plain, stays, "completed", "a kept job after ack_batch")
        assert job.result is None, f"ack_batch stored a result {job.result!r}"


@_check
async def q19_2_list_jobs_pages_the_completed_rows(harness: EngineHarness) -> None:
    """Q19.2/D26: ``list_jobs("completed")`` lists this queue's kept rows by id, a page
    at a time, with their results; live rows and other queues' kept rows are not in it;
    ``stats`` counts no kept row (only ``acked_total`` counts the acks)."""
    async with harness.open_store() as store:
        queue = store.queue("listed", QueueOpts(keep_completed_s=600))
        other = store.queue("listed-other", QueueOpts(keep_completed_s=600))
        ids = await queue.enqueue_many([b"%d" % i for i in range(5)])
        live = await queue.enqueue(b"live", delay_s=1000)
        handles = await queue.claim_batch("worker", 5)
        await queue.ack_handles(handles, results=[b"r%d" % i for i in range(5)])
        foreign = await other.enqueue(b"foreign")
        await (await _claim_id(other, foreign)).ack()
        first = await queue.list_jobs("completed", limit=2)
        second = await queue.list_jobs("completed", limit=2, after_id=first[-1].id)
        third = await queue.list_jobs("completed", limit=2, after_id=second[-1].id)
        pages = [[job.id for job in page] for page in (first, second, third)]
        assert pages == [ids[0:2], ids[2:4], ids[4:]], f"pages {pages}, expected {ids}"
        assert [job.result for job in first] == [b"r0", b"r1"], "the listing lost results"
        assert all(job.state == "completed" for job in [*first, *second, *third])
        assert live not in [job.id for job in [*first, *second, *third]], "a live row listed"
        stats = (await store.stats(queue)).queue("listed")
        assert stats is not None, "stats lost the queue"
        assert (stats.live, stats.dead, stats.acked_total) == (1, 0, 5), f"stats: {stats!r}"


@_check
async def q19_3_sweeps_purge_kept_rows_after_their_time(harness: EngineHarness) -> None:
    """Q19.3: a sweep deletes this queue's kept rows with ``completed_at +
    keep_completed_s < now`` (not at the instant itself), each by its own stamp, and
    counts them in ``SweepResult.purged_completed``; other queues' rows stay."""
    async with harness.open_store() as store:
        short = store.queue("purge", QueueOpts(keep_completed_s=100))
        long = store.queue("purge", QueueOpts(keep_completed_s=200))
        other = store.queue("purge-other", QueueOpts(keep_completed_s=0))
        a, b, c = await short.enqueue(b"a"), await long.enqueue(b"b"), await other.enqueue(b"c")
        for queue, job_id in ((short, a), (short, b), (other, c)):
            await (await _claim_id(queue, job_id)).ack()
        await harness.advance(100)
        assert await short.sweep_expired() == SweepResult(0, 0, 0), "purged at the instant"
        await harness.advance(INSTANT_S)
        assert await short.sweep_expired() == SweepResult(0, 0, 1), "did not purge after it"
        await _assert_gone(short, a, "a kept row past its time")
        await _assert_state(short, b, "completed", "a kept row with a longer stamp")
        await _assert_state(other, c, "completed", "another queue's kept row")
        await harness.advance(100)
        assert await long.sweep_expired() == SweepResult(0, 0, 1), "the second row stayed"
        assert await other.sweep_expired() == SweepResult(0, 0, 1), "keep_completed_s=0"


@_check
async def q19_3_a_purge_larger_than_one_batch_completes(harness: EngineHarness) -> None:
    """Q19.3: kept rows are purged in batches of 5,000; one sweep goes on with the next
    batch while a batch came back full, so 6,000 due rows are gone after one sweep."""
    async with harness.open_store() as store:
        queue = store.queue("many", QueueOpts(keep_completed_s=10))
        for _ in range(6):
            await queue.enqueue_many([b""] * 1000)
            handles = await queue.claim_batch("worker", 1000)
            done = await queue.ack_handles(handles)
            assert all(done), "an ack of the batch was refused"
        assert len(await queue.list_jobs("completed", limit=1000)) == 1000
        await harness.advance(11)
        assert await queue.sweep_expired() == SweepResult(0, 0, 6000), "not all purged"
        assert await queue.list_jobs("completed") == [], "kept rows left after the purge"


@_check
async def q19_2_list_jobs_rejects_unknown_states(harness: EngineHarness) -> None:
    """D26/Q19.2: ``list_jobs`` takes ``"completed"`` but no other new state."""
    async with harness.open_store() as store:
        queue = store.queue("states")
        assert await queue.list_jobs("completed") == [], "an empty history listed rows"
        await _raises(InvalidArgument, "list_jobs('done')", queue.list_jobs, _any("done"))
