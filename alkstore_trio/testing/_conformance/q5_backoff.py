"""Q5 backoff curve (equal jitter): the range, the one-hour cap, base zero, caps below
one second (D12) and the draws from the store's random source (D2)."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from ... import InvalidArgument, JobHandle, Queue, QueueOpts
from ._helpers import _check, _claim_id, _get, _jitter_range, _raises

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._harness import EngineHarness


async def _backoff_delays(
    harness: EngineHarness, queue: Queue, handles: Sequence[JobHandle]
) -> list[float]:
    """Retry every handle with the backoff curve; return each row's run_at - now."""
    delays = []
    for handle in handles:
        assert await handle.retry("again") is True, "a retry below budget was refused"
        now = await harness.now()
        row = await _get(queue, handle.id)
        assert row.state == "pending", f"a retry below budget left the row {row.state!r}"
        delays.append((row.run_at - now).total_seconds())
    return delays


def _assert_in_range(delays: Sequence[float], base_s: float, attempt: int) -> None:
    low, high = _jitter_range(base_s, attempt)
    for delay in delays:
        assert delay == int(delay), (
            f"base {base_s} s, attempt {attempt}: backoff delay {delay} s is not an integer"
        )
        assert low <= delay <= high, (
            f"base {base_s} s, attempt {attempt}: backoff delay {delay} s is outside "
            f"[{low}, {high}]"
        )


@_check
async def q5_backoff_delay_is_within_the_equal_jitter_range(harness: EngineHarness) -> None:
    """Q5: without delay_s, retry waits an integer number of seconds drawn from
    [ceil(cap/2), floor(cap)], cap = base * 2**(attempt - 1): base 2 gives [1, 2], [2, 4],
    [4, 8], [8, 16] for attempts 1-4."""
    async with harness.open_store(rng=random.Random(20240607)) as store:
        base = 2
        queue = store.queue("backoff", QueueOpts(backoff_base_s=base, max_attempts=6))
        await queue.enqueue_many([b"%d" % i for i in range(16)])
        for attempt in range(1, 5):
            handles = await queue.claim_batch("w", 100)
            assert len(handles) == 16, f"attempt {attempt}: claimed {len(handles)} of 16 jobs"
            assert {h.job.attempts for h in handles} == {attempt}, "unexpected claim tokens"
            delays = await _backoff_delays(harness, queue, handles)
            _assert_in_range(delays, base, attempt)
            await harness.advance(_jitter_range(base, attempt)[1])


@_check
async def q5_backoff_is_capped_at_one_hour(harness: EngineHarness) -> None:
    """Q5: the cap is min(base * 2**min(attempt - 1, 30), 3600): base 2000 gives
    [1000, 2000] then [1800, 3600]; base 5 at attempt 30 gives [1800, 3600]."""
    async with harness.open_store(rng=random.Random(7)) as store:
        big = store.queue("backoff-big", QueueOpts(backoff_base_s=2000, max_attempts=5))
        await big.enqueue_many([b"a", b"b", b"c", b"d"])
        for attempt in [1, 2]:
            handles = await big.claim_batch("w", 10)
            assert len(handles) == 4, f"attempt {attempt}: claimed {len(handles)} of 4 jobs"
            _assert_in_range(await _backoff_delays(harness, big, handles), 2000, attempt)
            await harness.advance(3600)
        late = store.queue("backoff-late", QueueOpts(backoff_base_s=5, max_attempts=40))
        job_id = await late.enqueue(b"x")
        for _ in range(29):
            assert await (await _claim_id(late, job_id)).retry(delay_s=0) is True, "retry refused"
        handle = await _claim_id(late, job_id)
        assert handle.job.attempts == 30, f"expected attempt 30, got {handle.job.attempts}"
        _assert_in_range(await _backoff_delays(harness, late, [handle]), 5, 30)


@_check
async def q5_backoff_base_zero_retries_at_once(harness: EngineHarness) -> None:
    """Q5: base 0 gives a delay of 0: the retried job is ready at once."""
    async with harness.open_store(rng=random.Random(3)) as store:
        queue = store.queue("backoff-zero", QueueOpts(backoff_base_s=0, max_attempts=4))
        job_id = await queue.enqueue(b"x")
        for attempt in [1, 2, 3]:
            handle = await _claim_id(queue, job_id)
            delays = await _backoff_delays(harness, queue, [handle])
            assert delays == [0], f"base 0, attempt {attempt}: delay {delays[0]} s, expected 0"


@_check
async def q5_backoff_below_one_second_waits_one_second(harness: EngineHarness) -> None:
    """Q5 with decision 12: when 0 < cap < 1 the delay is ceil(cap/2) = 1 s
    (base 0.5: attempt 1 and 2 wait 1 s, attempt 3 waits 1 or 2 s)."""
    async with harness.open_store(rng=random.Random(11)) as store:
        queue = store.queue("backoff-tiny", QueueOpts(backoff_base_s=0.5, max_attempts=5))
        job_id = await queue.enqueue(b"x")
        for attempt in [1, 2, 3]:
            handle = await _claim_id(queue, job_id)
            delays = await _backoff_delays(harness, queue, [handle])
            _assert_in_range(delays, 0.5, attempt)
            await harness.advance(2)


@_check
async def q5_backoff_draws_come_from_the_injected_rng(harness: EngineHarness) -> None:
    """Q5 with decision 2: the store's rng makes delays reproducible: each retry call that
    needs the curve draws exactly one ``randint(low, high)`` before reaching the engine
    (even when the engine then refuses); calls that raise first, and retries at budget or
    with an explicit delay, draw nothing."""
    seed = 424242
    base = 60
    reference = random.Random(seed)
    async with harness.open_store(rng=random.Random(seed)) as store:
        queue = store.queue(
            "backoff-rng", QueueOpts(backoff_base_s=base, max_attempts=3, visibility_timeout_s=30)
        )
        ids = await queue.enqueue_many([b"a", b"b", b"c"])
        a, b, c = sorted(await queue.claim_batch("w", 3), key=lambda h: h.id)
        await _raises(InvalidArgument, "retry(delay_s=-1)", a.retry, delay_s=-1)
        assert await a.retry(delay_s=5) is True, "retry(delay_s=5) was refused"
        expected = reference.randint(*_jitter_range(base, 1))
        delays = await _backoff_delays(harness, queue, [b])
        assert delays == [expected], (
            f"the first backoff draw gave {delays[0]} s; a Random({seed}).randint over "
            f"{_jitter_range(base, 1)} gives {expected} s"
        )
        await harness.advance(31)
        assert await c.retry() is False, "retry of a lapsed claim was not refused"
        reference.randint(*_jitter_range(base, 1))  # drawn by the refused retry
        await harness.advance(3600)
        handles = {h.id: h for h in await queue.claim_batch("w", 3)}
        assert set(handles) == set(ids), "the three jobs were not claimable again"
        expected = reference.randint(*_jitter_range(base, 2))
        delays = await _backoff_delays(harness, queue, [handles[ids[0]]])
        assert delays == [expected], (
            f"after one refused retry, the next draw gave {delays[0]} s, expected {expected} s"
        )
