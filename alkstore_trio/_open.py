"""``open_store``: make (or take) an engine and run a store on it for an ``async with`` block."""

from __future__ import annotations

import random
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, TypeGuard

from ._core import _validate as v
from ._engines._memory import Clock, MemoryEngine
from ._errors import InvalidArgument
from ._store import Store

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ._engines._protocol import Engine

#: ``open_store``'s engine options and their defaults: given with an engine instance,
#: they would be silently ignored, so they are refused (the instance has its own).
_ENGINE_DEFAULTS = {
    "clock": None,
    "schema": "alkstore",
    "pool_size": 10,
    "connect_timeout_s": 10.0,
    "migrate": "check",
    "application_name": "alkstore_trio",
    "listen": True,
}


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


def _is_engine(value: object) -> TypeGuard[Engine]:
    """Whether ``value`` looks like an :class:`~alkstore_trio.engine.Engine` instance (the
    protocol is structural: an ``open`` method and the two paths' methods)."""
    return not isinstance(value, type) and all(
        callable(getattr(value, name, None))
        for name in ("open", "claim", "enqueue", "ack", "stats", "transaction", "aclose")
    )


@asynccontextmanager
async def open_store(
    url: str | Engine,
    *,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    max_payload_bytes: int = v.DEFAULT_MAX_PAYLOAD_BYTES,
    max_result_bytes: int = v.DEFAULT_MAX_RESULT_BYTES,
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
        url: Which engine: ``"memory://"`` for the embedded in-memory engine, a
            PostgreSQL URL (``postgresql://user@host/db``) or libpq conninfo
            (``"host=db dbname=jobs"``) for the PostgreSQL engine, or an engine
            instance (:class:`alkstore_trio.engine.MemoryEngine`,
            :class:`alkstore_trio.engine.PostgresEngine`, or any
            :class:`alkstore_trio.engine.Engine`), which then carries its own options:
            the engine options below must be left at their defaults (Q14).
        clock: In-memory engine only: anything with ``now()`` returning a timezone-aware
            UTC datetime (default: the wall clock). Tests pass a
            :class:`alkstore_trio.testing.ManualClock`. PostgreSQL always uses the
            database server's clock.
        rng: The random source of the retry backoff draw (default: a fresh
            ``random.Random()``); pass a seeded one for reproducible delays.
        max_payload_bytes: The largest payload accepted, in bytes (default 1 MiB).
        max_result_bytes: Q19.1: the largest result an ack accepts, in bytes (default
            1 MiB, at most 2**30). A worker retries a job whose handler returned a larger
            one, with an error saying so: results are never truncated.
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
        InvalidArgument: the URL or an option is invalid, or an engine option was given
            with an engine instance.
        SchemaError: PostgreSQL: the schema is missing, older or newer.
        EngineError: PostgreSQL: the database cannot be reached.
    """
    if rng is not None and not isinstance(rng, random.Random):
        raise InvalidArgument(f"rng must be a random.Random or None; got {type(rng).__name__}")
    max_bytes = v.check_int("max_payload_bytes", max_payload_bytes, lo=0, hi=2**30)
    max_result = v.check_int("max_result_bytes", max_result_bytes, lo=0, hi=2**30)
    options: dict[str, object] = {
        "clock": clock,
        "schema": schema,
        "pool_size": pool_size,
        "connect_timeout_s": connect_timeout_s,
        "migrate": migrate,
        "application_name": application_name,
        "listen": listen,
    }
    if isinstance(url, str):
        engine = _engine_for_url(url, options)
    elif _is_engine(url):
        given = [name for name, default in _ENGINE_DEFAULTS.items() if options[name] != default]
        if given:
            raise InvalidArgument(
                f"{', '.join(given)} cannot be given with an engine instance: pass "
                f"{'it' if len(given) == 1 else 'them'} to the engine's constructor"
            )
        engine = url
    else:
        raise InvalidArgument(
            f"url must be a str such as 'memory://' or an engine instance; got {_redacted(url)}"
        )
    async with engine.open():
        store = Store(
            engine,
            rng=rng or random.Random(),
            max_payload_bytes=max_bytes,
            max_result_bytes=max_result,
        )
        try:
            yield store
        finally:
            store._closed = True


def _engine_for_url(url: str, options: dict[str, object]) -> Engine:
    """The engine a URL names, made from ``open_store``'s engine options."""
    clock = options.pop("clock")
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme == "memory":
        return MemoryEngine(clock)  # type: ignore[arg-type]
    if _is_postgres(url):
        if clock is not None:
            raise InvalidArgument(
                "clock is for the in-memory engine only; PostgreSQL uses the database clock"
            )
        from ._engines._postgres import _backend as pg  # psycopg is an optional extra

        return pg.PostgresEngine(url, **options)  # type: ignore[arg-type]
    raise InvalidArgument(
        f"url must be 'memory://', a postgresql:// URL or a libpq conninfo; got {_redacted(url)}"
    )
