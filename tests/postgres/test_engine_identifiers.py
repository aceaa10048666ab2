"""Names and values that reach SQL, on a real PostgreSQL server (Q1, Q2, Q4, Q12).

Schema names are the only user input that becomes part of query text (always quoted,
after validation); everything else is a bound parameter. Hostile schema names must be
refused before any connection or statement; hostile queue names are refused by
``Store.queue``; SQL-looking values are stored verbatim; payload bytes round-trip
exactly.
"""

from __future__ import annotations

import secrets

import psycopg
import pytest
import trio
from psycopg import sql

from alkstore_trio import InvalidArgument, QueueOpts, open_store

APP = "alkstore-trio-tests:identifiers"
SQLISH = [
    "'); DROP TABLE jobs; --",
    '"; DROP SCHEMA public CASCADE; --',
    "%s %(id)s %% $1 @schema@ {schema} \\ ' \" ; -- /* */",
    "Robert'); DELETE FROM dead_jobs WHERE ('1' = '1",
]


def open_pg(dsn, schema, **kwargs):
    return open_store(dsn, schema=schema, migrate="apply", application_name=APP, **kwargs)


def schema_exists(dsn, name):
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [name]).fetchall()
    return bool(rows)


async def count(store, schema, table):
    query = sql.SQL("SELECT count(*) FROM {}.{}").format(
        sql.Identifier(schema), sql.Identifier(table)
    )
    async with store.transaction() as tx:
        ((n,),) = await tx.fetch(query.as_string())
    return int(n)


TOKEN = secrets.token_hex(4)
HOSTILE_SCHEMAS = [
    pytest.param("", id="empty"),
    pytest.param(f'a"{TOKEN}', id="double-quote"),
    pytest.param(f"a'{TOKEN}", id="single-quote"),
    pytest.param(f'x{TOKEN}"; DROP TABLE y; --', id="quote-break-out"),
    pytest.param("x; DROP TABLE y", id="semicolon-statement"),
    pytest.param('"x; DROP TABLE y"', id="quoted-statement"),
    pytest.param(f"a;{TOKEN}", id="semicolon"),
    pytest.param(f"a {TOKEN}", id="space"),
    pytest.param(f" a{TOKEN}", id="leading-space"),
    pytest.param(f"a{TOKEN}\n", id="trailing-newline"),
    pytest.param(f"a\x00{TOKEN}", id="nul"),
    pytest.param(f"a.{TOKEN}", id="dot"),
    pytest.param(f"a-{TOKEN}", id="dash"),
    pytest.param(f"sch\u00e9ma{TOKEN}", id="unicode-letter"),
    pytest.param(f"\u212a{TOKEN}", id="kelvin-sign"),
    pytest.param(f"\uff41{TOKEN}", id="fullwidth-a"),
    pytest.param("\u00e9" * 32, id="64-bytes-32-chars"),
    pytest.param(f"a{TOKEN}" + "b" * 60, id="69-chars"),
    pytest.param(("t" + TOKEN + "_" * 64)[:64], id="64-chars"),
    pytest.param(f"1{TOKEN}", id="leading-digit"),
    pytest.param(f"pg_{TOKEN}", id="pg-prefix"),
    pytest.param(f"PG_{TOKEN}", id="pg-prefix-upper"),
    pytest.param("pg_", id="pg-only"),
    pytest.param(None, id="none"),
    pytest.param(42, id="int"),
    pytest.param(b"alkstore", id="bytes"),
    pytest.param(["alkstore"], id="list"),
]


@pytest.fixture
async def sentinel(pg_dsn, make_schema):
    """A schema holding a table ``y`` and a DSN whose search_path points at it, so an
    injected ``DROP TABLE y`` would find a victim."""
    name = make_schema()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE TABLE {}.y (v int)").format(sql.Identifier(name)))
    await trio.lowlevel.checkpoint()
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, options=f"-csearch_path={name}")
    with psycopg.connect(dsn, autocommit=True) as conn:  # the victim is on the path
        assert conn.execute("SELECT count(*) FROM y").fetchall() == [(0,)]
    return name, dsn


@pytest.mark.parametrize("name", HOSTILE_SCHEMAS)
async def test_q12_hostile_schema_name_is_rejected_before_any_sql(pg_dsn, sentinel, name):
    sentinel_schema, sentinel_dsn = sentinel
    # Against a server that nobody listens on: a connection attempt would retry for
    # connect_timeout_s, so a prompt InvalidArgument means nothing was attempted.
    with trio.fail_after(2), pytest.raises(InvalidArgument, match="schema"):
        async with open_store(
            "postgresql://postgres@127.0.0.1:1/test",
            schema=name,
            migrate="apply",
            connect_timeout_s=30,
        ):
            pytest.fail("the store opened")
    # Against the real server, with a victim table on the search_path.
    with pytest.raises(InvalidArgument, match="schema") as raised:
        async with open_store(sentinel_dsn, schema=name, migrate="apply"):
            pytest.fail("the store opened")
    assert raised.value.__cause__ is None
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT 1 FROM pg_tables WHERE schemaname = %s AND tablename = 'y'",
            [sentinel_schema],
        ).fetchall()
        assert rows == [(1,)]
        if isinstance(name, str) and name:
            # The name as given, and as PostgreSQL would truncate it (63 bytes).
            plain = name.replace("\x00", "")
            candidates = [plain, plain.encode()[:63].decode(errors="ignore")]
            found = conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname = ANY(%s)", [candidates]
            ).fetchall()
            assert found == []


async def test_q1_hostile_queue_names_are_rejected_by_the_postgres_store(pg_dsn, schema):
    hostile = [
        "",
        "'); DROP TABLE jobs; --",
        'q"; NOTIFY x; --',
        "q;q",
        "q q",
        "q/q",
        "-q",
        "_q",
        "alk_internal",
        "q" * 64,
        "qu\u00e9ue",
        "q\x00",
        "q\n",
        None,
        42,
        b"q",
    ]
    async with open_pg(pg_dsn, schema) as store:
        for name in hostile:
            with pytest.raises(InvalidArgument, match="queue"):
                store.queue(name)
            with pytest.raises(InvalidArgument, match="queue"):
                store.open_wake_listener([name])
            with pytest.raises(InvalidArgument, match="queue"):
                async with store.transaction() as tx:
                    await tx.enqueue(name, b"x")
        assert await count(store, schema, "jobs") == 0
        assert await count(store, schema, "dead_jobs") == 0


async def test_q1_longest_valid_schema_and_queue_names_work_end_to_end(pg_dsn, make_schema):
    schema = make_schema(length=63, prefix="T_Mixed_")  # quoted: the case is kept
    queue_name = "Q" + "0123456789" * 6 + ":."
    assert len(schema) == len(queue_name) == 63
    async with open_pg(pg_dsn, schema) as store:
        queue = store.queue(queue_name, QueueOpts(max_attempts=2))
        async with store.open_wake_listener(queue) as listener:
            job_id = await queue.enqueue(b"long")
            with trio.fail_after(10):
                assert await listener.wait() == {queue_name}
        handle = await queue.claim_one("w")
        assert (handle.id, handle.job.queue) == (job_id, queue_name)
        assert await handle.heartbeat(60)
        assert await handle.retry("again", delay_s=0)
        handle = await queue.claim_one("w")
        assert handle.job.attempts == 2
        assert await handle.fail("done")
        dead = await queue.get_job(job_id)
        assert (dead.state, dead.queue, dead.last_error) == ("dead", queue_name, "done")
        other = await queue.enqueue(b"cancel me")
        assert await queue.cancel(other)
        ids = await queue.enqueue_many([b"a", b"b"])
        handles = await queue.claim_batch("w", 5)
        assert await queue.ack_batch([h.id for h in handles]) == len(ids) == 2
        assert (await queue.sweep_expired()).expired == 0
    assert schema_exists(pg_dsn, schema)
    assert not schema_exists(pg_dsn, schema.lower())


async def test_q2_payload_bytes_round_trip_exactly(pg_dsn, schema):
    payloads = [
        b"",
        bytes(range(256)),
        bytes(range(256))[::-1] * 3,
        b"\x00" * 17,
        b"\\x00'\"; DROP TABLE jobs; --",
        "h\u00e9llo \U0001f600".encode(),
        secrets.token_bytes(1024 * 1024),  # exactly the default limit
    ]
    async with open_pg(pg_dsn, schema) as store:
        queue = store.queue("bytes", QueueOpts(max_attempts=1))
        ids = [await queue.enqueue(p) for p in payloads]
        ids.append(await queue.enqueue(bytearray(b"\x00bytearray\xff")))
        ids.append(await queue.enqueue(memoryview(b"\x00\x01memoryview\xfe")[1:]))
        expected = [*payloads, b"\x00bytearray\xff", b"\x01memoryview\xfe"]
        ids += await queue.enqueue_many(payloads[:4])
        expected += payloads[:4]

        for job_id, payload in zip(ids, expected, strict=True):
            job = await queue.get_job(job_id)
            assert type(job.payload) is bytes
            assert job.payload == payload
        handles = await queue.claim_batch("w", len(ids))
        assert {h.id: h.job.payload for h in handles} == dict(zip(ids, expected, strict=True))
        for handle in handles:  # the dead-letter copy keeps the bytes too
            assert await handle.fail()
        for job_id, payload in zip(ids, expected, strict=True):
            assert (await queue.get_job(job_id)).payload == payload

        before = await count(store, schema, "jobs"), await count(store, schema, "dead_jobs")
        with pytest.raises(InvalidArgument, match="payload"):
            await queue.enqueue("text is not bytes")
        with pytest.raises(InvalidArgument, match="payload"):
            await queue.enqueue_many([b"ok", "text"])
        with pytest.raises(InvalidArgument, match="payload"):
            await queue.enqueue(b"x" * (1024 * 1024 + 1))
        with pytest.raises(InvalidArgument, match="payload"):
            async with store.transaction() as tx:
                await tx.enqueue(queue, "text")
        after = await count(store, schema, "jobs"), await count(store, schema, "dead_jobs")
        assert after == before


async def test_q4_sql_looking_worker_ids_errors_and_payloads_are_stored_verbatim(pg_dsn, schema):
    async with open_pg(pg_dsn, schema) as store:
        queue = store.queue("verbatim", QueueOpts(max_attempts=5))
        for text in SQLISH:
            job_id = await queue.enqueue(text.encode())
            handle = await queue.claim_one(text)
            assert handle.job.claimed_by == text
            assert (await queue.get_job(job_id)).claimed_by == text
            assert await handle.retry(text, delay_s=0)
            assert (await queue.get_job(job_id)).last_error == text
            handle = await queue.claim_one(text + " (2)")
            assert await handle.fail(text)
            dead = await queue.get_job(job_id)
            assert (dead.state, dead.claimed_by, dead.last_error, dead.payload) == (
                "dead",
                text + " (2)",
                text,
                text.encode(),
            )
        # Inside the caller's own transaction, the values are bound parameters too.
        async with store.transaction() as tx:
            job_id = await tx.enqueue("verbatim", SQLISH[0].encode())
            rows = await tx.fetch("SELECT %s::text, %s::text", [SQLISH[0], SQLISH[2]])
            assert rows == [(SQLISH[0], SQLISH[2])]
        assert (await queue.get_job(job_id)).payload == SQLISH[0].encode()
        # Nothing broke: both tables are still there and hold exactly what we wrote.
        assert await count(store, schema, "jobs") == 1
        assert await count(store, schema, "dead_jobs") == len(SQLISH)
        handle = await queue.claim_one("w")
        assert await handle.ack()


async def test_q12_sql_looking_application_name_is_a_value_not_conninfo_text(pg_dsn, schema):
    # Were it pasted into the connection string, this would switch the database and
    # the search_path of the store's sessions.
    name = "x' dbname='nope' options='-csearch_path=pg_catalog"
    assert len(name) <= 50
    async with open_store(pg_dsn, schema=schema, migrate="apply", application_name=name) as store:
        queue = store.queue("app")
        async with store.open_wake_listener(queue):
            job_id = await queue.enqueue(b"x")
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                rows = conn.execute(
                    "SELECT application_name, datname FROM pg_stat_activity "
                    "WHERE application_name IN (%s, %s) ORDER BY application_name",
                    [name, name + ":listen"],
                ).fetchall()
            dbname = psycopg.conninfo.conninfo_to_dict(pg_dsn).get("dbname")
            assert {app for app, _ in rows} == {name, name + ":listen"}
            assert {db for _, db in rows} == {dbname}
        assert (await queue.claim_one("w")).id == job_id
