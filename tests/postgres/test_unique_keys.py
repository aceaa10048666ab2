"""Q15 on a real PostgreSQL server: unique keys under real concurrency (processes and
stores with their own pools), and the schema that keeps them off the claim path.

The conformance suite checks the rules on both drivers; these tests add what needs
processes or a second pool: an enqueue waiting on another store's uncommitted
transaction, and many processes enqueueing one key at the same instant.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from psycopg import sql

from alkstore_trio import EngineError, open_store

UNIQUE_WORKER = Path(__file__).with_name("_unique_worker.py")
APP = "alkstore-trio-tests:unique"


def open_pg(dsn, schema, *, pool_size=4):
    return open_store(
        dsn, schema=schema, migrate="apply", pool_size=pool_size, application_name=APP
    )


async def _fetch(store, query, params=()):
    async with store.transaction() as tx:
        return await tx.fetch(query, list(params))


async def _read_line(stream, buffer: bytearray) -> bytes:
    while b"\n" not in buffer:
        chunk = await stream.receive_some(1 << 16)
        if not chunk:
            raise EOFError(f"worker output ended early: {bytes(buffer)[-500:]!r}")
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line


async def _run_enqueuers(pg_dsn, schema, queue, key, n_procs, tasks):
    """Start ``n_procs`` enqueuer processes, release them at once, collect their results."""
    procs, buffers, results = [], [], []
    try:
        for _ in range(n_procs):
            procs.append(
                await trio.lowlevel.open_process(
                    [sys.executable, str(UNIQUE_WORKER), pg_dsn, schema, queue, key, str(tasks)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    cwd=Path(__file__).parents[2],
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                )
            )
            buffers.append(bytearray())
        with trio.fail_after(120):
            for proc, buffer in zip(procs, buffers, strict=True):
                assert await _read_line(proc.stdout, buffer) == b"ready"
            for proc in procs:
                await proc.stdin.send_all(b"go\n")

            async def collect(proc, buffer):
                results.extend(json.loads(await _read_line(proc.stdout, buffer))["results"])
                assert await proc.wait() == 0

            async with trio.open_nursery() as nursery:
                for proc, buffer in zip(procs, buffers, strict=True):
                    nursery.start_soon(collect, proc, buffer)
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()
    return results


@pytest.mark.xdist_group("heavy")  # a fleet of processes: one at a time
async def test_q15_eight_processes_of_fifty_tasks_enqueue_one_key_and_one_job_exists(
    pg_dsn, schema
):
    n_procs, tasks = 8, 50
    async with open_pg(pg_dsn, schema) as store:
        results = await _run_enqueuers(pg_dsn, schema, "race", "the-key", n_procs, tasks)
        assert len(results) == n_procs * tasks
        ids = {job_id for job_id, _ in results}
        assert len(ids) == 1, f"the enqueuers got {len(ids)} different ids"
        assert sum(created for _, created in results) == 1, "not exactly one created=True"
        rows = await _fetch(
            store,
            sql.SQL("SELECT id, unique_key FROM {}.jobs")
            .format(sql.Identifier(schema))
            .as_string(),
        )
        assert rows == [(next(iter(ids)), "the-key")], rows
        ((issued,),) = await _fetch(
            store,
            sql.SQL("SELECT count(*) FROM {}.dead_jobs").format(sql.Identifier(schema)).as_string(),
        )
        assert issued == 0


async def test_q15_an_enqueue_waits_for_another_stores_uncommitted_job_and_returns_it(
    pg_dsn, schema
):
    """The case ON CONFLICT alone gets wrong: the conflicting row belongs to a
    transaction that was not committed when the waiting statement took its snapshot."""
    async with open_pg(pg_dsn, schema) as store_a, open_pg(pg_dsn, schema) as store_b:
        queue_b = store_b.queue("tx-race")
        found = []

        async def outside():
            found.append(await queue_b.enqueue(b"b", unique_key="k"))

        async with trio.open_nursery() as nursery, store_a.transaction() as tx:
            mine = await tx.enqueue("tx-race", b"a", unique_key="k")
            nursery.start_soon(outside)
            # The other store's statement waits on the key's lock inside the server: ask
            # the server until it says so (no event crosses the process boundary).
            with trio.fail_after(30):
                while not await _waiting_on_an_advisory_lock(store_a):  # noqa: ASYNC110
                    await trio.sleep(0.01)
            assert found == []
        (result,) = found
        assert (int(result), result.created) == (int(mine), False)


async def _waiting_on_an_advisory_lock(store) -> bool:
    rows = await _fetch(
        store,
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
    )
    return rows[0][0] > 0


async def test_q15_the_claim_never_reads_the_unique_index(pg_dsn, schema):
    async with open_pg(pg_dsn, schema) as store:
        queue = store.queue("plan")
        await queue.enqueue_many([b"x"] * 100, unique_keys=[f"k{i}" for i in range(100)])
        await queue.enqueue_many([b"y"] * 100)
        async with store.transaction() as tx:
            await tx.execute(f'SET LOCAL search_path = "{schema}"')
            plan = await tx.fetch(
                "EXPLAIN SELECT id FROM jobs WHERE queue = 'plan' AND state = 'pending' "
                "AND run_at <= now() ORDER BY priority DESC, run_at, id LIMIT 10 "
                "FOR UPDATE SKIP LOCKED"
            )
        text = "\n".join(row[0] for row in plan)
        assert "jobs_unique_key_idx" not in text, text
        indexes = await _fetch(
            store,
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
            [schema, "jobs_unique_key_idx"],
        )
        assert indexes, "no unique index"
        assert "UNIQUE" in indexes[0][0]
        assert "WHERE (unique_key IS NOT NULL)" in indexes[0][0], indexes


@pytest.mark.parametrize("level", ["REPEATABLE READ", "SERIALIZABLE"])
async def test_q15_6_a_keyed_tx_enqueue_above_read_committed_fails_when_the_key_was_taken(
    pg_dsn, schema, level
):
    # The caller's snapshot predates the other job's commit: the keyed enqueue cannot
    # return that job, so it fails (a serialization failure) and creates nothing.
    async with open_pg(pg_dsn, schema) as store:
        queue = store.queue("emails")
        taken: list[int] = []

        async def enqueue_after_another_took_the_key() -> None:
            async with store.transaction() as tx:
                await tx.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
                await tx.fetch("SELECT 1")  # takes the transaction's snapshot
                taken.append(await queue.enqueue(b"other", unique_key="k"))
                await tx.enqueue(queue, b"mine", unique_key="k")

        with pytest.raises(EngineError, match="serialize"):
            await enqueue_after_another_took_the_key()
        jobs = await _fetch(store, f'SELECT id FROM "{schema}".jobs')
        assert jobs == [(taken[0],)]
        # Without a concurrent holder the same transaction works at that level.
        async with store.transaction() as tx:
            await tx.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
            mine = await tx.enqueue(queue, b"mine", unique_key="k2")
        assert mine.created


async def test_q15_6_above_read_committed_a_window_opened_after_the_snapshot_is_not_seen(
    pg_dsn, schema
):
    # Documented (Q15.6), not wished for: the snapshot cannot see the window another
    # transaction opened after it, and nothing conflicts, so the job is created. (In
    # READ COMMITTED the window refuses the key.)
    async with open_pg(pg_dsn, schema) as store:
        queue = store.queue("emails")
        async with store.transaction() as tx:
            await tx.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            await tx.fetch("SELECT 1")
            other = await queue.enqueue(b"other", unique_key="w", unique_for_s=60)
            assert await queue.cancel(other)  # the key is free, its window open
            mine = await tx.enqueue(queue, b"mine", unique_key="w")
        assert mine.created
        again = await queue.enqueue(b"again", unique_key="w")
        assert not again.created
