"""Q16 rescheduling: ``queue.reschedule`` changes a pending job's due time and priority
and wakes its queue with the new due time; every wake of a delayed job says when it is
due (``listener.take_due``); ``queue.next_due_in_s`` is the queue's next due time."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import trio

from ... import InvalidArgument
from ._helpers import (
    INT32_MAX,
    _after,
    _any,
    _check,
    _claim,
    _claim_id,
    _dead_job,
    _get,
    _no_wake,
    _nothing_claimable,
    _raises,
    _wait_for_wakes,
)

if TYPE_CHECKING:
    from ... import WakeListener
    from .._harness import EngineHarness

#: How far a due time read from a wake may fall short of the delay announced: the time
#: between the wake's arrival and the check's read of the trio clock (never more).
_DUE_SLACK_S = 5.0


def _assert_due(listener: WakeListener, queue: str, delay_s: float, what: str) -> None:
    """The wakes the last ``wait`` returned announced ``queue``'s job due in ``delay_s``."""
    due = listener.take_due()
    assert queue in due, f"{what}: take_due() is {due!r}; expected a due time for {queue!r}"
    left = due[queue] - trio.current_time()
    assert delay_s - _DUE_SLACK_S < left <= delay_s + 0.001, (
        f"{what}: the wake says the job is due in {left:.3f}s; expected {delay_s}s"
    )


def _unchanged(before: object, after: object, what: str) -> None:
    assert after == before, f"{what}: the row changed: {before!r} -> {after!r}"


@_check
async def q16_reschedule_changes_a_pending_jobs_run_at_and_priority(
    harness: EngineHarness,
) -> None:
    """Q16: ``delay_s`` makes ``run_at`` now + delay (a negative one: now), ``run_at`` is
    stored as given, and ``priority`` alone keeps ``run_at``; nothing else changes."""
    async with harness.open_store() as store:
        queue = store.queue("resched")
        job_id = await queue.enqueue(b"x", delay_s=60, priority=1)
        before = await _get(queue, job_id)
        await harness.advance(5)
        now = await harness.now()
        assert await queue.reschedule(job_id, delay_s=30) is True, "reschedule returned False"
        job = await _get(queue, job_id)
        assert job.run_at == _after(now, 30), f"run_at is {job.run_at}, expected now + 30 s"
        _unchanged(before, dataclasses.replace(job, run_at=before.run_at), "delay_s")
        at = datetime(2100, 1, 2, 3, 4, 5, tzinfo=UTC)
        assert await queue.reschedule(job_id, run_at=at, priority=-7) is True
        job = await _get(queue, job_id)
        assert (job.run_at, job.priority) == (at, -7), f"run_at/priority are {job!r}"
        assert await queue.reschedule(job_id, priority=INT32_MAX) is True
        job = await _get(queue, job_id)
        assert (job.run_at, job.priority) == (at, INT32_MAX), "priority alone moved run_at"
        assert await queue.reschedule(job_id, delay_s=-10) is True
        job = await _get(queue, job_id)
        assert job.run_at == now, f"a negative delay gave run_at {job.run_at}, not now {now}"
        handle = await _claim_id(queue, job_id)
        assert handle.job.attempts == 1, "the rescheduled job was claimed with wrong attempts"


@_check
async def q16_a_rescheduled_job_is_claimed_at_its_new_time_and_place(
    harness: EngineHarness,
) -> None:
    """Q16: a job moved later is not claimable until then; one moved to now, or given a
    higher priority, is claimed in its new place of the claim order (Q3)."""
    async with harness.open_store() as store:
        queue = store.queue("resched-order")
        first, second, third = await queue.enqueue_many([b"1", b"2", b"3"])
        assert await queue.reschedule(first, delay_s=20) is True
        assert await queue.reschedule(third, priority=5) is True
        assert (await _claim(queue)).id == third, "the raised priority was not claimed first"
        assert (await _claim(queue)).id == second, "the job left in place was not next"
        await _nothing_claimable(queue, "before the rescheduled job is due")
        await harness.advance(20)
        assert (await _claim(queue)).id == first, "the rescheduled job was not claimed when due"


@_check
async def q16_reschedule_refuses_processing_dead_missing_and_other_queue_jobs(
    harness: EngineHarness,
) -> None:
    """Q16: ``False`` and no change for a processing, dead, unknown or other queue's job."""
    async with harness.open_store() as store:
        queue = store.queue("resched-misses")
        other = store.queue("resched-other")
        processing = await queue.enqueue(b"p")
        await _claim_id(queue, processing)
        dead = await _dead_job(queue, b"d")
        foreign = await other.enqueue(b"f", delay_s=50)
        for job_id, target, what in [
            (processing, queue, "a processing job"),
            (dead, queue, "a dead job"),
            (foreign, other, "another queue's job"),
        ]:
            before = await _get(target, job_id)
            assert await queue.reschedule(job_id, delay_s=0, priority=3) is False, (
                f"reschedule of {what} returned True"
            )
            _unchanged(before, await _get(target, job_id), f"reschedule of {what}")
        for unknown in [foreign + 1_000_000, 0, -1]:
            assert await queue.reschedule(unknown, delay_s=0) is False, (
                f"reschedule({unknown}) returned True"
            )


@_check
async def q16_reschedule_rejects_bad_arguments_without_effect(harness: EngineHarness) -> None:
    """Q16: both ``delay_s`` and ``run_at``, nothing to change, or an invalid value is
    ``InvalidArgument`` (D4: after the store's own checks) and changes nothing."""
    async with harness.open_store() as store:
        queue = store.queue("resched-bad")
        job_id = await queue.enqueue(b"x", delay_s=40)
        before = await _get(queue, job_id)
        at = datetime(2100, 1, 1, tzinfo=UTC)
        bad: list[tuple[str, dict[str, object]]] = [
            ("delay_s and run_at", {"delay_s": 1, "run_at": at}),
            ("nothing to change", {}),
            ("delay_s NaN", {"delay_s": float("nan")}),
            ("delay_s str", {"delay_s": "1"}),
            ("delay_s bool", {"delay_s": True}),
            ("naive run_at", {"run_at": datetime(2100, 1, 1)}),
            ("run_at str", {"run_at": "2100-01-01"}),
            ("priority too large", {"priority": INT32_MAX + 1}),
            ("priority float", {"priority": 1.0}),
        ]
        for what, kwargs in bad:
            await _raises(
                InvalidArgument, f"reschedule with {what}", queue.reschedule, job_id, **kwargs
            )
        await _raises(InvalidArgument, "reschedule('1')", queue.reschedule, _any("1"), delay_s=0)
        _unchanged(before, await _get(queue, job_id), "rejected reschedules")


@_check
async def q16_every_wake_of_a_delayed_job_says_when_it_is_due(harness: EngineHarness) -> None:
    """Q16/R11: an enqueue, enqueue_many or committed transaction of delayed jobs wakes
    the queue, and ``take_due`` says in how long the earliest is due (counted on the
    listener's trio clock from the wake's arrival); a job ready now announces none."""
    async with harness.open_store() as store:
        queue = store.queue("due-wakes")
        async with store.open_wake_listener([queue]) as listener:
            await queue.enqueue(b"ready")
            await _wait_for_wakes(listener, {queue.name}, "after a ready enqueue")
            assert listener.take_due() == {}, "a job ready now announced a due time"
            await queue.enqueue(b"later", delay_s=60)
            await _wait_for_wakes(listener, {queue.name}, "after a delayed enqueue")
            _assert_due(listener, queue.name, 60, "enqueue(delay_s=60)")
            assert listener.take_due() == {}, "take_due handed out a due time twice"
            await queue.enqueue_many([b"a", b"b"], run_at=_after(await harness.now(), 90))
            await _wait_for_wakes(listener, {queue.name}, "after enqueue_many(run_at=...)")
            _assert_due(listener, queue.name, 90, "enqueue_many(run_at=now + 90 s)")
            async with store.transaction() as tx:
                await tx.enqueue(queue, b"tx", delay_s=45)
            await _wait_for_wakes(listener, {queue.name}, "after a committed transaction")
            _assert_due(listener, queue.name, 45, "tx.enqueue(delay_s=45)")
            await queue.enqueue(b"past", run_at=_after(await harness.now(), -60))
            await _wait_for_wakes(listener, {queue.name}, "after an enqueue due in the past")
            assert listener.take_due() == {}, "a job due in the past announced a due time"


@_check
async def q16_reschedule_wakes_the_queue_with_the_new_due_time(harness: EngineHarness) -> None:
    """Q16/R11: a reschedule wakes the queue, with the new due time when it is later than
    now; a refused one wakes nobody."""
    async with harness.open_store() as store:
        queue = store.queue("resched-wakes")
        job_id = await queue.enqueue(b"x", delay_s=600)
        async with store.open_wake_listener([queue]) as listener:
            await _no_wake(listener, "before the reschedule")
            assert await queue.reschedule(job_id, delay_s=120) is True
            await _wait_for_wakes(listener, {queue.name}, "after reschedule(delay_s=120)")
            _assert_due(listener, queue.name, 120, "reschedule(delay_s=120)")
            assert await queue.reschedule(job_id, delay_s=0) is True
            await _wait_for_wakes(listener, {queue.name}, "after reschedule(delay_s=0)")
            assert listener.take_due() == {}, "a job rescheduled to now announced a due time"
            await _claim_id(queue, job_id)
            assert await queue.reschedule(job_id, delay_s=5) is False
            await _no_wake(listener, "after a refused reschedule")


@_check
async def q16_next_due_in_s_is_the_earliest_future_run_at_of_the_queue(
    harness: EngineHarness,
) -> None:
    """Q16: ``next_due_in_s`` is the seconds until the earliest ``run_at`` later than now
    of the queue's pending jobs, whatever their priorities; ready, processing and other
    queues' jobs do not count; ``None`` when there is none."""
    async with harness.open_store() as store:
        queue = store.queue("next-due")
        other = store.queue("next-due-other")
        assert await queue.next_due_in_s() is None, "an empty queue has a next due time"
        await queue.enqueue(b"ready")
        await other.enqueue(b"elsewhere", delay_s=1)
        assert await queue.next_due_in_s() is None, "a ready job counted as a due time"
        await queue.enqueue(b"late", delay_s=30, priority=INT32_MAX)
        await queue.enqueue(b"soon", delay_s=10, priority=-1)
        await queue.enqueue(b"mid", delay_s=20)
        await _claim(queue)
        assert await queue.next_due_in_s() == 10, "the earliest delayed job is due in 10 s"
        await harness.advance(4)
        assert await queue.next_due_in_s() == 6, "6 s later the earliest is due in 6 s"
        await harness.advance(6)
        assert await queue.next_due_in_s() == 10, "once due, the next one (20 s) counts"
        await _claim(queue)
        await harness.advance(25)
        assert await queue.next_due_in_s() is None, "every delayed job is due now"
