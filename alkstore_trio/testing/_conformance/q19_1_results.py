"""Q19.1 results: an ack may carry a result (bytes-like, at most ``max_result_bytes``),
stored with a kept job in the same atomic step and shown as ``Job.result``; an unkept
job's result is discarded; a bad result raises before any effect."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import InvalidArgument, QueueOpts
from ._helpers import (
    _any,
    _assert_gone,
    _assert_mentions,
    _assert_state,
    _check,
    _claim,
    _claim_id,
    _get,
    _raises,
)

if TYPE_CHECKING:
    from .._harness import EngineHarness

_KEPT = QueueOpts(keep_completed_s=3600)
_MIB = 1024 * 1024


@_check
async def q19_1_a_kept_jobs_result_is_stored_with_its_ack(harness: EngineHarness) -> None:
    """Q19.1: ``ack(result=...)`` of a kept job stores the result byte for byte (bytes,
    bytearray and memoryview alike), and the batch acks store one result per handle."""
    async with harness.open_store() as store:
        queue = store.queue("results", _KEPT)
        ids = [await queue.enqueue(f"job {i}".encode()) for i in range(5)]
        given: list[tuple[int, bytes | bytearray]] = [
            (ids[0], b"\x00r\xff"),
            (ids[1], bytearray(b"ba")),
        ]
        for job_id, result in given:
            handle = await _claim_id(queue, job_id)
            assert await handle.ack(result=result) is True, f"ack of kept job {job_id} refused"
            job = await _assert_state(queue, job_id, "completed", "a kept job after its ack")
            assert job.result == bytes(result), f"job {job_id} kept result {job.result!r}"
            assert type(job.result) is bytes, f"Job.result is a {type(job.result).__name__}"
        handles = await queue.claim_batch("worker", 2)
        done = await queue.ack_handles(handles, results=[memoryview(b"mv"), None])
        assert done == [True, True], f"ack_handles with results returned {done}"
        assert (await _get(queue, handles[0].id)).result == b"mv", "ack_handles lost a result"
        assert (await _get(queue, handles[1].id)).result is None, "a None result became bytes"
        last = await _claim(queue)
        acked, claimed = await queue.ack_handles_and_claim([last], "worker", 1, results=[b""])
        assert (acked, claimed) == ([True], []), f"ack_handles_and_claim: {acked}, {claimed}"
        assert (await _get(queue, last.id)).result == b"", "an empty result was not kept"


@_check
async def q19_1_an_unkept_jobs_result_is_discarded(harness: EngineHarness) -> None:
    """Q19.1: a job whose stamp keeps nothing (``keep_completed_s=None``) is deleted by
    an ack with a result as by one without; in a batch with kept jobs, only the kept
    ones keep theirs."""
    async with harness.open_store() as store:
        unkept = store.queue("discard")
        job_id = await unkept.enqueue(b"x")
        handle = await _claim_id(unkept, job_id)
        assert await handle.ack(result=b"thrown away") is True, "ack with a result refused"
        await _assert_gone(unkept, job_id, "an unkept job acked with a result")
        kept = store.queue("discard", _KEPT)
        first = await kept.enqueue(b"kept")
        second = await unkept.enqueue(b"unkept")
        handles = await kept.claim_batch("worker", 2)
        assert [h.id for h in handles] == [first, second], "claimed the wrong jobs"
        assert await kept.ack_handles(handles, results=[b"a", b"b"]) == [True, True]
        assert (await _get(kept, first)).result == b"a", "the kept job lost its result"
        await _assert_gone(kept, second, "the unkept job of a mixed batch")


@_check
async def q19_1_bad_results_raise_without_effect(harness: EngineHarness) -> None:
    """Q19.1: a result that is not bytes-like or ``None``, larger than
    ``max_result_bytes`` (default 1 MiB), or a ``results`` list of the wrong length
    raises ``InvalidArgument`` naming the problem; the claim stays valid and usable."""
    async with harness.open_store() as store:
        assert store.max_result_bytes == _MIB, f"max_result_bytes is {store.max_result_bytes}"
        queue = store.queue("bad-results", _KEPT)
        job_id = await queue.enqueue(b"x")
        handle = await _claim_id(queue, job_id)
        before = await _get(queue, job_id)
        exc = await _raises(InvalidArgument, "ack(result=str)", handle.ack, _any("text"))
        _assert_mentions(exc, "a str result", "bytes", "str")
        big = b"\x01" * (_MIB + 1)
        exc = await _raises(InvalidArgument, "an oversized result", handle.ack, big)
        _assert_mentions(exc, "an oversized result", f"{_MIB + 1} bytes", "max_result_bytes")
        for results in ([], [b"a", b"b"], _any(b"ab"), _any(7)):
            await _raises(
                InvalidArgument,
                f"ack_handles(results={results!r})",
                queue.ack_handles,
                [handle],
                results,
            )
        assert await _get(queue, job_id) == before, "a refused result changed the row"
        assert await handle.ack(result=b"\x01" * _MIB) is True, "a result of exactly 1 MiB"
        assert (await _get(queue, job_id)).result == b"\x01" * _MIB, "1 MiB result not kept"


@_check
async def q19_1_a_stale_claims_result_is_refused_with_its_ack(harness: EngineHarness) -> None:
    """Q19.1: the result is part of the ack: a claim that lapsed and was reclaimed is
    refused, and neither its result nor a completion is written."""
    async with harness.open_store() as store:
        queue = store.queue("stale-result", QueueOpts(visibility_timeout_s=10, keep_completed_s=60))
        job_id = await queue.enqueue(b"x")
        stale = await _claim_id(queue, job_id, "first")
        await harness.advance(11)
        fresh = await _claim_id(queue, job_id, "second")
        assert await stale.ack(result=b"stale") is False, "a stale claim's ack was accepted"
        job = await _assert_state(queue, job_id, "processing", "after a stale ack")
        assert job.result is None, "a stale ack wrote its result"
        assert await fresh.ack(result=b"fresh") is True, "the valid claim's ack was refused"
        assert (await _get(queue, job_id)).result == b"fresh", "the valid result was not kept"


@_check
async def q19_1_results_go_with_the_fused_ack_of_a_limited_queue(harness: EngineHarness) -> None:
    """Q19.1 with Q18.7: on a limited queue the fused ack-and-claim stores the kept
    jobs' results too, and the slot its ack frees is claimed in the same call."""
    async with harness.open_store() as store:
        queue = store.queue("limited-results", _KEPT)
        await queue.set_limits(max_running=1)
        first, second = await queue.enqueue_many([b"1", b"2"])
        handle = await _claim_id(queue, first)
        acked, claimed = await queue.ack_handles_and_claim([handle], "w", 1, results=[b"one"])
        assert acked == [True], f"the fused ack returned {acked}"
        assert [h.id for h in claimed] == [second], "the freed slot was not claimed"
        assert (await _get(queue, first)).result == b"one", "the limited path lost the result"
