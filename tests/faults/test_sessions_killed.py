"""Database sessions killed under load (issue 5, item 4; R8, Q4): every session of one
worker process (its pool and its LISTEN session, found by ``application_name``) is
terminated with ``pg_terminate_backend``, again and again, while a producer keeps
enqueueing. The worker reconnects, nothing is lost, and the history checker shows that
only operations of current claims landed.
"""

from __future__ import annotations

import time

import pytest
import trio
from _figures import history_figures

from alkstore_trio import QueueOpts

pytest.importorskip("psycopg", reason="the fault tests need psycopg 3")

VT_S = 3.0
KILLS = 5
KILL_EVERY_S = 0.5


async def test_r8_q4_sessions_killed_repeatedly_under_load_worker_reconnects_nothing_lost(
    pg_dsn, schema, open_fleet, figures
):
    enqueued: list[int] = []
    async with open_fleet(pg_dsn, schema) as fleet:
        queue = fleet.store.queue("load", QueueOpts(visibility_timeout_s=VT_S, max_attempts=10))
        options = {"concurrency": 10, "sleep_s": 0.05, "sleep_jitter": 0.9, "poll_interval_s": 1}
        victim = await fleet.spawn("load", **options)
        other = await fleet.spawn("load", **options)
        apps = [victim.app, victim.app + ":listen"]

        stop_producing = trio.Event()

        async def produce(*, task_status=trio.TASK_STATUS_IGNORED):
            # Stopped between calls, never cancelled inside one: a cancelled enqueue may
            # still commit (its outcome is unknown to the caller), and the history would
            # then hold jobs it was never told about.
            task_status.started()
            while not stop_producing.is_set():
                enqueued.extend(await queue.enqueue_many([b"x"] * 10))
                with trio.move_on_after(0.05):  # pace the load (~200 jobs/s), not a wait
                    await stop_producing.wait()

        async def terminate_victim_sessions() -> int:
            rows = await fleet.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = ANY(%s)",
                [apps],
            )
            return sum(1 for (done,) in rows if done)

        kills: list[tuple[float, int]] = []
        async with trio.open_nursery() as nursery:
            await nursery.start(produce)
            await fleet.wait_until(
                lambda: len(victim.events("ack")) >= 100, timeout_s=30, what="100 victim acks"
            )
            for _ in range(KILLS):
                kills.append((time.time(), await terminate_victim_sessions()))
                await trio.sleep(KILL_EVERY_S)  # the fault's cadence, not a wait
            last_kill_at = kills[-1][0]
            # It works again: it acks jobs claimed after the last kill.
            await fleet.wait_until(
                lambda: any(r["t"] > last_kill_at for r in victim.events("ack")),
                timeout_s=30,
                what="the victim to ack after the last kill",
            )
            recovered_s = min(r["t"] for r in victim.events("ack") if r["t"] > last_kill_at)
            recovered_s -= last_kill_at
            stop_producing.set()

        async def drained():
            return await fleet.count("jobs") == 0

        await fleet.wait_until(drained, timeout_s=60, step_s=0.2, what="an empty live table")

        async def listener_back():
            return await fleet.fetch(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
                "AND query LIKE 'LISTEN%%'",
                [victim.app + ":listen"],
            )

        await fleet.wait_until(listener_back, timeout_s=30, what="the victim's listener")
        assert victim.process.poll() is None, victim.stderr()
        assert other.process.poll() is None, other.stderr()
        victim.terminate()
        other.terminate()
        assert await victim.wait_exit() == 0, victim.stderr()
        assert await other.wait_exit() == 0, other.stderr()
        report = await fleet.check_history(enqueued)

    assert all(killed >= 1 for _, killed in kills), kills  # each round hit its sessions
    assert report.live == 0
    assert report.dead == 0
    engine_errors = victim.events("engine_error")
    assert engine_errors  # the kills were felt
    (stats,) = [r["stats"] for r in victim.events("stopped")]
    print(
        f"\nsessions killed: {KILLS} rounds every {KILL_EVERY_S:g}s terminated "
        f"{[k for _, k in kills]} sessions of the victim; {len(enqueued)} jobs enqueued; the "
        f"victim saw {len(engine_errors)} engine errors, lost {stats['lease_lost']} claims, "
        f"acked {stats['acked']} (the other worker {len(other.events('ack'))}) and acked "
        f"again {recovered_s:.2f}s after the last kill; history: {report.summary()}"
    )
    figures.record(
        kill_rounds=KILLS,
        faults_injected=sum(killed for _, killed in kills),
        engine_errors_seen=len(engine_errors),
        acked_again_after_s=recovered_s,
        events_checked=len(victim.records()) + len(other.records()),
        **history_figures(report),
    )
