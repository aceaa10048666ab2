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
import base64
import dataclasses
import json
import logging
import math
import os
import sys
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Final, NoReturn

import trio

from . import __version__
from ._core import Job, QueueOpts, StoreStats
from ._core import _validate as v
from ._demo import format_summary, run_demo
from ._errors import AlkstoreError, EngineError, InvalidArgument, SchemaError
from ._open import open_store
from ._runtime import SupervisorEscalated
from ._util import finite_number
from ._worker_cli import (
    HandlerImportFailed,
    QueueSpecError,
    load_handlers,
    make_cwd_importable,
    parse_queue_spec,
    serve_worker,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
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
    if (number := finite_number(value)) is None or number <= 0:
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
    _add_operator_commands(commands, env)
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
        "--no-listen",
        dest="listen",
        action="store_false",
        help="PostgreSQL: open no LISTEN session and find new jobs by re-polling every "
        "--poll-interval-s (behind a transaction-pooling proxy such as PgBouncer in "
        "transaction mode, where LISTEN does not work)",
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
        for note in _upgrade_notes(before, after):
            print(f"note: {note}")
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
            *(f"-- note: {note}" for note in _upgrade_notes(version, latest)),
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
            listen=args.listen,
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


# -- operator commands ---------------------------------------------------------------
#
# stats, jobs show/list, dead list/requeue/purge, enqueue, cancel, sweep: each opens a
# PostgreSQL store (no LISTEN session, a pool of two connections), runs library calls
# (Store.stats, Store.get_job, Queue.list_jobs, Queue.requeue_dead, Queue.purge_dead,
# Queue.enqueue, Queue.cancel, Queue.sweep_expired) and prints the result. Exit status:
# 0 done, 1 the command ran and failed (cannot connect, no such job, nothing to
# cancel), 2 usage error (including values the library rejects as InvalidArgument, and a
# `dead purge` without --yes when stdin is not a terminal).

#: ``pg_stat_activity.application_name`` of the operator commands' connections.
OPERATOR_APPLICATION_NAME: Final = "alkstore-trio cli"
#: How many leading payload bytes ``jobs show`` previews as hex when they are not text.
PREVIEW_BYTES: Final = 64
#: How many characters of a text payload ``jobs show`` previews.
PREVIEW_CHARS: Final = 400
#: Terminal control: cursor home, then clear to the end of the screen.
_HOME_AND_CLEAR: Final = "\x1b[H\x1b[J"
#: How many jobs the ``dead list`` and ``jobs list`` commands show by default.
DEFAULT_LIST_LIMIT: Final = 50


class UsageProblem(Exception):
    """Raised inside an operator command when the library rejects a value of the command
    line (InvalidArgument), or a confirmation is needed and cannot be asked (``dead
    purge`` without ``--yes`` off a terminal): one line on stderr and status 2, like
    argparse's errors."""


def _queue_name(text: str) -> str:
    """An argparse ``type`` for ``--queue``: the rule of ``store.queue(name)``."""
    try:
        return v.check_queue_name(text)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("queue name ", "", 1)) from None


def _job_id(text: str) -> int:
    """An argparse ``type`` for a job id: an int in 1..2**63-1 (ids start at 1)."""
    return _int_in(1, v.JOB_ID_MAX)(text)


def _signed_seconds(text: str) -> float:
    """An argparse ``type`` for ``--delay-s``: finite seconds, at most 100 years either
    way (a negative delay means now, as in ``Queue.enqueue``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not abs(value) <= v.DURATION_MAX_S:
        raise argparse.ArgumentTypeError(
            f"expected a finite number of seconds (at most 100 years), got {text!r}"
        )
    return value


def _payload_json(text: str) -> bytes:
    """An argparse ``type`` for ``--payload-json``: valid JSON, stored as given (UTF-8).
    The text is not echoed back: it may hold secrets."""
    try:
        json.loads(text)
    except ValueError as exc:
        line, col = getattr(exc, "lineno", "?"), getattr(exc, "colno", "?")
        raise argparse.ArgumentTypeError(
            f"is not valid JSON (line {line}, column {col}); quote it for the shell, e.g. "
            """--payload-json '{"to": "ada@example.com"}'"""
        ) from None
    return text.encode("utf-8", "surrogatepass")


def _payload_file(text: str) -> bytes:
    """An argparse ``type`` for ``--payload-file``: the file's bytes (``-``: stdin)."""
    if text == "-":
        return sys.stdin.buffer.read()
    try:
        with open(text, "rb") as file:
            return file.read()
    except OSError as exc:
        raise argparse.ArgumentTypeError(
            f"cannot read {text!r}: {exc.strerror or type(exc).__name__}; check the path"
        ) from None


def _header(text: str) -> tuple[str, str]:
    """An argparse ``type`` for ``--header``: ``NAME=VALUE``, split at the first ``=``.
    The text is not echoed back: a header's value may be a secret."""
    name, equals, value = text.partition("=")
    if not equals:
        raise argparse.ArgumentTypeError(
            "expected NAME=VALUE (split at the first '='), e.g. --header tenant=acme"
        )
    if not name:
        raise argparse.ArgumentTypeError(
            "the header name before '=' is empty; expected NAME=VALUE, e.g. --header tenant=acme"
        )
    return name, value


class _HeadersAction(argparse.Action):
    """``--header``, repeatable: collects the headers into one dict (the option's value),
    refusing a name given twice and whatever ``Queue.enqueue(headers=...)`` would (D30),
    so a bad header is a usage error with nothing opened."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        assert isinstance(values, tuple)
        name, value = values
        headers = dict(getattr(namespace, self.dest) or {})
        if name in headers:
            raise argparse.ArgumentError(
                self, f"header {name!r} is given twice; give each header name once"
            )
        headers[name] = value
        try:
            v.check_headers(headers)
        except InvalidArgument as exc:
            raise argparse.ArgumentError(self, str(exc)) from None
        setattr(namespace, self.dest, headers)


def _add_operator_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    epilog = (
        f"environment: {DSN_ENV} is the default of --dsn and {SCHEMA_ENV} the default of "
        "--schema. Exit status: 0 done, 1 failed (cannot connect, no such job, nothing "
        "to do where something was asked), 2 usage error."
    )

    def command(
        parent: argparse._SubParsersAction[argparse.ArgumentParser],
        name: str,
        run: Callable[[argparse.Namespace], Awaitable[int]],
        *,
        title: str,
        help: str,
        description: str,
    ) -> argparse.ArgumentParser:
        parser = parent.add_parser(name, help=help, description=description, epilog=epilog)
        _add_store_options(
            parser, env, dsn_type=_dsn, dsn_what="a postgresql:// URL or a libpq conninfo"
        )
        parser.add_argument(
            "--connect-timeout",
            metavar="SECONDS",
            type=_positive_seconds,
            default=10.0,
            help="give up connecting after this many seconds (default 10)",
        )
        parser.set_defaults(run=run, usage_error=parser.error, title=title)
        return parser

    stats = command(
        commands,
        "stats",
        _stats,
        title="stats",
        help="show each queue's pending, processing and dead jobs (--watch to follow)",
        description=(
            "Per queue: pending jobs ready to run and delayed, processing jobs and how "
            "many of them lapsed (reclaimable), dead jobs, and how long the oldest ready "
            "job has waited, all at one instant of the database clock. With --watch the "
            "table is refreshed every --interval seconds (in place on a terminal, as "
            "successive blocks otherwise) with each queue's jobs finished per minute "
            "(acked plus dead-lettered) and dead-lettered per minute, from the queue's "
            "counters in two successive readings (D27). Stop it with Ctrl-C."
        ),
    )
    stats.add_argument("--queue", metavar="Q", type=_queue_name, help="only this queue")
    stats.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    stats.add_argument(
        "--interval",
        metavar="S",
        type=_positive_seconds,
        default=2.0,
        help="seconds between refreshes with --watch (default 2)",
    )
    stats.add_argument(
        "--count",
        metavar="N",
        type=_int_in(1, 10**9),
        default=None,
        help="with --watch, stop after N readings (default: until Ctrl-C)",
    )
    stats.add_argument(
        "--json", action="store_true", help="print JSON (one object per reading with --watch)"
    )

    jobs = commands.add_parser(
        "jobs", help="show one job or list a queue's jobs", description="Inspect jobs."
    )
    jobs_commands = jobs.add_subparsers(dest="subcommand", metavar="SUBCOMMAND")
    jobs_commands.required = True
    show = command(
        jobs_commands,
        "show",
        _jobs_show,
        title="jobs show",
        help="show one job, live or dead, by id",
        description=(
            "Show every field of the job with this id, whatever its queue, and its "
            "headers, one NAME=VALUE a line. The payload is "
            "shown as its size and a safe preview: JSON or text as text (cut after "
            f"{PREVIEW_CHARS} characters), other bytes as hex of the first {PREVIEW_BYTES}. "
            "--payload writes the raw payload bytes to stdout instead, and nothing else."
        ),
    )
    show.add_argument("job_id", metavar="ID", type=_job_id, help="the job's id")
    show.add_argument(
        "--payload", action="store_true", help="write only the raw payload bytes to stdout"
    )
    show.add_argument("--json", action="store_true", help="print the job as JSON")
    listing = command(
        jobs_commands,
        "list",
        _jobs_list,
        title="jobs list",
        help="list a queue's pending, processing or dead jobs, by id",
        description=(
            "List a queue's jobs in one state, oldest id first, one line each. "
            "--after-id pages: pass the last id shown."
        ),
    )
    listing.add_argument("--queue", metavar="Q", type=_queue_name, required=True)
    listing.add_argument(
        "--state", required=True, choices=("pending", "processing", "dead"), help="which jobs"
    )
    _add_list_options(listing)

    dead = commands.add_parser(
        "dead",
        help="list, redrive (requeue) or purge dead jobs",
        description="Work the dead-letter queue.",
    )
    dead_commands = dead.add_subparsers(dest="subcommand", metavar="SUBCOMMAND")
    dead_commands.required = True
    dead_list = command(
        dead_commands,
        "list",
        _dead_list,
        title="dead list",
        help="list dead jobs (of every queue, or of --queue)",
        description=(
            "List dead jobs, oldest id first, with when they died and why "
            "(their last_error). Without --queue, every queue with dead jobs, in turn."
        ),
    )
    dead_list.add_argument("--queue", metavar="Q", type=_queue_name, help="only this queue")
    _add_list_options(dead_list)
    requeue = command(
        dead_commands,
        "requeue",
        _dead_requeue,
        title="dead requeue",
        help="redrive dead jobs: back to pending, attempts reset",
        description=(
            "Move dead jobs back to pending, ready now, with their attempts reset to 0 "
            "(D24), and wake the queue's workers. Name the jobs by id, or --all for every "
            "dead job (of --queue, or of every queue). Each queue's jobs move in one "
            "transaction. Ids that are not dead jobs (of --queue, when given) are "
            "reported and skipped."
        ),
    )
    requeue.add_argument("job_ids", metavar="ID", type=_job_id, nargs="*", help="job ids")
    requeue.add_argument("--all", action="store_true", help="every dead job")
    requeue.add_argument("--queue", metavar="Q", type=_queue_name, help="only this queue")
    requeue.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: the count per queue, the total and the skipped ids",
    )
    purge = command(
        dead_commands,
        "purge",
        _dead_purge,
        title="dead purge",
        help="delete dead jobs for good (all, or those older than --older-than)",
        description=(
            "Delete dead jobs for good (D25): those that died more than --older-than "
            "seconds ago, or every one. Of --queue, or of every queue (one transaction "
            "per queue). On a terminal it first counts the jobs it would delete and asks; "
            "when stdin is not a terminal (a script, cron, CI) it refuses unless --yes is "
            "given. --dry-run only counts them (D29)."
        ),
    )
    purge.add_argument(
        "--older-than",
        metavar="S",
        type=_seconds(zero_ok=True),
        default=None,
        help="only jobs dead for more than S seconds (default: every dead job)",
    )
    purge.add_argument("--queue", metavar="Q", type=_queue_name, help="only this queue")
    purge.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="purge without asking (required when stdin is not a terminal)",
    )
    purge.add_argument(
        "--dry-run",
        action="store_true",
        help="delete nothing: print how many dead jobs would be purged now",
    )
    purge.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: the count per queue and the total",
    )

    enqueue = command(
        commands,
        "enqueue",
        _enqueue,
        title="enqueue",
        help="enqueue one job (payload from --payload-json or --payload-file)",
        description=(
            "Enqueue one job with the default stamps (visibility timeout 300 s, 3 "
            "attempts, backoff base 5 s), and the headers given with --header, and print "
            "its id."
        ),
    )
    enqueue.add_argument("--queue", metavar="Q", type=_queue_name, required=True)
    payload = enqueue.add_mutually_exclusive_group(required=True)
    payload.add_argument(
        "--payload-json",
        metavar="JSON",
        dest="payload",
        type=_payload_json,
        help="the payload: a JSON text, stored as UTF-8",
    )
    payload.add_argument(
        "--payload-file",
        metavar="FILE",
        dest="payload",
        type=_payload_file,
        help="the payload: the bytes of FILE (- for stdin)",
    )
    enqueue.add_argument(
        "--priority",
        metavar="N",
        type=_int_in(v.PRIORITY_MIN, v.PRIORITY_MAX),
        default=0,
        help="larger runs first (32-bit; default 0)",
    )
    enqueue.add_argument(
        "--delay-s",
        metavar="S",
        type=_signed_seconds,
        default=None,
        help="run no earlier than S seconds from now (default: now)",
    )
    enqueue.add_argument(
        "--max-attempts",
        metavar="N",
        type=_int_in(1, v.MAX_ATTEMPTS_MAX),
        default=None,
        help="claims before the job is dead-lettered (default 3)",
    )
    enqueue.add_argument(
        "--header",
        metavar="NAME=VALUE",
        dest="headers",
        action=_HeadersAction,
        type=_header,
        default=None,
        help=(
            "a header of the job: metadata kept beside the payload (split at the first "
            "'='); repeat for more (default: none)"
        ),
    )

    cancel = command(
        commands,
        "cancel",
        _cancel,
        title="cancel",
        help="delete a pending or processing job",
        description=(
            "Delete the live job with this id (Q7). A worker running it is not "
            "interrupted: its ack, retry or fail is refused. Exit status 1 when there is "
            "no live job with this id (dead jobs are purged with 'dead purge')."
        ),
    )
    cancel.add_argument("job_id", metavar="ID", type=_job_id, help="the job's id")

    sweep = command(
        commands,
        "sweep",
        _sweep,
        title="sweep",
        help="dead-letter expired jobs (and, with --retention-s, purge old dead jobs)",
        description=(
            "Run the sweep (Q9) of --queue, or of every queue with jobs: live jobs whose "
            "expires_at passed move to dead ('expired'); with --retention-s, dead jobs "
            "older than that are deleted."
        ),
    )
    sweep.add_argument("--queue", metavar="Q", type=_queue_name, help="only this queue")
    sweep.add_argument(
        "--retention-s",
        metavar="S",
        type=_seconds(zero_ok=True),
        default=None,
        help="also delete dead jobs dead for more than S seconds (default: keep them)",
    )
    sweep.add_argument(
        "--json", action="store_true", help="print one JSON object: the counts per queue and totals"
    )


def _add_list_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit",
        metavar="N",
        type=_int_in(1, 1000),
        default=DEFAULT_LIST_LIMIT,
        help=f"show at most N jobs (1-1000, default {DEFAULT_LIST_LIMIT})",
    )
    parser.add_argument(
        "--after-id", metavar="ID", type=_job_id, default=None, help="only ids above ID"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object per job")


@asynccontextmanager
async def _operator_store(args: argparse.Namespace) -> AsyncIterator[Store]:
    """Open the store of ``--dsn``/``--schema`` for one operator command; connection and
    schema failures become one line (password masked) with the fix."""
    dsn: str = args.dsn
    try:
        import psycopg  # noqa: F401 - only to report its absence here

        from ._engines._postgres import _backend
    except ImportError as exc:
        raise CommandFailed(
            f"this command needs psycopg 3 ({exc}); install the postgres extra: "
            "pip install 'alkstore_trio[postgres]'"
        ) from None
    password = _password_of(dsn)
    where = f"{_backend.redact_dsn(dsn)} schema {args.schema!r}"
    try:
        async with open_store(
            dsn,
            schema=args.schema,
            pool_size=2,
            connect_timeout_s=args.connect_timeout,
            application_name=OPERATOR_APPLICATION_NAME,
            listen=False,
        ) as store:
            yield store
    except SchemaError as exc:
        raise CommandFailed(_one_line(exc, password)) from None
    except EngineError as exc:
        raise CommandFailed(
            f"{_one_line(exc, password)} ({where}); check --dsn (or {DSN_ENV}) and that "
            "the server is running"
        ) from None
    except InvalidArgument as exc:
        raise UsageProblem(_one_line(exc, password)) from None


def _print(line: str = "") -> None:
    print(line, flush=True)


def _iso(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat().replace("+00:00", "Z")


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> list[str]:
    """Columns padded to their widest cell; ``align`` has one letter per column, ``l``
    (text) or ``r`` (numbers)."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [
            cell.rjust(width) if side == "r" else cell.ljust(width)
            for cell, width, side in zip(row, widths, align, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


# -- stats ---------------------------------------------------------------------------


#: The counters ``stats --watch`` shows a rate of (D27), by their JSON name:
#: ``finished`` is acked plus dead-lettered.
_COUNTERS: Final = ("finished", "acked", "dead_lettered", "cancelled")
#: Per queue, each counter's growth per minute (``None``: no rate, see
#: :func:`_finished_per_min`).
_Rates = dict[str, dict[str, float | None]]


def _per_min(before: int, after: int, elapsed_s: float) -> float | None:
    """A counter's growth per minute, or ``None`` when it went down (the schema was
    dropped and created again between the readings)."""
    return None if after < before else (after - before) * 60 / elapsed_s


def _finished_per_min(before: StoreStats | None, after: StoreStats) -> _Rates | None:
    """D27: for each queue of ``after``, how fast its counters grew since ``before``,
    per minute of the database clock. A queue missing from ``before`` had counted
    nothing then (a queue with counts is always listed). ``None`` for the first
    reading, or when the clock did not move."""
    if before is None:
        return None
    elapsed = (after.now - before.now).total_seconds()
    if elapsed <= 0:
        return None
    rates: _Rates = {}
    for entry in after.queues:
        old = before.queue(entry.queue)
        now_counts = (
            entry.finished_total,
            entry.acked_total,
            entry.dead_lettered_total,
            entry.cancelled_total,
        )
        old_counts = (
            (0, 0, 0, 0)
            if old is None
            else (old.finished_total, old.acked_total, old.dead_lettered_total, old.cancelled_total)
        )
        rates[entry.queue] = {
            name: _per_min(was, count, elapsed)
            for name, was, count in zip(_COUNTERS, old_counts, now_counts, strict=True)
        }
    return rates


def _ids_issued_per_min(before: StoreStats | None, after: StoreStats) -> float | None:
    """D23: job ids handed out per minute across the store (enqueues, and ids of
    rolled-back transactions), between two readings."""
    if before is None or after.now <= before.now:
        return None
    return _per_min(before.ids_issued, after.ids_issued, (after.now - before.now).total_seconds())


def _total_finished(rates: _Rates | None) -> float | None:
    """Jobs finished per minute across the queues shown; ``None`` if any has no rate."""
    if rates is None:
        return None
    each = [queue_rates["finished"] for queue_rates in rates.values()]
    return None if None in each else math.fsum(rate or 0.0 for rate in each)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _stats_lines(
    stats: StoreStats,
    queue: str | None,
    rates: _Rates | None,
    ids_rate: float | None,
    watch: bool,
) -> list[str]:
    entries = [e for e in stats.queues if queue is None or e.queue == queue]
    lines = [f"alkstore-trio stats at {_iso(stats.now)} (database clock)"]
    if not entries:
        lines.append("no jobs in any queue" if queue is None else f"queue {queue!r}: no jobs")
    else:
        header = ["QUEUE", "READY", "DELAYED", "PROCESSING", "RECLAIMABLE", "DEAD", "OLDEST READY"]
        rows = [
            [
                e.queue,
                str(e.pending_ready),
                str(e.pending_delayed),
                str(e.processing),
                str(e.reclaimable),
                str(e.dead),
                _age(e.oldest_ready_age_s),
            ]
            for e in entries
        ]
        align = "lrrrrrr"
        if watch:
            header += ["FINISHED/MIN", "DEAD/MIN"]
            for row, e in zip(rows, entries, strict=True):
                queue_rates = {} if rates is None else rates.get(e.queue, {})
                row += [_rate(queue_rates.get("finished")), _rate(queue_rates.get("dead_lettered"))]
            align += "rr"
        lines += _table(header, rows, align)
    if watch:
        if rates is None:
            lines.append("finished per minute (acked + dead-lettered): measuring…")
        else:
            scope = f"queue {queue!r}" if queue is not None else "the queues above"
            lines.append(
                f"finished per minute (acked + dead-lettered, {scope}): "
                f"{_rate(_total_finished(rates))}; ids issued per minute (enqueues, "
                f"store-wide): {_rate(ids_rate)}"
            )
    return lines


def _stats_json(
    stats: StoreStats, queue: str | None, rates: _Rates | None, ids_rate: float | None
) -> str:
    entries = [e for e in stats.queues if queue is None or e.queue == queue]

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 3)

    def rates_of(name: str) -> dict[str, float | None]:
        found = {} if rates is None else rates.get(name, {})
        return {f"{counter}_per_min": rounded(found.get(counter)) for counter in _COUNTERS}

    return json.dumps(
        {
            "now": _iso(stats.now),
            "ids_issued": stats.ids_issued,
            "ids_issued_per_min": rounded(ids_rate),
            "finished_per_min": rounded(_total_finished(rates)),
            "queues": [
                {
                    "queue": e.queue,
                    "pending_ready": e.pending_ready,
                    "pending_delayed": e.pending_delayed,
                    "processing": e.processing,
                    "reclaimable": e.reclaimable,
                    "dead": e.dead,
                    "oldest_ready_age_s": e.oldest_ready_age_s,
                    "acked_total": e.acked_total,
                    "dead_lettered_total": e.dead_lettered_total,
                    "cancelled_total": e.cancelled_total,
                    **rates_of(e.queue),
                }
                for e in entries
            ],
        }
    )


async def _stats(args: argparse.Namespace) -> int:
    queue: str | None = args.queue
    async with _operator_store(args) as store:
        if not args.watch:
            stats = await store.stats(queue)
            if args.json:
                _print(_stats_json(stats, queue, None, None))
            else:
                for line in _stats_lines(stats, queue, None, None, watch=False):
                    _print(line)
            return EXIT_OK
        in_place = sys.stdout.isatty() and not args.json
        before: StoreStats | None = None
        readings = 0
        while True:
            # D27: the queues' own counters give their rates; the id sequence the store's
            # enqueue rate (D23).
            stats = await store.stats(queue)
            rates = _finished_per_min(before, stats)
            ids_rate = _ids_issued_per_min(before, stats)
            if args.json:
                _print(_stats_json(stats, queue, rates, ids_rate))
            else:
                lines = _stats_lines(stats, queue, rates, ids_rate, watch=True)
                if in_place:
                    sys.stdout.write(_HOME_AND_CLEAR + "\n".join(lines) + "\n")
                    sys.stdout.flush()
                else:
                    _print("\n".join(lines) + "\n")
            readings += 1
            if args.count is not None and readings >= args.count:
                return EXIT_OK
            before = stats
            await trio.sleep(args.interval)


# -- jobs ----------------------------------------------------------------------------


def _preview(payload: bytes) -> tuple[str, str]:
    """The payload's kind (``json``, ``text`` or ``binary``) and a safe one-line preview:
    JSON on one line and text with its control characters escaped, both cut after
    ``PREVIEW_CHARS`` characters; anything else as hex of its first ``PREVIEW_BYTES``
    bytes. Nothing raw reaches the terminal."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None:
        try:
            json.loads(text)
        except ValueError:
            kind = "text"
        else:
            kind = "json"
        if kind == "json" or all(c.isprintable() or c in "\t\r\n" for c in text):
            flat = " ".join(text.split()) if kind == "json" else text
            flat = _escaped(flat)
            cut = flat if len(flat) <= PREVIEW_CHARS else flat[:PREVIEW_CHARS] + "…"
            return kind, cut
    head = payload[:PREVIEW_BYTES].hex(" ")
    more = " …" if len(payload) > PREVIEW_BYTES else ""
    return "binary", head + more


def _job_dict(job: Job) -> dict[str, object]:
    kind, _ = _preview(job.payload)
    out: dict[str, object] = {
        field.name: getattr(job, field.name)
        for field in dataclasses.fields(job)
        if field.name != "payload"
    }
    for name, value in out.items():
        if isinstance(value, datetime):
            out[name] = _iso(value)
    out["headers"] = dict(job.headers)
    out["payload_size"] = len(job.payload)
    out["payload_kind"] = kind
    out["payload_base64"] = base64.b64encode(job.payload).decode("ascii")
    return out


async def _jobs_show(args: argparse.Namespace) -> int:
    async with _operator_store(args) as store:
        job = await store.get_job(args.job_id)
    if job is None:
        raise CommandFailed(
            f"no job {args.job_id}: it was never enqueued, or it was acked, cancelled or "
            "purged (finished jobs leave no row)"
        )
    if args.payload:
        sys.stdout.buffer.write(job.payload)
        sys.stdout.buffer.flush()
        return EXIT_OK
    if args.json:
        _print(json.dumps(_job_dict(job)))
        return EXIT_OK
    kind, preview = _preview(job.payload)
    fields = [
        ("id", str(job.id)),
        ("queue", job.queue),
        ("state", job.state),
        ("priority", str(job.priority)),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("run_at", _iso(job.run_at)),
        ("enqueued_at", _iso(job.enqueued_at)),
        ("expires_at", _iso(job.expires_at)),
        ("visibility_timeout_s", f"{job.visibility_timeout_s:g}"),
        ("backoff_base_s", f"{job.backoff_base_s:g}"),
        ("claimed_by", job.claimed_by or "-"),
        ("claimed_at", _iso(job.claimed_at)),
        ("claim_expires_at", _iso(job.claim_expires_at)),
        ("last_error", "-" if job.last_error is None else " ".join(job.last_error.split())),
        ("died_at", _iso(job.died_at)),
        *(("headers" if i == 0 else "", line) for i, line in enumerate(_header_lines(job))),
        ("payload", f"{len(job.payload)} bytes, {kind}"),
        ("preview", preview or "(empty)"),
    ]
    width = max(len(name) for name, _ in fields)
    for name, value in fields:
        _print(f"{name.ljust(width)}  {value}")
    return EXIT_OK


def _header_lines(job: Job) -> list[str]:
    """``jobs show``'s lines for the headers (D30): ``NAME=VALUE`` each, as ``--header``
    takes them, in name order; ``-`` for none. Control characters are escaped (one line
    each), a name that could not be told apart from its value is quoted as JSON, and a
    value is cut after ``PREVIEW_CHARS`` characters (``--json`` has it whole)."""
    if not job.headers:
        return ["-"]
    lines = []
    for name, value in job.headers.items():
        shown = _escaped(name)
        if "=" in name or shown != name or name != name.strip() or name.startswith('"'):
            shown = json.dumps(name, ensure_ascii=False)
        text = _escaped(value)
        cut = text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…"
        lines.append(f"{shown}={cut}")
    return lines


def _escaped(text: str) -> str:
    """``text`` with its control characters escaped as JSON does (``\\n``, ``\\u0007``)."""
    return text if text.isprintable() else json.dumps(text, ensure_ascii=False)[1:-1]


def _print_jobs(jobs: Sequence[Job], *, as_json: bool, dead: bool) -> None:
    if as_json:
        for job in jobs:
            _print(json.dumps(_job_dict(job)))
        return
    if not jobs:
        return
    if dead:
        header = ["ID", "QUEUE", "ATTEMPTS", "DIED AT", "LAST ERROR"]
        rows = [
            [
                str(job.id),
                job.queue,
                f"{job.attempts}/{job.max_attempts}",
                _iso(job.died_at),
                _cut(job.last_error),
            ]
            for job in jobs
        ]
    else:
        header = ["ID", "QUEUE", "STATE", "PRIORITY", "ATTEMPTS", "RUN AT", "CLAIMED BY"]
        rows = [
            [
                str(job.id),
                job.queue,
                job.state,
                str(job.priority),
                f"{job.attempts}/{job.max_attempts}",
                _iso(job.run_at),
                job.claimed_by or "-",
            ]
            for job in jobs
        ]
    for line in _table(header, rows, "rllll" if dead else "rllrrll"):
        _print(line)


def _cut(text: str | None, limit: int = 80) -> str:
    if text is None:
        return "-"
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


async def _jobs_list(args: argparse.Namespace) -> int:
    async with _operator_store(args) as store:
        jobs = await store.queue(args.queue).list_jobs(
            args.state, limit=args.limit, after_id=args.after_id
        )
    _print_jobs(jobs, as_json=args.json, dead=args.state == "dead")
    if not jobs and not args.json:
        print(f"no {args.state} jobs in queue {args.queue!r}", file=sys.stderr)
    return EXIT_OK


# -- dead ----------------------------------------------------------------------------


async def _queues_with(store: Store, queue: str | None, *, dead: bool) -> list[str]:
    """``[queue]`` when given, else every queue with dead rows (``dead``) or any rows."""
    if queue is not None:
        return [queue]
    stats = await store.stats()
    return [e.queue for e in stats.queues if (e.dead if dead else e.live + e.dead)]


async def _dead_list(args: argparse.Namespace) -> int:
    async with _operator_store(args) as store:
        jobs: list[Job] = []
        for name in await _queues_with(store, args.queue, dead=True):
            left = args.limit - len(jobs)
            if left <= 0:
                break
            jobs += await store.queue(name).list_jobs("dead", limit=left, after_id=args.after_id)
    _print_jobs(jobs, as_json=args.json, dead=True)
    if not jobs and not args.json:
        where = "any queue" if args.queue is None else f"queue {args.queue!r}"
        print(f"no dead jobs in {where}", file=sys.stderr)
    return EXIT_OK


async def _dead_requeue(args: argparse.Namespace) -> int:
    usage_error: Callable[[str], NoReturn] = args.usage_error
    ids: list[int] = list(dict.fromkeys(args.job_ids))
    if bool(ids) == bool(args.all):
        usage_error("name the dead jobs to requeue by ID, or pass --all (not both)")
    async with _operator_store(args) as store:
        moved: dict[str, int] = {}
        skipped: list[int] = []
        if args.all:
            for name in await _queues_with(store, args.queue, dead=True):
                moved[name] = await store.queue(name).requeue_dead(all=True)
        else:
            by_queue: dict[str, list[int]] = {}
            for job_id in ids:
                job = await store.get_job(job_id)
                if job is None or job.state != "dead" or args.queue not in (None, job.queue):
                    skipped.append(job_id)
                else:
                    by_queue.setdefault(job.queue, []).append(job_id)
            for name, queue_ids in by_queue.items():
                moved[name] = await store.queue(name).requeue_dead(queue_ids)
                # A job redriven or purged meanwhile by someone else is not moved.
                if moved[name] < len(queue_ids):
                    skipped += [
                        job_id
                        for job_id in queue_ids
                        if (job := await store.get_job(job_id)) is None
                        or job.state != "pending"
                        or job.attempts != 0
                    ]
    total = sum(moved.values())
    if args.json:
        queues = [{"queue": name, "requeued": count} for name, count in moved.items()]
        _print(json.dumps({"queues": queues, "requeued": total, "skipped": sorted(skipped)}))
    else:
        for name, count in moved.items():
            _print(f"queue {name!r}: requeued {count} dead job{'s' if count != 1 else ''}")
        if skipped:
            scope = "" if args.queue is None else f" of queue {args.queue!r}"
            print(
                f"alkstore-trio dead requeue: skipped {len(skipped)} id(s) that are not dead "
                f"jobs{scope}: {' '.join(map(str, sorted(skipped)))}",
                file=sys.stderr,
            )
        if args.all and not moved:
            _print("requeued 0 dead jobs")
    if not args.all and total == 0:
        raise CommandFailed("none of the ids is a dead job; see 'alkstore-trio dead list'")
    return EXIT_OK


async def _dead_purge(args: argparse.Namespace) -> int:
    # Checked before anything is opened: a script that forgot --yes changes nothing.
    if not args.yes and not args.dry_run and not sys.stdin.isatty():
        raise UsageProblem(
            "refusing to delete dead jobs without confirmation: stdin is not a terminal; "
            "pass --yes to purge without asking (or --dry-run to only count them)"
        )
    async with _operator_store(args) as store:
        queues = await _queues_with(store, args.queue, dead=True)
        # D29: exactly what a purge now would delete, per queue (the age limit applied).
        doomed = {
            name: await store.queue(name).purge_dead(args.older_than, dry_run=True)
            for name in queues
        }
        if args.dry_run:
            purged = doomed
        else:
            asked = not args.yes and sum(doomed.values()) > 0
            if asked and not await _confirm(_purge_question(doomed, args.older_than)):
                raise CommandFailed("purge cancelled: nothing was deleted")
            purged = {name: await store.queue(name).purge_dead(args.older_than) for name in queues}
    total = sum(purged.values())
    verb = "would purge" if args.dry_run else "purged"
    if args.json:
        key = "would_purge" if args.dry_run else "purged"
        rows = [{"queue": name, key: count} for name, count in purged.items()]
        _print(json.dumps({"queues": rows, key: total}))
        return EXIT_OK
    for name, count in purged.items():
        _print(f"queue {name!r}: {verb} {count} dead job{'s' if count != 1 else ''}")
    if not purged:
        _print(f"{verb} 0 dead jobs")
    return EXIT_OK


def _purge_question(doomed: Mapping[str, int], older_than_s: float | None) -> str:
    """``dead purge``'s question, with the number of jobs the purge would delete (D29)."""
    total = sum(doomed.values())
    jobs = f"{total} dead job{'s' if total != 1 else ''}"
    where = f"queue {next(iter(doomed))!r}" if len(doomed) == 1 else f"{len(doomed)} queues"
    if older_than_s is None:
        return f"Purge {jobs} of {where} for good? [y/N] "
    return f"Purge {jobs} of {where} (dead for more than {older_than_s:g} s) for good? [y/N] "


async def _confirm(question: str) -> bool:
    """Ask ``question`` on stderr and read the answer from stdin (a terminal): only
    ``y`` or ``yes`` agrees; end of input (Ctrl-D) declines."""
    print(question, end="", file=sys.stderr, flush=True)
    try:
        answer = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
    except BaseException:  # Ctrl-C: the next line ("interrupted") starts a line of its own
        print(file=sys.stderr)
        raise
    if not answer:
        print(file=sys.stderr)
    return answer.strip().lower() in ("y", "yes")


# -- enqueue, cancel, sweep ------------------------------------------------------------


async def _enqueue(args: argparse.Namespace) -> int:
    async with _operator_store(args) as store:
        job_id = await store.queue(args.queue).enqueue(
            args.payload,
            priority=args.priority,
            delay_s=args.delay_s,
            max_attempts=args.max_attempts,
            headers=args.headers,
        )
    _print(str(job_id))
    return EXIT_OK


async def _cancel(args: argparse.Namespace) -> int:
    async with _operator_store(args) as store:
        job = await store.get_job(args.job_id)
        cancelled = job is not None and await store.queue(job.queue).cancel(args.job_id)
    if not cancelled:
        why = (
            "it is dead (purge it with 'alkstore-trio dead purge')"
            if job is not None and job.state == "dead"
            else "there is no live job with this id"
        )
        raise CommandFailed(f"job {args.job_id} was not cancelled: {why}")
    assert job is not None
    _print(f"cancelled job {args.job_id} ({job.state} in queue {job.queue!r})")
    return EXIT_OK


async def _sweep(args: argparse.Namespace) -> int:
    opts = QueueOpts(dead_letter_retention_s=args.retention_s)
    async with _operator_store(args) as store:
        results = {
            name: await store.queue(name, opts).sweep_expired()
            for name in await _queues_with(store, args.queue, dead=False)
        }
    if args.json:
        queues = [
            {"queue": name, "expired": result.expired, "purged": result.purged}
            for name, result in results.items()
        ]
        expired = sum(result.expired for result in results.values())
        purged = sum(result.purged for result in results.values())
        _print(json.dumps({"queues": queues, "expired": expired, "purged": purged}))
        return EXIT_OK
    for name, result in results.items():
        _print(f"queue {name!r}: expired {result.expired}, purged {result.purged}")
    if not results:
        _print("no queue has jobs; nothing to sweep")
    return EXIT_OK


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
    if hasattr(args, "dsn") and args.dsn is None:
        usage_error: Callable[[str], NoReturn] = args.usage_error
        shape = f"{_DSN_SHAPE}, or memory://" if args.command == "worker" else _DSN_SHAPE
        usage_error(f"--dsn is required (or set {DSN_ENV}); expected {shape}")
    command: Callable[[argparse.Namespace], Awaitable[int]] = args.run
    title: str = getattr(args, "title", args.command)
    try:
        if args.command == "worker":
            _setup_worker(args)
        return trio.run(command, args)
    except HandlerImportFailed as exc:
        return _fail(args.command, str(exc))
    except CommandFailed as exc:
        return _fail(title, str(exc))
    except UsageProblem as exc:
        print(f"alkstore-trio {title}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        if getattr(args, "watch", False):
            return EXIT_OK  # Ctrl-C is how a watch ends
        print("alkstore-trio: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``alkstore-trio migrate --dry-run | head``): stop quietly,
        # and keep Python from complaining again when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED
