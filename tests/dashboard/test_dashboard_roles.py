"""W4: the read-only dashboard needs SELECT only: a role with USAGE on the schema and
SELECT on its tables and sequences loads every page, and cannot act even if the guard
were bypassed (the server refuses the write)."""

from __future__ import annotations

import secrets

import psycopg
import pytest
from _dashboard_client import Client
from psycopg import sql as pgsql
from psycopg.conninfo import make_conninfo

from alkstore_trio import AlkstoreError, WorkerRegistration, open_store
from alkstore_trio.dashboard import create_app


def run(dsn, *statements, **names):
    identifiers = {key: pgsql.Identifier(value) for key, value in names.items()}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(pgsql.SQL(statement).format(**identifiers))


@pytest.fixture
def reader(pg_dsn, schema):
    """A login role with SELECT on ``schema``'s tables and sequences only; its DSN."""
    role = f"alk_reader_{secrets.token_hex(4)}"
    run(pg_dsn, "CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE", role=role)
    try:
        yield role, make_conninfo(pg_dsn, user=role)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(pgsql.SQL("DROP OWNED BY {}").format(pgsql.Identifier(role)))
            conn.execute(pgsql.SQL("DROP ROLE {}").format(pgsql.Identifier(role)))


async def test_w4_read_only_runs_as_a_role_with_select_only(pg_dsn, schema, reader):
    role, reader_dsn = reader
    async with open_store(pg_dsn, schema=schema, migrate="apply") as owner:
        q = owner.queue("emails")
        live = int(await q.enqueue(b"hello", headers={"h": "v"}))
        dead = int(await q.enqueue(b"bad", max_attempts=1, priority=9))
        handle = await q.claim_one("w")
        await handle.fail("boom")
        # Q21: a registered worker, read from the workers table on the workers page.
        await owner.beat_worker(WorkerRegistration("idle-7", "h", 7, ("emails",), 1), "start")
    run(
        pg_dsn,
        "GRANT USAGE ON SCHEMA {schema} TO {role}",
        "GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}",
        "GRANT SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
        schema=schema,
        role=role,
    )
    async with open_store(
        reader_dsn, schema=schema, migrate="check", listen=False, pool_size=2
    ) as store:
        client = Client(create_app(store, read_only=True))
        for path in (
            "/",
            "/fragments/overview",
            "/jobs?queue=emails&state=pending",
            "/jobs?queue=emails&state=dead",
            f"/jobs/{live}",
            f"/jobs/{dead}",
            "/dead",
            "/workers",
        ):
            reply = await client.get(path)
            assert reply.status == 200, (path, reply.text)
            if path == "/workers":
                assert 'data-worker="idle-7"' in reply.text
                assert "registry-error" not in reply.text
        # The role itself cannot write: read-only is enforced by the server too.
        with pytest.raises(AlkstoreError, match="permission denied"):
            await store.queue("emails").pause()
