"""R11: how late delayed and retried jobs start under a ``Worker`` (``just bench``).

Each case enqueues ``SAMPLES`` (200) jobs one call each, with delays drawn uniformly
from 0.2 to 2 s (seeded), into a running ``Worker`` (concurrency 50) whose re-poll is
left at 30 s, so a job that starts on time was woken by what the worker knew of its due
time, never by the re-poll. A job's lateness is its handler's first line
(``datetime.now(UTC)``) less its ``run_at``; on PostgreSQL ``run_at`` is on the server's
clock, which on this machine is the same clock (the server is local). Cases:

- ``delayed``: ``enqueue(delay_s=d)`` while the worker runs (the wake says when it is due);
- ``retried``: a job ready now whose handler raises ``Retry(delay_s=d)`` the first time
  (the worker knows its own retry's delay); the second start's lateness is counted;
- ``backlog``: the jobs are enqueued before the worker starts, due from three seconds
  later (no wake reached it: the short claims' lookups find each due time);

on the in-memory engine (real clock) and on PostgreSQL (the native driver). Reported:
the lateness distribution (p50, p90, p99, max, in ms) per case, and whether it meets the
issue's targets (p99 within 10 ms on the memory engine, 100 ms on PostgreSQL).

Run it as ``python tests/benchmarks/bench_delays.py`` or through pytest (``pytest
tests/benchmarks/test_bench_delays.py -m bench -s``). The server comes from
``ALKSTORE_BENCH_DSN``, else ``ALKSTORE_TEST_DSN``, else the local default.
"""

from __future__ import annotations

import os
import platform
import random
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

import trio

from alkstore_trio import Job, Retry, Store, Worker, open_store

SAMPLES: Final = 200
DELAYS_S: Final = (0.2, 2.0)
POLL_INTERVAL_S: Final = 30.0
CONCURRENCY: Final = 50
BACKLOG_HEAD_START_S: Final = 3.0
TARGET_MS: Final = {"memory": 10.0, "postgres": 100.0}
DEFAULT_DSN: Final = "postgresql://postgres@127.0.0.1:5432/test"
CASES: Final = ("delayed", "retried", "backlog")


def dsn() -> str:
    return (
        os.environ.get("ALKSTORE_BENCH_DSN") or os.environ.get("ALKSTORE_TEST_DSN") or DEFAULT_DSN
    )


@dataclass(frozen=True)
class Result:
    engine: str
    case: str
    lateness_ms: list[float]

    def quantile(self, q: float) -> float:
        ordered = sorted(self.lateness_ms)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    @property
    def on_target(self) -> bool:
        return self.quantile(0.99) <= TARGET_MS[self.engine]


async def _measure(store: Store, case: str, delays: list[float]) -> list[float]:
    queue = store.queue(f"delays-{case}")
    late: dict[int, float] = {}
    started: list[bytes] = []
    done = trio.Event()

    async def handler(job: Job) -> None:
        if case == "retried" and job.attempts == 1:
            raise Retry(delay_s=delays[int(job.payload)])
        late[job.id] = (datetime.now(UTC) - job.run_at).total_seconds() * 1000
        started.append(job.payload)
        if len(late) == len(delays):
            done.set()

    worker = Worker(
        store, {queue: handler}, concurrency=CONCURRENCY, poll_interval_s=POLL_INTERVAL_S
    )

    async def produce() -> None:
        # The backlog is due from three seconds after it is written (a few hundred ms on
        # PostgreSQL, more on a loaded machine), so no job is due before the worker starts.
        start = datetime.now(UTC) + timedelta(seconds=BACKLOG_HEAD_START_S)
        for index, delay in enumerate(delays):
            payload = str(index).encode()
            if case == "retried":
                await queue.enqueue(payload)
            elif case == "backlog":
                await queue.enqueue(payload, run_at=start + timedelta(seconds=delay))
            else:
                await queue.enqueue(payload, delay_s=delay)
        if case == "backlog" and datetime.now(UTC) >= start:
            raise RuntimeError("the backlog took longer to write than its head start")

    async with trio.open_nursery() as nursery:
        if case == "backlog":
            await produce()
        await nursery.start(worker.run)
        if case != "backlog":
            await produce()
        with trio.move_on_after(POLL_INTERVAL_S):  # a job found by the re-poll fails the run
            await done.wait()
        if not done.is_set():
            missing = sorted(set(range(len(delays))) - {int(p) for p in started})
            raise RuntimeError(f"{case}: {len(missing)} jobs did not start in time: {missing[:10]}")
        worker.stop()
    return list(late.values())


async def run_case(engine: str, case: str, samples: int = SAMPLES, seed: int = 13) -> Result:
    rng = random.Random(f"{seed}-{case}")
    delays = [rng.uniform(*DELAYS_S) for _ in range(samples)]
    if engine == "memory":
        async with open_store("memory://") as store:
            return Result(engine, case, await _measure(store, case, delays))
    schema = "alk_bench_delays_" + secrets.token_hex(4)
    try:
        async with open_store(dsn(), schema=schema, migrate="apply") as store:
            return Result(engine, case, await _measure(store, case, delays))
    finally:
        await _drop_schema(schema)


async def _drop_schema(schema: str) -> None:
    import psycopg

    def drop() -> None:
        # The name is ours: letters, digits and underscores only.
        with psycopg.connect(dsn(), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    await trio.to_thread.run_sync(drop)


async def run_benchmarks(samples: int = SAMPLES) -> list[Result]:
    return [
        await run_case(engine, case, samples) for engine in ("memory", "postgres") for case in CASES
    ]


def machine() -> str:
    return (
        f"Python {platform.python_version()}, trio {trio.__version__}, "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores"
    )


def format_table(results: list[Result]) -> str:
    lines = [
        "| engine | case | samples | p50 ms | p90 ms | p99 ms | max ms | p99 target |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        lines.append(
            f"| {r.engine} | {r.case} | {len(r.lateness_ms)} | {r.quantile(0.5):.1f} | "
            f"{r.quantile(0.9):.1f} | {r.quantile(0.99):.1f} | {max(r.lateness_ms):.1f} | "
            f"{'met' if r.on_target else 'MISSED'} (<= {TARGET_MS[r.engine]:g} ms) |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    results = trio.run(run_benchmarks)
    print(machine())
    print(format_table(results))
