"""A slow, then cut network between a worker and the database (issue 5, item 6; Q4, R6,
R8). The worker reaches the server through :class:`_proxy.Proxy`, which adds latency and
then black-holes the traffic (accepts and reads, delivers nothing: a partition, not a
refused connection) for longer than the visibility timeout, while another worker, on a
direct connection, reclaims the job once its lease lapsed.

What the cut-off worker can know: nothing. Its statements are sent and never answered,
so no ``EngineError`` is raised either (TCP sees no error on a partition until
retransmissions give up, minutes later); only its own clock tells it the lease must have
lapsed. So the worker stops a handler at its lease's end as its own clock counts it
(from when the claim or last renewal was sent): test 2. When the partition heals, the
held statements reach the server late and are refused by the claim token (Q4): test 1
(a handler that returned during the cut: its late ack), test 2 (its late heartbeat).
"""

from __future__ import annotations

import time

import pytest
import trio
from _figures import history_figures
from _proxy import Proxy

from alkstore_trio import QueueOpts

conninfo = pytest.importorskip("psycopg.conninfo", reason="the fault tests need psycopg 3")

VT_S = 4.0
LATENCY_S = 0.1


async def open_proxied_worker(fleet, nursery, pg_dsn, **options):
    """A proxy to the fleet's server and a worker process behind it."""
    params = conninfo.conninfo_to_dict(pg_dsn)
    proxy = Proxy(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
    port = await nursery.start(proxy.serve)
    proxied = conninfo.make_conninfo(pg_dsn, host="127.0.0.1", port=port)
    worker = await fleet.spawn("net", dsn=proxied, pool_size=2, **options)
    return proxy, worker


async def pickups_with_latency(fleet, queue, worker, proxy) -> list[float]:
    """With ``LATENCY_S`` each way: three jobs, seconds from enqueue to ack record."""
    proxy.latency_s = LATENCY_S
    ids = []
    for _ in range(3):
        enqueued_at = time.time()
        job_id = await queue.enqueue(b"sleep=0")
        ids.append(job_id)
        ack = await fleet.wait_until(
            lambda job_id=job_id: next(
                (r for r in worker.events("ack") if r["id"] == job_id), None
            ),
            timeout_s=30,
            what="a job acked through the slow network",
        )
        ids[-1] = (job_id, ack["t"] - enqueued_at)
    return ids


async def test_q4_r8_cut_network_late_ack_is_refused_after_another_worker_reclaimed(
    pg_dsn, schema, open_fleet, figures
):
    async with open_fleet(pg_dsn, schema) as fleet, trio.open_nursery() as nursery:
        queue = fleet.store.queue("net", QueueOpts(visibility_timeout_s=VT_S, max_attempts=5))
        proxy, cut = await open_proxied_worker(
            fleet, nursery, pg_dsn, concurrency=2, poll_interval_s=1
        )
        slow = await pickups_with_latency(fleet, queue, cut, proxy)
        assert all(seconds < 4 * LATENCY_S + 2 for _, seconds in slow)

        # The handler returns after 1 s, before its first heartbeat (VT / 3): its ack is
        # the first statement the partition holds.
        (job_id,) = await queue.enqueue_many([b"sleep=1"])
        await fleet.wait_until(
            lambda: any(r["id"] == job_id for r in cut.events("handler_start")),
            timeout_s=30,
            what="the handler to start",
        )
        proxy.blackhole()
        cut_at = time.time()
        (start,) = [r for r in cut.events("handler_start") if r["id"] == job_id]
        other = await fleet.spawn("net", concurrency=2, poll_interval_s=1)
        await fleet.wait_until(
            lambda: any(r["id"] == job_id for r in other.events("ack")),
            timeout_s=VT_S + 20,
            what="the other worker to reclaim and ack the job",
        )
        (reclaim,) = [r for r in other.events("claim") if r["id"] == job_id]
        assert reclaim["attempt"] == 2
        assert reclaim["claimed_at"] > start["claim_expires_at"]
        # The cut-off worker's handler returned long ago; its ack is held in the partition.
        assert [r["outcome"] for r in cut.events("handler_end") if r["id"] == job_id] == [
            "returned"
        ]
        assert not [r for r in cut.events("ack") if r["id"] == job_id]

        proxy.heal()
        healed_at = time.time()
        (lost,) = await fleet.wait_until(
            lambda: [r for r in cut.events("lease_lost") if r["id"] == job_id],
            timeout_s=30,
            what="the late ack to be refused",
        )
        assert lost["attempt"] == 1
        other.terminate()
        assert await other.wait_exit() == 0, other.stderr()
        # It works again through the healed network.
        after = await pickups_with_latency(fleet, queue, cut, proxy)
        assert await fleet.count("jobs") == 0
        assert await fleet.count("dead_jobs") == 0
        cut.terminate()
        assert await cut.wait_exit() == 0, cut.stderr()
        ids = [i for i, _ in slow] + [job_id] + [i for i, _ in after]
        report = await fleet.check_history(ids)
        nursery.cancel_scope.cancel()

    (stats,) = [r["stats"] for r in cut.events("stopped")]
    assert (stats["lease_lost"], stats["acked"]) == (1, 6)
    print(
        f"\ncut network: with {LATENCY_S:g}s latency each way, enqueue-to-ack "
        f"{[round(s, 2) for _, s in slow]}s; black-holed {healed_at - cut_at:.1f}s "
        f"(visibility {VT_S:g}s): another worker reclaimed the job "
        f"{reclaim['t'] - cut_at:.1f}s after the cut; the late ack was refused "
        f"{lost['t'] - healed_at:.2f}s after the partition healed; afterwards "
        f"{[round(s, 2) for _, s in after]}s; history: {report.summary()}"
    )
    figures.record(
        faults_injected=2,
        latency_each_way_s=LATENCY_S,
        black_holed_s=healed_at - cut_at,
        visibility_timeout_s=VT_S,
        late_acks_refused=stats["lease_lost"],
        events_checked=len(cut.records()) + len(other.records()),
        **history_figures(report),
    )


async def test_r6_r8_cut_network_worker_stops_its_handler_as_the_lease_lapses(
    pg_dsn, schema, open_fleet, figures
):
    slack_s = 1.0  # a loaded machine's scheduling
    async with open_fleet(pg_dsn, schema) as fleet, trio.open_nursery() as nursery:
        queue = fleet.store.queue("net", QueueOpts(visibility_timeout_s=VT_S, max_attempts=5))
        # The cut-off worker's handlers would run for an hour; the other's finish at once.
        proxy, cut = await open_proxied_worker(
            fleet, nursery, pg_dsn, concurrency=1, poll_interval_s=1, sleep_s=3600
        )
        proxy.latency_s = LATENCY_S
        (job_id,) = await queue.enqueue_many([b"job"])
        (start,) = await fleet.wait_until(
            lambda: [r for r in cut.events("handler_start") if r["id"] == job_id],
            timeout_s=30,
            what="the handler to start",
        )
        # Cut before the first heartbeat (VT / 3): the claim's own deadline is the last
        # the worker ever obtained, and its first heartbeat hangs in the partition.
        proxy.blackhole()
        cut_at = time.time()
        lease_end = start["claim_expires_at"]
        (ended,) = await fleet.wait_until(
            lambda: [r for r in cut.events("handler_end") if r["id"] == job_id],
            timeout_s=lease_end + slack_s - time.time(),
            what="the cut-off worker to stop its handler as the lease lapses",
        )
        assert ended["outcome"] == "cancelled"
        # At the lease's end on the worker's own clock (counted from when it *sent* the
        # claim, so never after the store's deadline, a round trip before it): not at
        # the first heartbeat (VT / 3 after the claim), nor after the lease.
        assert lease_end - VT_S / 2 <= ended["t"] <= lease_end + slack_s
        assert cut.process.poll() is None

        # Stay cut until the store's lease lapsed too (the scenario, not a wait for a
        # condition), so that the heartbeat held in the partition is refused once it
        # arrives; meanwhile another worker reclaims and finishes the job.
        other = await fleet.spawn("net", concurrency=1, poll_interval_s=1, sleep_s=0.2)
        await fleet.wait_until(
            lambda: any(r["id"] == job_id for r in other.events("ack")),
            timeout_s=VT_S + 20,
            what="the other worker to reclaim and ack the job",
        )
        (reclaim,) = [r for r in other.events("claim") if r["id"] == job_id]
        assert reclaim["attempt"] == 2
        assert reclaim["claimed_at"] > lease_end
        proxy.heal()
        healed_at = time.time()
        (lost,) = await fleet.wait_until(
            lambda: [r for r in cut.events("lease_lost") if r["id"] == job_id],
            timeout_s=30,
            what="the cut-off worker to record the claim lost",
        )
        assert lost["attempt"] == 1
        other.terminate()
        assert await other.wait_exit() == 0, other.stderr()
        # The cut-off worker works again (its handler sleeps: see it start).
        (again,) = await queue.enqueue_many([b"job"])
        await fleet.wait_until(
            lambda: any(r["id"] == again for r in cut.events("handler_start")),
            timeout_s=30,
            what="the cut-off worker to run a job again",
        )
        assert await queue.cancel(again)

        async def settled():  # R15: its worker stops the handler and settles the cancel
            return await fleet.count("jobs") == 0

        await fleet.wait_until(settled, timeout_s=30, what="the cancelled job to be settled")
        cut.terminate()
        assert await cut.wait_exit() == 0, cut.stderr()
        report = await fleet.check_history([job_id, again], removed=[again])
        nursery.cancel_scope.cancel()

    accepted = [r for r in cut.events("heartbeat") + cut.events("ack") if r["id"] == job_id]
    assert accepted == []  # nothing of the stale claim landed
    print(
        f"\ncut network, long handler: black-holed {healed_at - cut_at:.1f}s; the worker "
        f"stopped its handler {ended['t'] - lease_end:+.2f}s from the lease's end (store "
        f"clock), another worker reclaimed the job {reclaim['t'] - cut_at:.1f}s after the "
        f"cut; after healing the claim was recorded lost ({lost['t'] - healed_at:.2f}s); "
        f"history: {report.summary()}"
    )
    figures.record(
        faults_injected=2,
        black_holed_s=healed_at - cut_at,
        visibility_timeout_s=VT_S,
        handler_stopped_from_lease_end_s=ended["t"] - lease_end,
        stale_ops_accepted=len(accepted),
        events_checked=len(cut.records()) + len(other.records()),
        **history_figures(report),
    )
