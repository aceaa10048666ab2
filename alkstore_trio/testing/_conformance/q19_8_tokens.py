"""Q19.8 claim tokens: a fresh token per claim, checked by every operation on the claim
(V), never valid again after a redrive; ``release`` gives a claim's attempt back."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ... import HandleConsumed, InvalidArgument, JobHandle, QueueOpts
from ._helpers import _assert_state, _check, _claim_id, _get, _raises, _wait_for_wakes

if TYPE_CHECKING:
    from ... import Queue
    from .._harness import EngineHarness


async def _refused_everywhere(queue: Queue, stale: JobHandle, what: str) -> None:
    """Every operation of ``stale`` is refused and leaves its row as it was."""
    before = await _get(queue, stale.id)
    for name in ("heartbeat", "ack", "retry", "fail", "release"):
        # A fresh handle per one-shot operation: the same stale claim each time.
        handle = JobHandle(queue, stale.job)
        done = await _operate(handle, name)
        assert done is False, f"{what}: {name} was not refused"
        after = await _get(queue, stale.id)
        assert after == before, f"{what}: a refused {name} changed the row: {after!r}"


async def _operate(handle: JobHandle, name: str) -> bool:
    if name == "heartbeat":
        return await handle.heartbeat()
    if name == "ack":
        return await handle.ack()
    if name == "retry":
        return await handle.retry("stale", delay_s=0)
    if name == "fail":
        return await handle.fail("stale")
    return await handle.release("stale")


@_check
async def q19_8_every_claim_of_a_job_gets_a_new_token(harness: EngineHarness) -> None:
    """Q19.8: the claim token is the handle's ``job.claim_token``, shown by get_job while
    processing and kept by the dead row (D1); a retry, a reclaim after a lapse and a
    release each lead to a claim with a token no earlier claim of the job had; a pending
    row has none."""
    async with harness.open_store() as store:
        queue = store.queue("tokens-fresh", QueueOpts(visibility_timeout_s=10, max_attempts=5))
        job_id = await queue.enqueue(b"x")
        assert (await _get(queue, job_id)).claim_token is None, "a pending row has a token"
        seen: list[int] = []

        async def claim() -> JobHandle:
            handle = await _claim_id(queue, job_id)
            token = handle.job.claim_token
            assert token is not None, "a claimed job carries no claim_token"
            assert token not in seen, f"claim {len(seen) + 1} repeated a token of claim {seen}"
            row = await _get(queue, job_id)
            assert row.claim_token == token, f"get_job shows token {row.claim_token}, not {token}"
            seen.append(token)
            return handle

        assert await (await claim()).retry(delay_s=0) is True, "retry refused"
        assert (await _get(queue, job_id)).claim_token is None, "a retry kept the token"
        await claim()
        await harness.advance(11)  # the lease lapses: the next claim is a reclaim
        assert await (await claim()).release("deploy") is True, "release refused"
        last = await claim()
        assert await last.fail("done") is True, "fail refused"
        dead = await _get(queue, job_id)
        assert dead.claim_token == seen[-1], "D1: the dead row lost its claim token"


@_check
async def q19_8_v_refuses_a_token_that_is_not_the_claims(harness: EngineHarness) -> None:
    """Q19.8/Q4: a handle whose token is not the claim's (the attempt count, or another
    job's token) is refused by heartbeat, ack, retry, fail and release, and the row is
    untouched; the holder's own handle then acks."""
    async with harness.open_store() as store:
        queue = store.queue("tokens-wrong")
        first, second = await queue.enqueue_many([b"a", b"b"])
        mine = await _claim_id(queue, first)
        theirs = await _claim_id(queue, second)
        assert mine.job.claim_token is not None, "no claim token"
        assert theirs.job.claim_token is not None, "no claim token"
        candidates = {mine.job.attempts, theirs.job.claim_token, mine.job.claim_token + 1}
        for token in sorted(candidates - {mine.job.claim_token}):
            forged = JobHandle(queue, dataclasses.replace(mine.job, claim_token=token))
            await _refused_everywhere(queue, forged, f"token {token} instead of the claim's")
        assert await mine.ack() is True, "the holder's ack was refused"
        assert await theirs.ack() is True, "the other holder's ack was refused"


@_check
async def q19_8_a_redriven_job_refuses_its_old_holders(harness: EngineHarness) -> None:
    """Q19.8/D24: a holder whose lease lapsed, whose job then died (the pre-claim sweep)
    and was redriven (attempts back to 0) and claimed again, is refused everything,
    although the new claim's attempts equal its own; the new holder acks."""
    async with harness.open_store() as store:
        queue = store.queue("tokens-redrive", QueueOpts(visibility_timeout_s=10, max_attempts=1))
        job_id = await queue.enqueue(b"x")
        old = await _claim_id(queue, job_id, "old")
        await harness.advance(11)
        assert await queue.claim_batch("sweeper", 1) == [], "a spent job was claimed again"
        await _assert_state(queue, job_id, "dead", "after the pre-claim sweep")
        assert await queue.requeue_dead([job_id]) == 1, "the redrive moved nothing"
        assert (await _get(queue, job_id)).claim_token is None, "a redrive kept the token"
        new = await _claim_id(queue, job_id, "new")
        assert new.job.attempts == old.job.attempts, "the redriven job's attempts differ"
        assert new.job.claim_token != old.job.claim_token, "the redriven claim reused a token"
        await _refused_everywhere(queue, old, "the holder from before the redrive")
        assert await new.ack() is True, "the new holder's ack was refused"


@_check
async def q19_8_release_gives_the_claims_attempt_back(harness: EngineHarness) -> None:
    """Q19.8: release of a valid claim makes the job pending, ready now, with
    ``attempts - 1``, ``last_error`` the reason (or None), claim fields and token
    cleared, and wakes the queue; it never dead-letters (even on the last attempt); the
    handle is consumed; a lapsed or stale claim's release is refused. release_handles
    does the same per handle."""
    async with harness.open_store() as store:
        queue = store.queue("tokens-release", QueueOpts(visibility_timeout_s=10, max_attempts=2))
        job_id = await queue.enqueue(b"x", delay_s=5)
        await harness.advance(5)
        handle = await _claim_id(queue, job_id)
        await harness.advance(2)
        now = await harness.now()
        async with store.open_wake_listener([queue]) as listener:
            assert await handle.release("deploy") is True, "release refused"
            await _wait_for_wakes(listener, {queue.name}, "release")
        job = await _get(queue, job_id)
        got = (job.state, job.attempts, job.run_at, job.last_error)
        assert got == ("pending", 0, now, "deploy"), f"released row {got!r}"
        claim = (job.claimed_by, job.claimed_at, job.claim_expires_at, job.claim_token)
        assert claim == (None, None, None, None), f"release kept claim fields {claim!r}"
        await _raises(HandleConsumed, "release after release", handle.release)
        again = await _claim_id(queue, job_id)
        assert again.job.attempts == 1, "the released attempt was not given back"
        await harness.advance(11)
        assert await again.release() is False, "release of a lapsed claim was accepted"
        third = await _claim_id(queue, job_id)  # a reclaim: attempt 2 of 2
        assert await JobHandle(queue, again.job).release() is False, "a stale release passed"
        assert await third.release(None) is True, "release at the last attempt refused"
        job = await _assert_state(queue, job_id, "pending", "a release on the last attempt")
        assert (job.attempts, job.last_error) == (1, None), f"released row {job!r}"
        one, two = await queue.enqueue_many([b"1", b"2"])
        first, second = await _claim_id(queue, job_id), await _claim_id(queue, one)
        stale = JobHandle(queue, first.job)
        assert await first.ack() is True, "ack refused"
        done = await queue.release_handles([stale, second], "batch")
        assert done == [False, True], f"release_handles answered {done}"
        job = await _assert_state(queue, one, "pending", "release_handles")
        assert (job.attempts, job.last_error) == (0, "batch"), f"released row {job!r}"
        await _assert_state(queue, two, "pending", "a job nobody claimed")


@_check
async def q19_8_bad_release_arguments_raise_without_effect(harness: EngineHarness) -> None:
    """Q19.8/D4: a release error that is not a str (or None), or a foreign or repeated
    handle in release_handles, is InvalidArgument; the claim stays valid and the handle
    usable."""
    async with harness.open_store() as store:
        queue = store.queue("tokens-bad")
        other = store.queue("tokens-bad-other")
        job_id = await queue.enqueue(b"x")
        handle = await _claim_id(queue, job_id)
        foreign = await _claim_id(other, await other.enqueue(b"y"))
        await _raises(InvalidArgument, "release(error=5)", handle.release, 5)
        await _raises(
            InvalidArgument, "release_handles(error=b'')", queue.release_handles, [handle], b""
        )
        await _raises(InvalidArgument, "a foreign handle", queue.release_handles, [foreign])
        await _raises(InvalidArgument, "a repeated handle", queue.release_handles, [handle, handle])
        await _assert_state(queue, job_id, "processing", "after refused arguments")
        assert await handle.release() is True, "the handle was consumed by a bad call"


@_check
async def q19_8_a_released_kept_job_is_pending_and_its_next_claim_keeps_it(
    harness: EngineHarness,
) -> None:
    """Q19.8 with Q19.2: releasing a kept job's claim makes the job pending again, not
    completed (history stays empty); the released claim's acks, with results, single or
    batch, are refused and store nothing; the next claim's ack keeps the row with that
    claim's token and result, and the attempt the release gave back."""
    async with harness.open_store() as store:
        queue = store.queue("tokens-kept", QueueOpts(keep_completed_s=60))
        job_id = await queue.enqueue(b"x")
        handle = await _claim_id(queue, job_id)
        assert await handle.release("deploy") is True, "release of a kept job refused"
        job = await _assert_state(queue, job_id, "pending", "a released kept job")
        assert (job.completed_at, job.result) == (None, None), f"released row {job!r}"
        assert await queue.list_jobs("completed") == [], "a release wrote history"
        stale = JobHandle(queue, handle.job)
        assert await stale.ack(result=b"stale") is False, "the released claim's ack passed"
        batch = await queue.ack_handles([JobHandle(queue, handle.job)], results=[b"stale"])
        assert batch == [False], f"the released claim's ack_handles answered {batch}"
        fused, claimed = await queue.ack_handles_and_claim(
            [JobHandle(queue, handle.job)], "w", 1, results=[b"stale"]
        )
        assert fused == [False], f"the released claim's fused ack answered {fused}"
        assert [h.id for h in claimed] == [job_id], "the fused claim missed the released job"
        again = claimed[0]
        assert again.job.claim_token != handle.job.claim_token, "the new claim reused a token"
        assert await queue.list_jobs("completed") == [], "a refused ack wrote history"
        assert await again.ack(result=b"fresh") is True, "the new claim's ack was refused"
        kept = await _assert_state(queue, job_id, "completed", "the new claim's ack")
        got = (kept.result, kept.claim_token, kept.attempts, kept.last_error)
        want = (b"fresh", again.job.claim_token, 1, "deploy")
        assert got == want, f"kept row {got!r}, expected {want!r}"
