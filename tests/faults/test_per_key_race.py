"""Q18.8 under real concurrency (issue 14, item 3): worker processes on one queue whose
jobs share concurrency keys, with ``max_running_per_key=1``.

Four worker processes of concurrency 20 work a queue of jobs spread over many keys.
Two detectors, both sound: a sampler counts each key's live leases in the database
while the fleet works (one snapshot per count: the committed leases at one instant,
which the limit bounds), and the handlers' own records give, per key, the most handlers
running at once (a handler runs inside its lease). Both must stay at most 1 for every
key, so jobs that share a key never overlap, while the fleet runs several keys at once
(the test is not vacuous). The history checker then checks every claim of the run.

The default run is short; ``-m slow`` runs the issue's size: 10,000 jobs on 100 keys.
"""

from __future__ import annotations

import pytest
import trio
from test_limits_race import _handler_intervals, _most_at_once

pytest.importorskip("psycopg", reason="the fault tests need psycopg 3")

WORKERS, CONCURRENCY = 4, 20


async def _per_key_limit(pg_dsn, schema, open_fleet, jobs: int, keys: int) -> None:
    async with open_fleet(pg_dsn, schema) as fleet:
        queue = fleet.store.queue("tenants")
        await queue.set_limits(max_running_per_key=1)
        workers = [
            await fleet.spawn("tenants", concurrency=CONCURRENCY, poll_interval_s=30, sleep_s=0.01)
            for _ in range(WORKERS)
        ]
        tenant = [f"tenant-{i % keys}" for i in range(jobs)]
        ids = await queue.enqueue_many([b"t"] * jobs, concurrency_keys=tenant)
        key_of = dict(zip(ids, tenant, strict=True))
        most_live = 0
        busiest = (
            "SELECT coalesce(max(n), 0), count(*) FROM (SELECT count(*) AS n FROM {schema}.jobs "
            "WHERE queue = 'tenants' AND state = 'processing' AND claim_expires_at >= now() "
            "GROUP BY concurrency_key) AS k"
        )
        keys_at_once = 0
        while await fleet.count("jobs") > 0:
            ((most, running_keys),) = await fleet.fetch(busiest)
            most_live = max(most_live, int(most))
            keys_at_once = max(keys_at_once, int(running_keys))
            await trio.sleep(0.005)
        report = await fleet.check_history(ids)
        intervals = _handler_intervals(workers)
        assert len(intervals) >= jobs, f"{len(intervals)} handler runs for {jobs} jobs"
        by_key: dict[str, list[tuple[float, float]]] = {}
        for w in workers:
            ends = {(r["pid"], r["id"], r["attempt"]): r["t"] for r in w.events("handler_end")}
            for r in w.events("handler_start"):
                end = ends.get((r["pid"], r["id"], r["attempt"]))
                if end is not None:
                    by_key.setdefault(key_of[r["id"]], []).append((r["t"], end))
        overlaps = {key: n for key, spans in by_key.items() if (n := _most_at_once(spans)) > 1}
        print(
            f"\n{report.summary()}; {len(intervals)} handler runs on {len(by_key)} keys; at "
            f"most {most_live} live leases of one key sampled, {keys_at_once} keys at once"
        )
        assert overlaps == {}, f"handlers of one key overlapped: {overlaps}"
        assert most_live <= 1, f"{most_live} live leases of one key under max_running_per_key=1"
        assert len(by_key) == keys, f"handlers ran for {len(by_key)} of {keys} keys"
        assert keys_at_once > 1, "the fleet never ran two keys at once"


async def test_q18_8_per_key_limit_holds_across_worker_processes(pg_dsn, schema, open_fleet):
    await _per_key_limit(pg_dsn, schema, open_fleet, jobs=400, keys=20)


@pytest.mark.slow
async def test_q18_8_per_key_limit_holds_across_worker_processes_long(pg_dsn, schema, open_fleet):
    await _per_key_limit(pg_dsn, schema, open_fleet, jobs=10_000, keys=100)
