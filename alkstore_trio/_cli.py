"""The ``alkstore-trio`` command (also ``python -m alkstore_trio``).

This is the only module that parses arguments. Subcommands:

- ``demo``: run a few hundred jobs through the embedded in-memory engine and print a
  summary (see :mod:`alkstore_trio._demo`).

Exit codes: 0 success, 1 the command failed, 2 usage error (argparse's own convention),
130 interrupted.
"""

from __future__ import annotations

import argparse
import functools
import sys
from typing import TYPE_CHECKING

import trio

from . import __version__
from ._demo import format_summary, run_demo

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

#: Exit status of a successful command.
EXIT_OK = 0
#: Exit status of a command that ran and failed.
EXIT_FAILED = 1
#: Exit status of a usage error (argparse exits with it too).
EXIT_USAGE = 2
#: Exit status after Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse ``type`` accepting an int in ``[lo, hi]``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"expected {lo}..{hi}, got {value}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``alkstore-trio``."""
    parser = argparse.ArgumentParser(
        prog="alkstore-trio",
        description="A durable job queue and supervision framework for trio.",
    )
    parser.add_argument("--version", action="version", version=f"alkstore-trio {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    demo = commands.add_parser(
        "demo",
        help="run a few hundred jobs through the in-memory engine and print a summary",
        description=(
            "Enqueue jobs with mixed priorities and small delays into the embedded "
            "in-memory engine, process them with a few claimer tasks (some jobs retry, "
            "some are dead-lettered) and print a summary. The counts are the same for "
            "the same --seed."
        ),
    )
    demo.add_argument(
        "--jobs",
        metavar="N",
        type=_int_in(1, 100_000),
        default=300,
        help="jobs to enqueue (default 300)",
    )
    demo.add_argument(
        "--seed",
        metavar="S",
        type=_int_in(0, 2**63 - 1),
        default=0,
        help="seed of the job mix, priorities and delays (default 0)",
    )
    demo.add_argument(
        "--workers",
        metavar="W",
        type=_int_in(1, 64),
        default=4,
        help="concurrent claimer tasks (default 4)",
    )
    return parser


def _demo(args: argparse.Namespace) -> int:
    run = functools.partial(run_demo, jobs=args.jobs, seed=args.seed, workers=args.workers)
    try:
        summary = trio.run(run)
    except trio.TooSlowError:
        print("alkstore-trio demo: the jobs did not settle in time", file=sys.stderr)
        return EXIT_FAILED
    print(format_summary(summary))
    return EXIT_OK


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"demo": _demo}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``alkstore-trio`` with ``argv`` (default: ``sys.argv[1:]``).

    Returns:
        The exit status. Usage errors exit through argparse with status 2.
    """
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("alkstore-trio: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
