"""R15/Q19.5 on real processes: cancelling running jobs reaches their handlers.

Worker processes on one PostgreSQL schema run handlers that would sleep for an hour; the
test cancels every job while it runs. Each cancel's ``pg_notify('cancel:<id>')`` reaches
the worker holding the job, which cancels that handler at once and settles the job as
cancelled. Nothing else is tried for these jobs: no heartbeat is due (the visibility
timeout is long), so a handler that stopped did so because of the announcement, not a
refused heartbeat. The latency measured is from ``cancel()``'s return in this process to
the handler's own ``handler_end`` record in the worker's (both wall clock, one machine).
"""

from __future__ import annotations

import statistics
import time

import pytest
import trio
from _figures import history_figures

from alkstore_trio import QueueOpts

pytest.importorskip("psycopg", reason="the fault tests need psycopg 3")

#: Long enough that no heartbeat (a third of it) comes during the test.
VT_S = 600.0


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _cancel_running_jobs(fleet, n: int, workers: int) -> dict[str, float]:
    queue = fleet.store.queue("cancel", QueueOpts(visibility_timeout_s=VT_S))
    per_worker = -(-n // workers) + 5
    procs = []

    async def spawn():
        procs.append(
            await fleet.spawn("cancel", concurrency=per_worker, sleep_s=3600, poll_interval_s=5)
        )

    async with trio.open_nursery() as nursery:  # the processes start side by side
        for _ in range(workers):
            nursery.start_soon(spawn)
    ids = await queue.enqueue_many([b"job"] * n)

    def running() -> int:
        return sum(len(proc.in_flight()) for proc in procs)

    await fleet.wait_until(lambda: running() == n, timeout_s=120, what="every handler running")
    cancelled_at: dict[int, float] = {}
    for job_id in ids:
        assert await queue.cancel(job_id), f"cancel({job_id}) of a running job was refused"
        cancelled_at[job_id] = time.time()

    def ended() -> dict[int, dict]:
        return {r["id"]: r for proc in procs for r in proc.events("handler_end")}

    await fleet.wait_until(lambda: len(ended()) == n, timeout_s=60, what="every handler's end")

    async def all_settled() -> bool:
        return await fleet.count("jobs") == 0

    await fleet.wait_until(all_settled, timeout_s=60, what="every job settled as cancelled")
    for proc in procs:
        proc.terminate()
    for proc in procs:
        assert await proc.wait_exit() == 0, proc.stderr()

    ends = ended()
    assert {r["outcome"] for r in ends.values()} == {"cancelled"}
    assert await fleet.count("dead_jobs") == 0
    entry = (await fleet.store.stats()).queue("cancel")
    assert entry is not None
    assert (entry.cancelled_total, entry.acked_total, entry.cancelling) == (n, 0, 0)
    stats = [r["stats"] for proc in procs for r in proc.events("stopped")]
    assert sum(s["cancelled"] for s in stats) == n
    assert sum(s["lease_lost"] + s["acked"] + s["retried"] + s["released"] for s in stats) == 0
    assert sum(len(proc.events("cancelled")) for proc in procs) == n
    # Every worker took part: the announcements reached the holder, whichever it was.
    assert all(proc.events("cancelled") for proc in procs)
    report = await fleet.check_history(ids)

    latencies_ms = [(ends[i]["t"] - cancelled_at[i]) * 1000 for i in ids]
    figures = {
        "jobs": n,
        "workers": workers,
        "p50_ms": statistics.median(latencies_ms),
        "p99_ms": _percentile(latencies_ms, 0.99),
        "max_ms": max(latencies_ms),
    }
    print(
        f"\ncancel of {n} running jobs across {workers} worker processes: from cancel()'s "
        f"return to the handler's end p50 {figures['p50_ms']:.1f} ms, p99 "
        f"{figures['p99_ms']:.1f} ms, max {figures['max_ms']:.1f} ms; "
        f"history: {report.summary()}"
    )
    return {**figures, **history_figures(report)}


@pytest.mark.xdist_group("heavy")  # a fleet of processes: one at a time
async def test_r15_cancelling_200_running_jobs_reaches_every_handler(
    pg_dsn, schema, open_fleet, figures
):
    async with open_fleet(pg_dsn, schema) as fleet:
        measured = await _cancel_running_jobs(fleet, n=200, workers=3)
    figures.record(**measured)
    # The target is 100 ms at p99; the bound leaves room for a loaded shared 2-core
    # machine (the figures file keeps the measured value).
    assert measured["p99_ms"] < 1000


@pytest.mark.slow
@pytest.mark.xdist_group("heavy")
async def test_r15_cancelling_1000_running_jobs_reaches_every_handler(
    pg_dsn, schema, open_fleet, figures
):
    async with open_fleet(pg_dsn, schema) as fleet:
        measured = await _cancel_running_jobs(fleet, n=1000, workers=3)
    figures.record(**measured)
    assert measured["p99_ms"] < 1000


async def test_r15_old_workers_read_a_cancel_announcement_as_a_plain_wake():
    # A worker of the previous version parses every payload of the wake channel as a due
    # time: 'cancel:17' is unreadable, so it is a plain wake (one more claim), harmless.
    from alkstore_trio._engines._postgres._notes import cancelled_id as _cancelled_id
    from alkstore_trio._engines._postgres._notes import due_in_s as _due_in_s

    assert _due_in_s("cancel:17") is None
    assert _cancelled_id("cancel:17") == 17
    for bad in ("cancel:", "cancel:x", "cancel:-1", "cancel:١٧"):
        assert _cancelled_id(bad) is None
    await trio.lowlevel.checkpoint()
