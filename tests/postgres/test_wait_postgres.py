"""Q19.4's announcements on PostgreSQL, watched from a plain psycopg session that LISTENs
on a queue's done channel: which statements announce (kept acks, cancels, dead-letter
moves; an unkept ack and a retry below budget send nothing, so the hot path pays nothing
for waits nobody makes), the payload (ids in groups of at most 400, under the 8,000-byte
limit), the channel's name (never a wake channel's), and poll-only waits.
"""

from __future__ import annotations

import psycopg
import trio

from alkstore_trio import Job, QueueOpts, open_store
from alkstore_trio._engines._postgres._sql import CHANNEL_MAX_BYTES, done_channel, wake_channel

KEPT = QueueOpts(keep_completed_s=3600, max_attempts=1)


def _notes(conn: psycopg.Connection) -> list[str]:
    """The payloads of the notifications this session has received (none pending)."""
    return [note.payload for note in conn.notifies(timeout=0.5, stop_after=10_000)]


def _listening(pg_dsn: str, channel: str) -> psycopg.Connection:
    conn = psycopg.connect(pg_dsn, autocommit=True)
    conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
    return conn


async def test_q19_4_only_final_transitions_announce_and_ids_come_in_groups_of_400(pg_dsn, schema):
    async with open_store(pg_dsn, schema=schema, migrate="apply", listen=False) as store:
        with _listening(pg_dsn, done_channel(schema, "q")) as conn:
            kept = store.queue("q", KEPT)
            unkept = store.queue("q", QueueOpts(max_attempts=3))
            # Unkept acks (one, and a batch) and a retry below budget: no announcement.
            await unkept.enqueue_many([b"a", b"b", b"c", b"r"])
            handles = await unkept.claim_batch("w", 4)
            assert await handles[0].ack()
            assert await unkept.ack_handles(handles[1:3]) == [True, True]
            assert await handles[3].retry("again", delay_s=3600)
            assert _notes(conn) == []
            # A kept ack, a fail, a retry at budget, a cancel: one announcement each.
            ids = await kept.enqueue_many([b"ack", b"fail", b"retry", b"cancel"])
            by_id = {h.id: h for h in await kept.claim_batch("w", 3)}
            assert await by_id[ids[0]].ack(result=b"r")
            assert await by_id[ids[1]].fail("boom")
            assert await by_id[ids[2]].retry("boom")
            assert await kept.cancel(ids[3])
            assert _notes(conn) == [str(job_id) for job_id in ids]
            # ack_batch of 900 kept jobs: three notifications of 400, 400 and 100 ids.
            many = await kept.enqueue_many([b"x"] * 900)
            await kept.claim_batch("w", 900)
            assert await kept.ack_batch(many) == 900
            groups = _notes(conn)
            assert [len(g.split(",")) for g in groups] == [400, 400, 100]
            assert [int(i) for g in groups for i in g.split(",")] == sorted(many)
            assert all(len(g.encode()) < 8000 for g in groups)


def test_q19_4_a_done_channel_is_never_a_wake_channel():
    long = "q" * 60
    for schema, queue in [("s", "q"), ("alkstore", long), ("a" * 63, long)]:
        done, wake = done_channel(schema, queue), wake_channel(schema, queue)
        assert done != wake
        assert len(done.encode()) <= CHANNEL_MAX_BYTES
    assert done_channel("s", "q") == "alk/s/q/done"
    # A queue named "q/done" cannot exist ('/' is in no name), so no wake channel is
    # "alk/s/q/done"; the hashed forms hash different texts.
    assert done_channel("s", long) != wake_channel("s", long)


async def test_q19_4_a_poll_only_store_waits_by_polling(pg_dsn, schema):
    async with (
        open_store(pg_dsn, schema=schema, migrate="apply", listen=False) as store,
        open_store(pg_dsn, schema=schema, listen=False) as other,
    ):
        queue = store.queue("q", KEPT)
        job_id = await queue.enqueue(b"x")
        got: list[Job] = []

        async def waiter() -> None:
            got.append(await queue.wait(job_id, poll_interval_s=0.05))

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiter)
                handle = await other.queue("q").claim_one("w")
                assert handle is not None
                assert await handle.ack(result=b"done")
        assert (got[0].state, got[0].result) == ("completed", b"done")
