"""The PostgreSQL engine under concurrency, on a real server (Q3, Q4, Q6).

Exactly-once handout is the property: a given (job id, attempts) pair goes to exactly
one claimer, whether the claimers are trio tasks sharing a pool, stores with their own
pools, or OS processes. Each test works in its own schema (dropped afterwards), so
tests never see each other's rows. Time is moved with the frozen-clock harness, never
waited for.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path

import pytest
import trio
from psycopg import sql

from alkstore_trio import QueueOpts, open_store
from alkstore_trio.testing._postgres import PostgresHarness

DRAIN_WORKER = Path(__file__).with_name("_drain_worker.py")
APP = "alkstore-trio-tests:concurrency"


def open_pg(dsn, schema, *, pool_size=4):
    return open_store(
        dsn, schema=schema, migrate="apply", pool_size=pool_size, application_name=APP
    )


async def count_rows(store, schema, table, queue=None):
    query = sql.SQL("SELECT count(*) FROM {}.{}").format(
        sql.Identifier(schema), sql.Identifier(table)
    )
    params = []
    if queue is not None:
        query += sql.SQL(" WHERE queue = %s")
        params.append(queue)
    async with store.transaction() as tx:
        ((count,),) = await tx.fetch(query.as_string(), params)
    return int(count)


async def count_pending(store, schema, queue):
    async with store.transaction() as tx:
        ((count,),) = await tx.fetch(
            sql.SQL("SELECT count(*) FROM {}.jobs WHERE queue = %s AND state = 'pending'")
            .format(sql.Identifier(schema))
            .as_string(),
            [queue],
        )
    return int(count)


async def test_q3_two_stores_racing_for_one_row_exactly_one_wins(pg_dsn, schema):
    wins = Counter()
    async with open_pg(pg_dsn, schema) as store_a, open_pg(pg_dsn, schema) as store_b:
        queues = {"A": store_a.queue("race"), "B": store_b.queue("race")}
        for _ in range(50):
            job_id = await queues["A"].enqueue(b"one")
            results = {}

            async def claim(worker, results=results):
                results[worker] = await queues[worker].claim_one(worker)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(claim, "A")
                nursery.start_soon(claim, "B")
            winners = {w: h for w, h in results.items() if h is not None}
            assert len(winners) == 1, results
            ((worker, handle),) = winners.items()
            assert (handle.id, handle.job.attempts, handle.job.claimed_by) == (job_id, 1, worker)
            wins[worker] += 1
            assert await handle.ack()
        assert await count_rows(store_a, schema, "jobs") == 0
    print(f"\nrace winners over 50 rounds: {dict(wins)}")


async def test_q3_six_stores_forty_tasks_each_drain_without_double_or_lost_handouts(pg_dsn, schema):
    total, n_stores, n_tasks = 2400, 6, 40
    handouts: list[tuple[int, int]] = []
    acked: list[int] = []
    refused: list[tuple[int, int]] = []
    async with AsyncExitStack() as stack:
        stores = [
            await stack.enter_async_context(open_pg(pg_dsn, schema, pool_size=4))
            for _ in range(n_stores)
        ]
        ids = await stores[0].queue("drain").enqueue_many([str(i).encode() for i in range(total)])
        assert len(set(ids)) == total

        async def worker(store, worker_id, rng):
            queue = store.queue("drain")
            while True:
                if rng.random() < 0.5:
                    handle = await queue.claim_one(worker_id)
                    handles = [] if handle is None else [handle]
                else:
                    n = rng.randint(1, 10)
                    handles = await queue.claim_batch(worker_id, n)
                    assert len(handles) <= n
                if not handles:
                    if await count_pending(store, schema, "drain") == 0:
                        return
                    continue
                for handle in handles:
                    assert handle.job.claimed_by == worker_id
                    handouts.append((handle.id, handle.job.attempts))
                    if await handle.ack():
                        acked.append(handle.id)
                    else:
                        refused.append((handle.id, handle.job.attempts))

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for s, store in enumerate(stores):
                    for t in range(n_tasks):
                        nursery.start_soon(worker, store, f"s{s}-t{t}", random.Random(s * 100 + t))

        duplicates = [pair for pair, k in Counter(handouts).items() if k > 1]
        assert duplicates == []
        assert refused == []
        assert sorted(acked) == sorted(ids)  # every job acked exactly once
        assert {attempts for _, attempts in handouts} == {1}
        assert await count_rows(stores[0], schema, "jobs") == 0
        assert await count_rows(stores[0], schema, "dead_jobs") == 0


async def _read_line(stream, buffer: bytearray) -> bytes:
    while b"\n" not in buffer:
        chunk = await stream.receive_some(1 << 16)
        if not chunk:
            raise EOFError(f"worker output ended early: {bytes(buffer)[-500:]!r}")
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line


@pytest.mark.xdist_group("heavy")  # a fleet of processes: one at a time
async def test_q3_four_processes_drain_twenty_thousand_jobs_exactly_once(pg_dsn, schema):
    total, n_procs, tasks, batch = 20_000, 4, 2, 100
    async with open_pg(pg_dsn, schema, pool_size=2) as store:
        queue = store.queue("bulk")
        t0 = trio.current_time()
        ids = await queue.enqueue_many([i.to_bytes(4, "big") for i in range(total)])
        enqueue_s = trio.current_time() - t0
        assert len(set(ids)) == total

        args = [str(tasks), str(batch)]
        procs = []
        buffers = []
        reports = []
        try:
            for _ in range(n_procs):
                procs.append(
                    await trio.lowlevel.open_process(
                        [sys.executable, str(DRAIN_WORKER), pg_dsn, schema, "bulk", *args],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        cwd=Path(__file__).parents[2],
                        env={**os.environ, "PYTHONUNBUFFERED": "1"},
                    )
                )
                buffers.append(bytearray())
            with trio.fail_after(60):
                for proc, buffer in zip(procs, buffers, strict=True):
                    assert await _read_line(proc.stdout, buffer) == b"ready"
                started = trio.current_time()
                for proc in procs:
                    await proc.stdin.send_all(b"go\n")

                async def collect(proc, buffer):
                    reports.append(json.loads(await _read_line(proc.stdout, buffer)))
                    assert await proc.wait() == 0

                async with trio.open_nursery() as nursery:
                    for proc, buffer in zip(procs, buffers, strict=True):
                        nursery.start_soon(collect, proc, buffer)
                wall_s = trio.current_time() - started
        finally:
            for proc in procs:
                if proc.returncode is None:
                    proc.kill()
                with trio.CancelScope(shield=True):
                    await proc.wait()

        handled = [tuple(pair) for report in reports for pair in report["handled"]]
        per_id = Counter(job_id for job_id, _ in handled)
        assert [job_id for job_id, k in per_id.items() if k > 1] == []  # no double handout
        assert set(per_id) == set(ids)  # none lost
        assert {attempts for _, attempts in handled} == {1}
        assert sum(report["acked"] for report in reports) == total
        assert max(report["max_batch"] for report in reports) <= batch
        assert await count_rows(store, schema, "jobs") == 0
        assert await count_rows(store, schema, "dead_jobs") == 0
    shares = [len(report["handled"]) for report in reports]
    print(
        f"\n{n_procs} processes x {tasks} tasks, batch {batch}: {total} jobs drained in "
        f"{wall_s:.2f} s wall ({total / wall_s:,.0f} jobs/s); enqueue_many took "
        f"{enqueue_s:.2f} s; per-process shares {shares}; per-process drain "
        f"{[round(r['drain_s'], 2) for r in reports]} s"
    )


async def test_q3_claim_batch_never_returns_more_than_n_under_concurrency(pg_dsn, schema):
    # A visibility timeout of one microsecond makes every claim lapse at once (the
    # database clock moves on between statements), so concurrent claimers constantly
    # mix ready rows and reclaims: both candidate walks of the claim feed the LIMIT.
    opts = QueueOpts(visibility_timeout_s=1e-6, max_attempts=1_000_000)
    handouts: list[tuple[int, int]] = []
    oversized: list[tuple[int, int]] = []
    async with AsyncExitStack() as stack:
        stores = [
            await stack.enter_async_context(open_pg(pg_dsn, schema, pool_size=3)) for _ in range(3)
        ]
        ids = await stores[0].queue("bounded", opts).enqueue_many([b"x"] * 150)

        async def claimer(store, worker_id, rng):
            queue = store.queue("bounded", opts)
            for _ in range(15):
                n = rng.randint(1, 40)
                handles = await queue.claim_batch(worker_id, n)
                if len(handles) > n:
                    oversized.append((n, len(handles)))
                handouts.extend((h.id, h.job.attempts) for h in handles)

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for s, store in enumerate(stores):
                    for t in range(8):
                        nursery.start_soon(claimer, store, f"s{s}-t{t}", random.Random(s * 10 + t))

    assert oversized == []
    assert [pair for pair, k in Counter(handouts).items() if k > 1] == []
    # Every claim consumed exactly one attempt and was handed to someone: for each job
    # the handed-out attempts are exactly 1..k, no gap and no repeat.
    by_id: dict[int, list[int]] = {}
    for job_id, attempts in handouts:
        by_id.setdefault(job_id, []).append(attempts)
    for job_id, seen in by_id.items():
        assert sorted(seen) == list(range(1, len(seen) + 1)), (job_id, sorted(seen))
    assert set(by_id) <= set(ids)
    assert any(len(seen) > 1 for seen in by_id.values())  # reclaims did happen


async def test_q3_claim_order_priority_desc_run_at_then_id_for_a_single_claimer(pg_dsn):
    harness = PostgresHarness(pg_dsn)
    async with harness.open_store() as store:
        queue = store.queue("order")
        now = await harness.now()
        rng = random.Random(7)
        expected = []
        for _ in range(30):
            priority = rng.choice([-5, 0, 0, 3, 10])
            run_at = now - timedelta(seconds=rng.choice([0, 1, 1, 50]))
            job_id = await queue.enqueue(b"o", priority=priority, run_at=run_at)
            expected.append((-priority, run_at, job_id))
        # Not yet ready, whatever its priority.
        await queue.enqueue(b"later", priority=1000, run_at=now + timedelta(seconds=1000))

        # Two rows become lapsed claims: reclaims compete in the same order.
        taken = await queue.claim_batch("early", 2)
        await harness.advance(301)
        expected.sort()
        order = [job_id for _, _, job_id in expected]

        batch = await queue.claim_batch("solo", 5)
        assert [h.id for h in batch] == order[:5]
        claimed = [h.id for h in batch]
        while (handle := await queue.claim_one("solo")) is not None:
            claimed.append(handle.id)
        assert claimed == order
        assert {h.id for h in taken} <= set(claimed)
        reclaimed = {h.id: h for h in batch}
        for handle in taken:
            if handle.id in reclaimed:
                assert reclaimed[handle.id].job.attempts == 2
        assert await queue.claim_one("solo") is None  # only the future row is left


async def test_q4_reclaim_race_refuses_the_old_holder_and_accepts_the_new(pg_dsn):
    harness = PostgresHarness(pg_dsn)
    async with harness.open_store() as store:
        queue = store.queue("lease", QueueOpts(visibility_timeout_s=10, max_attempts=5))
        for round_ in range(10):
            job_id = await queue.enqueue(b"work")
            a = await queue.claim_one("A")
            assert (a.id, a.job.attempts) == (job_id, 1)
            await harness.advance(11)  # A's lease lapsed; A is still working

            outcome = {}

            async def a_acks(a=a, outcome=outcome):
                outcome["a_ack"] = await a.ack()

            async def b_claims(outcome=outcome):
                outcome["b"] = await queue.claim_one("B")

            async with trio.open_nursery() as nursery:
                # Alternate who starts first; the database decides the order anyway.
                first, second = (a_acks, b_claims) if round_ % 2 else (b_claims, a_acks)
                nursery.start_soon(first)
                nursery.start_soon(second)

            b = outcome["b"]
            assert outcome["a_ack"] is False
            assert b is not None
            assert (b.id, b.job.attempts, b.job.claimed_by) == (job_id, 2, "B")
            row = await queue.get_job(job_id)
            assert (row.state, row.attempts, row.claimed_by) == ("processing", 2, "B")
            assert await b.ack() is True
            assert await queue.get_job(job_id) is None


async def test_q4_lease_boundary_race_exactly_one_of_ack_or_reclaim(pg_dsn):
    harness = PostgresHarness(pg_dsn)
    async with harness.open_store() as store:
        queue = store.queue("edge", QueueOpts(visibility_timeout_s=10, max_attempts=5))
        job_id = await queue.enqueue(b"edge")
        a = await queue.claim_one("A")
        await harness.advance(10)  # now == claim_expires_at: still A's, not reclaimable
        outcome = {}

        async def a_heartbeats_then_acks():
            outcome["a_hb"] = await a.heartbeat(5)
            outcome["a_ack"] = await a.ack()

        async def b_claims():
            outcome["b"] = await queue.claim_one("B")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(b_claims)
            nursery.start_soon(a_heartbeats_then_acks)
        assert outcome == {"a_hb": True, "a_ack": True, "b": None}
        assert await queue.get_job(job_id) is None

        # A chain of lapses: each new holder refuses every older one; attempts count up,
        # and the pre-claim sweep buries the job once its budget is spent.
        job_id = await queue.enqueue(b"chain")
        holders = []
        for attempt in range(1, 6):
            handle = await queue.claim_one(f"w{attempt}")
            assert (handle.id, handle.job.attempts) == (job_id, attempt)
            for old in holders:
                assert await old.heartbeat() is False
            holders.append(handle)
            await harness.advance(11)
        for old in holders:
            assert await old.ack() is False
        assert await queue.claim_one("late") is None
        dead = await queue.get_job(job_id)
        assert (dead.state, dead.attempts, dead.last_error) == ("dead", 5, "max attempts exceeded")


@pytest.mark.parametrize("n", [2**31 - 1, 2**31, 10**12, 2**63 - 1, 2**63, 10**30])
async def test_q3_claim_batch_with_a_huge_n_claims_what_is_there(pg_dsn, schema, n):
    # Q3: n is any int; "up to n" rows. The in-memory engine claims the 3 rows for any
    # of these n; PostgreSQL must agree (LIMIT takes a bigint).
    async with open_pg(pg_dsn, schema) as store:
        queue = store.queue("huge")
        ids = await queue.enqueue_many([b"a", b"b", b"c"])
        handles = await queue.claim_batch("w", n)
        assert [h.id for h in handles] == ids
