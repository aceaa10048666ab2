"""``just bench``: Q20's producers beside the store's own enqueue, per job.

Marked ``bench`` (the default run skips it); needs PostgreSQL. Each case enqueues
``JOBS`` ready jobs one call at a time into a fresh queue, ``ROUNDS`` times, and reports
the median microseconds per job (wall clock, client and server together, on one
connection):

- ``store Queue.enqueue``: the trio store (native driver, pooled autocommit connection);
- ``store tx.enqueue + commit``: a store transaction per job (BEGIN, enqueue, COMMIT);
- ``producer.enqueue (autocommit)``: a sync psycopg connection in autocommit mode, so the
  enqueue is its own transaction, as ``Queue.enqueue``;
- ``producer.enqueue + commit``: a transaction per job on a sync connection (what a web
  request that only enqueues costs; the caller's other statements come on top);
- ``producer.aenqueue (autocommit)``: the same as the first producer case on asyncio;
- ``SQL enqueue() (autocommit)``: the schema's function, called with bound parameters;
- ``... , 1 transaction``: the store's ``tx.enqueue`` and the producer's ``enqueue``, all
  ``JOBS`` calls in one transaction: the cost of the enqueue statement alone.

Every session runs with ``synchronous_commit=off``: a commit then does not wait for the
disk, whose flush time (milliseconds on a shared machine) would otherwise be most of
every case and hide the client's and the statement's cost. The numbers depend on the
machine; the test asserts only that every case ran.
"""

from __future__ import annotations

import asyncio
import secrets
import statistics
import time
from collections.abc import Iterator

import psycopg
import pytest
import trio
from psycopg import sql as pgsql
from psycopg.conninfo import make_conninfo

import alkstore_trio
from alkstore_trio import postgres
from alkstore_trio.postgres import Producer

JOBS = 1000
ROUNDS = 3


@pytest.fixture
def schema(pg_dsn) -> Iterator[str]:
    name = "alk_bench_producer_" + secrets.token_hex(4)
    try:
        yield name
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                pgsql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(pgsql.Identifier(name))
            )


def _timed(run) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) / JOBS * 1e6


def _sync_cases(dsn: str, schema: str) -> dict[str, list[float]]:
    producer = Producer(schema)
    call = pgsql.SQL("SELECT * FROM {}.enqueue(%s, %s)").format(pgsql.Identifier(schema))
    results: dict[str, list[float]] = {}
    with psycopg.connect(dsn, autocommit=True) as auto, psycopg.connect(dsn) as conn:
        producer.enqueue(auto, "warm", b"x")  # the schema check, once per connection
        producer.enqueue(conn, "warm", b"x")
        conn.commit()

        def autocommit() -> None:
            for _ in range(JOBS):
                producer.enqueue(auto, "p-auto", b"payload")

        def per_transaction() -> None:
            for _ in range(JOBS):
                producer.enqueue(conn, "p-tx", b"payload")
                conn.commit()

        def one_transaction() -> None:
            for _ in range(JOBS):
                producer.enqueue(conn, "p-one-tx", b"payload")
            conn.commit()

        def function() -> None:
            for _ in range(JOBS):
                auto.execute(call, ["sql", b"payload"])

        for name, run in (
            ("producer.enqueue (autocommit)", autocommit),
            ("producer.enqueue + commit", per_transaction),
            ("SQL enqueue() (autocommit)", function),
            ("producer.enqueue, 1 transaction", one_transaction),
        ):
            results[name] = [_timed(run) for _ in range(ROUNDS)]
    return results


async def _asyncio_case(dsn: str, schema: str) -> list[float]:
    producer = Producer(schema)
    out = []
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await producer.aenqueue(conn, "warm", b"x")
        for _ in range(ROUNDS):
            started = time.perf_counter()
            for _ in range(JOBS):
                await producer.aenqueue(conn, "p-async", b"payload")
            out.append((time.perf_counter() - started) / JOBS * 1e6)
    return out


async def _store_cases(dsn: str, schema: str) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {
        "store Queue.enqueue": [],
        "store tx.enqueue + commit": [],
        "store tx.enqueue, 1 transaction": [],
    }
    async with alkstore_trio.open_store(dsn, schema=schema, pool_size=1) as store:
        queue = store.queue("s-plain")
        await queue.enqueue(b"x")
        for _ in range(ROUNDS):
            started = time.perf_counter()
            for _ in range(JOBS):
                await queue.enqueue(b"payload")
            results["store Queue.enqueue"].append((time.perf_counter() - started) / JOBS * 1e6)
            started = time.perf_counter()
            for _ in range(JOBS):
                async with store.transaction() as tx:
                    await tx.enqueue("s-tx", b"payload")
            results["store tx.enqueue + commit"].append(
                (time.perf_counter() - started) / JOBS * 1e6
            )
            started = time.perf_counter()
            async with store.transaction() as tx:
                for _ in range(JOBS):
                    await tx.enqueue("s-one-tx", b"payload")
            results["store tx.enqueue, 1 transaction"].append(
                (time.perf_counter() - started) / JOBS * 1e6
            )
    return results


@pytest.mark.bench
def test_bench_producer_enqueue_against_the_store(pg_dsn, schema):
    trio.run(lambda: postgres.migrate(pg_dsn, schema=schema))
    dsn = make_conninfo(pg_dsn, options="-c synchronous_commit=off")
    results = trio.run(_store_cases, dsn, schema)
    results.update(_sync_cases(dsn, schema))
    results["producer.aenqueue (autocommit)"] = asyncio.run(_asyncio_case(dsn, schema))
    base = statistics.median(results["store Queue.enqueue"])
    print(f"\nenqueue of one ready job per call, {JOBS} jobs x {ROUNDS} rounds (median),")
    print("synchronous_commit=off")
    print(f"{'case':34} {'us/job':>8} {'vs store':>9}")
    for name, values in results.items():
        median = statistics.median(values)
        print(f"{name:34} {median:8.1f} {median / base:8.2f}x")
        assert all(value > 0 for value in values)
    with psycopg.connect(pg_dsn) as conn:
        ((count,),) = conn.execute(
            pgsql.SQL("SELECT count(*) FROM {}.jobs").format(pgsql.Identifier(schema))
        ).fetchall()
    assert count == 8 * JOBS * ROUNDS + 4  # every case enqueued every job (and the warm-ups)
