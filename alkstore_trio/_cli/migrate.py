"""``alkstore-trio migrate``: bring a PostgreSQL schema to this library's version, or
print the SQL that would (``--dry-run``). Needs psycopg, imported only when the command
runs, so ``demo`` works without it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import trio

from .._errors import SchemaError
from ._args import (
    DSN_ENV,
    EXIT_OK,
    SCHEMA_ENV,
    CommandFailed,
    add_store_options,
    dsn,
    positive_seconds,
)
from ._output import one_line

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping

    from .._engines._postgres._driver import Connection

#: ``pg_stat_activity.application_name`` of the command's connection.
APPLICATION_NAME: Final = "alkstore-trio migrate"


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    """Add ``migrate``."""
    migrate = commands.add_parser(
        "migrate",
        help="create or upgrade the PostgreSQL schema (or print the SQL with --dry-run)",
        description=(
            "Apply the pending migrations to a PostgreSQL schema, in one transaction under "
            "an advisory lock (so concurrent runs, e.g. during a rolling deploy, apply each "
            "migration once), and print the version before and after. With --dry-run, "
            "print the SQL that would run and execute nothing."
        ),
        epilog=(
            f"environment: {DSN_ENV} is the default of --dsn and {SCHEMA_ENV} the default "
            "of --schema. Exit status: 0 done (or nothing to do), 1 failed (nothing was "
            "changed), 2 usage error."
        ),
    )
    add_store_options(
        migrate, env, dsn_type=dsn, dsn_what="a postgresql:// URL or a libpq conninfo"
    )
    migrate.add_argument(
        "--dry-run",
        action="store_true",
        help=(
            "print the SQL of the pending migrations, rendered for the schema, and "
            "execute nothing (it only reads the schema's version)"
        ),
    )
    migrate.add_argument(
        "--connect-timeout",
        metavar="SECONDS",
        type=positive_seconds,
        default=10.0,
        help="give up connecting after this many seconds (default 10)",
    )
    migrate.set_defaults(run=run, usage_error=migrate.error)


#: What an operator must know when ``migrate`` takes an existing schema across a version
#: (never for a fresh schema): printed after the migration, and in ``--dry-run``'s script.
UPGRADE_NOTES: Final = {
    3: (
        "version 3 adds job headers, and workers of the version-2 release still running "
        "fail to claim until restarted with this release; stop them before migrating "
        "(docs/how-to/migrate.md, 'Version 3: stop the old workers first')"
    ),
}


def _upgrade_notes(before: int | None, after: int) -> list[str]:
    """The notes of the versions an existing schema at ``before`` crosses to ``after``."""
    if not before:
        return []
    return [UPGRADE_NOTES[v] for v in sorted(UPGRADE_NOTES) if before < v <= after]


async def run(args: argparse.Namespace) -> int:
    try:
        import psycopg
        import psycopg.conninfo

        from .._engines._postgres import _backend, _driver, _schema
    except ImportError as exc:
        raise CommandFailed(
            f"the migrate command needs psycopg 3 ({exc}); install the postgres extra: "
            "pip install 'alkstore_trio[postgres]'"
        ) from None

    dsn: str = args.dsn
    schema: str = args.schema
    where = _backend.redact_dsn(dsn)
    secret = psycopg.conninfo.conninfo_to_dict(dsn).get("password")
    password = None if secret is None else str(secret)
    try:
        conn = await _driver.connect(
            dsn, connect_timeout_s=args.connect_timeout, application_name=APPLICATION_NAME
        )
    except psycopg.Error as exc:
        raise CommandFailed(
            f"cannot connect to {where}: {one_line(exc, password)}; check --dsn "
            f"(or {DSN_ENV}) and that the server is running"
        ) from None
    try:
        if args.dry_run:
            print(await _dry_run(conn, schema, where))
            return EXIT_OK
        before, after = await _schema.migrate(conn, schema)
    except SchemaError as exc:
        raise CommandFailed(str(exc)) from None
    except psycopg.Error as exc:
        nothing = "nothing was executed" if args.dry_run else "nothing was changed"
        raise CommandFailed(
            f"migrating schema {schema!r} on {where} failed ({nothing}): "
            f"{one_line(exc, password)}; check that the user may create schemas, tables "
            "and functions in the database"
        ) from None
    finally:
        with trio.CancelScope(shield=True):
            await conn.aclose()
    if before == after:
        print(f"schema {schema!r}: already at version {after}")
    else:
        print(f"schema {schema!r}: version {before or 0} -> {after}")
        for note in _upgrade_notes(before, after):
            print(f"note: {note}")
    return EXIT_OK


async def _dry_run(conn: Connection, schema: str, where: str) -> str:
    """The SQL ``migrate`` would run on ``schema``, as a script: the same transaction,
    advisory lock, migrations and version writes. Only reads the schema's version."""
    from .._engines._postgres import _schema, _sql

    # Belt and braces: this session cannot write, whatever happens below.
    await conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    version = await _schema.current_version(conn, schema)
    latest = _sql.latest_version()
    if version is not None and version > latest:
        raise SchemaError(
            f"schema {schema!r} is at version {version}, newer than this library's "
            f"{latest}; upgrade alkstore_trio (migrations are never rolled back)"
        )
    header = f"-- alkstore-trio migrate --dry-run on {where} (nothing was executed)"
    shown = "none (no alkstore_trio tables)" if version is None else str(version)
    if version == latest:
        return f"{header}\n-- schema {schema!r}: already at version {latest}; nothing to run"
    return "\n".join(
        [
            header,
            f"-- schema {schema!r}: version {shown} -> {latest}",
            *(f"-- note: {note}" for note in _upgrade_notes(version, latest)),
            _schema.migration_script(schema, version),
        ]
    )
