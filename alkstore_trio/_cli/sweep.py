"""``alkstore-trio sweep``: dead-letter expired jobs, and purge old dead ones."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from .._core import QueueOpts
from ._args import EXIT_OK, add_older_than, queue_name
from ._operator import add_command, operator_store, queues_with
from ._output import say

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    """Add ``sweep``."""
    sweep = add_command(
        commands,
        env,
        "sweep",
        run,
        title="sweep",
        help="dead-letter expired jobs (and, with --older-than-s, purge old dead jobs)",
        description=(
            "Run the sweep a worker runs every --sweep-interval-s, once, on --queue or on "
            "every queue with jobs: live jobs whose expires_at passed move to dead "
            "('expired'); with --older-than-s, dead jobs older than that are deleted."
        ),
        examples=[
            "alkstore-trio sweep",
            "alkstore-trio sweep --queue emails --older-than-s 604800 --json",
        ],
    )
    sweep.add_argument(
        "--queue", metavar="Q", type=queue_name, help="only this queue (default: every queue)"
    )
    add_older_than(
        sweep,
        old_name="--retention-s",
        what="also delete jobs dead for more than S seconds (default: keep them)",
    )
    sweep.add_argument(
        "--json", action="store_true", help="print one JSON object: the counts per queue and totals"
    )


async def run(args: argparse.Namespace) -> int:
    opts = QueueOpts(dead_letter_retention_s=args.older_than_s)
    async with operator_store(args) as store:
        results = {
            name: await store.queue(name, opts).sweep_expired()
            for name in await queues_with(store, args.queue, dead=False)
        }
    if args.json:
        queues = [
            {
                "queue": name,
                "expired": result.expired,
                "purged": result.purged,
                "purged_completed": result.purged_completed,
                "cancelled": result.cancelled,
            }
            for name, result in results.items()
        ]
        expired = sum(result.expired for result in results.values())
        purged = sum(result.purged for result in results.values())
        completed = sum(result.purged_completed for result in results.values())
        cancelled = sum(result.cancelled for result in results.values())
        say(
            json.dumps(
                {
                    "queues": queues,
                    "expired": expired,
                    "purged": purged,
                    "purged_completed": completed,
                    "cancelled": cancelled,
                }
            )
        )
        return EXIT_OK
    for name, result in results.items():
        say(
            f"queue {name!r}: expired {result.expired}, purged {result.purged}, "
            f"completed purged {result.purged_completed}, cancelled {result.cancelled}"
        )
    if not results:
        say("no queue has jobs; nothing to sweep")
    return EXIT_OK
