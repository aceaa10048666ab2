"""SQL kept as SQL: the schema, the numbered migrations and the named queries.

The ``.sql`` files beside this module are read once per process. Each store renders
them for its schema by replacing ``@schema@`` with the schema's quoted identifier; user
input never reaches query text any other way (values are always bound parameters).
"""

from __future__ import annotations

import functools
import hashlib
import re
from importlib import resources
from typing import Final

from ..._errors import InvalidArgument

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_PLACEHOLDER: Final = "@schema@"
_BLOCK = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_MIGRATION_FILE = re.compile(r"(\d{4})_\w+\.sql")
#: Longest channel name PostgreSQL accepts (NAMEDATALEN - 1).
CHANNEL_MAX_BYTES: Final = 63


def check_schema_name(name: object) -> str:
    """A schema name: 1-63 characters from ``[A-Za-z0-9_]``, not starting with a digit or
    with ``pg_`` (reserved by PostgreSQL)."""
    if not isinstance(name, str) or _SCHEMA_NAME.fullmatch(name) is None:
        shown = repr(name)[:80] if isinstance(name, str) else f"a {type(name).__name__}"
        raise InvalidArgument(
            "schema must be 1-63 characters from [A-Za-z0-9_] starting with a letter or "
            f"'_'; got {shown}"
        )
    if name.lower().startswith("pg_"):
        raise InvalidArgument(f"schema names starting with 'pg_' are reserved; got {name!r}")
    return name


def quote_ident(name: str) -> str:
    """The quoted identifier of a checked schema name (it holds no quote to escape)."""
    return '"' + check_schema_name(name) + '"'


def wake_channel(schema: str, queue: str) -> str:
    """The NOTIFY channel of one queue of one schema: readable when it fits in 63 bytes,
    else a hash. ``/`` appears in neither a schema nor a queue name, so distinct pairs
    never share a readable channel, and hashed channels cannot equal readable ones
    (those always contain two ``/``)."""
    readable = f"alk/{schema}/{queue}"
    if len(readable.encode()) <= CHANNEL_MAX_BYTES:
        return readable
    digest = hashlib.sha256(f"{schema}/{queue}".encode()).hexdigest()
    return "alk#" + digest[: CHANNEL_MAX_BYTES - 4]


def _read(name: str) -> str:
    return resources.files(__package__).joinpath("sql", name).read_text(encoding="utf-8")


@functools.cache
def _query_templates() -> dict[str, str]:
    text = _read("queries.sql")
    parts = _BLOCK.split(text)
    blocks: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
        blocks[name] = "\n".join(lines).strip().rstrip(";")
    return blocks


def render(template: str, schema: str) -> str:
    """Put the quoted schema name into a SQL template."""
    return template.replace(_PLACEHOLDER, quote_ident(schema))


def queries(schema: str) -> dict[str, str]:
    """Every named query, rendered for ``schema``."""
    return {name: render(body, schema) for name, body in _query_templates().items()}


def schema_sql(schema: str) -> str:
    """The canonical schema, rendered for ``schema``."""
    return render(_read("schema.sql"), schema)


@functools.cache
def _migration_templates() -> tuple[tuple[int, str], ...]:
    folder = resources.files(__package__).joinpath("sql", "migrations")
    found: list[tuple[int, str]] = []
    for entry in folder.iterdir():
        match = _MIGRATION_FILE.fullmatch(entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text(encoding="utf-8")))
    found.sort()
    numbers = [number for number, _ in found]
    if numbers != list(range(1, len(numbers) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..n without gaps; found {numbers}")
    return tuple(found)


def migrations(schema: str) -> list[tuple[int, str]]:
    """Every migration as ``(version, sql)``, in order, rendered for ``schema``."""
    return [(number, render(body, schema)) for number, body in _migration_templates()]


def latest_version() -> int:
    """The schema version this library needs."""
    return len(_migration_templates())
