"""Q13, batched claim operations, the others: ``queue.heartbeat_handles``
(D19), ``queue.retry_handles`` and ``queue.fail_handles`` (D20)."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from ... import HandleConsumed, InvalidArgument, JobHandle, QueueOpts
from ._helpers import (
    FAILED,
    MAX_ATTEMPTS_EXCEEDED,
    _after,
    _assert_dead,
    _assert_mentions,
    _assert_state,
    _check,
    _claim,
    _claim_id,
    _get,
    _jitter_range,
    _nothing_claimable,
    _raises,
)

if TYPE_CHECKING:
    from datetime import datetime

    from ... import Job, Queue, Store
    from .._harness import EngineHarness


async def _assert_rows_unchanged(queue: Queue, before: dict[int, Job], what: str) -> None:
    """Every row of ``before`` reads back exactly as it was."""
    for job_id, row in before.items():
        after = await _get(queue, job_id)
        assert after == row, f"{what} changed job {job_id}: {row!r} -> {after!r}"


@_check
async def q13_heartbeat_handles_renews_valid_claims_and_refuses_stale_ones(
    harness: EngineHarness,
) -> None:
    """Q4/R2 (D19): ``queue.heartbeat_handles`` renews each handle's claim under V, token
    included, as an absolute reset to now + ``extend_s`` (default: each row's own
    visibility_timeout_s); lapsed, reclaimed-by-another-worker and cancelled claims are
    refused per handle (False, row untouched); the result is one bool per handle, in
    order; no handle is consumed. Foreign, duplicate or consumed handles and a bad
    ``extend_s`` are rejected without effect."""
    async with harness.open_store() as store:
        short = store.queue("hb-handles", QueueOpts(visibility_timeout_s=10))
        mid = store.queue("hb-handles", QueueOpts(visibility_timeout_s=100))
        long = store.queue("hb-handles", QueueOpts(visibility_timeout_s=1000))
        reclaimed = await short.enqueue(b"reclaimed", priority=5)
        valid_a = await long.enqueue(b"valid-a", priority=3)
        cancelled = await long.enqueue(b"cancelled", priority=2)
        valid_b = await mid.enqueue(b"valid-b", priority=1)
        lapsed = await short.enqueue(b"lapsed", priority=0)
        claimed_at = await harness.now()
        stale = {h.id: h for h in await long.claim_batch("worker-a", 5)}
        assert len(stale) == 5, f"claim_batch(5) claimed {sorted(stale)}"
        await harness.advance(11)
        winner = await _claim(long, "worker-b", "the reclaim of the best lapsed job")
        assert winner.id == reclaimed, f"worker-b reclaimed {winner.id}, expected {reclaimed}"
        assert await long.cancel(cancelled) is True, "cancel refused"
        order = [lapsed, valid_a, reclaimed, cancelled, valid_b]
        expected = [False, True, False, False, True]
        handles = [stale[job_id] for job_id in order]
        before: dict[int, Job] = {
            job_id: await _get(long, job_id) for job_id in (lapsed, reclaimed)
        }
        now = await harness.now()
        results = await long.heartbeat_handles(handles)
        assert results == expected, (
            f"heartbeat_handles over {order} (lapsed, valid, reclaimed, cancelled, valid) "
            f"returned {results}, expected {expected}"
        )
        for job_id, seconds in ((valid_a, 1000), (valid_b, 100)):
            row = await _get(long, job_id)
            assert row.claim_expires_at == _after(now, seconds), (
                f"heartbeat_handles set job {job_id}'s claim_expires_at {row.claim_expires_at}"
                f", expected now + its visibility_timeout_s ({_after(now, seconds)})"
            )
            assert (row.state, row.claimed_at, row.attempts) == ("processing", claimed_at, 1), (
                f"heartbeat_handles changed job {job_id}'s state, claimed_at or attempts"
            )
        await _assert_rows_unchanged(long, before, "a refused heartbeat_handles")
        await _assert_state(long, cancelled, "cancelling", "heartbeat_handles of a cancelled claim")
        pair = [stale[valid_a], stale[valid_b]]
        renewed_at = await _heartbeat_handles_renew_again(harness, long, pair)
        foreign = await _heartbeat_handles_reject_bad_calls(harness, store, long, pair, renewed_at)
        assert await stale[lapsed].ack() is False, "ack of a lapsed claim was not refused"
        assert await stale[valid_b].ack() is True, "ack after heartbeat_handles was refused"
        assert await winner.ack() is True, "the new holder could not ack"
        assert await foreign.ack() is True, "the other queue's handle was disturbed"


async def _heartbeat_handles_renew_again(
    harness: EngineHarness, queue: Queue, pair: list[JobHandle]
) -> datetime:
    """Not consumed: the same (valid) handles renew again, an absolute reset that may
    shorten; the instant they were renewed at."""
    await harness.advance(1)
    now = await harness.now()
    assert await queue.heartbeat_handles(pair, extend_s=5) == [True, True], (
        "a repeated heartbeat_handles(extend_s=5) of valid claims was refused"
    )
    for job_id in (handle.id for handle in pair):
        row = await _get(queue, job_id)
        assert row.claim_expires_at == _after(now, 5), (
            f"heartbeat_handles(extend_s=5) set job {job_id}'s claim_expires_at "
            f"{row.claim_expires_at}, expected now + 5 s ({_after(now, 5)})"
        )
    return now


async def _heartbeat_handles_reject_bad_calls(
    harness: EngineHarness, store: Store, queue: Queue, pair: list[JobHandle], renewed_at: datetime
) -> JobHandle:
    """Rejected calls renew nothing and consume nothing; ``pair[0]`` is acked on the way
    (to have a consumed handle), ``pair[1]`` keeps the deadline set at ``renewed_at``.
    Returns the other queue's handle used for the foreign call, still to be acked."""
    assert await queue.heartbeat_handles([]) == [], "heartbeat_handles([]) did not return []"
    other = store.queue("hb-handles-other")
    await other.enqueue(b"o")
    foreign = await _claim(other, "w")
    bad_calls: list[tuple[str, object, object]] = [
        ("another queue's handle", [pair[0], foreign], None),
        ("a job id", [pair[0], pair[1].id], None),
        ("a handle twice", [pair[0], pair[0]], None),
        ("not an iterable", 5, None),
        ("extend_s=0", pair, 0),
        ("a negative extend_s", pair, -1),
    ]
    for what, bad, extend in bad_calls:
        await _raises(
            InvalidArgument,
            f"heartbeat_handles with {what}",
            queue.heartbeat_handles,
            bad,
            extend,
        )
    await harness.advance(1)
    assert await pair[0].ack() is True, "ack after heartbeat_handles was refused"
    await _raises(
        HandleConsumed, "heartbeat_handles with a consumed handle", queue.heartbeat_handles, pair
    )
    row = await _get(queue, pair[1].id)
    assert row.claim_expires_at == _after(renewed_at, 5), (
        f"a rejected heartbeat_handles renewed job {pair[1].id}: {row.claim_expires_at}"
    )
    return foreign


@_check
async def q13_retry_handles_retries_valid_claims_and_refuses_stale_ones(
    harness: EngineHarness,
) -> None:
    """Q4/R2 (D20): ``queue.retry_handles`` applies each ``(handle, error, delay_s)`` as
    ``handle.retry(error, delay_s)`` would, under V, token included, in one call: below
    budget the row is pending after ``delay_s`` (``0`` = at once) or after the backoff
    curve (one draw from the store's rng per item that needs it, in item order, refused
    items included: decision 2), with ``last_error = error`` and the claim fields
    cleared; on the last allowed attempt it is dead-lettered; lapsed, reclaimed (still
    held, or given back) and cancelled claims are refused per item (False, row
    untouched). The result is one bool per item, in order; every handle is consumed."""
    seed = 5150
    base = 60
    reference = random.Random(seed)
    async with harness.open_store(rng=random.Random(seed)) as store:
        short = store.queue(
            "retry-handles", QueueOpts(visibility_timeout_s=10, backoff_base_s=base)
        )
        long = store.queue(
            "retry-handles", QueueOpts(visibility_timeout_s=1000, backoff_base_s=base)
        )
        reclaimed = await short.enqueue(b"reclaimed", priority=8)
        given_back = await short.enqueue(b"given-back", priority=7)
        explicit = await long.enqueue(b"explicit", priority=6)
        backoff = await long.enqueue(b"backoff", priority=5)
        spent_error = await long.enqueue(b"spent-error", priority=4, max_attempts=1)
        spent_default = await long.enqueue(b"spent-default", priority=3, max_attempts=1)
        cancelled = await long.enqueue(b"cancelled", priority=2)
        at_once = await long.enqueue(b"at-once", priority=1)
        lapsed = await short.enqueue(b"lapsed", priority=0)
        claimed_at = await harness.now()
        stale = {h.id: h for h in await long.claim_batch("worker-a", 9)}
        assert len(stale) == 9, f"claim_batch(9) claimed {sorted(stale)}"
        await harness.advance(11)
        # Another worker reclaims the two best lapsed jobs: it keeps one (processing under
        # a newer token) and gives the other back (pending, attempts moved on).
        winners = {h.id: h for h in await long.claim_batch("worker-b", 2)}
        assert set(winners) == {reclaimed, given_back}, f"worker-b reclaimed {sorted(winners)}"
        assert await winners[given_back].retry("again", delay_s=10_000) is True, "retry refused"
        assert await long.cancel(cancelled) is True, "cancel refused"
        items: list[tuple[JobHandle, str | None, float | None]] = [
            (stale[lapsed], None, None),
            (stale[explicit], "boom", 30),
            (stale[reclaimed], None, None),
            (stale[backoff], None, None),
            (stale[spent_error], "last", 5),
            (stale[cancelled], None, None),
            (stale[spent_default], None, None),
            (stale[given_back], "late", 0),
            (stale[at_once], "now", 0),
        ]
        expected = [False, True, False, True, True, False, True, False, True]
        refused = (lapsed, reclaimed, given_back)
        before: dict[int, Job] = {job_id: await _get(long, job_id) for job_id in refused}
        now = await harness.now()
        results = await long.retry_handles(items)
        assert results == expected, (
            "retry_handles over (lapsed, explicit delay, reclaimed, backoff, at budget with "
            "an error, cancelled, at budget, given back, delay 0) returned "
            f"{results}, expected {expected}"
        )
        # Draws, in item order: lapsed, reclaimed, backoff, cancelled (the items without
        # delay_s below budget); the third is the backoff item's delay.
        draws = [reference.randint(*_jitter_range(base, 1)) for _ in range(4)]
        await _assert_retried_rows(
            long, now, [(explicit, 30, "boom"), (backoff, draws[2], None), (at_once, 0, "now")]
        )
        spent: list[tuple[int, str]] = [
            (spent_error, "last"),
            (spent_default, MAX_ATTEMPTS_EXCEEDED),
        ]
        await _assert_retried_to_dead(harness, long, spent, (now, 1, "worker-a", claimed_at))
        await _assert_state(long, cancelled, "cancelling", "retry_handles of a cancelled claim")
        await _assert_rows_unchanged(long, before, "a refused retry_handles")
        await _assert_retry_handles_consumed(long, items)
        # The job retried with delay 0 is ready at once, beside the lapsed claim.
        probe = {h.id: h for h in await long.claim_batch("probe", 10)}
        assert set(probe) == {lapsed, at_once}, (
            f"after retry_handles, claimed {sorted(probe)}; expected {sorted({lapsed, at_once})}"
        )
        assert await winners[reclaimed].ack() is True, "the new holder could not ack"


async def _assert_retry_handles_consumed(
    queue: Queue, items: list[tuple[JobHandle, str | None, float | None]]
) -> None:
    """Every handle of ``items`` is consumed, whatever its item's result."""
    for handle, _, _ in items:
        await _raises(
            HandleConsumed, f"ack() of handle {handle.id} after retry_handles", handle.ack
        )
    await _raises(HandleConsumed, "retry_handles of consumed handles", queue.retry_handles, items)


async def _assert_retried_rows(
    queue: Queue, now: datetime, retried: list[tuple[int, float, str | None]]
) -> None:
    """Each ``(job_id, delay, error)`` was retried at ``now`` below budget: pending at
    ``now + delay`` with ``last_error = error``, its attempt kept, its claim fields cleared."""
    for job_id, delay, error in retried:
        row = await _get(queue, job_id)
        seen = (row.state, row.run_at, row.last_error, row.attempts)
        want = ("pending", _after(now, delay), error, 1)
        assert seen == want, (
            f"retry_handles of job {job_id}: (state, run_at, last_error, attempts) = "
            f"{seen!r}, expected {want!r}"
        )
        assert (row.claimed_by, row.claimed_at, row.claim_expires_at) == (None, None, None), (
            f"retry_handles left job {job_id}'s claim fields set"
        )


async def _assert_retried_to_dead(
    harness: EngineHarness,
    queue: Queue,
    spent: list[tuple[int, str]],
    want: tuple[datetime, int, str, datetime | None],
) -> None:
    """Each ``(job_id, last_error)`` was retried on its last attempt: dead with this
    ``last_error``, and ``want`` = (died_at, attempts, claimed_by, claimed_at): the claim
    fields kept (decision 1)."""
    for job_id, last_error in spent:
        dead = await _assert_dead(
            harness, queue, job_id, last_error, "retry_handles on the last attempt"
        )
        seen_dead = (dead.died_at, dead.attempts, dead.claimed_by, dead.claimed_at)
        assert seen_dead == want, (
            f"retry_handles at budget of job {job_id}: (died_at, attempts, claimed_by, "
            f"claimed_at) = {seen_dead!r}, expected {want!r}"
        )


@_check
async def q13_retry_handles_dead_letters_claims_on_their_last_attempt(
    harness: EngineHarness,
) -> None:
    """Q4/R2 (D20): an item of ``retry_handles`` whose claim is the job's last allowed
    attempt moves the row to dead with ``last_error = error`` or "max attempts exceeded"
    (a given delay is ignored, and no backoff is drawn: decision 2), keeping its claim
    fields (decision 1); nothing is left claimable."""
    seed = 99
    async with harness.open_store(rng=random.Random(seed)) as store:
        queue = store.queue("retry-handles-budget", QueueOpts(max_attempts=2, backoff_base_s=60))
        cases: list[tuple[str | None, float | None, str]] = [
            (None, None, MAX_ATTEMPTS_EXCEEDED),
            ("boom", None, "boom"),
            ("", None, ""),
            ("boom", 30, "boom"),
            (None, 0, MAX_ATTEMPTS_EXCEEDED),
        ]
        ids = await queue.enqueue_many([b"%d" % i for i in range(len(cases))])
        first = await queue.claim_batch("holder", len(cases))
        assert await queue.retry_handles([(h, None, 0) for h in first]) == [True] * len(cases), (
            "retry_handles(delay_s=0) below budget was refused"
        )
        claimed_at = await harness.now()
        last = {h.id: h for h in await queue.claim_batch("holder", len(cases))}
        assert set(last) == set(ids), f"the second claim took {sorted(last)}, expected {ids}"
        await harness.advance(1)
        now = await harness.now()
        items = [
            (last[job_id], error, delay)
            for job_id, (error, delay, _) in zip(ids, cases, strict=True)
        ]
        results = await queue.retry_handles(items)
        assert results == [True] * len(cases), (
            f"retry_handles on the last attempt returned {results}"
        )
        for job_id, (error, delay, last_error) in zip(ids, cases, strict=True):
            what = f"retry_handles item (error={error!r}, delay_s={delay!r}) at budget"
            dead = await _assert_dead(harness, queue, job_id, last_error, what)
            seen = (dead.died_at, dead.attempts, dead.claimed_by, dead.claimed_at)
            assert seen == (now, 2, "holder", claimed_at), (
                f"{what}: (died_at, attempts, claimed_by, claimed_at) = {seen!r}, expected "
                f"{(now, 2, 'holder', claimed_at)!r}"
            )
        await _nothing_claimable(queue, "after retry_handles at budget")
        # No item drew: the next draw is the rng's first.
        job_id = await queue.enqueue(b"probe")
        handle = await _claim_id(queue, job_id)
        now = await harness.now()
        assert await queue.retry_handles([(handle, None, None)]) == [True], "retry refused"
        row = await _get(queue, job_id)
        expected = random.Random(seed).randint(*_jitter_range(60, 1))
        assert row.run_at == _after(now, expected), (
            f"the first backoff draw after retries at budget gave run_at {row.run_at}, "
            f"expected now + {expected} s: a retry at budget drew from the rng"
        )


@_check
async def q13_fail_handles_dead_letters_valid_claims_and_refuses_stale_ones(
    harness: EngineHarness,
) -> None:
    """Q4/R2 (D20): ``queue.fail_handles`` applies each ``(handle, error)`` as
    ``handle.fail(error)`` would, under V, token included, in one call: the row moves to
    dead now with ``last_error = error`` or "failed", whatever attempts are left, keeping
    its claim fields; lapsed, reclaimed and cancelled claims are refused per item (False,
    row untouched). The result is one bool per item, in order; every handle is
    consumed."""
    async with harness.open_store() as store:
        short = store.queue("fail-handles", QueueOpts(visibility_timeout_s=10, max_attempts=10))
        long = store.queue("fail-handles", QueueOpts(visibility_timeout_s=1000, max_attempts=10))
        reclaimed = await short.enqueue(b"reclaimed", priority=5)
        with_error = await long.enqueue(b"with-error", priority=4)
        default = await long.enqueue(b"default", priority=3)
        empty = await long.enqueue(b"empty", priority=2)
        cancelled = await long.enqueue(b"cancelled", priority=1)
        lapsed = await short.enqueue(b"lapsed", priority=0)
        claimed_at = await harness.now()
        stale = {h.id: h for h in await long.claim_batch("worker-a", 6)}
        assert len(stale) == 6, f"claim_batch(6) claimed {sorted(stale)}"
        await harness.advance(11)
        winner = await _claim(long, "worker-b", "the reclaim of the best lapsed job")
        assert winner.id == reclaimed, f"worker-b reclaimed {winner.id}, expected {reclaimed}"
        assert await long.cancel(cancelled) is True, "cancel refused"
        items: list[tuple[JobHandle, str | None]] = [
            (stale[lapsed], "lapsed"),
            (stale[with_error], "bad input"),
            (stale[reclaimed], None),
            (stale[default], None),
            (stale[cancelled], "gone"),
            (stale[empty], ""),
        ]
        expected = [False, True, False, True, False, True]
        before: dict[int, Job] = {
            job_id: await _get(long, job_id) for job_id in (lapsed, reclaimed)
        }
        now = await harness.now()
        results = await long.fail_handles(items)
        assert results == expected, (
            "fail_handles over (lapsed, valid, reclaimed, valid, cancelled, valid) returned "
            f"{results}, expected {expected}"
        )
        for job_id, last_error in ((with_error, "bad input"), (default, FAILED), (empty, "")):
            dead = await _assert_dead(harness, long, job_id, last_error, "fail_handles")
            seen = (dead.died_at, dead.attempts, dead.claimed_by, dead.claimed_at)
            assert seen == (now, 1, "worker-a", claimed_at), (
                f"fail_handles of job {job_id}: (died_at, attempts, claimed_by, claimed_at) "
                f"= {seen!r}, expected {(now, 1, 'worker-a', claimed_at)!r}"
            )
        await _assert_state(long, cancelled, "cancelling", "fail_handles of a cancelled claim")
        await _assert_rows_unchanged(long, before, "a refused fail_handles")
        for handle, _ in items:
            await _raises(
                HandleConsumed, f"retry() of handle {handle.id} after fail_handles", handle.retry
            )
        await _raises(HandleConsumed, "fail_handles of consumed handles", long.fail_handles, items)
        assert await winner.ack() is True, "the new holder could not ack"
        probe = [h.id for h in await long.claim_batch("probe", 10)]
        assert probe == [lapsed], f"after fail_handles, claimed {probe}, expected [{lapsed}]"


@_check
async def q13_retry_and_fail_handles_reject_bad_items_without_effect(
    harness: EngineHarness,
) -> None:
    """Q4/Q12 (D20): for ``retry_handles`` and ``fail_handles``, a non-iterable, an item
    that is not a tuple of the right size, a non-handle, a handle of another queue or
    store, a job listed twice, or a bad error or delay is InvalidArgument; a consumed
    handle is HandleConsumed. Either way nothing is retried or failed, no handle is
    consumed and no backoff is drawn. An empty iterable returns [] and draws nothing;
    any iterable of items is accepted."""
    seed = 31337
    async with (
        harness.open_store(rng=random.Random(seed)) as store,
        harness.open_store() as elsewhere,
    ):
        queue = store.queue("finish-handles-check", QueueOpts(backoff_base_s=60))
        other = store.queue("finish-handles-other")
        far = elsewhere.queue("finish-handles-check")
        ids = await queue.enqueue_many([b"a", b"b", b"c"])
        await other.enqueue(b"o")
        await far.enqueue(b"f")
        mine = await queue.claim_batch("w", 3)
        assert [h.id for h in mine] == ids, f"claimed {[h.id for h in mine]}, expected {ids}"
        foreign = await _claim(other, "w")
        remote = await _claim(far, "w")
        before = {job_id: await _get(queue, job_id) for job_id in ids}
        assert await queue.retry_handles([]) == [], "retry_handles([]) did not return []"
        assert await queue.fail_handles(iter([])) == [], "fail_handles([]) did not return []"
        a, b, c = mine
        bad_retries, bad_fails = _bad_finish_items(a, b, ids[1], foreign, remote)
        for what, bad in bad_retries:
            await _raises(InvalidArgument, f"retry_handles with {what}", queue.retry_handles, bad)
        for what, bad in bad_fails:
            await _raises(InvalidArgument, f"fail_handles with {what}", queue.fail_handles, bad)
        exc = await _raises(
            InvalidArgument,
            "retry_handles with delay_s=-9",
            queue.retry_handles,
            [(a, None, None), (b, None, -9)],
        )
        _assert_mentions(exc, "retry_handles with delay_s=-9", "delay_s", "-9")
        assert await c.ack() is True, "ack refused"
        await _raises(
            HandleConsumed,
            "retry_handles with a consumed handle",
            queue.retry_handles,
            [(a, None, None), (c, None, None)],
        )
        await _raises(
            HandleConsumed,
            "fail_handles with a consumed handle",
            queue.fail_handles,
            [(a, None), (c, None)],
        )
        for job_id in ids[:2]:
            after = await _get(queue, job_id)
            assert after == before[job_id], (
                f"a rejected retry_handles/fail_handles changed job {job_id}: "
                f"{before[job_id]!r} -> {after!r}"
            )
        # Nothing was consumed, and nothing drawn: the first accepted backoff item gets
        # the rng's first draw.
        now = await harness.now()
        assert await queue.retry_handles(iter([(a, None, None)])) == [True], (
            "retry_handles of an untouched handle after the rejected calls was refused"
        )
        row = await _get(queue, a.id)
        first_draw = random.Random(seed).randint(*_jitter_range(60, 1))
        assert row.run_at == _after(now, first_draw), (
            f"retry_handles after rejected calls gave run_at {row.run_at}, expected now + "
            f"{first_draw} s (the rng's first draw): a rejected call drew from the rng"
        )
        assert await queue.fail_handles(item for item in [(b, None)]) == [True], (
            "fail_handles of an untouched handle after the rejected calls was refused"
        )
        await _assert_dead(harness, queue, b.id, FAILED, "fail_handles after rejected calls")
        assert await foreign.ack() is True, "the other queue's handle was consumed or disturbed"
        assert await remote.ack() is True, "the other store's handle was consumed or disturbed"


def _bad_finish_items(
    a: JobHandle, b: JobHandle, job_id: int, foreign: JobHandle, remote: JobHandle
) -> tuple[list[tuple[str, object]], list[tuple[str, object]]]:
    """Bad arguments of ``retry_handles`` and of ``fail_handles``, each with what is bad
    about it: ``a`` and ``b`` are valid claims of the queue (``job_id`` is ``b``'s id),
    ``foreign`` one of another queue, ``remote`` one of another store."""
    nan = float("nan")
    bad_retries: list[tuple[str, object]] = [
        ("not an iterable", 5),
        ("a str", "abc"),
        ("a bare handle", [a]),
        ("a list item", [[a, None, None]]),
        ("a 2-tuple", [(a, None)]),
        ("a 4-tuple", [(a, None, None, None)]),
        ("a job id", [(a, None, None), (job_id, None, None)]),
        ("another queue's handle", [(a, None, None), (foreign, None, None)]),
        ("another store's handle", [(a, None, None), (remote, None, None)]),
        ("a handle twice", [(a, None, None), (a, "again", 0)]),
        ("a negative delay", [(a, None, None), (b, None, -1)]),
        ("a NaN delay", [(a, None, None), (b, None, nan)]),
        ("an infinite delay", [(a, None, None), (b, None, float("inf"))]),
        ("a bool delay", [(a, None, None), (b, None, True)]),
        ("a str delay", [(a, None, None), (b, None, "5")]),
        ("a bytes error", [(a, None, None), (b, b"boom", 0)]),
        ("an error with NUL", [(a, None, None), (b, "a\x00b", 0)]),
        ("a too long error", [(a, None, None), (b, "e" * 65537, 0)]),
    ]
    bad_fails: list[tuple[str, object]] = [
        ("not an iterable", 5),
        ("a bare handle", [a]),
        ("a 3-tuple", [(a, None, None)]),
        ("a job id", [(a, None), (job_id, None)]),
        ("another queue's handle", [(a, None), (foreign, None)]),
        ("another store's handle", [(a, None), (remote, None)]),
        ("a handle twice", [(a, None), (a, "again")]),
        ("an int error", [(a, None), (b, 5)]),
        ("an error with NUL", [(a, None), (b, "a\x00b")]),
    ]
    return bad_retries, bad_fails
