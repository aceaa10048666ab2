"""Bloat soak (issue 5, item 8; R2, Q2): a steady producer and two worker processes while
another session holds a REPEATABLE READ snapshot open for the middle half of the run, so
that no dead row version of the queue's tables can be removed meanwhile. Claim latency
(enqueue to claim, per job) stays bounded and recovers once the snapshot is gone, and the
library itself never sits ``idle in transaction`` (every operation is one autocommit
statement). Dead tuples and latency are printed per phase (``pytest -s``).

The short version runs in CI; the long one is marked slow.
"""

from __future__ import annotations

import statistics
import time

import pytest
import trio
from _figures import history_figures

from alkstore_trio import QueueOpts

psycopg = pytest.importorskip("psycopg", reason="the fault tests need psycopg 3")

#: The application_name of this test's own sessions (as conftest.TEST_APP).
TEST_APP = "alkstore-trio-tests:faults"

PHASES = ("before", "during", "after")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class SnapshotHolder:
    """A session of the test (sync psycopg, driven from a thread) holding a REPEATABLE
    READ snapshot open: ``idle in transaction``, like a forgotten report query."""

    def __init__(self, dsn: str) -> None:
        self._conn = psycopg.connect(dsn, application_name=TEST_APP + ":snapshot")
        self._conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ

    async def hold(self, schema: str) -> None:
        query = psycopg.sql.SQL("SELECT count(*) FROM {}.jobs").format(
            psycopg.sql.Identifier(schema)
        )
        await trio.to_thread.run_sync(self._conn.execute, query)  # takes the snapshot

    async def vacuum_dead_tuples(self, dsn: str, schema: str) -> int:
        """``VACUUM`` the jobs table (from another, autocommit session); its
        ``n_dead_tup`` right after: what the vacuum could not remove."""

        def vacuum() -> int:
            with psycopg.connect(dsn, autocommit=True, application_name=TEST_APP) as conn:
                table = psycopg.sql.Identifier(schema, "jobs")
                conn.execute(psycopg.sql.SQL("VACUUM {}").format(table))
                row = conn.execute(
                    "SELECT n_dead_tup FROM pg_stat_user_tables "
                    "WHERE schemaname = %s AND relname = 'jobs'",
                    [schema],
                ).fetchone()
                return int(row[0]) if row else 0

        return await trio.to_thread.run_sync(vacuum)

    async def release(self) -> None:
        await trio.to_thread.run_sync(self._conn.commit)

    def close(self) -> None:
        self._conn.close()


async def run_soak(pg_dsn, schema, open_fleet, *, phase_s: float, batch: int, every_s: float):
    """Returns the figures per phase; asserts the invariants."""
    enqueued_at: dict[int, float] = {}
    phase_of: dict[int, str] = {}
    idle_in_tx: list[tuple] = []
    dead_tuples: dict[str, list[int]] = {phase: [] for phase in PHASES}
    phase = "before"
    holder = SnapshotHolder(pg_dsn)
    try:
        async with open_fleet(pg_dsn, schema) as fleet:
            queue = fleet.store.queue("soak", QueueOpts(visibility_timeout_s=30))
            procs = [
                await fleet.spawn("soak", concurrency=10, poll_interval_s=1, handler_records=False)
                for _ in range(2)
            ]
            apps = [name for proc in procs for name in (proc.app, proc.app + ":listen")]

            producing = True

            async def produce(*, task_status=trio.TASK_STATUS_IGNORED):
                # Stopped by a flag, never cancelled: an enqueue_many cancelled after its
                # commit would leave jobs whose ids were never recorded.
                task_status.started()
                while producing:
                    ids = await queue.enqueue_many([b"x"] * batch)
                    now = time.time()
                    for job_id in ids:
                        enqueued_at[job_id] = now
                        phase_of[job_id] = phase
                    await trio.sleep(every_s)  # the producer's pace, not a wait

            async def sample(*, task_status=trio.TASK_STATUS_IGNORED):
                task_status.started()
                tick = 0
                while producing:
                    rows = await fleet.fetch(
                        "SELECT application_name, state, now() - state_change "
                        "FROM pg_stat_activity WHERE application_name = ANY(%s) "
                        "AND state LIKE 'idle in transaction%%'",
                        [apps],
                    )
                    idle_in_tx.extend(rows)
                    if tick % 10 == 0:
                        ((dead,),) = await fleet.fetch(
                            "SELECT coalesce(max(n_dead_tup), 0) FROM pg_stat_user_tables "
                            "WHERE schemaname = %s AND relname = 'jobs'",
                            [schema],
                        )
                        dead_tuples[phase].append(int(dead))
                    tick += 1
                    await trio.sleep(0.1)  # the sampling cadence

            async with trio.open_nursery() as nursery:
                await nursery.start(produce)
                await nursery.start(sample)
                await trio.sleep(phase_s)  # the scenario's phases: timed on purpose
                await holder.hold(schema)
                phase = "during"
                await trio.sleep(phase_s * 2)
                kept_by_snapshot = await holder.vacuum_dead_tuples(pg_dsn, schema)
                await holder.release()
                phase = "after"
                await trio.sleep(phase_s)
                producing = False  # both tasks return; the last batch is recorded

            async def drained():
                return await fleet.count("jobs") == 0

            await fleet.wait_until(drained, timeout_s=60, step_s=0.2, what="an empty live table")
            for proc in procs:
                assert proc.process.poll() is None, proc.stderr()
                proc.terminate()
            for proc in procs:
                assert await proc.wait_exit() == 0, proc.stderr()
            report = await fleet.check_history(list(enqueued_at))
            ((dead_end,),) = await fleet.fetch(
                "SELECT coalesce(max(n_dead_tup), 0) FROM pg_stat_user_tables "
                "WHERE schemaname = %s AND relname = 'jobs'",
                [schema],
            )
            kept_after = await holder.vacuum_dead_tuples(pg_dsn, schema)
    finally:
        holder.close()

    latency: dict[str, list[float]] = {p: [] for p in PHASES}
    for proc in procs:
        for record in proc.events("claim"):
            latency[phase_of[record["id"]]].append(record["t"] - enqueued_at[record["id"]])
    figures = {
        p: {
            "jobs": len(latency[p]),
            "p50": statistics.median(latency[p]),
            "p99": percentile(latency[p], 0.99),
            "max": max(latency[p]),
            "dead": dead_tuples[p],
        }
        for p in PHASES
    }
    # The library never leaves a transaction open between statements.
    assert idle_in_tx == []
    assert report.acked == len(enqueued_at)
    # Bounded: woken pickups, at worst the re-poll (1 s) plus a loaded machine's second.
    for p in PHASES:
        assert figures[p]["p99"] <= 2.0, figures
    # Recovering: once the snapshot is gone, p99 is back near where it started.
    before, after = figures["before"]["p99"], figures["after"]["p99"]
    assert after <= max(3 * before, before + 0.5), figures
    # The snapshot is what kept the dead row versions: a vacuum removes them once it is gone.
    assert kept_after < max(kept_by_snapshot, 1)
    return figures, report, (int(dead_end), kept_by_snapshot, kept_after), len(idle_in_tx)


def describe(figures, report, dead_end) -> str:
    parts = [
        f"{p}: {f['jobs']} jobs, claim latency p50 {f['p50'] * 1000:.0f}ms p99 "
        f"{f['p99'] * 1000:.0f}ms max {f['max'] * 1000:.0f}ms, n_dead_tup samples "
        f"{f['dead'][:1] + f['dead'][-1:]}"
        for p, f in figures.items()
    ]
    end, kept_by_snapshot, kept_after = dead_end
    return "; ".join(parts) + (
        f"; n_dead_tup at the end {end}; VACUUM while the snapshot was held left "
        f"{kept_by_snapshot} dead tuples, after it {kept_after}; history: {report.summary()}"
    )


def soak_figures(phases, report, dead_end, idle_in_tx: int, *, snapshot_held_s: float) -> dict:
    """The figures of a soak for the figures file (``tests/_figures.py``)."""
    end, kept_by_snapshot, kept_after = dead_end
    figures = {"faults_injected": 1, "snapshot_held_s": snapshot_held_s}
    for p, f in phases.items():
        figures[f"claim_p99_{p}_ms"] = round(f["p99"] * 1000)
    figures.update(
        dead_tuples_at_end=end,
        dead_tuples_kept_by_snapshot=kept_by_snapshot,
        dead_tuples_after=kept_after,
        idle_in_transaction_seen=idle_in_tx,
        **history_figures(report),
    )
    return figures


async def test_r2_bloat_soak_short_claim_latency_bounded_never_idle_in_transaction(
    pg_dsn, schema, open_fleet, figures
):
    phases, report, dead_end, idle_in_tx = await run_soak(
        pg_dsn, schema, open_fleet, phase_s=5, batch=5, every_s=0.05
    )
    print(
        "\nbloat soak (20 s, ~100 jobs/s, snapshot held 10 s): "
        + describe(phases, report, dead_end)
    )
    figures.record(**soak_figures(phases, report, dead_end, idle_in_tx, snapshot_held_s=10))


@pytest.mark.slow
async def test_r2_bloat_soak_long_claim_latency_bounded_never_idle_in_transaction(
    pg_dsn, schema, open_fleet, figures
):
    phases, report, dead_end, idle_in_tx = await run_soak(
        pg_dsn, schema, open_fleet, phase_s=60, batch=20, every_s=0.05
    )
    print(
        "\nbloat soak (240 s, ~400 jobs/s, snapshot held 120 s): "
        + describe(phases, report, dead_end)
    )
    figures.record(**soak_figures(phases, report, dead_end, idle_in_tx, snapshot_held_s=120))
