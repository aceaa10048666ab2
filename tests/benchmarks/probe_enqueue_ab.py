"""A/B of the library's enqueue path on two commits, interleaved in one run (Q15).

Unique keys (Q15) changed what every enqueue returns (``Enqueued`` instead of ``int``)
and added a check for keys in front of every engine's enqueue; jobs *without* a key must
not pay for that. This probe runs the same enqueues through the public API on the code
of an older commit (``--old-ref``, checked out once into ``/tmp/alkstore-bench-ab-<sha>``
as a detached worktree, as ``bench_worker.py --ab`` does) and on the working tree, each
in a fresh process, alternating which goes first round by round:

- ``pg single``: ``queue.enqueue`` one job at a time (PostgreSQL, native driver);
- ``pg many(1000)``: ``queue.enqueue_many`` of 1,000 jobs;
- ``memory single`` and ``memory many(1000)``: the same on the in-memory engine.

No keys anywhere: this is the cost of the feature for those who do not use it. A case's
result is the median over rounds of (new rate / old rate), with the interquartile range;
above 1.00 means the new code is faster. Each PostgreSQL run gets a schema of its own
(migrated by that commit's code, dropped afterwards).

Run: ``python tests/benchmarks/probe_enqueue_ab.py --old-ref fbf154b [--rounds 10]``.
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

#: The child: one run of every case on the code found first on sys.path.
CHILD = r"""
import json, sys, time
import trio
import alkstore_trio

DSN, SCHEMA, SINGLE, MANY, BATCHES = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
PAYLOAD = b'{"to": "ada@example.com", "template": "welcome"}'

async def cases(store, prefix, out):
    queue = store.queue("ab")
    for _ in range(50):
        await queue.enqueue(PAYLOAD)  # warm up: connections, prepared statements
    await queue.enqueue_many([PAYLOAD] * MANY)
    t0 = time.perf_counter()
    for _ in range(SINGLE):
        await queue.enqueue(PAYLOAD)
    out[prefix + " single"] = SINGLE / (time.perf_counter() - t0)
    payloads = [PAYLOAD] * MANY
    t0 = time.perf_counter()
    for _ in range(BATCHES):
        await queue.enqueue_many(payloads)
    out[prefix + " many(1000)"] = BATCHES * MANY / (time.perf_counter() - t0)

async def main():
    out = {}
    async with alkstore_trio.open_store(
        DSN, schema=SCHEMA, migrate="apply", pool_size=2, listen=False
    ) as store:
        await cases(store, "pg", out)
        async with store.transaction() as tx:
            await tx.execute(f'DROP SCHEMA "{SCHEMA}" CASCADE')
    async with alkstore_trio.open_store("memory://") as store:
        await cases(store, "memory", out)
    print(json.dumps(out))

trio.run(main)
"""


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


def _run(tree: Path, single: int, many: int, batches: int) -> dict[str, float]:
    schema = "ab_enqueue_" + secrets.token_hex(4)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    result = subprocess.run(
        [sys.executable, "-c", CHILD, DSN, schema, str(single), str(many), str(batches)],
        env=env,
        cwd="/tmp",
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-ref", required=True, help="git commit of the old code")
    parser.add_argument("--rounds", type=int, default=10, help="rounds (each runs both sides)")
    parser.add_argument("--single", type=int, default=2000, help="single enqueues per run")
    parser.add_argument("--batches", type=int, default=10, help="enqueue_many calls per run")
    args = parser.parse_args()
    old = _old_tree(args.old_ref)
    ratios: dict[str, list[float]] = {}
    rates: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    for round_no in range(args.rounds):
        order = [("old", old), ("new", ROOT)]
        if round_no % 2:
            order.reverse()
        results = {side: _run(tree, args.single, 1000, args.batches) for side, tree in order}
        for case, new_rate in results["new"].items():
            ratios.setdefault(case, []).append(new_rate / results["old"][case])
            for side in ("old", "new"):
                rates[side].setdefault(case, []).append(results[side][case])
        print(f"round {round_no + 1}: " + ", ".join(
            f"{case} {r[-1]:.3f}" for case, r in ratios.items()
        ), flush=True)  # fmt: skip
    print(f"\nnew ({ROOT.name}) / old ({args.old_ref}), {args.rounds} interleaved rounds:")
    print(f"{'case':<20} {'old jobs/s':>11} {'new jobs/s':>11} {'median':>7} {'IQR':>13}")
    for case, values in ratios.items():
        q1, _, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (values * 3)
        old_rate = statistics.median(rates["old"][case])
        new_rate = statistics.median(rates["new"][case])
        print(
            f"{case:<20} {old_rate:>11,.0f} {new_rate:>11,.0f} "
            f"{statistics.median(values):>7.3f} {q1:>6.3f}-{q3:<6.3f}"
        )


if __name__ == "__main__":
    main()
