"""Long run (issue 5, item 9; slow, not run in CI): 1,000,000 jobs through two worker
processes with a producer keeping a bounded backlog. Reports jobs/s, each process's RSS
over time (it must stay flat: no leak) and the tables' size after the sweeps, and runs the
history checker over the whole record, in shards of job ids to bound its memory.

``ALKSTORE_LONG_RUN_JOBS`` sets the number of jobs (default 1,000,000).
"""

from __future__ import annotations

import io
import json
import os
import re
import statistics
import time

import pytest
import trio
from _figures import history_figures

from alkstore_trio import QueueOpts
from alkstore_trio.testing import FinalState, check_history, load_history

pytest.importorskip("psycopg", reason="the fault tests need psycopg 3")

pytestmark = pytest.mark.slow

TOTAL = int(os.environ.get("ALKSTORE_LONG_RUN_JOBS", "1000000"))
BACKLOG = 20_000
BATCH = 1_000
#: The most a process's RSS may grow from the second to the last quarter of the run.
RSS_GROWTH_MAX_KIB = 50 * 1024
_JOB_ID = re.compile(r'"id": (\d+)')


def stopped_stats(path) -> dict:
    """The ``stats`` of the ``stopped`` record, read from the file's end (the records of
    a long run are too many to parse whole)."""
    with open(path, "rb") as stream:
        stream.seek(max(0, os.path.getsize(path) - 65536))
        tail = stream.read().decode("utf-8", errors="replace")
    (stopped,) = [line for line in tail.splitlines() if line.startswith('{"ev": "stopped"')]
    return json.loads(stopped)["stats"]


def check_history_in_shards(paths, enqueued: list[int], shards: int):
    """:func:`check_history` per shard of job ids (``id % shards``); worker-level lines
    go to every shard. Returns the reports."""
    reports = []
    for shard in range(shards):
        kept = []
        for path in paths:
            with open(path, encoding="utf-8") as stream:
                for line in stream:
                    found = _JOB_ID.search(line)
                    if found is None or int(found.group(1)) % shards == shard:
                        kept.append(line)
        events = load_history([io.StringIO("".join(kept))], time_base="wall")
        del kept
        report = check_history(
            events,
            enqueued=[i for i in enqueued if i % shards == shard],
            final=FinalState(),
            slack_s=1.0,
        )
        report.assert_ok()
        reports.append(report)
    return reports


async def test_r10_long_run_jobs_through_two_workers_rss_flat_nothing_lost(
    pg_dsn, schema, open_fleet, figures
):
    enqueued: list[int] = []
    rss: dict[str, list[tuple[float, int]]] = {}
    sizes: list[int] = []
    async with open_fleet(pg_dsn, schema) as fleet:
        queue = fleet.store.queue("long", QueueOpts(visibility_timeout_s=30))
        procs = [
            await fleet.spawn(
                "long",
                concurrency=50,
                poll_interval_s=1,
                sweep_interval_s=10,
                handler_records=False,
            )
            for _ in range(2)
        ]
        for proc in procs:
            rss[proc.app] = []
        started = time.monotonic()

        async def live() -> int:
            return await fleet.count("jobs")

        async def sample(*, task_status=trio.TASK_STATUS_IGNORED):
            task_status.started()
            while True:
                for proc in procs:
                    kib = proc.rss_kib()
                    if kib is not None:
                        rss[proc.app].append((time.monotonic() - started, kib))
                ((size,),) = await fleet.fetch(
                    "SELECT pg_total_relation_size(%s::regclass)", [f'"{fleet.schema}".jobs']
                )
                sizes.append(int(size))
                await trio.sleep(5)  # the sampling cadence

        async with trio.open_nursery() as nursery:
            await nursery.start(sample)
            while len(enqueued) < TOTAL:
                if await live() < BACKLOG:
                    n = min(BATCH, TOTAL - len(enqueued))
                    enqueued.extend(await queue.enqueue_many([b"x"] * n))
                else:
                    await trio.sleep(0.05)  # the producer's pace, not a wait

            async def drained():
                return await live() == 0

            await fleet.wait_until(drained, timeout_s=600, step_s=0.5, what="the drain")
            elapsed_s = time.monotonic() - started
            nursery.cancel_scope.cancel()

        for proc in procs:
            assert proc.process.poll() is None, proc.stderr()
            proc.terminate()
        for proc in procs:
            assert await proc.wait_exit() == 0, proc.stderr()
        assert await fleet.count("dead_jobs") == 0
        ((jobs_size, dead_size),) = await fleet.fetch(
            "SELECT pg_total_relation_size(%s::regclass), pg_total_relation_size(%s::regclass)",
            [f'"{fleet.schema}".jobs', f'"{fleet.schema}".dead_jobs'],
        )

    stats = [stopped_stats(proc.records_path) for proc in procs]
    assert sum(s["acked"] for s in stats) + sum(s["lease_lost"] for s in stats) >= TOTAL
    check_started = time.monotonic()
    shards = max(1, TOTAL // 100_000)
    reports = check_history_in_shards([p.records_path for p in procs], enqueued, shards)
    check_s = time.monotonic() - check_started
    assert sum(r.acked for r in reports) == TOTAL

    growth = {}
    for app, samples in rss.items():
        values = [kib for _, kib in samples]
        # Warm-up (imports, pools, first batches) is the first quarter: compare the
        # second quarter with the last.
        quarter = max(1, len(values) // 4)
        first = statistics.median(values[quarter : 2 * quarter] or values)
        last = statistics.median(values[-quarter:])
        growth[app] = last - first
        assert last - first <= RSS_GROWTH_MAX_KIB, (app, samples)
    print(
        f"\nlong run: {TOTAL} jobs through 2 workers in {elapsed_s:.0f}s = "
        f"{TOTAL / elapsed_s:.0f} jobs/s; acked per worker {[s['acked'] for s in stats]}, "
        f"lease lost {[s['lease_lost'] for s in stats]}; RSS (MiB) over time "
        + "; ".join(
            f"{app}: "
            + " ".join(
                f"{t:.0f}s={kib / 1024:.0f}" for t, kib in samples[:: max(1, len(samples) // 8)]
            )
            for app, samples in rss.items()
        )
        + f"; RSS growth 2nd->last quarter (KiB) {growth}; jobs table size peak "
        f"{max(sizes) / 2**20:.1f} MiB, after the drain and sweeps {jobs_size / 2**20:.1f} MiB "
        f"(dead_jobs {dead_size / 2**20:.2f} MiB); history checked in {shards} shards "
        f"({check_s:.0f}s): {sum(r.claims for r in reports)} claims, "
        f"{sum(r.reclaims for r in reports)} reclaims, "
        f"{sum(len(r.violations) for r in reports)} violations"
    )
    checked = [history_figures(report) for report in reports]
    figures.record(
        jobs=TOTAL,
        workers=len(procs),
        jobs_per_s=round(TOTAL / elapsed_s),
        rss_growth_max_kib=max(growth.values()),
        jobs_table_mib_after=round(jobs_size / 2**20, 2),
        **{name: sum(c[name] for c in checked) for name in checked[0]},
    )
