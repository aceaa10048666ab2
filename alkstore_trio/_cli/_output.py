"""How the commands print: lines flushed at once, times, ages, tables, safe one-liners."""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING

from .. import postgres
from .._util import age as age

if TYPE_CHECKING:
    from collections.abc import Sequence
    from datetime import datetime


def say(line: str = "") -> None:
    """Print one line to stdout and flush it (a reader of a pipe sees it at once)."""
    print(line, flush=True)


def iso(value: datetime | None) -> str:
    """An aware datetime as ISO 8601 with ``Z`` for UTC; ``-`` for ``None``."""
    return "-" if value is None else value.isoformat().replace("+00:00", "Z")


def table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> list[str]:
    """Columns padded to their widest cell; ``align`` has one letter per column, ``l``
    (text) or ``r`` (numbers)."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [
            cell.rjust(width) if side == "r" else cell.ljust(width)
            for cell, width, side in zip(row, widths, align, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def escaped(text: str) -> str:
    """``text`` with its control characters escaped as JSON does (``\\n``, ``\\u0007``)."""
    return text if text.isprintable() else json.dumps(text, ensure_ascii=False)[1:-1]


def one_line(exc: BaseException, dsn: str | None) -> str:
    """An exception as one line, with the password of ``dsn`` (if any) masked."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if dsn and not dsn.lower().startswith("memory://"):
        with contextlib.suppress(ImportError):  # without psycopg, no DSN was used
            text = postgres.hide_password(text, dsn)
    return text
