"""``alkstore-trio periodic list`` (Q17.6): every periodic schedule's row, with its next
and last fire time, and the stale ones (no worker declares them any more);
``periodic delete`` (Q17.10): delete a stale row."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from .._core._periodic import PERIODIC_STALE_AFTER_S, check_name
from .._errors import InvalidArgument
from ._args import EXIT_OK, CommandFailed, HelpFormatter, epilog, seconds
from ._operator import add_command, operator_store
from ._output import iso, say, table

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._core import PeriodicInfo

#: The default stale horizon, as the store's (Q17.6).
_STALE_AFTER_S = PERIODIC_STALE_AFTER_S


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    """Add ``periodic list`` and ``periodic delete``."""
    periodic = commands.add_parser(
        "periodic",
        help="list the periodic schedules (next and last fire time, stale rows), delete one",
        description=(
            "Periodic schedules are declared by workers (Worker(periodic=...), worker "
            "--periodic); each has one row in the store."
        ),
        epilog=epilog(
            examples=[
                "alkstore-trio periodic list",
                "alkstore-trio periodic list --json",
                "alkstore-trio periodic delete old-report",
            ]
        ),
        formatter_class=HelpFormatter,
    )
    subcommands = periodic.add_subparsers(dest="subcommand", metavar="SUBCOMMAND")
    subcommands.required = True
    listing = add_command(
        subcommands,
        env,
        "list",
        list_periodic,
        title="periodic list",
        help="list every schedule: queue, expression, time zone, next/last fire, stale",
        description=(
            "List every periodic schedule by name: its queue, expression (cron:EXPR or "
            "every:Ns), time zone, next and last fire time (UTC) and when a worker last "
            "declared it. A schedule no worker declared for --stale-after-s is STALE: it "
            "no longer fires (it was removed from the code); its row is kept."
        ),
        examples=[
            "alkstore-trio periodic list",
            "alkstore-trio periodic list --stale-after-s 3600 --json",
        ],
    )
    listing.add_argument(
        "--stale-after-s",
        metavar="S",
        type=seconds(zero_ok=False),
        default=_STALE_AFTER_S,
        help="a schedule undeclared for longer than this is stale (default 600)",
    )
    listing.add_argument("--json", action="store_true", help="one JSON object per schedule")
    delete = add_command(
        subcommands,
        env,
        "delete",
        delete_periodic,
        title="periodic delete",
        help="delete a schedule's row (a stale one: no worker declares it any more)",
        description=(
            "Delete the row of the periodic schedule NAME; its jobs already enqueued stay. "
            "Meant for STALE rows (see 'periodic list'): a worker that still declares the "
            "schedule makes its row again at its next check (within a minute), as a new "
            "schedule whose next fire time counts from then. Remove it from the workers' "
            "code first. Fails (exit 1) when there is no such row."
        ),
        examples=[
            "alkstore-trio periodic delete old-report",
            "alkstore-trio periodic delete old-report --json",
        ],
    )
    delete.add_argument("name", metavar="NAME", type=schedule_name, help="the schedule's name")
    delete.add_argument("--json", action="store_true", help="print the result as JSON")


def schedule_name(text: str) -> str:
    """An argparse ``type`` for a schedule name (Q17.1's rule)."""
    try:
        return check_name(text)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


async def list_periodic(args: argparse.Namespace) -> int:
    async with operator_store(args) as store:
        rows = await store.list_periodic(stale_after_s=args.stale_after_s)
    if args.json:
        for row in rows:
            say(json.dumps(_as_json(row), ensure_ascii=False))
        return EXIT_OK
    if not rows:
        print("no periodic schedules", file=sys.stderr)
        return EXIT_OK
    header = ["NAME", "QUEUE", "EXPRESSION", "TZ", "NEXT FIRE", "LAST FIRE", "LAST SEEN", ""]
    cells = [
        [
            row.name,
            row.queue,
            row.expression,
            row.tz,
            iso(row.next_fire_at),
            iso(row.last_fire_at),
            iso(row.last_seen_at),
            "STALE" if row.stale else "",
        ]
        for row in rows
    ]
    for line in table(header, cells, "llllllll"):
        say(line)
    return EXIT_OK


async def delete_periodic(args: argparse.Namespace) -> int:
    async with operator_store(args) as store:
        rows = {row.name: row for row in await store.list_periodic()}
        deleted = await store.delete_periodic(args.name)
    if not deleted:
        raise CommandFailed(f"schedule {args.name!r} was not deleted: there is no such row")
    row = rows.get(args.name)
    declared = row is not None and not row.stale
    if args.json:
        say(json.dumps({"name": args.name, "deleted": True, "stale": not declared}))
    else:
        say(f"deleted the row of schedule {args.name!r}")
    if declared and row is not None:
        print(
            f"note: a worker declared {args.name!r} at {iso(row.last_seen_at)}; while one "
            "still does, its next check makes the row again (as a new schedule)",
            file=sys.stderr,
        )
    return EXIT_OK


def _as_json(row: PeriodicInfo) -> dict[str, object]:
    return {
        "name": row.name,
        "queue": row.queue,
        "expression": row.expression,
        "tz": row.tz,
        "next_fire_at": None if row.next_fire_at is None else iso(row.next_fire_at),
        "last_fire_at": None if row.last_fire_at is None else iso(row.last_fire_at),
        "last_seen_at": iso(row.last_seen_at),
        "stale": row.stale,
    }
