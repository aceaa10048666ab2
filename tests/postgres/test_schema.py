"""The PostgreSQL schema: migrations, version checks and the advisory lock (Q12).

- The numbered migrations produce exactly ``sql/schema.sql``: both are run into fresh
  schemas and a normalized catalog dump of each (relations, columns, constraints,
  indexes, functions, sequences, triggers, comments, the version row) is compared.
- ``open_store`` refuses a missing, older or newer schema with a :class:`SchemaError`
  that names the fix and never a password; ``migrate="apply"`` creates a missing one.
- A version-2 schema with jobs migrates to version 3 (D30: headers) without a table
  rewrite; its jobs have no headers. A column added to a job table later changes no
  statement's result, even on a connection that prepared the statements before.
- Concurrent migrations of one fresh schema (each on its own connection) serialize on
  the advisory lock: every one succeeds, the migrations run once.
"""

from __future__ import annotations

import difflib
import pprint
import re
import secrets
from collections.abc import AsyncIterator, Iterator

import psycopg
import psycopg.conninfo
import pytest
import trio

import alkstore_trio
from alkstore_trio import SchemaError
from alkstore_trio._core import NO_HEADERS
from alkstore_trio._engines._postgres import _driver, _schema, _sql

LATEST = _sql.latest_version()
#: Stands in for a real password: it must never appear in an error message.
SECRET = "s3cret-Pa55word-do-not-print"


# -- helpers -------------------------------------------------------------------------


def new_schema_name(tag: str) -> str:
    return f"alk_t_{tag}_{secrets.token_hex(4)}"


def drop_schemas(dsn: str, *schemas: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def schemas(pg_dsn: str) -> Iterator[list[str]]:
    """A list to put schema names in; each is dropped after the test."""
    names: list[str] = []
    try:
        yield names
    finally:
        drop_schemas(pg_dsn, *names)


@pytest.fixture
async def admin(pg_dsn: str) -> AsyncIterator[_driver.Connection]:
    conn = await _driver.connect(pg_dsn, connect_timeout_s=5, application_name="alk-test-schema")
    try:
        yield conn
    finally:
        await conn.aclose()


def dsn_with_password(dsn: str) -> tuple[str, str | None]:
    """``dsn`` as a URL carrying a password, and that password.

    The DSN's own password if it has one; else :data:`SECRET`, which a server that does
    not ask for passwords (trust) ignores. If the server rejects it, ``dsn`` as is.
    """
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    if params.get("password"):
        return dsn, str(params["password"])
    candidate = psycopg.conninfo.make_conninfo(dsn, password=SECRET)
    try:
        with psycopg.connect(candidate, connect_timeout=5):
            pass
    except psycopg.Error:
        return dsn, None
    return candidate, SECRET


def assert_no_password(exc: BaseException, password: str | None) -> None:
    if not password:
        return
    seen: BaseException | None = exc
    while seen is not None:
        assert password not in str(seen), f"the password leaked in {type(seen).__name__}"
        seen = seen.__cause__ or seen.__context__


_CATALOG_QUERIES: dict[str, str] = {
    "relations": """
        SELECT c.relname, c.relkind, c.relpersistence, c.relrowsecurity,
            coalesce(c.reloptions, '{}'), obj_description(c.oid, 'pg_class')
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s
        ORDER BY c.relname
    """,
    # Column order matters (SELECT * and INSERT without a column list depend on it);
    # attnum itself does not (a dropped column leaves a gap), so rows are listed in
    # attnum order without it.
    "columns": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
            pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated,
            coll.collname, col_description(c.oid, a.attnum)
        FROM pg_attribute a
            JOIN pg_class c ON c.oid = a.attrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace
            LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            LEFT JOIN pg_collation coll ON coll.oid = a.attcollation
        WHERE n.nspname = %(schema)s AND a.attnum > 0 AND NOT a.attisdropped
            AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
        ORDER BY c.relname, a.attnum
    """,
    "constraints": """
        SELECT cl.relname, co.conname, co.contype, co.condeferrable, co.condeferred,
            pg_get_constraintdef(co.oid, true)
        FROM pg_constraint co
            JOIN pg_class cl ON cl.oid = co.conrelid
            JOIN pg_namespace n ON n.oid = co.connamespace
        WHERE n.nspname = %(schema)s
        ORDER BY cl.relname, co.conname
    """,
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes
        WHERE schemaname = %(schema)s
        ORDER BY tablename, indexname
    """,
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid),
            pg_get_functiondef(p.oid), obj_description(p.oid, 'pg_proc')
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = %(schema)s
        ORDER BY 1, 2
    """,
    "sequences": """
        SELECT c.relname, format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement,
            s.seqmax, s.seqmin, s.seqcache, s.seqcycle
        FROM pg_sequence s
            JOIN pg_class c ON c.oid = s.seqrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s
        ORDER BY c.relname
    """,
    "triggers": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid, true)
        FROM pg_trigger t
            JOIN pg_class c ON c.oid = t.tgrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s AND NOT t.tgisinternal
        ORDER BY 1, 2
    """,
    "schema_comment": """
        SELECT obj_description(n.oid, 'pg_namespace') FROM pg_namespace n
        WHERE n.nspname = %(schema)s
    """,
}


def _normalize(value: object, schema: str) -> object:
    """Replace the schema's name, quoted or not, by ``@schema@`` in text values."""
    if not isinstance(value, str):
        return value
    pattern = rf'(?<![A-Za-z0-9_"])(?:"{re.escape(schema)}"|{re.escape(schema)})(?=\.)'
    return re.sub(pattern, "@schema@", value)


async def catalog_dump(conn: _driver.Connection, schema: str) -> dict[str, list[tuple]]:
    """Everything the schema defines, with its name normalized, plus its version row."""
    dump: dict[str, list[tuple]] = {}
    for section, query in _CATALOG_QUERIES.items():
        rows = await conn.execute(query, {"schema": schema})
        dump[section] = [tuple(_normalize(v, schema) for v in row) for row in rows]
    dump["version_row"] = await conn.execute(
        f"SELECT * FROM {_sql.quote_ident(schema)}.alk_schema_version"
    )
    return dump


def assert_same_dump(a: dict[str, list[tuple]], b: dict[str, list[tuple]]) -> None:
    if a != b:
        diff = difflib.unified_diff(
            pprint.pformat(a, width=120).splitlines(),
            pprint.pformat(b, width=120).splitlines(),
            "migrations",
            "schema.sql",
            lineterm="",
        )
        pytest.fail("the migrations do not produce schema.sql:\n" + "\n".join(diff))


async def set_version(conn: _driver.Connection, schema: str, version: int) -> None:
    await conn.execute(
        f"UPDATE {_sql.quote_ident(schema)}.alk_schema_version SET version = %s", [version]
    )


# -- the migrations produce schema.sql -----------------------------------------------


async def test_schema_migrations_produce_exactly_schema_sql(admin, schemas):
    migrated, canonical = new_schema_name("mig"), new_schema_name("canon")
    schemas += [migrated, canonical]
    assert await _schema.migrate(admin, migrated) == (None, LATEST)
    await admin.executescript(_sql.schema_sql(canonical))

    from_migrations = await catalog_dump(admin, migrated)
    from_schema_sql = await catalog_dump(admin, canonical)
    assert_same_dump(from_migrations, from_schema_sql)

    # The dump is not vacuous: it sees what the schema is made of.
    assert from_migrations["version_row"] == [(True, LATEST)]
    relations = {row[0]: row[1] for row in from_migrations["relations"]}
    assert {"jobs": "r", "dead_jobs": "r", "alk_schema_version": "r"}.items() <= relations.items()
    indexes = {row[1]: row[2] for row in from_migrations["indexes"]}
    assert {"jobs_claim_idx", "jobs_lease_idx", "jobs_expiry_idx", "dead_jobs_retention_idx"} <= (
        indexes.keys()
    )
    assert "ON @schema@.jobs" in indexes["jobs_claim_idx"]
    assert [row[0] for row in from_migrations["functions"]] == ["alk_now", "enqueue"]
    assert "statement_timestamp()" in from_migrations["functions"][0][2]
    # Q20.4: the enqueue function, with QueueOpts()'s stamps as its defaults and the
    # library's unique-key lock and wake.
    enqueue_def = from_migrations["functions"][1][2]
    for default in (
        "max_attempts bigint DEFAULT 3",
        "visibility_timeout_s double precision DEFAULT 300",
        "backoff_base_s double precision DEFAULT 5",
        "expires_in_s double precision DEFAULT NULL",
    ):
        assert default in enqueue_def, default
    assert "pg_advisory_xact_lock" in enqueue_def
    assert "pg_notify(channel, due)" in enqueue_def
    assert "Q20.4" in from_migrations["functions"][1][3]
    assert len([row for row in from_migrations["columns"] if row[0] == "jobs"]) == 23
    assert len([row for row in from_migrations["columns"] if row[0] == "dead_jobs"]) == 22
    # Q19.5: when a processing job's cancel was asked for, then (Q19.7) the progress text,
    # last in jobs; the progress is last in dead_jobs and completed_jobs too.
    *_, requested, progress = [row for row in from_migrations["columns"] if row[0] == "jobs"]
    assert requested[1:5] == ("cancel_requested_at", "timestamp with time zone", False, None)
    for table in ("jobs", "dead_jobs", "completed_jobs"):
        *_, progress = [row for row in from_migrations["columns"] if row[0] == table]
        assert progress[1:5] == ("progress", "text", False, None), (table, progress)
    assert "WHERE (state = 'cancelling'::text)" in indexes["jobs_cancelling_idx"]
    # D30: the headers, then (Q15) the unique key, (Q18.8) the concurrency key, (Q19.8)
    # the claim token and (Q19.2) the stamp keep_completed_s, last in both tables (before
    # jobs' cancel_requested_at): a jsonb object that defaults to '{}', and nullable
    # columns without a default (catalog-only adds).
    for table in ("jobs", "dead_jobs"):
        columns = [row for row in from_migrations["columns"] if row[0] == table]
        *_, headers, key, group, token, keep = columns[:21]
        assert headers[1:5] == ("headers", "jsonb", True, "'{}'::jsonb"), headers
        assert key[1:5] == ("unique_key", "text", False, None), key
        assert group[1:5] == ("concurrency_key", "text", False, None), group
        assert token[1:5] == ("claim_token", "bigint", False, None), token
        assert keep[1:5] == ("keep_completed_s", "double precision", False, None), keep
    # Q19.2: the history table, off the live table, with its purge and list indexes.
    assert relations["completed_jobs"] == "r"
    assert "(queue, purge_at)" in indexes["completed_jobs_purge_idx"]
    assert "(queue, state, id)" in indexes["completed_jobs_list_idx"]
    completed = [row[1] for row in from_migrations["columns"] if row[0] == "completed_jobs"]
    assert completed[-6:] == [
        "claim_token",
        "keep_completed_s",
        "completed_at",
        "purge_at",
        "result",
        "progress",
    ]
    # Q18.8: the per-key indexes hold keyed rows only (keyless enqueues pay nothing), and
    # `limited` counts the per-key limit.
    for name in ("jobs_key_claim_idx", "jobs_key_lease_idx"):
        assert "(concurrency_key IS NOT NULL)" in indexes[name], indexes[name]
    limited = next(
        row for row in from_migrations["columns"] if row[:2] == ("queue_controls", "limited")
    )
    assert "max_running_per_key IS NOT NULL" in str(limited), limited
    # Q15: a partial unique index over the keyed live rows, and the windows table.
    assert "UNIQUE" in indexes["jobs_unique_key_idx"]
    assert "WHERE (unique_key IS NOT NULL)" in indexes["jobs_unique_key_idx"]
    assert relations["unique_windows"] == "r"
    # D27: the counter table, with room on its pages for heap-only updates.
    counters = next(row for row in from_migrations["relations"] if row[0] == "queue_counters")
    assert counters[1] == "r"
    assert counters[4] == ["fillfactor=10"]
    assert [row[1] for row in from_migrations["columns"] if row[0] == "queue_counters"] == [
        "queue", "shard", "acked", "dead_lettered", "cancelled",
    ]  # fmt: skip
    assert "queue_counters_pkey" in indexes


async def test_schema_the_catalog_comparison_sees_a_difference(admin, schemas):
    # Guards the test above against a comparison that can never fail.
    a, b = new_schema_name("a"), new_schema_name("b")
    schemas += [a, b]
    await admin.executescript(_sql.schema_sql(a))
    await admin.executescript(_sql.schema_sql(b))
    assert await catalog_dump(admin, a) == await catalog_dump(admin, b)
    await admin.execute(f'CREATE INDEX extra_idx ON "{b}".jobs (claimed_by)')
    assert await catalog_dump(admin, a) != await catalog_dump(admin, b)
    await admin.execute(f'DROP INDEX "{b}".extra_idx')
    await admin.execute(f"ALTER TABLE \"{b}\".dead_jobs ALTER COLUMN last_error SET DEFAULT 'x'")
    assert await catalog_dump(admin, a) != await catalog_dump(admin, b)


def test_schema_pending_sql_lists_what_a_version_still_needs():
    everything = _schema.pending_sql("alkstore", None)
    assert [number for number, _ in everything] == list(range(1, LATEST + 1))
    assert _schema.pending_sql("alkstore", 0) == everything
    assert _schema.pending_sql("alkstore", LATEST) == []
    assert all('"alkstore".' in sql and "@schema@" not in sql for _, sql in everything)


# -- upgrading a version-1 schema (D27) ----------------------------------------------


async def test_d27_a_version_1_schema_with_jobs_is_refused_then_migrates_to_counters(
    pg_dsn, admin, schemas
):
    # A schema as version 1 of the library left it, with live and dead jobs: opening it
    # says to migrate; migrating keeps every row and adds the counter table, empty (the
    # counts start at the migration); the store then counts.
    schema = new_schema_name("v1")
    schemas.append(schema)
    ((number, first),) = _schema.pending_sql(schema, None)[:1]
    assert number == 1
    async with admin.transaction():
        await admin.executescript(first)
        await admin.execute(
            f"INSERT INTO {_sql.quote_ident(schema)}.alk_schema_version (version) VALUES (1)"
        )
    quoted = _sql.quote_ident(schema)
    await admin.execute(
        f"INSERT INTO {quoted}.jobs (queue, payload, priority, state, attempts, max_attempts, "
        "run_at, enqueued_at, visibility_timeout_s, backoff_base_s) "
        "SELECT 'old', '\\x00', 0, 'pending', 0, 3, now(), now(), 300, 5 "
        "FROM generate_series(1, 3)"
    )
    await admin.execute(
        f"INSERT INTO {quoted}.dead_jobs (id, queue, payload, priority, attempts, max_attempts, "
        "run_at, enqueued_at, visibility_timeout_s, backoff_base_s, last_error, died_at) "
        "VALUES (100, 'old', '\\x01', 0, 3, 3, now(), now(), 300, 5, 'boom', now())"
    )
    exc = await open_and_expect_schema_error(pg_dsn, schema)
    assert f"is at version 1, this library needs {LATEST}" in str(exc)
    assert "alkstore-trio migrate" in str(exc)

    assert await _schema.migrate(admin, schema) == (1, LATEST)
    async with alkstore_trio.open_store(pg_dsn, schema=schema) as store:
        (before,) = (await store.stats()).queues
        assert (before.queue, before.pending_ready, before.dead) == ("old", 3, 1)
        assert (before.acked_total, before.dead_lettered_total, before.cancelled_total) == (0, 0, 0)
        old = store.queue("old")
        handle = await old.claim_one("w")
        assert handle is not None
        assert await handle.ack()
        assert await old.cancel(handle.id + 1)
        (after,) = (await store.stats("old")).queues
        assert (after.acked_total, after.dead_lettered_total, after.cancelled_total) == (1, 0, 1)
        assert (after.live, after.dead) == (1, 1)


# -- upgrading a version-2 schema (D30) ----------------------------------------------


async def create_at_version(conn: _driver.Connection, schema: str, version: int) -> None:
    """The schema as release ``version`` of the library left it: its migrations only."""
    async with conn.transaction():
        for _, sql in _schema.pending_sql(schema, None)[:version]:
            await conn.executescript(sql)
        await conn.execute(
            f"INSERT INTO {_sql.quote_ident(schema)}.alk_schema_version (version) VALUES (%s)",
            [version],
        )


async def relfilenodes(conn: _driver.Connection, schema: str) -> dict[str, int]:
    """The storage file of each job table: a table rewrite gives it a new one."""
    rows = await conn.execute(
        "SELECT c.relname, c.relfilenode FROM pg_catalog.pg_class AS c "
        "JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname IN ('jobs', 'dead_jobs')",
        [schema],
    )
    return {name: int(node) for name, node in rows}


async def test_d30_a_version_2_schema_with_jobs_migrates_to_headers_without_a_rewrite(
    pg_dsn, admin, schemas
):
    # A schema as version 2 left it, with pending, processing and dead rows: opening it
    # says to migrate; the migration only adds the columns (no table rewrite: each table
    # keeps its storage file), every existing row then has no headers ('{}'), and the
    # store reads, claims, dead-letters and redrives them as jobs without headers.
    schema = new_schema_name("v2")
    schemas.append(schema)
    await create_at_version(admin, schema, 2)
    quoted = _sql.quote_ident(schema)
    await admin.execute(
        f"INSERT INTO {quoted}.jobs (queue, payload, priority, state, attempts, max_attempts, "
        "run_at, enqueued_at, visibility_timeout_s, backoff_base_s, claimed_by, claimed_at, "
        "claim_expires_at) "
        "SELECT 'old', '\\x00', 0, CASE WHEN g = 3 THEN 'processing' ELSE 'pending' END, "
        "CASE WHEN g = 3 THEN 1 ELSE 0 END, 3, now(), now(), 300, 5, "
        "CASE WHEN g = 3 THEN 'w' END, CASE WHEN g = 3 THEN now() END, "
        "CASE WHEN g = 3 THEN now() + interval '1 hour' END "
        "FROM generate_series(1, 3) AS g"
    )
    await admin.execute(
        f"INSERT INTO {quoted}.dead_jobs (id, queue, payload, priority, attempts, max_attempts, "
        "run_at, enqueued_at, visibility_timeout_s, backoff_base_s, last_error, died_at) "
        "VALUES (100, 'old', '\\x01', 0, 3, 3, now(), now(), 300, 5, 'boom', now())"
    )
    files = await relfilenodes(admin, schema)
    exc = await open_and_expect_schema_error(pg_dsn, schema)
    assert f"is at version 2, this library needs {LATEST}" in str(exc)

    assert await _schema.migrate(admin, schema) == (2, LATEST)
    assert await relfilenodes(admin, schema) == files, "the migration rewrote a job table"
    for table, count in (("jobs", 3), ("dead_jobs", 1)):
        ((empty,),) = await admin.execute(
            f"SELECT count(*) FROM {quoted}.{table} WHERE headers = '{{}}'::jsonb"
        )
        assert empty == count, table

    async with alkstore_trio.open_store(pg_dsn, schema=schema) as store:
        old = store.queue("old")
        pending = await old.list_jobs("pending")
        (processing,) = await old.list_jobs("processing")
        (dead,) = await old.list_jobs("dead")
        assert len(pending) == 2
        for job in [*pending, processing, dead]:
            assert job.headers is NO_HEADERS
        handle = await old.claim_one("w2")
        assert handle is not None
        assert handle.job.headers is NO_HEADERS
        assert await handle.fail("later")
        assert await old.requeue_dead(all=True) == 2
        assert {job.headers for job in await old.list_jobs("pending")} == {NO_HEADERS}
        # New jobs beside the old ones carry their headers.
        job_id = await old.enqueue(b"new", headers={"traceparent": "00-ab-cd-01"})
        job = await old.get_job(job_id)
        assert job is not None
        assert job.headers == {"traceparent": "00-ab-cd-01"}


async def test_q19_8_a_version_8_claim_is_refused_by_the_named_constraint(pg_dsn, admin, schemas):
    # Migration 9 gives the rows being processed a token (their version-8 holders go on
    # checking attempts) and refuses every claim that sets no token: a version-8 worker's
    # claim fails with the constraint's name in the error, and changes nothing.
    schema = new_schema_name("v8")
    schemas.append(schema)
    await create_at_version(admin, schema, 8)
    quoted = _sql.quote_ident(schema)
    await admin.execute(
        f"INSERT INTO {quoted}.jobs (queue, payload, priority, state, attempts, max_attempts, "
        "run_at, enqueued_at, visibility_timeout_s, backoff_base_s, claimed_by, claimed_at, "
        "claim_expires_at) "
        "SELECT 'old', '\\x00', 0, CASE WHEN g = 2 THEN 'processing' ELSE 'pending' END, "
        "CASE WHEN g = 2 THEN 1 ELSE 0 END, 3, now(), now(), 300, 5, "
        "CASE WHEN g = 2 THEN 'w8' END, CASE WHEN g = 2 THEN now() END, "
        "CASE WHEN g = 2 THEN now() + interval '1 hour' END "
        "FROM generate_series(1, 2) AS g"
    )
    assert await _schema.migrate(admin, schema) == (8, LATEST)
    rows = await admin.execute(f"SELECT id, state, claim_token FROM {quoted}.jobs ORDER BY id")
    assert [(state, token is None) for _, state, token in rows] == [
        ("pending", True),
        ("processing", False),
    ]
    pending_id = rows[0][0]
    # Version 8's claim_update: no claim_token in its SET list.
    old_claim = (
        f"UPDATE {quoted}.jobs AS j SET state = 'processing', attempts = j.attempts + 1, "
        "claimed_by = 'w8', claimed_at = now(), "
        "claim_expires_at = now() + j.visibility_timeout_s * interval '1 second' "
        "WHERE j.id = %s RETURNING j.id"
    )
    async with alkstore_trio.open_store(pg_dsn, schema=schema) as store:
        with pytest.raises(alkstore_trio.EngineError) as exc:
            async with store.transaction() as tx:
                await tx.fetch(old_claim, [pending_id])
        assert 'violates check constraint "jobs_claim_needs_v9_workers"' in str(exc.value)
        queue = store.queue("old")
        job = await queue.get_job(pending_id)
        assert job is not None
        assert (job.state, job.attempts, job.claim_token) == ("pending", 0, None)
        # This version's claim takes it, with a token.
        handle = await queue.claim_one("w9")
        assert handle is not None
        assert handle.id == pending_id
        assert handle.job.claim_token is not None
        assert await handle.ack()


async def test_schema_a_column_added_to_the_job_tables_changes_no_statement_result(
    pg_dsn, admin, schemas
):
    # A later migration that adds a column to jobs or dead_jobs must not break the
    # processes of this release that keep running through it. Version 3's headers
    # column broke version 2's workers this way: their ack_handles_and_claim returned
    # jobs.*, whose result grew a column ("cached plan must not change result type" on a
    # connection that had prepared it, a misread row on one that had not). Every
    # statement now names its result columns: after the ALTERs, the same connection
    # (with its prepared statements) runs every kind of statement again unchanged.
    schema = new_schema_name("grow")
    schemas.append(schema)
    headers = {"tenant": "acme"}

    async def one_round(store: alkstore_trio.Store) -> None:
        queue = store.queue("grow", alkstore_trio.QueueOpts(max_attempts=1))
        await queue.enqueue(b"a", headers=headers)
        await queue.enqueue_many([b"b", b"c"], headers=headers)
        first = await queue.claim_batch("w", 2)
        acked, claimed = await queue.ack_handles_and_claim(first, "w", 2)
        assert acked == [True, True]
        assert [h.job.headers for h in claimed] == [headers]
        assert (await queue.get_job(claimed[0].id)).headers == headers  # type: ignore[union-attr]
        assert (await store.get_job(claimed[0].id)).headers == headers  # type: ignore[union-attr]
        assert [j.headers for j in await queue.list_jobs("processing")] == [headers]
        assert await queue.fail_handles([(claimed[0], "no")]) == [True]
        (dead,) = await queue.list_jobs("dead")
        assert dead.headers == headers
        assert await queue.requeue_dead([dead.id]) == 1
        (again,) = await queue.claim_batch("w", 5)
        assert again.job.headers == headers
        assert await again.fail()
        assert await queue.requeue_dead(all=True) == 1
        (last,) = await queue.claim_batch("w", 5)
        assert await last.ack()
        assert (await store.stats("grow")).queues[0].live == 0

    async with alkstore_trio.open_store(
        pg_dsn, schema=schema, migrate="apply", pool_size=1
    ) as store:
        await one_round(store)
        await one_round(store)  # now prepared on the server (from the second use)
        for table in ("jobs", "dead_jobs"):
            await admin.execute(
                f"ALTER TABLE {_sql.quote_ident(schema)}.{table} ADD COLUMN later text"
            )
        await one_round(store)


# -- open_store checks the version (Q12) ---------------------------------------------


async def open_and_expect_schema_error(dsn: str, schema: str) -> SchemaError:
    with pytest.raises(SchemaError) as caught:
        async with alkstore_trio.open_store(dsn, schema=schema, connect_timeout_s=5):
            pytest.fail("open_store accepted a schema at the wrong version")
    return caught.value


async def test_q12_open_store_refuses_a_missing_schema_and_names_the_fix(pg_dsn, schemas):
    dsn, password = dsn_with_password(pg_dsn)
    schema = new_schema_name("missing")
    schemas.append(schema)
    exc = await open_and_expect_schema_error(dsn, schema)
    message = str(exc)
    assert f"schema {schema!r} has no alkstore_trio tables" in message
    assert "alkstore-trio migrate --dsn postgresql://" in message
    assert f"--schema {schema}" in message
    assert "migrate='apply'" in message
    assert_no_password(exc, password)


async def test_q12_open_store_refuses_an_older_schema_and_names_the_fix(pg_dsn, admin, schemas):
    dsn, password = dsn_with_password(pg_dsn)
    schema = new_schema_name("older")
    schemas.append(schema)
    await _schema.migrate(admin, schema)
    await set_version(admin, schema, LATEST - 1)
    exc = await open_and_expect_schema_error(dsn, schema)
    message = str(exc)
    assert f"is at version {LATEST - 1}, this library needs {LATEST}" in message
    assert "alkstore-trio migrate" in message
    assert "migrate='apply'" in message
    assert_no_password(exc, password)


async def test_q12_open_store_refuses_a_newer_schema_and_says_upgrade(pg_dsn, admin, schemas):
    dsn, password = dsn_with_password(pg_dsn)
    schema = new_schema_name("newer")
    schemas.append(schema)
    await _schema.migrate(admin, schema)
    await set_version(admin, schema, LATEST + 1)
    exc = await open_and_expect_schema_error(dsn, schema)
    message = str(exc)
    assert f"is at version {LATEST + 1}, newer than this library's {LATEST}" in message
    assert "upgrade alkstore_trio" in message
    assert_no_password(exc, password)

    # migrate="apply" never downgrades: it refuses the same way and changes nothing.
    with pytest.raises(SchemaError, match="upgrade alkstore_trio"):
        async with alkstore_trio.open_store(dsn, schema=schema, migrate="apply"):
            pytest.fail("migrate='apply' accepted a newer schema")
    assert await _schema.current_version(admin, schema) == LATEST + 1


async def test_schema_migrate_apply_creates_a_missing_schema_and_the_store_works(
    pg_dsn, admin, schemas
):
    schema = new_schema_name("apply")
    schemas.append(schema)
    async with alkstore_trio.open_store(pg_dsn, schema=schema, migrate="apply") as store:
        assert await _schema.current_version(admin, schema) == LATEST
        jobs = store.queue("jobs")
        job_id = await jobs.enqueue(b"hello")
        handle = await jobs.claim_one("worker-1")
        assert handle is not None
        assert handle.id == job_id
        assert await handle.ack()
    # Now at the latest version, the default migrate="check" accepts it, and "apply"
    # is a no-op.
    for policy in ("check", "apply"):
        async with alkstore_trio.open_store(pg_dsn, schema=schema, migrate=policy) as store:
            assert await store.queue("jobs").claim_one("worker-1") is None
    assert await _schema.migrate(admin, schema) == (LATEST, LATEST)


# -- concurrent migrations serialize on the advisory lock ----------------------------


async def test_schema_concurrent_migrations_of_one_fresh_schema_all_succeed(pg_dsn, admin, schemas):
    schema = new_schema_name("race")
    schemas.append(schema)
    results: list[tuple[int | None, int]] = []

    async def migrate_on_own_connection() -> None:
        conn = await _driver.connect(pg_dsn, connect_timeout_s=5, application_name="alk-race")
        try:
            results.append(await _schema.migrate(conn, schema))
        finally:
            await conn.aclose()

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(migrate_on_own_connection)

    assert sorted(results, key=repr) == sorted(
        [(None, LATEST)] + [(LATEST, LATEST)] * 3, key=repr
    ), "the migrations must run exactly once"
    assert await _schema.current_version(admin, schema) == LATEST
    (count,) = (await admin.execute(f'SELECT count(*) FROM "{schema}".alk_schema_version'))[0]
    assert count == 1


async def test_schema_concurrent_open_store_apply_all_succeed(pg_dsn, admin, schemas):
    schema = new_schema_name("race_open")
    schemas.append(schema)
    opened = 0

    async def open_one() -> None:
        nonlocal opened
        async with alkstore_trio.open_store(
            pg_dsn, schema=schema, migrate="apply", pool_size=1
        ) as store:
            await store.queue("q").enqueue(b"x")
            opened += 1

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(open_one)
    assert opened == 4
    assert await _schema.current_version(admin, schema) == LATEST
    (count,) = (await admin.execute(f'SELECT count(*) FROM "{schema}".jobs'))[0]
    assert count == 4


# -- least privilege ---------------------------------------------------------------------


async def test_schema_a_role_that_owns_a_precreated_schema_can_migrate_it(pg_dsn, schemas):
    # The least-privilege setup: a DBA creates the schema for the application's role,
    # which has no CREATE on the database (PostgreSQL's default for non-owners).
    role = new_schema_name("role")
    schema = new_schema_name("owned")
    schemas.append(schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        try:
            conn.execute(f'CREATE ROLE "{role}" LOGIN')
        except psycopg.Error as exc:
            pytest.skip(f"cannot create a role on the test server: {exc}")
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}" AUTHORIZATION "{role}"')
            (may_create,) = conn.execute(
                "SELECT has_database_privilege(%s, current_database(), 'CREATE')", [role]
            ).fetchone()
        if may_create:
            pytest.skip("on this server every role may create schemas")
        as_role = psycopg.conninfo.make_conninfo(pg_dsn, user=role, password="")
        try:
            conn = await _driver.connect(as_role, connect_timeout_s=5, application_name="alk-t")
        except psycopg.Error as exc:
            pytest.skip(f"cannot log in as a fresh role on the test server: {exc}")
        try:
            assert await _schema.migrate(conn, schema) == (None, LATEST)
        finally:
            await conn.aclose()
    finally:
        drop_schemas(pg_dsn, schema)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')


async def test_q19_5_the_cancelling_migration_swaps_the_state_check_without_a_rewrite(
    pg_dsn, admin, schemas
):
    # A schema one version before the two-phase cancel, with a pending and a processing
    # row: the migration adds a column and an index and swaps the CHECK on jobs.state
    # (NOT VALID, then VALIDATE): the jobs table keeps its storage file, the new CHECK is
    # validated and named as before, and the processing row can then become cancelling.
    schema = new_schema_name("cancel")
    schemas.append(schema)
    await create_at_version(admin, schema, LATEST - 1)
    quoted = _sql.quote_ident(schema)
    await admin.execute(
        f"INSERT INTO {quoted}.jobs (queue, payload, priority, state, attempts, max_attempts, "
        "run_at, enqueued_at, visibility_timeout_s, backoff_base_s, claimed_by, claimed_at, "
        "claim_expires_at, claim_token) VALUES "
        "('old', '\\x00', 0, 'pending', 0, 3, now(), now(), 300, 5, NULL, NULL, NULL, NULL), "
        "('old', '\\x00', 0, 'processing', 1, 3, now(), now(), 300, 5, 'w', now(), "
        "now() + interval '1 hour', 77)"
    )
    files = await relfilenodes(admin, schema)
    assert await _schema.migrate(admin, schema) == (LATEST - 1, LATEST)
    assert await relfilenodes(admin, schema) == files, "the migration rewrote a job table"
    ((definition, validated),) = await admin.execute(
        "SELECT pg_get_constraintdef(co.oid), co.convalidated FROM pg_catalog.pg_constraint co "
        "JOIN pg_catalog.pg_namespace AS n ON n.oid = co.connamespace "
        "WHERE co.conname = 'jobs_state_check' AND n.nspname = %s",
        [schema],
    )
    assert validated
    assert "cancelling" in definition
    # Q19.5 with Q19.2: completed_jobs' CHECK is swapped the same way, to keep 'cancelled'.
    ((kept_definition, kept_validated),) = await admin.execute(
        "SELECT pg_get_constraintdef(co.oid), co.convalidated FROM pg_catalog.pg_constraint co "
        "JOIN pg_catalog.pg_namespace AS n ON n.oid = co.connamespace "
        "WHERE co.conname = 'completed_jobs_state_check' AND n.nspname = %s",
        [schema],
    )
    assert kept_validated
    assert "'cancelled'" in kept_definition
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_state_check"):
        await admin.execute(f"UPDATE {quoted}.jobs SET state = 'completed' WHERE state = 'pending'")
    async with alkstore_trio.open_store(pg_dsn, schema=schema) as store:
        old = store.queue("old")
        (processing,) = await old.list_jobs("processing")
        assert await old.cancel(processing.id)
        (cancelling,) = await old.list_jobs("cancelling")
        assert cancelling.id == processing.id
        ((requested,),) = await admin.execute(
            f"SELECT cancel_requested_at IS NOT NULL FROM {quoted}.jobs WHERE id = %s",
            [processing.id],
        )
        assert requested
