"""SQL kept as SQL: the schema, the numbered migrations and the named queries.

The ``.sql`` files beside this module are read once per process. ``queries.sql`` holds
two kinds of blocks: statements (``-- name: claim``), the text the engine sends, and
fragments (``-- fragment: dead_letter(moved, last_error)``), pieces that several
statements share: the dead-letter move, the counter upsert, the job fields. A statement
includes a fragment by reference, ``{job_fields(state = j.state, died_at = NULL)}``;
inside a fragment, ``{moved}`` is one of its slots. The references are expanded once,
when the file is loaded, so what reaches the server is plain SQL text, as if written out
by hand: prepared statements and their plans are those of the written-out text. An
unknown fragment or slot, a missing slot value, a cycle or a fragment no statement uses
fails the load.

Each store renders the statements for its schema by replacing ``@schema@`` with the
schema's quoted identifier; user input never reaches query text any other way (values
are always bound parameters, and the fragments come from the package's own file).
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Final

from ..._core import CLAIM_ORDER
from ..._errors import InvalidArgument

if TYPE_CHECKING:
    from collections.abc import Mapping

_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_PLACEHOLDER: Final = "@schema@"
#: A block's header: a statement (``-- name: claim``) or a fragment, with its slots and
#: their defaults (``-- fragment: dead_letter(moved, last_error)``).
_BLOCK = re.compile(r"^-- (name|fragment): (\w+)(?:\((.*)\))?[ \t]*$", re.MULTILINE)
#: A reference to a fragment or, inside a fragment, to one of its slots.
_REFERENCE = re.compile(r"\{(\w+)(?:\((.*?)\))?\}", re.DOTALL)
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


def done_channel(schema: str, queue: str) -> str:
    """Q19.4: the NOTIFY channel of one queue's done announcements:
    ``alk/<schema>/<queue>/done``, or a hash of ``<schema>/<queue>/done`` beyond 63 bytes.
    A readable one has three ``/`` (a wake channel two), and the hashed text contains a
    third ``/`` that no wake channel's does, so a done channel never equals a wake
    channel."""
    readable = f"alk/{schema}/{queue}/done"
    if len(readable.encode()) <= CHANNEL_MAX_BYTES:
        return readable
    digest = hashlib.sha256(f"{schema}/{queue}/done".encode()).hexdigest()
    return "alk#" + digest[: CHANNEL_MAX_BYTES - 4]


def _read(name: str) -> str:
    return resources.files(__package__).joinpath("sql", name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Fragment:
    """A named piece of SQL that statements (and other fragments) include by reference.

    ``slots`` are the names a reference fills in (``{slot}`` in the body), in the order
    the block's header lists them; ``defaults`` the values of the slots a reference may
    leave out.
    """

    name: str
    slots: tuple[str, ...]
    defaults: Mapping[str, str]
    body: str


@dataclass(frozen=True)
class Library:
    """``queries.sql`` as loaded: every statement with its fragments expanded.

    ``uses`` lists, per statement, each fragment it includes (directly or through another
    fragment) with the slot values it was given, in the order they appear.
    """

    statements: Mapping[str, str]
    fragments: Mapping[str, Fragment]
    uses: Mapping[str, tuple[tuple[str, Mapping[str, str]], ...]]


def _split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses and single-quoted literals."""
    items: list[str] = []
    depth, quoted, start = 0, False, 0
    for i, char in enumerate(text):
        if char == "'":
            quoted = not quoted
        elif not quoted and char in "()":
            depth += 1 if char == "(" else -1
        elif not quoted and depth == 0 and char == ",":
            items.append(text[start:i].strip())
            start = i + 1
    items.append(text[start:].strip())
    return [item for item in items if item]


def _assignments(text: str, where: str) -> list[tuple[str, str | None]]:
    """``a, b = x`` as ``[("a", None), ("b", "x")]`` (slot lists and reference arguments)."""
    pairs: list[tuple[str, str | None]] = []
    for item in _split_top_level(text):
        name, equals, value = item.partition("=")
        name = name.strip()
        if not name.isidentifier() or (equals and not value.strip()):
            raise RuntimeError(f"queries.sql: {where}: cannot read {item!r}")
        pairs.append((name, value.strip() if equals else None))
    return pairs


def _strip_comments(body: str) -> str:
    lines = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).strip().rstrip(";").rstrip()


class _Expander:
    """Expands ``{fragment}`` and ``{fragment(slot = value, ...)}`` references, and
    ``{slot}`` inside a fragment's body, recording which fragments each statement uses."""

    def __init__(self, fragments: Mapping[str, Fragment]) -> None:
        self.fragments = fragments
        self.used: set[str] = set()
        self.uses: list[tuple[str, Mapping[str, str]]] = []

    def expand(self, text: str, slots: Mapping[str, str], where: str, depth: int = 0) -> str:
        if depth > len(self.fragments):
            raise RuntimeError(f"queries.sql: {where}: fragments include each other in a cycle")

        def replace(match: re.Match[str]) -> str:
            name, args = match[1], match[2]
            if args is None and name in slots:
                return slots[name]
            fragment = self.fragments.get(name)
            if fragment is None:
                raise RuntimeError(f"queries.sql: {where}: no fragment or slot {name!r}")
            values = self._bind(fragment, args or "", slots, where, depth)
            self.used.add(name)
            self.uses.append((name, values))
            body = self.expand(fragment.body, values, f"fragment {name}", depth + 1)
            # Continue the fragment's lines at the indentation of the reference's line.
            line_start = text.rfind("\n", 0, match.start()) + 1
            line = text[line_start : match.start()]
            indent = line[: len(line) - len(line.lstrip())]
            return body.replace("\n", "\n" + indent)

        return _REFERENCE.sub(replace, text)

    def _bind(
        self, fragment: Fragment, args: str, slots: Mapping[str, str], where: str, depth: int
    ) -> dict[str, str]:
        given: dict[str, str] = {}
        for slot, value in _assignments(args, where):
            if slot not in fragment.slots or slot in given or value is None:
                raise RuntimeError(
                    f"queries.sql: {where}: {fragment.name} takes slots {fragment.slots}; "
                    f"got {args!r}"
                )
            given[slot] = self.expand(value, slots, where, depth)
        missing = [s for s in fragment.slots if s not in given and s not in fragment.defaults]
        if missing:
            raise RuntimeError(f"queries.sql: {where}: {fragment.name} needs {missing}")
        return {**fragment.defaults, **given}


def _core_fragments() -> dict[str, Fragment]:
    """Fragments rendered from the pure core, so that the SQL states no rule of its own:
    ``claim_order(alias)`` is Q3's order (``CLAIM_ORDER``) over the table alias."""
    order = ", ".join(f"{{alias}}.{field} {direction}" for field, direction in CLAIM_ORDER)
    return {"claim_order": Fragment("claim_order", ("alias",), {}, order)}


def _parse_library(text: str) -> Library:
    parts = _BLOCK.split(text)
    fragments: dict[str, Fragment] = {}
    raw_statements: dict[str, str] = {}
    for kind, name, header, body in zip(
        parts[1::4], parts[2::4], parts[3::4], parts[4::4], strict=True
    ):
        if name in fragments or name in raw_statements:
            raise RuntimeError(f"queries.sql: two blocks are named {name!r}")
        if kind == "name":
            if header is not None:
                raise RuntimeError(f"queries.sql: statement {name} cannot take slots")
            raw_statements[name] = _strip_comments(body)
            continue
        declared = _assignments(header or "", f"fragment {name}")
        fragments[name] = Fragment(
            name=name,
            slots=tuple(slot for slot, _ in declared),
            defaults={slot: value for slot, value in declared if value is not None},
            body=_strip_comments(body),
        )
    core = _core_fragments()
    for name, fragment in core.items():
        if name in fragments or name in raw_statements:
            raise RuntimeError(f"queries.sql: {name!r} is a fragment of the core's")
        fragments[name] = fragment
    clashes = sorted({s for f in fragments.values() for s in f.slots} & fragments.keys())
    if clashes:
        raise RuntimeError(f"queries.sql: slots named like fragments: {clashes}")
    expander = _Expander(fragments)
    statements: dict[str, str] = {}
    uses: dict[str, tuple[tuple[str, Mapping[str, str]], ...]] = {}
    for name, body in raw_statements.items():
        expander.uses = []
        statements[name] = expander.expand(body, {}, f"statement {name}")
        uses[name] = tuple(expander.uses)
    unused = sorted(fragments.keys() - expander.used - core.keys())
    if unused:
        raise RuntimeError(f"queries.sql: fragments no statement uses: {unused}")
    return Library(statements=statements, fragments=fragments, uses=uses)


@functools.cache
def library() -> Library:
    """``queries.sql``, read and expanded once per process."""
    return _parse_library(_read("queries.sql"))


def _query_templates() -> Mapping[str, str]:
    return library().statements


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
