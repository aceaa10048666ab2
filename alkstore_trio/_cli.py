"""The ``alkstore-trio`` command (also ``python -m alkstore_trio``).

This is the only module that parses arguments. Subcommands:

- ``demo``: run a few hundred jobs through a supervised :class:`~alkstore_trio.Worker` on
  the embedded in-memory engine, with a live display, and print a summary (see
  :mod:`alkstore_trio._demo`).
- ``migrate``: bring a PostgreSQL schema to this library's version (or, with
  ``--dry-run``, print the SQL that would do it). Needs psycopg, which is imported only
  when the command runs, so ``demo`` works without it.
- ``worker``: run a :class:`~alkstore_trio.Worker` with the handlers named by
  ``--queue NAME=MODULE:FUNCTION`` until SIGINT/SIGTERM (see
  :mod:`alkstore_trio._worker_cli`, which runs it; the handlers are imported here, before
  anything is opened, so a bad ``--queue`` is a usage error with no effect).

Every command is an async function run by :func:`trio.run` from :func:`main`.

Exit codes: 0 success (for ``worker``: stopped by a signal, gracefully), 1 the command
failed, 2 usage error (argparse's own convention), 130 interrupted (for ``worker``: a
second or third stop signal).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from typing import TYPE_CHECKING, Final, NoReturn

import trio

from . import __version__
from ._core import _validate as v
from ._demo import format_summary, run_demo
from ._errors import AlkstoreError, EngineError, InvalidArgument, SchemaError
from ._open import open_store
from ._runtime import SupervisorEscalated
from ._worker_cli import (
    HandlerImportFailed,
    QueueSpecError,
    load_handlers,
    make_cwd_importable,
    parse_queue_spec,
    serve_worker,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence
    from contextlib import AbstractAsyncContextManager

    from ._engines._postgres._driver import Connection
    from ._store import Store
    from ._worker_cli import QueueSpec

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
#: ``pg_stat_activity.application_name`` of the worker command's connections.
WORKER_APPLICATION_NAME: Final = "alkstore-trio worker"

#: The levels ``worker --log-level`` accepts.
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")

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


def _store_url(text: str) -> str:
    """An argparse ``type`` for the worker's ``--dsn``: ``memory://`` or a DSN."""
    if text.strip().lower().startswith("memory://"):
        return text.strip()
    try:
        return _dsn(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, or memory:// (in-process only)") from None


def _seconds(*, zero_ok: bool) -> Callable[[str], float]:
    """An argparse ``type`` accepting seconds > 0 (``>= 0`` with ``zero_ok``), at most
    100 years."""
    bound = ">= 0" if zero_ok else "> 0"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a number of seconds, got {text!r}"
            ) from None
        too_small = value < 0 if zero_ok else value <= 0
        if too_small or not value <= v.DURATION_MAX_S:
            raise argparse.ArgumentTypeError(
                f"expected a number of seconds {bound} (at most 100 years), got {text!r}"
            )
        return value

    return parse


def _worker_id(text: str) -> str:
    """An argparse ``type`` for ``--worker-id``: the rule of ``Worker(worker_id=...)``."""
    try:
        return v.check_worker_id(text)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("worker_id ", "", 1)) from None


def _queue_spec(text: str) -> QueueSpec:
    """An argparse ``type`` for ``--queue``: syntax only; the handler is loaded later."""
    try:
        return parse_queue_spec(text)
    except QueueSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
        help="run a few hundred jobs through a supervised worker on the in-memory engine",
        description=(
            "Enqueue jobs with mixed priorities and small delays into the embedded "
            "in-memory engine and run them with a supervised Worker, shown live: each "
            "retry, dead-letter, job timeout and lease lost to an operator's cancel is "
            "one line above a progress bar (plain lines when the output is not a "
            "terminal). Then print a summary. The counts are the same for the same "
            "--jobs and --seed."
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
        help="the worker's concurrency: handlers running at once (default 4)",
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
    _add_store_options(
        migrate, env, dsn_type=_dsn, dsn_what="a postgresql:// URL or a libpq conninfo"
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
    _add_worker_command(commands, env)
    return parser


def _add_store_options(
    command: argparse.ArgumentParser,
    env: Mapping[str, str],
    *,
    dsn_type: Callable[[str], str],
    dsn_what: str,
) -> None:
    """``--dsn`` and ``--schema``, defaulting to ``ALKSTORE_DSN`` / ``ALKSTORE_SCHEMA``."""
    command.add_argument(
        "--dsn",
        metavar="DSN",
        type=dsn_type,
        default=env.get(DSN_ENV) or None,
        help=(
            f"the database: {dsn_what} "
            f"(default: the {DSN_ENV} environment variable; required if it is unset)"
        ),
    )
    command.add_argument(
        "--schema",
        metavar="NAME",
        type=_schema_name,
        default=env.get(SCHEMA_ENV) or DEFAULT_SCHEMA,
        help=(
            f"the schema holding the tables (default: the {SCHEMA_ENV} environment "
            f"variable, else {DEFAULT_SCHEMA!r})"
        ),
    )


def _add_worker_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    worker = commands.add_parser(
        "worker",
        help="run a worker: claim jobs and run their handlers until SIGINT/SIGTERM",
        description=(
            "Run a worker on the queues named by --queue, each with its handler, an "
            "'async def handler(job)' imported from MODULE (the current directory is "
            "searched first, as with python -m). It claims jobs, runs their handlers, and "
            "acks, retries or dead-letters them, until a signal stops it. The first "
            "SIGINT or SIGTERM stops it gracefully: no new claims, running handlers get "
            "--shutdown-grace-s to finish, the rest are cancelled and their jobs "
            "released. A second one cancels the running handlers at once (their jobs are "
            "still released); a third exits immediately (their leases then lapse). "
            "Progress goes to stderr: a status line every --status-interval-s and a "
            "summary at exit."
        ),
        epilog=(
            f"environment: {DSN_ENV} is the default of --dsn and {SCHEMA_ENV} the default "
            "of --schema. Exit status: 0 stopped by a signal (gracefully), 1 failed (the "
            "store could not be opened, or the worker failed after releasing its jobs), "
            "2 usage error (a bad --queue included), 130 stopped by a second or third "
            "signal."
        ),
    )
    _add_store_options(
        worker,
        env,
        dsn_type=_store_url,
        dsn_what="a postgresql:// URL, a libpq conninfo, or memory:// (in-process only)",
    )
    worker.add_argument(
        "--connect-timeout",
        metavar="SECONDS",
        type=_positive_seconds,
        default=10.0,
        help="PostgreSQL: give up connecting after this many seconds (default 10)",
    )
    worker.add_argument(
        "--queue",
        metavar="NAME=MODULE:FUNCTION",
        dest="queues",
        action="append",
        type=_queue_spec,
        default=[],
        help=(
            "serve queue NAME with the async handler FUNCTION of MODULE (dotted names "
            "allowed on both sides: myapp.tasks:Mailer.send); repeat for more queues"
        ),
    )
    worker.add_argument(
        "--concurrency",
        metavar="N",
        type=_int_in(1, 100_000),
        default=10,
        help="the most handlers running at once (default 10)",
    )
    positive, non_negative = _seconds(zero_ok=False), _seconds(zero_ok=True)
    worker.add_argument(
        "--poll-interval-s",
        metavar="S",
        type=positive,
        default=5.0,
        help="seconds between re-polls, the safety net for lost wakes (default 5)",
    )
    worker.add_argument(
        "--heartbeat-interval-s",
        metavar="S",
        type=positive,
        default=None,
        help="seconds between claim renewals (default: a third of each job's visibility timeout)",
    )
    worker.add_argument(
        "--job-timeout-s",
        metavar="S",
        type=positive,
        default=None,
        help="cancel a handler after this many seconds and retry its job (default: no limit)",
    )
    worker.add_argument(
        "--shutdown-grace-s",
        metavar="S",
        type=non_negative,
        default=30.0,
        help="on the first stop signal, seconds running handlers may still finish (default 30)",
    )
    worker.add_argument(
        "--claim-batch-max",
        metavar="N",
        type=_int_in(1, 10_000),
        default=100,
        help="the most jobs one claim asks for (default 100)",
    )
    worker.add_argument(
        "--sweep-interval-s",
        metavar="S",
        type=positive,
        default=60.0,
        help="seconds between sweeps of expired jobs and old dead rows (default 60)",
    )
    worker.add_argument(
        "--worker-id",
        metavar="ID",
        type=_worker_id,
        default=None,
        help="stored as claimed_by on the jobs it claims (default: HOSTNAME:PID:RANDOM)",
    )
    worker.add_argument(
        "--status-interval-s",
        metavar="S",
        type=non_negative,
        default=10.0,
        help="seconds between status lines on stderr; 0 for none (default 10)",
    )
    worker.add_argument(
        "--log-level",
        metavar="LEVEL",
        type=str.upper,
        choices=LOG_LEVELS,
        default="WARNING",
        help=(
            "the level of the log records printed to stderr: DEBUG, INFO (one line per "
            "job transition), WARNING (default) or ERROR"
        ),
    )
    worker.set_defaults(run=_worker, usage_error=worker.error)


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


# -- worker --------------------------------------------------------------------------


def _password_of(dsn: str) -> str | None:
    """The DSN's password (to mask it in messages), or ``None``."""
    import psycopg.conninfo

    try:
        secret = psycopg.conninfo.conninfo_to_dict(dsn).get("password")
    except psycopg.Error:
        return None
    return None if secret is None else str(secret)


async def _worker(args: argparse.Namespace) -> int:
    dsn: str = args.dsn
    schema: str = args.schema
    if dsn.lower().startswith("memory://"):
        where, password = "memory:// (in-process: only this process can enqueue)", None
    else:
        try:
            import psycopg  # noqa: F401 - only to report its absence here

            from ._engines._postgres import _backend
        except ImportError as exc:
            raise CommandFailed(
                f"a PostgreSQL --dsn needs psycopg 3 ({exc}); install the postgres extra: "
                "pip install 'alkstore_trio[postgres]'"
            ) from None
        where, password = f"{_backend.redact_dsn(dsn)} schema {schema!r}", _password_of(dsn)

    def open_worker_store() -> AbstractAsyncContextManager[Store]:
        return open_store(
            dsn,
            schema=schema,
            connect_timeout_s=args.connect_timeout,
            application_name=WORKER_APPLICATION_NAME,
        )

    options = {
        "concurrency": args.concurrency,
        "worker_id": args.worker_id,
        "poll_interval_s": args.poll_interval_s,
        "heartbeat_interval_s": args.heartbeat_interval_s,
        "job_timeout_s": args.job_timeout_s,
        "shutdown_grace_s": args.shutdown_grace_s,
        "claim_batch_max": args.claim_batch_max,
        "sweep_interval_s": args.sweep_interval_s,
    }
    try:
        return await serve_worker(
            open_worker_store,
            args.handlers,
            options,
            where=where,
            status_interval_s=args.status_interval_s,
        )
    except SchemaError as exc:
        raise CommandFailed(_one_line(exc, password)) from None
    except EngineError as exc:
        raise CommandFailed(
            f"{_one_line(exc, password)}; check --dsn (or {DSN_ENV}) and that the server is running"
        ) from None
    except SupervisorEscalated as exc:
        cause = exc.__cause__
        why = "" if cause is None else f" (the crash: {type(cause).__name__}: {cause})"
        message = _one_line(exc, password) + (why and " " + _one_line(Exception(why), password))
        raise CommandFailed(f"the worker failed and released its claimed jobs: {message}") from None
    except AlkstoreError as exc:
        raise CommandFailed(f"{type(exc).__name__}: {_one_line(exc, password)}") from None


def _setup_worker(args: argparse.Namespace) -> None:
    """Before ``trio.run``: import the handlers (a bad ``--queue`` is a usage error with
    nothing opened yet) and send log records to stderr at ``--log-level``."""
    usage_error: Callable[[str], NoReturn] = args.usage_error
    make_cwd_importable()
    try:
        args.handlers = load_handlers(args.queues)
    except QueueSpecError as exc:
        usage_error(str(exc))
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
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
    if args.command in ("migrate", "worker") and args.dsn is None:
        usage_error: Callable[[str], NoReturn] = args.usage_error
        shape = _DSN_SHAPE if args.command == "migrate" else f"{_DSN_SHAPE}, or memory://"
        usage_error(f"--dsn is required (or set {DSN_ENV}); expected {shape}")
    command: Callable[[argparse.Namespace], Awaitable[int]] = args.run
    try:
        if args.command == "worker":
            _setup_worker(args)
        return trio.run(command, args)
    except HandlerImportFailed as exc:
        return _fail(args.command, str(exc))
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
