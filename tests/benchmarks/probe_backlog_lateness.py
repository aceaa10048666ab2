"""R11: where the memory engine's ``backlog`` lateness (``bench_delays.py``) goes.

Runs the benchmark's ``backlog`` case once on the in-memory engine through a
``ForwardingEngine`` that stamps every ``claim`` and ``next_due_in_s`` call (wall clock,
the engine's clock here), and sorts each job whose claim began more than 3 ms after its
``run_at`` into one of two causes:

- *skipped*: its ``run_at`` fell between a short claim's start and the end of the
  ``next_due_in_s`` lookup that followed it. The claim ran before the job was due, the
  lookup after, and the lookup answers only run_at times later than its own now: the
  worker sleeps to the next due time and claims this job only then;
- *late timer*: the worker's claim for the due time it knew began late (scheduling).

Usage: ``python tests/benchmarks/probe_backlog_lateness.py`` (one run, about 6 s).
"""

from __future__ import annotations

import itertools
import random
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))

import bench_delays  # the benchmark's own case

from alkstore_trio import open_store
from alkstore_trio.engine import ForwardingEngine, MemoryEngine

LATE_S = 0.003


class Stamped(ForwardingEngine):
    """Stamps ``claim`` and ``next_due_in_s``: (kind, start, end) and each job's claim."""

    def __init__(self) -> None:
        super().__init__(MemoryEngine())
        self.calls: list[tuple[str, float, float]] = []
        self.claimed: dict[int, tuple[float, float]] = {}  # id -> (claim start, run_at)

    async def claim(self, queue, worker_id, n):  # type: ignore[no-untyped-def]
        start = time.time()
        jobs = await super().claim(queue, worker_id, n)
        self.calls.append(("claim", start, time.time()))
        for job in jobs:
            self.claimed[job.id] = (start, job.run_at.timestamp())
        return jobs

    async def next_due_in_s(self, queue):  # type: ignore[no-untyped-def]
        start = time.time()
        answer = await super().next_due_in_s(queue)
        self.calls.append(("due", start, time.time()))
        return answer


async def main() -> None:
    rng = random.Random("13-backlog")
    delays = [rng.uniform(*bench_delays.DELAYS_S) for _ in range(bench_delays.SAMPLES)]
    engine = Stamped()
    async with open_store(engine) as store:
        late = sorted(await bench_delays._measure(store, "backlog", delays))
    calls = sorted(engine.calls, key=lambda c: c[1])
    windows = [
        (a[1], b[2]) for a, b in itertools.pairwise(calls) if (a[0], b[0]) == ("claim", "due")
    ]
    slow = {i: s - due for i, (s, due) in engine.claimed.items() if s - due > LATE_S}
    skipped = {i for i in slow if any(a <= engine.claimed[i][1] <= z for a, z in windows)}

    def p(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, round(q * (len(values) - 1)))]

    print(f"lateness ms: p50 {p(late, 0.5):.1f}  p99 {p(late, 0.99):.1f}  max {late[-1]:.1f}")
    print(f"claims begun > {LATE_S * 1000:g} ms after run_at: {len(slow)} of {len(late)}")
    for name, ids in (("skipped", skipped), ("late timer", set(slow) - skipped)):
        ms = sorted(slow[i] * 1000 for i in ids) or [0.0]
        print(
            f"  {name}: {len(ids)} jobs, claim began p50 {p(ms, 0.5):.1f} / "
            f"max {ms[-1]:.1f} ms late"
        )


if __name__ == "__main__":
    trio.run(main)
