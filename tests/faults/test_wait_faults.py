"""Q19.4 on real processes: waits survive the loss of their LISTEN session.

Worker processes run kept jobs (each handler returns ``result of <id>``) while this
process waits for every one of them with ``queue.wait(..., poll_interval_s=3600)``: a poll
an hour away, so a wait can only end because an announcement reached it, or because the
store's listener reconnected and woke every waiter (announcements sent while it was away
are lost). Two faults:

- **the listener's connection is killed** (``pg_terminate_backend`` of the waiting store's
  LISTEN session, again and again while the jobs finish), on the shared server;
- **PostgreSQL restarts** (``pg_ctl restart -m fast``) under the waits, on a throwaway
  cluster of the test's own (slow).

Every wait must return its job ``completed`` with its own result, and the workers' records
must pass the history checker.
"""

from __future__ import annotations

import pytest
import trio
from _figures import history_figures

from alkstore_trio import EngineError, Job, QueueOpts, open_store

pytest.importorskip("psycopg", reason="the fault tests need psycopg 3")

#: A poll that never comes during the test: only announcements and resyncs end waits.
NEVER_S = 3600.0


async def _wait_through(
    fleet, dsn: str, fault, *, jobs: int, vt_s: float, job_s: float = 0.3
) -> dict[str, float]:
    """Enqueue ``jobs`` kept jobs (each handler sleeps ``job_s``), park a wait on each
    (from a store of this process's own), start two workers, run ``fault(waiter_app,
    acked)`` while they work, and check every wait's job and the history. Figures for the
    report."""
    app = f"alkf-{fleet.tag}-waiter"
    async with open_store(dsn, schema=fleet.schema, application_name=app, pool_size=4) as store:
        queue = store.queue("wait", QueueOpts(keep_completed_s=3600, visibility_timeout_s=vt_s))
        ids = await queue.enqueue_many([b"sleep=%g" % job_s] * jobs)
        got: dict[int, Job] = {}

        async def waiter(job_id: int) -> None:
            got[job_id] = await queue.wait(job_id, poll_interval_s=NEVER_S)

        async def listening() -> bool:
            rows = await fleet.fetch(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = %s "
                "AND query LIKE 'LISTEN%%done%%'",
                [app + ":listen"],
            )
            return bool(rows)

        async with trio.open_nursery() as nursery:
            for job_id in ids:
                nursery.start_soon(waiter, job_id)
            await fleet.wait_until(listening, timeout_s=30, what="the waiters' LISTEN on done")
            procs = [
                await fleet.spawn("wait", concurrency=10, poll_interval_s=1, connect_timeout_s=1)
                for _ in range(2)
            ]

            def acked() -> int:
                return sum(len(proc.events("ack")) for proc in procs)

            figures = await fault(app, acked)
            await fleet.wait_until(lambda: len(got) == jobs, timeout_s=60, what="every wait")
        for job_id in ids:
            job = got[job_id]
            assert job.state == "completed", (job_id, job.state, job.last_error)
            assert job.result == b"result of %d" % job_id, (job_id, job.result)
        for proc in procs:
            assert proc.process.poll() is None, proc.stderr()  # survived the fault
            proc.terminate()
        for proc in procs:
            assert await proc.wait_exit() == 0, proc.stderr()
        # The test's own store may hold connections the fault broke: read once they are
        # replaced (each broken one raises once and is discarded).
        await fleet.wait_until(_store_reads(fleet), timeout_s=30, what="the test's store")
        report = await fleet.check_history(set(ids))
        print(f"\nwaits through the fault: {figures}; history: {report.summary()}")
        return {**figures, "waits": jobs, "waits_ended": len(got), **history_figures(report)}


def _store_reads(fleet):
    async def reads() -> bool:
        try:
            await fleet.fetch("SELECT 1")
        except EngineError:
            return False
        return True

    return reads


async def _kill_sessions(fleet, app: str) -> int:
    rows = await fleet.fetch(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
        [app],
    )
    return len(rows)


async def test_q19_4_waits_survive_killing_their_listen_session(
    pg_dsn, schema, open_fleet, figures
):
    async def fault(app: str, acked) -> dict[str, float]:
        # Kill the LISTEN session again and again while the jobs finish: each time, the
        # acks committed before it listens again are announced to nobody, and only the
        # reconnect's wake-everyone can end their waits.
        await fleet.wait_until(lambda: acked() >= 1, timeout_s=60, what="the first ack")
        kills = 0
        while acked() < 70:
            kills += await _kill_sessions(fleet, app + ":listen")
            await trio.sleep(0.05)  # the fault's pace, not a wait for a condition
        return {"listen_sessions_killed": kills, "acked_when_last_killed": acked()}

    async with open_fleet(pg_dsn, schema) as fleet:
        # Jobs of 1 s: the 80 take about 4 s on the 20 slots, long enough for the kills
        # to start before the last acks even when this process is starved by a loaded
        # machine (with 0.3 s jobs, one full-suite run on a loaded machine saw all 80
        # acked before its first kill).
        measured = await _wait_through(fleet, pg_dsn, fault, jobs=80, vt_s=30, job_s=1.0)
    figures.record(**measured)
    assert measured["listen_sessions_killed"] >= 5


@pytest.mark.slow
async def test_q19_4_waits_survive_a_postgresql_restart(own_cluster, open_fleet, figures):
    async def fault(app: str, acked) -> dict[str, float]:
        await fleet.wait_until(lambda: acked() >= 15, timeout_s=60, what="15 acks")
        restart_s = await own_cluster.pg_ctl("restart", "-m", "fast")
        return {"restart_s": restart_s, "acked_before_restart": acked()}

    async with open_fleet(own_cluster.dsn, "alk_wait_restart") as fleet:
        measured = await _wait_through(fleet, own_cluster.dsn, fault, jobs=80, vt_s=3)
    figures.record(**measured)
