"""W9: the overview's table is refreshed from one ``stats`` reading shared by every open
page per interval, and shows acked and dead-lettered rates from the readings kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from _dashboard_client import Client

from alkstore_trio import open_store
from alkstore_trio.dashboard import create_app
from alkstore_trio.dashboard._live import CHART_HEIGHT, Sample, rates, sparkline
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
