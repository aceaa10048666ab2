"""The public PostgreSQL admin module, ``alkstore_trio.postgres``: migrate, the migration
script, DSN redaction, and driver errors turned into ours with the cause named (issue 6).
Connection failures are driven by real loopback ports and a real server, never waited
for: the ones waiting cannot fix must fail at once."""

from __future__ import annotations

import socket
import time

import psycopg.conninfo
import pytest
import trio

from alkstore_trio import EngineError, InvalidArgument, open_store, postgres
from alkstore_trio._engines._postgres import _sql

SECRET = "s3cr3t-pw"


@pytest.fixture
def closed_port_dsn() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgresql://app:{SECRET}@127.0.0.1:{port}/shop"


async def test_admin_migrate_creates_the_schema_then_finds_nothing_to_do(pg_dsn, schema):
    first = await postgres.migrate(pg_dsn, schema=schema)
    assert (first.before, first.after, first.notes) == (None, _sql.latest_version(), ())
    assert first.changed
    again = await postgres.migrate(pg_dsn, schema=schema)
    assert (again.before, again.after, again.changed) == (first.after, first.after, False)
    async with open_store(pg_dsn, schema=schema) as store:
        assert (await store.stats()).queues == ()


async def test_admin_migration_script_is_what_migrate_would_run_and_runs_nothing(pg_dsn, schema):
    script = await postgres.migration_script(pg_dsn, schema=schema)
    latest = _sql.latest_version()
    assert script.startswith(f"-- schema {schema!r}: version none (no alkstore_trio tables)")
    assert "BEGIN;" in script
    assert script.rstrip().endswith("COMMIT;")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema]).fetchall()
    assert found == []  # nothing was executed
    await postgres.migrate(pg_dsn, schema=schema)
    assert await postgres.migration_script(pg_dsn, schema=schema) == (
        f"-- schema {schema!r}: already at version {latest}; nothing to run"
    )


def test_admin_upgrade_notes_are_for_existing_schemas_crossing_a_version():
    assert postgres.upgrade_notes(None, 3) == ()
    assert postgres.upgrade_notes(0, 3) == ()
    assert postgres.upgrade_notes(2, 3) == (postgres.UPGRADE_NOTES[3],)
    assert postgres.upgrade_notes(3, 3) == ()
    assert postgres.upgrade_notes(8, 9) == (postgres.UPGRADE_NOTES[9],)
    assert postgres.upgrade_notes(2, 9) == (postgres.UPGRADE_NOTES[3], postgres.UPGRADE_NOTES[9])


async def test_admin_and_open_store_fail_at_once_on_a_closed_port(closed_port_dsn):
    for attempt in (
        lambda: postgres.migrate(closed_port_dsn, connect_timeout_s=30),
        lambda: postgres.migration_script(closed_port_dsn, connect_timeout_s=30),
        lambda: _open(closed_port_dsn),
    ):
        started = time.monotonic()
        with pytest.raises(EngineError) as caught:
            await attempt()
        assert time.monotonic() - started < 1.0
        message = str(caught.value)
        assert message.startswith(f"cannot connect to {postgres.redact_dsn(closed_port_dsn)}: ")
        assert "Connection refused" in message
        assert SECRET not in message


async def _open(dsn: str) -> None:
    async with open_store(dsn, connect_timeout_s=30):
        pass  # pragma: no cover


async def test_open_store_names_the_unknown_database_at_once(pg_dsn):
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, dbname="alk_no_such_db", password=SECRET)
    started = time.monotonic()
    with pytest.raises(EngineError, match='database "alk_no_such_db" does not exist') as caught:
        await _open(dsn)
    assert time.monotonic() - started < 1.0
    assert SECRET not in str(caught.value)


async def test_open_store_names_the_unknown_role_at_once(pg_dsn):
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, user="alk_no_such_role")
    with pytest.raises(EngineError, match='role "alk_no_such_role" does not exist'):
        await _open(dsn)


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://app@db:notaport/shop",
        f"postgresql://app:{SECRET}@db:70000/shop",
        f"host=db port=-1 password={SECRET}",
        f"host=db password={SECRET} port",  # libpq cannot parse it
        "",
    ],
)
async def test_admin_rejects_a_malformed_dsn_before_connecting(dsn):
    with pytest.raises(InvalidArgument) as caught:
        postgres.check_dsn(dsn)
    assert SECRET not in str(caught.value)
    with pytest.raises(InvalidArgument) as caught:
        await postgres.migrate(dsn)
    assert SECRET not in str(caught.value)


async def test_admin_migrate_checks_its_options_before_connecting(closed_port_dsn):
    with pytest.raises(InvalidArgument, match="schema"):
        await postgres.migrate(closed_port_dsn, schema="pg_nope")
    with pytest.raises(InvalidArgument, match="connect_timeout_s"):
        await postgres.migrate(closed_port_dsn, connect_timeout_s=0)
    await trio.lowlevel.checkpoint()


def test_admin_redact_dsn_keeps_only_user_hosts_ports_and_database():
    assert postgres.redact_dsn(f"postgresql://ada:{SECRET}@db.example:5433/jobs") == (
        "postgresql://ada@db.example:5433/jobs"
    )
    assert postgres.redact_dsn(f"host=db password={SECRET} dbname=jobs") == "postgresql://db/jobs"
    assert postgres.redact_dsn(f"postgresql://a:{SECRET}@[::1") == "<dsn>"
    assert postgres.hide_password(
        f"said {SECRET} twice: {SECRET}", f"host=x password={SECRET}"
    ) == ("said *** twice: ***")
    assert postgres.hide_password("nothing to hide", "host=x") == "nothing to hide"
