"""Q18 on PostgreSQL beyond the conformance suite: a pause is kept in the schema (it
outlives the store that made it and binds every other store), the pause waits for a
claim in flight, and pauses of two schemas or two queues are apart."""

from __future__ import annotations

import time

import psycopg
import trio
from psycopg import sql as pgsql

from alkstore_trio import open_store


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


async def test_q18_pause_waits_for_a_claim_in_flight(pg_dsn, schema):
    # A claim that holds the queue's gate (here: a transaction that passed it and has not
    # committed) makes pause() wait until it commits; a claim after the pause gets nothing.
    async with open_store(pg_dsn, schema=schema, migrate="apply") as store:
        queue = store.queue("held")
        await queue.enqueue_many([b"a", b"b"])
        s = pgsql.Identifier(schema).as_string()
        with psycopg.connect(pg_dsn, autocommit=False) as claimer:
            ((open_,),) = claimer.execute(f"SELECT {s}.alk_claim_gate('held')").fetchall()
            assert open_ is True
            returned_at: list[float] = []

            async def pause() -> None:
                await queue.pause()
                returned_at.append(time.monotonic())

            async with trio.open_nursery() as nursery:
                nursery.start_soon(pause)
                await trio.sleep(0.3)
                assert returned_at == [], "pause() returned while a claim held the gate"
                committed_at = time.monotonic()
                claimer.commit()
            assert returned_at[0] >= committed_at
        assert await queue.claim_batch("w", 5) == []


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
