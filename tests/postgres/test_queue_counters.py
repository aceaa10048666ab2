"""The per-queue counters of finished jobs on PostgreSQL (D27), beyond the conformance
suite: they are exact under concurrent sessions, spread over one row per backend shard,
kept across stores (they count since the schema got them), and updated heap-only.

Each test works in its own schema (dropped afterwards).
"""

from __future__ import annotations

import secrets

import trio
from psycopg import sql

from alkstore_trio import QueueOpts, open_store
from alkstore_trio._engines._postgres import _driver, _sql

#: Shards per queue (the modulus of ``pg_backend_pid()`` in ``queries.sql``).
SHARDS = 64


async def counter_rows(dsn: str, schema: str) -> list[tuple[str, int, int, int, int]]:
    conn = await _driver.connect(dsn, connect_timeout_s=5, application_name="alk-counters")
    try:
        rows = await conn.execute(
            sql.SQL(
                "SELECT queue, shard, acked, dead_lettered, cancelled FROM {}.queue_counters "
                "ORDER BY queue, shard"
            )
            .format(sql.Identifier(schema))
            .as_string()
        )
    finally:
        await conn.aclose()
    return [tuple(row) for row in rows]  # type: ignore[misc]


async def test_d27_concurrent_sessions_count_every_ack_in_their_own_shards(pg_dsn, schema):
    # Eight tasks on a pool of eight connections drain a queue with every kind of ack and
    # some failures; the sums are exact, and every counter row is the shard of one of the
    # store's sessions (its backend pid mod 64).
    app = f"alk-counters-{secrets.token_hex(4)}"
    total = 480
    async with open_store(
        pg_dsn, schema=schema, migrate="apply", pool_size=8, application_name=app
    ) as store:
        queue = store.queue("busy", QueueOpts(max_attempts=1))
        await queue.enqueue_many([b"%d" % i for i in range(total)])
        outcomes = {"acked": 0, "dead": 0}

        async def drain(task: int) -> None:
            pending: list = []
            while True:
                # (Read the tally only after the await: the other tasks add to it meanwhile.)
                if task % 2:
                    acked, handles = await queue.ack_handles_and_claim(pending, f"w{task}", 5)
                    outcomes["acked"] += sum(acked)
                else:
                    count = await queue.ack_batch([h.id for h in pending])
                    outcomes["acked"] += count
                    handles = await queue.claim_batch(f"w{task}", 5)
                if not handles:
                    return
                failing, pending = handles[:1], handles[1:]
                if task % 4 == 0:
                    assert await queue.fail_handles([(h, "no") for h in failing]) == [True]
                    outcomes["dead"] += 1
                else:
                    assert await failing[0].ack()
                    outcomes["acked"] += 1

        async with trio.open_nursery() as nursery:
            for task in range(8):
                nursery.start_soon(drain, task)
        async with store.transaction() as tx:
            pids = await tx.fetch(
                "SELECT pid FROM pg_catalog.pg_stat_activity WHERE application_name = %s", [app]
            )
        (entry,) = (await store.stats("busy")).queues
    assert outcomes["acked"] + outcomes["dead"] == total
    assert (entry.acked_total, entry.dead_lettered_total) == (outcomes["acked"], outcomes["dead"])
    assert entry.live == 0
    rows = await counter_rows(pg_dsn, schema)
    assert {row[0] for row in rows} == {"busy"}
    assert sum(row[2] for row in rows) == outcomes["acked"]
    assert {row[1] for row in rows} <= {int(pid) % SHARDS for (pid,) in pids}


async def test_d27_counters_are_kept_across_stores_since_the_schema_has_them(pg_dsn, schema):
    # Counters live in the schema: a store opened later (or another one beside it) reads
    # what earlier stores counted.
    async with open_store(pg_dsn, schema=schema, migrate="apply") as first:
        queue = first.queue("kept")
        job_id = await queue.enqueue(b"x")
        await queue.enqueue(b"y")
        handle = await queue.claim_one("w")
        assert handle is not None
        assert handle.id == job_id
        assert await handle.ack()
        async with open_store(pg_dsn, schema=schema) as beside:
            assert await beside.queue("kept").cancel(job_id + 1)
            (seen,) = (await first.stats()).queues
            assert (seen.acked_total, seen.cancelled_total) == (1, 1)
    async with open_store(pg_dsn, schema=schema) as later:
        (entry,) = (await later.stats()).queues
    assert (entry.queue, entry.live, entry.acked_total, entry.cancelled_total) == ("kept", 0, 1, 1)


async def test_d27_counter_updates_stay_heap_only_with_every_shard_of_the_queue_present(
    pg_dsn, schema
):
    # The hot path's counter update must not touch an index (a HOT update): the
    # counter's columns are unindexed and the table's low fillfactor leaves room on
    # each page. With all 64 shard rows of the queue present, a page of the default
    # fillfactor would fill up after about 70 updates that cannot be pruned yet, and
    # the next update would move the row to another page, with a new index entry; here
    # 100 acks in one transaction (their old versions stay until it ends) are all HOT.
    acks = 100
    async with open_store(pg_dsn, schema=schema, migrate="apply") as store:
        await store.queue("hot").enqueue_many([b"%d" % i for i in range(acks)])
    queries = _sql.queries(schema)
    table = sql.Identifier(schema, "queue_counters")
    conn = await _driver.connect(pg_dsn, connect_timeout_s=5, application_name="alk-hot")
    try:
        ((pid,),) = await conn.execute("SELECT pg_catalog.pg_backend_pid()")
        others = [shard for shard in range(SHARDS) if shard != pid % SHARDS]
        await conn.execute(
            sql.SQL("INSERT INTO {} (queue, shard) SELECT 'hot', s FROM unnest(%s::int[]) AS s")
            .format(table)
            .as_string(),
            [others],
        )
        async with conn.transaction():
            claimed = await conn.execute(
                queries["claim"], {"queue": "hot", "worker_id": "w", "n": acks, "token_base": 7}
            )
            assert len(claimed) == acks
            for row in claimed:
                params = {"queue": "hot", "id": row[0], "token": row[19]}  # claim_token
                assert await conn.execute(queries["ack"], params) == [(row[0],)]
            ((updated, hot),) = await conn.execute(
                "SELECT pg_catalog.pg_stat_get_xact_tuples_updated(%(t)s::regclass), "
                "pg_catalog.pg_stat_get_xact_tuples_hot_updated(%(t)s::regclass)",
                {"t": f'"{schema}".queue_counters'},
            )
    finally:
        await conn.aclose()
    assert (updated, hot) == (acks - 1, acks - 1)  # the first ack inserted the row
    rows = await counter_rows(pg_dsn, schema)
    assert len(rows) == SHARDS
    assert sum(row[2] for row in rows) == acks
