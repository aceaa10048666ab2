"""W9: the overview's table is refreshed from one ``stats`` reading shared by every open
page per interval, and shows acked and dead-lettered rates from the readings kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import trio
import trio.testing
from _dashboard_client import Client

from alkstore_trio import EngineError, open_store
from alkstore_trio.dashboard import create_app
from alkstore_trio.dashboard._live import CHART_HEIGHT, Sample, SharedStats, rates, sparkline
from alkstore_trio.testing import ManualClock

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_w9_rates_are_per_minute_between_consecutive_readings():
    samples = [
        Sample(T0, {"a": (0, 0)}),
        Sample(T0 + timedelta(seconds=30), {"a": (10, 1), "b": (5, 0)}),
        Sample(T0 + timedelta(seconds=60), {"a": (40, 1), "b": (8, 2)}),
    ]
    assert rates(samples, "a").acked == (20.0, 60.0)
    assert rates(samples, "a").dead_lettered == (2.0, 0.0)
    assert rates(samples, "b").acked == (6.0,)  # counted from its first reading
    assert rates(samples, "c").acked_now is None
    same_instant = [Sample(T0, {"a": (0, 0)}), Sample(T0, {"a": (5, 0)})]
    assert rates(same_instant, "a").acked == ()


def test_w9_the_sparkline_spans_the_chart_and_scales_to_its_top():
    assert sparkline([]) == ""
    assert sparkline([3.0]) == ""
    points = [tuple(map(float, p.split(","))) for p in sparkline([0.0, 5.0, 10.0]).split()]
    assert [x for x, _ in points] == [0.0, 60.0, 120.0]
    assert [y for _, y in points] == [CHART_HEIGHT - 1, CHART_HEIGHT / 2, 1.0]
    half = [float(p.split(",")[1]) for p in sparkline([10.0, 10.0], top=20.0).split()]
    assert half == [CHART_HEIGHT / 2, CHART_HEIGHT / 2]


async def test_w9_open_pages_share_one_reading_per_interval(mock_clock):
    clock = ManualClock(T0)
    async with open_store("memory://", clock=clock) as store:
        q = store.queue("emails")
        reads = 0
        real_stats = store.stats

        async def counted_stats(queue=None):
            nonlocal reads
            reads += 1
            return await real_stats(queue)

        store.stats = counted_stats
        await q.enqueue(b"waiting")
        client = Client(create_app(store))
        first = await client.get("/")  # a page load reads afresh
        assert "after the next refresh" in first.text
        assert reads == 1
        for _ in range(3):  # three open pages refresh within the interval: no new read
            assert (await client.get("/fragments/overview")).status == 200
        assert reads == 1
        await q.enqueue_many([b"x"] * 6)
        for _ in range(6):
            handle = await q.claim_one("w")
            await handle.ack()  # the waiting job first, then five of the six
        clock.advance(30)
        mock_clock.jump(5)
        table = (await client.get("/fragments/overview")).text
        assert reads == 2
        assert '<span class="acked-rate">12.0 acked</span>' in table
        assert '<span class="dead-rate">0.0 dead</span>' in table
        assert "<polyline" in table
        assert (await client.get("/fragments/overview")).text == table
        assert reads == 2


class _SlowStats:
    """A store whose ``stats`` takes ``took_s`` of trio's (mock) clock, counted."""

    def __init__(self, store, took_s: float) -> None:
        self.store = store
        self.took_s = took_s
        self.reads = 0
        self.fail = False

    async def stats(self, queue=None):
        self.reads += 1
        await trio.sleep(self.took_s)
        if self.fail:
            raise EngineError("the database went away")
        return await self.store.stats(queue)


async def test_w9_a_slow_reading_is_reused_ten_times_as_long_as_it_took(autojump_clock):
    async with open_store("memory://", clock=ManualClock(T0)) as store:
        slow = _SlowStats(store, took_s=1.0)
        shared = SharedStats(slow, max_age_s=4.5)
        await shared.read()
        assert shared.limit_s == 10.0  # 10 x 1 s, over the 4.5 s asked for
        await trio.sleep(9)
        await shared.read()
        assert slow.reads == 1
        await trio.sleep(1.5)
        await shared.read()
        assert slow.reads == 2


async def test_w9_with_its_lifespan_a_stale_reading_is_served_while_the_next_is_read(
    autojump_clock,
):
    async with open_store("memory://", clock=ManualClock(T0)) as store:
        slow = _SlowStats(store, took_s=0.1)
        shared = SharedStats(slow, max_age_s=5.0)
        async with shared.background():
            first = await shared.read()  # nothing to serve yet: read inline
            await trio.sleep(6)
            began = trio.current_time()
            assert await shared.read() is first  # stale, served at once
            assert trio.current_time() == began
            assert await shared.read() is first  # one background read, not two
            await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(0.2)
            fresh = await shared.read()
            assert fresh is not first
            assert slow.reads == 2
            # Past three limits old (the background reads failing), a page reads inline
            # and sees the error rather than old numbers.
            slow.fail = True
            await trio.sleep(6)
            assert await shared.read() is fresh  # stale: served, the background fails
            await trio.sleep(10)
            with pytest.raises(EngineError):
                await shared.read()
