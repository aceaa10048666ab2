"""What every command of ``alkstore-trio`` shares: exit statuses, the exceptions that end
a command, and the argparse ``type`` functions and options.

This module imports no other module of the command (each command module imports it),
so no import cycle can appear. The ``type`` functions apply the library's own rules
(queue names, worker ids, seconds), so a bad value is a usage error (status 2) before
anything is opened.
"""

from __future__ import annotations

import argparse
import textwrap
from typing import TYPE_CHECKING, Final

from .. import postgres
from .._core import _validate as v
from .._errors import InvalidArgument
from .._util import finite_number

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

#: Exit status of a successful command.
EXIT_OK = 0
#: Exit status of a command that ran and failed.
EXIT_FAILED = 1
#: Exit status of a usage error (argparse exits with it too).
EXIT_USAGE = 2
#: Exit status after Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130

#: The environment variable ``--dsn`` defaults to.
DSN_ENV: Final = "ALKSTORE_DSN"
#: The environment variable ``--schema`` defaults to.
SCHEMA_ENV: Final = "ALKSTORE_SCHEMA"
#: The schema used when neither ``--schema`` nor ``ALKSTORE_SCHEMA`` is given.
DEFAULT_SCHEMA: Final = "alkstore"
#: The shape of a ``--dsn`` value, for messages.
DSN_SHAPE: Final = "postgresql://user[:password]@host[:port]/dbname or 'host=... dbname=...'"
#: Where the environment variables are described, in the epilog of the commands that
#: open a store.
ENVIRONMENT: Final = (
    f"environment: {DSN_ENV} is the default of --dsn and {SCHEMA_ENV} the default of --schema."
)


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, except that a description or epilog keeps its paragraphs
    (separated by blank lines) and the lines of a paragraph that has indented lines (an
    example: one command a line) as they are; other paragraphs are wrapped."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        # An option's name is never cut at its hyphens ("--older-" / "than").
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for paragraph in text.strip().split("\n\n"):
            if "\n  " in paragraph:
                paragraphs.append("\n".join(indent + line for line in paragraph.splitlines()))
            else:
                flat = " ".join(paragraph.split())
                paragraphs.append(
                    textwrap.fill(
                        flat,
                        width,
                        initial_indent=indent,
                        subsequent_indent=indent,
                        break_on_hyphens=False,
                    )
                )
        return "\n\n".join(paragraphs)


def epilog(*paragraphs: str, examples: Iterable[str]) -> str:
    """A command's epilog: ``paragraphs`` (environment, exit status), then its examples,
    one command line each (an example may end with ``  # what it does``)."""
    lines = "\n".join(f"  {example}" for example in examples)
    return "\n\n".join([*paragraphs, f"examples:\n{lines}"])


class CommandFailed(Exception):
    """Raised inside a command to end it with one line on stderr and status 1."""


class UsageProblem(Exception):
    """Raised inside a command when the library rejects a value of the command line
    (:class:`~alkstore_trio.InvalidArgument`), or a confirmation is needed and cannot be
    asked (``dead purge`` without ``--yes`` off a terminal): one line on stderr and
    status 2, like argparse's errors. Unlike :class:`CommandFailed`, the fix is in the
    command line."""


def int_in(lo: int, hi: int) -> Callable[[str], int]:
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


def positive_seconds(text: str) -> float:
    """An argparse ``type`` accepting a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if (number := finite_number(value)) is None or number <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds > 0, got {text!r}")
    return value


def seconds(*, zero_ok: bool) -> Callable[[str], float]:
    """An argparse ``type`` accepting seconds > 0 (``>= 0`` with ``zero_ok``), at most
    100 years."""
    bound = ">= 0" if zero_ok else "> 0"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a number of seconds, got {text!r}"
            ) from None
        too_small = value < 0 if zero_ok else value <= 0
        if too_small or not value <= v.DURATION_MAX_S:
            raise argparse.ArgumentTypeError(
                f"expected a number of seconds {bound} (at most 100 years), got {text!r}"
            )
        return value

    return parse


def signed_seconds(text: str) -> float:
    """An argparse ``type`` for ``--delay-s``: finite seconds, at most 100 years either
    way (a negative delay means now, as in ``Queue.enqueue``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not abs(value) <= v.DURATION_MAX_S:
        raise argparse.ArgumentTypeError(
            f"expected a finite number of seconds (at most 100 years), got {text!r}"
        )
    return value


def dsn(text: str) -> str:
    """An argparse ``type`` for ``--dsn``: a URL or conninfo libpq can parse.

    The value is never echoed in a message: it may hold a password.
    """
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must not be empty; expected {DSN_SHAPE}")
    try:
        return postgres.check_dsn(text)
    except ImportError:  # reported by the command itself
        return text
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("the DSN ")) from None


def store_url(text: str) -> str:
    """An argparse ``type`` for the worker's ``--dsn``: ``memory://`` or a DSN."""
    if text.strip().lower().startswith("memory://"):
        return text.strip()
    try:
        return dsn(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, or memory:// (in-process only)") from None


def schema_name(text: str) -> str:
    """An argparse ``type`` for ``--schema``: the rule of ``open_store(schema=...)``."""
    try:
        return postgres.check_schema_name(text)
    except ImportError:  # reported by the command itself
        return text
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def worker_id(text: str) -> str:
    """An argparse ``type`` for ``--worker-id``: the rule of ``Worker(worker_id=...)``."""
    try:
        return v.check_worker_id(text)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("worker_id ", "", 1)) from None


def queue_name(text: str) -> str:
    """An argparse ``type`` for ``--queue``: the rule of ``store.queue(name)``."""
    try:
        return v.check_queue_name(text)
    except InvalidArgument as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("queue name ", "", 1)) from None


def job_id(text: str) -> int:
    """An argparse ``type`` for a job id: an int in 1..2**63-1 (ids start at 1)."""
    return int_in(1, v.JOB_ID_MAX)(text)


def add_store_options(
    command: argparse.ArgumentParser,
    env: Mapping[str, str],
    *,
    dsn_type: Callable[[str], str],
    dsn_what: str,
) -> None:
    """``--dsn`` and ``--schema``, defaulting to ``ALKSTORE_DSN`` / ``ALKSTORE_SCHEMA``."""
    command.add_argument(
        "--dsn",
        metavar="DSN",
        type=dsn_type,
        default=env.get(DSN_ENV) or None,
        help=(
            f"the database: {dsn_what} "
            f"(default: the {DSN_ENV} environment variable; required if it is unset)"
        ),
    )
    command.add_argument(
        "--schema",
        metavar="NAME",
        type=schema_name,
        default=env.get(SCHEMA_ENV) or DEFAULT_SCHEMA,
        help=(
            f"the schema holding the tables (default: the {SCHEMA_ENV} environment "
            f"variable, else {DEFAULT_SCHEMA!r})"
        ),
    )


def add_older_than(command: argparse.ArgumentParser, *, old_name: str, what: str) -> None:
    """``--older-than-s S``: how long a job must have been dead to be deleted (``dead
    purge``, ``sweep``); ``old_name`` is the name the command used to give it."""
    command.add_argument(
        "--older-than-s",
        old_name,
        metavar="S",
        dest="older_than_s",
        type=seconds(zero_ok=True),
        default=None,
        help=f"{what}; {old_name} is the old name",
    )


def add_connect_timeout(command: argparse.ArgumentParser, *, postgres_only: bool = False) -> None:
    """``--connect-timeout SECONDS`` (default 10)."""
    command.add_argument(
        "--connect-timeout",
        metavar="SECONDS",
        type=positive_seconds,
        default=10.0,
        help=("PostgreSQL: " if postgres_only else "")
        + "give up connecting after this many seconds (default 10)",
    )
