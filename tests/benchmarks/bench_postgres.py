"""The PostgreSQL engine beside raw psycopg, in one process, in one run (``just bench``).

Every library case is measured next to raw baselines: the same work done with psycopg's
plain *sync* connection and hand-written SQL, in the same process, and reported as a
ratio. The baselines, as the issue names them:

- ``enqueue (single)``: one ``queue.enqueue`` per job. Baseline: one autocommit
  ``INSERT … RETURNING id`` + ``pg_notify`` statement per job.
- ``enqueue x8 tasks``: the same from 8 trio tasks (pool of 8). Baseline: 8 threads, one
  sync connection each.
- ``enqueue_many(1000)``: 1,000 jobs per call. Baseline: one multi-row
  ``INSERT … VALUES (…), … RETURNING id`` (+ ``pg_notify``) of 1,000 rows. ``COPY`` of
  1,000 rows is a reference row (it returns no ids and sends no wake).
- ``drain, batch n``: a burn-down of a prefilled queue with ``claim_batch(n)`` +
  ``ack_batch`` until it is empty. Baseline: ``SELECT … FOR UPDATE SKIP LOCKED LIMIT n``
  + ``DELETE … WHERE id = ANY(…)`` + ``COMMIT``, one transaction per batch. Reference
  row: the library's semantics in plain SQL (an ``UPDATE`` claim that commits a lease,
  then a ``DELETE``: two autocommit statements per batch). A second library row drains
  with ``ack_handles_and_claim`` (D21), the worker's loop: one statement per batch that
  acks the previous batch and claims the next.
- ``wake latency``: from an enqueue returning on one connection to ``claim_batch``
  returning in a task that was blocked in ``listener.wait()`` (the store's LISTEN
  connection is a third one). The producer is the same for every variant: a separate
  process with a sync connection running ``INSERT … RETURNING id`` + ``pg_notify`` on
  the queue's channel, one job every 2–5 ms. Baseline: a thread blocked in ``select()`` on a
  sync LISTEN connection that claims (``UPDATE`` lease) on a second sync connection.

Every throughput case also has a ``raw, library SQL`` row: the library's own statements
(``sql/queries.sql``) run by sync psycopg. It separates the cost of the SQL from the cost
of the client (driver, pool, store facade): the ``× same SQL`` column. Library rows run
with the native trio driver and with the thread fallback driver.

How it is measured. The machine is small and shared, and commit latency (an fsync) swings
from run to run, so the variants of a case run *interleaved in chunks* inside one
session: each variant has its own fresh schema and connections, set up and warmed up
(statements prepared) before the clock starts; then chunk after chunk (e.g. 100 single
enqueues, or 1,000 drained jobs) every variant does the same amount of work, in an order
rotated from chunk to chunk. A ratio is the median of the per-chunk ratios (variant
chunk rate / baseline chunk rate of the same chunk index), so both sides of each ratio
saw the same minute of the machine. Rates are medians of the chunk rates; the spread
column is their interquartile range. A case runs ``rounds`` sessions (fresh schemas each
time) and pools their chunks. CPU per job is this process's CPU time
(``time.process_time``, all threads) over the timed chunks, divided by their jobs; the
server's CPU is not included. Schemas are dropped at the end of each session.

Run it as ``python tests/benchmarks/bench_postgres.py [--quick] [--rounds R]
[--only SUBSTRING] [--drivers native,thread] [--async-commit]`` or through pytest
(``pytest tests/benchmarks -m bench -s``; quick unless ``ALKSTORE_BENCH_FULL=1``). The
server comes from ``ALKSTORE_BENCH_DSN``, else ``ALKSTORE_TEST_DSN``, else
``postgresql://postgres@127.0.0.1:5432/test``. ``--async-commit`` sets
``synchronous_commit=off`` on every connection of the run (library and raw alike), which
takes the WAL flush out of every commit and shows the CPU-bound ratios. Results for the
project's machine are in ``docs/explanation/performance.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import secrets
import select
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import psycopg
import psycopg.conninfo
import trio

import alkstore_trio
from alkstore_trio._engines._postgres import _driver, _sql
from alkstore_trio.engine import PostgresEngine

#: The server, unless ``ALKSTORE_BENCH_DSN`` / ``ALKSTORE_TEST_DSN`` say otherwise.
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
QUEUE = "bench"
WORKER = "bench-worker"


def token_base() -> int:
    """Q19.8: the 62 random bits a claim statement of the library takes."""
    return secrets.randbits(62)


#: A small JSON-like payload (the same bytes in every case).
PAYLOAD = b'{"to": "ada@example.com", "template": "welcome"}'
#: Every claim stays valid for the whole run.
OPTS = alkstore_trio.QueueOpts(visibility_timeout_s=3600)
#: Jobs per ``enqueue_many`` call and per multi-row INSERT / COPY.
MANY = 1000
#: Concurrent producers of the concurrent enqueue case.
TASKS = 8
DRAIN_BATCHES = (1, 10, 100)
DRIVERS = ("native", "thread")
#: Set by ``--async-commit``: every connection of the run gets ``synchronous_commit=off``.
ASYNC_COMMIT = False


def dsn() -> str:
    """The server the benchmark runs against (with ``synchronous_commit=off`` when
    ``--async-commit`` asked for it)."""
    base = (
        os.environ.get("ALKSTORE_BENCH_DSN") or os.environ.get("ALKSTORE_TEST_DSN") or DEFAULT_DSN
    )
    if not ASYNC_COMMIT:
        return base
    params = psycopg.conninfo.conninfo_to_dict(base)
    params["options"] = (str(params.get("options", "")) + " -c synchronous_commit=off").strip()
    return psycopg.conninfo.make_conninfo("", **params)


@dataclass(frozen=True)
class Sizes:
    """How much work each variant does per session, and in which chunks."""

    single: int  # single enqueues (chunks of SINGLE_CHUNK)
    concurrent: int  # concurrent enqueues (chunks of CONCURRENT_CHUNK)
    many: int  # jobs enqueued by enqueue_many (chunks of MANY_CHUNK)
    drain: int  # jobs of each drain (chunks of drain_chunk(batch))
    wakes: int  # measured wakes (chunks of WAKE_CHUNK)
    rounds: int  # sessions per case


FULL = Sizes(single=2000, concurrent=8000, many=20_000, drain=20_000, wakes=300, rounds=3)
QUICK = Sizes(single=300, concurrent=1600, many=4000, drain=2000, wakes=60, rounds=1)
SINGLE_CHUNK = 100
CONCURRENT_CHUNK = 400  # 50 per task
MANY_CHUNK = 2 * MANY
WAKE_CHUNK = 20


def drain_chunk(batch: int, total: int) -> int:
    """Jobs per chunk of a drain: about a second of work at each batch size, and at
    least four chunks per session."""
    jobs = min({1: 250, 10: 1000}.get(batch, 2000), max(batch, total // 4))
    return jobs // batch * batch


# -- results ---------------------------------------------------------------------------


@dataclass
class Chunk:
    jobs: int
    seconds: float
    cpu_s: float

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds


@dataclass
class Variant:
    """One row of the table: a way of doing a case, and its timed chunks."""

    name: str
    kind: str  # "baseline", "reference", "raw-lib-sql" or "library"
    make: Callable[[], Runner]
    chunks: list[Chunk] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)  # wake case only
    #: Whether the ``raw, library SQL`` row runs this variant's statements (the ``×
    #: same SQL`` column is shown only then).
    same_sql: bool = True

    def rate(self) -> float:
        return statistics.median(c.rate for c in self.chunks)

    def rate_iqr(self) -> tuple[float, float]:
        rates = [c.rate for c in self.chunks]
        if len(rates) < 2:
            return rates[0], rates[0]
        q = statistics.quantiles(rates, n=4, method="inclusive")
        return q[0], q[2]

    def cpu_us_per_job(self) -> float:
        return sum(c.cpu_s for c in self.chunks) / sum(c.jobs for c in self.chunks) * 1e6


@dataclass
class Case:
    """One benchmark: its variants and how many chunks of how many jobs they run."""

    name: str
    variants: list[Variant]
    chunk_jobs: int
    total_jobs: int
    latency: bool = False

    def baseline(self) -> Variant:
        return next(v for v in self.variants if v.kind == "baseline")

    def same_sql(self) -> Variant | None:
        return next((v for v in self.variants if v.kind == "raw-lib-sql"), None)

    @staticmethod
    def ratios(variant: Variant, base: Variant) -> list[float]:
        """Per-chunk ratios of the variant's rate to the baseline's (same chunk index)."""
        return [a.rate / b.rate for a, b in zip(variant.chunks, base.chunks, strict=True)]

    def ratio(self, variant: Variant, base: Variant) -> float:
        return statistics.median(self.ratios(variant, base))


# -- runners: one per variant per session ----------------------------------------------


class Runner:
    """A variant inside a session: ``setup`` (untimed: schema, connections, warm-up),
    then ``chunk`` again and again (timed by the caller). Raw runners block the trio
    thread while they work; nothing else runs meanwhile, which is what we want."""

    async def setup(self, stack: AsyncExitStack) -> None:
        raise NotImplementedError

    async def chunk(self, jobs: int) -> Chunk:
        raise NotImplementedError


class Stopwatch:
    """Wall and process CPU time of a block."""

    def __enter__(self) -> Stopwatch:
        self._cpu = time.process_time()
        self._wall = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._wall
        self.cpu_s = time.process_time() - self._cpu

    def chunk(self, jobs: int) -> Chunk:
        return Chunk(jobs, self.seconds, self.cpu_s)


def _admin() -> psycopg.Connection[Any]:
    return psycopg.connect(dsn(), autocommit=True, application_name="alkstore_trio:bench-admin")


@contextlib.contextmanager
def fresh_schema(prefill: int = 0, template: str | None = None) -> Iterator[str]:
    """A new schema at the library's version, or made by ``template`` (the text of
    another commit's ``schema.sql``), optionally with ``prefill`` ready jobs, then
    ANALYZEd; dropped afterwards."""
    schema = "alk_bench_" + secrets.token_hex(5)
    with _admin() as admin:
        made = _sql.schema_sql(schema) if template is None else _sql.render(template, schema)
        admin.execute(made, prepare=False)
        try:
            if prefill:
                copy_rows(admin, schema, prefill, run_at=datetime.now(UTC) - timedelta(seconds=5))
                admin.execute(f"ANALYZE {_sql.quote_ident(schema)}.jobs")
            yield schema
        finally:
            admin.execute(f"DROP SCHEMA {_sql.quote_ident(schema)} CASCADE")


_COLUMNS = (
    "queue, payload, priority, state, attempts, max_attempts, run_at, enqueued_at, "
    "visibility_timeout_s, backoff_base_s"
)


def copy_rows(conn: psycopg.Connection[Any], schema: str, n: int, run_at: datetime) -> None:
    """COPY ``n`` pending jobs into the queue (one transaction in autocommit mode)."""
    row = (QUEUE, PAYLOAD, 0, "pending", 0, 3, run_at, run_at, 3600.0, 5.0)
    with (
        conn.cursor() as cur,
        cur.copy(f"COPY {_sql.quote_ident(schema)}.jobs ({_COLUMNS}) FROM STDIN") as copy,
    ):
        for _ in range(n):
            copy.write_row(row)


class RawSql:
    """The hand-written statements of the baselines, for one schema."""

    def __init__(self, schema: str) -> None:
        s = _sql.quote_ident(schema)
        self.channel = _sql.wake_channel(schema, QUEUE)
        values = "(%s, %s, 0, 'pending', 0, 3, now(), now(), 3600, 5)"
        self.insert_one = (
            f"WITH i AS (INSERT INTO {s}.jobs ({_COLUMNS}) VALUES {values} RETURNING id) "
            "SELECT i.id FROM i, (SELECT pg_notify(%s, '')) AS w"
        )
        self.insert_many = (
            f"WITH i AS (INSERT INTO {s}.jobs ({_COLUMNS}) VALUES "
            + ", ".join([values] * MANY)
            + " RETURNING id) SELECT i.id FROM i, (SELECT pg_notify(%s, '')) AS w ORDER BY i.id"
        )
        self.insert_many_params = [x for _ in range(MANY) for x in (QUEUE, PAYLOAD)]
        self.insert_many_params.append(self.channel)
        columns = (
            "id, queue, payload, priority, state, attempts, max_attempts, run_at, enqueued_at, "
            "visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at, "
            "claim_expires_at, last_error"
        )
        ready = (
            f"FROM {s}.jobs WHERE queue = %s AND state = 'pending' AND run_at <= now() "
            "ORDER BY priority DESC, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED"
        )
        # One transaction per batch: lock, read, delete, commit.
        self.select_locked = f"SELECT {columns} {ready}"
        self.delete = f"DELETE FROM {s}.jobs WHERE id = ANY(%s)"
        # The library's semantics in plain SQL: a claim that commits a lease, then a delete.
        # Q19.8: a claim sets a token (the library's is the client's random bits XOR
        # the id; the server's random() does as well here).
        self.claim_lease = (
            f"UPDATE {s}.jobs AS j SET state = 'processing', attempts = j.attempts + 1, "
            "claim_token = (pg_catalog.random() * 4611686018427387903)::bigint, "
            "claimed_by = %s, claimed_at = now(), "
            "claim_expires_at = now() + j.visibility_timeout_s * interval '1 second' "
            f"FROM (SELECT id {ready}) AS c WHERE j.id = c.id RETURNING "
            + ", ".join(f"j.{c.strip()}" for c in columns.split(","))
        )
        self.delete_claimed = (
            f"DELETE FROM {s}.jobs WHERE id = ANY(%s) AND queue = %s AND state = 'processing'"
        )
        self.lib = _sql.queries(schema)

    def lib_enqueue_one_params(self, payload: bytes) -> dict[str, object]:
        """The library's statement for one payload (``enqueue_one``), as it sends it."""
        params = self.lib_enqueue_params([payload])
        del params["payloads"]
        params["payload"] = payload
        return params

    def lib_enqueue_params(self, payloads: list[bytes]) -> dict[str, object]:
        return {
            "queue": QUEUE,
            "payloads": payloads,
            "priority": 0,
            "delay_s": None,
            "run_at": None,
            "max_attempts": 3,
            "visibility_timeout_s": 3600.0,
            "backoff_base_s": 5.0,
            "expires_in_s": None,
            "headers": "{}",
            "channel": self.channel,
        }


def raw_connect(stack: AsyncExitStack, *, like_library: bool = False) -> psycopg.Connection[Any]:
    """A plain sync autocommit connection (closed with the session). psycopg's default
    prepare threshold (5), or the library's (1) for the ``library SQL`` rows."""
    conn = psycopg.connect(dsn(), autocommit=True, application_name="alkstore_trio:bench-raw")
    if like_library:
        conn.prepare_threshold = _driver.PREPARE_THRESHOLD
    stack.callback(conn.close)
    return conn


async def library_store(
    stack: AsyncExitStack, schema: str, driver: str, pool_size: int = 4
) -> alkstore_trio.Store:
    """A store on ``schema`` with ``driver``'s connections (``open_store`` on a
    :class:`~alkstore_trio.engine.PostgresEngine`)."""
    engine = PostgresEngine(dsn(), schema=schema, pool_size=pool_size, driver=driver)
    return await stack.enter_async_context(alkstore_trio.open_store(engine, rng=random.Random(0)))


#: Untimed operations per variant before the clock starts: psycopg prepares a statement
#: from its 5th execution on (the library from its 2nd), so every timed one is prepared.
WARMUP = 10
WARMUP_MANY = 6


# -- enqueue (single) ------------------------------------------------------------------


class RawEnqueueSingle(Runner):
    def __init__(self, *, lib_sql: bool) -> None:
        self.lib_sql = lib_sql

    async def setup(self, stack: AsyncExitStack) -> None:
        schema = stack.enter_context(fresh_schema())
        self.q = RawSql(schema)
        self.cur = raw_connect(stack, like_library=self.lib_sql).cursor()
        for _ in range(WARMUP):
            self.one()

    def one(self) -> None:
        if self.lib_sql:
            self.cur.execute(self.q.lib["enqueue_one"], self.q.lib_enqueue_one_params(PAYLOAD))
        else:
            self.cur.execute(self.q.insert_one, (QUEUE, PAYLOAD, self.q.channel))
        self.cur.fetchall()

    async def chunk(self, jobs: int) -> Chunk:
        with Stopwatch() as watch:
            for _ in range(jobs):
                self.one()
        return watch.chunk(jobs)


class LibEnqueueSingle(Runner):
    def __init__(self, driver: str) -> None:
        self.driver = driver

    async def setup(self, stack: AsyncExitStack) -> None:
        schema = stack.enter_context(fresh_schema())
        store = await library_store(stack, schema, self.driver)
        self.queue = store.queue(QUEUE, OPTS)
        for _ in range(WARMUP):
            await self.queue.enqueue(PAYLOAD)

    async def chunk(self, jobs: int) -> Chunk:
        queue = self.queue
        with Stopwatch() as watch:
            for _ in range(jobs):
                await queue.enqueue(PAYLOAD)
        return watch.chunk(jobs)


# -- enqueue from concurrent producers -------------------------------------------------


class RawEnqueueConcurrent(Runner):
    def __init__(self, *, lib_sql: bool) -> None:
        self.lib_sql = lib_sql

    async def setup(self, stack: AsyncExitStack) -> None:
        schema = stack.enter_context(fresh_schema())
        self.q = RawSql(schema)
        self.cursors = [
            raw_connect(stack, like_library=self.lib_sql).cursor() for _ in range(TASKS)
        ]
        self.pool = stack.enter_context(ThreadPoolExecutor(TASKS))
        list(self.pool.map(self.produce, self.cursors, [WARMUP] * TASKS))

    def produce(self, cur: psycopg.Cursor[Any], n: int) -> None:
        for _ in range(n):
            if self.lib_sql:
                cur.execute(self.q.lib["enqueue_one"], self.q.lib_enqueue_one_params(PAYLOAD))
            else:
                cur.execute(self.q.insert_one, (QUEUE, PAYLOAD, self.q.channel))
            cur.fetchall()

    async def chunk(self, jobs: int) -> Chunk:
        per_task = jobs // TASKS
        with Stopwatch() as watch:
            list(self.pool.map(self.produce, self.cursors, [per_task] * TASKS))
        return watch.chunk(per_task * TASKS)


class LibEnqueueConcurrent(Runner):
    def __init__(self, driver: str) -> None:
        self.driver = driver

    async def setup(self, stack: AsyncExitStack) -> None:
        schema = stack.enter_context(fresh_schema())
        store = await library_store(stack, schema, self.driver, pool_size=TASKS)
        self.queue = store.queue(QUEUE, OPTS)
        await self.produce_all(WARMUP)  # opens all TASKS connections

    async def produce_all(self, per_task: int) -> None:
        async def produce() -> None:
            for _ in range(per_task):
                await self.queue.enqueue(PAYLOAD)

        async with trio.open_nursery() as nursery:
            for _ in range(TASKS):
                nursery.start_soon(produce)

    async def chunk(self, jobs: int) -> Chunk:
        per_task = jobs // TASKS
        with Stopwatch() as watch:
            await self.produce_all(per_task)
        return watch.chunk(per_task * TASKS)


# -- enqueue_many ------------------------------------------------------------------------


class RawEnqueueMany(Runner):
    def __init__(self, how: str) -> None:
        self.how = how  # "values", "copy" or "lib-sql"

    async def setup(self, stack: AsyncExitStack) -> None:
        self.schema = stack.enter_context(fresh_schema())
        self.q = RawSql(self.schema)
        self.conn = raw_connect(stack, like_library=self.how == "lib-sql")
        self.cur = self.conn.cursor()
        self.payloads = [PAYLOAD] * MANY
        for _ in range(WARMUP_MANY):
            self.one()

    def one(self) -> None:
        if self.how == "values":
            self.cur.execute(self.q.insert_many, self.q.insert_many_params)
            assert len(self.cur.fetchall()) == MANY
        elif self.how == "lib-sql":
            self.cur.execute(self.q.lib["enqueue_many"], self.q.lib_enqueue_params(self.payloads))
            assert len(self.cur.fetchall()) == MANY
        else:
            copy_rows(self.conn, self.schema, MANY, run_at=datetime.now(UTC))

    async def chunk(self, jobs: int) -> Chunk:
        with Stopwatch() as watch:
            for _ in range(jobs // MANY):
                self.one()
        return watch.chunk(jobs // MANY * MANY)


class LibEnqueueMany(Runner):
    def __init__(self, driver: str) -> None:
        self.driver = driver

    async def setup(self, stack: AsyncExitStack) -> None:
        schema = stack.enter_context(fresh_schema())
        store = await library_store(stack, schema, self.driver)
        self.queue = store.queue(QUEUE, OPTS)
        for _ in range(WARMUP_MANY):
            await self.queue.enqueue_many([PAYLOAD] * MANY)

    async def chunk(self, jobs: int) -> Chunk:
        with Stopwatch() as watch:
            for _ in range(jobs // MANY):
                ids = await self.queue.enqueue_many([PAYLOAD] * MANY)
                assert len(ids) == MANY
        return watch.chunk(jobs // MANY * MANY)


# -- burn-down drain ---------------------------------------------------------------------

#: Batches drained (untimed) before the clock starts, so statements are prepared.
WARMUP_BATCHES = 6


class RawDrain(Runner):
    def __init__(self, total: int, batch: int, how: str) -> None:
        self.total, self.batch, self.how = total, batch, how  # how: "tx", "lease", "lib-sql"

    async def setup(self, stack: AsyncExitStack) -> None:
        schema = stack.enter_context(fresh_schema(prefill=self.total + WARMUP_BATCHES * self.batch))
        self.q = RawSql(schema)
        self.conn = raw_connect(stack, like_library=self.how == "lib-sql")
        if self.how == "tx":
            self.conn.autocommit = False
        self.cur = self.conn.cursor()
        for _ in range(WARMUP_BATCHES):
            self.step()

    def step(self) -> int:
        cur, q, batch = self.cur, self.q, self.batch
        if self.how == "tx":  # BEGIN; SELECT … FOR UPDATE SKIP LOCKED; DELETE; COMMIT
            cur.execute(q.select_locked, (QUEUE, batch))
            rows = cur.fetchall()
            if rows:
                cur.execute(q.delete, ([row[0] for row in rows],))
            self.conn.commit()
            return len(rows)
        if self.how == "lease":  # claim (commits the lease), then delete
            cur.execute(q.claim_lease, (WORKER, QUEUE, batch))
            rows = cur.fetchall()
            if rows:
                cur.execute(q.delete_claimed, ([row[0] for row in rows], QUEUE))
            return len(rows)
        params = {"queue": QUEUE, "worker_id": WORKER, "n": batch, "token_base": token_base()}
        cur.execute(q.lib["claim"], params)
        rows = cur.fetchall()
        if rows:
            done = "alk/bench/done"  # Q19.4: nobody listens; no kept rows, no NOTIFY
            params = {"queue": QUEUE, "ids": [r[0] for r in rows], "done_channel": done}
            cur.execute(q.lib["ack_batch"], params)
            cur.fetchall()
        return len(rows)

    async def chunk(self, jobs: int) -> Chunk:
        done = 0
        with Stopwatch() as watch:
            for _ in range(jobs // self.batch):
                done += self.step()
        if done != jobs:
            raise AssertionError(f"raw drain ({self.how}) did {done} of {jobs} jobs")
        return watch.chunk(done)


class LibDrain(Runner):
    def __init__(self, total: int, batch: int, driver: str) -> None:
        self.total, self.batch, self.driver = total, batch, driver

    async def setup(self, stack: AsyncExitStack) -> None:
        schema = stack.enter_context(fresh_schema(prefill=self.total + WARMUP_BATCHES * self.batch))
        store = await library_store(stack, schema, self.driver)
        self.queue = store.queue(QUEUE, OPTS)
        for _ in range(WARMUP_BATCHES):
            handles = await self.queue.claim_batch(WORKER, self.batch)
            await self.queue.ack_batch([h.id for h in handles])

    async def chunk(self, jobs: int) -> Chunk:
        queue, batch = self.queue, self.batch
        done = 0
        with Stopwatch() as watch:
            for _ in range(jobs // batch):
                handles = await queue.claim_batch(WORKER, batch)
                done += await queue.ack_batch([h.id for h in handles])
        if done != jobs:
            raise AssertionError(f"library drain ({self.driver}) did {done} of {jobs} jobs")
        return watch.chunk(done)


class LibDrainFused(Runner):
    """The drain as a worker's dispatcher runs it (D21): each ``ack_handles_and_claim``
    acks the previous batch and claims the next in one statement, so a batch costs one
    round trip and one commit. Not the issue's ``claim_batch`` + ``ack_batch`` loop: a
    row of its own, with the same baseline."""

    def __init__(self, total: int, batch: int, driver: str) -> None:
        self.total, self.batch, self.driver = total, batch, driver

    async def setup(self, stack: AsyncExitStack) -> None:
        prefill = self.total + (WARMUP_BATCHES + 1) * self.batch
        schema = stack.enter_context(fresh_schema(prefill=prefill))
        store = await library_store(stack, schema, self.driver)
        self.queue = store.queue(QUEUE, OPTS)
        self.held: list[alkstore_trio.JobHandle] = []
        for _ in range(WARMUP_BATCHES):
            _, self.held = await self.queue.ack_handles_and_claim(self.held, WORKER, self.batch)

    async def chunk(self, jobs: int) -> Chunk:
        queue, batch = self.queue, self.batch
        done = 0
        with Stopwatch() as watch:
            for _ in range(jobs // batch):
                acked, self.held = await queue.ack_handles_and_claim(self.held, WORKER, batch)
                done += sum(acked)
        if done != jobs:
            raise AssertionError(f"fused drain ({self.driver}) did {done} of {jobs} jobs")
        return watch.chunk(done)


# -- wake latency ------------------------------------------------------------------------

#: The producer pauses this long (uniform, seconds) before each enqueue, so the consumer
#: is always blocked in its wait when the job arrives.
WAKE_GAP_S = (0.002, 0.005)


#: The producer process of the wake-latency case: on each line ``go`` from stdin it
#: pauses, runs one INSERT + pg_notify, and writes the time it returned.
_PRODUCER = """
import random, sys, time, psycopg
dsn, sql, queue, payload, channel, low, high = sys.argv[1:8]
rng = random.Random(1)
with psycopg.connect(dsn, autocommit=True, application_name="alkstore_trio:bench-producer") as conn:
    cur = conn.cursor()
    for line in sys.stdin:
        time.sleep(rng.uniform(float(low), float(high)))
        cur.execute(sql, (queue, payload.encode(), channel))
        cur.fetchall()
        print(repr(time.perf_counter()), flush=True)
"""


class WakeProbe(Runner):
    """The producer side of a wake-latency variant, the same for every variant.

    The producer is a separate process (so that neither the GIL nor trio's scheduling
    order can delay its clock) with a plain sync connection: it pauses 2–5 ms, runs the
    raw ``INSERT … RETURNING id`` + ``pg_notify`` on the variant's queue channel, and
    reports ``t0``, the moment that returned (``time.perf_counter`` is the system-wide
    monotonic clock). The consumer takes ``t1`` right after its claim returned, before
    it deletes the job and reports back.
    """

    q: RawSql

    def start_probe(self, stack: AsyncExitStack) -> None:
        self.claimed_at: list[float] = []
        self.errors: list[BaseException] = []
        self.latencies_s: list[float] = []
        args = [dsn(), self.q.insert_one, QUEUE, PAYLOAD.decode(), self.q.channel]
        args += [str(bound) for bound in WAKE_GAP_S]
        proc = subprocess.Popen(
            [sys.executable, "-c", _PRODUCER, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        stack.callback(proc.stdout.close)  # type: ignore[union-attr]
        stack.callback(proc.wait, 10)
        stack.callback(proc.stdin.close)  # type: ignore[union-attr]
        self.proc = proc

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def t0(self) -> float:
        assert self.proc.stdout is not None
        return float(self.proc.stdout.readline())


class RawWake(WakeProbe):
    """Consumer: a thread blocked in ``select()`` on a sync LISTEN connection; on a
    notification it claims (the lease ``UPDATE``) on a second sync connection."""

    async def setup(self, stack: AsyncExitStack) -> None:
        schema = stack.enter_context(fresh_schema())
        self.q = RawSql(schema)
        self.start_probe(stack)
        self.claimed = threading.Event()
        self.listen = raw_connect(stack)
        self.claimer = raw_connect(stack)
        self.listen.execute(f'LISTEN "{self.q.channel}"')
        self.stop = threading.Event()
        thread = threading.Thread(target=self.consume, name="bench-raw-consumer")
        thread.start()
        stack.callback(thread.join)
        stack.callback(self.stop.set)
        await self.chunk(WARMUP)

    def consume(self) -> None:
        try:
            fd, pgconn = self.listen.fileno(), self.listen.pgconn
            cur = self.claimer.cursor()
            while not self.stop.is_set():
                readable, _, _ = select.select([fd], [], [], 0.1)
                if not readable:
                    continue
                pgconn.consume_input()
                woken = False
                while pgconn.notifies() is not None:
                    woken = True
                if not woken:
                    continue
                cur.execute(self.q.claim_lease, (WORKER, QUEUE, 10))
                rows = cur.fetchall()
                t1 = time.perf_counter()
                if rows:
                    self.claimed_at.append(t1)
                    cur.execute(self.q.delete_claimed, ([r[0] for r in rows], QUEUE))
                    self.claimed.set()
        except BaseException as exc:  # reported by chunk()
            self.errors.append(exc)
            self.claimed.set()

    async def chunk(self, jobs: int) -> Chunk:
        latencies = []
        for _ in range(jobs):
            self.claimed.clear()
            self.go()
            if not self.claimed.wait(5) or self.errors:
                raise RuntimeError(f"the raw consumer did not claim: {self.errors}")
            latencies.append(self.claimed_at[-1] - self.t0())
        self.latencies_s = latencies
        return Chunk(jobs, sum(latencies), 0.0)


class LibWake(WakeProbe):
    """Consumer: a task of the session's trio loop looping on ``listener.wait()`` +
    ``claim_batch``; the store's LISTEN connection is its third connection."""

    def __init__(self, driver: str) -> None:
        self.driver = driver

    async def setup(self, stack: AsyncExitStack) -> None:
        schema = stack.enter_context(fresh_schema())
        self.q = RawSql(schema)
        self.start_probe(stack)
        self.claimed = trio.Event()
        store = await library_store(stack, schema, self.driver)
        self.queue = store.queue(QUEUE, OPTS)
        self.listener = await stack.enter_async_context(store.open_wake_listener(self.queue))
        nursery = await stack.enter_async_context(trio.open_nursery())
        stack.callback(nursery.cancel_scope.cancel)
        nursery.start_soon(self.consume)
        await self.chunk(WARMUP)

    async def consume(self) -> None:
        try:
            while True:
                await self.listener.wait()
                handles = await self.queue.claim_batch(WORKER, 10)
                t1 = time.perf_counter()
                if handles:
                    self.claimed_at.append(t1)
                    await self.queue.ack_batch([h.id for h in handles])
                    self.claimed.set()
        except Exception as exc:  # reported by chunk()
            self.errors.append(exc)
            self.claimed.set()

    async def chunk(self, jobs: int) -> Chunk:
        latencies = []
        for _ in range(jobs):
            self.claimed = trio.Event()
            self.go()
            with trio.fail_after(5):
                await self.claimed.wait()
            if self.errors:
                raise RuntimeError(f"the library consumer failed: {self.errors}")
            latencies.append(self.claimed_at[-1] - self.t0())
        self.latencies_s = latencies
        return Chunk(jobs, sum(latencies), 0.0)


# -- the cases ---------------------------------------------------------------------------


def build_cases(sizes: Sizes, drivers: tuple[str, ...] = DRIVERS) -> list[Case]:
    """Every case with its variants (nothing runs yet)."""

    def lib(make: Callable[[str], Runner]) -> list[Variant]:
        return [
            Variant(f"library, {d} driver", "library", lambda d=d: make(d))  # type: ignore[misc]
            for d in drivers
        ]

    cases = [
        Case(
            "enqueue (single)",
            [
                Variant(
                    "raw INSERT+NOTIFY per call",
                    "baseline",
                    lambda: RawEnqueueSingle(lib_sql=False),
                ),
                Variant("raw, library SQL", "raw-lib-sql", lambda: RawEnqueueSingle(lib_sql=True)),
                *lib(LibEnqueueSingle),
            ],
            SINGLE_CHUNK,
            sizes.single,
        ),
        Case(
            f"enqueue x{TASKS} tasks",
            [
                Variant(
                    f"raw INSERT+NOTIFY, {TASKS} threads",
                    "baseline",
                    lambda: RawEnqueueConcurrent(lib_sql=False),
                ),
                Variant(
                    f"raw, library SQL, {TASKS} threads",
                    "raw-lib-sql",
                    lambda: RawEnqueueConcurrent(lib_sql=True),
                ),
                *lib(LibEnqueueConcurrent),
            ],
            CONCURRENT_CHUNK,
            sizes.concurrent,
        ),
        Case(
            f"enqueue_many({MANY})",
            [
                Variant(
                    f"raw multi-row INSERT of {MANY}", "baseline", lambda: RawEnqueueMany("values")
                ),
                Variant(
                    f"raw COPY of {MANY} (reference)", "reference", lambda: RawEnqueueMany("copy")
                ),
                Variant("raw, library SQL", "raw-lib-sql", lambda: RawEnqueueMany("lib-sql")),
                *lib(LibEnqueueMany),
            ],
            MANY_CHUNK,
            sizes.many,
        ),
    ]
    n = sizes.drain
    for b in DRAIN_BATCHES:
        cases.append(
            Case(
                f"drain {n:,}, batch {b}",
                [
                    Variant(
                        "raw SELECT FOR UPDATE SKIP LOCKED + DELETE, 1 tx",
                        "baseline",
                        lambda b=b: RawDrain(n, b, "tx"),  # type: ignore[misc]
                    ),
                    Variant(
                        "raw UPDATE claim + DELETE, 2 tx (reference)",
                        "reference",
                        lambda b=b: RawDrain(n, b, "lease"),  # type: ignore[misc]
                    ),
                    Variant(
                        "raw, library SQL",
                        "raw-lib-sql",
                        lambda b=b: RawDrain(n, b, "lib-sql"),  # type: ignore[misc]
                    ),
                    *lib(lambda d, b=b: LibDrain(n, b, d)),  # type: ignore[misc]
                    *[
                        Variant(
                            f"library, ack_handles_and_claim, {d} driver",
                            "library",
                            lambda d=d, b=b: LibDrainFused(n, b, d),  # type: ignore[misc]
                            same_sql=False,
                        )
                        for d in drivers
                    ],
                ],
                drain_chunk(b, n),
                n,
            )
        )
    cases.append(
        Case(
            "wake latency",
            [
                Variant("raw LISTEN + select() + claim", "baseline", RawWake),
                *lib(LibWake),
            ],
            WAKE_CHUNK,
            sizes.wakes,
            latency=True,
        )
    )
    return cases


async def run_session(case: Case, log: Callable[[str], None]) -> None:
    """One session of a case: set every variant up, then run them chunk by chunk."""
    async with AsyncExitStack() as stack:
        runners = []
        for variant in case.variants:
            runner = variant.make()
            await runner.setup(stack)
            runners.append((variant, runner))
        chunks = max(1, case.total_jobs // case.chunk_jobs)
        for i in range(chunks):
            shift = i % len(runners)
            for variant, runner in runners[shift:] + runners[:shift]:
                variant.chunks.append(await runner.chunk(case.chunk_jobs))
                if case.latency:
                    variant.latencies_s.extend(runner.latencies_s)  # type: ignore[attr-defined]
        for variant, _ in runners:
            if case.latency:
                p50 = statistics.median(variant.latencies_s) * 1e3
                log(f"  {variant.name:<50} p50 so far {p50:7.3f} ms")
            else:
                rate = statistics.median(c.rate for c in variant.chunks)
                log(f"  {variant.name:<50} {rate:>9,.0f} jobs/s so far")


def run_cases(cases: list[Case], rounds: int, log: Callable[[str], None] = print) -> None:
    """Run ``rounds`` sessions of every case (case by case, round-robin)."""
    for r in range(rounds):
        for case in cases:
            log(f"round {r + 1}/{rounds}: {case.name}")
            trio.run(run_session, case, log)


# -- reporting ---------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0-100), nearest rank."""
    ordered = sorted(values)
    rank = max(1, round(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def format_table(cases: list[Case]) -> str:
    """The throughput cases as a Markdown table, then the latency case."""
    lines = [
        "| case | variant | jobs/s | IQR of chunks | CPU µs/job | × baseline | × same SQL |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for case in cases:
        if case.latency or not case.baseline().chunks:
            continue
        base, same = case.baseline(), case.same_sql()
        for variant in case.variants:
            low, high = variant.rate_iqr()
            ratio = "—" if variant is base else f"{case.ratio(variant, base):.2f}"
            vs_same = (
                f"{case.ratio(variant, same):.2f}"
                if same is not None and variant.kind == "library" and variant.same_sql
                else ""
            )
            label = f"**{variant.name}**" if variant.kind == "baseline" else variant.name
            lines.append(
                f"| {case.name} | {label} | {variant.rate():,.0f} | {low:,.0f}–{high:,.0f} | "
                f"{variant.cpu_us_per_job():.1f} | {ratio} | {vs_same} |"
            )
    for case in cases:
        if not case.latency or not case.baseline().latencies_s:
            continue
        lines += [
            "",
            "| wake: enqueue returned → claim returned | samples | p50 ms | p95 ms | p99 ms | "
            "max ms |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for variant in case.variants:
            lat = variant.latencies_s
            label = f"**{variant.name}**" if variant.kind == "baseline" else variant.name
            lines.append(
                f"| {label} | {len(lat)} | {percentile(lat, 50) * 1e3:.3f} | "
                f"{percentile(lat, 95) * 1e3:.3f} | {percentile(lat, 99) * 1e3:.3f} | "
                f"{max(lat) * 1e3:.3f} |"
            )
    return "\n".join(lines)


#: The virtualenv's python that runs ``bench_peers.py`` (as in ``bench_worker.py``).
PEERS_PYTHON = os.environ.get("ALKSTORE_PEERS_PYTHON", "/work/peers-venv/bin/python")
#: Issue 3's target: ``enqueue_many(1000)`` at least this many times pgqueuer's.
PGQUEUER_ENQUEUE_TARGET = 1.5


def run_bench_peers(args: list[str], log: Callable[[str], None]) -> dict[str, Any]:
    """``bench_peers.py`` with ``args`` under the peers' virtualenv (which must exist),
    its output lines logged; its results, as it writes them with ``--json-out``."""
    with TemporaryDirectory() as tmp:
        out = Path(tmp) / "peers.json"
        cmd = [PEERS_PYTHON, str(Path(__file__).with_name("bench_peers.py"))]
        env = {**os.environ, "ALKSTORE_BENCH_DSN": dsn()}
        proc = subprocess.run(
            [*cmd, *args, "--json-out", str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=3600,
        )
        for line in proc.stdout.splitlines():
            log("  peers: " + line)
        if proc.returncode != 0:
            raise RuntimeError(f"bench_peers.py failed ({proc.returncode})")
        results: dict[str, Any] = json.loads(out.read_text())
        return results


def run_peer_enqueues(jobs: int, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """The peers' bulk enqueue of ``jobs`` (1,000 per call); ``[]`` (and a line saying
    why) without the peers' virtualenv."""
    if not Path(PEERS_PYTHON).exists():
        log(f"peers' enqueue skipped: no peers virtualenv at {PEERS_PYTHON} (see bench_peers.py)")
        return []
    rows: list[dict[str, Any]] = run_bench_peers(["--only", "enqueue", "--jobs", str(jobs)], log)[
        "enqueue"
    ]
    return rows


def format_peer_enqueues(cases: list[Case], peers: list[dict[str, Any]]) -> str:
    """The library's ``enqueue_many`` rows beside the peers' bulk enqueues."""
    many = next((c for c in cases if c.name == f"enqueue_many({MANY})"), None)
    if many is None or not peers:
        return ""
    lines = [
        f"| bulk enqueue, {MANY} per call | jobs/s | CPU µs/job | library ÷ peer |",
        "| --- | ---: | ---: | --- |",
    ]
    ours = [v for v in many.variants if v.kind == "library" and v.chunks]
    for variant in ours:
        lines.append(
            f"| {variant.name} | {variant.rate():,.0f} | {variant.cpu_us_per_job():.1f} | |"
        )
    for peer in peers:
        ratios = ", ".join(f"{v.rate() / peer['rate']:.2f}× ({v.name})" for v in ours)
        lines.append(f"| {peer['name']} | {peer['rate']:,.0f} | {peer['cpu_us']:.1f} | {ratios} |")
    return "\n".join(lines)


def targets(cases: list[Case], peers: list[dict[str, Any]] | None = None) -> list[str]:
    """The issue's targets, each with the measured value and whether it is met."""
    out: list[str] = []
    pgqueuer = next((p for p in peers or [] if p["name"].startswith("pgqueuer")), None)

    def ratio_target(case: Case, label: str) -> None:
        if not case.baseline().chunks:
            return
        for variant in case.variants:
            if variant.kind == "library" and variant.chunks:
                r = case.ratio(variant, case.baseline())
                verdict = "met" if r >= 0.8 else "NOT met"
                out.append(f"{label} >= 0.8x baseline, {variant.name}: {r:.2f}x ({verdict})")

    for case in cases:
        if case.name.endswith("batch 100"):
            ratio_target(case, "burn-down at batch 100")
        elif case.name == f"enqueue_many({MANY})":
            ratio_target(case, case.name)
            for variant in case.variants:
                if pgqueuer is not None and variant.kind == "library" and variant.chunks:
                    r = variant.rate() / pgqueuer["rate"]
                    verdict = "met" if r >= PGQUEUER_ENQUEUE_TARGET else "NOT met"
                    out.append(
                        f"{case.name} >= {PGQUEUER_ENQUEUE_TARGET}x pgqueuer's bulk enqueue, "
                        f"{variant.name}: {r:.2f}x ({verdict})"
                    )
        elif case.name == "enqueue (single)":
            ratio_target(case, "single enqueue")
        elif case.latency:
            for variant in case.variants:
                if variant.kind == "library" and variant.latencies_s:
                    p50 = percentile(variant.latencies_s, 50) * 1e3
                    p99 = percentile(variant.latencies_s, 99) * 1e3
                    out.append(
                        f"wake latency p50 <= 1 ms, {variant.name}: {p50:.3f} ms "
                        f"({'met' if p50 <= 1 else 'NOT met'})"
                    )
                    out.append(
                        f"wake latency p99 <= 5 ms, {variant.name}: {p99:.3f} ms "
                        f"({'met' if p99 <= 5 else 'NOT met'})"
                    )
    return out


def machine() -> str:
    """One line on the machine, the client and the server."""
    with _admin() as admin:
        row = admin.execute(
            "SELECT current_setting('server_version'), current_setting('synchronous_commit'), "
            "current_setting('fsync'), current_setting('shared_buffers')"
        ).fetchone()
    assert row is not None
    server, sync_commit, fsync, shared = row
    return (
        f"{os.cpu_count()} cores, {platform.system()} {platform.machine()}; "
        f"Python {platform.python_version()} ({platform.python_implementation()}), "
        f"trio {trio.__version__}, psycopg {psycopg.__version__} "
        f"({psycopg.pq.__impl__}, libpq {psycopg.pq.version()}); "
        f"PostgreSQL {server} on the same machine (synchronous_commit={sync_commit}, "
        f"fsync={fsync}, shared_buffers={shared}); default driver: {_driver.DRIVER}"
    )


def main(argv: list[str] | None = None) -> None:
    global ASYNC_COMMIT
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one session")
    parser.add_argument("--rounds", type=int, default=None, help="sessions per case")
    parser.add_argument("--only", default=None, help="only cases whose name contains this")
    parser.add_argument("--drivers", default=",".join(DRIVERS), help="library drivers")
    parser.add_argument(
        "--async-commit", action="store_true", help="synchronous_commit=off on every connection"
    )
    args = parser.parse_args(argv)
    ASYNC_COMMIT = args.async_commit
    sizes = QUICK if args.quick else FULL
    rounds = args.rounds or sizes.rounds
    cases = build_cases(sizes, tuple(d for d in args.drivers.split(",") if d))
    if args.only:
        cases = [c for c in cases if args.only in c.name]
    print(machine())
    started = time.perf_counter()
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    run_cases(cases, rounds, log=log)
    peers: list[dict[str, Any]] = []
    if any(c.name == f"enqueue_many({MANY})" for c in cases):
        peers = run_peer_enqueues(sizes.many, log)
    print(
        f"\n{rounds} session(s) per case in {time.perf_counter() - started:.0f} s"
        f"{'; synchronous_commit=off' if ASYNC_COMMIT else ''}. Rates: median chunk; "
        "ratios: median of per-chunk ratios.\n"
    )
    print(format_table(cases))
    peer_table = format_peer_enqueues(cases, peers)
    if peer_table:
        print()
        print(peer_table)
    print()
    for line in targets(cases, peers):
        print("-", line)


if __name__ == "__main__":
    main()
