"""Q20.4: the schema's ``enqueue()`` function, from psql and from a plain connection.

- From ``psql`` (the real binary, as an operator or a shell script would call it): a job
  is enqueued, reads back through the store, and a bad argument fails with SQLSTATE 22023.
- Against hostile input: NULs, huge values, negative delays, bad priorities, injection
  attempts in queue names, bad headers, non-finite times. Every refusal is 22023 (or
  PostgreSQL's own refusal before the function runs, for a NUL in text), names the
  parameter, never shows a payload, a key or a header's value, and leaves no job; every
  edge that is valid round-trips exactly.
- It writes the store's rows (its defaults are ``QueueOpts()``'s), takes the store's
  unique-key lock, and wakes the channel the store listens on, at the commit only.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
import trio
import trio.lowlevel
from _wakes import listen, notifications, wait_for_a_lock_waiter
from psycopg import sql as pgsql

from alkstore_trio import QueueOpts, open_store, postgres
from alkstore_trio._engines._postgres import _sql
from alkstore_trio.postgres import Producer

MIB = 1024 * 1024
SECRET = "s3cret-value-never-shown"


@pytest.fixture
def migrated(pg_dsn, schema) -> str:
    trio.run(lambda: postgres.migrate(pg_dsn, schema=schema))
    return schema


def call(conn: psycopg.Connection, schema: str, *args: object, **kwargs: object) -> tuple:
    """``SELECT * FROM <schema>.enqueue(args..., name => value...)``: (job_id, created)."""
    params = [pgsql.Placeholder() for _ in args] + [
        pgsql.SQL("{} => {}").format(pgsql.Identifier(name), pgsql.Placeholder()) for name in kwargs
    ]
    query = pgsql.SQL("SELECT * FROM {}.enqueue({})").format(
        pgsql.Identifier(schema), pgsql.SQL(", ").join(params)
    )
    (row,) = conn.execute(query, [*args, *kwargs.values()]).fetchall()
    return row


def job_count(conn: psycopg.Connection, schema: str) -> int:
    ((n,),) = conn.execute(
        pgsql.SQL("SELECT count(*) FROM {}.jobs").format(pgsql.Identifier(schema))
    ).fetchall()
    return n


# -- from psql -------------------------------------------------------------------------


def psql(dsn: str, *commands: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("psql")
    if binary is None:
        pytest.skip("the psql binary is not installed")
    argv = [
        binary,
        "-X",
        "-At",
        "-v",
        "ON_ERROR_STOP=1",
        "-d",
        dsn,
        "-c",
        r"\set VERBOSITY verbose",
    ]
    for command in commands:
        argv += ["-c", command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


async def test_q20_4_psql_enqueues_a_job_the_store_reads_back(pg_dsn, migrated):
    done = psql(
        pg_dsn,
        f"SELECT job_id, created FROM {migrated}.enqueue('emails', convert_to('confirm B-1', "
        "'UTF8'), priority => 5, headers => '{\"traceparent\": \"00-ab\"}')",
    )
    assert done.returncode == 0, done.stderr
    job_id, created = done.stdout.strip().split("|")
    assert created == "t"
    async with open_store(pg_dsn, schema=migrated) as store:
        job = await store.queue("emails").get_job(int(job_id))
        assert job is not None
        assert (job.payload, job.priority, dict(job.headers)) == (
            b"confirm B-1", 5, {"traceparent": "00-ab"},
        )  # fmt: skip
        assert (job.max_attempts, job.visibility_timeout_s, job.backoff_base_s) == (3, 300, 5)
        handle = await store.queue("emails").claim_one("w")
        assert handle is not None
        assert handle.id == int(job_id)


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ("'alk_jobs', 'x'", "queue"),
        ("$$x'); DROP TABLE {schema}.jobs; --$$, 'x'", "queue"),
        ("'emails', 'x', priority => 2147483648", "priority"),
        ("'emails', 'x', delay_s => 'Infinity'", "delay_s"),
        ("'emails', 'x', headers => '[1, 2]'", "headers"),
        ("'emails', 'x', unique_key => ''", "unique_key"),
    ],
)
def test_q20_4_psql_reports_a_bad_argument_with_sqlstate_22023(pg_dsn, migrated, arguments, named):
    done = psql(pg_dsn, f"SELECT * FROM {migrated}.enqueue({arguments.format(schema=migrated)})")
    assert done.returncode != 0
    assert "ERROR:  22023:" in done.stderr, done.stderr
    assert named in done.stderr.split("ERROR:  22023:")[1].splitlines()[0]
    done = psql(pg_dsn, f"SELECT count(*) FROM {migrated}.jobs")
    assert (done.returncode, done.stdout.strip()) == (0, "0")  # the table is there, empty


# -- hostile input ---------------------------------------------------------------------


HOSTILE = [
    # (arguments, the parameter the message names)
    ({"queue": None, "payload": b"x"}, "queue"),
    ({"queue": "", "payload": b"x"}, "queue"),
    ({"queue": "q" * 64, "payload": b"x"}, "queue"),
    ({"queue": "emails\n", "payload": b"x"}, "queue"),
    ({"queue": "-emails", "payload": b"x"}, "queue"),
    ({"queue": "émails", "payload": b"x"}, "queue"),
    ({"queue": "ｅmails", "payload": b"x"}, "queue"),  # a fullwidth letter
    ({"queue": "e mails", "payload": b"x"}, "queue"),
    ({"queue": "x'; DELETE FROM jobs; --", "payload": b"x"}, "queue"),
    ({"queue": 'x"; DROP SCHEMA public; --', "payload": b"x"}, "queue"),
    ({"queue": "alk_reserved", "payload": b"x"}, "queue"),
    ({"queue": "emails", "payload": None}, "payload"),
    ({"queue": "emails", "payload": b"x" * (MIB + 1)}, "payload"),
    ({"queue": "emails", "payload": b"x", "priority": 2**31}, "priority"),
    ({"queue": "emails", "payload": b"x", "priority": -(2**31) - 1}, "priority"),
    ({"queue": "emails", "payload": b"x", "priority": None}, "priority"),
    ({"queue": "emails", "payload": b"x", "max_attempts": 0}, "max_attempts"),
    ({"queue": "emails", "payload": b"x", "max_attempts": 2**31}, "max_attempts"),
    ({"queue": "emails", "payload": b"x", "delay_s": float("nan")}, "delay_s"),
    ({"queue": "emails", "payload": b"x", "delay_s": float("-inf")}, "delay_s"),
    ({"queue": "emails", "payload": b"x", "delay_s": 1e300}, "delay_s"),
    ({"queue": "emails", "payload": b"x", "delay_s": -3153600001.0}, "delay_s"),
    ({"queue": "emails", "payload": b"x", "visibility_timeout_s": 0.0}, "visibility_timeout_s"),
    ({"queue": "emails", "payload": b"x", "visibility_timeout_s": None}, "visibility_timeout_s"),
    ({"queue": "emails", "payload": b"x", "backoff_base_s": -1.0}, "backoff_base_s"),
    ({"queue": "emails", "payload": b"x", "backoff_base_s": float("nan")}, "backoff_base_s"),
    ({"queue": "emails", "payload": b"x", "expires_in_s": 0.0}, "expires_in_s"),
    ({"queue": "emails", "payload": b"x", "run_at": "infinity"}, "run_at"),
    ({"queue": "emails", "payload": b"x", "run_at": "-infinity"}, "run_at"),
    ({"queue": "emails", "payload": b"x", "run_at": "10000-01-01 00:00:00+00"}, "run_at"),
    ({"queue": "emails", "payload": b"x", "run_at": "0001-01-01 00:00:00+00 BC"}, "run_at"),
    ({"queue": "emails", "payload": b"x", "headers": "[]"}, "headers"),
    ({"queue": "emails", "payload": b"x", "headers": '"text"'}, "headers"),
    ({"queue": "emails", "payload": b"x", "headers": '{"a": 1}'}, "headers"),
    ({"queue": "emails", "payload": b"x", "headers": '{"a": {"b": "c"}}'}, "headers"),
    ({"queue": "emails", "payload": b"x", "headers": '{"": "v"}'}, "headers"),
    ({"queue": "emails", "payload": b"x", "headers": json.dumps({"k" * 257: "v"})}, "headers"),
    (
        {
            "queue": "emails",
            "payload": b"x",
            "headers": json.dumps({str(i): "" for i in range(65)}),
        },
        "headers",
    ),
    ({"queue": "emails", "payload": b"x", "headers": json.dumps({"a": "v" * 16384})}, "headers"),
    ({"queue": "emails", "payload": b"x", "unique_key": ""}, "unique_key"),
    ({"queue": "emails", "payload": b"x", "unique_key": "k" * 257}, "unique_key"),
    ({"queue": "emails", "payload": b"x", "unique_for_s": 60.0}, "unique_for_s"),
    ({"queue": "emails", "payload": b"x", "unique_key": "k", "unique_for_s": 0.0}, "unique_for_s"),
    ({"queue": "emails", "payload": b"x", "concurrency_key": ""}, "concurrency_key"),
    ({"queue": "emails", "payload": b"x", "concurrency_key": "c" * 257}, "concurrency_key"),
    ({"queue": "emails", "payload": b"x", "keep_completed_s": -1.0}, "keep_completed_s"),
    ({"queue": "emails", "payload": b"x", "keep_completed_s": float("nan")}, "keep_completed_s"),
    ({"queue": "emails", "payload": b"x", "keep_completed_s": float("inf")}, "keep_completed_s"),
    ({"queue": "emails", "payload": b"x", "keep_completed_s": 3153600001.0}, "keep_completed_s"),
]


@pytest.mark.parametrize(
    ("arguments", "named"), HOSTILE, ids=[f"{n}-{i}" for i, (_, n) in enumerate(HOSTILE)]
)
def test_q20_4_hostile_input_is_refused_with_22023_and_leaves_no_trace(
    pg_dsn, migrated, arguments, named
):
    arguments = dict(arguments)
    queue, payload = arguments.pop("queue"), arguments.pop("payload")
    if arguments.get("unique_key"):
        arguments["unique_key"] = SECRET + arguments["unique_key"]
    with psycopg.connect(pg_dsn) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue) as caught:
            call(conn, migrated, queue, payload, **arguments)
        conn.rollback()
        assert job_count(conn, migrated) == 0
    error = caught.value
    assert error.sqlstate == "22023"
    message = error.diag.message_primary or ""
    assert message.startswith(named) or f" {named} " in message or f"{named} must" in message
    assert SECRET not in message
    assert "vvvv" not in message  # a header's value
    assert "xxxx" not in message  # a payload


@pytest.mark.parametrize(
    "arguments",
    [
        {"queue": "nul\x00", "payload": b"x"},
        {"queue": "emails", "payload": b"x", "unique_key": "a\x00b"},
        {"queue": "emails", "payload": b"x", "concurrency_key": "\x00"},
    ],
)
def test_q20_4_a_nul_in_text_never_reaches_the_function(pg_dsn, migrated, arguments):
    arguments = dict(arguments)
    queue, payload = arguments.pop("queue"), arguments.pop("payload")
    with psycopg.connect(pg_dsn) as conn:
        with pytest.raises(psycopg.DataError):
            call(conn, migrated, queue, payload, **arguments)
        conn.rollback()
        # From SQL itself: PostgreSQL refuses to make a text with a NUL, and jsonb the
        # \u0000 escape, before the function runs.
        for expression in ("pg_catalog.chr(0)", '\'{"a": "\\u0000"}\'::jsonb'):
            with pytest.raises(psycopg.Error):
                conn.execute(f"SELECT {expression}")
            conn.rollback()
        assert job_count(conn, migrated) == 0


async def test_q20_4_valid_edges_round_trip_exactly(pg_dsn, migrated):
    payloads = [b"", b"\x00", bytes(range(256)) * 4, b"x" * MIB]
    big = {"k" * 256: "v" * (16384 - 256 - 20), 'quote"s': "é\n\t"}
    headers = json.dumps(big)
    now = datetime.now(UTC)
    with psycopg.connect(pg_dsn) as conn:
        ids = [call(conn, migrated, "emails", p)[0] for p in payloads]
        edge = call(
            conn, migrated, "a" * 63, b"x", priority=-(2**31), max_attempts=2**31 - 1,
            delay_s=-3600.0, visibility_timeout_s=3153600000.0, backoff_base_s=0.0,
            expires_in_s=0.001, headers=headers, unique_key="x'); DROP TABLE jobs; --",
            unique_for_s=3153600000.0, concurrency_key="k" * 256,
        )[0]  # fmt: skip
        late = call(
            conn,
            migrated,
            "Q.1:a-b_c",
            b"x",
            priority=2**31 - 1,
            run_at="9999-12-31 23:59:59.999999+00",
        )[0]
        conn.commit()
    async with open_store(pg_dsn, schema=migrated) as store:
        for job_id, payload in zip(ids, payloads, strict=True):
            assert (await store.queue("emails").get_job(job_id)).payload == payload
        job = await store.queue("a" * 63).get_job(edge)
        assert job.priority == -(2**31)
        assert job.max_attempts == 2**31 - 1
        assert job.run_at == job.enqueued_at  # Q2.1: a negative delay means now
        assert job.run_at >= now - timedelta(minutes=5)
        assert job.visibility_timeout_s == 3153600000.0
        assert job.unique_key == "x'); DROP TABLE jobs; --"  # data, stored verbatim
        assert job.concurrency_key == "k" * 256
        assert job.headers['quote"s'] == "é\n\t"
        assert len(job.headers["k" * 256]) == 16384 - 256 - 20
        assert job.expires_at == job.enqueued_at + timedelta(microseconds=1000)
        job = await store.queue("Q.1:a-b_c").get_job(late)
        assert job.run_at == datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
        assert job.priority == 2**31 - 1


# -- the store's rows, lock and wake ------------------------------------------------


async def test_q20_4_defaults_are_queue_opts_and_rows_equal_the_stores(pg_dsn, migrated):
    opts = QueueOpts()
    async with open_store(pg_dsn, schema=migrated) as store:
        stored = await store.queue("emails").enqueue(b"p", delay_s=30.0, concurrency_key="t")
        with psycopg.connect(pg_dsn) as conn:
            (made, created) = call(
                conn, migrated, "emails", b"p", delay_s=30.0, concurrency_key="t"
            )
            conn.commit()
        assert created is True
        a = await store.queue("emails").get_job(stored)
        b = await store.queue("emails").get_job(made)
        assert (b.max_attempts, b.visibility_timeout_s, b.backoff_base_s, b.expires_at) == (
            opts.max_attempts, opts.visibility_timeout_s, opts.backoff_base_s, None,
        )  # fmt: skip
        for field in (
            "payload", "priority", "state", "attempts", "max_attempts", "headers",
            "visibility_timeout_s", "backoff_base_s", "concurrency_key", "unique_key",
        ):  # fmt: skip
            assert getattr(a, field) == getattr(b, field), field
        assert b.run_at - b.enqueued_at == a.run_at - a.enqueued_at == timedelta(seconds=30)


async def test_q20_4_the_function_and_a_producer_serialize_on_one_key(pg_dsn, migrated):
    producer = Producer(migrated)
    holder = await trio.to_thread.run_sync(psycopg.connect, pg_dsn)
    try:
        held = await trio.to_thread.run_sync(
            lambda: producer.enqueue(holder, "emails", b"a", unique_key="k", unique_for_s=600.0)
        )
        results: list[tuple] = []

        waiter = f"alk-t-waiter-{migrated}"

        def from_sql() -> None:
            with psycopg.connect(pg_dsn, application_name=waiter) as conn:
                results.append(call(conn, migrated, "emails", b"b", unique_key="k"))
                conn.commit()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, from_sql)
            await wait_for_a_lock_waiter(pg_dsn, waiter)
            assert results == []  # waiting for the producer's transaction
            await trio.to_thread.run_sync(holder.commit)
        assert results == [(held, False)]
    finally:
        await trio.to_thread.run_sync(holder.close)
    # The window (Q15.5) holds after the job is gone: the SQL function sees it too.
    async with open_store(pg_dsn, schema=migrated) as store:
        assert await store.queue("emails").cancel(held)
    with psycopg.connect(pg_dsn) as conn:
        assert call(conn, migrated, "emails", b"c", unique_key="k") == (held, False)
        assert call(conn, migrated, "other", b"c", unique_key="k")[1] is True  # keys per queue
        conn.commit()


@pytest.mark.parametrize("queue", ["emails", "q" * 63])
def test_q20_4_wakes_the_stores_channel_at_commit_only(pg_dsn, make_schema, queue):
    schema = make_schema(length=40)  # with a 63-character queue, the channel is hashed
    trio.run(lambda: postgres.migrate(pg_dsn, schema=schema))
    assert (len(f"alk/{schema}/{queue}") > 63) == (len(queue) == 63)
    with listen(pg_dsn, schema, queue) as listener, psycopg.connect(pg_dsn) as conn:
        call(conn, schema, queue, b"x")
        conn.rollback()
        assert notifications(listener, pg_dsn, schema, queue) == []
        call(conn, schema, queue, b"x")
        call(conn, schema, queue, b"y", unique_key="k")
        call(conn, schema, queue, b"z", delay_s=90.5)
        conn.commit()
        assert notifications(listener, pg_dsn, schema, queue) == ["", "90.5"]
    assert _sql.wake_channel(schema, queue).startswith("alk#" if len(queue) == 63 else "alk/")


def test_q20_4_and_q20_3_a_hostile_search_path_changes_nothing(pg_dsn, migrated, make_schema):
    # Look-alikes first on the session's search_path: the schema's own tables and a clock
    # stuck in 1970. The function and the producer name everything by schema.
    evil = make_schema(prefix="alk_evil_")
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        for _, script in _sql.migrations(evil):
            admin.execute(script)
        admin.execute(
            pgsql.SQL(
                "CREATE OR REPLACE FUNCTION {}.alk_now() RETURNS timestamptz LANGUAGE sql "
                "STABLE AS $$ SELECT '1970-01-01 00:00:00+00'::timestamptz $$"
            ).format(pgsql.Identifier(evil))
        )
    with psycopg.connect(pg_dsn, options=f"-csearch_path={evil},public") as conn:
        assert conn.execute("SELECT alk_now()").fetchone()[0].year == 1970  # the trap is armed
        from_sql, _ = call(conn, migrated, "emails", b"x", unique_key="k")
        from_python = Producer(migrated).enqueue(conn, "emails", b"y", delay_s=5.0)
        conn.commit()
        for schema, expected in ((migrated, 2), (evil, 0)):
            assert job_count(conn, schema) == expected
        years = conn.execute(
            pgsql.SQL("SELECT id, extract(year FROM enqueued_at) FROM {}.jobs ORDER BY id").format(
                pgsql.Identifier(migrated)
            )
        ).fetchall()
    assert [job_id for job_id, _ in years] == [from_sql, from_python]
    assert all(year > 2000 for _, year in years)


async def test_q20_4_q19_2_keep_completed_s_keeps_the_job_and_wait_reads_its_result(
    pg_dsn, migrated
):
    # Migration 14: a job enqueued from SQL with keep_completed_s is kept after its ack,
    # with its result, and a waiter is woken by the ack (Q19.4); without it, nothing is
    # kept, as before; a keyed call that finds its key held writes no stamp.
    with psycopg.connect(pg_dsn) as conn:
        kept, _ = call(conn, migrated, "reports", b"k", keep_completed_s=3600.0)
        plain, _ = call(conn, migrated, "reports", b"p")
        keyed, _ = call(conn, migrated, "reports", b"u", unique_key="u", keep_completed_s=0.0)
        again = call(conn, migrated, "reports", b"u", unique_key="u", keep_completed_s=99.0)
        conn.commit()
    assert again == (keyed, False)
    async with open_store(pg_dsn, schema=migrated) as store:
        reports = store.queue("reports")
        stamps = [(await reports.get_job(i)).keep_completed_s for i in (kept, plain, keyed)]
        assert stamps == [3600.0, None, 0.0]
        handles = {h.id: h for h in await reports.claim_batch("w", 3)}
        async with trio.open_nursery() as nursery:

            async def ack_later() -> None:
                await trio.lowlevel.checkpoint()
                assert await handles[kept].ack(result=b"done")

            nursery.start_soon(ack_later)
            with trio.fail_after(10):
                job = await reports.wait(kept, poll_interval_s=3600)
        assert (job.state, job.result) == ("completed", b"done")
        assert await handles[plain].ack()
        assert await reports.get_job(plain) is None
