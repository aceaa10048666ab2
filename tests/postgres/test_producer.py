"""Q20.1-Q20.3: the producer enqueues on the caller's own psycopg connection, in its
transaction, sync (``psycopg.Connection``) and asyncio (``psycopg.AsyncConnection``).

- The commit decides (Q20.2): a rolled-back transaction leaves no job and no
  notification; a committed one leaves its jobs and exactly one notification per queue.
  Notifications are counted on a LISTEN connection of the test's own, up to a sentinel
  NOTIFY committed after the producer's transaction (PostgreSQL delivers notifications in
  commit order), so no test waits for time to pass.
- The producer never commits: its jobs are invisible to other sessions until the caller
  commits, and the connection is still in its transaction afterwards (Q20.1).
- The store's rules (Q20.3): rows equal the store's for the same arguments and stamps;
  bad input is InvalidArgument with nothing sent and the transaction still usable; a
  missing, older or newer schema is SchemaError; unique keys are held until the caller's
  transaction ends, on the store's lock.
"""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
import trio
from _wakes import listen, notifications, wait_for_a_lock_waiter
from psycopg import pq
from psycopg import sql as pgsql

from alkstore_trio import (
    EngineError,
    InvalidArgument,
    QueueOpts,
    SchemaError,
    open_store,
    postgres,
)
from alkstore_trio._engines._postgres import _sql
from alkstore_trio.postgres import Producer

IDLE = pq.TransactionStatus.IDLE
INTRANS = pq.TransactionStatus.INTRANS
EMAILS = QueueOpts(visibility_timeout_s=42.5, max_attempts=7, backoff_base_s=1.5, expires_in_s=3600)


@pytest.fixture
def migrated(pg_dsn, schema) -> str:
    """A fresh schema at this library's version (a sync fixture: most tests here are
    sync, as the applications they stand for are)."""
    trio.run(lambda: postgres.migrate(pg_dsn, schema=schema))
    return schema


def count_jobs(dsn: str, schema: str, queue: str) -> int:
    with psycopg.connect(dsn) as conn:
        query = pgsql.SQL("SELECT count(*) FROM {}.jobs WHERE queue = %s").format(
            pgsql.Identifier(schema)
        )
        ((n,),) = conn.execute(query, [queue]).fetchall()
        return n


# -- Q20.2: the commit decides, sync -------------------------------------------------


def test_q20_2_sync_a_rolled_back_transaction_enqueues_nothing_and_wakes_nobody(pg_dsn, migrated):
    producer = Producer(migrated)
    with listen(pg_dsn, migrated, "emails") as listener, psycopg.connect(pg_dsn) as conn:
        conn.execute("SELECT 1")  # the caller's own work, in its transaction
        ids = [producer.enqueue(conn, "emails", b"one")]
        ids += producer.enqueue_many(conn, "emails", [b"two", b"three"], unique_keys=["k", None])
        assert all(job_id.created for job_id in ids)
        conn.rollback()
        assert notifications(listener, pg_dsn, migrated, "emails") == []
    assert count_jobs(pg_dsn, migrated, "emails") == 0


def test_q20_2_sync_a_committed_transaction_enqueues_and_wakes_once(pg_dsn, migrated):
    producer = Producer(migrated)
    with listen(pg_dsn, migrated, "emails") as listener, psycopg.connect(pg_dsn) as conn:
        producer.enqueue(conn, "emails", b"one")
        producer.enqueue_many(conn, "emails", [b"two", b"three"])
        producer.enqueue(conn, "emails", b"four", unique_key="k")
        # Q20.1: the producer never commits: nobody else sees the jobs yet.
        assert conn.info.transaction_status == INTRANS
        assert count_jobs(pg_dsn, migrated, "emails") == 0
        conn.commit()
        assert notifications(listener, pg_dsn, migrated, "emails") == [""]
    assert count_jobs(pg_dsn, migrated, "emails") == 4


# -- Q20.2: the commit decides, asyncio ----------------------------------------------


def test_q20_2_async_a_rolled_back_transaction_enqueues_nothing_and_wakes_nobody(pg_dsn, migrated):
    producer = Producer(migrated)

    async def app() -> None:
        async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
            await producer.aenqueue(conn, "emails", b"one", unique_key="k")
            await producer.aenqueue_many(conn, "emails", [b"two", b"three"])
            await conn.rollback()

    with listen(pg_dsn, migrated, "emails") as listener:
        asyncio.run(app())
        assert notifications(listener, pg_dsn, migrated, "emails") == []
    assert count_jobs(pg_dsn, migrated, "emails") == 0


def test_q20_2_async_a_committed_transaction_enqueues_and_wakes_once(pg_dsn, migrated):
    producer = Producer(migrated)

    async def app() -> list[int]:
        async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
            async with conn.transaction():
                ids = [await producer.aenqueue(conn, "emails", b"one")]
                ids += await producer.aenqueue_many(conn, "emails", [b"two", b"three"])
                assert await asyncio.to_thread(count_jobs, pg_dsn, migrated, "emails") == 0
            assert conn.info.transaction_status == IDLE
            return ids

    with listen(pg_dsn, migrated, "emails") as listener:
        ids = asyncio.run(app())
        assert notifications(listener, pg_dsn, migrated, "emails") == [""]
    assert ids == sorted(ids)
    assert count_jobs(pg_dsn, migrated, "emails") == 3


async def test_q20_2_a_store_listener_is_woken_once_by_a_committed_producer(pg_dsn, migrated):
    producer = Producer(migrated)

    def commit_then_roll_back() -> None:
        with psycopg.connect(pg_dsn) as conn:
            producer.enqueue_many(conn, "emails", [b"a", b"b"])
            conn.commit()
            producer.enqueue(conn, "other", b"c")
            conn.rollback()

    async with (
        open_store(pg_dsn, schema=migrated) as store,
        store.open_wake_listener(["emails", "other"]) as wakes,
    ):
        await trio.to_thread.run_sync(commit_then_roll_back)
        assert await wakes.wait(timeout_s=30) == {"emails"}
        # A later wake of another queue comes alone: nothing more was latched.
        await store.queue("other").enqueue(b"d")
        assert await wakes.wait(timeout_s=30) == {"other"}


# -- Q20.3: the store's rules --------------------------------------------------------


async def test_q20_3_a_producer_writes_the_rows_the_store_writes(pg_dsn, migrated):
    run_at = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    options = [
        {},
        {"priority": -5, "delay_s": 90.5, "headers": {"traceparent": "00-ab", "é": '"'}},
        {"run_at": run_at, "max_attempts": 2, "concurrency_key": "tenant-1"},
        {"delay_s": -3600.0, "unique_key": "once", "unique_for_s": 60.0},
    ]
    producer = Producer(migrated, queues={"emails": EMAILS})
    async with open_store(pg_dsn, schema=migrated) as store:
        for kwargs in options:
            stored = await store.queue("emails", EMAILS).enqueue(b"payload", **kwargs)
            by_name = await store.queue("plain").enqueue(b"payload", **kwargs)

            def produce(kwargs=kwargs):
                keyed = {**kwargs}
                if "unique_key" in keyed:
                    keyed["unique_key"] += "-producer"
                with psycopg.connect(pg_dsn) as conn:
                    ids = producer.enqueue(conn, "emails", b"payload", **keyed)
                    plain = producer.enqueue(conn, "plain", b"payload", **keyed)
                    conn.commit()
                    return ids, plain

            produced, plain = await trio.to_thread.run_sync(produce)
            for store_id, producer_id, queue in (
                (stored, produced, "emails"),
                (by_name, plain, "plain"),
            ):
                a = await store.queue(queue).get_job(store_id)
                b = await store.queue(queue).get_job(producer_id)
                assert shape(b) == shape(a), kwargs
            assert (await store.queue("emails").get_job(produced)).max_attempts == kwargs.get(
                "max_attempts", 7
            )
            assert (await store.queue("plain").get_job(plain)).visibility_timeout_s == 300


async def test_q20_3_q19_2_a_producer_stamps_keep_completed_s_and_its_jobs_are_kept(
    pg_dsn, migrated
):
    # Q19.2 through the producer: the queue's keep_completed_s is stamped on every row it
    # writes (one, many, keyed), as the store's handle stamps it, so their acks keep them.
    producer = Producer(migrated, queues={"kept": QueueOpts(keep_completed_s=60)})

    def produce():
        with psycopg.connect(pg_dsn) as conn:
            one = producer.enqueue(conn, "kept", b"one")
            many = producer.enqueue_many(conn, "kept", [b"a", b"b"])
            keyed = producer.enqueue(conn, "kept", b"keyed", unique_key="k")
            by_name = producer.enqueue(conn, "unstamped", b"plain")
            conn.commit()
            return [one, *many, keyed], by_name

    stamped, plain = await trio.to_thread.run_sync(produce)
    async with open_store(pg_dsn, schema=migrated) as store:
        queue = store.queue("kept")
        for job_id in stamped:
            assert (await queue.get_job(job_id)).keep_completed_s == 60, job_id
        assert (await store.queue("unstamped").get_job(plain)).keep_completed_s is None
        handles = await queue.claim_batch("w", len(stamped))
        assert await queue.ack_handles(handles, results=[b"r"] * len(handles)) == [True] * 4
        kept = await queue.list_jobs("completed")
        assert sorted(job.id for job in kept) == sorted(stamped)
        assert {job.result for job in kept} == {b"r"}


def shape(job) -> dict[str, object]:
    """A job's fields, its times relative to its enqueue, without its id or key."""
    fields = {
        name: getattr(job, name)
        for name in (
            "queue", "payload", "priority", "state", "attempts", "max_attempts",
            "visibility_timeout_s", "backoff_base_s", "headers", "concurrency_key",
            "last_error", "claimed_by",
        )
    }  # fmt: skip
    fields["run_at"] = job.run_at if job.run_at.year == 2031 else job.run_at - job.enqueued_at
    fields["expires_in"] = job.expires_at and job.expires_at - job.enqueued_at
    fields["keyed"] = job.unique_key is not None
    return fields


BAD_CALLS = [
    ("queue", {"queue": "alk_internal"}),
    ("queue", {"queue": "x'); DROP TABLE jobs; --"}),
    ("queue", {"queue": ""}),
    ("queue", {"queue": "q" * 64}),
    ("payload", {"payload": "text is not bytes"}),
    ("payload", {"payload": b"x" * 1025}),
    ("priority", {"priority": 2**31}),
    ("priority", {"priority": True}),
    ("delay_s", {"delay_s": math.nan}),
    ("delay_s", {"delay_s": 1e300}),
    ("run_at", {"run_at": datetime(2030, 1, 1)}),  # naive
    ("max_attempts", {"max_attempts": 0}),
    ("headers", {"headers": {"a": 1}}),
    ("headers", {"headers": {"a": "nul\x00"}}),
    ("headers", {"headers": {str(i): "" for i in range(65)}}),
    ("unique_key", {"unique_key": ""}),
    ("unique_key", {"unique_key": "k" * 257}),
    ("unique_for_s", {"unique_for_s": 5.0}),  # without a key
    ("concurrency_key", {"concurrency_key": "a\x00b"}),
]


@pytest.mark.parametrize(
    ("param", "bad"), BAD_CALLS, ids=[f"{p}-{i}" for i, (p, _) in enumerate(BAD_CALLS)]
)
def test_q20_3_bad_input_is_invalid_argument_nothing_sent_and_the_transaction_usable(
    pg_dsn, migrated, param, bad
):
    producer = Producer(migrated, max_payload_bytes=1024)
    call = {"queue": "emails", "payload": b"x", **bad}
    queue, payload = call.pop("queue"), call.pop("payload")
    with psycopg.connect(pg_dsn) as conn:
        first = producer.enqueue(conn, "emails", b"good")
        with pytest.raises(InvalidArgument) as caught:
            producer.enqueue(conn, queue, payload, **call)
        assert param.rstrip("s") in str(caught.value)
        many = {name: value for name, value in call.items() if not name.endswith("_key")}
        for name in ("unique_key", "concurrency_key"):
            if name in call:
                many[name + "s"] = [None, call[name]]
        with pytest.raises(InvalidArgument):
            producer.enqueue_many(conn, queue, [b"ok", payload], **many)
        assert conn.info.transaction_status == INTRANS  # still usable
        second = producer.enqueue(conn, "emails", b"good")
        conn.commit()
    assert count_jobs(pg_dsn, migrated, "emails") == 2
    assert second > first


def test_q20_3_many_argument_checks_and_connection_kinds(pg_dsn, migrated):
    producer = Producer(migrated)
    with psycopg.connect(pg_dsn) as conn:
        for kwargs in (
            {"unique_keys": ["a"]},  # one key for two payloads
            {"concurrency_keys": ["a", "b", "c"]},
        ):
            with pytest.raises(InvalidArgument, match="one entry per payload"):
                producer.enqueue_many(conn, "emails", [b"1", b"2"], **kwargs)
        with pytest.raises(InvalidArgument, match="not a single bytes"):
            producer.enqueue_many(conn, "emails", b"12")
        assert producer.enqueue_many(conn, "emails", []) == []  # D6: nothing sent
        assert conn.info.transaction_status == IDLE
        with pytest.raises(InvalidArgument, match="use aenqueue"):
            asyncio.run(_async_conn_to_sync_enqueue(pg_dsn, producer))
        with pytest.raises(InvalidArgument, match=r"use enqueue for a psycopg\.Connection"):
            asyncio.run(producer.aenqueue(conn, "emails", b"x"))
        with pytest.raises(InvalidArgument, match=r"psycopg\.Connection"):
            producer.enqueue("postgresql://not-a-connection", "emails", b"x")
    for bad in ({"schema": "pg_x"}, {"schema": 'a"b'}, {"queues": {"alk_x": QueueOpts()}},
                {"queues": {"q": {"max_attempts": 3}}}, {"queues": [("q", QueueOpts())]},
                {"max_payload_bytes": -1}, {"max_payload_bytes": 2**30 + 1}):  # fmt: skip
        with pytest.raises(InvalidArgument):
            Producer(**{"schema": migrated, **bad})


async def _async_conn_to_sync_enqueue(dsn, producer):
    async with await psycopg.AsyncConnection.connect(dsn) as aconn:
        producer.enqueue(aconn, "emails", b"x")


@pytest.mark.parametrize("version", ["missing", "older", "newer"])
def test_q20_3_a_schema_at_another_version_is_schema_error_and_nothing_is_enqueued(
    pg_dsn, make_schema, version
):
    schema = make_schema()
    latest = _sql.latest_version()
    if version != "missing":
        trio.run(lambda: postgres.migrate(pg_dsn, schema=schema))
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            number = latest - 1 if version == "older" else latest + 1
            admin.execute(
                pgsql.SQL("UPDATE {}.alk_schema_version SET version = %s").format(
                    pgsql.Identifier(schema)
                ),
                [number],
            )
    producer = Producer(schema)
    with psycopg.connect(pg_dsn) as conn:
        with pytest.raises(SchemaError) as caught:
            producer.enqueue(conn, "emails", b"x")
        assert conn.info.transaction_status == INTRANS  # the reads did not abort it
        conn.execute("SELECT 1")
    message = str(caught.value)
    expected = {
        "missing": "has no alkstore_trio tables",
        "older": f"is at version {latest - 1}, this library needs {latest}",
        "newer": f"newer than this library's {latest}",
    }[version]
    assert expected in message
    if version != "newer":
        assert f"alkstore-trio migrate --dsn <your dsn> --schema {schema}" in message
    if version != "missing":
        assert count_jobs(pg_dsn, schema, "emails") == 0


def test_q20_3_the_schema_is_checked_once_per_connection(pg_dsn, migrated):
    producer = Producer(migrated)
    with psycopg.connect(pg_dsn) as conn, psycopg.connect(pg_dsn) as other:
        producer.enqueue(conn, "emails", b"a")
        conn.commit()
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(
                pgsql.SQL("UPDATE {}.alk_schema_version SET version = version + 1").format(
                    pgsql.Identifier(migrated)
                )
            )
        producer.enqueue(conn, "emails", b"b")  # checked before: as a store that is open
        with pytest.raises(SchemaError, match="newer than this library"):
            producer.enqueue(other, "emails", b"c")  # a new connection: checked now


def test_q20_3_a_failed_or_closed_connection_is_engine_error_before_sending(pg_dsn, migrated):
    producer = Producer(migrated)
    with psycopg.connect(pg_dsn) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1 / 0")
        with pytest.raises(EngineError, match="roll it back first"):
            producer.enqueue(conn, "emails", b"x")
        conn.rollback()
        conn.execute("SET TRANSACTION READ ONLY")
        with pytest.raises(EngineError) as caught:
            producer.enqueue(conn, "emails", b"x")
        assert isinstance(caught.value.__cause__, psycopg.errors.ReadOnlySqlTransaction)
        conn.rollback()
    with pytest.raises(EngineError, match="closed"):
        producer.enqueue(conn, "emails", b"x")


def test_q20_1_autocommit_each_call_is_a_transaction_of_its_own(pg_dsn, migrated):
    producer = Producer(migrated)
    with listen(pg_dsn, migrated, "emails") as listener:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            first = producer.enqueue(conn, "emails", b"a", unique_key="k")
            assert conn.info.transaction_status == IDLE
            again = producer.enqueue(conn, "emails", b"b", unique_key="k")
            assert (int(again), again.created) == (first, False)
            producer.enqueue_many(conn, "emails", [b"c", b"d"])
        assert notifications(listener, pg_dsn, migrated, "emails") == ["", ""]
    assert count_jobs(pg_dsn, migrated, "emails") == 3


async def test_q20_3_a_key_the_callers_transaction_created_is_held_until_it_ends(pg_dsn, migrated):
    producer = Producer(migrated)
    conn = await trio.to_thread.run_sync(psycopg.connect, pg_dsn)
    try:
        held = await trio.to_thread.run_sync(
            lambda: producer.enqueue(conn, "emails", b"a", unique_key="k")
        )
        again = await trio.to_thread.run_sync(
            lambda: producer.enqueue(conn, "emails", b"b", unique_key="k")
        )
        assert (int(again), again.created) == (held, False)  # Q15.2 within the transaction
        waiter = f"alk-t-waiter-{migrated}"
        async with open_store(pg_dsn, schema=migrated, application_name=waiter) as store:
            result: list[object] = []

            async def store_enqueue() -> None:
                result.append(await store.queue("emails").enqueue(b"c", unique_key="k"))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(store_enqueue)
                await wait_for_a_lock_waiter(pg_dsn, waiter)
                assert result == []  # the store's enqueue waits for the caller's commit
                await trio.to_thread.run_sync(conn.commit)
            ((found,),) = [result]
            assert (int(found), found.created) == (held, False)
    finally:
        await trio.to_thread.run_sync(conn.close)


def test_q20_1_django_style_client_side_binding_cursors_are_not_used(pg_dsn, migrated):
    # Django's psycopg backend sets cursor_factory = ClientCursor, which cannot send the
    # payload in binary; the producer makes its own server-side binding cursor.
    producer = Producer(migrated)
    with psycopg.connect(pg_dsn, cursor_factory=psycopg.ClientCursor) as conn:
        payload = bytes(range(256))
        job_id = producer.enqueue(
            conn, "emails", payload, run_at=datetime.now(UTC) + timedelta(days=1)
        )
        (row,) = conn.execute(
            pgsql.SQL("SELECT payload FROM {}.jobs WHERE id = %s").format(
                pgsql.Identifier(migrated)
            ),
            [job_id],
        ).fetchall()
        assert bytes(row[0]) == payload


def test_q20_1_opts_stamps_this_call_over_the_queues_entry_and_is_checked(pg_dsn, migrated):
    producer = Producer(migrated, queues={"emails": EMAILS})
    with psycopg.connect(pg_dsn) as conn:
        with pytest.raises(InvalidArgument, match="opts must be a QueueOpts"):
            producer.enqueue(conn, "emails", b"x", opts={"max_attempts": 2})  # type: ignore[arg-type]
        one = producer.enqueue(conn, "emails", b"x", opts=QueueOpts(max_attempts=2))
        many = producer.enqueue_many(conn, "emails", [b"y"], opts=QueueOpts(backoff_base_s=9))
        plain = producer.enqueue(conn, "emails", b"z")
        rows = conn.execute(
            pgsql.SQL("SELECT id, max_attempts, backoff_base_s FROM {}.jobs ORDER BY id").format(
                pgsql.Identifier(migrated)
            )
        ).fetchall()
    assert rows == [(one, 2, 5.0), (many[0], 3, 9.0), (plain, 7, 1.5)]
