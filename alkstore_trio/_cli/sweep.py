"""``alkstore-trio sweep``: dead-letter expired jobs, and purge old dead ones."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from .._core import QueueOpts
from ._args import EXIT_OK, queue_name, seconds
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
        help="dead-letter expired jobs (and, with --retention-s, purge old dead jobs)",
        description=(
            "Run the sweep (Q9) of --queue, or of every queue with jobs: live jobs whose "
            "expires_at passed move to dead ('expired'); with --retention-s, dead jobs "
            "older than that are deleted."
        ),
    )
    sweep.add_argument("--queue", metavar="Q", type=queue_name, help="only this queue")
    sweep.add_argument(
        "--retention-s",
        metavar="S",
        type=seconds(zero_ok=True),
        default=None,
        help="also delete dead jobs dead for more than S seconds (default: keep them)",
    )
    sweep.add_argument(
        "--json", action="store_true", help="print one JSON object: the counts per queue and totals"
    )


async def run(args: argparse.Namespace) -> int:
    opts = QueueOpts(dead_letter_retention_s=args.retention_s)
    async with operator_store(args) as store:
        results = {
            name: await store.queue(name, opts).sweep_expired()
            for name in await queues_with(store, args.queue, dead=False)
        }
    if args.json:
        queues = [
            {"queue": name, "expired": result.expired, "purged": result.purged}
            for name, result in results.items()
        ]
        expired = sum(result.expired for result in results.values())
        purged = sum(result.purged for result in results.values())
        say(json.dumps({"queues": queues, "expired": expired, "purged": purged}))
        return EXIT_OK
    for name, result in results.items():
        say(f"queue {name!r}: expired {result.expired}, purged {result.purged}")
    if not results:
        say("no queue has jobs; nothing to sweep")
    return EXIT_OK
