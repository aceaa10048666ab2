"""Q18 on PostgreSQL beyond the conformance suite: a pause is kept in the schema (it
outlives the store that made it and binds every other store), the pause waits for a
write in flight on the jobs table (and gives up, unchanged, past its lock timeout), and
pauses of two schemas or two queues are apart."""

from __future__ import annotations

import time

import psycopg
import pytest
import trio
from psycopg import sql as pgsql

from alkstore_trio import EngineError, open_store
from alkstore_trio._engines._postgres import _backend


async def test_q18_a_pause_is_kept_in_the_schema_for_every_store(pg_dsn, schema):
    async with open_store(pg_dsn, schema=schema, migrate="apply") as first:
        queue = first.queue("kept")
        await queue.enqueue_many([b"a", b"b"])
        await queue.pause()
    async with open_store(pg_dsn, schema=schema) as second:
        queue = second.queue("kept")
        assert await queue.claim_batch("w", 5) == []
        entry = (await second.stats()).queue("kept")
        assert entry is not None
        assert entry.paused
        async with open_store(pg_dsn, schema=schema) as third:
            await third.queue("kept").resume()
        assert len(await queue.claim_batch("w", 5)) == 2


async def test_q18_pause_waits_for_the_writes_in_flight_on_jobs(pg_dsn, schema):
    # A statement in flight that writes jobs (here: a transaction that claimed a job and
    # has not committed) makes pause() wait until it commits; a claim after the pause
    # gets nothing.
    async with open_store(pg_dsn, schema=schema, migrate="apply") as store:
        queue = store.queue("held")
        await queue.enqueue_many([b"a", b"b"])
        s = pgsql.Identifier(schema).as_string()
        with psycopg.connect(pg_dsn, autocommit=False) as claimer:
            claimer.execute(f"UPDATE {s}.jobs SET claimed_by = 'raw' WHERE id = 1")
            returned_at: list[float] = []

            async def pause() -> None:
                await queue.pause()
                returned_at.append(time.monotonic())

            async with trio.open_nursery() as nursery:
                nursery.start_soon(pause)
                await trio.sleep(0.3)
                assert returned_at == [], "pause() returned while a write to jobs was open"
                committed_at = time.monotonic()
                claimer.commit()
            assert returned_at[0] >= committed_at
        assert await queue.claim_batch("w", 5) == []


async def test_q18_a_pause_that_cannot_get_its_barrier_fails_and_changes_nothing(
    pg_dsn, schema, monkeypatch
):
    # An open transaction that enqueued holds the jobs table: past the lock timeout the
    # pause gives up with EngineError, and the queue is not paused.
    monkeypatch.setattr(_backend, "PAUSE_LOCK_TIMEOUT_S", 0.2)
    async with open_store(pg_dsn, schema=schema, migrate="apply") as store:
        queue = store.queue("blocked")
        await queue.enqueue(b"a")
        async with store.transaction() as tx:
            await tx.enqueue(queue, b"in an open transaction")
            with pytest.raises(EngineError) as caught:
                await queue.pause()
            assert "lock timeout" in str(caught.value.__cause__)
        entry = (await store.stats("blocked")).queue("blocked")
        assert entry is not None
        assert not entry.paused
        assert len(await queue.claim_batch("w", 5)) == 2


async def test_q18_pauses_of_other_queues_and_schemas_are_apart(pg_dsn, make_schema):
    one, two = make_schema(), make_schema()
    async with (
        open_store(pg_dsn, schema=one, migrate="apply") as first,
        open_store(pg_dsn, schema=two, migrate="apply") as second,
    ):
        await first.queue("same").pause()
        for queue in (second.queue("same"), first.queue("other")):
            await queue.enqueue(b"x")
            assert len(await queue.claim_batch("w", 5)) == 1
