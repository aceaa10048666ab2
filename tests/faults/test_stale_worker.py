"""A stale worker (issue 5, item 3; Q4 lease fencing, R6): a worker frozen with SIGSTOP
past its leases, whose jobs another worker reclaims and finishes, then resumed with
SIGCONT. Everything it tries on those claims is refused, the refused heartbeat cancels
its handlers, and the rows stay as the other worker left them.
"""

from __future__ import annotations

import time

import pytest
import trio
from _figures import history_figures

from alkstore_trio import QueueOpts

pytest.importorskip("psycopg", reason="the fault tests need psycopg 3")

VT_S = 3.0


async def test_q4_r6_stale_worker_resumed_after_reclaim_is_refused_everything(
    pg_dsn, schema, open_fleet, figures
):
    n = 3
    async with open_fleet(pg_dsn, schema) as fleet:
        queue = fleet.store.queue("stale", QueueOpts(visibility_timeout_s=VT_S, max_attempts=5))
        # The stale worker's handlers would run for an hour; the other's finish at once.
        stale = await fleet.spawn("stale", concurrency=n, sleep_s=3600, poll_interval_s=1)
        ids = await queue.enqueue_many([b"job"] * n)
        await fleet.wait_until(
            lambda: len(stale.in_flight()) == n, timeout_s=30, what="the stale worker's handlers"
        )
        # Frozen well before its first heartbeat (VT / 3 after the claim): nothing of its
        # is on the wire.
        await stale.pause()
        paused_at = time.time()
        (first_claim,) = {r["claim_expires_at"] for r in stale.events("handler_start")}
        fresh = await fleet.spawn("stale", concurrency=n, sleep_s=0.2, poll_interval_s=1)

        async def all_acked_by_fresh():
            return len(fresh.events("ack")) == n and await fleet.count("jobs") == 0

        await fleet.wait_until(all_acked_by_fresh, timeout_s=30, what="the fresh worker's acks")
        reclaims = fresh.events("claim")
        assert {(r["id"], r["attempt"]) for r in reclaims} == {(i, 2) for i in ids}
        # The reclaim came after the stale worker's lease lapsed (the store's clock).
        assert min(r["claimed_at"] for r in reclaims) > first_claim

        stale.resume()
        resumed_at = time.time()
        await fleet.wait_until(
            lambda: len(stale.events("lease_lost")) == n and not stale.in_flight(),
            timeout_s=30,
            what="the stale worker to find its claims lost",
        )
        # Give it the chance to do something wrong once more (a full poll interval and a
        # heartbeat interval): the scenario, not a wait for a condition.
        await trio.sleep(1.5)

        # Nothing of the stale worker landed: the rows stay acked once, by the fresh one.
        assert await fleet.count("jobs") == 0
        assert await fleet.count("dead_jobs") == 0
        stale.terminate()
        fresh.terminate()
        assert await stale.wait_exit() == 0, stale.stderr()
        assert await fresh.wait_exit() == 0, fresh.stderr()
        # Its records written during the pause would only be those of the instant
        # before it (nothing was in flight): a slack of the pause is not needed, but a
        # reply received at SIGCONT would be logged then, so allow it.
        report = await fleet.check_history(ids, slack_s=resumed_at - paused_at + 1)

    lost = stale.events("lease_lost")
    assert {(r["id"], r["attempt"]) for r in lost} == {(i, 1) for i in ids}
    # Refused by the heartbeat (the first thing it tried), which cancelled the handlers.
    ends = {r["id"]: r["outcome"] for r in stale.events("handler_end")}
    assert ends == dict.fromkeys(ids, "cancelled")
    accepted = [
        r for r in stale.records() if r["ev"] in ("heartbeat", "ack", "retry", "release", "dead")
    ]
    assert accepted == []
    (stats,) = [r["stats"] for r in stale.events("stopped")]
    assert (stats["lease_lost"], stats["acked"], stats["released"]) == (n, 0, 0)
    assert sum(1 for r in fresh.events("ack")) == n
    refused_after_s = max(r["t"] for r in lost) - resumed_at
    print(
        f"\nstale worker: paused {resumed_at - paused_at:.1f}s (visibility {VT_S:g}s); "
        f"{n} claims reclaimed and acked by another worker; after SIGCONT its heartbeat was "
        f"refused and its {n} handlers cancelled within {refused_after_s:.2f}s; "
        f"history: {report.summary()}"
    )
    figures.record(
        faults_injected=1,
        paused_s=resumed_at - paused_at,
        visibility_timeout_s=VT_S,
        stale_claims_refused=len(lost),
        stale_ops_accepted=len(accepted),
        events_checked=len(stale.records()) + len(fresh.records()),
        **history_figures(report),
    )
