"""``alkstore-trio jobs wait``: wait until a job has finished (Q19.4), then show it as
``jobs show`` does; the exit status says how it finished."""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING, Final

import trio

from .._errors import JobGone
from ._args import CommandFailed, positive_seconds, queue_name
from ._operator import add_command, operator_store
from .jobs import add_show_options, print_job

if TYPE_CHECKING:
    from collections.abc import Mapping

#: Exit status of ``jobs wait`` when the job ended dead or cancelled (it is shown).
EXIT_NOT_COMPLETED: Final = 3
#: Exit status of ``jobs wait`` when ``--timeout-s`` passed first.
EXIT_TIMED_OUT: Final = 4


def add_wait(
    jobs_commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    """Add ``jobs wait``."""
    parser = add_command(
        jobs_commands,
        env,
        "wait",
        run,
        title="jobs wait",
        help="wait until a job has finished, then show it",
        description=(
            "Wait until the job with this id in queue Q is completed, cancelled or dead, "
            "then show it as 'jobs show' does (with its result or last error). It is woken "
            "by the database (LISTEN/NOTIFY) and also reads the job every 5 s. Exit status: "
            "0 completed; 1 no such job (never enqueued, or finished and not kept: "
            "keep_completed_s); 3 dead or cancelled; 4 --timeout-s passed first."
        ),
        examples=[
            "alkstore-trio jobs wait 42 --queue reports",
            "alkstore-trio jobs wait 42 --queue reports --timeout-s 60 --json",
            "alkstore-trio jobs wait 42 --queue reports --result-file result42.bin",
        ],
    )
    add_show_options(parser)
    parser.add_argument(
        "--queue", metavar="Q", type=queue_name, required=True, help="the job's queue (required)"
    )
    parser.add_argument(
        "--timeout-s",
        metavar="S",
        type=positive_seconds,
        default=None,
        help="give up after S seconds (exit status 4); default: wait as long as it takes",
    )


async def run(args: argparse.Namespace) -> int:
    timeout = math.inf if args.timeout_s is None else args.timeout_s
    async with operator_store(args, listen=True) as store:
        with trio.move_on_after(timeout):
            try:
                job = await store.queue(args.queue).wait(args.job_id)
            except JobGone as exc:
                raise CommandFailed(str(exc)) from None
            if job.state == "completed":
                return print_job(job, args)
            # Dead or cancelled: no result to write; show the job (its last error).
            print_job(job, argparse.Namespace(**{**vars(args), "result_file": None}))
            return EXIT_NOT_COMPLETED
    print(
        f"job {args.job_id} of queue {args.queue!r} had not finished after {args.timeout_s:g} s",
        file=sys.stderr,
    )
    return EXIT_TIMED_OUT
