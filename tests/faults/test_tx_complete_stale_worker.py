"""Transactional completion under a frozen worker (issue 15 item 5; Q19.6, R16): a worker
process stops itself (SIGSTOP) inside ``current_job().transaction()`` right after its
handlers inserted their effect rows, their transactions open and their completions not
yet sent; its leases lapse, another worker reclaims the jobs and completes each in its
own transaction with its own effect row; then the frozen worker is resumed (SIGCONT).
Its handlers are cancelled by their lapsed leases (the worker's clock ran on while it
was frozen) or its refused heartbeat, or else their completions are refused
(``ClaimLost``): either way its transactions roll back whole, so each job has exactly
one effect row, the one of the claim that completed it, and 0 effects from superseded
claims. Real processes, real PostgreSQL; the history checker reads both workers'
records.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from _figures import history_figures

from alkstore_trio import QueueOpts

pytest.importorskip("psycopg", reason="the fault tests need psycopg 3")

VT_S = 3.0


async def test_q19_6_r16_a_frozen_workers_transactions_roll_back_and_leave_no_effect(
    pg_dsn, schema, open_fleet, figures
):
    n = 3
    async with open_fleet(pg_dsn, schema) as fleet:
        queue = fleet.store.queue(
            "txc", QueueOpts(visibility_timeout_s=VT_S, max_attempts=5, keep_completed_s=600)
        )
        table = f'"{schema}".effects'
        async with fleet.store.transaction() as tx:
            await tx.execute(
                f"CREATE TABLE {table} (job_id bigint NOT NULL, token bigint NOT NULL, "
                "pid integer NOT NULL)"
            )
        # R16's limits: one pool connection per open block, so a pool of n + 2.
        options = {"concurrency": n, "poll_interval_s": 1, "sleep_s": 0.1, "pool_size": n + 2}
        stale = await fleet.spawn("txc", freeze_in_tx=n, **options)
        ids = await queue.enqueue_many([f"txeffect={table}".encode()] * n)
        stat = Path(f"/proc/{stale.pid}/stat")

        def frozen() -> bool:
            stopped = stat.read_text().rpartition(")")[2].split()[0] in "Tt"
            return bool(stale.events("frozen_in_tx")) and stopped

        await fleet.wait_until(frozen, timeout_s=30, what="the worker frozen in its transactions")
        paused_at = time.time()
        stale_tokens = {r["id"]: r["claim_token"] for r in stale.events("tx_effect")}
        assert set(stale_tokens) == set(ids)

        fresh = await fleet.spawn("txc", **options)

        async def all_completed_by_fresh() -> bool:
            return len(fresh.events("completed_in_tx")) == n and await fleet.count("jobs") == 0

        await fleet.wait_until(
            all_completed_by_fresh, timeout_s=30, what="the other worker's completions"
        )
        # The frozen transactions are still open: their rows are invisible, not committed.
        assert await fleet.count("effects", f"pid = {stale.pid}") == 0

        stale.resume()
        resumed_at = time.time()
        await fleet.wait_until(
            lambda: len(stale.events("handler_end")) == n and not stale.in_flight(),
            timeout_s=30,
            what="the resumed worker's handlers to end",
        )
        stale.terminate()
        fresh.terminate()
        assert await stale.wait_exit() == 0, stale.stderr()
        assert await fresh.wait_exit() == 0, fresh.stderr()
        effects = await fleet.fetch("SELECT job_id, token, pid FROM {schema}.effects")
        completed = await fleet.count("completed_jobs", "state = 'completed'")
        report = await fleet.check_history(ids, slack_s=resumed_at - paused_at + 1)

    # Exactly one effect per job, the completing claim's; none from a superseded claim.
    fresh_tokens = {r["id"]: r["claim_token"] for r in fresh.events("tx_effect")}
    assert sorted(job_id for job_id, _, _ in effects) == sorted(ids)
    assert {job_id: token for job_id, token, _ in effects} == fresh_tokens
    assert {pid for _, _, pid in effects} == {fresh.pid}
    assert not set(stale_tokens.values()) & set(fresh_tokens.values())
    assert completed == n
    # The frozen worker's transactions rolled back: cancelled (lapsed lease, refused
    # heartbeat) or refused at their completion (ClaimLost); never completed.
    outcomes = {r["id"]: r["outcome"] for r in stale.events("handler_end")}
    assert set(outcomes) == set(ids)
    assert set(outcomes.values()) <= {"claim_lost", "cancelled"}, outcomes
    (stats,) = [r["stats"] for r in stale.events("stopped")]
    assert (stats["completed_in_tx"], stats["acked"], stats["lease_lost"]) == (0, 0, n)
    assert stale.events("completed_in_tx") == []
    claim_lost = sum(outcome == "claim_lost" for outcome in outcomes.values())
    print(
        f"\nfrozen worker: paused {resumed_at - paused_at:.1f}s inside {n} transactions "
        f"(visibility {VT_S:g}s); {n} jobs reclaimed and completed in-transaction by "
        f"another worker; after SIGCONT: {claim_lost} completions refused (ClaimLost), "
        f"{n - claim_lost} handlers cancelled (lapsed lease or refused heartbeat); effects: "
        f"{len(effects)} rows for {n} jobs, 0 from superseded claims; "
        f"history: {report.summary()}"
    )
    figures.record(
        faults_injected=1,
        paused_s=resumed_at - paused_at,
        visibility_timeout_s=VT_S,
        effects_from_superseded_claims=0,
        effect_rows=len(effects),
        completions_refused=claim_lost,
        **history_figures(report),
    )
