"""``alkstore-trio cancel``: cancel one live job by id (Q19.5)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._args import EXIT_OK, CommandFailed, job_id
from ._operator import add_command, operator_store
from ._output import say

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    """Add ``cancel``."""
    cancel = add_command(
        commands,
        env,
        "cancel",
        run,
        title="cancel",
        help="cancel a pending or running job",
        description=(
            "Cancel the live job with this id. A pending job is recorded cancelled at "
            "once; a worker running it is interrupted, and the job is recorded cancelled "
            "once its handler stopped. Exit status 1 when there is no live job with this "
            "id (dead jobs are purged with 'dead purge')."
        ),
        examples=["alkstore-trio cancel 42"],
    )
    cancel.add_argument("job_id", metavar="ID", type=job_id, help="the job's id")


async def run(args: argparse.Namespace) -> int:
    async with operator_store(args) as store:
        job = await store.get_job(args.job_id)
        cancelled = job is not None and await store.queue(job.queue).cancel(args.job_id)
    if not cancelled:
        why = (
            "it is dead (purge it with 'alkstore-trio dead purge')"
            if job is not None and job.state == "dead"
            else "there is no live job with this id"
        )
        raise CommandFailed(f"job {args.job_id} was not cancelled: {why}")
    assert job is not None
    if job.state == "pending":
        say(f"cancelled job {args.job_id} (pending in queue {job.queue!r})")
    else:  # Q19.5: its worker is told; the job is recorded cancelled once it stopped
        say(
            f"cancelling job {args.job_id} ({job.state} in queue {job.queue!r}): its worker "
            "is interrupted; the job is recorded cancelled once its handler stopped"
        )
    return EXIT_OK
