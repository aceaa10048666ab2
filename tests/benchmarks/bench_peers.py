"""The peers' own workers on the same server: pgqueuer and procrastinate (``bench_worker.py``).

Run with the python of a *separate* virtualenv that has the peers (they are not
dependencies of alkstore_trio)::

    python3.11 -m venv /work/peers-venv
    /work/peers-venv/bin/pip install 'pgqueuer==1.6.*' 'procrastinate==3.10.*' \\
        'psycopg[binary]' asyncpg uvloop
    /work/peers-venv/bin/python tests/benchmarks/bench_peers.py [--quick] [--jobs N]
        [--samples S] [--only NAME] [--json-out FILE]

``bench_worker.py`` runs it this way when that virtualenv exists and puts its rows beside
ours. This file imports nothing from alkstore_trio.

Each case runs in a database of its own, created for it and dropped afterwards
(``bench_peers_pgqueuer``, ``bench_peers_procrastinate``: both peers install their tables
in the ``public`` schema), on the server of ``ALKSTORE_BENCH_DSN`` / ``ALKSTORE_TEST_DSN``
/ the local default. Tables keep the peers' default durability (logged, like ours). The
event loop is uvloop when it is installed in that virtualenv (pgqueuer's own CLI uses
it), else asyncio's.

- **Burn-down**: the peer's own bulk enqueue puts N no-op jobs in (1,000 per call,
  untimed), then the peer's own worker drains them in this process, in its "stop when the
  queue is empty" mode: pgqueuer ``QueueManager.run(mode=drain, batch_size=B)`` over
  its asyncpg pool driver (a pool of 10: faster than one connection), at batch 100 and
  10; procrastinate
  ``run_worker_async(wait=False, concurrency=C)`` over its psycopg pool. The clock runs
  from the start of the worker call to its return (which includes the peer's start-up
  and final flush); client CPU is this process's user + system CPU over the same span,
  over N. Afterwards the queue must hold no waiting or running job.
- **Bulk enqueue**: the peer's own bulk enqueue of N jobs, 1,000 per call (pgqueuer
  ``Queries.enqueue`` of lists on one asyncpg connection, procrastinate
  ``batch_defer_async``), into an empty database; wall and client CPU of the enqueues
  alone. ``bench_postgres.py`` puts these rows beside ``enqueue_many(1000)``.
- **Idle pickup latency**: the peer's worker runs idle in a child process whose handler
  prints ``time.perf_counter()`` first thing; this process enqueues one job at a time with
  the peer's own enqueue call, takes ``time.perf_counter()`` when it returns, waits for
  the handler's line, pauses 2–5 ms and goes on (``CLOCK_MONOTONIC``: one clock for every
  process on Linux). The same method as ``bench_worker.py`` uses for ours.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import resource
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import metadata
from typing import Any

import psycopg
import psycopg.conninfo

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
PAYLOAD = b'{"to": "ada@example.com", "template": "welcome"}'
ENQUEUE_CALL = 1000
LATENCY_GAP_S = (0.002, 0.005)
LATENCY_WARMUP = 10
PGQUEUER_BATCHES = (100, 10)
PROCRASTINATE_CONCURRENCY = 10
THIS_FILE = os.path.abspath(__file__)
DATABASES = {"pgqueuer": "bench_peers_pgqueuer", "procrastinate": "bench_peers_procrastinate"}


def base_dsn() -> str:
    return (
        os.environ.get("ALKSTORE_BENCH_DSN") or os.environ.get("ALKSTORE_TEST_DSN") or DEFAULT_DSN
    )


def db_dsn(database: str) -> str:
    params = psycopg.conninfo.conninfo_to_dict(base_dsn())
    params["dbname"] = database
    return psycopg.conninfo.make_conninfo("", **params)


def db_url(database: str) -> str:
    """The same server as a URL, for asyncpg."""
    p = psycopg.conninfo.conninfo_to_dict(base_dsn())
    user = p.get("user", "postgres")
    password = f":{p['password']}" if p.get("password") else ""
    host, port = p.get("host", "127.0.0.1"), p.get("port", 5432)
    return f"postgresql://{user}{password}@{host}:{port}/{database}"


@contextlib.contextmanager
def fresh_database(database: str) -> Any:
    """Create ``database`` (dropping a leftover of an earlier run first); drop it after."""
    assert database.startswith("bench_peers_")
    with psycopg.connect(base_dsn(), autocommit=True, application_name="bench-peers-admin") as a:
        a.execute(f'DROP DATABASE IF EXISTS "{database}"')
        a.execute(f'CREATE DATABASE "{database}"')
    try:
        yield database
    finally:
        with psycopg.connect(
            base_dsn(), autocommit=True, application_name="bench-peers-admin"
        ) as a:
            a.execute(f'DROP DATABASE IF EXISTS "{database}"')


def count(database: str, sql: str) -> int:
    with psycopg.connect(db_dsn(database), autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def timed(run: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    cpu0, t0 = cpu_s(), time.perf_counter()
    await run()
    return time.perf_counter() - t0, cpu_s() - cpu0


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    rank = max(1, round(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def rate_row(name: str, jobs: int, wall: float, cpu: float) -> dict[str, Any]:
    """A throughput result: ``jobs`` in ``wall`` seconds using ``cpu`` seconds of CPU."""
    return {
        "name": name,
        "jobs": jobs,
        "rate": jobs / wall,
        "wall_s": wall,
        "cpu_us": cpu / jobs * 1e6,
    }


# -- pgqueuer ----------------------------------------------------------------------------


async def pgqueuer_install_and_fill(database: str, jobs: int) -> tuple[float, float]:
    """Install pgqueuer and enqueue ``jobs`` with its bulk enqueue, 1,000 per call, on
    one asyncpg connection; the wall and CPU seconds of the enqueues alone."""
    import asyncpg
    from pgqueuer import Queries

    conn = await asyncpg.connect(db_url(database))
    try:
        queries = Queries.from_asyncpg_connection(conn)
        await queries.install()

        async def fill() -> None:
            left = jobs
            while left:
                n = min(ENQUEUE_CALL, left)
                ids = await queries.enqueue(["noop"] * n, [PAYLOAD] * n, [0] * n)
                assert len(ids) == n
                left -= n

        return await timed(fill)
    finally:
        await conn.close()


async def pgqueuer_enqueue(jobs: int) -> dict[str, Any]:
    """pgqueuer's bulk enqueue (``Queries.enqueue`` of lists, 1,000 jobs per call)."""
    with fresh_database(DATABASES["pgqueuer"]) as database:
        wall, cpu = await pgqueuer_install_and_fill(database, jobs)
        stored = count(database, "SELECT count(*) FROM pgqueuer")
        if stored != jobs:
            raise AssertionError(f"pgqueuer enqueue: {stored} rows of {jobs}")
    return rate_row(f"pgqueuer, enqueue {ENQUEUE_CALL} per call", jobs, wall, cpu)


#: pgqueuer's asyncpg pool: its pool driver at 10 connections drained faster than one
#: connection (5,600 against 3,900 jobs/s in a trial on this machine) or a pool of 4.
PGQUEUER_POOL = 10


def pgqueuer_manager(pool: Any, handler: Callable[[Any], Awaitable[None]]) -> Any:
    from pgqueuer import Queries, QueueManager
    from pgqueuer.db import AsyncpgPoolDriver

    manager = QueueManager(Queries(AsyncpgPoolDriver(pool)))
    manager.entrypoint("noop")(handler)
    return manager


async def pgqueuer_burn(jobs: int, batch: int) -> dict[str, Any]:
    import asyncpg
    from pgqueuer.domain.types import QueueExecutionMode

    with fresh_database(DATABASES["pgqueuer"]) as database:
        await pgqueuer_install_and_fill(database, jobs)
        pool = await asyncpg.create_pool(db_url(database), min_size=2, max_size=PGQUEUER_POOL)
        handled = 0

        async def noop(job: Any) -> None:
            nonlocal handled
            handled += 1

        manager = pgqueuer_manager(pool, noop)
        try:
            wall, cpu = await timed(
                lambda: manager.run(batch_size=batch, mode=QueueExecutionMode.drain)
            )
        finally:
            await pool.close()
        left = count(database, "SELECT count(*) FROM pgqueuer")
        if handled != jobs or left:
            raise AssertionError(f"pgqueuer: {handled} handled of {jobs}, {left} rows left")
    return rate_row(f"pgqueuer, batch {batch}", jobs, wall, cpu)


async def pgqueuer_child() -> None:
    import asyncpg

    database = DATABASES["pgqueuer"]
    pool = await asyncpg.create_pool(db_url(database), min_size=2, max_size=PGQUEUER_POOL)

    async def report(job: Any) -> None:
        t = time.perf_counter()
        sys.stdout.write(f"t {t!r}\n")
        sys.stdout.flush()

    manager = pgqueuer_manager(pool, report)
    run = asyncio.ensure_future(manager.run(batch_size=10))
    await asyncio.sleep(0.5)  # listening
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    manager.shutdown.set()
    await run
    await pool.close()


async def pgqueuer_latency(samples: int) -> dict[str, Any]:
    import asyncpg
    from pgqueuer import Queries

    with fresh_database(DATABASES["pgqueuer"]) as database:
        await pgqueuer_install_and_fill(database, 0)
        conn = await asyncpg.connect(db_url(database))
        queries = Queries.from_asyncpg_connection(conn)

        async def enqueue() -> None:
            await queries.enqueue("noop", PAYLOAD)

        try:
            lat = await latency_loop("pgqueuer", enqueue, samples)
        finally:
            await conn.close()
        left = count(database, "SELECT count(*) FROM pgqueuer")
        if left:
            raise AssertionError(f"pgqueuer latency: {left} rows left")
    return lat_result("pgqueuer, batch 10", lat)


# -- procrastinate -----------------------------------------------------------------------


def procrastinate_app(database: str, pool_max: int) -> Any:
    import procrastinate

    connector = procrastinate.PsycopgConnector(
        conninfo=db_dsn(database), min_size=1, max_size=pool_max
    )
    return procrastinate.App(connector=connector)


async def procrastinate_fill(task: Any, jobs: int) -> None:
    """Defer ``jobs`` runs of ``task`` with procrastinate's bulk enqueue, 1,000 per call."""
    left = jobs
    while left:
        n = min(ENQUEUE_CALL, left)
        await task.batch_defer_async(*[{}] * n)
        left -= n


async def procrastinate_enqueue(jobs: int) -> dict[str, Any]:
    """procrastinate's bulk enqueue (``batch_defer_async``, 1,000 jobs per call)."""
    with fresh_database(DATABASES["procrastinate"]) as database:
        app = procrastinate_app(database, 2)

        @app.task(name="noop")
        async def noop() -> None:
            pass

        async with app.open_async():
            await app.schema_manager.apply_schema_async()

            wall, cpu = await timed(lambda: procrastinate_fill(noop, jobs))
        stored = count(database, "SELECT count(*) FROM procrastinate_jobs")
        if stored != jobs:
            raise AssertionError(f"procrastinate enqueue: {stored} rows of {jobs}")
    return rate_row(f"procrastinate, enqueue {ENQUEUE_CALL} per call", jobs, wall, cpu)


async def procrastinate_burn(jobs: int, concurrency: int) -> dict[str, Any]:
    with fresh_database(DATABASES["procrastinate"]) as database:
        app = procrastinate_app(database, concurrency + 2)
        handled = 0

        @app.task(name="noop")
        async def noop() -> None:
            nonlocal handled
            handled += 1

        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            await procrastinate_fill(noop, jobs)
            wall, cpu = await timed(
                lambda: app.run_worker_async(
                    concurrency=concurrency, wait=False, install_signal_handlers=False
                )
            )
        waiting = count(
            database, "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
        )
        done = count(database, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")
        if handled != jobs or waiting or done != jobs:
            raise AssertionError(
                f"procrastinate: {handled} handled of {jobs}, {waiting} waiting, {done} succeeded"
            )
    return rate_row(f"procrastinate, concurrency {concurrency}", jobs, wall, cpu)


async def procrastinate_child() -> None:
    app = procrastinate_app(DATABASES["procrastinate"], PROCRASTINATE_CONCURRENCY + 2)

    @app.task(name="noop")
    async def noop() -> None:
        t = time.perf_counter()
        sys.stdout.write(f"t {t!r}\n")
        sys.stdout.flush()

    async with app.open_async():
        run = asyncio.ensure_future(
            app.run_worker_async(
                concurrency=PROCRASTINATE_CONCURRENCY, install_signal_handlers=False
            )
        )
        await asyncio.sleep(0.5)  # listening
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run


async def procrastinate_latency(samples: int) -> dict[str, Any]:
    with fresh_database(DATABASES["procrastinate"]) as database:
        app = procrastinate_app(database, 2)

        @app.task(name="noop")
        async def noop() -> None:
            pass

        async with app.open_async():
            await app.schema_manager.apply_schema_async()

            async def enqueue() -> None:
                await noop.defer_async()

            lat = await latency_loop("procrastinate", enqueue, samples)
        waiting = count(
            database, "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
        )
        if waiting:
            raise AssertionError(f"procrastinate latency: {waiting} jobs still waiting")
    return lat_result(f"procrastinate, concurrency {PROCRASTINATE_CONCURRENCY}", lat)


# -- the latency loop (shared) -----------------------------------------------------------


@contextlib.asynccontextmanager
async def child(peer: str) -> AsyncIterator[asyncio.subprocess.Process]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        THIS_FILE,
        "--child",
        peer,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "ALKSTORE_BENCH_DSN": base_dsn()},
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if line != b"ready\n":
            raise RuntimeError(f"{peer} child did not get ready: {line!r}")
        yield proc
    finally:
        if proc.returncode is None:
            assert proc.stdin is not None
            proc.stdin.write(b"stop\n")
            with contextlib.suppress(ConnectionError):
                await proc.stdin.drain()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def latency_loop(
    peer: str, enqueue: Callable[[], Awaitable[None]], samples: int
) -> list[float]:
    rng = random.Random(1)
    out: list[float] = []
    async with child(peer) as proc:
        assert proc.stdout is not None
        for i in range(LATENCY_WARMUP + samples):
            await asyncio.sleep(rng.uniform(*LATENCY_GAP_S))
            await enqueue()
            t0 = time.perf_counter()
            line = await asyncio.wait_for(proc.stdout.readline(), 10)
            if not line.startswith(b"t "):
                raise RuntimeError(f"{peer}: unexpected line {line!r}")
            if i >= LATENCY_WARMUP:
                out.append(float(line.split()[1]) - t0)
    await asyncio.sleep(0.2)  # let the last job's completion land
    return out


def lat_result(name: str, lat: list[float]) -> dict[str, Any]:
    return {
        "name": name,
        "samples": len(lat),
        "p50_ms": percentile(lat, 50) * 1e3,
        "p95_ms": percentile(lat, 95) * 1e3,
        "p99_ms": percentile(lat, 99) * 1e3,
        "max_ms": max(lat) * 1e3,
    }


# -- main --------------------------------------------------------------------------------


async def run_all(jobs: int, samples: int, only: str | None) -> dict[str, Any]:
    def pick(name: str) -> bool:
        return only is None or only.lower() in name.lower()

    out: dict[str, Any] = {
        "versions": {p: metadata.version(p) for p in ("pgqueuer", "procrastinate")},
        "settings": (
            f"pgqueuer over an asyncpg {metadata.version('asyncpg')} pool of {PGQUEUER_POOL}, "
            "drain mode; procrastinate "
            f"over psycopg {metadata.version('psycopg')}, wait=False; default durability; "
            f"{loop_name()}"
        ),
        "burn_down": [],
        "latency": [],
        "enqueue": [],
    }
    if pick("pgqueuer enqueue"):
        out["enqueue"].append(await pgqueuer_enqueue(jobs))
        report(out["enqueue"][-1])
    if pick("procrastinate enqueue"):
        out["enqueue"].append(await procrastinate_enqueue(jobs))
        report(out["enqueue"][-1])
    for batch in PGQUEUER_BATCHES:
        if pick(f"pgqueuer burn-down batch {batch}"):
            out["burn_down"].append(await pgqueuer_burn(jobs, batch))
            report(out["burn_down"][-1])
    if pick("procrastinate burn-down"):
        out["burn_down"].append(await procrastinate_burn(jobs, PROCRASTINATE_CONCURRENCY))
        report(out["burn_down"][-1])
    if pick("pgqueuer latency"):
        out["latency"].append(await pgqueuer_latency(samples))
        report(out["latency"][-1])
    if pick("procrastinate latency"):
        out["latency"].append(await procrastinate_latency(samples))
        report(out["latency"][-1])
    return out


def run_loop(coro: Any) -> Any:
    """uvloop when it is installed (pgqueuer's own CLI runs on it), else asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def loop_name() -> str:
    try:
        return f"uvloop {metadata.version('uvloop')}"
    except metadata.PackageNotFoundError:
        return "asyncio's default loop"


def report(row: dict[str, Any]) -> None:
    if "rate" in row:
        print(
            f"{row['name']:<32} {row['rate']:>9,.0f} jobs/s  {row['cpu_us']:7.1f} µs CPU/job",
            flush=True,
        )
    else:
        print(
            f"{row['name']:<32} p50 {row['p50_ms']:.3f} ms  p99 {row['p99_ms']:.3f} ms", flush=True
        )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    # procrastinate warns that the App lives in __main__ (it only matters for its CLI).
    logging.getLogger("procrastinate").setLevel(logging.ERROR)
    if argv[:1] == ["--child"]:
        run_loop({"pgqueuer": pgqueuer_child, "procrastinate": procrastinate_child}[argv[1]]())
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 jobs, 60 samples")
    parser.add_argument("--jobs", type=int, default=None, help="burn-down jobs (20,000)")
    parser.add_argument("--samples", type=int, default=None, help="latency samples (300)")
    parser.add_argument("--only", default=None, help="only cases whose name contains this")
    parser.add_argument("--json-out", default=None, help="write the results here as JSON")
    args = parser.parse_args(argv)
    jobs = args.jobs or (2000 if args.quick else 20_000)
    samples = args.samples or (60 if args.quick else 300)
    out = run_loop(run_all(jobs, samples, args.only))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
