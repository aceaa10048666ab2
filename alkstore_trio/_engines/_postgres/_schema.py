"""Schema versions and migrations.

The schema records its version in one row of ``alk_schema_version``. Migrations run in
one transaction under an advisory lock keyed by the schema name, so concurrent
``migrate`` calls (a rolling deploy starting many processes) apply each migration once.
Opening a store never changes the schema unless asked: a missing, older or newer schema
raises :class:`~alkstore_trio.SchemaError` that says how to fix it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from ..._errors import InvalidArgument, SchemaError
from . import _sql
from ._enqueue import run_on

if TYPE_CHECKING:
    from ._driver import Connection
    from ._enqueue import Steps

MigratePolicy = Literal["check", "apply"]
MIGRATE_POLICIES: tuple[MigratePolicy, ...] = ("check", "apply")

_LOCK_SQL = "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended(%s, 0))"
_VERSION_TABLE_SQL = "SELECT pg_catalog.to_regclass(%(table)s) IS NOT NULL"
_SET_VERSION_SQL = (
    "INSERT INTO {schema}.alk_schema_version (version) VALUES (%s) "
    "ON CONFLICT (singleton) DO UPDATE SET version = EXCLUDED.version"
)


def check_policy(value: object) -> MigratePolicy:
    """``migrate=`` of ``open_store``: ``"check"`` (default) or ``"apply"``."""
    if value not in MIGRATE_POLICIES:
        raise InvalidArgument(f"migrate must be 'check' or 'apply'; got {value!r}")
    return value


async def current_version(conn: Connection, schema: str) -> int | None:
    """The schema's recorded version, or ``None`` when it has no alkstore tables."""
    return await run_on(conn, version_steps(schema))


def version_steps(schema: str) -> Steps[int | None]:
    """:func:`current_version` as steps (see :mod:`._enqueue`), for any connection: two
    reads that fail on no schema (a missing table is looked up first, so a caller's
    transaction is never aborted by the read)."""
    table = f"{_sql.quote_ident(schema)}.alk_schema_version"
    ((exists,),) = yield _VERSION_TABLE_SQL, {"table": table}
    if not exists:
        return None
    rows = yield f"SELECT version FROM {table}", {}
    return int(rows[0][0]) if rows else 0


def _lock_key(schema: str) -> str:
    return f"alkstore_trio:migrate:{schema}"


def migration_script(schema: str, from_version: int | None) -> str:
    """What :func:`migrate` runs on a schema at ``from_version``, as one runnable script
    (for ``alkstore-trio migrate --dry-run``): the transaction, the advisory lock, the
    pending migrations and the version writes, with their values inlined (the schema
    name is checked and holds no quote; versions are ints)."""
    quoted = _sql.quote_ident(schema)
    parts = ["BEGIN;", _LOCK_SQL.replace("%s", f"'{_lock_key(schema)}'") + ";"]
    for number, sql in pending_sql(schema, from_version):
        parts.append(f"\n-- migration {number}\n{sql.strip()}")
        parts.append(_SET_VERSION_SQL.format(schema=quoted).replace("%s", str(number)) + ";")
    parts.append("COMMIT;")
    return "\n".join(parts)


def pending_sql(schema: str, from_version: int | None) -> list[tuple[int, str]]:
    """The migrations a schema at ``from_version`` still needs, rendered."""
    start = from_version or 0
    return [(number, sql) for number, sql in _sql.migrations(schema) if number > start]


async def migrate(conn: Connection, schema: str) -> tuple[int | None, int]:
    """Apply every pending migration in one transaction under the schema's advisory lock.

    Returns:
        The version before and after.

    Raises:
        SchemaError: the schema is newer than this library.
    """
    latest = _sql.latest_version()
    async with conn.transaction():
        await conn.execute(_LOCK_SQL, [_lock_key(schema)])
        before = await current_version(conn, schema)
        if before is not None and before > latest:
            raise _newer(schema, before, latest)
        for number, sql in pending_sql(schema, before):
            await conn.executescript(sql)
            await conn.execute(_SET_VERSION_SQL.format(schema=_sql.quote_ident(schema)), [number])
    return before, latest


async def check(conn: Connection, schema: str, *, dsn_hint: str) -> None:
    """Raise :class:`SchemaError` unless the schema is at this library's version."""
    fix = (
        f"run `alkstore-trio migrate --dsn {dsn_hint} --schema {schema}`, "
        "or open the store with migrate='apply'"
    )
    check_version(schema, await current_version(conn, schema), fix=fix)


def check_version(schema: str, version: int | None, *, fix: str) -> None:
    """Raise :class:`SchemaError` unless ``version`` (of ``schema``; ``None``: no tables)
    is this library's; ``fix`` says how to migrate an older or missing schema."""
    latest = _sql.latest_version()
    if version is None:
        raise SchemaError(f"schema {schema!r} has no alkstore_trio tables; {fix}")
    if version < latest:
        raise SchemaError(
            f"schema {schema!r} is at version {version}, this library needs {latest}; {fix}"
        )
    if version > latest:
        raise _newer(schema, version, latest)


def _newer(schema: str, version: int, latest: int) -> SchemaError:
    return SchemaError(
        f"schema {schema!r} is at version {version}, newer than this library's {latest}; "
        "upgrade alkstore_trio (migrations are never rolled back)"
    )
