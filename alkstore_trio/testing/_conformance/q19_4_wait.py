"""Q19.4 wait: ``queue.wait(job_id)`` returns the job once it is completed, cancelled or
dead, woken by the operation that finalized it (not by its poll, which these checks set
to an hour); it raises ``JobGone`` naming ``keep_completed_s`` when the queue has no such
row, and is a pure read that trio cancellation ends at any point."""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import trio
import trio.testing

from ... import AlkstoreError, InvalidArgument, Job, JobGone, QueueOpts
from ._helpers import WAKE_TIMEOUT_S, _assert_mentions, _check, _claim_id, _get, _raises

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ... import JobHandle, Queue
    from .._harness import EngineHarness

#: Longer than any check runs: a wait that returns was woken, not polled.
_NEVER_S = 3600.0
#: How long the checks let every task sit blocked before they act, so that a waiter has
#: made its first read and is parked (real seconds; nothing depends on it but coverage).
_PARKED_S = 0.02


async def _wait_while(
    queue: Queue,
    job_id: int,
    act: Callable[[], Awaitable[object]],
    what: str,
    poll_interval_s: float = _NEVER_S,
) -> Job:
    """Start ``queue.wait(job_id)``, let it park, run ``act``; the job the wait returned
    (it must return within WAKE_TIMEOUT_S although its poll interval is an hour)."""
    got: list[Job] = []

    async def waiter() -> None:
        got.append(await queue.wait(job_id, poll_interval_s=poll_interval_s))

    with trio.move_on_after(WAKE_TIMEOUT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked(_PARKED_S)
            assert not got, f"{what}: wait returned {got[0]!r} before the job was final"
            await act()
    assert got, f"{what}: wait was not woken within {WAKE_TIMEOUT_S} s of the job's end"
    return got[0]


@_check
async def q19_4_wait_returns_a_job_already_final_at_once(harness: EngineHarness) -> None:
    """Q19.4: a job already completed, cancelled (kept) or dead is returned at once, as
    get_job reads it: with its result, or its last error."""
    async with harness.open_store() as store:
        kept = store.queue("wait-final", QueueOpts(keep_completed_s=60))
        done, cancelled, dead = await kept.enqueue_many([b"done", b"cancel", b"dead"])
        assert await (await _claim_id(kept, done)).ack(result=b"42") is True, "ack refused"
        assert await kept.cancel(cancelled) is True, "cancel of a pending job refused"
        assert await (await _claim_id(kept, dead)).fail("boom") is True, "fail refused"
        unkept = store.queue("wait-final-unkept")
        unkept_dead = await unkept.enqueue(b"dead")
        assert await (await _claim_id(unkept, unkept_dead)).fail("bad") is True
        expected = [
            (kept, done, "completed"),
            (kept, cancelled, "cancelled"),
            (kept, dead, "dead"),
            (unkept, unkept_dead, "dead"),
        ]
        for queue, job_id, state in expected:
            with trio.fail_after(WAKE_TIMEOUT_S):
                job = await queue.wait(job_id, poll_interval_s=_NEVER_S)
            assert job.state == state, f"wait of a {state} job returned state {job.state!r}"
            assert job == await _get(queue, job_id), f"wait of a {state} job differs from get_job"
        assert (await kept.wait(done)).result == b"42", "wait lost the result"
        assert (await kept.wait(dead)).last_error == "boom", "wait lost the last error"


@_check
async def q19_4_wait_is_woken_by_every_operation_that_finalizes(
    harness: EngineHarness,
) -> None:
    """Q19.4: a parked wait (its poll an hour away) returns once the job is made final by
    any ack of a kept job (ack, ack_handles, ack_handles_and_claim, ack_batch, a
    transaction's complete: Q19.6), fail,
    fail_handles, a retry at budget (retry, retry_handles), cancel of a pending job, or
    its holder's settle_cancelled."""
    async with harness.open_store() as store:
        queue = store.queue("wait-woken", QueueOpts(keep_completed_s=60, max_attempts=1))

        async def claimed() -> tuple[int, JobHandle]:
            job_id = await queue.enqueue(b"job")
            return job_id, await _claim_id(queue, job_id)

        async def settle(job_id: int, handle: JobHandle) -> None:
            assert await queue.cancel(job_id) is True, "cancel of a processing job refused"
            assert await queue.settle_cancelled([handle]) == [True], "settle refused"

        async def complete_in_tx(_: int, handle: JobHandle) -> None:
            async with store.transaction() as tx:  # Q19.6: announced at the commit
                await tx.complete(handle, result=b"r")

        cases: list[tuple[str, str, Callable[[int, JobHandle], Awaitable[object]]]] = [
            ("ack", "completed", lambda _, h: h.ack(result=b"r")),
            ("ack_handles", "completed", lambda _, h: queue.ack_handles([h], results=[b"r"])),
            (
                "ack_handles_and_claim",
                "completed",
                lambda _, h: queue.ack_handles_and_claim([h], "w", 1, results=[b"r"]),
            ),
            ("ack_batch", "completed", lambda job_id, _: queue.ack_batch([job_id])),
            ("fail", "dead", lambda _, h: h.fail("boom")),
            ("fail_handles", "dead", lambda _, h: queue.fail_handles([(h, "boom")])),
            ("retry at budget", "dead", lambda _, h: h.retry("boom")),
            ("retry_handles at budget", "dead", lambda _, h: queue.retry_handles([(h, "boom", 0)])),
            ("settle_cancelled", "cancelled", settle),
            ("a transaction's complete", "completed", complete_in_tx),
        ]
        for what, state, act in cases:
            job_id, handle = await claimed()
            job = await _wait_while(queue, job_id, functools.partial(act, job_id, handle), what)
            assert job.state == state, f"{what}: wait returned state {job.state!r}, not {state}"
            if state == "completed" and what != "ack_batch":
                assert job.result == b"r", f"{what}: wait returned result {job.result!r}"
            if state == "dead":
                assert job.last_error == "boom", f"{what}: last_error {job.last_error!r}"
        pending = await queue.enqueue(b"pending")
        job = await _wait_while(queue, pending, lambda: queue.cancel(pending), "cancel")
        assert job.state == "cancelled", f"cancel: wait returned state {job.state!r}"


@_check
async def q19_4_wait_raises_job_gone_naming_keep_completed_s(harness: EngineHarness) -> None:
    """Q19.4: JobGone (an AlkstoreError and a LookupError), naming the id, the queue and
    keep_completed_s, for an id the queue never had, another queue's job, an unkept job
    after its ack, a kept job after its purge, and a waited-for unkept job that is acked
    (found at the next poll at the latest)."""
    async with harness.open_store() as store:
        unkept = store.queue("wait-gone")
        kept = store.queue("wait-gone-kept", QueueOpts(keep_completed_s=10))
        other = await store.queue("wait-gone-other").enqueue(b"other queue")
        acked = await unkept.enqueue(b"acked")
        assert await (await _claim_id(unkept, acked)).ack() is True, "ack refused"
        purged = await kept.enqueue(b"purged")
        assert await (await _claim_id(kept, purged)).ack() is True, "ack refused"
        await harness.advance(11)
        assert (await kept.sweep_expired()).purged_completed == 1, "the kept row was not purged"
        for queue, job_id, what in [
            (unkept, 2**62, "an id never issued"),
            (unkept, other, "another queue's job"),
            (unkept, acked, "an unkept acked job"),
            (kept, purged, "a purged kept job"),
        ]:
            with trio.fail_after(WAKE_TIMEOUT_S):
                exc = await _raises(JobGone, what, queue.wait, job_id)
            assert isinstance(exc, LookupError), f"{what}: JobGone is not a LookupError"
            assert isinstance(exc, AlkstoreError), f"{what}: JobGone is not an AlkstoreError"
            _assert_mentions(exc, what, str(job_id), repr(queue.name), "keep_completed_s")
        _assert_mentions(
            await _raises(JobGone, "purged", kept.wait, purged), "purged", "keep_completed_s=10"
        )
        waited = await unkept.enqueue(b"waited")
        handle = await _claim_id(unkept, waited)
        gone: list[BaseException] = []

        async def waiter() -> None:
            try:
                await unkept.wait(waited, poll_interval_s=0.05)
            except JobGone as exc:
                gone.append(exc)

        with trio.fail_after(WAKE_TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiter)
                await trio.testing.wait_all_tasks_blocked(_PARKED_S)
                assert await handle.ack() is True, "ack refused"
        assert gone, "a wait on an unkept job that was acked did not raise JobGone"


@_check
async def q19_4_bad_arguments_raise_without_effect(harness: EngineHarness) -> None:
    """Q19.4: a malformed job id or a poll_interval_s that is not a finite number > 0
    raises InvalidArgument before any read."""
    async with harness.open_store() as store:
        queue = store.queue("wait-bad")
        job_id = await queue.enqueue(b"x")
        before = await _get(queue, job_id)
        for bad_id in ("1", 1.0, True, None, 2**63):
            await _raises(InvalidArgument, f"wait({bad_id!r})", queue.wait, bad_id)
        for bad in (0, -1, math.nan, math.inf, True, "5", None):
            await _raises(
                InvalidArgument, f"poll_interval_s={bad!r}", queue.wait, job_id, poll_interval_s=bad
            )
        assert await _get(queue, job_id) == before, "a refused wait changed the job"


@_check
async def q19_4_wait_is_cancellable_and_a_pure_read(harness: EngineHarness) -> None:
    """Q19.4: a wait on a pending, processing or cancelling job does not return; trio's
    cancellation ends it (move_on_after, fail_after) and the job is unchanged; a later
    wait on the same job is still woken. A job made final by the expiry sweep (which
    PostgreSQL does not announce) is found at the next poll."""
    async with harness.open_store() as store:
        queue = store.queue("wait-cancel", QueueOpts(keep_completed_s=60))
        processing, cancelling = await queue.enqueue_many([b"c", b"x"])
        handle = await _claim_id(queue, processing)
        held = await _claim_id(queue, cancelling)
        pending = await queue.enqueue(b"p")
        assert await queue.cancel(cancelling) is True, "cancel of a processing job refused"
        for job_id in (pending, processing, cancelling):
            before = await _get(queue, job_id)
            with trio.move_on_after(_PARKED_S * 5) as scope:
                await queue.wait(job_id, poll_interval_s=_PARKED_S)
            assert scope.cancelled_caught, f"wait returned for a {before.state} job"
            assert await _get(queue, job_id) == before, f"a wait changed the {before.state} job"
        try:
            with trio.fail_after(_PARKED_S):
                await queue.wait(pending, poll_interval_s=_NEVER_S)
        except trio.TooSlowError:
            pass
        else:
            raise AssertionError("fail_after did not end a wait on a pending job")
        job = await _wait_while(queue, processing, lambda: handle.ack(result=b"ok"), "ack")
        assert (job.state, job.result) == ("completed", b"ok"), f"wait returned {job!r}"
        assert await queue.settle_cancelled([held]) == [True], "settle refused"
        expiring = await store.queue("wait-expire", QueueOpts(expires_in_s=5)).enqueue(b"e")
        expire = store.queue("wait-expire")
        await harness.advance(6)
        job = await _wait_while(expire, expiring, expire.sweep_expired, "sweep", _PARKED_S * 5)
        assert job.state == "dead", f"an expired job's wait returned state {job.state!r}"
