"""What the operator commands share: their subparser, their store, their epilog.

stats, jobs show/list, dead list/requeue/purge, enqueue, cancel, sweep: each opens a
PostgreSQL store (no LISTEN session, a pool of two connections), runs library calls
(Store.stats, Store.get_job, Queue.list_jobs, Queue.requeue_dead, Queue.purge_dead,
Queue.enqueue, Queue.cancel, Queue.sweep_expired) and prints the result. Exit status:
0 done, 1 the command ran and failed (cannot connect, no such job, nothing to
cancel), 2 usage error (including values the library rejects as InvalidArgument, and a
``dead purge`` without --yes when stdin is not a terminal).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

from .. import postgres
from .._core import _validate as v
from .._errors import EngineError, InvalidArgument, SchemaError
from .._open import open_store
from ._args import (
    DSN_ENV,
    ENVIRONMENT,
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
    from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence

    from .._store import Store

#: ``pg_stat_activity.application_name`` of the operator commands' connections.
OPERATOR_APPLICATION_NAME: Final = "alkstore-trio cli"

#: The epilog's line on exit statuses, shared by the operator commands.
EXIT_STATUSES: Final = (
    "Exit status: 0 done, 1 failed (cannot connect, no such job, nothing to do where "
    "something was asked), 2 usage error."
)


def add_command(
    parent: argparse._SubParsersAction[argparse.ArgumentParser],
    env: Mapping[str, str],
    name: str,
    run: Callable[[argparse.Namespace], Awaitable[int]],
    *,
    title: str,
    help: str,
    description: str,
    examples: Sequence[str],
) -> argparse.ArgumentParser:
    """Add an operator command with ``--dsn``, ``--schema`` and ``--connect-timeout``."""
    parser = parent.add_parser(
        name,
        help=help,
        description=description,
        epilog=epilog(ENVIRONMENT, EXIT_STATUSES, examples=examples),
        formatter_class=HelpFormatter,
    )
    add_store_options(parser, env, dsn_type=dsn, dsn_what="a postgresql:// URL or a libpq conninfo")
    add_connect_timeout(parser)
    parser.set_defaults(run=run, usage_error=parser.error, title=title)
    return parser


@asynccontextmanager
async def operator_store(
    args: argparse.Namespace,
    *,
    max_payload_bytes: int = v.DEFAULT_MAX_PAYLOAD_BYTES,
    listen: bool = False,
    pool_size: int = 2,
    application_name: str = OPERATOR_APPLICATION_NAME,
) -> AsyncIterator[Store]:
    """Open the store of ``--dsn``/``--schema`` for one operator command (the dashboard
    serves from it for as long as it runs); connection and schema failures become one
    line (password masked) with the fix. Poll-only unless ``listen`` (``jobs wait``,
    Q19.4, is woken by NOTIFY)."""
    dsn: str = args.dsn
    try:
        where = f"{postgres.redact_dsn(dsn)} schema {args.schema!r}"
    except ImportError as exc:
        raise CommandFailed(str(exc)) from None
    try:
        async with open_store(
            dsn,
            schema=args.schema,
            max_payload_bytes=max_payload_bytes,
            pool_size=pool_size,
            connect_timeout_s=args.connect_timeout,
            application_name=application_name,
            listen=listen,
        ) as store:
            yield store
    except SchemaError as exc:
        raise CommandFailed(one_line(exc, dsn)) from None
    except EngineError as exc:
        message = one_line(exc, dsn)
        if where.partition(" schema ")[0] not in message:
            message += f" ({where})"
        raise CommandFailed(
            f"{message}; check --dsn (or {DSN_ENV}) and that the server is running"
        ) from None
    except InvalidArgument as exc:
        raise UsageProblem(one_line(exc, dsn)) from None


async def queues_with(store: Store, queue: str | None, *, dead: bool) -> list[str]:
    """``[queue]`` when given, else every queue with dead rows (``dead``) or any rows."""
    if queue is not None:
        return [queue]
    stats = await store.stats()
    return [e.queue for e in stats.queues if (e.dead if dead else e.live + e.dead)]
