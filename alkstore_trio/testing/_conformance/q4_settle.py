"""Q4 job handle operations, one handle at a time: heartbeat, ack, retry and fail under the
validity predicate V (at the deadline instant and one instant later), one-shot handles
and atomic dead-letter moves (D1, D3)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ... import HandleConsumed, InvalidArgument, JobHandle, QueueOpts
from ._helpers import (
    EXPIRED,
    FAILED,
    INSTANT_S,
    MAX_ATTEMPTS_EXCEEDED,
    _after,
    _assert_dead,
    _assert_gone,
    _check,
    _claim,
    _claim_id,
    _get,
    _nothing_claimable,
    _raises,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._harness import EngineHarness


@_check
async def q4_heartbeat_is_an_absolute_reset(harness: EngineHarness) -> None:
    """Q4: heartbeat(extend_s) sets claim_expires_at = now + extend_s (it may shorten the
    lease; repeating it does not add up); claimed_at and attempts do not change."""
    async with harness.open_store() as store:
        queue = store.queue("heartbeat", QueueOpts(visibility_timeout_s=30))
        job_id = await queue.enqueue(b"x")
        claimed_at = await harness.now()
        handle = await _claim_id(queue, job_id)
        await harness.advance(10)
        now = await harness.now()
        assert await handle.heartbeat(5) is True, "a heartbeat within the lease was refused"
        row = await _get(queue, job_id)
        assert row.claim_expires_at == _after(now, 5), (
            f"heartbeat(5) set claim_expires_at {row.claim_expires_at}, expected now + 5 s "
            f"({_after(now, 5)}), not an extension of the old deadline"
        )
        assert (row.claimed_at, row.attempts) == (claimed_at, 1), (
            f"heartbeat changed (claimed_at, attempts) to {(row.claimed_at, row.attempts)!r}"
        )
        await harness.advance(5)
        now = await harness.now()
        for _ in range(3):
            assert await handle.heartbeat(100) is True, "a repeated heartbeat was refused"
        row = await _get(queue, job_id)
        assert row.claim_expires_at == _after(now, 100), (
            f"three heartbeat(100) at one instant set claim_expires_at {row.claim_expires_at}, "
            f"expected now + 100 s ({_after(now, 100)})"
        )
        assert (row.claimed_at, row.attempts, row.state) == (claimed_at, 1, "processing"), (
            "heartbeat changed claimed_at, attempts or state"
        )


@_check
async def q4_heartbeat_defaults_to_the_rows_visibility_timeout(harness: EngineHarness) -> None:
    """Q4: heartbeat() without extend_s sets claim_expires_at = now + the row's own
    visibility_timeout_s."""
    async with harness.open_store() as store:
        short = store.queue("hb-default", QueueOpts(visibility_timeout_s=20))
        long = store.queue("hb-default", QueueOpts(visibility_timeout_s=500))
        short_id = await short.enqueue(b"s", priority=1)
        long_id = await long.enqueue(b"l")
        h_short = await _claim_id(long, short_id)
        h_long = await _claim_id(short, long_id)
        await harness.advance(7)
        now = await harness.now()
        for handle, own in [(h_short, 20), (h_long, 500)]:
            assert await handle.heartbeat() is True, "heartbeat() within the lease was refused"
            row = await _get(short, handle.id)
            assert row.claim_expires_at == _after(now, own), (
                f"heartbeat() set claim_expires_at {row.claim_expires_at}, expected now + the "
                f"row's visibility_timeout_s {own} ({_after(now, own)})"
            )


@_check
async def q4_heartbeat_rejects_invalid_extend(harness: EngineHarness) -> None:
    """Decision 3: extend_s must be a finite number > 0 or None; otherwise
    InvalidArgument, and the lease is unchanged."""
    async with harness.open_store() as store:
        queue = store.queue("hb-invalid")
        await queue.enqueue(b"x")
        handle = await _claim(queue)
        before = await _get(queue, handle.id)
        for bad in [0, 0.0, -1, float("nan"), float("inf"), True, "5"]:
            await _raises(InvalidArgument, f"heartbeat({bad!r})", handle.heartbeat, bad)
        after = await _get(queue, handle.id)
        assert after == before, "a rejected heartbeat changed the row"
        assert await handle.ack() is True, "a rejected heartbeat spoiled the handle"


@_check
async def q4_late_heartbeat_is_refused(harness: EngineHarness) -> None:
    """Q4: a heartbeat after the deadline returns False, leaves the row as it was, and the
    row stays reclaimable."""
    async with harness.open_store() as store:
        queue = store.queue("late-hb", QueueOpts(visibility_timeout_s=30))
        job_id = await queue.enqueue(b"x")
        handle = await _claim_id(queue, job_id)
        await harness.advance(31)
        before = await _get(queue, job_id)
        for extend in [None, 1000]:
            result = await handle.heartbeat(extend)
            assert result is False, (
                f"a late heartbeat({extend}) returned {result!r}, expected False"
            )
        after = await _get(queue, job_id)
        assert after == before, f"a refused heartbeat changed the row: {before!r} -> {after!r}"
        again = await _claim_id(queue, job_id, "rescuer")
        assert again.job.attempts == 2, "the row was not reclaimed after a refused heartbeat"


@_check
async def q4_claim_is_valid_at_the_deadline_instant(harness: EngineHarness) -> None:
    """Q4: at ``now == claim_expires_at`` the claim is still valid (heartbeat, ack, retry,
    fail and ack_batch succeed) and the row is not reclaimable."""
    async with harness.open_store() as store:
        queue = store.queue("deadline", QueueOpts(visibility_timeout_s=30))
        ids = await queue.enqueue_many([b"hb", b"ack", b"retry", b"fail", b"batch"])
        handles = {h.id: h for h in await queue.claim_batch("holder", 5)}
        assert set(handles) == set(ids), "claim_batch(5) did not claim the 5 jobs"
        await harness.advance(30)
        assert await queue.claim_one("thief") is None, "a row was reclaimed at now == deadline"
        hb, ack, retry, fail, batch = ids
        assert await handles[hb].heartbeat() is True, "heartbeat at now == deadline was refused"
        assert await handles[ack].ack() is True, "ack at now == deadline was refused"
        assert await handles[retry].retry(delay_s=100) is True, (
            "retry at now == deadline was refused"
        )
        assert await handles[fail].fail() is True, "fail at now == deadline was refused"
        assert await queue.ack_batch([batch]) == 1, "ack_batch at now == deadline did not count"


@_check
async def q4_claim_lapses_one_instant_after_the_deadline(harness: EngineHarness) -> None:
    """Q4: one instant after the deadline every holder operation returns False and leaves
    the row untouched, and the row is reclaimable."""
    async with harness.open_store() as store:
        queue = store.queue("lapsed", QueueOpts(visibility_timeout_s=30))
        ids = await queue.enqueue_many([b"hb", b"ack", b"retry", b"fail", b"batch"])
        handles = {h.id: h for h in await queue.claim_batch("holder", 5)}
        await harness.advance(30 + INSTANT_S)
        operations: list[tuple[str, Callable[[JobHandle], Awaitable[bool]]]] = [
            ("heartbeat", lambda h: h.heartbeat()),
            ("ack", lambda h: h.ack()),
            ("retry", lambda h: h.retry("late", delay_s=0)),
            ("fail", lambda h: h.fail("late")),
        ]
        for job_id, (name, operation) in zip(ids, operations, strict=False):
            before = await _get(queue, job_id)
            result = await operation(handles[job_id])
            assert result is False, f"{name} one instant after the deadline returned {result!r}"
            after = await _get(queue, job_id)
            assert after == before, f"the refused {name} changed the row: {before!r} -> {after!r}"
        assert await queue.ack_batch([ids[-1]]) == 0, "ack_batch counted a lapsed claim"
        reclaimed = await queue.claim_batch("rescuer", 10)
        assert {h.id for h in reclaimed} == set(ids), (
            f"one instant after the deadline, reclaims took {sorted(h.id for h in reclaimed)}, "
            f"expected all of {ids}"
        )


@_check
async def q4_ack_deletes_the_row(harness: EngineHarness) -> None:
    """Q4: ack deletes the row (not dead-lettered: get_job shows nothing)."""
    async with harness.open_store() as store:
        queue = store.queue("ack")
        job_id = await queue.enqueue(b"x")
        handle = await _claim_id(queue, job_id)
        assert await handle.ack() is True, "ack of a valid claim was refused"
        await _assert_gone(queue, job_id, "after ack")
        assert await queue.cancel(job_id) is False, "cancel found a live row after ack"
        await _nothing_claimable(queue, "after ack")


@_check
async def q4_retry_at_budget_dead_letters(harness: EngineHarness) -> None:
    """Q4: retry on the last allowed attempt moves the row to dead with
    ``last_error = error`` or "max attempts exceeded" (a given delay is ignored); claim
    fields are kept (decision 1)."""
    async with harness.open_store() as store:
        queue = store.queue("retry-budget", QueueOpts(max_attempts=1))
        cases: list[tuple[dict[str, Any], str]] = [
            ({}, MAX_ATTEMPTS_EXCEEDED),
            ({"error": "boom"}, "boom"),
            ({"error": ""}, ""),
            ({"error": "boom", "delay_s": 30}, "boom"),
            ({"delay_s": 0}, MAX_ATTEMPTS_EXCEEDED),
        ]
        for kwargs, last_error in cases:
            job_id = await queue.enqueue(b"x")
            claimed_at = await harness.now()
            handle = await _claim_id(queue, job_id, "holder")
            await harness.advance(1)
            now = await harness.now()
            assert await handle.retry(**kwargs) is True, (
                f"retry(**{kwargs!r}) at budget was refused"
            )
            dead = await _assert_dead(harness, queue, job_id, last_error, f"retry(**{kwargs!r})")
            seen = (dead.died_at, dead.attempts, dead.claimed_by, dead.claimed_at)
            expected = (now, 1, "holder", claimed_at)
            assert seen == expected, (
                f"retry(**{kwargs!r}) at budget: (died_at, attempts, claimed_by, claimed_at) = "
                f"{seen!r}, expected {expected!r}"
            )


@_check
async def q4_retry_below_budget_with_an_explicit_delay(harness: EngineHarness) -> None:
    """Q4: below budget, retry puts the row back to pending with run_at = now + delay_s
    (0 = ready now), last_error = error (None clears it), attempts kept, claim fields
    cleared (decision 1)."""
    async with harness.open_store() as store:
        queue = store.queue("retry-delay", QueueOpts(max_attempts=5, backoff_base_s=1000))
        job_id = await queue.enqueue(b"x")
        handle = await _claim_id(queue, job_id)
        await harness.advance(2)
        now = await harness.now()
        assert await handle.retry("first failure", delay_s=30) is True, "retry was refused"
        row = await _get(queue, job_id)
        seen = (row.state, row.run_at, row.last_error, row.attempts)
        expected = ("pending", _after(now, 30), "first failure", 1)
        assert seen == expected, f"after retry(delay_s=30): {seen!r}, expected {expected!r}"
        assert (row.claimed_by, row.claimed_at, row.claim_expires_at) == (None, None, None), (
            f"retry left claim fields {(row.claimed_by, row.claimed_at, row.claim_expires_at)!r}"
        )
        await harness.advance(30 - INSTANT_S)
        assert await queue.claim_one("w") is None, "a retried job was claimable before its delay"
        await harness.advance(INSTANT_S)
        handle = await _claim_id(queue, job_id)
        assert handle.job.attempts == 2, f"the second claim shows attempts {handle.job.attempts}"
        now = await harness.now()
        assert await handle.retry(delay_s=0) is True, "retry(delay_s=0) was refused"
        row = await _get(queue, job_id)
        assert (row.run_at, row.last_error, row.state) == (now, None, "pending"), (
            f"retry(delay_s=0) gave (run_at, last_error, state) = "
            f"{(row.run_at, row.last_error, row.state)!r}, expected ({now}, None, 'pending')"
        )
        handle = await _claim_id(queue, job_id)
        assert handle.job.attempts == 3, "a job retried with delay_s=0 was not ready at once"


@_check
async def q4_retry_and_fail_reject_invalid_arguments_without_effect(harness: EngineHarness) -> None:
    """Q4/Q12 and decisions 4/9: a negative or non-finite delay_s, or an error that is not
    a storable str, is InvalidArgument; the row is untouched and the handle not consumed."""
    async with harness.open_store() as store:
        queue = store.queue("retry-invalid")
        job_id = await queue.enqueue(b"x")
        handle = await _claim_id(queue, job_id)
        before = await _get(queue, job_id)
        nan, inf = float("nan"), float("inf")
        for bad in [-1, -0.001, nan, inf, True, "5"]:
            await _raises(InvalidArgument, f"retry(delay_s={bad!r})", handle.retry, delay_s=bad)
        for bad_error in [5, b"bytes", "a\x00b", "\ud800", "e" * 65537]:
            shown = bad_error if not isinstance(bad_error, str) or len(bad_error) < 20 else "<long>"
            await _raises(InvalidArgument, f"retry(error={shown!r})", handle.retry, bad_error)
            await _raises(InvalidArgument, f"fail(error={shown!r})", handle.fail, bad_error)
        after = await _get(queue, job_id)
        assert after == before, "a rejected retry/fail changed the row"
        assert await handle.fail("e" * 65536) is True, (
            "fail with a 65536-character error (decision 9's limit) was refused or the "
            "handle was consumed by the rejected calls"
        )


@_check
async def q4_fail_dead_letters_now(harness: EngineHarness) -> None:
    """Q4: fail moves the row to dead at once, whatever attempts are left, with
    ``last_error = error`` or "failed"."""
    async with harness.open_store() as store:
        queue = store.queue("fail", QueueOpts(max_attempts=10))
        for kwargs, last_error in [
            ({}, FAILED),
            ({"error": "bad input"}, "bad input"),
            ({"error": ""}, ""),
        ]:
            job_id = await queue.enqueue(b"x")
            handle = await _claim_id(queue, job_id, "holder")
            assert await handle.fail(**kwargs) is True, f"fail(**{kwargs!r}) was refused"
            dead = await _assert_dead(harness, queue, job_id, last_error, f"fail(**{kwargs!r})")
            now = await harness.now()
            assert (dead.died_at, dead.attempts, dead.claimed_by) == (now, 1, "holder"), (
                f"fail(**{kwargs!r}): (died_at, attempts, claimed_by) = "
                f"{(dead.died_at, dead.attempts, dead.claimed_by)!r}, expected ({now}, 1, 'holder')"
            )


@_check
async def q4_ack_retry_fail_are_one_shot(harness: EngineHarness) -> None:
    """Q4: after ack, retry or fail returned (True or False), every further operation on
    the handle, heartbeat included, raises HandleConsumed and changes nothing."""
    async with harness.open_store() as store:
        opts = QueueOpts(visibility_timeout_s=30)
        operations: list[tuple[str, Callable[[JobHandle], Awaitable[bool]]]] = [
            ("ack", lambda h: h.ack()),
            ("retry", lambda h: h.retry("again", delay_s=0)),
            ("fail", lambda h: h.fail("broken")),
        ]
        for name, operation in operations:
            for outcome in [True, False]:
                queue = store.queue(f"one-shot-{name}-{outcome}", opts)
                job_id = await queue.enqueue(b"x")
                handle = await _claim_id(queue, job_id)
                if not outcome:
                    await harness.advance(31)
                result = await operation(handle)
                assert result is outcome, f"{name} returned {result!r}, expected {outcome}"
                before = await queue.get_job(job_id)
                calls: list[tuple[str, Callable[..., object]]] = [
                    ("heartbeat", handle.heartbeat),
                    ("ack", handle.ack),
                    ("retry", handle.retry),
                    ("fail", handle.fail),
                ]
                for again, call in calls:
                    await _raises(HandleConsumed, f"{again} after {name} returned {outcome}", call)
                after = await queue.get_job(job_id)
                assert after == before, f"a HandleConsumed {name} changed the row"


@_check
async def q4_heartbeat_does_not_consume_the_handle(harness: EngineHarness) -> None:
    """Q4: heartbeat is repeatable, refused or not; a later ack still runs (and answers
    by the claim's validity)."""
    async with harness.open_store() as store:
        queue = store.queue("hb-repeat", QueueOpts(visibility_timeout_s=30))
        ids = await queue.enqueue_many([b"a", b"b"])
        first, second = sorted(await queue.claim_batch("w", 2), key=lambda h: h.id)
        for _ in range(3):
            assert await first.heartbeat() is True, "a repeated heartbeat was refused"
        assert await first.ack() is True, "ack after heartbeats was refused"
        await harness.advance(31)
        assert await second.heartbeat() is False, "a late heartbeat was not refused"
        assert await second.heartbeat() is False, "a second late heartbeat was not refused"
        assert await second.ack() is False, "ack after a refused heartbeat was not refused"
        await _raises(HandleConsumed, "heartbeat after ack returned False", second.heartbeat)
        await _assert_gone(queue, ids[0], "the acked job")


@_check
async def q4_dead_letter_moves_are_atomic(harness: EngineHarness) -> None:
    """Q4: after each dead-letter move (retry at budget, fail, the pre-claim sweep, the
    expiry sweep) the row is in exactly one place: dead, with no live row left."""
    async with harness.open_store() as store:
        queue = store.queue(
            "dead-moves", QueueOpts(visibility_timeout_s=10, max_attempts=1, expires_in_s=1000)
        )
        by_retry = await queue.enqueue(b"retry", priority=3)
        by_fail = await queue.enqueue(b"fail", priority=2)
        by_sweep = await queue.enqueue(b"sweep", priority=1)
        by_expiry = await queue.enqueue(b"expiry", delay_s=5000)
        assert await (await _claim_id(queue, by_retry)).retry() is True, "retry was refused"
        await _assert_dead(harness, queue, by_retry, MAX_ATTEMPTS_EXCEEDED, "retry at budget")
        assert await (await _claim_id(queue, by_fail)).fail() is True, "fail was refused"
        await _assert_dead(harness, queue, by_fail, FAILED, "fail")
        await _claim_id(queue, by_sweep)
        await harness.advance(11)
        assert await queue.claim_one("w") is None, "nothing should be claimable"
        await _assert_dead(harness, queue, by_sweep, MAX_ATTEMPTS_EXCEEDED, "pre-claim sweep")
        await harness.advance(1000)
        result = await queue.sweep_expired()
        assert result.expired == 1, f"sweep_expired() returned {result!r}, expected 1 expired"
        await _assert_dead(harness, queue, by_expiry, EXPIRED, "expiry sweep")
        await _nothing_claimable(queue, "after every dead-letter move")
