"""``alkstore-trio worker``: its options, and what happens before and after the worker
runs (see :mod:`._serve`, which runs it). The handlers are imported before anything is
opened, so a bad ``--queue`` is a usage error with no effect."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, Final, NoReturn, TypeVar

from .. import postgres
from .._core import _validate as v
from .._core._periodic import check_schedules
from .._errors import AlkstoreError, EngineError, InvalidArgument, SchemaError
from .._open import open_store
from .._runtime import SupervisorEscalated
from ._args import (
    DSN_ENV,
    ENVIRONMENT,
    CommandFailed,
    HelpFormatter,
    add_connect_timeout,
    add_store_options,
    epilog,
    int_in,
    seconds,
    store_url,
    worker_id,
)
from ._handlers import (  # Q17
    QUEUE_SPEC_SHAPE,
    QueueSpecError,
    load_handlers,
    load_periodic,
    load_tasks,
    make_cwd_importable,
    parse_periodic_spec,
    parse_queue_spec,
)
from ._output import one_line
from ._serve import serve_worker

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from contextlib import AbstractAsyncContextManager

    from .._store import Store
    from ._handlers import PeriodicSpec, QueueSpec

#: ``pg_stat_activity.application_name`` of the worker command's connections.
WORKER_APPLICATION_NAME: Final = "alkstore-trio worker"
#: The levels ``worker --log-level`` accepts.
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")

T = TypeVar("T")


def _queue_spec(text: str) -> QueueSpec:
    """An argparse ``type`` for ``--queue``: syntax only; the handler is loaded later."""
    try:
        return parse_queue_spec(text)
    except QueueSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _tasks_spec(text: str) -> PeriodicSpec:
    """An argparse ``type`` for ``--tasks`` (T5): syntax only; imported later."""
    try:
        return parse_periodic_spec(text, "--tasks")
    except QueueSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _periodic_spec(text: str) -> PeriodicSpec:
    """An argparse ``type`` for ``--periodic`` (Q17): syntax only; imported later."""
    try:
        return parse_periodic_spec(text)
    except QueueSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _per_queue(what: str, parse_value: Callable[[str], T]) -> Callable[[str], tuple[str, T]]:
    """An argparse ``type`` for ``NAME=VALUE`` options (R12, R13): syntax and range only;
    whether the worker serves NAME is checked once every option is parsed."""

    def parse(text: str) -> tuple[str, T]:
        name, equals, value = text.partition("=")
        if not equals or not name:
            raise argparse.ArgumentTypeError(f"{text!r} is not NAME={what}")
        try:
            v.check_queue_name(name)
        except InvalidArgument as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
        return name, parse_value(value)

    return parse


def _timeout_or_none(text: str) -> float | None:
    """``S`` seconds > 0, or ``none`` (no limit)."""
    return None if text.lower() == "none" else seconds(zero_ok=False)(text)


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    """Add ``worker``."""
    worker = commands.add_parser(
        "worker",
        help="run a worker: claim jobs and run their handlers until SIGINT/SIGTERM",
        description=(
            "Run a worker on the queues named by --queue, each with its handler, an "
            "'async def handler(job)' imported from MODULE (the current directory is "
            "searched first, as with python -m), and on the queues of the task registries "
            "named by --tasks. It claims jobs, runs their handlers, and "
            "acks, retries or dead-letters them, until a signal stops it. The first "
            "SIGINT or SIGTERM stops it gracefully: no new claims, running handlers get "
            "--shutdown-grace-s to finish, the rest are cancelled and their jobs "
            "released. A second one cancels the running handlers at once (their jobs are "
            "still released); a third exits immediately (their leases then lapse). "
            "Progress goes to stderr: a status line every --status-interval-s and a "
            "summary at exit."
        ),
        epilog=epilog(
            ENVIRONMENT,
            "Exit status: 0 stopped by a signal (gracefully), 1 failed (the store could not "
            "be opened, or the worker failed after releasing its jobs), 2 usage error (a bad "
            "--queue included), 130 stopped by a second or third signal.",
            examples=[
                "alkstore-trio worker --dsn postgresql://app@db.example/shop "
                "--queue emails=myapp.tasks:send_email",
                "alkstore-trio worker --queue emails=tasks:send --queue thumbnails=tasks:resize "
                "--concurrency 20 --job-timeout-s 60",
                "alkstore-trio worker --dsn memory:// --queue emails=tasks:send  # a smoke test",
                "alkstore-trio worker --queue emails=tasks:send --periodic tasks:SCHEDULES",
                "alkstore-trio worker --queue emails=tasks:send --queue reports=tasks:report "
                "--concurrency 22 --queue-concurrency reports=2 --queue-job-timeout-s reports=600",
                "alkstore-trio worker --periodic tasks:SCHEDULES  # a scheduler-only worker",
                "alkstore-trio worker --tasks myapp.tasks:tasks  # a registry of typed tasks",
            ],
        ),
        formatter_class=HelpFormatter,
    )
    add_store_options(
        worker,
        env,
        dsn_type=store_url,
        dsn_what="a postgresql:// URL, a libpq conninfo, or memory:// (in-process only)",
    )
    add_connect_timeout(worker, postgres_only=True)
    worker.add_argument(
        "--no-listen",
        dest="listen",
        action="store_false",
        help="PostgreSQL: open no LISTEN session and find new jobs by re-polling every "
        "--poll-interval-s (behind a transaction-pooling proxy such as PgBouncer in "
        "transaction mode, where LISTEN does not work)",
    )
    _add_handler_options(worker)
    _add_run_options(worker)
    _add_output_options(worker)
    worker.set_defaults(run=run, setup=setup, usage_error=worker.error)


def _add_handler_options(worker: argparse.ArgumentParser) -> None:
    """What the worker serves: ``--queue`` handlers, ``--tasks`` registries (T5) and
    ``--periodic`` schedules (Q17)."""
    worker.add_argument(
        "--queue",
        metavar="NAME=MODULE:FUNCTION",
        dest="queues",
        action="append",
        type=_queue_spec,
        default=[],
        help=(
            "serve queue NAME with the async handler FUNCTION of MODULE (dotted names "
            "allowed on both sides: myapp.tasks:Mailer.send); repeat for more queues. "
            "Required unless --tasks or --periodic is given (with --periodic alone the "
            "worker only fires schedules)"
        ),
    )
    worker.add_argument(  # T5
        "--tasks",
        metavar="MODULE:ATTR",
        dest="tasks_specs",
        action="append",
        type=_tasks_spec,
        default=[],
        help=(
            "serve the task registry at ATTR of MODULE (an alkstore_trio.Tasks): every "
            "queue its tasks use, each job routed by its task name, and its periodic "
            "tasks; repeatable, and combinable with --queue for other queues"
        ),
    )
    worker.add_argument(  # Q17
        "--periodic",
        metavar="MODULE:ATTR",
        dest="periodic_specs",
        action="append",
        type=_periodic_spec,
        default=[],
        help=(
            "fire the periodic schedules at ATTR of MODULE (a Periodic or a list of them), "
            "each fire time once across every worker that declares it; repeatable"
        ),
    )


def _add_run_options(worker: argparse.ArgumentParser) -> None:
    """The options of :class:`~alkstore_trio.Worker` itself."""
    worker.add_argument(
        "--concurrency",
        metavar="N",
        type=int_in(1, 100_000),
        default=10,
        help="the most handlers running at once (default 10)",
    )
    worker.add_argument(  # R12
        "--queue-concurrency",
        metavar="NAME=N",
        dest="queue_concurrency_specs",
        action="append",
        type=_per_queue("N", int_in(1, 100_000)),
        default=[],
        help="at most N handlers of queue NAME at once, within --concurrency; a queue at "
        "its cap never holds up the others; repeatable",
    )
    positive, non_negative = seconds(zero_ok=False), seconds(zero_ok=True)
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
    worker.add_argument(  # R13
        "--queue-job-timeout-s",
        metavar="NAME=S",
        dest="queue_job_timeout_specs",
        action="append",
        type=_per_queue("S (seconds > 0, or none)", _timeout_or_none),
        default=[],
        help="--job-timeout-s for queue NAME alone (none: no limit); repeatable",
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
        type=int_in(1, 10_000),
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
        type=worker_id,
        default=None,
        help="stored as claimed_by on the jobs it claims (default: HOSTNAME:PID:RANDOM)",
    )


def _add_output_options(worker: argparse.ArgumentParser) -> None:
    """What the command prints."""
    worker.add_argument(
        "--status-interval-s",
        metavar="S",
        type=seconds(zero_ok=True),
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


async def run(args: argparse.Namespace) -> int:
    dsn: str = args.dsn
    schema: str = args.schema
    if dsn.lower().startswith("memory://"):
        where = "memory:// (in-process: only this process can enqueue)"
    else:
        try:
            where = f"{postgres.redact_dsn(dsn)} schema {schema!r}"
        except ImportError as exc:
            raise CommandFailed(str(exc)) from None

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
        "queue_concurrency": args.queue_concurrency,  # R12
        "queue_job_timeout_s": args.queue_job_timeout_s,  # R13
        "shutdown_grace_s": args.shutdown_grace_s,
        "claim_batch_max": args.claim_batch_max,
        "sweep_interval_s": args.sweep_interval_s,
        "periodic": args.periodic,  # Q17
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
        raise CommandFailed(one_line(exc, dsn)) from None
    except EngineError as exc:
        raise CommandFailed(
            f"{one_line(exc, dsn)}; check --dsn (or {DSN_ENV}) and that the server is running"
        ) from None
    except SupervisorEscalated as exc:
        cause = exc.__cause__
        why = "" if cause is None else f" (the crash: {type(cause).__name__}: {cause})"
        message = one_line(exc, dsn) + (why and " " + one_line(Exception(why), dsn))
        raise CommandFailed(f"the worker failed and released its claimed jobs: {message}") from None
    except AlkstoreError as exc:
        raise CommandFailed(f"{type(exc).__name__}: {one_line(exc, dsn)}") from None


def setup(args: argparse.Namespace) -> None:
    """Before ``trio.run``: import the handlers (a bad ``--queue`` is a usage error with
    nothing opened yet) and send log records to stderr at ``--log-level``."""
    usage_error: Callable[[str], NoReturn] = args.usage_error
    if not args.queues and not args.periodic_specs and not args.tasks_specs:
        usage_error(
            f"name at least one queue: --queue {QUEUE_SPEC_SHAPE}, or --tasks MODULE:ATTR "
            "(or give only --periodic MODULE:ATTR for a worker that fires schedules and "
            "claims nothing)"
        )
    if not args.tasks_specs:  # the served queues are known: check before any import
        _check_per_queue(args, {spec.queue for spec in args.queues}, usage_error)
    make_cwd_importable()
    try:
        handlers = load_handlers(args.queues) if args.queues else {}  # R14
        args.handlers, task_schedules = load_tasks(args.tasks_specs, handlers)  # T5
        args.periodic = load_periodic(args.periodic_specs)  # Q17
        args.periodic = check_schedules([*args.periodic, *task_schedules])
    except QueueSpecError as exc:
        usage_error(str(exc))
    except InvalidArgument as exc:
        usage_error(f"--periodic and --tasks: {exc}")
    if args.tasks_specs:  # T5: the registries' queues are known once they are imported
        _check_per_queue(args, set(args.handlers), usage_error)
    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _check_per_queue(
    args: argparse.Namespace, served: set[str], usage_error: Callable[[str], NoReturn]
) -> None:
    """R12, R13: ``--queue-concurrency`` and ``--queue-job-timeout-s`` name served queues,
    each once, with caps within ``--concurrency``."""
    args.queue_concurrency = _per_queue_options(
        "--queue-concurrency", args.queue_concurrency_specs, served, usage_error
    )
    for name, cap in (args.queue_concurrency or {}).items():
        if cap > args.concurrency:
            usage_error(
                f"--queue-concurrency {name}={cap} is above --concurrency {args.concurrency}: "
                "a queue cannot run more handlers than the worker; raise --concurrency"
            )
    args.queue_job_timeout_s = _per_queue_options(
        "--queue-job-timeout-s", args.queue_job_timeout_specs, served, usage_error
    )


def _per_queue_options(
    flag: str,
    pairs: list[tuple[str, T]],
    served: set[str],
    usage_error: Callable[[str], NoReturn],
) -> dict[str, T] | None:
    """R12, R13: the ``NAME=VALUE`` values of ``flag`` by queue (``None``: not given);
    each NAME once, and one of the ``--queue`` names."""
    by_queue: dict[str, T] = {}
    for name, value in pairs:
        if name not in served:
            queues = ", ".join(sorted(served)) or "none: only --periodic was given"
            usage_error(f"{flag} {name}=...: queue {name!r} has no --queue (the queues: {queues})")
        if name in by_queue:
            usage_error(f"{flag}: queue {name!r} is named twice; name it once")
        by_queue[name] = value
    return by_queue or None
