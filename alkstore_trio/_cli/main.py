"""The parser of ``alkstore-trio`` and :func:`main`, which runs one command.

Each command module adds its subparser (``add_parser``) and names the async function that
runs it (``run``, set as a parser default); a command that must act before the event loop
starts (``worker`` imports its handlers) also sets ``setup``. :func:`main` runs the
command with :func:`trio.run` and turns the exceptions that end a command into one line
on stderr and the exit status.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

import trio

from .. import __version__
from . import (
    cancel,
    dashboard,  # W1
    dead,
    demo,
    enqueue,
    jobs,
    migrate,
    periodic,  # Q17
    stats,
    sweep,
    worker,
    workers,  # Q21
)
from . import queue as queue_commands  # Q18
from ._args import (
    DSN_ENV,
    DSN_SHAPE,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CommandFailed,
    HelpFormatter,
    UsageProblem,
    epilog,
)
from ._handlers import HandlerImportFailed

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence
    from typing import NoReturn


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``alkstore-trio``.

    Args:
        environ: Where ``ALKSTORE_DSN`` and ``ALKSTORE_SCHEMA`` are read (default:
            ``os.environ``).
    """
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="alkstore-trio",
        description="A durable job queue and supervision framework for trio.",
        epilog=epilog(
            "Run 'alkstore-trio COMMAND --help' for a command's options.",
            examples=[
                "alkstore-trio demo",
                "alkstore-trio migrate --dsn postgresql://app@db.example/shop",
                "alkstore-trio worker --dsn postgresql://app@db.example/shop "
                "--queue emails=myapp.tasks:send_email",
                "alkstore-trio stats --watch",
            ],
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"alkstore-trio {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    for module in (
        demo,
        migrate,
        worker,
        stats,
        jobs,
        dead,
        enqueue,
        cancel,
        sweep,
        periodic,
        queue_commands,
        workers,
        dashboard,
    ):
        module.add_parser(commands, env)
    return parser


def _fail(command: str, message: str) -> int:
    print(f"alkstore-trio {command}: {message}", file=sys.stderr)
    return EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``alkstore-trio`` with ``argv`` (default: ``sys.argv[1:]``).

    Returns:
        The exit status. Usage errors exit through argparse with status 2.
    """
    args = build_parser().parse_args(argv)
    if hasattr(args, "dsn") and args.dsn is None:
        usage_error: Callable[[str], NoReturn] = args.usage_error
        shape = f"{DSN_SHAPE}, or memory://" if args.command == "worker" else DSN_SHAPE
        usage_error(f"--dsn is required (or set {DSN_ENV}); expected {shape}")
    command: Callable[[argparse.Namespace], Awaitable[int]] = args.run
    title: str = getattr(args, "title", args.command)
    try:
        if (setup := getattr(args, "setup", None)) is not None:
            setup(args)
        return trio.run(command, args)
    except HandlerImportFailed as exc:
        return _fail(args.command, str(exc))
    except CommandFailed as exc:
        return _fail(title, str(exc))
    except UsageProblem as exc:
        print(f"alkstore-trio {title}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        if getattr(args, "watch", False):
            return EXIT_OK  # Ctrl-C is how a watch ends
        print("alkstore-trio: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``alkstore-trio migrate --dry-run | head``): stop quietly,
        # and keep Python from complaining again when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED
