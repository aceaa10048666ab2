"""``open_store``: pick the engine from the URL and run it for an ``async with`` block."""

from __future__ import annotations

import random
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ._core import _validate as v
from ._engines._memory import Clock, open_memory_backend
from ._errors import InvalidArgument
from ._store import Store

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from contextlib import AbstractAsyncContextManager

    from ._engines._protocol import Backend


class WallClock:
    """The default clock of the in-memory engine: ``datetime.now(timezone.utc)``."""

    def now(self) -> datetime:
        """The current UTC time."""
        return datetime.now(UTC)


def _redacted(url: object) -> str:
    """The URL's scheme only: a DSN may carry a password, so it is never echoed whole."""
    if not isinstance(url, str):
        return f"a {type(url).__name__}"
    scheme, sep, _ = url.partition("://")
    return f"{scheme}://..." if sep else "a string without a scheme"


def _is_postgres(url: str) -> bool:
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme in ("postgresql", "postgres"):
        return True
    # A libpq key/value conninfo such as "host=db dbname=jobs".
    return not scheme and "=" in url


@asynccontextmanager
async def open_store(
    url: str,
    *,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    max_payload_bytes: int = v.DEFAULT_MAX_PAYLOAD_BYTES,
    schema: str = "alkstore",
    pool_size: int = 10,
    connect_timeout_s: float = 10.0,
    migrate: str = "check",
    application_name: str = "alkstore_trio",
    listen: bool = True,
) -> AsyncIterator[Store]:
    """Open a job store for the duration of an ``async with`` block.

    Example::

        async with alkstore_trio.open_store("memory://") as store:
            emails = store.queue("emails")
            await emails.enqueue(b'{"to": "ada@example.com"}')

    Args:
        url: Which engine: ``"memory://"`` for the embedded in-memory engine, or a
            PostgreSQL URL (``postgresql://user@host/db``) or libpq conninfo
            (``"host=db dbname=jobs"``) for the PostgreSQL engine.
        clock: In-memory engine only: anything with ``now()`` returning a timezone-aware
            UTC datetime (default: the wall clock). Tests pass a
            :class:`alkstore_trio.testing.ManualClock`. PostgreSQL always uses the
            database server's clock.
        rng: The random source of the retry backoff draw (default: a fresh
            ``random.Random()``); pass a seeded one for reproducible delays.
        max_payload_bytes: The largest payload accepted, in bytes (default 1 MiB).
        schema: PostgreSQL only: the schema holding the tables (always quoted).
        pool_size: PostgreSQL only: the most connections the store holds at once (plus
            one for LISTEN once a wake listener is open).
        connect_timeout_s: PostgreSQL only: how long to keep trying to connect.
        migrate: PostgreSQL only: ``"check"`` (default) raises :class:`SchemaError`
            unless the schema is at this library's version; ``"apply"`` migrates it
            first (serialized by an advisory lock).
        application_name: PostgreSQL only: shown in ``pg_stat_activity`` (the LISTEN
            session gets a ``:listen`` suffix).
        listen: PostgreSQL only: ``False`` opens no LISTEN session (poll-only mode, for
            a transaction-pooling proxy such as PgBouncer in transaction mode, where
            LISTEN does not work): wake listeners never wake, and workers find new jobs
            by re-polling every ``poll_interval_s``. Enqueues still NOTIFY, so
            listening processes elsewhere are still woken.

    Raises:
        InvalidArgument: the URL or an option is invalid.
        SchemaError: PostgreSQL: the schema is missing, older or newer.
        EngineError: PostgreSQL: the database cannot be reached.
    """
    if not isinstance(url, str):
        raise InvalidArgument(f"url must be a str such as 'memory://'; got {_redacted(url)}")
    if rng is not None and not isinstance(rng, random.Random):
        raise InvalidArgument(f"rng must be a random.Random or None; got {type(rng).__name__}")
    if clock is not None and (isinstance(clock, type) or not callable(getattr(clock, "now", None))):
        raise InvalidArgument(
            "clock must have a now() method returning an aware datetime; "
            f"got {type(clock).__name__}"
        )
    max_bytes = v.check_int("max_payload_bytes", max_payload_bytes, lo=0, hi=2**30)
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    engine: AbstractAsyncContextManager[Backend]
    if scheme == "memory":
        engine = open_memory_backend(clock or WallClock())
    elif _is_postgres(url):
        if clock is not None:
            raise InvalidArgument(
                "clock is for the in-memory engine only; PostgreSQL uses the database clock"
            )
        from ._engines._postgres import _backend as pg  # psycopg is an optional extra

        options = pg.check_options(
            schema=schema,
            pool_size=pool_size,
            connect_timeout_s=connect_timeout_s,
            migrate=migrate,
            application_name=application_name,
            listen=listen,
        )
        engine = pg.open_postgres_backend(url, **options)
    else:
        raise InvalidArgument(
            "url must be 'memory://', a postgresql:// URL or a libpq conninfo; "
            f"got {_redacted(url)}"
        )
    async with engine as backend:
        store = Store(backend, rng=rng or random.Random(), max_payload_bytes=max_bytes)
        try:
            yield store
        finally:
            store._closed = True
