"""``alkstore-trio queue pause``, ``queue resume``, ``queue limits`` and ``queue list``: a
queue's controls (Q18), fleet-wide."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from ._args import EXIT_OK, HelpFormatter, epilog, queue_name
from ._operator import add_command, operator_store
from ._output import age, say, table

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._core import QueueLimits, QueueStats


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    """Add ``queue pause``, ``queue resume``, ``queue limits`` and ``queue list``."""
    queue = commands.add_parser(
        "queue",
        help="pause, resume or limit a queue fleet-wide, list the queues",
        description=(
            "A queue's controls, kept in the store and obeyed by every worker at once: "
            "pause a queue (no worker claims its jobs until it is resumed), resume it, "
            "limit how many of its jobs run at once and how fast they start, or list the "
            "queues with their state."
        ),
        epilog=epilog(
            examples=[
                "alkstore-trio queue pause payments",
                "alkstore-trio queue resume payments",
                "alkstore-trio queue limits payments --max-running 5 --rate 10/s",
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
    _add_limits(queue_commands, env)
    listing = add_command(
        queue_commands,
        env,
        "list",
        list_queues,
        title="queue list",
        help="list the queues: paused or running, and their jobs",
        description=(
            "List every queue with jobs, counted jobs, a pause or limits: whether it is "
            "paused, its limits, its ready, delayed, processing and dead jobs, and the "
            "age of its oldest ready job."
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
                        **limits_json(entry),  # Q18.10
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
        say("no queues (no jobs, none paused or limited)")
        return EXIT_OK
    header = ["QUEUE", "STATE", "LIMITS", "READY", "DELAYED", "PROCESSING", "DEAD", "OLDEST READY"]
    rows = [
        [
            entry.queue,
            "paused" if entry.paused else "running",
            limits_text(entry.limits),
            str(entry.pending_ready),
            str(entry.pending_delayed),
            str(entry.processing),
            str(entry.dead),
            age(entry.oldest_ready_age_s),
        ]
        for entry in stats.queues
    ]
    for line in table(header, rows, "lllrrrrr"):
        say(line)
    return EXIT_OK


#: What ``--max-running none`` and ``--rate none`` parse to: clear the limit (a flag left
#: out is ``None``: keep it).
CLEAR = "none"


def _count_or_none(text: str) -> int | str:
    """``--max-running``: an int (the library checks its range) or ``none``."""
    if text.lower() == CLEAR:
        return CLEAR
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'none', got {text!r}") from None


def _rate_or_none(text: str) -> float | str:
    """``--rate``: jobs a second, as ``50/s`` or ``50`` (the library checks it), or
    ``none``."""
    if text.lower() == CLEAR:
        return CLEAR
    number = text[:-2] if text.endswith("/s") else text
    try:
        return float(number)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a rate such as '50/s', or 'none', got {text!r}"
        ) from None


def _add_limits(
    queue_commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    limits = add_command(
        queue_commands,
        env,
        "limits",
        queue_limits,
        title="queue limits",
        help="show or set a queue's fleet-wide limits",
        description=(
            "Without a flag, show the queue's limits and how many claims each throttled. "
            "With flags, set them (a flag left out keeps its value; 'none' clears a "
            "limit): --max-running caps the jobs of the queue processing at once across "
            "every worker; --rate caps how many start, R a second with bursts of up to "
            "--burst (default: one second's worth); --per-key caps the jobs of each "
            "concurrency key (enqueue --concurrency-key) processing at once. When the "
            "command returns, every claim of every worker obeys the new limits; running "
            "jobs keep running."
        ),
        examples=[
            "alkstore-trio queue limits payments",
            "alkstore-trio queue limits payments --max-running 5",
            "alkstore-trio queue limits payments --rate 10/s --burst 20",
            "alkstore-trio queue limits payments --max-running none --rate none",
            "alkstore-trio queue limits reports --per-key 1",
        ],
    )
    limits.add_argument("queue", metavar="NAME", type=queue_name, help="the queue")
    limits.add_argument(
        "--max-running",
        metavar="N|none",
        type=_count_or_none,
        default=None,
        help="at most N jobs of the queue processing at once, fleet-wide",
    )
    limits.add_argument(
        "--rate",
        metavar="R/s|none",
        type=_rate_or_none,
        default=None,
        help="at most burst + R*t jobs started in any t seconds, fleet-wide",
    )
    limits.add_argument(
        "--burst",
        metavar="B",
        type=int,
        default=None,
        help="the rate limit's burst (needs a rate; default max(1, ceil(R)))",
    )
    limits.add_argument(
        "--per-key",
        metavar="N|none",
        type=_count_or_none,
        default=None,
        help="at most N jobs of one concurrency key processing at once, fleet-wide",
    )
    limits.add_argument("--json", action="store_true", help="print the limits as JSON")


def limits_text(limits: QueueLimits | None) -> str:
    """A queue's limits in one short phrase (``-`` for none)."""
    if limits is None or not limits.limited:
        return "-"
    parts = []
    if limits.max_running is not None:
        parts.append(f"max {limits.max_running} running")
    if limits.rate_per_s is not None:
        parts.append(f"{limits.rate_per_s:g}/s burst {limits.burst}")
    if limits.max_running_per_key is not None:
        parts.append(f"max {limits.max_running_per_key} per key")
    return ", ".join(parts)


def limits_json(entry: QueueStats | None) -> dict[str, Any]:
    """Q18.10: a queue's limits (``null``: none) and throttle counts, as JSON fields."""
    limits = None if entry is None else entry.limits
    throttled = None if entry is None else entry.throttled
    return {
        "limits": None
        if limits is None
        else {
            "max_running": limits.max_running,
            "rate_per_s": limits.rate_per_s,
            "burst": limits.burst,
            "max_running_per_key": limits.max_running_per_key,
        },
        "throttled": {
            "running": 0 if throttled is None else throttled.running,
            "rate": 0 if throttled is None else throttled.rate,
            "per_key": 0 if throttled is None else throttled.per_key,
        },
    }


async def queue_limits(args: argparse.Namespace) -> int:
    changes = {
        name: None if value == CLEAR else value
        for name, value in (
            ("max_running", args.max_running),
            ("rate_per_s", args.rate),
            ("burst", args.burst),
            ("max_running_per_key", args.per_key),
        )
        if value is not None
    }
    async with operator_store(args) as store:
        queue = store.queue(args.queue)
        if changes:
            await queue.set_limits(**changes)
        entry = (await store.stats(args.queue)).queue(args.queue)
    if args.json:
        say(json.dumps({"queue": args.queue, **limits_json(entry)}))
        return EXIT_OK
    shown = limits_text(None if entry is None else entry.limits)
    done = " set" if changes else ""
    say(f"queue {args.queue!r} limits{done}: {'none' if shown == '-' else shown}")
    if entry is not None and entry.throttled.total:
        say(
            f"claims throttled so far: {entry.throttled.running} by max running, "
            f"{entry.throttled.rate} by the rate, {entry.throttled.per_key} by the per-key "
            "limit"
        )
    return EXIT_OK
