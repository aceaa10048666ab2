"""``alkstore-trio queue pause``, ``queue resume`` and ``queue list``: a queue's
controls (Q18), fleet-wide."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ._args import EXIT_OK, HelpFormatter, epilog, queue_name
from ._operator import add_command, operator_store
from ._output import age, say, table

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    """Add ``queue pause``, ``queue resume`` and ``queue list``."""
    queue = commands.add_parser(
        "queue",
        help="pause or resume a queue fleet-wide, list the queues",
        description=(
            "A queue's controls, kept in the store and obeyed by every worker at once: "
            "pause a queue (no worker claims its jobs until it is resumed), resume it, "
            "or list the queues with their state."
        ),
        epilog=epilog(
            examples=[
                "alkstore-trio queue pause payments",
                "alkstore-trio queue resume payments",
                "alkstore-trio queue list",
            ]
        ),
        formatter_class=HelpFormatter,
    )
    queue_commands = queue.add_subparsers(dest="subcommand", metavar="SUBCOMMAND")
    queue_commands.required = True
    pause = add_command(
        queue_commands,
        env,
        "pause",
        pause_queue,
        title="queue pause",
        help="pause a queue: no worker claims its jobs until it is resumed",
        description=(
            "Pause the queue in the store. When the command returns, no claim of any "
            "worker hands out a job of the queue (a claim in flight has finished). "
            "Running jobs finish normally and enqueues are still accepted; workers "
            "idle on the queue until 'queue resume'. Pausing a paused queue does nothing."
        ),
        examples=["alkstore-trio queue pause payments"],
    )
    pause.add_argument("queue", metavar="NAME", type=queue_name, help="the queue to pause")
    resume = add_command(
        queue_commands,
        env,
        "resume",
        resume_queue,
        title="queue resume",
        help="resume a paused queue and wake its workers",
        description=(
            "Resume the queue and wake its idle workers (a NOTIFY), which claim its "
            "jobs at once. Resuming a queue that is not paused only wakes it."
        ),
        examples=["alkstore-trio queue resume payments"],
    )
    resume.add_argument("queue", metavar="NAME", type=queue_name, help="the queue to resume")
    listing = add_command(
        queue_commands,
        env,
        "list",
        list_queues,
        title="queue list",
        help="list the queues: paused or running, and their jobs",
        description=(
            "List every queue with jobs, counted jobs or a pause: whether it is paused, "
            "its ready, delayed, processing and dead jobs, and the age of its oldest "
            "ready job."
        ),
        examples=["alkstore-trio queue list", "alkstore-trio queue list --json"],
    )
    listing.add_argument("--json", action="store_true", help="print one JSON object per queue")


async def pause_queue(args: argparse.Namespace) -> int:
    async with operator_store(args) as store:
        await store.queue(args.queue).pause()
    say(f"paused queue {args.queue!r}: no worker claims its jobs until 'queue resume'")
    return EXIT_OK


async def resume_queue(args: argparse.Namespace) -> int:
    async with operator_store(args) as store:
        await store.queue(args.queue).resume()
    say(f"resumed queue {args.queue!r}")
    return EXIT_OK


async def list_queues(args: argparse.Namespace) -> int:
    async with operator_store(args) as store:
        stats = await store.stats()
    if args.json:
        for entry in stats.queues:
            say(
                json.dumps(
                    {
                        "queue": entry.queue,
                        "paused": entry.paused,
                        "ready": entry.pending_ready,
                        "delayed": entry.pending_delayed,
                        "processing": entry.processing,
                        "dead": entry.dead,
                        "oldest_ready_age_s": entry.oldest_ready_age_s,
                    }
                )
            )
        return EXIT_OK
    if not stats.queues:
        say("no queues (no jobs, none paused)")
        return EXIT_OK
    header = ["QUEUE", "STATE", "READY", "DELAYED", "PROCESSING", "DEAD", "OLDEST READY"]
    rows = [
        [
            entry.queue,
            "paused" if entry.paused else "running",
            str(entry.pending_ready),
            str(entry.pending_delayed),
            str(entry.processing),
            str(entry.dead),
            age(entry.oldest_ready_age_s),
        ]
        for entry in stats.queues
    ]
    for line in table(header, rows, "llrrrrr"):
        say(line)
    return EXIT_OK
