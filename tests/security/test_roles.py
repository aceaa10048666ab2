"""Least privilege (issue 5, item 11): the library runs under a role that holds only DML
rights on its tables, while migrations run under a separate owner role.

The setup is the one ``docs/how-to/secure-your-deployment.md`` documents: a DBA creates
the schema owned by a migration role (no CREATE on the database needed), the migration
role applies the migrations and grants the runtime role USAGE on the schema and
SELECT/INSERT/UPDATE/DELETE on its tables, EXECUTE on its functions and SELECT on its
sequence; the runtime role then enqueues, claims, acks, dead-letters, sweeps and reads
``store.stats()`` (and ``alkstore-trio stats``), but cannot change the schema nor draw
ids, and has CREATE on no schema in its ``search_path`` (CVE-2018-1058). Both roles are
dropped afterwards, even on failure.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import trio
from _figures import history_figures

from alkstore_trio import (
    AlkstoreError,
    EngineError,
    Fail,
    Job,
    QueueOpts,
    SchemaError,
    Worker,
    open_store,
)
from alkstore_trio.testing import HistoryRecorder, read_final_state

psycopg = pytest.importorskip("psycopg", reason="the role tests need psycopg 3")

from psycopg import sql as pgsql  # noqa: E402 - after importorskip
from psycopg.conninfo import make_conninfo  # noqa: E402


@dataclass(frozen=True)
class Roles:
    schema: str
    owner: str
    runtime: str
    owner_dsn: str
    runtime_dsn: str


#: What the migration role grants the runtime role (the documented grants).
RUNTIME_GRANTS = (
    "GRANT USAGE ON SCHEMA {schema} TO {runtime}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {runtime}",
    "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {runtime}",
    # store.stats() reads jobs_id_seq's last_value (ids_issued); inserts need no
    # sequence right (identity column), and SELECT does not allow nextval or setval.
    "GRANT SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {runtime}",
    "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} "
    "GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {runtime}",
    "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT EXECUTE ON FUNCTIONS TO {runtime}",
    "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT ON SEQUENCES TO {runtime}",
)


def run(dsn: str, *statements: str, **names: str) -> None:
    """Run trusted test statements (``{name}`` placeholders are quoted identifiers)."""
    identifiers = {key: pgsql.Identifier(value) for key, value in names.items()}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(pgsql.SQL(statement).format(**identifiers))


@pytest.fixture
def roles(pg_dsn: str) -> Iterator[Roles]:
    tag = secrets.token_hex(4)
    found = Roles(
        schema=f"t_roles_{tag}",
        owner=f"alk_migrate_{tag}",
        runtime=f"alk_runtime_{tag}",
        owner_dsn=make_conninfo(pg_dsn, user=f"alk_migrate_{tag}"),
        runtime_dsn=make_conninfo(pg_dsn, user=f"alk_runtime_{tag}"),
    )
    names = {"schema": found.schema, "owner": found.owner, "runtime": found.runtime}
    try:
        run(
            pg_dsn,
            "CREATE ROLE {owner} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE",
            "CREATE ROLE {runtime} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE",
            # The DBA's part: the schema, owned by the migration role.
            "CREATE SCHEMA {schema} AUTHORIZATION {owner}",
            **names,
        )
        yield found
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                pgsql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(pgsql.Identifier(found.schema))
            )
            for role in (found.runtime, found.owner):
                exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
                if exists.fetchone():
                    conn.execute(pgsql.SQL("DROP OWNED BY {}").format(pgsql.Identifier(role)))
                    conn.execute(pgsql.SQL("DROP ROLE {}").format(pgsql.Identifier(role)))


def fetch_as(dsn: str, query: str, params=None) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()


def refused_as(dsn: str, statement: str, **names: str) -> bool:
    """Whether running ``statement`` as ``dsn``'s role is refused for lack of privilege."""
    try:
        run(dsn, statement, **names)
    except psycopg.errors.InsufficientPrivilege:
        return True
    return False


async def test_security_runtime_role_with_dml_only_runs_a_worker_migration_role_migrates(
    roles: Roles, figures
):
    names = {"schema": roles.schema, "runtime": roles.runtime}
    # The migration role migrates (it owns the schema; no CREATE on the database).
    async with open_store(roles.owner_dsn, schema=roles.schema, migrate="apply", pool_size=1):
        pass
    run(roles.owner_dsn, *RUNTIME_GRANTS, **names)

    # The runtime role: DML only. No DDL on the library's schema, nor anywhere on its
    # search_path (CVE-2018-1058: nobody it trusts can plant look-alike objects there
    # but the owner, and it cannot itself).
    assert refused_as(roles.runtime_dsn, "CREATE TABLE {schema}.planted (x int)", **names)
    assert refused_as(roles.runtime_dsn, "ALTER TABLE {schema}.jobs ADD COLUMN x int", **names)
    assert refused_as(roles.runtime_dsn, "DROP INDEX {schema}.jobs_claim_idx", **names)
    assert refused_as(
        roles.runtime_dsn, "CREATE FUNCTION {schema}.alk_now2() RETURNS int AS 'SELECT 1' "
        "LANGUAGE sql", **names
    )  # fmt: skip
    creatable = fetch_as(
        roles.runtime_dsn,
        "SELECT n FROM pg_catalog.unnest(pg_catalog.current_schemas(true)) AS n "
        "WHERE pg_catalog.has_schema_privilege(n, 'CREATE')",
    )
    assert creatable == []
    ((create_db,),) = fetch_as(
        roles.runtime_dsn,
        "SELECT pg_catalog.has_database_privilege(pg_catalog.current_database(), 'CREATE')",
    )
    assert create_db is False
    # SELECT on the id sequence reads it; it does not draw ids nor move the sequence.
    # (The regclass literal holds the quoted schema: '"t_roles_…".jobs_id_seq'.)
    assert refused_as(
        roles.runtime_dsn, "SELECT pg_catalog.nextval('{schema}.jobs_id_seq')", **names
    )
    assert refused_as(
        roles.runtime_dsn, "SELECT pg_catalog.setval('{schema}.jobs_id_seq', 1)", **names
    )

    # ... and it runs the library: enqueue, claim, ack, dead-letter, sweep.
    recorder = HistoryRecorder()
    ran: list[int] = []

    async def handler(job: Job) -> None:
        ran.append(job.id)
        if job.payload == b"fail":
            raise Fail("on purpose")

    async with open_store(
        roles.runtime_dsn, schema=roles.schema, migrate="check", pool_size=2
    ) as store:
        queue = store.queue("roles", QueueOpts(visibility_timeout_s=30, max_attempts=3))
        ids = await queue.enqueue_many([b"ok"] * 5 + [b"fail"])
        worker = Worker(store, {queue: handler}, poll_interval_s=0.2, sweep_interval_s=0.5)
        async with trio.open_nursery() as nursery:
            await nursery.start(recorder.record_worker, worker)
            with worker.events(buffer=None) as events:
                await nursery.start(worker.run)
                settled = 0
                with trio.fail_after(30):
                    async for event in events:
                        settled += event.kind in ("ack", "dead")
                        if settled == len(ids):
                            break
            worker.stop()
        stats = worker.statistics()
        assert (stats.acked, stats.dead_lettered, stats.engine_errors) == (5, 1, 0)
        # Q21: the worker registered, beat and stopped under the documented grants.
        (registered,) = await store.list_workers()
        assert (registered.worker_id, registered.state) == (worker.worker_id, "stopped")
        (dead,) = [job_id for job_id in ids if (await queue.get_job(job_id)) is not None]
        assert dead == ids[-1]
        report = recorder.check(enqueued=ids, final=await read_final_state([queue], ids))
        await queue.sweep_expired()
        # store.stats() reads the id sequence: refused without SELECT on it.
        read = await store.stats()
        assert read.ids_issued == len(ids)
        counted = read.queue("roles")
        assert counted is not None
        assert (counted.acked_total, counted.dead_lettered_total, counted.dead) == (5, 1, 1)
        assert await queue.purge_dead() == 1
    # ... and so does the operator's ``alkstore-trio stats``, as the runtime role.
    shown = await trio.run_process(
        [sys.executable, "-m", "alkstore_trio", "stats", "--json", "--queue", "roles"],
        env={**os.environ, "ALKSTORE_DSN": roles.runtime_dsn, "ALKSTORE_SCHEMA": roles.schema},
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr.decode()
    reading = json.loads(shown.stdout)
    assert reading["ids_issued"] == len(ids)
    assert [(q["queue"], q["acked_total"], q["dead"]) for q in reading["queues"]] == [
        ("roles", 5, 0)
    ]
    report.assert_ok()
    assert sorted(ran) == sorted(ids)
    print(f"\nruntime role (DML only): worker ran {len(ids)} jobs; history: {report.summary()}")
    figures.record(ddl_refused=4, events_checked=len(recorder.events), **history_figures(report))


async def test_security_a_role_without_grants_is_told_why_the_store_cannot_open(roles):
    # The migration role migrated the schema, but granted the runtime role nothing: the
    # schema check is refused by the server, and the error names that cause (it said
    # only "OperationalError"-style class names before), without the DSN's password.
    async with open_store(roles.owner_dsn, schema=roles.schema, migrate="apply"):
        pass
    with pytest.raises(AlkstoreError) as caught:
        async with open_store(roles.runtime_dsn, schema=roles.schema):
            pass  # pragma: no cover
    assert "permission denied" in str(caught.value)
    assert isinstance(caught.value, EngineError | SchemaError)
