"""Round trips of the PostgreSQL drivers: the native trio driver against the others.

One single-row ``SELECT %s`` (sent as ``SELECT $1``, prepared after its first run) per
round trip, on one connection per case, against a real server. The cases run
interleaved — a round of each, then the next round — so that a drifting machine
affects them all alike:

- ``native``: the native trio driver (psycopg's connection, trio waits);
- ``thread``: the thread driver (psycopg's sync API in worker threads);
- ``psycopg sync``: psycopg's own sync connection, called directly (the baseline);
- ``psycopg asyncio``: psycopg's AsyncConnection on an asyncio loop (for reference).

Reported per case: round trips per second (wall clock) and client CPU per round trip in
µs (``time.process_time``: every thread of this process, so the thread driver's workers
count). The server is ``ALKSTORE_TEST_DSN`` or the local default.

Run it as a script (``python tests/benchmarks/bench_driver.py [N] [ROUNDS]``) or through
pytest (``pytest tests/benchmarks/bench_driver.py -m bench -s``).
"""

from __future__ import annotations

import asyncio
import os
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import psycopg
import pytest
import trio

from alkstore_trio._engines._postgres import _driver

#: Round trips per case per round.
N = 2000
#: Rounds (each case runs once per round).
ROUNDS = 5
#: Untimed round trips per case before the first round.
WARMUP = 200
QUERY = "SELECT %s::integer"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
CASES = ("native", "thread", "psycopg sync", "psycopg asyncio")


@dataclass(frozen=True)
class Result:
    """One case's totals over every round."""

    case: str
    round_trips: int
    wall_s: float
    cpu_s: float

    @property
    def per_s(self) -> float:
        return self.round_trips / self.wall_s

    @property
    def cpu_us(self) -> float:
        return self.cpu_s / self.round_trips * 1e6


def dsn() -> str:
    return os.environ.get("ALKSTORE_TEST_DSN") or DEFAULT_DSN


async def _timed(loop: Callable[[int], Awaitable[None]], n: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    await loop(n)
    return time.perf_counter() - wall, time.process_time() - cpu


def _timed_sync(loop: Callable[[int], None], n: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    loop(n)
    return time.perf_counter() - wall, time.process_time() - cpu


def _asyncio_round(conninfo: str, n: int) -> tuple[float, float]:
    async def run() -> tuple[float, float]:
        conn = await psycopg.AsyncConnection.connect(
            conninfo, autocommit=True, prepare_threshold=_driver.PREPARE_THRESHOLD
        )
        async with conn:
            cursor = conn.cursor()

            async def loop(count: int) -> None:
                for i in range(count):
                    await cursor.execute(QUERY, [i % 100])
                    await cursor.fetchall()

            await loop(WARMUP)
            return await _timed(loop, n)

    return asyncio.run(run())


async def run_benchmark(n: int = N, rounds: int = ROUNDS) -> list[Result]:
    """Every case, ``rounds`` times interleaved, ``n`` round trips each time."""
    conninfo = dsn()
    native = await _driver.connect_native(
        conninfo, connect_timeout_s=5, application_name="alkstore-bench"
    )
    thread = await _driver.connect_threaded(
        conninfo, connect_timeout_s=5, application_name="alkstore-bench"
    )
    sync = psycopg.connect(conninfo, autocommit=True, prepare_threshold=_driver.PREPARE_THRESHOLD)
    sync_cursor = sync.cursor()

    def trio_loop(conn: _driver.Connection) -> Callable[[int], Awaitable[None]]:
        async def loop(count: int) -> None:
            for i in range(count):
                await conn.execute(QUERY, [i % 100])

        return loop

    def sync_loop(count: int) -> None:
        for i in range(count):
            sync_cursor.execute(QUERY, [i % 100])
            sync_cursor.fetchall()

    totals = {case: [0.0, 0.0] for case in CASES}
    try:
        await trio_loop(native)(WARMUP)
        await trio_loop(thread)(WARMUP)
        sync_loop(WARMUP)
        for _ in range(rounds):
            for case in CASES:
                if case == "native":
                    wall, cpu = await _timed(trio_loop(native), n)
                elif case == "thread":
                    wall, cpu = await _timed(trio_loop(thread), n)
                elif case == "psycopg sync":
                    wall, cpu = _timed_sync(sync_loop, n)
                else:
                    wall, cpu = _asyncio_round(conninfo, n)
                totals[case][0] += wall
                totals[case][1] += cpu
    finally:
        await native.aclose()
        await thread.aclose()
        sync.close()
    return [Result(case, n * rounds, wall, cpu) for case, (wall, cpu) in totals.items()]


def machine() -> str:
    """A one-line description of the machine, the Pythons and the libraries."""
    return (
        f"Python {platform.python_version()}, trio {trio.__version__}, "
        f"psycopg {psycopg.__version__} ({psycopg.pq.__impl__}, libpq {psycopg.pq.version()}), "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores"
    )


def format_table(results: list[Result]) -> str:
    """The results as a small Markdown table, with each case relative to psycopg sync."""
    base = next(r for r in results if r.case == "psycopg sync")
    width = max(len(r.case) for r in results)
    lines = [
        f"| {'case':<{width}} | round trips/s | vs sync | client CPU µs/query |",
        f"| {'-' * width} | ------------: | ------: | ------------------: |",
    ]
    lines += [
        f"| {r.case:<{width}} | {r.per_s:>13,.0f} | {r.per_s / base.per_s:>6.2f}× "
        f"| {r.cpu_us:>19.1f} |"
        for r in results
    ]
    return "\n".join(lines)


def _server_available() -> bool:
    try:
        with psycopg.connect(dsn(), connect_timeout=3):
            return True
    except psycopg.Error:
        return False


@pytest.mark.bench
async def test_bench_driver_round_trips() -> None:
    if not _server_available():
        pytest.skip(f"no PostgreSQL server; set ALKSTORE_TEST_DSN (tried {DEFAULT_DSN})")
    results = await run_benchmark()
    print()
    print(machine())
    print(format_table(results))
    assert [r.case for r in results] == list(CASES)
    assert all(r.wall_s > 0 for r in results)


def main(argv: list[str]) -> None:
    n = int(argv[1]) if len(argv) > 1 else N
    rounds = int(argv[2]) if len(argv) > 2 else ROUNDS
    results = trio.run(run_benchmark, n, rounds)
    print(machine())
    print(f"{n} round trips × {rounds} interleaved rounds per case")
    print(format_table(results))


if __name__ == "__main__":
    main(sys.argv)
