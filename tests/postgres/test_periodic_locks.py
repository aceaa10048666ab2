"""Q17.9 on PostgreSQL: a fire transaction skips a schedule row another transaction holds
(and still fires the rows it could lock), gives up on a lock wait past its bound, and a
fire whose client stalls inside its transaction is ended by the server, which rolls it
back: no job and no advance survive it. On both drivers.

Nothing here sleeps for time: a stall is a task waiting on an event the test sets once
it has seen, in ``pg_stat_activity``, what the server did.
"""

from __future__ import annotations

import psycopg
import pytest
import trio
from psycopg import sql as pgsql

from alkstore_trio import EngineError, Periodic, open_store
from alkstore_trio._core._periodic import PERIODIC_HELD_RECHECK_S
from alkstore_trio._engines._postgres import _periodic
from alkstore_trio.engine import PostgresEngine

APP = "alkstore-trio-tests:periodic-locks"


def _store(pg_dsn, schema, driver, app=APP):
    engine = PostgresEngine(
        pg_dsn, schema=schema, migrate="apply", pool_size=2, application_name=app, driver=driver
    )
    return open_store(engine)


async def _fire_times(store, queue="ticks"):
    handles = await store.queue(queue).claim_batch("reader", 1000)
    return sorted(h.job.headers["alk-periodic-fire-at"] for h in handles)


def _quoted(schema):
    return pgsql.Identifier(schema).as_string()


async def test_q17_9_a_held_row_is_skipped_and_the_others_fire(pg_dsn, schema, driver):
    held, free = Periodic("held", "ticks", every_s=60), Periodic("free", "ticks", every_s=60)
    async with _store(pg_dsn, schema, driver) as store:
        await store.fire_periodic([held, free])
        s = _quoted(schema)
        # Both rows due now (back-dated), and another transaction holds "held".
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f"UPDATE {s}.periodic SET next_fire_at = now() - interval '0.5 seconds'")
        with psycopg.connect(pg_dsn, autocommit=False) as holder:
            holder.execute(f"SELECT 1 FROM {s}.periodic WHERE name = 'held' FOR UPDATE")
            with trio.fail_after(10):  # skipped, not waited for
                tick = await store.fire_periodic([held, free])
            assert [f.name for f in tick.fired] == ["free"], tick
            assert tick.next_in_s == PERIODIC_HELD_RECHECK_S, tick
            rows = {row.name: row for row in await store.list_periodic()}
            holder.rollback()
        assert rows["held"].last_fire_at is None, rows["held"]
        # Released, the row fires what it owes, once.
        tick = await store.fire_periodic([held, free])
        assert [f.name for f in tick.fired] == ["held"], tick
        assert tick.next_in_s > 59, tick
        assert len(await _fire_times(store)) == 2


async def test_q17_9_a_lock_wait_past_its_bound_fails_without_effect(
    pg_dsn, schema, driver, monkeypatch
):
    # The one wait left: a row another transaction is making (uncommitted insert).
    monkeypatch.setattr(_periodic, "FIRE_LOCK_TIMEOUT_S", 0.05)
    new = Periodic("new", "ticks", every_s=1)
    async with _store(pg_dsn, schema, driver) as store:
        s = _quoted(schema)
        with psycopg.connect(pg_dsn, autocommit=False) as maker:
            maker.execute(
                f"INSERT INTO {s}.periodic (name, queue, expression, tz, last_seen_at) "
                "VALUES ('new', 'ticks', 'every:1.0s', 'UTC', now())"
            )
            with trio.fail_after(10), pytest.raises(EngineError, match="lock"):
                await store.fire_periodic([new])
            maker.rollback()
        assert await store.list_periodic() == []
        await store.fire_periodic([new])  # the pool's connection is usable again
        assert [row.name for row in await store.list_periodic()] == ["new"]


async def test_q17_9_a_stalled_fire_is_ended_by_the_server_and_rolled_back(
    pg_dsn, schema, driver, monkeypatch
):
    monkeypatch.setattr(_periodic, "FIRE_IDLE_TIMEOUT_S", 0.2)
    every = Periodic("every", "ticks", every_s=1)
    stalled_app = APP + ":stalled"
    real_fire = _periodic.fire
    inside, release = trio.Event(), trio.Event()

    async def stalling_fire(conn, queries, enqueue_statement, schedules):
        # Every statement of the fire ran (jobs enqueued, row advanced); the client
        # stalls before its commit, holding the row's lock.
        tick = await real_fire(conn, queries, enqueue_statement, schedules)
        if tick.fired:
            inside.set()
            await release.wait()
        return tick

    async with _store(pg_dsn, schema, driver, app=stalled_app) as store:
        await store.fire_periodic([every])
        s = _quoted(schema)
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f"UPDATE {s}.periodic SET next_fire_at = now() - interval '0.5 seconds'")

            def sessions_idle_in_transaction() -> int:
                ((n,),) = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE application_name = %s AND state LIKE 'idle in transaction%%'",
                    [stalled_app],
                ).fetchall()
                return int(n)

            monkeypatch.setattr(_periodic, "fire", stalling_fire)
            async with trio.open_nursery() as nursery:
                errors: list[BaseException] = []

                async def fire() -> None:
                    try:
                        await store.fire_periodic([every])
                    except EngineError as exc:
                        errors.append(exc)

                nursery.start_soon(fire)
                with trio.fail_after(10):
                    await inside.wait()
                    # The server ends the stalled session: it is gone, not idle.
                    while True:
                        if not sessions_idle_in_transaction():
                            break
                        await trio.sleep(0.02)
                release.set()
            monkeypatch.setattr(_periodic, "fire", real_fire)
            assert len(errors) == 1, errors
            # Rolled back: no job, and the row still owes its fire time.
            ((jobs,),) = admin.execute(f"SELECT count(*) FROM {s}.jobs").fetchall()
            assert jobs == 0
        tick = await store.fire_periodic([every])
        assert len(tick.fired) == 1, tick
        assert len(await _fire_times(store)) == 1
