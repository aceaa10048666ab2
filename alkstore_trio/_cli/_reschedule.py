"""``alkstore-trio jobs reschedule``: give a pending job a new due time or priority
(Q16), or run it now; the workers of its queue are woken and start it on time (R11)."""

from __future__ import annotations

import argparse
import json
import math
from datetime import datetime
from typing import TYPE_CHECKING

from .._core import _validate as v
from ._args import EXIT_OK, CommandFailed, UsageProblem, int_in, job_id
from ._operator import add_command, operator_store
from ._output import iso, say

if TYPE_CHECKING:
    from collections.abc import Mapping


def add_reschedule(
    jobs_commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    """Add ``jobs reschedule``."""
    parser = add_command(
        jobs_commands,
        env,
        "reschedule",
        run,
        title="jobs reschedule",
        help="give a pending job a new due time or priority, or run it now",
        description=(
            "Change the pending job with this id: --delay-s S makes it due S seconds from "
            "now (on the database's clock; a negative S means now), --at gives the time "
            "as ISO 8601 with a UTC offset, --now runs it now; --priority P gives it a new "
            "priority (alone, it keeps its due time). The queue's workers are woken and "
            "start it when it is due. Exit status 1 when the job is not pending "
            "(processing, dead or gone): nothing is changed."
        ),
        examples=[
            "alkstore-trio jobs reschedule 42 --now",
            "alkstore-trio jobs reschedule 42 --delay-s 3600",
            "alkstore-trio jobs reschedule 42 --at 2030-01-31T09:00:00Z --priority 5",
            "alkstore-trio jobs reschedule 42 --priority -1 --json",
        ],
    )
    parser.add_argument("job_id", metavar="ID", type=job_id, help="the job's id")
    when = parser.add_mutually_exclusive_group()
    when.add_argument(
        "--delay-s",
        metavar="S",
        type=_delay,
        default=None,
        help="due S seconds from now (a negative S means now)",
    )
    when.add_argument(
        "--at",
        metavar="ISO8601",
        type=_instant,
        default=None,
        help="due at this time, with a UTC offset (2030-01-31T09:00:00Z)",
    )
    when.add_argument("--now", action="store_true", help="due now: run it as soon as it can")
    parser.add_argument(
        "--priority",
        metavar="P",
        type=int_in(v.PRIORITY_MIN, v.PRIORITY_MAX),
        default=None,
        help="its new priority (a 32-bit signed int; larger runs first)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _delay(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or abs(value) > v.DURATION_MAX_S:
        raise argparse.ArgumentTypeError(
            f"expected a finite number of seconds (at most 100 years), got {text!r}"
        )
    return value


def _instant(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 time such as 2030-01-31T09:00:00Z, got {text!r}"
        ) from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no UTC offset: add one (Z, +02:00) so the time is not ambiguous"
        )
    return value


async def run(args: argparse.Namespace) -> int:
    delay_s = 0.0 if args.now else args.delay_s
    if delay_s is None and args.at is None and args.priority is None:
        raise UsageProblem(
            "jobs reschedule needs --delay-s, --at, --now or --priority: there is nothing to change"
        )
    async with operator_store(args) as store:
        job = await store.get_job(args.job_id)
        done = job is not None and await store.queue(job.queue).reschedule(
            args.job_id, delay_s=delay_s, run_at=args.at, priority=args.priority
        )
        after = await store.get_job(args.job_id) if done else None
    if not done or after is None:
        if job is None:
            why = "there is no job with this id (acked, cancelled, purged or never enqueued)"
        else:
            why = f"it is {job.state}; only a pending job can be rescheduled"
        raise CommandFailed(f"job {args.job_id} was not rescheduled: {why}")
    if args.json:
        say(
            json.dumps(
                {
                    "id": after.id,
                    "queue": after.queue,
                    "rescheduled": True,
                    "run_at": iso(after.run_at),
                    "priority": after.priority,
                }
            )
        )
    else:
        say(
            f"rescheduled job {after.id} in queue {after.queue!r}: due {iso(after.run_at)}, "
            f"priority {after.priority}"
        )
    return EXIT_OK
