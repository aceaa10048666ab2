"""Q17 periodic jobs: ``store.fire_periodic`` enqueues each fire time once, on the
engine's clock, with the catch-up policy, the headers, the definitions and the listing
of the contract. Cron checks need the ``cron`` extra (``cronsim``)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING

import trio

from ... import InvalidArgument, Periodic, QueueOpts
from ._helpers import _check, _raises

if TYPE_CHECKING:
    from ... import PeriodicTick, Store
    from .._harness import EngineHarness


async def _advance_to(harness: EngineHarness, when: datetime) -> None:
    now = await harness.now()
    assert when >= now, f"cannot move the clock back to {when} from {now}"
    await harness.advance((when - now).total_seconds())


async def _fired_at(store: Store, schedules: list[Periodic]) -> list[datetime]:
    tick = await store.fire_periodic(schedules)
    return [f.fire_at for f in tick.fired]


def _last_sunday(year: int, month: int) -> date:
    day = date(year, month, 31)
    return day - timedelta(days=(day.weekday() - 6) % 7)


def _nth_sunday(year: int, month: int, n: int) -> date:
    first = date(year, month, 1)
    return first + timedelta(days=(6 - first.weekday()) % 7 + 7 * (n - 1))


@_check
async def q17_each_fire_time_is_enqueued_once_on_the_engines_clock(harness: EngineHarness) -> None:
    """Q17.2/Q17.3: the first call makes the row (first fire time one period after now)
    and fires nothing; a call at the fire time enqueues one job, a second call none;
    the delay answered is on the engine's clock."""
    every = Periodic("every-minute", "periodic", every_s=60)
    async with harness.open_store() as store:
        start = await harness.now()
        first = await store.fire_periodic([every])
        assert first.fired == (), f"the first call fired {first.fired}"
        assert first.next_in_s == 60.0, f"next_in_s was {first.next_in_s}, not 60"
        await harness.advance(59.999)
        assert await _fired_at(store, [every]) == [], "a call before the fire time fired"
        await harness.advance(0.001)
        assert await _fired_at(store, [every]) == [start + timedelta(seconds=60)]
        again = await store.fire_periodic([every])
        assert again.fired == (), f"a second call at the same instant fired {again.fired}"
        assert again.next_in_s == 60.0, f"next_in_s after the fire was {again.next_in_s}"
        (row,) = await store.list_periodic()
        assert row.last_fire_at == start + timedelta(seconds=60), row
        assert row.next_fire_at == start + timedelta(seconds=120), row


@_check
async def q17_concurrent_calls_enqueue_each_fire_time_once(harness: EngineHarness) -> None:
    """Q17.2: eight concurrent callers declaring the same schedules (a fleet of workers)
    enqueue each due fire time exactly once between them."""
    schedules = [Periodic("a", "periodic", every_s=10), Periodic("b", "periodic", every_s=15)]
    async with harness.open_store() as store:
        await store.fire_periodic(schedules)
        ticks: list[PeriodicTick] = []

        async def call() -> None:
            ticks.append(await store.fire_periodic(schedules))

        for _ in range(3):
            await harness.advance(15)
            async with trio.open_nursery() as nursery:
                for _ in range(8):
                    nursery.start_soon(call)
        fired = sorted((f.name, f.fire_at) for tick in ticks for f in tick.fired)
        assert len(fired) == len(set(fired)), f"a fire time was enqueued twice: {fired}"
        counts = {name: sum(1 for n, _ in fired if n == name) for name in ("a", "b")}
        # 45 s: a fires at 10, 20, 30, 40; b at 15, 30, 45.
        assert counts == {"a": 4, "b": 3}, f"fire times enqueued per schedule: {counts}"
        queue = store.queue("periodic")
        handles = await queue.claim_batch("w", 100)
        assert len(handles) == 7, f"{len(handles)} jobs in the queue, not 7"


@_check
async def q17_jobs_carry_the_schedule_and_fire_time_headers_and_stamps(
    harness: EngineHarness,
) -> None:
    """Q17.4: the job is ready now, with the schedule's payload, priority, max_attempts,
    opts stamps and headers, plus alk-periodic and alk-periodic-fire-at (ISO 8601 UTC)."""
    opts = QueueOpts(visibility_timeout_s=42, backoff_base_s=2, expires_in_s=600)
    p = Periodic(
        "stamped",
        "periodic",
        every_s=5,
        payload=b"\x00digest",
        headers={"tenant": "t1"},
        priority=7,
        max_attempts=9,
        opts=opts,
    )
    async with harness.open_store() as store:
        await store.fire_periodic([p])
        await harness.advance(5)
        now = await harness.now()
        (fired,) = (await store.fire_periodic([p])).fired
        job = await store.queue("periodic").get_job(fired.job_id)
        assert job is not None, "the fired job is not in its queue"
        assert (job.payload, job.priority, job.max_attempts) == (b"\x00digest", 7, 9), job
        assert (job.visibility_timeout_s, job.backoff_base_s) == (42, 2), job
        assert (job.run_at, job.expires_at) == (now, now + timedelta(seconds=600)), job
        assert dict(job.headers) == {
            "tenant": "t1",
            "alk-periodic": "stamped",
            "alk-periodic-fire-at": now.astimezone(UTC).isoformat(),
        }, dict(job.headers)


@_check
async def q17_missed_fire_times_follow_catch_up(harness: EngineHarness) -> None:
    """Q17.5: after 10 periods with no call, "one" enqueues the latest missed fire time
    and the current one, "skip" only the current one, 3 the latest three and the current."""
    one = Periodic("one", "periodic", every_s=10)
    skip = Periodic("skip", "periodic", every_s=10, catch_up="skip")
    three = Periodic("three", "periodic", every_s=10, catch_up=3)
    async with harness.open_store() as store:
        start = await harness.now()
        await store.fire_periodic([one, skip, three])
        await harness.advance(105)
        tick = await store.fire_periodic([one, skip, three])
        got = {
            name: [f.fire_at for f in tick.fired if f.name == name]
            for name in ("one", "skip", "three")
        }
        at = [start + timedelta(seconds=10 * k) for k in range(11)]
        want = {"one": [at[9], at[10]], "skip": [at[10]], "three": [at[7], at[8], at[9], at[10]]}
        assert got == want, f"fired {got}, wanted {want}"
        assert tick.next_in_s == 5.0, f"next_in_s was {tick.next_in_s}"
        ids = [f.job_id for f in tick.fired]
        assert ids == sorted(ids), f"ids not in schedule-name then fire-time order: {tick.fired}"
        assert [f.name for f in tick.fired] == sorted(f.name for f in tick.fired), tick.fired


@_check
async def q17_a_changed_definition_wins_and_recomputes_the_next_fire_time(
    harness: EngineHarness,
) -> None:
    """Q17.3: a call with another expression for the same name rewrites the row and
    recomputes next_fire_at from now (last writer wins); the queue follows the caller."""
    async with harness.open_store() as store:
        start = await harness.now()
        await store.fire_periodic([Periodic("report", "old-queue", every_s=60)])
        await harness.advance(30)
        tick = await store.fire_periodic([Periodic("report", "new-queue", every_s=100)])
        assert (tick.fired, tick.next_in_s) == ((), 100.0), tick
        (row,) = await store.list_periodic()
        assert (row.queue, row.expression) == ("new-queue", "every:100.0s"), row
        assert row.next_fire_at == start + timedelta(seconds=130), row
        await harness.advance(100)
        fired = await _fired_at(store, [Periodic("report", "new-queue", every_s=100)])
        assert fired == [start + timedelta(seconds=130)], fired
        # The same definition again changes nothing.
        tick = await store.fire_periodic([Periodic("report", "new-queue", every_s=100)])
        assert (tick.fired, tick.next_in_s) == ((), 100.0), tick


@_check
async def q17_undeclared_schedules_stop_firing_and_list_as_stale(harness: EngineHarness) -> None:
    """Q17.6: only declared schedules fire; a row no call declared for longer than
    stale_after_s lists as stale, and is kept."""
    kept = Periodic("kept", "periodic", every_s=10)
    removed = Periodic("removed", "periodic", every_s=10)
    async with harness.open_store() as store:
        await store.fire_periodic([kept, removed])
        for _ in range(10):
            await harness.advance(10)
            fired = await store.fire_periodic([kept])
            assert {f.name for f in fired.fired} == {"kept"}, fired
        rows = {row.name: row for row in await store.list_periodic(stale_after_s=60)}
        assert set(rows) == {"kept", "removed"}, f"rows listed: {sorted(rows)}"
        assert (rows["kept"].stale, rows["removed"].stale) == (False, True), rows
        assert rows["removed"].last_fire_at is None, rows["removed"]
        default = {row.name: row.stale for row in await store.list_periodic()}
        assert default == {"kept": False, "removed": False}, f"with 600 s: {default}"


@_check
async def q17_cron_on_dst_days_fires_once(harness: EngineHarness) -> None:
    """Q17.7: a 02:30 Europe/Berlin daily schedule fires once on the spring-forward day
    (at 03:00 local, the first instant after the gap) and once on the fall-back day (at
    the first 02:30); walking the clock an hour at a time."""
    daily = Periodic("daily", "periodic", cron="30 2 * * *", tz="Europe/Berlin")
    now = await harness.now()
    year = now.year + 1
    spring, autumn = _last_sunday(year, 3), _last_sunday(year, 10)
    async with harness.open_store() as store:
        for day, want in [
            (spring, datetime(year, 3, spring.day, 1, 0, tzinfo=UTC)),
            (autumn, datetime(year, 10, autumn.day, 0, 30, tzinfo=UTC)),
        ]:
            eve = datetime(day.year, day.month, day.day, 12, tzinfo=UTC) - timedelta(days=1)
            await _advance_to(harness, eve)
            fired = await _fired_at(store, [daily])  # catch up the months in between
            assert len(fired) <= 2, fired
            got = []
            for _ in range(24):
                await harness.advance(3600)
                got += await _fired_at(store, [daily])
            assert got == [want], f"on {day}: fired at {got}, wanted once at {want}"


@_check
async def q17_7_sub_hourly_cron_fires_at_every_real_instant_across_both_dst_changes(
    harness: EngineHarness,
) -> None:
    """Q17.7/Q17.5: a half-hourly America/New_York schedule, called every ten minutes
    across the spring-forward night, skips the hour that does not exist (02:00 and 02:30
    fire nothing; 03:00 EDT fires once) and across the fall-back night fires both 01:00s
    and both 01:30s, each once; a second schedule called only before and after each
    night backfills exactly the same fire times (catch_up=20)."""
    stepped = Periodic("stepped", "periodic", cron="*/30 * * * *", tz="America/New_York")
    backfilled = Periodic(
        "backfilled", "periodic", cron="*/30 * * * *", tz="America/New_York", catch_up=20
    )
    year = (await harness.now()).year + 1
    spring, autumn = _nth_sunday(year, 3, 2), _nth_sunday(year, 11, 1)
    half_hour = timedelta(minutes=30)
    nights = [
        # 00:30 EST (05:30Z) to 05:00 EDT (09:00Z): 02:00-02:59 local does not exist.
        (spring, 5, [5.5, 6, 6.5, 7, 7.5, 8, 8.5, 9]),
        # 00:30 EDT (04:30Z) to 03:00 EST (08:00Z): 01:00-01:59 local comes twice.
        (autumn, 4, [4.5, 5, 5.5, 6, 6.5, 7, 7.5, 8]),
    ]
    async with harness.open_store() as store:
        for day, start_hour, want_hours in nights:
            start = datetime(day.year, day.month, day.day, start_hour, tzinfo=UTC)
            await _advance_to(harness, start)
            await store.fire_periodic([stepped, backfilled])  # catch up the months between
            got: list[datetime] = []
            for _ in range(24):  # four hours, every ten minutes
                await harness.advance(600)
                got += await _fired_at(store, [stepped])
            want = [start + half_hour * round(2 * (h - start_hour)) for h in want_hours]
            assert got == want, f"on {day}: fired at {got}, wanted {want}"
            assert await _fired_at(store, [backfilled]) == want, f"backfill on {day}"


@_check
async def q17_bad_arguments_are_rejected_without_effect(harness: EngineHarness) -> None:
    """Q17.1: invalid schedules and calls raise InvalidArgument and change nothing."""
    bad_schedules: list[dict[str, object]] = [
        {},
        {"every_s": 10, "cron": "* * * * *"},
        {"every_s": 0},
        {"every_s": float("nan")},
        {"every_s": True},
        {"cron": "61 * * * *"},
        {"cron": ""},
        {"every_s": 1, "tz": "Mars/Olympus"},
        {"every_s": 1, "catch_up": "all"},
        {"every_s": 1, "catch_up": -1},
        {"every_s": 1, "headers": {"alk-periodic": "x"}},
        {"every_s": 1, "priority": 2**31},
        {"every_s": 1, "payload": "text"},
    ]
    for kwargs in bad_schedules:
        await _raises(InvalidArgument, f"Periodic({kwargs})", Periodic, "p", "periodic", **kwargs)
    await _raises(InvalidArgument, "a bad name", Periodic, "", "periodic", every_s=1)
    await _raises(InvalidArgument, "a bad queue", Periodic, "p", "alk_queue", every_s=1)
    p = Periodic("p", "periodic", every_s=1)
    async with harness.open_store() as store:
        await _raises(InvalidArgument, "fire_periodic([])", store.fire_periodic, [])
        await _raises(InvalidArgument, "a name twice", store.fire_periodic, [p, p])
        await _raises(InvalidArgument, "not a Periodic", store.fire_periodic, [p, "q"])
        await _raises(InvalidArgument, "stale_after_s=0", store.list_periodic, stale_after_s=0)
        assert await store.list_periodic() == [], "a rejected call left a row"
