"""The worker's client cost per job in CPU instructions, for an A/B that noise cannot
swamp.

On a shared two-core machine the burn-down's client CPU per job (``bench_worker.py
--ab``) varies by ±15 % from run to run, which hides a 5 % change however many rounds
are taken. Instructions do not vary with load: this probe runs a one-process ``Worker``
(concurrency 100, claim batches of 100, a no-op handler) under valgrind's callgrind,
which counts every instruction the process executes, and takes the difference between a
small and a large burn-down (``--small`` and ``--large`` jobs, same everything else).
Start-up, imports, connecting and the schema's creation cancel out; what is left divided
by the extra jobs is the instructions one more job costs the worker process (Python's
own work, psycopg's, the kernel calls' user side; not the server's). Two runs of one
commit agree within about 1-2 %.

Each ``--ab`` ref runs from a detached worktree of this repository under /tmp (as in
``bench_worker.py --ab``), the working tree as ``HEAD*``; every side makes its own
schema (``migrate="apply"``) and enqueues with its own code. Two processes run at once
(one per core); callgrind slows Python about 50×, so a side takes one to two minutes.

Run: ``python tests/benchmarks/probe_worker_instructions.py --ab 172fa40,6b648b0
[--small 1000] [--large 5000]``. The server is ``ALKSTORE_BENCH_DSN``, else
``ALKSTORE_TEST_DSN``, else ``postgresql://postgres@127.0.0.1:5432/test``. Needs
``valgrind``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
ROOT = Path(__file__).resolve().parents[2]

#: The burn-down each side runs: ``python -c CHILD DSN JOBS`` with its checkout first on
#: ``sys.path``. Its own schema, ``jobs`` one-byte jobs enqueued 1000 a call, ANALYZE,
#: then a Worker drains them; the schema is dropped at the end.
CHILD = """
import secrets, sys, psycopg, trio, alkstore_trio
dsn, jobs = sys.argv[1], int(sys.argv[2])
schema = "alk_instr_" + secrets.token_hex(4)

async def main():
    try:
        async with alkstore_trio.open_store(dsn, schema=schema, migrate="apply") as store:
            queue, left = store.queue("bench"), jobs
            while left:
                n = min(1000, left)
                await queue.enqueue_many([b"x"] * n)
                left -= n
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"ANALYZE {schema}.jobs")
        async with alkstore_trio.open_store(dsn, schema=schema) as store:
            async def noop(job):
                pass

            worker = alkstore_trio.Worker(
                store, {"bench": noop}, concurrency=100, claim_batch_max=100,
                poll_interval_s=5.0, shutdown_grace_s=5.0,
            )
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                while worker.statistics().acked < jobs:
                    await trio.sleep(0.01)
                worker.stop()
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")

trio.run(main)
"""


def dsn() -> str:
    return (
        os.environ.get("ALKSTORE_BENCH_DSN") or os.environ.get("ALKSTORE_TEST_DSN") or DEFAULT_DSN
    )


def checkout(ref: str) -> tuple[str, Path]:
    """A detached worktree of ``ref`` under /tmp (made once), and its short sha."""
    sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", ref],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    tree = Path(f"/tmp/alkstore-bench-ab-{sha}")
    if not tree.exists():
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), sha],
            check=True,
            capture_output=True,
        )
    return sha, tree


def instructions(tree: Path, jobs: int) -> int:
    """The instructions (callgrind's ``Ir``) of one burn-down of ``jobs`` jobs run by the
    code of ``tree``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONMALLOC": "malloc"}
        run = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                sys.executable,
                "-c",
                CHILD,
                dsn(),
                str(jobs),
            ],
            env=env,
            cwd=tree,  # `-c` puts the working directory first on sys.path
            capture_output=True,
            text=True,
        )
        found = re.search(r"Collected : (\d+)", run.stderr)
        if run.returncode != 0 or found is None:
            raise RuntimeError(f"the burn-down under callgrind failed:\n{run.stderr[-2000:]}")
        return int(found.group(1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ab", default="", help="commits to compare with the working tree")
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--large", type=int, default=5000)
    args = parser.parse_args(argv)
    if args.large <= args.small:
        parser.error("--large must be more jobs than --small")
    sides = [checkout(ref) for ref in args.ab.split(",") if ref]
    sides.append(("HEAD*", ROOT))
    runs = [(name, tree, jobs) for name, tree in sides for jobs in (args.small, args.large)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = list(pool.map(lambda run: instructions(run[1], run[2]), runs))
    per_job = {}
    for index, (name, _) in enumerate(sides):
        small, large = counts[2 * index], counts[2 * index + 1]
        per_job[name] = (large - small) / (args.large - args.small)
    base = per_job[sides[0][0]]
    print(f"instructions per job (callgrind, {args.large} - {args.small} jobs):")
    for name, value in per_job.items():
        print(f"  {name:<10} {value:>10,.0f}   {value / base:.3f}x of {sides[0][0]}")


if __name__ == "__main__":
    main()
