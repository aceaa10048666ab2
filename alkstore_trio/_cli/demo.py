"""``alkstore-trio demo``: a few hundred jobs through a supervised worker on the in-memory
engine, shown live (see :mod:`alkstore_trio._demo`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from .._demo import format_summary, run_demo
from ._args import EXIT_OK, CommandFailed, HelpFormatter, epilog, int_in

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], env: Mapping[str, str]
) -> None:
    """Add ``demo``."""
    demo = commands.add_parser(
        "demo",
        help="run a few hundred jobs through a supervised worker on the in-memory engine",
        description=(
            "Enqueue jobs with mixed priorities and small delays into the embedded "
            "in-memory engine and run them with a supervised Worker, shown live: each "
            "retry, dead-letter, job timeout and lease lost to an operator's cancel is "
            "one line above a progress bar (plain lines when the output is not a "
            "terminal). Then print a summary. The counts are the same for the same "
            "--jobs and --seed."
        ),
        epilog=epilog(
            "Exit status: 0 done, 1 the jobs did not settle, 2 usage error, 130 "
            "interrupted (Ctrl-C).",
            examples=[
                "alkstore-trio demo",
                "alkstore-trio demo --jobs 2000 --seed 7 --concurrency 16",
            ],
        ),
        formatter_class=HelpFormatter,
    )
    demo.add_argument(
        "--jobs",
        metavar="N",
        type=int_in(1, 100_000),
        default=300,
        help="jobs to enqueue (default 300)",
    )
    demo.add_argument(
        "--seed",
        metavar="S",
        type=int_in(0, 2**63 - 1),
        default=0,
        help="seed of the job mix, priorities and delays (default 0)",
    )
    demo.add_argument(
        "--concurrency",
        "--workers",
        metavar="N",
        dest="concurrency",
        type=int_in(1, 64),
        default=4,
        help="the most handlers running at once, as worker --concurrency (default 4; "
        "--workers is the old name)",
    )
    demo.set_defaults(run=run)


async def run(args: argparse.Namespace) -> int:
    try:
        summary = await run_demo(jobs=args.jobs, seed=args.seed, workers=args.concurrency)
    except trio.TooSlowError:
        raise CommandFailed("the jobs did not settle in time") from None
    print(format_summary(summary))
    return EXIT_OK
