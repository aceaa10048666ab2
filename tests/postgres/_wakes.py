"""Helpers of the producer tests (Q20): a LISTEN connection that counts the
notifications committed before a sentinel, and a wait for a session blocked on an
advisory lock (a condition, polled; never a duration)."""

from __future__ import annotations

import psycopg
import trio
from psycopg import sql as pgsql

from alkstore_trio._engines._postgres import _sql

SENTINEL = "sentinel"


def listen(dsn: str, schema: str, queue: str) -> psycopg.Connection:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(_sql.wake_channel(schema, queue))))
    return conn


def notifications(listener: psycopg.Connection, dsn: str, schema: str, queue: str) -> list[str]:
    """The payloads of the notifications of ``queue``'s channel that were committed
    before now (a sentinel is committed now, and read up to)."""
    channel = _sql.wake_channel(schema, queue)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_notify(%s, %s)", [channel, SENTINEL])
    seen = []
    for note in listener.notifies(timeout=30):
        if note.payload == SENTINEL:
            return seen
        seen.append(note.payload)
    raise AssertionError("the sentinel notification never arrived")


async def wait_for_a_lock_waiter(dsn: str, application_name: str) -> None:
    """Until a session named ``application_name`` waits for an advisory lock (polled: a
    condition, not a duration; the name keeps other tests' sessions out)."""
    with trio.fail_after(30):
        while True:
            if await trio.to_thread.run_sync(_advisory_waiters, dsn, application_name):
                return
            await trio.sleep(0.01)


def _advisory_waiters(dsn: str, application_name: str) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT l.pid FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name = %s",
            [application_name],
        ).fetchall()
