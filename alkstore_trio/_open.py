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


@asynccontextmanager
async def open_store(
    url: str,
    *,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    max_payload_bytes: int = v.DEFAULT_MAX_PAYLOAD_BYTES,
) -> AsyncIterator[Store]:
    """Open a job store for the duration of an ``async with`` block.

    Example::

        async with alkstore_trio.open_store("memory://") as store:
            emails = store.queue("emails")
            await emails.enqueue(b'{"to": "ada@example.com"}')

    Args:
        url: Which engine: ``"memory://"`` for the embedded in-memory engine.
        clock: In-memory engine only: anything with ``now()`` returning a timezone-aware
            UTC datetime (default: the wall clock). Tests pass a
            :class:`alkstore_trio.testing.ManualClock`.
        rng: The random source of the retry backoff draw (default: a fresh
            ``random.Random()``); pass a seeded one for reproducible delays.
        max_payload_bytes: The largest payload accepted, in bytes (default 1 MiB).

    Raises:
        InvalidArgument: the URL or an option is invalid.
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
    if url == "memory://" or scheme == "memory":
        async with open_memory_backend(clock or WallClock()) as backend:
            store = Store(backend, rng=rng or random.Random(), max_payload_bytes=max_bytes)
            try:
                yield store
            finally:
                store._closed = True
        return
    raise InvalidArgument(
        f"url must start with 'memory://' (the only engine in this version); got {_redacted(url)}"
    )
