"""Wakes on the PostgreSQL engine, end to end across connections (Q2, Q10).

An enqueue NOTIFYs its queue's channel at commit; a store's LISTEN connection turns
notifications into wakes for its listeners. These tests use two stores (two pools, two
sets of sessions) on one schema: A listens and claims, B enqueues. Every real wait is a
wait for a wake, bounded by ``trio.fail_after``. "Not woken" is checked with a barrier:
a ping enqueued on another subscribed queue after the event under test; PostgreSQL
delivers notifications in commit order, so once the ping's wake arrived, a wake for the
earlier event would have arrived too.
"""

from __future__ import annotations

import secrets
import statistics

import psycopg
import pytest
import trio

from alkstore_trio import open_store
from alkstore_trio._engines._postgres import _driver
from alkstore_trio._engines._postgres._sql import CHANNEL_MAX_BYTES, wake_channel

WAIT_S = 10.0  # generous bound of every real wait for a wake


def app_name():
    return "alkw-" + secrets.token_hex(6)


def open_pg(dsn, schema, *, application_name="alkstore-trio-tests:wake", pool_size=4):
    return open_store(
        dsn,
        schema=schema,
        migrate="apply",
        pool_size=pool_size,
        application_name=application_name,
    )


async def wait_for(listener, queue):
    """Accumulate wakes until ``queue`` was woken; return every queue woken meanwhile."""
    seen = set()
    with trio.fail_after(WAIT_S):
        while queue not in seen:
            seen |= await listener.wait()
    return seen


async def sessions(pg_dsn, application_name):
    """The pids of the sessions with this application_name."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", [application_name]
        ).fetchall()
    await trio.lowlevel.checkpoint()
    return sorted(pid for (pid,) in rows)


@pytest.mark.xdist_group("heavy")  # a wall-clock bound: one at a time
async def test_q2_wake_driven_claim_loop_across_stores_is_prompt(pg_dsn, schema):
    iterations = 200
    latencies = []
    async with open_pg(pg_dsn, schema) as store_a, open_pg(pg_dsn, schema) as store_b:
        queue_a, queue_b = store_a.queue("wq"), store_b.queue("wq")
        send, receive = trio.open_memory_channel(iterations)
        parked = trio.Event()
        wakes = []

        async def claim_loop(listener):
            nonlocal parked
            while True:
                while (handle := await queue_a.claim_one("A")) is not None:
                    await send.send((trio.current_time(), handle))
                parked.set()
                wakes.append(await listener.wait())

        async with (
            store_a.open_wake_listener(queue_a) as listener,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(claim_loop, listener)
            for i in range(iterations):
                with trio.fail_after(WAIT_S):
                    await parked.wait()  # A is blocked in listener.wait()
                    parked = trio.Event()
                    job_id = await queue_b.enqueue(b"%d" % i)
                    enqueued = trio.current_time()
                    claimed, handle = await receive.receive()
                assert handle.id == job_id
                latencies.append(claimed - enqueued)
                assert await handle.ack()
            nursery.cancel_scope.cancel()
    assert all(woken == frozenset({"wq"}) for woken in wakes)
    assert len(wakes) >= iterations
    cuts = statistics.quantiles(latencies, n=100)
    p50, p95, p99 = statistics.median(latencies), cuts[94], cuts[98]
    print(
        f"\nwake latency (enqueue returned -> claim returned) over {iterations}: "
        f"p50 {p50 * 1e3:.2f} ms, p95 {p95 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms, "
        f"max {max(latencies) * 1e3:.2f} ms"
    )
    assert p50 < 0.020


async def test_q2_poll_only_claim_loop_without_listener_gets_every_job(pg_dsn, schema):
    poll_interval_s = 0.005
    consumer_app = app_name()
    claimed = []
    polled_empty = trio.Event()
    progress = trio.Event()
    async with (
        open_pg(pg_dsn, schema, application_name=consumer_app) as store_a,
        open_pg(pg_dsn, schema) as store_b,
    ):
        queue_a, queue_b = store_a.queue("poll"), store_b.queue("poll")
        expected = []

        async def poll_loop():
            while True:
                handles = await queue_a.claim_batch("poller", 4)
                for handle in handles:
                    assert await handle.ack()
                    claimed.append(handle.id)
                if handles:
                    progress.set()
                else:
                    polled_empty.set()
                    await trio.sleep(poll_interval_s)  # the poll interval under test

        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(poll_loop)
                for burst in range(3):
                    # Each burst lands while the loop sleeps between two polls.
                    polled_empty = trio.Event()
                    await polled_empty.wait()
                    expected += await queue_b.enqueue_many([b"p"] * 9)
                    expected.append(await queue_b.enqueue(b"one", priority=burst))
                    while len(claimed) < len(expected):
                        progress = trio.Event()
                        await progress.wait()
                nursery.cancel_scope.cancel()
        assert sorted(claimed) == sorted(expected)
        # The poll-only loop never opened a LISTEN session.
        assert await sessions(pg_dsn, consumer_app + ":listen") == []


async def test_q10_committed_transaction_wakes_rolled_back_does_not(pg_dsn, schema):
    class Boom(Exception):
        pass

    async with open_pg(pg_dsn, schema) as store_a, open_pg(pg_dsn, schema) as store_b:
        ping = store_b.queue("ping")
        async with store_a.open_wake_listener(["txq", "ping"]) as listener:
            # Not before the commit: a ping from another session overtakes the open
            # transaction's wake...
            async with store_b.transaction() as tx:
                committed_id = await tx.enqueue("txq", b"committed")
                await ping.enqueue(b"barrier")
                assert "txq" not in await wait_for(listener, "ping")
            # ...and at the commit the wake arrives.
            assert await wait_for(listener, "txq") == {"txq"}

            async def enqueue_then_fail():
                async with store_b.transaction() as tx:
                    await tx.enqueue("txq", b"rolled back")
                    raise Boom

            with pytest.raises(Boom):
                await enqueue_then_fail()
            await ping.enqueue(b"barrier")
            assert "txq" not in await wait_for(listener, "ping")
            assert await listener.wait(0) == frozenset()

        queue = store_a.queue("txq")
        handle = await queue.claim_one("A")
        assert (handle.id, handle.job.payload) == (committed_id, b"committed")
        assert await queue.claim_one("A") is None


async def test_q2_enqueue_many_sends_one_wake(pg_dsn, schema):
    async with open_pg(pg_dsn, schema) as store_a, open_pg(pg_dsn, schema) as store_b:
        many, ping = store_b.queue("many"), store_b.queue("ping")
        # Watch the channels from a raw session too, to count notifications.
        raw = await _driver.connect(
            pg_dsn, connect_timeout_s=5.0, application_name="alkstore-trio-tests:raw"
        )
        try:
            many_channel, ping_channel = wake_channel(schema, "many"), wake_channel(schema, "ping")
            await raw.listen([many_channel, ping_channel])
            async with store_a.open_wake_listener(["many", "ping"]) as listener:
                ids = await many.enqueue_many([b"m%d" % i for i in range(500)])
                assert len(ids) == 500
                await ping.enqueue(b"barrier")
                notes = []
                with trio.fail_after(WAIT_S):
                    while ping_channel not in {n.channel for n in notes}:
                        notes += await raw.wait_notifies(timeout_s=None)
                assert [n.channel for n in notes] == [many_channel, ping_channel]
                assert all(n.payload == "" for n in notes)
                assert await wait_for(listener, "ping") == {"many", "ping"}
                assert await listener.wait(0) == frozenset()
        finally:
            await raw.aclose()


async def test_q2_listener_on_one_queue_is_not_woken_by_another(pg_dsn, make_schema):
    schema, other_schema = make_schema(), make_schema()
    async with (
        open_pg(pg_dsn, schema) as store_a,
        open_pg(pg_dsn, schema) as store_b,
        open_pg(pg_dsn, other_schema) as store_c,
        store_a.open_wake_listener(["x", "ping"]) as listener,
    ):
        await store_b.queue("y").enqueue(b"y")
        # The same queue name in another schema is another queue.
        await store_c.queue("x").enqueue(b"x elsewhere")
        await store_b.queue("ping").enqueue(b"barrier")
        assert await wait_for(listener, "ping") == {"ping"}
        await store_b.queue("x").enqueue(b"x")
        assert await wait_for(listener, "x") == {"x"}


async def test_q2_killed_listen_session_reconnects_wakes_everyone_once_and_wakes_again(
    pg_dsn, schema
):
    """The store's LISTEN session (``<application_name>:listen``) is killed by the
    server: the store must reconnect, wake every listener once, and keep waking.

    Regression: the lost connection used to reach the listener task wrapped in an
    ExceptionGroup (raised inside a nursery), escape its ``except psycopg.Error`` and
    tear down the whole ``open_store`` block instead of reconnecting.
    """
    consumer_app = app_name()
    async with (
        open_pg(pg_dsn, schema, application_name=consumer_app) as store_a,
        open_pg(pg_dsn, schema) as store_b,
        store_a.open_wake_listener(["k1", "ping"]) as first,
        store_a.open_wake_listener("k2") as second,
    ):
        for kill in range(2):  # and once more: reconnecting is repeatable
            (old_pid,) = await sessions(pg_dsn, consumer_app + ":listen")
            with psycopg.connect(pg_dsn, autocommit=True) as admin:
                ((killed,),) = admin.execute(
                    "SELECT pg_terminate_backend(%s)", [old_pid]
                ).fetchall()
            assert killed

            # After reconnecting, the store wakes every listener (wakes sent while it
            # was away are lost)...
            assert await wait_for(first, "k1") == {"k1", "ping"}
            assert await wait_for(second, "k2") == {"k2"}
            (new_pid,) = await sessions(pg_dsn, consumer_app + ":listen")
            assert new_pid != old_pid

            # ...once: a ping after that brings no second wake-everyone.
            await store_b.queue("ping").enqueue(b"barrier")
            assert await wait_for(first, "ping") == {"ping"}
            assert await second.wait(0) == frozenset()

            # Later enqueues wake again, through the new session.
            await store_b.queue("k1").enqueue(b"after %d" % kill)
            assert await wait_for(first, "k1") == {"k1"}
            await store_b.queue("k2").enqueue(b"after")
            assert await wait_for(second, "k2") == {"k2"}
            handle = await store_a.queue("k1").claim_one("A")
            assert handle is not None
            assert handle.job.payload == b"after %d" % kill


async def test_q2_longest_names_get_wakes_and_near_identical_names_do_not_share_them(
    pg_dsn, make_schema
):
    schema = make_schema(length=63)
    stem = "q" + "0123456789" * 6 + "a"
    queue_1, queue_2 = stem + "1", stem + "2"
    assert len(schema) == len(queue_1) == len(queue_2) == 63
    channel_1, channel_2 = wake_channel(schema, queue_1), wake_channel(schema, queue_2)
    assert len(channel_1.encode()) <= CHANNEL_MAX_BYTES
    assert len(channel_2.encode()) <= CHANNEL_MAX_BYTES
    assert channel_1 != channel_2
    async with open_pg(pg_dsn, schema) as store_a, open_pg(pg_dsn, schema) as store_b:
        async with store_a.open_wake_listener([queue_1, "ping"]) as listener:
            await store_b.queue(queue_2).enqueue(b"two")
            await store_b.queue("ping").enqueue(b"barrier")
            assert await wait_for(listener, "ping") == {"ping"}
            job_id = await store_b.queue(queue_1).enqueue(b"one")
            assert await wait_for(listener, queue_1) == {queue_1}
        handle = await store_a.queue(queue_1).claim_one("A")
        assert (handle.id, handle.job.queue, handle.job.payload) == (job_id, queue_1, b"one")
        assert await handle.ack()


async def test_r4_poll_only_mode_opens_no_listen_session_and_a_worker_still_finds_every_job(
    pg_dsn, schema
):
    """``open_store(listen=False)`` (behind a transaction-pooling proxy, where LISTEN does
    not work): no LISTEN session, wake listeners never wake, and a worker picks every job
    up by re-polling, within ``poll_interval_s`` (+ 1 s for a loaded machine)."""
    from alkstore_trio import Worker

    consumer_app = app_name()
    poll_interval_s = 0.3
    started: dict[int, float] = {}
    arrived = trio.Event()

    async def handler(job):
        started[job.id] = trio.current_time()
        arrived.set()  # the current iteration's event (rebound below)

    async with (
        open_store(
            pg_dsn,
            schema=schema,
            migrate="apply",
            pool_size=2,
            application_name=consumer_app,
            listen=False,
        ) as consumer,
        open_pg(pg_dsn, schema) as producer,
    ):
        async with consumer.open_wake_listener("q") as listener:
            await producer.queue("q").enqueue(b"nobody is woken")
            assert await listener.wait(0.5) == frozenset()
        assert await sessions(pg_dsn, consumer_app + ":listen") == []
        assert await consumer.queue("q").claim_one("drain") is not None

        worker = Worker(consumer, {"q": handler}, poll_interval_s=poll_interval_s)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            for _ in range(5):
                arrived = trio.Event()
                job_id = await producer.queue("q").enqueue(b"x")
                enqueued = trio.current_time()
                with trio.fail_after(poll_interval_s + 1.0):
                    await arrived.wait()
                assert started[job_id] - enqueued <= poll_interval_s + 1.0
            assert await sessions(pg_dsn, consumer_app + ":listen") == []
            worker.stop()
        assert worker.statistics().acked == 5


async def test_r4_listen_must_be_a_bool(pg_dsn, schema):
    from alkstore_trio import InvalidArgument

    with pytest.raises(InvalidArgument, match="listen"):
        async with open_store(pg_dsn, schema=schema, listen="no"):
            pass


async def test_q19_5_a_cancel_announces_the_job_to_the_queues_listeners_and_wakes_no_one(
    pg_dsn, schema
):
    # Q19.5/R15: cancelling a processing job NOTIFYs 'cancel:<id>' on its queue's wake
    # channel; a listener of the queue gets the id (take_cancels), not a wake, and a
    # listener of another queue gets nothing. A second cancel announces it again; the
    # cancel of a pending job announces nothing (nobody holds it).
    async with (
        open_pg(pg_dsn, schema) as store_a,
        open_pg(pg_dsn, schema) as store_b,
        store_a.open_wake_listener("c1") as mine,
        store_a.open_wake_listener("c2") as other,
    ):
        queue = store_b.queue("c1")
        running, pending = await queue.enqueue_many([b"running", b"pending"])
        assert await wait_for(mine, "c1") == {"c1"}
        handle = await queue.claim_one("w")
        assert handle is not None
        assert handle.id == running
        for _ in range(2):
            assert await queue.cancel(running)
            with trio.fail_after(10):
                assert await mine.wait() == frozenset()  # an announcement, not a wake
            assert mine.take_cancels() == {running}
        assert await queue.cancel(pending)
        await queue.enqueue(b"barrier")  # notifications arrive in commit order
        assert await wait_for(mine, "c1") == {"c1"}
        assert mine.take_cancels() == frozenset()
        assert await other.wait(0) == frozenset()
        assert other.take_cancels() == frozenset()
        assert not mine.take_resync()


async def test_q19_5_a_reconnected_listen_session_asks_for_a_resync(pg_dsn, schema):
    # R15.2: announcements sent while the LISTEN session was down are lost: after the
    # reconnect every listener is told once (take_resync), beside the wake-everyone.
    consumer_app = app_name()
    async with (
        open_pg(pg_dsn, schema, application_name=consumer_app) as store,
        store.open_wake_listener("r1") as listener,
    ):
        assert not listener.take_resync()
        (old_pid,) = await sessions(pg_dsn, consumer_app + ":listen")
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [old_pid])
        assert await wait_for(listener, "r1") == {"r1"}
        assert listener.take_resync()
        assert not listener.take_resync()  # once
