"""PostgreSQL administration: migrate a schema, print its migration script, show a DSN
without its password; and :class:`Producer`, which enqueues jobs on your own psycopg
connection, in your own transaction (Q20).

Example::

    from alkstore_trio import postgres

    done = await postgres.migrate("postgresql://app@db/shop", schema="alkstore")
    print(f"{postgres.redact_dsn(dsn)}: version {done.before or 0} -> {done.after}")

Why a public module, and why this name. A store never needs it: ``open_store`` picks the
engine from the URL, and that is all an application imports. But a deployment also
migrates before its workers start, reviews the SQL first, and logs which database it
talks to, and it should be able to do that from its own code, not only through
``alkstore-trio migrate``. These jobs belong to one engine, so the module is named after
it, as :mod:`alkstore_trio.testing` is named after what it is for; ``alkstore_trio``
itself does not import it, and it imports psycopg (the ``postgres`` extra) only when a
function that needs it runs, raising :class:`ImportError` with the install command when
psycopg is missing. The ``alkstore-trio`` command reaches PostgreSQL only through this
module and :func:`~alkstore_trio.open_store`.

Errors are ours, never the driver's: a failed connect is an
:class:`~alkstore_trio.EngineError` that names the cause (``database "shop" does not
exist``), at once when waiting cannot help and after ``connect_timeout_s`` otherwise; a
malformed DSN is an :class:`~alkstore_trio.InvalidArgument`; a schema newer than this
library is a :class:`~alkstore_trio.SchemaError`. No message ever holds the password.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from ._errors import SchemaError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from ._engines._postgres._driver import Connection
    from ._engines._postgres._producer import Producer as Producer

__all__ = [
    "UPGRADE_NOTES",
    "Migration",
    "Producer",
    "check_dsn",
    "check_schema_name",
    "hide_password",
    "migrate",
    "migration_script",
    "redact_dsn",
    "upgrade_notes",
]

#: ``pg_stat_activity.application_name`` of the connection :func:`migrate` and
#: :func:`migration_script` open, unless told otherwise.
APPLICATION_NAME: Final = "alkstore_trio migrate"

#: What an operator must know when a migration takes an existing schema across a
#: version (never for a fresh schema), by version.
UPGRADE_NOTES: Final[Mapping[int, str]] = MappingProxyType(
    {
        3: (
            "version 3 adds job headers, and workers of the version-2 release still running "
            "fail to claim until restarted with this release; stop them before migrating "
            "(docs/how-to/migrate.md, 'Version 3: stop the old workers first')"
        ),
        9: (
            "version 9 adds claim tokens: workers of the version-8 release still running "
            "finish the jobs they hold, but every claim they make now fails with 'violates "
            'check constraint "jobs_claim_needs_v9_workers"\'; replace them with this '
            "release promptly (docs/how-to/migrate.md, 'Version 9: replace the old workers')"
        ),
    }
)


@dataclass(frozen=True, slots=True)
class Migration:
    """What :func:`migrate` did."""

    before: int | None
    """The schema's version before: ``None`` when it had no alkstore_trio tables."""
    after: int
    """Its version now: this library's."""
    notes: tuple[str, ...]
    """:data:`UPGRADE_NOTES` of the versions crossed (none for a fresh schema)."""

    @property
    def changed(self) -> bool:
        """Whether a migration ran (the schema was not at this library's version)."""
        return self.before != self.after


def __getattr__(name: str) -> object:
    """:class:`Producer`, imported when first named: it needs psycopg, and this module
    imports psycopg only when something that needs it is used."""
    if name == "Producer":
        _require()
        from ._engines._postgres._producer import Producer

        return Producer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _require() -> None:
    """Import the PostgreSQL engine, or say how to install it."""
    try:
        from ._engines._postgres import _dsn  # noqa: F401 - imports psycopg
    except ImportError as exc:
        raise ImportError(
            f"the PostgreSQL engine needs psycopg 3 ({exc}); install the postgres extra: "
            "pip install 'alkstore_trio[postgres]'"
        ) from exc


def redact_dsn(dsn: str) -> str:
    """``dsn`` without its password, for messages and logs:
    ``postgresql://user@host:port/dbname`` (only those parts), or ``<dsn>`` when it
    cannot be parsed.

    Raises:
        ImportError: psycopg is not installed.
    """
    _require()
    from ._engines._postgres import _dsn

    return _dsn.redact_dsn(dsn)


def hide_password(text: str, dsn: str) -> str:
    """``text`` with the password of ``dsn``, if it has one, replaced by ``***``.

    Raises:
        ImportError: psycopg is not installed.
    """
    _require()
    from ._engines._postgres import _dsn

    return _dsn.hide_password(text, dsn)


def check_dsn(dsn: object) -> str:
    """``dsn`` if it is a PostgreSQL URL or libpq conninfo with numeric ports.

    Raises:
        InvalidArgument: it is not; the message never quotes it (it may hold a password).
        ImportError: psycopg is not installed.
    """
    _require()
    from ._engines._postgres import _dsn

    return _dsn.check_dsn(dsn)


def check_schema_name(name: object) -> str:
    """``name`` if it is a valid ``schema=`` of :func:`~alkstore_trio.open_store`.

    Raises:
        InvalidArgument: it is not (1–63 characters of ``[A-Za-z0-9_]``, not starting
            with a digit or ``pg_``).
        ImportError: psycopg is not installed.
    """
    _require()
    from ._engines._postgres import _sql

    return _sql.check_schema_name(name)


def upgrade_notes(before: int | None, after: int) -> tuple[str, ...]:
    """The :data:`UPGRADE_NOTES` of the versions an existing schema at ``before`` crosses
    on its way to ``after`` (none for a fresh schema, ``before`` ``None`` or 0)."""
    if not before:
        return ()
    return tuple(UPGRADE_NOTES[v] for v in sorted(UPGRADE_NOTES) if before < v <= after)


async def migrate(
    dsn: str,
    *,
    schema: str = "alkstore",
    connect_timeout_s: float = 10.0,
    application_name: str = APPLICATION_NAME,
) -> Migration:
    """Bring ``schema`` to this library's version: the pending migrations run in one
    transaction under an advisory lock keyed by the schema's name, so concurrent calls
    (a rolling deploy) apply each migration once and the others find nothing to do.

    Args:
        dsn: A ``postgresql://`` URL or libpq conninfo.
        schema: The schema holding the tables (created if missing).
        connect_timeout_s: How long to keep retrying a transient connect failure.
        application_name: Shown in ``pg_stat_activity``.

    Returns:
        The versions before and after, and the notes of the versions crossed.

    Raises:
        InvalidArgument: ``dsn``, ``schema`` or ``connect_timeout_s`` is invalid.
        EngineError: the database cannot be reached, or a migration failed (nothing
            was changed); the cause is named.
        SchemaError: the schema is newer than this library.
        ImportError: psycopg is not installed.
    """
    _require()
    from ._engines._postgres import _dsn, _schema

    async with _connection(dsn, schema, connect_timeout_s, application_name) as conn:
        with _dsn.engine_errors(dsn, f"migrating schema {schema!r} (nothing was changed)"):
            before, after = await _schema.migrate(conn, schema)
    return Migration(before, after, upgrade_notes(before, after))


async def migration_script(
    dsn: str,
    *,
    schema: str = "alkstore",
    connect_timeout_s: float = 10.0,
    application_name: str = APPLICATION_NAME,
) -> str:
    """The SQL :func:`migrate` would run on ``schema`` now, as a script for ``psql -v
    ON_ERROR_STOP=1 -f``: comment lines naming the versions (and the upgrade notes),
    then the same transaction, advisory lock, migrations and version writes. When the
    schema is current, one comment line. Only reads the schema's version, in a
    read-only session.

    Args:
        dsn: A ``postgresql://`` URL or libpq conninfo.
        schema: The schema holding the tables.
        connect_timeout_s: How long to keep retrying a transient connect failure.
        application_name: Shown in ``pg_stat_activity``.

    Raises:
        InvalidArgument: ``dsn``, ``schema`` or ``connect_timeout_s`` is invalid.
        EngineError: the database cannot be reached (the cause is named).
        SchemaError: the schema is newer than this library.
        ImportError: psycopg is not installed.
    """
    _require()
    from ._engines._postgres import _dsn, _schema, _sql

    async with _connection(dsn, schema, connect_timeout_s, application_name) as conn:
        with _dsn.engine_errors(dsn, f"reading the version of schema {schema!r}"):
            # Belt and braces: this session cannot write, whatever happens below.
            await conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            version = await _schema.current_version(conn, schema)
    latest = _sql.latest_version()
    if version is not None and version > latest:
        raise SchemaError(
            f"schema {schema!r} is at version {version}, newer than this library's "
            f"{latest}; upgrade alkstore_trio (migrations are never rolled back)"
        )
    if version == latest:
        return f"-- schema {schema!r}: already at version {latest}; nothing to run"
    shown = "none (no alkstore_trio tables)" if version is None else str(version)
    return "\n".join(
        [
            f"-- schema {schema!r}: version {shown} -> {latest}",
            *(f"-- note: {note}" for note in upgrade_notes(version, latest)),
            _schema.migration_script(schema, version),
        ]
    )


@asynccontextmanager
async def _connection(
    dsn: str, schema: str, connect_timeout_s: float, application_name: str
) -> AsyncIterator[Connection]:
    """One connection, through a pool of one, so that connecting retries (or fails at
    once) exactly as a store's does. The arguments are checked before anything connects."""
    from ._core import _validate as v
    from ._engines._postgres import _dsn, _pool, _sql

    _sql.check_schema_name(schema)
    timeout_s = v.check_duration(
        "connect_timeout_s", connect_timeout_s, min_s=0, min_inclusive=False
    )
    name = v.check_text("application_name", application_name, max_chars=50)
    pool_cm = _pool.open_pool(
        _dsn.check_dsn(dsn), size=1, connect_timeout_s=timeout_s, application_name=name
    )
    async with pool_cm as pool, pool.connection() as conn:
        yield conn
