"""``alkstore-trio migrate``: bring a PostgreSQL schema to this library's version, or
print the SQL that would (``--dry-run``). Needs psycopg, imported only when the command
runs, so ``demo`` works without it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .. import postgres
from .._errors import EngineError, InvalidArgument, SchemaError
from ._args import (
    DSN_ENV,
    ENVIRONMENT,
    EXIT_OK,
    CommandFailed,
    HelpFormatter,
    UsageProblem,
    add_connect_timeout,
    add_store_options,
    dsn,
    epilog,
)
from ._output import one_line

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping

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
        epilog=epilog(
            ENVIRONMENT,
            "Exit status: 0 done (or nothing to do), 1 failed (nothing was changed), 2 "
            "usage error.",
            examples=[
                "alkstore-trio migrate --dsn postgresql://app@db.example:5432/shop",
                "alkstore-trio migrate --dry-run > migrate.sql  # review it, or run it with psql",
            ],
        ),
        formatter_class=HelpFormatter,
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
    add_connect_timeout(migrate)
    migrate.set_defaults(run=run, usage_error=migrate.error)


async def run(args: argparse.Namespace) -> int:
    dsn: str = args.dsn
    schema: str = args.schema
    options = {
        "schema": schema,
        "connect_timeout_s": args.connect_timeout,
        "application_name": APPLICATION_NAME,
    }
    try:
        if args.dry_run:
            script = await postgres.migration_script(dsn, **options)
            where = postgres.redact_dsn(dsn)
            print(f"-- alkstore-trio migrate --dry-run on {where} (nothing was executed)")
            print(script)
            return EXIT_OK
        done = await postgres.migrate(dsn, **options)
    except ImportError as exc:
        raise CommandFailed(str(exc)) from None
    except SchemaError as exc:
        raise CommandFailed(str(exc)) from None
    except EngineError as exc:
        raise CommandFailed(f"{one_line(exc, dsn)}; {_fix(exc)}") from None
    except InvalidArgument as exc:
        raise UsageProblem(one_line(exc, dsn)) from None
    if not done.changed:
        print(f"schema {schema!r}: already at version {done.after}")
    else:
        print(f"schema {schema!r}: version {done.before or 0} -> {done.after}")
        for note in done.notes:
            print(f"note: {note}")
    return EXIT_OK


def _fix(exc: EngineError) -> str:
    """What to check after ``exc``: the DSN and the server, or the user's rights."""
    if str(exc).startswith("cannot connect"):
        return f"check --dsn (or {DSN_ENV}) and that the server is running"
    return "check that the user may create schemas, tables and functions in the database"
