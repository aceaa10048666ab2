"""Throughput of the in-memory engine through one store (``just bench``).

Four cases, each on a fresh store with the wall clock, each over ``N`` jobs:

- ``claim_one + ack``: one claim and one ack per job (two engine round trips per job);
- ``claim_batch(100) + ack_batch``: 100 jobs per claim, one batched ack per claim;
- ``enqueue``: one enqueue call per job;
- ``enqueue_many(1000)``: 1000 jobs per call.

Run it as a script (``python tests/benchmarks/bench_memory.py [N]``) or through pytest
(``pytest tests/benchmarks -m bench -s``). Numbers for the project's machines are in
``docs/explanation/performance.md``.
"""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

import alkstore_trio

#: Jobs per case.
N = 10_000
#: Claim batch size of the batched case.
BATCH = 100
#: Jobs per ``enqueue_many`` call.
MANY = 1000
#: Queue options that keep every claim valid for the whole run.
OPTS = alkstore_trio.QueueOpts(visibility_timeout_s=3600)


@dataclass(frozen=True)
class Result:
    """One row of the table."""

    case: str
    jobs: int
    seconds: float

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds


async def _prefilled(store: alkstore_trio.Store, n: int) -> alkstore_trio.Queue:
    queue = store.queue("bench", OPTS)
    for start in range(0, n, MANY):
        await queue.enqueue_many([b"x"] * min(MANY, n - start))
    return queue


async def claim_one_and_ack(store: alkstore_trio.Store, n: int) -> Callable[[], Awaitable[int]]:
    queue = await _prefilled(store, n)

    async def run() -> int:
        done = 0
        while (handle := await queue.claim_one("bench")) is not None:
            done += await handle.ack()
        return done

    return run


async def claim_batch_and_ack_batch(
    store: alkstore_trio.Store, n: int
) -> Callable[[], Awaitable[int]]:
    queue = await _prefilled(store, n)

    async def run() -> int:
        done = 0
        while handles := await queue.claim_batch("bench", BATCH):
            done += await queue.ack_batch([handle.id for handle in handles])
        return done

    return run


async def enqueue_single(store: alkstore_trio.Store, n: int) -> Callable[[], Awaitable[int]]:
    queue = store.queue("bench", OPTS)

    async def run() -> int:
        for _ in range(n):
            await queue.enqueue(b"x")
        return n

    return run


async def enqueue_many(store: alkstore_trio.Store, n: int) -> Callable[[], Awaitable[int]]:
    queue = store.queue("bench", OPTS)

    async def run() -> int:
        done = 0
        for start in range(0, n, MANY):
            done += len(await queue.enqueue_many([b"x"] * min(MANY, n - start)))
        return done

    return run


CASES: dict[str, Callable[[alkstore_trio.Store, int], Awaitable[Callable[[], Awaitable[int]]]]] = {
    "claim_one + ack": claim_one_and_ack,
    f"claim_batch({BATCH}) + ack_batch": claim_batch_and_ack_batch,
    "enqueue (single)": enqueue_single,
    f"enqueue_many({MANY})": enqueue_many,
}


async def run_benchmarks(n: int = N) -> list[Result]:
    """Run every case on a fresh store; only the work itself is timed (not the setup)."""
    results = []
    for case, prepare in CASES.items():
        async with alkstore_trio.open_store("memory://") as store:
            run = await prepare(store, n)
            started = time.perf_counter()
            done = await run()
            seconds = time.perf_counter() - started
        if done != n:
            raise AssertionError(f"{case}: expected {n} jobs, did {done}")
        results.append(Result(case, n, seconds))
    return results


def machine() -> str:
    """A one-line description of the machine and the Python running the benchmark."""
    import os

    return (
        f"Python {platform.python_version()} ({platform.python_implementation()}), "
        f"trio {trio.__version__}, {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} cores"
    )


def format_table(results: list[Result]) -> str:
    """The results as a small Markdown table."""
    width = max(len(r.case) for r in results)
    lines = [
        f"| {'case':<{width}} | {'jobs':>6} | {'seconds':>7} | {'jobs/s':>8} |",
        f"| {'-' * width} | {'-' * 5}: | {'-' * 6}: | {'-' * 7}: |",
    ]
    lines += [
        f"| {r.case:<{width}} | {r.jobs:>6} | {r.seconds:>7.3f} | {r.jobs_per_s:>8,.0f} |"
        for r in results
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    n = int(argv[1]) if len(argv) > 1 else N
    results = trio.run(run_benchmarks, n)
    print(machine())
    print(format_table(results))


if __name__ == "__main__":
    main(sys.argv)
