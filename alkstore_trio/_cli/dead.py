"""``alkstore-trio dead list``, ``dead requeue`` and ``dead purge``: the dead-letter
queue, listed, redriven, or deleted for good (after a confirmation)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import trio

from ._args import (
    EXIT_OK,
    CommandFailed,
    HelpFormatter,
    UsageProblem,
    add_older_than,
    epilog,
    job_id,
    queue_name,
)
from ._operator import add_command, operator_store, queues_with
from ._output import say
from .jobs import add_list_options, print_jobs

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Mapping
    from typing import NoReturn

    from .._core import Job
    from .._store import Queue


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    """Add ``dead list``, ``dead requeue`` and ``dead purge``."""
    dead = commands.add_parser(
        "dead",
        help="list, redrive (requeue) or purge dead jobs",
        description=(
            "Work the dead-letter queue: list the dead jobs, requeue them (back to pending) "
            "or purge them for good."
        ),
        epilog=epilog(
            examples=[
                "alkstore-trio dead list --queue emails",
                "alkstore-trio dead requeue --all --queue emails",
                "alkstore-trio dead purge --older-than-s 604800 --yes",
            ]
        ),
        formatter_class=HelpFormatter,
    )
    dead_commands = dead.add_subparsers(dest="subcommand", metavar="SUBCOMMAND")
    dead_commands.required = True
    _add_list(dead_commands, env)
    _add_requeue(dead_commands, env)
    _add_purge(dead_commands, env)


def _add_list(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    dead_list = add_command(
        commands,
        env,
        "list",
        list_dead,
        title="dead list",
        help="list dead jobs (of every queue, or of --queue)",
        description=(
            "List dead jobs, oldest id first, with when they died and why "
            "(their last_error). Without --queue, every queue with dead jobs, in turn."
        ),
        examples=[
            "alkstore-trio dead list",
            "alkstore-trio dead list --queue emails --after-id 1200 --limit 100",
            "alkstore-trio dead list --queue emails --json",
        ],
    )
    dead_list.add_argument(
        "--queue", metavar="Q", type=queue_name, help="only this queue (default: every queue)"
    )
    add_list_options(dead_list)


def _add_requeue(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    requeue = add_command(
        commands,
        env,
        "requeue",
        requeue_dead,
        title="dead requeue",
        help="redrive dead jobs: back to pending, attempts reset",
        description=(
            "Move dead jobs back to pending, ready now, with their attempts reset to 0, "
            "and wake the queue's workers. Name the jobs by id, or --all for every "
            "dead job (of --queue, or of every queue). Each queue's jobs move in one "
            "transaction. Ids that are not dead jobs (of --queue, when given) are "
            "reported and skipped. A dead job with a unique key that a live job holds "
            "stays dead, and is reported (the key allows one live job)."
        ),
        examples=[
            "alkstore-trio dead requeue 17 42",
            "alkstore-trio dead requeue --all --queue emails",
        ],
    )
    requeue.add_argument(
        "job_ids", metavar="ID", type=job_id, nargs="*", help="the ids of the dead jobs to requeue"
    )
    requeue.add_argument(
        "--all", action="store_true", help="every dead job (of --queue, or of every queue)"
    )
    requeue.add_argument(
        "--queue", metavar="Q", type=queue_name, help="only this queue (default: every queue)"
    )
    requeue.add_argument(
        "--json",
        action="store_true",
        help=(
            "print one JSON object: the count per queue, the total, the skipped ids and "
            "the ids held dead by a live job's unique key"
        ),
    )


def _add_purge(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    purge = add_command(
        commands,
        env,
        "purge",
        purge_dead,
        title="dead purge",
        help="delete dead jobs for good (all, or those older than --older-than-s)",
        description=(
            "Delete dead jobs for good: those that died more than --older-than-s "
            "seconds ago, or every one. Of --queue, or of every queue (one transaction "
            "per queue). On a terminal it first counts the jobs it would delete and asks; "
            "when stdin is not a terminal (a script, cron, CI) it refuses unless --yes is "
            "given. --dry-run only counts them."
        ),
        examples=[
            "alkstore-trio dead purge --queue reports",
            "alkstore-trio dead purge --older-than-s 604800 --dry-run",
            "alkstore-trio dead purge --older-than-s 604800 --yes  # in a script or cron job",
        ],
    )
    add_older_than(
        purge,
        old_name="--older-than",
        what="only jobs dead for more than S seconds (default: every dead job)",
    )
    purge.add_argument(
        "--queue", metavar="Q", type=queue_name, help="only this queue (default: every queue)"
    )
    purge.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="purge without asking (required when stdin is not a terminal)",
    )
    purge.add_argument(
        "--dry-run",
        action="store_true",
        help="delete nothing: print how many dead jobs would be purged now",
    )
    purge.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: the count per queue and the total",
    )


async def list_dead(args: argparse.Namespace) -> int:
    async with operator_store(args) as store:
        jobs: list[Job] = []
        for name in await queues_with(store, args.queue, dead=True):
            left = args.limit - len(jobs)
            if left <= 0:
                break
            jobs += await store.queue(name).list_jobs("dead", limit=left, after_id=args.after_id)
    print_jobs(jobs, as_json=args.json, dead=True)
    if not jobs and not args.json:
        where = "any queue" if args.queue is None else f"queue {args.queue!r}"
        print(f"no dead jobs in {where}", file=sys.stderr)
    return EXIT_OK


async def requeue_dead(args: argparse.Namespace) -> int:
    usage_error: Callable[[str], NoReturn] = args.usage_error
    ids: list[int] = list(dict.fromkeys(args.job_ids))
    if bool(ids) == bool(args.all):
        usage_error("name the dead jobs to requeue by ID, or pass --all (not both)")
    async with operator_store(args) as store:
        moved: dict[str, int] = {}
        skipped: list[int] = []
        held: list[int] = []  # Q15.4: still dead, a live job holds their unique key
        if args.all:
            for name in await queues_with(store, args.queue, dead=True):
                moved[name] = await store.queue(name).requeue_dead(all=True)
                held += await _keyed_dead_ids(store.queue(name))
        else:
            by_queue: dict[str, list[int]] = {}
            for job_id in ids:
                job = await store.get_job(job_id)
                if job is None or job.state != "dead" or args.queue not in (None, job.queue):
                    skipped.append(job_id)
                else:
                    by_queue.setdefault(job.queue, []).append(job_id)
            for name, queue_ids in by_queue.items():
                moved[name] = await store.queue(name).requeue_dead(queue_ids)
                # A job redriven or purged meanwhile by someone else is not moved.
                if moved[name] < len(queue_ids):
                    for job_id in queue_ids:
                        job = await store.get_job(job_id)
                        if job is not None and job.state == "dead" and job.unique_key:
                            held.append(job_id)
                        elif job is None or job.state != "pending" or job.attempts != 0:
                            skipped.append(job_id)
    total = sum(moved.values())
    if args.json:
        queues = [{"queue": name, "requeued": count} for name, count in moved.items()]
        say(
            json.dumps(
                {
                    "queues": queues,
                    "requeued": total,
                    "skipped": sorted(skipped),
                    "held": sorted(held),
                }
            )
        )
    else:
        for name, count in moved.items():
            say(f"queue {name!r}: requeued {count} dead job{'s' if count != 1 else ''}")
        if skipped:
            scope = "" if args.queue is None else f" of queue {args.queue!r}"
            print(
                f"alkstore-trio dead requeue: skipped {len(skipped)} id(s) that are not dead "
                f"jobs{scope}: {' '.join(map(str, sorted(skipped)))}",
                file=sys.stderr,
            )
        if held:
            print(
                f"alkstore-trio dead requeue: {len(held)} dead job(s) stayed dead because a "
                f"live job holds their unique key: {' '.join(map(str, sorted(held)))}",
                file=sys.stderr,
            )
        if args.all and not moved:
            say("requeued 0 dead jobs")
    if not args.all and total == 0:
        if held:
            raise CommandFailed(
                "no job was requeued: live jobs hold the unique keys of the dead ones; "
                "requeue them once those jobs are done"
            )
        raise CommandFailed("none of the ids is a dead job; see 'alkstore-trio dead list'")
    return EXIT_OK


async def _keyed_dead_ids(queue: Queue) -> list[int]:
    """Q15.4: the ids of the queue's dead jobs that have a unique key: after a redrive of
    every dead job, the ones a live job's key kept dead."""
    ids: list[int] = []
    after: int | None = None
    while page := await queue.list_jobs("dead", limit=1000, after_id=after):
        ids += [job.id for job in page if job.unique_key is not None]
        after = page[-1].id
    return ids


async def purge_dead(args: argparse.Namespace) -> int:
    # Checked before anything is opened: a script that forgot --yes changes nothing.
    if not args.yes and not args.dry_run and not sys.stdin.isatty():
        raise UsageProblem(
            "refusing to delete dead jobs without confirmation: stdin is not a terminal; "
            "pass --yes to purge without asking (or --dry-run to only count them)"
        )
    async with operator_store(args) as store:
        queues = await queues_with(store, args.queue, dead=True)
        # Exactly what a purge now would delete, per queue (the age limit applied).
        doomed = {
            name: await store.queue(name).purge_dead(args.older_than_s, dry_run=True)
            for name in queues
        }
        if args.dry_run:
            purged = doomed
        else:
            asked = not args.yes and sum(doomed.values()) > 0
            if asked and not await _confirm(_purge_question(doomed, args.older_than_s)):
                raise CommandFailed("purge cancelled: nothing was deleted")
            purged = {
                name: await store.queue(name).purge_dead(args.older_than_s) for name in queues
            }
    total = sum(purged.values())
    verb = "would purge" if args.dry_run else "purged"
    if args.json:
        key = "would_purge" if args.dry_run else "purged"
        rows = [{"queue": name, key: count} for name, count in purged.items()]
        say(json.dumps({"queues": rows, key: total}))
        return EXIT_OK
    for name, count in purged.items():
        say(f"queue {name!r}: {verb} {count} dead job{'s' if count != 1 else ''}")
    if not purged:
        say(f"{verb} 0 dead jobs")
    return EXIT_OK


def _purge_question(doomed: Mapping[str, int], older_than_s: float | None) -> str:
    """``dead purge``'s question, with the number of jobs the purge would delete."""
    total = sum(doomed.values())
    jobs = f"{total} dead job{'s' if total != 1 else ''}"
    where = f"queue {next(iter(doomed))!r}" if len(doomed) == 1 else f"{len(doomed)} queues"
    if older_than_s is None:
        return f"Purge {jobs} of {where} for good? [y/N] "
    return f"Purge {jobs} of {where} (dead for more than {older_than_s:g} s) for good? [y/N] "


async def _confirm(question: str) -> bool:
    """Ask ``question`` on stderr and read the answer from stdin (a terminal): only
    ``y`` or ``yes`` agrees; end of input (Ctrl-D) declines."""
    print(question, end="", file=sys.stderr, flush=True)
    try:
        answer = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
    except BaseException:  # Ctrl-C: the next line ("interrupted") starts a line of its own
        print(file=sys.stderr)
        raise
    if not answer:
        print(file=sys.stderr)
    return answer.strip().lower() in ("y", "yes")
