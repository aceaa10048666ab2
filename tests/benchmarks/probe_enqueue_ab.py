"""A/B of the library's enqueue path on two commits, interleaved in one run (Q15).

Unique keys (Q15) changed what every enqueue returns (``Enqueued`` instead of ``int``)
and added a check for keys in front of every engine's enqueue; jobs *without* a key must
not pay for that. This probe runs the same enqueues through the public API on the code
of an older commit (``--old-ref``, checked out once into ``/tmp/alkstore-bench-ab-<sha>``
as a detached worktree, as ``bench_worker.py --ab`` does) and on the working tree: one
warm process per side (its stores open, statements prepared), told to run one chunk of
a case at a time, the two sides alternating chunk by chunk and swapping which goes
first, so both sides of each ratio saw the same moment of a shared machine:

- ``pg single``: ``queue.enqueue`` one job at a time (PostgreSQL, the default driver),
  200 per chunk;
- ``pg many(1000)``: one ``queue.enqueue_many`` of 1,000 jobs per chunk;
- ``memory single`` and ``memory many(1000)``: the same on the in-memory engine.

No keys anywhere: this is the cost of the feature for those who do not use it. A case's
result is the median over chunk pairs of (new rate / old rate), with the interquartile
range; above 1.00 means the new code is faster. Each side gets a PostgreSQL schema of
its own (migrated by that commit's code, dropped afterwards).

Run: ``python tests/benchmarks/probe_enqueue_ab.py --old-ref fbf154b [--chunks 30]``.
The server is ``ALKSTORE_BENCH_DSN``, else ``ALKSTORE_TEST_DSN``, else
``postgresql://postgres@127.0.0.1:5432/test``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DSN = os.environ.get(
    "ALKSTORE_BENCH_DSN",
    os.environ.get("ALKSTORE_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
)
PAYLOAD = b'{"to": "ada@example.com", "template": "welcome"}'

#: The child: a warm store on each engine, running one chunk of a case per line of stdin.
CHILD = r"""
import json, sys, time
import trio
import alkstore_trio

DSN, SCHEMA, SINGLE, MANY = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
PAYLOAD = b'{"to": "ada@example.com", "template": "welcome"}'

async def chunk(queue, case):
    t0 = time.perf_counter()
    if case == "single":
        for _ in range(SINGLE):
            await queue.enqueue(PAYLOAD)
        n = SINGLE
    else:
        await queue.enqueue_many([PAYLOAD] * MANY)
        n = MANY
    return n / (time.perf_counter() - t0)

async def main():
    async with alkstore_trio.open_store(
        DSN, schema=SCHEMA, migrate="apply", pool_size=2, listen=False
    ) as pg, alkstore_trio.open_store("memory://") as memory:
        queues = {"pg": pg.queue("ab"), "memory": memory.queue("ab")}
        for queue in queues.values():  # warm up: connections, prepared statements
            for _ in range(50):
                await queue.enqueue(PAYLOAD)
            await queue.enqueue_many([PAYLOAD] * MANY)
        print("ready", flush=True)
        while line := await trio.to_thread.run_sync(sys.stdin.readline):
            engine, case = line.split()
            if engine == "memory":
                # Keep the in-memory table small: the rows would slow the later chunks.
                handles = await queues["memory"].claim_batch("drain", 10**6)
                await queues["memory"].ack_batch([handle.id for handle in handles])
            print(json.dumps(await chunk(queues[engine], case)), flush=True)
        async with pg.transaction() as tx:
            await tx.execute(f'DROP SCHEMA "{SCHEMA}" CASCADE')

trio.run(main)
"""

CASES = [("pg", "single"), ("pg", "many"), ("memory", "single"), ("memory", "many")]


def _old_tree(ref: str) -> Path:
    sha = subprocess.run(
        ["git", "rev-parse", "--short", ref], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    tree = Path(f"/tmp/alkstore-bench-ab-{sha}")
    if not tree.exists():
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), sha],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
    return tree


class _Side:
    """One child process on the code of ``tree``."""

    def __init__(self, tree: Path, single: int, many: int) -> None:
        schema = "ab_enqueue_" + secrets.token_hex(4)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, DSN, schema, str(single), str(many)],
            env={**os.environ, "PYTHONPATH": str(tree)},
            cwd="/tmp",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"

    def chunk(self, engine: str, case: str) -> float:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(f"{engine} {case}\n")
        self.proc.stdin.flush()
        return float(json.loads(self.proc.stdout.readline()))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-ref", required=True, help="git commit of the old code")
    parser.add_argument("--chunks", type=int, default=30, help="chunk pairs per case")
    parser.add_argument("--single", type=int, default=200, help="single enqueues per chunk")
    args = parser.parse_args()
    sides = {
        "old": _Side(_old_tree(args.old_ref), args.single, 1000),
        "new": _Side(ROOT, args.single, 1000),
    }
    ratios: dict[str, list[float]] = {}
    rates: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    try:
        for chunk_no in range(args.chunks):
            for engine, case in CASES:
                name = f"{engine} {case if case == 'single' else 'many(1000)'}"
                order = ["old", "new"] if chunk_no % 2 == 0 else ["new", "old"]
                got = {side: sides[side].chunk(engine, case) for side in order}
                ratios.setdefault(name, []).append(got["new"] / got["old"])
                for side in ("old", "new"):
                    rates[side].setdefault(name, []).append(got[side])
    finally:
        for side in sides.values():
            side.close()
    print(f"new ({ROOT.name}) / old ({args.old_ref}), {args.chunks} interleaved chunk pairs:")
    print(f"{'case':<20} {'old jobs/s':>11} {'new jobs/s':>11} {'median':>7} {'IQR':>13}")
    for name, values in ratios.items():
        q1, _, q3 = statistics.quantiles(values, n=4)
        print(
            f"{name:<20} {statistics.median(rates['old'][name]):>11,.0f} "
            f"{statistics.median(rates['new'][name]):>11,.0f} "
            f"{statistics.median(values):>7.3f} {q1:>6.3f}-{q3:<6.3f}"
        )


if __name__ == "__main__":
    main()
