"""``alkstore-trio dashboard``: serve the web dashboard (W1–W9) of a PostgreSQL store.

The dashboard's libraries come with the ``dashboard`` extra and are imported only when
the command runs, so the rest of the command line never needs them.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Final

from .. import postgres
from .._errors import InvalidArgument
from ._args import EXIT_OK, CommandFailed, UsageProblem
from ._operator import add_command, operator_store

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping

#: ``pg_stat_activity.application_name`` of the dashboard's connections.
DASHBOARD_APPLICATION_NAME: Final = "alkstore-trio dashboard"
#: Connections the dashboard's store keeps: a few pages load at once.
POOL_SIZE: Final = 4


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    """Add ``dashboard``."""
    parser = add_command(
        commands,
        env,
        "dashboard",
        run,
        title="dashboard",
        help="serve the web dashboard (needs the dashboard extra)",
        description=(
            "Serve the web dashboard on --bind until Ctrl-C: queues, jobs, dead letters, "
            "and the actions pause, resume, limits, cancel, requeue and purge. It binds to "
            "loopback by default; any other address needs ALKSTORE_DASHBOARD_TOKEN (a token of at "
            "least 16 characters) or ALKSTORE_DASHBOARD_BASIC_AUTH (USER:PASSWORD) in the "
            "environment, or it refuses to start. --read-only shows no actions and "
            "refuses every POST (a role with SELECT only is then enough). Needs "
            "pip install 'alkstore_trio[dashboard]'."
        ),
        examples=[
            "alkstore-trio dashboard --dsn postgresql://ops@db.example/shop",
            "ALKSTORE_DASHBOARD_TOKEN=$(cat /run/secrets/dash) alkstore-trio dashboard "
            "--bind 0.0.0.0:8080 --read-only",
        ],
    )
    parser.add_argument(
        "--bind",
        metavar="HOST:PORT",
        default="127.0.0.1:8080",
        help="where to listen (default 127.0.0.1:8080; [::1]:8080 for IPv6)",
    )
    parser.add_argument(
        "--read-only", action="store_true", help="show no actions; refuse every POST"
    )
    parser.add_argument(
        "--allow-origin",
        metavar="URL",
        action="append",
        default=[],
        help=(
            "also accept POSTs from this origin (https://ops.example.com, a TLS proxy's "
            "public address); repeatable"
        ),
    )


async def run(args: argparse.Namespace) -> int:
    try:
        from .. import dashboard
    except ModuleNotFoundError as exc:
        missing = (exc.name or "a module").partition(".")[0]
        raise CommandFailed(
            f"the dashboard needs the dashboard extra ({missing} is missing): "
            "pip install 'alkstore_trio[dashboard]'"
        ) from None
    try:
        auth = dashboard.Auth.from_env(os.environ)
        host, _ = dashboard.parse_bind(args.bind)
        dashboard.check_bind(host, auth)
    except InvalidArgument as exc:
        raise UsageProblem(str(exc)) from None
    dsn: str = args.dsn
    # The actions (pause, cancel, requeue ...) and the store's errors, one line each on
    # stderr; never a payload, and a store error's text with the password masked.
    log = logging.getLogger("alkstore_trio.dashboard")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)

    def redact(text: str) -> str:
        return postgres.hide_password(text, dsn)

    async with operator_store(
        args, pool_size=POOL_SIZE, application_name=DASHBOARD_APPLICATION_NAME
    ) as store:
        import trio

        async with trio.open_nursery() as nursery:
            urls = await nursery.start(
                lambda task_status: dashboard.serve_dashboard(
                    store,
                    args.bind,
                    read_only=args.read_only,
                    auth=auth,
                    allowed_origins=args.allow_origin,
                    redact=redact,
                    task_status=task_status,
                )
            )
            mode = " (read-only)" if args.read_only else ""
            print(
                f"alkstore-trio dashboard{mode}: serving {postgres.redact_dsn(dsn)} schema "
                f"{args.schema!r} on {', '.join(urls)}",
                file=sys.stderr,
                flush=True,
            )
    return EXIT_OK
