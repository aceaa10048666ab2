"""A stale claim never starts its handler (issue 5, item 5; R-D6): a worker frozen with
SIGSTOP while its claim is answered, resumed after the lease lapsed by its own clock.

The freeze lands exactly between the claim and the handlers' start: the test holds a
table lock that the worker's claim statement waits for, stops the worker, lets the claim
commit (its answer waits in the socket), and resumes the worker only once the store's
leases have lapsed. Before item 5 the worker started those handlers (cancelled within a
millisecond, outcome discarded); now its book refuses them before the first line runs:
each such claim counts as ``lease_lost``, and the jobs run once they are reclaimed.
"""

from __future__ import annotations

import time

import pytest

from alkstore_trio import QueueOpts

psycopg = pytest.importorskip("psycopg", reason="the fault tests need psycopg 3")
from psycopg import sql as pgsql  # noqa: E402

VT_S = 2.0


async def test_item5_a_claim_whose_lease_lapsed_before_its_start_never_runs(
    pg_dsn, schema, open_fleet
):
    n = 3
    async with open_fleet(pg_dsn, schema) as fleet:
        queue = fleet.store.queue("stale", QueueOpts(visibility_timeout_s=VT_S, max_attempts=5))
        worker = await fleet.spawn(
            "stale", concurrency=n, sleep_s=0.05, poll_interval_s=0.5, hold=True, wait_ready=False
        )
        await worker.wait_held()
        ids = await queue.enqueue_many([b"job"] * n)
        with psycopg.connect(pg_dsn, autocommit=False) as locker:
            locker.execute(
                pgsql.SQL("LOCK TABLE {}.jobs IN EXCLUSIVE MODE").format(pgsql.Identifier(schema))
            )
            worker.release()
            await worker.wait_ready()

            async def claim_waits_on_the_lock():
                rows = await fleet.fetch(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                    "AND wait_event_type = 'Lock' AND query ILIKE '%%claim%%'",
                    (worker.app,),
                )
                return rows[0][0] >= 1

            await fleet.wait_until(claim_waits_on_the_lock, timeout_s=30, what="a blocked claim")
            await worker.pause()
            paused_at = time.time()
            locker.commit()  # the claim commits; its answer waits in the frozen socket

        async def leases_lapsed():
            # The store's leases lapsed (so, by a clock advancing alike, the worker's too).
            claimed = await fleet.count("jobs", "claim_expires_at IS NOT NULL")
            lapsed = await fleet.count("jobs", "claim_expires_at < now()")
            return claimed == n and lapsed == n

        await fleet.wait_until(leases_lapsed, timeout_s=30, what="the leases to lapse")
        worker.resume()
        resumed_at = time.time()
        await fleet.wait_until(
            lambda: len(worker.events("ack")) == n, timeout_s=30, what="the reclaimed jobs"
        )
        worker.terminate()
        assert await worker.wait_exit() == 0, worker.stderr()
        report = await fleet.check_history(ids, slack_s=resumed_at - paused_at + 1)

    starts = {(r["id"], r["attempt"]) for r in worker.events("handler_start")}
    assert starts == {(i, 2) for i in ids}  # never attempt 1: its lease had lapsed
    lost = {(r["id"], r["attempt"]) for r in worker.events("lease_lost")}
    assert lost == {(i, 1) for i in ids}
    assert not [r for r in worker.events("start") if r["attempt"] == 1]
    (stats,) = [r["stats"] for r in worker.events("stopped")]
    assert (stats["lease_lost"], stats["started"], stats["acked"]) == (n, n, n)
    print(
        f"\nstale claims: frozen {resumed_at - paused_at:.1f}s with {n} claims answered "
        f"(visibility {VT_S:g}s); none started; history: {report.summary()}"
    )
