"""Q18.7-Q18.11 queue limits: the global limit on running jobs, the setting and reading
of limits and their validation, the rate limit's token bucket, the throttle counts in
stats, and the wakes that free slots send."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ... import InvalidArgument, QueueLimits, QueueOpts
from ._helpers import INSTANT_S, _check, _nothing_claimable, _raises, _wait_for_wakes

if TYPE_CHECKING:
    from ..._store import Queue
    from .._harness import EngineHarness


async def _ids(queue: Queue, n: int) -> list[int]:
    return [handle.id for handle in await queue.claim_batch("w", n)]


@_check
async def q18_7_max_running_caps_the_live_leases_of_every_claim(harness: EngineHarness) -> None:
    """Q18.7: with max_running=2, claim_batch, claim_one and the claim of
    ack_handles_and_claim never leave more than 2 jobs processing under live leases;
    an ack frees a slot; a lapsed lease stops counting the moment it lapses (the next
    claim may then take its slot, reclaiming it or another job); clearing the limit
    lets claims take all there is."""
    async with harness.open_store() as store:
        queue = store.queue("limit-running", QueueOpts(visibility_timeout_s=10))
        ids = await queue.enqueue_many([b"%d" % i for i in range(8)])
        await queue.set_limits(max_running=2)
        first = await queue.claim_batch("w", 5)
        assert [h.id for h in first] == ids[:2], f"max_running=2 handed out {first}"
        assert await queue.claim_one("w") is None, "claim_one took a third slot"
        acked, claimed = await queue.ack_handles_and_claim([first[0]], "w", 5)
        assert acked == [True], f"the ack of ack_handles_and_claim: {acked}"
        assert [h.id for h in claimed] == [ids[2]], (
            f"ack_handles_and_claim with one slot freed claimed {[h.id for h in claimed]}"
        )
        await harness.advance(10)
        await _nothing_claimable(queue, "at max_running, at the leases' last valid instant")
        await harness.advance(0.001)
        again = await _ids(queue, 5)
        assert len(again) == 2, f"after both leases lapsed, a claim of 5 took {again}"
        await queue.set_limits(max_running=None)
        rest = await _ids(queue, 10)
        assert len(rest) == 5, f"after the limit was cleared, a claim of 10 took {rest}"


@_check
async def q18_11_set_limits_merges_and_limits_reads_them(harness: EngineHarness) -> None:
    """Q18.11: an argument left out keeps its value, None clears it; a rate without a
    burst gets max(1, ceil(rate)); limits() reads them back (all None: no limits)."""
    async with harness.open_store() as store:
        queue = store.queue("limit-merge")
        assert await queue.limits() == QueueLimits(), "a fresh queue has limits"
        got = await queue.set_limits(max_running=3)
        assert got == QueueLimits(max_running=3), f"set_limits(max_running=3) -> {got}"
        got = await queue.set_limits(rate_per_s=2.5)
        expected = QueueLimits(max_running=3, rate_per_s=2.5, burst=3)
        assert got == expected, f"a rate without a burst: {got}, expected {expected}"
        got = await queue.set_limits(burst=7)
        assert got == QueueLimits(3, 2.5, 7), f"set_limits(burst=7) -> {got}"
        assert await queue.limits() == got, f"limits() -> {await queue.limits()}"
        got = await queue.set_limits(rate_per_s=0.2)
        assert got == QueueLimits(3, 0.2, 1), f"a new rate takes the default burst: {got}"
        got = await queue.set_limits(max_running=None, rate_per_s=None)
        assert got == QueueLimits(), f"clearing both -> {got}"
        assert await queue.limits() == QueueLimits(), "cleared limits read back as set"


@_check
async def q18_11_bad_limits_raise_and_change_nothing(harness: EngineHarness) -> None:
    """Q18.11: no argument, max_running or burst not an int from 1 (bools too), a rate
    not a finite number > 0, a burst without a rate: InvalidArgument, nothing changed."""
    async with harness.open_store() as store:
        queue = store.queue("limit-bad")
        await queue.set_limits(max_running=4)
        bad: list[dict[str, object]] = [
            {},
            {"max_running": 0},
            {"max_running": -1},
            {"max_running": True},
            {"max_running": 1.5},
            {"max_running": "3"},
            {"max_running": 2**31},
            {"rate_per_s": 0},
            {"rate_per_s": -2.0},
            {"rate_per_s": math.nan},
            {"rate_per_s": math.inf},
            {"rate_per_s": True},
            {"rate_per_s": "5"},
            {"burst": 3},
            {"rate_per_s": 5, "burst": 0},
            {"rate_per_s": 5, "burst": 2.5},
            {"max_running": 9, "rate_per_s": None, "burst": 2},
        ]
        for kwargs in bad:
            await _raises(InvalidArgument, f"set_limits(**{kwargs})", queue.set_limits, **kwargs)
            got = await queue.limits()
            assert got == QueueLimits(max_running=4), f"set_limits(**{kwargs}) changed {got}"


@_check
async def q18_9_the_rate_limit_is_a_token_bucket_on_the_engine_clock(
    harness: EngineHarness,
) -> None:
    """Q18.9: with rate_per_s=2, burst=3 the bucket starts full: a claim of 5 takes 3,
    then nothing until a token is due (next_due_in_s says when: 0.5 s); tokens come at
    2 a second and never beyond the burst; ack_handles_and_claim takes tokens too."""
    async with harness.open_store() as store:
        queue = store.queue("limit-rate")
        await queue.enqueue_many([b"%d" % i for i in range(20)])
        await queue.set_limits(rate_per_s=2, burst=3)
        assert len(await _ids(queue, 5)) == 3, "a full bucket of 3 did not give 3"
        await _nothing_claimable(queue, "an empty bucket")
        due = await queue.next_due_in_s()
        assert due is not None, "next_due_in_s with no token: None"
        assert abs(due - 0.5) < 1e-3, f"next_due_in_s with no token: {due}"
        await harness.advance(0.5)
        held = await queue.claim_batch("w", 5)
        assert len(held) == 1, f"one token after 0.5 s gave {len(held)}"
        await harness.advance(0.75)
        acked, claimed = await queue.ack_handles_and_claim(held, "w", 5)
        assert acked == [True], f"ack_handles_and_claim acked {acked}"
        assert len(claimed) == 1, f"1.5 tokens: ack_handles_and_claim claimed {len(claimed)}"
        await harness.advance(0.25)
        assert len(await _ids(queue, 5)) == 1, "the half token left plus 0.25 s gave not 1"
        await harness.advance(100)
        assert len(await _ids(queue, 10)) == 3, "a bucket refilled for 100 s beyond burst 3"


@_check
async def q18_9_limits_combine_and_a_pause_still_wins(harness: EngineHarness) -> None:
    """Q18.7/Q18.9: with both limits the smaller allowance holds; a paused limited queue
    hands out nothing and takes no token; at max_running with ready jobs,
    next_due_in_s is the earliest live lease's remaining time."""
    async with harness.open_store() as store:
        queue = store.queue("limit-both", QueueOpts(visibility_timeout_s=30))
        await queue.enqueue_many([b"%d" % i for i in range(10)])
        await queue.set_limits(max_running=2, rate_per_s=1, burst=5)
        assert len(await _ids(queue, 5)) == 2, "max_running=2 under a bucket of 5"
        due = await queue.next_due_in_s()
        assert due is not None, "next_due_in_s at max_running: None"
        assert abs(due - 30) < 1e-3, f"next_due_in_s at max_running: {due}"
        await queue.set_limits(max_running=None)
        await queue.pause()
        await _nothing_claimable(queue, "a paused, limited queue")
        await queue.resume()
        assert len(await _ids(queue, 9)) == 3, "the pause took tokens of the bucket"


@_check
async def q18_10_stats_show_limits_and_count_throttled_claims(harness: EngineHarness) -> None:
    """Q18.10: QueueStats.limits shows the limits (None without); stats() of every
    queue lists a limited queue without rows; throttled counts the claims each limit
    held back (not those that found fewer jobs than asked, nor a claim of an empty
    queue)."""
    async with harness.open_store() as store:
        queue = store.queue("limit-stats")
        empty = store.queue("limit-stats-empty")
        await empty.set_limits(rate_per_s=10)
        listed = {entry.queue: entry.limits for entry in (await store.stats()).queues}
        assert listed.get("limit-stats-empty") == QueueLimits(None, 10.0, 10), (
            f"stats() of every queue: {listed}"
        )
        await queue.enqueue_many([b"%d" % i for i in range(6)])
        await queue.set_limits(max_running=2)
        await _ids(queue, 3)  # held back by max_running
        await _ids(queue, 1)  # no slot: held back
        await queue.set_limits(max_running=None, rate_per_s=1, burst=1)
        await _ids(queue, 2)  # held back by the rate
        await harness.advance(5)
        await _ids(queue, 1)  # asked 1, got 1: not throttled
        await empty.claim_batch("w", 5)  # nothing there: not throttled
        entry = (await store.stats("limit-stats")).queue("limit-stats")
        assert entry is not None, "stats(name) did not list the queue"
        assert entry.limits == QueueLimits(None, 1.0, 1), f"limits in stats: {entry.limits}"
        counts = (entry.throttled.running, entry.throttled.rate)
        assert counts == (2, 1), f"throttled (running, rate) = {counts}, expected (2, 1)"
        await empty.set_limits(rate_per_s=None)
        names = {entry.queue for entry in (await store.stats()).queues}
        assert "limit-stats-empty" not in names, f"an unlimited empty queue is listed: {names}"
        plain = (await store.stats("limit-stats-empty")).queue("limit-stats-empty")
        assert plain is not None, "stats(name) did not list the queue"
        assert plain.limits is None, f"cleared limits in stats: {plain}"


@_check
async def q18_7_freed_slots_and_set_limits_wake_the_queue(harness: EngineHarness) -> None:
    """Q18.7: settling jobs of a limited queue (an ack, a retry, a fail) wakes it, so
    idle workers take the freed slots; set_limits wakes it too."""
    async with harness.open_store() as store:
        queue = store.queue("limit-wake")
        await queue.enqueue_many([b"a", b"b", b"c", b"d"])
        async with store.open_wake_listener([queue]) as listener:
            await queue.set_limits(max_running=3)
            await _wait_for_wakes(listener, {"limit-wake"}, "set_limits")
            first, second, third = await queue.claim_batch("w", 3)
            assert await first.ack() is True, "ack refused"
            await _wait_for_wakes(listener, {"limit-wake"}, "an ack of a limited queue")
            assert await second.retry(delay_s=0) is True, "retry refused"
            await _wait_for_wakes(listener, {"limit-wake"}, "a retry of a limited queue")
            assert await third.fail("x") is True, "fail refused"
            await _wait_for_wakes(listener, {"limit-wake"}, "a fail of a limited queue")


@_check
async def q18_7_a_cancelling_job_holds_its_slot_until_settled_or_lapsed(
    harness: EngineHarness,
) -> None:
    """Q18.7/Q18.8/Q19.5: a cancelled job's handler may still be running, so its
    cancelling row holds a slot of max_running and of its key while its lease is live
    (next_due_in_s waits for that lease); its holder's settle frees the slot and wakes
    the queue, and a lapsed lease stops counting."""
    async with harness.open_store() as store:
        queue = store.queue("limit-cancelling", QueueOpts(visibility_timeout_s=10))
        first = await queue.enqueue(b"first", concurrency_key="k")
        second = await queue.enqueue(b"second", concurrency_key="k")
        await queue.set_limits(max_running=1)
        (held,) = await queue.claim_batch("holder", 5)
        assert held.id == first, f"claimed {held.id}, not the first job {first}"
        assert await queue.cancel(first) is True, "cancel refused"
        await _nothing_claimable(queue, "max_running=1 with a cancelling job")
        due = await queue.next_due_in_s()
        assert due is not None, "next_due_in_s under a cancelling lease: None"
        assert 0 < due <= 10, f"next_due_in_s under a cancelling lease: {due}"
        await queue.set_limits(max_running=None, max_running_per_key=1)
        await _nothing_claimable(queue, "max_running_per_key=1 with the key's job cancelling")
        async with store.open_wake_listener([queue]) as listener:
            assert await queue.settle_cancelled([held]) == [True], "settle refused"
            await _wait_for_wakes(listener, {"limit-cancelling"}, "a settled cancel")
        assert await _ids(queue, 5) == [second], "the settled cancel did not free its slot"
        # A cancelling row whose lease lapsed holds nothing (nobody runs it).
        lapsed = store.queue("limit-cancelling-lapsed", QueueOpts(visibility_timeout_s=10))
        one, two = await lapsed.enqueue_many([b"one", b"two"])
        await lapsed.set_limits(max_running=1)
        assert await _ids(lapsed, 5) == [one], "the first claim"
        assert await lapsed.cancel(one) is True, "cancel refused"
        await _nothing_claimable(lapsed, "max_running=1 with a live cancelling lease")
        await harness.advance(10 + INSTANT_S)
        assert await _ids(lapsed, 5) == [two], "a lapsed cancelling lease still held its slot"
