"""D22 and D23 (decisions where the contract is silent): ``store.stats()`` counts each
queue by state at one instant, and ``ids_issued`` tells how many rows are gone."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ... import InvalidArgument, QueueOpts
from ._helpers import INSTANT_S, _any, _check, _claim_id, _dead_job, _raises

if TYPE_CHECKING:
    from .._harness import EngineHarness


@_check
async def d22_stats_counts_each_queue_by_state_at_one_instant(harness: EngineHarness) -> None:
    """D22: ``store.stats()`` counts, per queue with rows, ready and delayed pending rows,
    processing rows and the lapsed ones among them, and dead rows, at the engine's clock;
    the oldest ready row's age is ``now - min(run_at)`` of the ready rows. ``stats(queue)``
    lists only that queue, even when it has no rows."""
    async with harness.open_store() as store:
        empty = await store.stats()
        assert empty.queues == (), f"a fresh store's stats list queues: {empty.queues!r}"
        assert empty.now == await harness.now(), (
            f"stats().now is {empty.now!r}, expected the engine's clock {await harness.now()!r}"
        )
        stats_a = store.queue("stats-a", QueueOpts(visibility_timeout_s=10))
        stats_b = store.queue("stats-b")
        await _dead_job(stats_a, b"dead")
        lapsed = await stats_a.enqueue(b"lapsed", priority=5)
        await _claim_id(stats_a, lapsed)
        await harness.advance(10 + INSTANT_S)
        held = await stats_a.enqueue(b"held", priority=9)
        assert await (await _claim_id(stats_a, held)).heartbeat(1000) is True, "heartbeat"
        await stats_a.enqueue(b"old ready")
        await harness.advance(30)
        await stats_a.enqueue(b"new ready")
        await stats_a.enqueue(b"delayed", delay_s=60)
        await stats_b.enqueue(b"b delayed", delay_s=1)
        stats = await store.stats()
        now = await harness.now()
        assert stats.now == now, f"stats().now is {stats.now!r}, expected {now!r}"
        assert [entry.queue for entry in stats.queues] == ["stats-a", "stats-b"], (
            f"stats() listed {[entry.queue for entry in stats.queues]}"
        )
        a, b = stats.queues
        got = (a.pending_ready, a.pending_delayed, a.processing, a.reclaimable, a.dead)
        assert got == (2, 1, 2, 1, 1), (
            f"stats-a (ready, delayed, processing, reclaimable, dead) = {got}, "
            "expected (2, 1, 2, 1, 1)"
        )
        assert a.oldest_ready_age_s == 30.0, (
            f"stats-a oldest_ready_age_s = {a.oldest_ready_age_s!r}, expected 30.0"
        )
        got_b = (b.pending_ready, b.pending_delayed, b.processing, b.dead, b.oldest_ready_age_s)
        assert got_b == (0, 1, 0, 0, None), f"stats-b = {b!r}"
        only = await store.stats("stats-b")
        assert only.queues == (b,), f"stats('stats-b') = {only.queues!r}, expected ({b!r},)"
        nothing = await store.stats(store.queue("stats-none"))
        assert [(e.queue, e.live, e.dead) for e in nothing.queues] == [("stats-none", 0, 0)], (
            f"stats of a queue without rows = {nothing.queues!r}"
        )
        await _raises(InvalidArgument, "stats('alk_x')", store.stats, "alk_x")
        await _raises(InvalidArgument, "stats(7)", store.stats, _any(7))


@_check
async def d23_ids_issued_minus_live_and_dead_counts_the_rows_gone(harness: EngineHarness) -> None:
    """D23: ``stats().ids_issued`` counts every id handed out (rolled-back transactions
    included), so ``ids_issued - live - dead`` grows by each ack, cancel and purge, and
    by nothing else."""

    def gone(stats: Any) -> int:
        return int(stats.ids_issued - sum(e.live + e.dead for e in stats.queues))

    async with harness.open_store() as store:
        queue = store.queue("gone")
        ids = await queue.enqueue_many([b"a", b"b", b"c", b"d"])
        first = await store.stats()
        assert first.ids_issued >= 4, f"ids_issued = {first.ids_issued} after 4 enqueues"
        assert gone(first) == 0, f"rows gone before any ack: {gone(first)}"
        assert await (await _claim_id(queue, ids[0])).ack() is True, "ack was refused"
        assert await queue.cancel(ids[1]) is True, "cancel was refused"
        await (await _claim_id(queue, ids[2])).fail()
        after = await store.stats()
        assert gone(after) == 2, f"after one ack and one cancel, {gone(after)} rows gone"
        assert await queue.purge_dead() == 1, "purge_dead did not delete the dead row"
        assert gone(await store.stats()) == 3, "a purge is not counted as a row gone"
