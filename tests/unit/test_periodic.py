"""Q17's pure core: ``Periodic``'s checks and ``plan_fires``, on fixed instants (no
clock at all), including the DST days of Q17.7 in several zones."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

import pytest

from alkstore_trio import InvalidArgument, Periodic
from alkstore_trio._core._periodic import fire_spec, plan_fires


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def walk(p: Periodic, start: datetime, end: datetime, step_s: float) -> list[datetime]:
    """Every fire time enqueued by calls every ``step_s`` from ``start`` to ``end``."""
    plan = plan_fires(p, None, start)
    fired: list[datetime] = []
    now = start
    while now < end:
        now += timedelta(seconds=step_s)
        plan = plan_fires(p, plan.next_fire_at, now)
        fired += plan.fires
    return fired


@pytest.mark.parametrize(
    ("tz", "spring_day", "first_after_gap"),
    [
        ("Europe/Berlin", utc(2026, 3, 29), utc(2026, 3, 29, 1, 0)),  # 03:00 CEST
        ("America/New_York", utc(2026, 3, 8), utc(2026, 3, 8, 7, 0)),  # 03:00 EDT
    ],
)
def test_q17_7_a_daily_0230_on_the_spring_forward_day_runs_once(tz, spring_day, first_after_gap):
    daily = Periodic("d", "q", cron="30 2 * * *", tz=tz)
    fired = walk(daily, spring_day - timedelta(days=1), spring_day + timedelta(days=1), 60)
    on_the_day = [f for f in fired if spring_day <= f < spring_day + timedelta(days=1)]
    assert on_the_day == [first_after_gap]


@pytest.mark.parametrize(
    ("tz", "fall_day", "first_occurrence"),
    [
        ("Europe/Berlin", utc(2026, 10, 25), utc(2026, 10, 25, 0, 30)),  # 02:30 CEST
        ("America/New_York", utc(2026, 11, 1), utc(2026, 11, 1, 5, 30)),  # 01:30 EDT
    ],
)
def test_q17_7_a_daily_job_in_the_repeated_hour_of_the_fall_back_day_runs_once(
    tz, fall_day, first_occurrence
):
    local = "30 2 * * *" if tz == "Europe/Berlin" else "30 1 * * *"
    daily = Periodic("d", "q", cron=local, tz=tz)
    fired = walk(daily, fall_day - timedelta(days=1), fall_day + timedelta(days=1), 60)
    on_the_day = [f for f in fired if fall_day <= f < fall_day + timedelta(days=1)]
    assert on_the_day == [first_occurrence]


@pytest.mark.parametrize("minute", [0, 1, 29, 31, 59])
def test_q17_7_a_schedule_planned_in_the_repeated_hour_after_its_fire_waits_for_the_next_day(
    minute,
):
    # Found by the state machine: Berlin's 02:30 fires at its first occurrence (00:30
    # UTC). Planned in the repeated hour (from 01:00 UTC, 02:xx CET), cronsim answered
    # that first occurrence, in the past: the row's next fire time never advanced.
    daily = Periodic("d", "q", cron="30 2 * * *", tz="Europe/Berlin")
    now = utc(2030, 10, 27, 1, minute, 0) + timedelta(microseconds=1)
    plan = plan_fires(daily, None, now)
    assert plan == ((), utc(2030, 10, 28, 1, 30))  # 02:30 CET the next day
    assert plan_fires(daily, utc(2030, 10, 27, 0, 30), now) == (
        (utc(2030, 10, 27, 0, 30),),
        utc(2030, 10, 28, 1, 30),
    )


def test_q17_7_sub_hourly_cron_fires_at_every_real_instant_of_a_fall_back_night():
    half_hourly = Periodic("h", "q", cron="*/30 * * * *", tz="Europe/Berlin")
    fired = walk(half_hourly, utc(2026, 10, 24, 23, 0), utc(2026, 10, 25, 2, 0), 60)
    # 01:00 .. 04:00 local on both sides of the change: 30 minutes apart in real time.
    assert fired == [utc(2026, 10, 24, 23, 30) + timedelta(minutes=30 * k) for k in range(6)]


@pytest.mark.parametrize(
    ("tz", "start"),
    [
        ("Europe/Berlin", utc(2026, 3, 28, 23, 0)),  # 00:00 CET
        ("America/New_York", utc(2026, 3, 8, 5, 0)),  # 00:00 EST
    ],
)
def test_q17_7_sub_hourly_cron_skips_the_missing_hour_of_a_spring_forward_night(tz, start):
    half_hourly = Periodic("h", "q", cron="*/30 * * * *", tz=tz)
    fired = walk(half_hourly, start, start + timedelta(hours=4), 60)
    # 00:30, 01:00 and 01:30 standard time; 02:00 and 02:30 do not exist; then 03:00,
    # 03:30... daylight time. 01:30 and 03:00 local are 30 real minutes apart, so the
    # fire times stay 30 minutes apart in real time: none twice, none in the gap.
    minutes = [30, 60, 90, 120, 150, 180, 210, 240]
    assert fired == [start + timedelta(minutes=m) for m in minutes]


def test_q17_7_every_s_is_elapsed_time_and_ignores_the_zone():
    every = Periodic("e", "q", every_s=3600, tz="Europe/Berlin")
    fired = walk(every, utc(2026, 3, 28, 23, 0), utc(2026, 3, 29, 4, 0), 600)
    assert fired == [utc(2026, 3, 29, k, 0) for k in range(5)]


@pytest.mark.parametrize(("catch_up", "kept"), [("skip", 0), ("one", 1), (3, 3), (1000, 10)])
def test_q17_5_catch_up_keeps_the_latest_missed_fire_times(catch_up, kept):
    p = Periodic("p", "q", every_s=10, catch_up=catch_up)
    start = utc(2026, 1, 1)
    plan = plan_fires(p, start, start + timedelta(seconds=105))
    due = [start + timedelta(seconds=10 * k) for k in range(11)]
    assert plan.fires == tuple(due[10 - kept :])
    assert plan.next_fire_at == start + timedelta(seconds=110)


def test_q17_5_cron_catch_up_walks_back_from_the_upcoming_fire_time():
    p = Periodic("p", "q", cron="0 * * * *", catch_up=2)
    plan = plan_fires(p, utc(2026, 1, 1, 0), utc(2026, 1, 1, 9, 59))
    assert plan.fires == (utc(2026, 1, 1, 7), utc(2026, 1, 1, 8), utc(2026, 1, 1, 9))
    assert plan.next_fire_at == utc(2026, 1, 1, 10)


def test_q17_2_a_fire_time_is_due_at_its_instant_not_before():
    p = Periodic("p", "q", every_s=60)
    at = utc(2026, 1, 1, 0, 1)
    assert plan_fires(p, at, at - timedelta(microseconds=1)).fires == ()
    assert plan_fires(p, at, at).fires == (at,)


def test_q17_4_the_job_carries_the_schedule_and_its_fire_time():
    p = Periodic("digest", "emails", every_s=60, headers={"tenant": "t"}, max_attempts=5)
    spec = fire_spec(p, utc(2026, 3, 29, 5))
    assert dict(spec.headers) == {
        "tenant": "t",
        "alk-periodic": "digest",
        "alk-periodic-fire-at": "2026-03-29T05:00:00+00:00",
    }
    assert (spec.queue, spec.max_attempts, spec.delay_s, spec.run_at) == ("emails", 5, None, None)


def test_q17_1_cron_without_the_extra_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "cronsim", None)
    with pytest.raises(InvalidArgument, match=r"alkstore_trio\[cron\]"):
        Periodic("p", "q", cron="* * * * *")
    assert Periodic("p", "q", every_s=1).every_s == 1.0  # every_s needs nothing


def test_q17_1_expressions_are_normalized_and_shown():
    p = Periodic("p", "q", cron="  0   7 * *  1-5 ")
    assert p.expression == "cron:0 7 * * 1-5"
    assert Periodic("p", "q", every_s=90).expression == "every:90.0s"
    assert "payload" not in repr(Periodic("p", "q", every_s=1, payload=b"secret"))


@pytest.mark.parametrize("cron", ["*/30 * * * *", "30 2 * * *", "0 3 * * *"])
def test_q17_5_backfill_across_dst_days_agrees_with_the_walk_forward(cron):
    """The catch-up walks back from the upcoming fire time; across both DST changes of
    the year it finds exactly the fire times a call every minute would have fired."""
    p = Periodic("p", "q", cron=cron, tz="Europe/Berlin", catch_up=1000)
    for start in (utc(2026, 3, 28), utc(2026, 10, 24)):
        end = start + timedelta(days=2)
        stepped = walk(p, start, end, 60)
        first = plan_fires(p, None, start).next_fire_at
        backfilled = plan_fires(p, first, end)
        assert list(backfilled.fires) == [f for f in stepped if f <= end]
