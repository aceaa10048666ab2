"""The worker under faults, with real processes on a real server (R3, R4, R7, R8).

The properties: a job is handed out exactly once per attempt (Q3) and executed at least
once; a worker killed with SIGKILL loses nothing (its leases lapse and the others reclaim
its jobs); a lost LISTEN session only slows pickup down to the re-poll until the listener
reconnects; SIGTERM drains and releases.

Every worker is a ``_worker_proc.py`` process that writes its events (claim, heartbeat,
ack, lease lost, release...: the history checker's records) and its handlers' own
start/end lines as JSON lines; the tests compare those records with the database, and
every test runs the history checker (:func:`alkstore_trio.testing.check_history`) on them:
no handout twice, no overlapping valid leases, no stale operation accepted, nothing
missing. Waits are conditions with deadlines, never sleeps. Figures measured on
the way are printed (``pytest -s`` shows them).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict

import pytest
import trio
from _figures import history_figures
from _proxy import Proxy

from alkstore_trio import QueueOpts

conninfo = pytest.importorskip("psycopg.conninfo", reason="the fault tests need psycopg 3")

#: Test 1: visibility timeout and re-poll interval of the kill -9 drain.
DRAIN_VT_S = 3.0
DRAIN_POLL_S = 1.0
#: The most a loaded 2-core machine may add to a reclaim (scheduling, busy database).
RECLAIM_SLACK_S = 4.0


def runs_by_job(procs) -> dict[int, list[dict]]:
    """Every handler run (one ``start`` record, joined with its ``end`` if any), per
    job id, in attempt order. A run is a dict: pid, attempt, start, end, claimed_at,
    claim_expires_at, outcome."""
    runs: dict[int, list[dict]] = defaultdict(list)
    for proc in procs:
        ends = {(r["id"], r["attempt"]): r for r in proc.events("handler_end")}
        for start in proc.events("handler_start"):
            end = ends.get((start["id"], start["attempt"]))
            runs[start["id"]].append(
                {
                    "pid": proc.pid,
                    "attempt": start["attempt"],
                    "start": start["t"],
                    "end": None if end is None else end["t"],
                    "outcome": None if end is None else end["outcome"],
                    "claimed_at": start["claimed_at"],
                    "claim_expires_at": start["claim_expires_at"],
                }
            )
    for job_runs in runs.values():
        job_runs.sort(key=lambda run: run["attempt"])
    return runs


def keys(proc, ev: str) -> set[tuple[int, int]]:
    """(id, attempt) of the records ``ev`` of ``proc``."""
    return {(r["id"], r["attempt"]) for r in proc.events(ev)}


async def test_r8_kill9_one_of_three_workers_draining_10000_jobs(
    pg_dsn, schema, open_fleet, figures
):
    total, concurrency = 10_000, 20
    async with open_fleet(pg_dsn, schema) as fleet:
        queue = fleet.store.queue(
            "drain", QueueOpts(visibility_timeout_s=DRAIN_VT_S, max_attempts=5)
        )
        procs = [
            await fleet.spawn(
                "drain",
                concurrency=concurrency,
                sleep_s=0.02,
                sleep_jitter=0.9,
                poll_interval_s=DRAIN_POLL_S,
            )
            for _ in range(3)
        ]
        survivors, victim = [procs[0], procs[2]], procs[1]
        started = trio.current_time()
        ids = await queue.enqueue_many([b"%d" % i for i in range(total)])
        assert len(set(ids)) == total

        async def kill_the_victim_mid_flight():
            """Once a quarter is acked, freeze the victim; kill it if it was running
            handlers at that moment, else let it go on and look again."""
            if sum(len(proc.events("ack")) for proc in procs) < total // 4:
                return None
            await victim.pause()
            paused_at = time.time()
            if not victim.in_flight():
                victim.resume()
                return None
            victim.kill()
            return paused_at

        killed_at = await fleet.wait_until(
            kill_the_victim_mid_flight, timeout_s=60, step_s=0.02, what="the drain"
        )
        assert await victim.wait_exit() == -9
        running_at_kill = victim.in_flight()  # its file is complete now

        async def drained():
            return await fleet.count("jobs") == 0

        await fleet.wait_until(drained, timeout_s=60, step_s=0.2, what="an empty live table")
        drain_s = trio.current_time() - started
        assert await fleet.count("dead_jobs") == 0
        for proc in survivors:
            assert proc.process.poll() is None, proc.stderr()
            proc.terminate()
        for proc in survivors:
            assert await proc.wait_exit() == 0, proc.stderr()
        report = await fleet.check_history(ids)

    runs = runs_by_job(procs)
    handouts = Counter((job_id, run["attempt"]) for job_id, rs in runs.items() for run in rs)
    assert [pair for pair, k in handouts.items() if k > 1] == []  # Q3: exactly-once handout
    assert set(runs) == set(ids)  # every job ran

    acks = Counter(r["id"] for proc in procs for r in proc.events("ack"))
    assert [job_id for job_id, k in acks.items() if k > 1] == []  # never acked twice
    assert set(acks) <= set(ids)

    # The victim's claims it never acked: those whose handler was running at the kill,
    # and those whose handler had returned but whose ack had not been applied (or was
    # applied but its record not yet written: killed between the two).
    victim_unacked = {
        (job_id, run["attempt"])
        for job_id, rs in runs.items()
        for run in rs
        if run["pid"] == victim.pid
    } - keys(victim, "ack")
    assert running_at_kill <= victim_unacked
    assert running_at_kill  # it was killed mid-flight

    # Every handler running at the kill ran again elsewhere, one attempt later, and the
    # job was acked once; the reclaim came after the victim's claim lapsed (checked with
    # the lease rule below).
    reclaim_delays = []
    for job_id, attempt in running_at_kill:
        (again,) = [run for run in runs[job_id] if run["attempt"] == attempt + 1]
        assert again["pid"] != victim.pid
        assert acks[job_id] == 1
        reclaim_delays.append(again["start"] - killed_at)

    # None lost: every job was acked by a record, except the victim's jobs whose ack
    # was applied in the instant before the kill (their handler had returned, nobody
    # ran them again, and the database shows them gone): at most the batch of acks in
    # flight at the stop and the batch logged just before but not yet written (events
    # are written by a task of their own, one scheduling step behind).
    unlogged = set(ids) - set(acks)
    for job_id in unlogged:
        (run,) = runs[job_id]
        assert run["pid"] == victim.pid
        assert run["outcome"] == "returned"
        assert (job_id, run["attempt"]) in victim_unacked
    assert len(unlogged) <= 2 * concurrency

    # Every second run is explained: the victim's unacked claims, or a claim its holder
    # lost (a survivor starved past its lease on a loaded machine; logged).
    lost = {r["id"] for proc in procs for r in proc.events("lease_lost")}
    lost |= {r["id"] for proc in procs for ev in ("retry", "release") for r in proc.events(ev)}
    rerun = {job_id for job_id, rs in runs.items() if len(rs) > 1}
    assert rerun <= {job_id for job_id, _ in victim_unacked} | lost

    # The lease rule: a later claim of a job starts only after the earlier claim lapsed
    # (on the database's clock), and never while the earlier handler still held a valid
    # lease: in wall time the runs overlap only if the earlier holder logged the loss.
    for job_id in rerun:
        for before, after in zip(runs[job_id], runs[job_id][1:], strict=False):
            assert after["attempt"] > before["attempt"]
            assert after["claimed_at"] > before["claim_expires_at"], (job_id, before, after)
            before_end = before["end"]
            if before_end is None:
                assert before["pid"] == victim.pid
                before_end = killed_at
            if after["start"] < before_end:
                assert job_id in lost, (job_id, before, after)

    bound_s = DRAIN_VT_S + DRAIN_POLL_S + RECLAIM_SLACK_S
    assert max(reclaim_delays) <= bound_s
    print(
        f"\nkill -9 drain: {total} jobs in {drain_s:.1f}s; victim had {len(running_at_kill)} "
        f"handlers running at the kill ({len(victim_unacked)} claims unacked, "
        f"{len(unlogged)} acked in the instant before the kill); reruns {len(rerun)}, "
        f"lease losses logged {len(lost)}; reclaim after kill min "
        f"{min(reclaim_delays):.2f}s max {max(reclaim_delays):.2f}s (bound {bound_s:g}s: "
        f"visibility {DRAIN_VT_S:g} + poll {DRAIN_POLL_S:g} + slack {RECLAIM_SLACK_S:g}); "
        f"history: {report.summary()}"
    )
    figures.record(
        workers=len(procs),
        faults_injected=1,
        handlers_running_at_kill=len(running_at_kill),
        reruns=len(rerun),
        reclaim_after_kill_max_s=max(reclaim_delays),
        reclaim_bound_s=bound_s,
        events_checked=sum(len(proc.records()) for proc in procs),
        **history_figures(report),
    )


async def test_r7_sigterm_drains_and_releases(pg_dsn, schema, open_fleet, figures):
    grace_s = 2.0
    async with open_fleet(pg_dsn, schema) as fleet:
        queue = fleet.store.queue("stop", QueueOpts(visibility_timeout_s=60, max_attempts=3))
        worker = await fleet.spawn("stop", concurrency=5, shutdown_grace_s=grace_s)
        short = await queue.enqueue_many([b"sleep=0.5"] * 2)
        long = await queue.enqueue_many([b"sleep=3600"] * 3)
        await fleet.wait_until(
            lambda: len(worker.in_flight()) == 5, timeout_s=30, what="five running handlers"
        )
        signalled_at = time.time()
        worker.terminate()
        assert await worker.wait_exit() == 0, worker.stderr()
        exited_s = time.time() - signalled_at

        rows = await fleet.fetch(
            "SELECT id, state, attempts, last_error, claimed_by FROM {schema}.jobs ORDER BY id"
        )
        assert rows == [(job_id, "pending", 0, "worker stopped", None) for job_id in long]
        assert await fleet.count("dead_jobs") == 0
        report = await fleet.check_history(short + long)

    ends = {r["id"]: r for r in worker.events("handler_end")}
    assert {job_id: ends[job_id]["outcome"] for job_id in short + long} == {
        **dict.fromkeys(short, "returned"),
        **dict.fromkeys(long, "cancelled"),
    }
    assert {r["id"] for r in worker.events("ack")} == set(short)
    releases = worker.events("release")
    assert {r["id"] for r in releases} == set(long)
    # The long handlers were given the grace, not cancelled at once nor later than it
    # plus a loaded machine's slack.
    for job_id in long:
        assert grace_s - 0.1 <= ends[job_id]["t"] - signalled_at <= grace_s + 5
    (stopped,) = worker.events("stopped")
    assert (stopped["stats"]["acked"], stopped["stats"]["released"]) == (2, 3)
    assert stopped["stats"]["in_flight"] == 0
    print(
        f"\nSIGTERM with a {grace_s:g}s grace: process exited after {exited_s:.2f}s; "
        f"history: {report.summary()}"
    )
    figures.record(
        faults_injected=1,
        released=len(releases),
        exit_after_s=exited_s,
        grace_s=grace_s,
        events_checked=len(worker.records()),
        **history_figures(report),
    )


async def test_r7_a_second_sigterm_cancels_at_once_and_releases(
    pg_dsn, schema, open_fleet, figures
):
    async with open_fleet(pg_dsn, schema) as fleet:
        queue = fleet.store.queue("stop", QueueOpts(visibility_timeout_s=60, max_attempts=3))
        worker = await fleet.spawn("stop", concurrency=3, shutdown_grace_s=600)
        ids = await queue.enqueue_many([b"sleep=3600"] * 3)
        await fleet.wait_until(
            lambda: len(worker.in_flight()) == 3, timeout_s=30, what="three running handlers"
        )
        worker.terminate()
        # Signals of one kind sent together may be delivered as one: wait for the first.
        await fleet.wait_until(
            lambda: worker.events("draining"), timeout_s=30, what="the worker to drain"
        )
        signalled_at = time.time()
        worker.terminate()
        assert await worker.wait_exit(timeout_s=30) == 0, worker.stderr()
        exited_s = time.time() - signalled_at
        rows = await fleet.fetch(
            "SELECT id, state, attempts, last_error, claimed_by FROM {schema}.jobs ORDER BY id"
        )
        assert rows == [(job_id, "pending", 0, "worker stopped", None) for job_id in ids]
        report = await fleet.check_history(ids)
    assert {r["id"]: r["outcome"] for r in worker.events("handler_end")} == dict.fromkeys(
        ids, "cancelled"
    )
    assert {r["id"] for r in worker.events("release")} == set(ids)
    print(
        f"\nsecond SIGTERM (grace 600s): process exited {exited_s:.2f}s after it; "
        f"history: {report.summary()}"
    )
    figures.record(
        faults_injected=2,
        released=len(worker.events("release")),
        exit_after_s=exited_s,
        events_checked=len(worker.records()),
        **history_figures(report),
    )


async def listen_pids(fleet, app: str) -> list[int]:
    """The pids of the worker's LISTEN sessions (``<application_name>:listen``)."""
    rows = await fleet.fetch(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND query LIKE 'LISTEN%%'",
        [app + ":listen"],
    )
    return [pid for (pid,) in rows]


async def test_r3_listener_session_killed_worker_still_picks_up_within_poll_interval(
    pg_dsn, schema, open_fleet, figures
):
    poll_s, fast_s = 3.0, 1.0
    params = conninfo.conninfo_to_dict(pg_dsn)
    proxy = Proxy(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
    async with open_fleet(pg_dsn, schema) as fleet, trio.open_nursery() as nursery:
        port = await nursery.start(proxy.serve)
        proxied = conninfo.make_conninfo(pg_dsn, host="127.0.0.1", port=port)
        worker = await fleet.spawn("ping", dsn=proxied, poll_interval_s=poll_s, pool_size=2)
        queue = fleet.store.queue("ping")

        enqueued: list[int] = []

        async def pickup_s() -> float:
            """Enqueue one job; seconds until its handler started."""
            enqueued_at = time.time()
            job_id = await queue.enqueue(b"p")
            enqueued.append(job_id)
            start = await fleet.wait_until(
                lambda: next(
                    (r for r in worker.events("handler_start") if r["id"] == job_id), None
                ),
                timeout_s=poll_s + 10,
                step_s=0.02,
                what=f"job {job_id} to start",
            )
            return start["t"] - enqueued_at

        before = [await pickup_s() for _ in range(3)]
        assert max(before) < fast_s  # woken, not polled

        (old_pid,) = await listen_pids(fleet, worker.app)
        proxy.refusing = True  # the listener cannot come back for now
        ((terminated,),) = await fleet.fetch("SELECT pg_terminate_backend(%s)", [old_pid])
        assert terminated

        async def listener_gone():
            return await listen_pids(fleet, worker.app) == []

        await fleet.wait_until(listener_gone, timeout_s=10, what="the LISTEN session to end")
        # Without a listener, enqueues wake nobody: the re-poll picks each job up.
        during = [await pickup_s() for _ in range(3)]
        assert max(during) <= poll_s + 1
        assert await listen_pids(fleet, worker.app) == []  # still no listener
        assert proxy.refused >= 1  # it did try to reconnect

        proxy.refusing = False
        reopened_at = time.time()

        async def listener_back():
            return await listen_pids(fleet, worker.app)

        (new_pid,) = await fleet.wait_until(
            listener_back, timeout_s=15, what="a new LISTEN session"
        )
        reconnect_s = time.time() - reopened_at
        assert new_pid != old_pid
        # Woken again: five quick pickups in a row (by the re-poll alone each would have
        # a one-in-three chance of being this quick).
        after = [await pickup_s() for _ in range(5)]
        assert max(after) < fast_s
        assert worker.process.poll() is None
        messages = [r["message"] for r in worker.events("pg")]
        assert any("wake listener connection lost" in m for m in messages), messages

        async def all_acked():
            return await fleet.count("jobs") == 0

        await fleet.wait_until(all_acked, timeout_s=30, what="every job acked")
        report = await fleet.check_history(enqueued)
        assert report.acked == len(enqueued)
        nursery.cancel_scope.cancel()

    print(
        f"\nlistener killed (poll {poll_s:g}s): pickups before "
        f"{[round(x, 3) for x in before]}s, without a listener "
        f"{[round(x, 3) for x in during]}s, after it reconnected ({reconnect_s:.2f}s after "
        f"the database was reachable again) {[round(x, 3) for x in after]}s; "
        f"history: {report.summary()}"
    )
    figures.record(
        faults_injected=1,
        poll_interval_s=poll_s,
        pickup_max_without_listener_s=max(during),
        pickup_max_woken_s=max(before + after),
        listener_back_after_s=reconnect_s,
        events_checked=len(worker.records()),
        **history_figures(report),
    )
