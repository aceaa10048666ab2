"""LISTEN disabled (issue 5, item 7; R4): a worker process on a store opened with
``listen=False`` (as behind a transaction-pooling proxy, where LISTEN does not work)
opens no LISTEN session and still picks every job up within ``poll_interval_s`` + 1 s,
by re-polling alone. (The listener-killed half of item 7 is
``test_worker_faults.py::test_r3_listener_session_killed_...``.)
"""

from __future__ import annotations

import random
import time

import pytest
import trio
from _figures import history_figures

pytest.importorskip("psycopg", reason="the fault tests need psycopg 3")

POLL_S = 1.0


async def test_r4_poll_only_worker_process_picks_every_job_up_within_poll_interval(
    pg_dsn, schema, open_fleet, figures
):
    async with open_fleet(pg_dsn, schema) as fleet:
        queue = fleet.store.queue("poll")
        worker = await fleet.spawn("poll", listen=False, poll_interval_s=POLL_S, concurrency=4)
        sessions = await fleet.fetch(
            "SELECT application_name FROM pg_stat_activity WHERE application_name LIKE %s",
            [worker.app + "%"],
        )
        assert sessions  # its pool is there
        assert (worker.app + ":listen",) not in sessions

        rng = random.Random(5)
        pickups: dict[int, float] = {}
        for _ in range(8):
            # Enqueue at unrelated moments of the poll cycle (the scenario's pacing).
            await trio.sleep(rng.uniform(0, POLL_S))
            enqueued_at = time.time()
            job_id = await queue.enqueue(b"p")
            start = await fleet.wait_until(
                lambda job_id=job_id: next(
                    (r for r in worker.events("handler_start") if r["id"] == job_id), None
                ),
                timeout_s=POLL_S + 10,
                step_s=0.02,
                what=f"job {job_id} to start",
            )
            pickups[job_id] = start["t"] - enqueued_at
        assert max(pickups.values()) <= POLL_S + 1
        # It does rely on polling: not every pickup is as quick as a wake (< 0.1 s).
        assert max(pickups.values()) > 0.1

        async def all_acked():
            return await fleet.count("jobs") == 0

        await fleet.wait_until(all_acked, timeout_s=30, what="every job acked")
        listen = await fleet.fetch(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = %s",
            [worker.app + ":listen"],
        )
        assert listen == []
        worker.terminate()
        assert await worker.wait_exit() == 0, worker.stderr()
        report = await fleet.check_history(list(pickups))
    assert report.acked == len(pickups)
    values = sorted(pickups.values())
    print(
        f"\npoll-only worker (poll {POLL_S:g}s): pickups min {values[0]:.3f}s max "
        f"{values[-1]:.3f}s (bound {POLL_S + 1:g}s) {[round(x, 2) for x in values]}; "
        f"history: {report.summary()}"
    )
    figures.record(
        poll_interval_s=POLL_S,
        pickups=len(values),
        pickup_max_s=values[-1],
        listen_sessions=len(listen),
        events_checked=len(worker.records()),
        **history_figures(report),
    )
