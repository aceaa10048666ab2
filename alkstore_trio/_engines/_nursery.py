"""A nursery for an async context manager's own background tasks.

An engine runs background tasks (the engine actor, the wake listener) for the lifetime
of ``async with open_store(...)``, so the user's block runs inside that nursery. With
trio's strict exception groups, an exception raised by the user's block would come out
wrapped in an :class:`ExceptionGroup`, which is surprising for a context manager. The
background tasks here never fail on their own (they report through their callers), so
a group holding a single exception is unwrapped and that exception propagates as if no
nursery were there.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from .._util import lone_exception

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


@asynccontextmanager
async def open_background_nursery() -> AsyncIterator[trio.Nursery]:
    """Like :func:`trio.open_nursery`, but a lone exception is raised unwrapped."""
    lone: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            yield nursery
    except BaseExceptionGroup as group:
        lone = lone_exception(group)
        if lone is group:
            raise
    if lone is not None:
        # Raised outside the except block, so the group is not chained as its context.
        raise lone
