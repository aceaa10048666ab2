"""asyncio handlers: run a handler written for asyncio inside the trio worker.

A handler marked with :func:`asyncio_handler` runs through ``trio_asyncio`` (an optional
dependency, the ``asyncio`` extra). The worker opens one trio-asyncio loop for its whole
run when (and only when) one of its handlers needs it.
"""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

    from .._core import Job

_MARK = "__alkstore_asyncio__"


def asyncio_handler(fn: Callable[[Job], Awaitable[None]]) -> Callable[[Job], Awaitable[None]]:
    """Mark ``async def handler(job)`` as written for asyncio: the worker runs it inside a
    trio-asyncio loop, with the same cancellation, timeout and lease rules as any handler."""
    import trio_asyncio  # optional dependency, imported when used

    @functools.wraps(fn)
    async def run_on_asyncio(job: Job) -> None:
        await trio_asyncio.aio_as_trio(fn)(job)

    setattr(run_on_asyncio, _MARK, True)
    return run_on_asyncio


def needs_asyncio(handlers: Iterable[Any]) -> bool:
    """Whether one of these handlers was marked with :func:`asyncio_handler`."""
    return any(getattr(handler, _MARK, False) for handler in handlers)


@contextlib.asynccontextmanager
async def open_loop_if_needed(handlers: Iterable[Any]) -> AsyncIterator[None]:
    """Open a trio-asyncio loop around the block if one of ``handlers`` needs it."""
    if not needs_asyncio(handlers):
        yield
        return
    import trio_asyncio  # optional dependency, imported when used

    async with trio_asyncio.open_loop():
        yield
