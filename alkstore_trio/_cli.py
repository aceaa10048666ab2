"""The ``alkstore-trio`` command (also ``python -m alkstore_trio``).

This is the only module that parses arguments. Subcommands:

- ``demo``: run a few hundred jobs through the embedded in-memory engine and print a
  summary (see :mod:`alkstore_trio._demo`).
- ``migrate``: bring a PostgreSQL schema to this library's version (or, with
  ``--dry-run``, print the SQL that would do it). Needs psycopg, which is imported only
  when the command runs, so ``demo`` works without it.

Every command is an async function run by :func:`trio.run` from :func:`main`.

Exit codes: 0 success, 1 the command failed, 2 usage error (argparse's own convention),
130 interrupted.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import TYPE_CHECKING, Final, NoReturn

import trio

from . import __version__
from ._demo import format_summary, run_demo
from ._errors import InvalidArgument, SchemaError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from ._engines._postgres._driver import Connection

#: Exit status of a successful command.
EXIT_OK = 0
#: Exit status of a command that ran and failed.
EXIT_FAILED = 1
#: Exit status of a usage error (argparse exits with it too).
EXIT_USAGE = 2
#: Exit status after Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130

#: The environment variable ``--dsn`` defaults to.
DSN_ENV: Final = "ALKSTORE_DSN"
#: The environment variable ``--schema`` defaults to.
SCHEMA_ENV: Final = "ALKSTORE_SCHEMA"
#: The schema used when neither ``--schema`` nor ``ALKSTORE_SCHEMA`` is given.
DEFAULT_SCHEMA: Final = "alkstore"
#: ``pg_stat_activity.application_name`` of the command's connection.
APPLICATION_NAME: Final = "alkstore-trio migrate"

_DSN_SHAPE = "postgresql://user[:password]@host[:port]/dbname or 'host=... dbname=...'"


class CommandFailed(Exception):
    """Raised inside a command to end it with one line on stderr and status 1."""


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse ``type`` accepting an int in ``[lo, hi]``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"expected {lo}..{hi}, got {value}")
        return value

    return parse


def _positive_seconds(text: str) -> float:
    """An argparse ``type`` accepting a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds > 0, got {text!r}")
    return value


def _dsn(text: str) -> str:
    """An argparse ``type`` for ``--dsn``: a URL or conninfo libpq can parse.

    The value is never echoed in a message: it may hold a password.
    """
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must not be empty; expected {_DSN_SHAPE}")
    try:
        import psycopg.conninfo
    except ImportError:  # reported by the command itself
        return text
    try:
        psycopg.conninfo.conninfo_to_dict(text)
    except psycopg.Error:
        raise argparse.ArgumentTypeError(
            "is not a PostgreSQL URL or libpq conninfo (the value is not shown: it may hold "
            f"a password); expected {_DSN_SHAPE}"
        ) from None
    return text


def _schema_name(text: str) -> str:
    """An argparse ``type`` for ``--schema``: the rule of ``open_store(schema=...)``."""
    try:
        from ._engines._postgres import _sql
    except ImportError:  # reported by the command itself
        return text
    try:
        return _sql.check_schema_name(text)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``alkstore-trio``.

    Args:
        environ: Where ``ALKSTORE_DSN`` and ``ALKSTORE_SCHEMA`` are read (default:
            ``os.environ``).
    """
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="alkstore-trio",
        description="A durable job queue and supervision framework for trio.",
    )
    parser.add_argument("--version", action="version", version=f"alkstore-trio {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    demo = commands.add_parser(
        "demo",
        help="run a few hundred jobs through the in-memory engine and print a summary",
        description=(
            "Enqueue jobs with mixed priorities and small delays into the embedded "
            "in-memory engine, process them with a few claimer tasks (some jobs retry, "
            "some are dead-lettered) and print a summary. The counts are the same for "
            "the same --seed."
        ),
    )
    demo.add_argument(
        "--jobs",
        metavar="N",
        type=_int_in(1, 100_000),
        default=300,
        help="jobs to enqueue (default 300)",
    )
    demo.add_argument(
        "--seed",
        metavar="S",
        type=_int_in(0, 2**63 - 1),
        default=0,
        help="seed of the job mix, priorities and delays (default 0)",
    )
    demo.add_argument(
        "--workers",
        metavar="W",
        type=_int_in(1, 64),
        default=4,
        help="concurrent claimer tasks (default 4)",
    )
    demo.set_defaults(run=_demo)

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
    migrate.add_argument(
        "--dsn",
        metavar="DSN",
        type=_dsn,
        default=env.get(DSN_ENV) or None,
        help=(
            "the database: a postgresql:// URL or a libpq conninfo "
            f"(default: the {DSN_ENV} environment variable; required if it is unset)"
        ),
    )
    migrate.add_argument(
        "--schema",
        metavar="NAME",
        type=_schema_name,
        default=env.get(SCHEMA_ENV) or DEFAULT_SCHEMA,
        help=(
            f"the schema holding the tables (default: the {SCHEMA_ENV} environment "
            f"variable, else {DEFAULT_SCHEMA!r})"
        ),
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
        type=_positive_seconds,
        default=10.0,
        help="give up connecting after this many seconds (default 10)",
    )
    migrate.set_defaults(run=_migrate, usage_error=migrate.error)
    return parser


# -- demo ----------------------------------------------------------------------------


async def _demo(args: argparse.Namespace) -> int:
    try:
        summary = await run_demo(jobs=args.jobs, seed=args.seed, workers=args.workers)
    except trio.TooSlowError:
        raise CommandFailed("the jobs did not settle in time") from None
    print(format_summary(summary))
    return EXIT_OK


# -- migrate -------------------------------------------------------------------------


def _one_line(exc: BaseException, password: str | None) -> str:
    """An exception as one line, with the DSN's password (if any) masked."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if password:
        text = text.replace(password, "***")
    return text


async def _migrate(args: argparse.Namespace) -> int:
    try:
        import psycopg
        import psycopg.conninfo

        from ._engines._postgres import _backend, _driver, _schema
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
            f"cannot connect to {where}: {_one_line(exc, password)}; check --dsn "
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
            f"{_one_line(exc, password)}; check that the user may create schemas, tables "
            "and functions in the database"
        ) from None
    finally:
        with trio.CancelScope(shield=True):
            await conn.aclose()
    if before == after:
        print(f"schema {schema!r}: already at version {after}")
    else:
        print(f"schema {schema!r}: version {before or 0} -> {after}")
    return EXIT_OK


async def _dry_run(conn: Connection, schema: str, where: str) -> str:
    """The SQL ``migrate`` would run on ``schema``, as a script: the same transaction,
    advisory lock, migrations and version writes. Only reads the schema's version."""
    from ._engines._postgres import _schema, _sql

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
            _schema.migration_script(schema, version),
        ]
    )


# -- main ----------------------------------------------------------------------------


def _fail(command: str, message: str) -> int:
    print(f"alkstore-trio {command}: {message}", file=sys.stderr)
    return EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``alkstore-trio`` with ``argv`` (default: ``sys.argv[1:]``).

    Returns:
        The exit status. Usage errors exit through argparse with status 2.
    """
    args = build_parser().parse_args(argv)
    if args.command == "migrate" and args.dsn is None:
        usage_error: Callable[[str], NoReturn] = args.usage_error
        usage_error(f"--dsn is required (or set {DSN_ENV}); expected {_DSN_SHAPE}")
    command: Callable[[argparse.Namespace], Awaitable[int]] = args.run
    try:
        return trio.run(command, args)
    except CommandFailed as exc:
        return _fail(args.command, str(exc))
    except KeyboardInterrupt:
        print("alkstore-trio: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``alkstore-trio migrate --dry-run | head``): stop quietly,
        # and keep Python from complaining again when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED
