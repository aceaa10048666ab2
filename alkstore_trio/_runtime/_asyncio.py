"""asyncio handlers: run a handler written for asyncio inside the trio worker.

A handler marked with :func:`asyncio_handler` runs through ``trio_asyncio`` (an optional
dependency, the ``asyncio`` extra) as an asyncio task on a trio-asyncio loop. The worker
opens one such loop for its whole run when, and only when, one of its handlers is
marked (:func:`open_loop_if_needed`), so asyncio objects a handler keeps between jobs (a
client session, a connection pool) stay on one loop.

Why the rules are the same as for a trio handler. trio-asyncio turns a cancellation of
the trio scope waiting for the asyncio task into one :class:`asyncio.CancelledError`
thrown into that task, waits for the task to finish (its ``except``/``finally`` blocks
may still await asyncio code), and then raises :class:`trio.Cancelled` in the trio
caller. So the job actor's timeout, a refused heartbeat and a stopping worker all reach
an asyncio handler exactly as they reach a trio one; exceptions, :class:`Retry` and
:class:`Fail` come back through the task's result unchanged.

Two things do not map by themselves, and are mapped here:

- An :class:`asyncio.CancelledError` that the handler raises *without* the worker
  cancelling it (it awaited a task that something else cancelled) comes back as that
  error, a :class:`BaseException`: it would escape the job actor and bring the worker
  down. It is raised as :class:`AsyncioCancelled`, an ordinary exception, so the job is
  retried with that as ``last_error``, as for any other handler error.
- A trio function marked by mistake fails at its first trio checkpoint with asyncio's
  ``RuntimeError: Task got bad yield``; the message is replaced by one naming the fix.

The import order. trio-asyncio installs its loop lookup by replacing
``asyncio.get_running_loop`` and friends when it is first imported. A module that ran
``from asyncio import get_running_loop`` earlier keeps the original function, which finds
no loop inside trio-asyncio: psycopg does this (``psycopg.waiting``), so psycopg's own
asyncio connections fail with ``RuntimeError: no running event loop`` when psycopg was
imported before trio_asyncio. Whenever it loads trio_asyncio this module rebinds such
stale module-level names to trio-asyncio's functions, which is what those modules would
have bound had they been imported second (trio-asyncio's functions behave exactly like
the originals outside trio), so the order of imports does not matter.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import types
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final, ParamSpec

from .._errors import AlkstoreError, InvalidArgument
from .._util import is_async_callable

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable

P = ParamSpec("P")

logger = logging.getLogger("alkstore_trio.asyncio")

#: How to install the optional dependency.
INSTALL_HINT: Final = "pip install 'alkstore-trio[asyncio]'"
#: The attribute that marks a handler made by :func:`asyncio_handler`.
_MARK: Final = "__alkstore_asyncio__"
#: The asyncio functions trio-asyncio replaces that a module may have imported by name.
_REPLACED_NAMES: Final = ("get_running_loop", "_get_running_loop", "get_event_loop", "current_task")
#: Packages whose references to the original functions are deliberate.
_OWNERS: Final = frozenset({"asyncio", "_asyncio", "trio_asyncio"})


class AsyncioCancelled(AlkstoreError):
    """Raised by a handler made by :func:`asyncio_handler` when the asyncio code raised
    :class:`asyncio.CancelledError` although the worker did not cancel it (for example it
    awaited a task that other asyncio code cancelled).

    Unlike a cancellation by the worker (a timeout, a lost lease or a stop, which end the
    handler with :class:`trio.Cancelled`), this is a handler error: the job is retried
    with it as ``last_error``. The original error is its ``__cause__``.
    """


def asyncio_handler(
    fn: Callable[P, Awaitable[object]],
) -> Callable[P, Coroutine[Any, Any, Any]]:
    """Mark a handler written for asyncio: the worker runs it as an asyncio task inside
    a trio-asyncio loop, with the same rules as any handler.

    Example::

        @asyncio_handler
        async def fetch(job: Job) -> None:
            async with aiohttp.ClientSession() as session:  # any asyncio library
                await session.get(job.payload.decode())

        worker = Worker(store, {"fetch": fetch})

    Returning acks the job; ``raise Retry(...)`` / ``raise Fail(...)`` and any other
    exception map as for a trio handler (R5). ``job_timeout_s``, a lost lease (R6) and a
    stopping worker (R7) cancel it: :class:`asyncio.CancelledError` is raised at its
    current ``await``, its cleanup runs (and may await asyncio code), and then the worker
    retries, forgets or releases the job as it would for a trio handler. An
    :class:`asyncio.CancelledError` the handler raises on its own is a handler error
    (:class:`AsyncioCancelled`): the job is retried.

    The worker opens one trio-asyncio loop per :meth:`Worker.run` when one of its
    handlers is marked (also through :func:`functools.partial`, a bound method or a
    callable object whose ``__call__`` is marked). Awaited directly from trio code with
    no trio-asyncio loop open (in a test, say), the handler opens a loop for that one
    call.

    Args:
        fn: An ``async def`` function taking the job, a :func:`functools.partial` of
            one, or an object whose ``__call__`` is ``async def``. Marking a handler
            that is already marked returns it unchanged.

    Returns:
        A trio-flavoured ``async def`` with ``fn``'s signature, to register as the
        handler of a queue.

    Raises:
        InvalidArgument: ``fn`` is not an async function (a sync function, an async
            generator function, a class, a non-callable).
        ModuleNotFoundError: trio-asyncio is not installed (the ``asyncio`` extra:
            ``pip install 'alkstore-trio[asyncio]'``).
    """
    if is_marked(fn):
        return fn  # type: ignore[return-value]
    if not is_async_callable(fn):
        raise InvalidArgument(
            f"asyncio_handler needs an async function (async def handler(job)), a "
            f"functools.partial of one or an object with an async __call__; got "
            f"{_describe(fn)}"
        )
    trio_asyncio = import_trio_asyncio()

    @functools.wraps(fn)
    async def run_on_asyncio(*args: P.args, **kwargs: P.kwargs) -> Any:
        # Q19.1: the handler's return value (its result) is passed through.
        if trio_asyncio.current_loop.get() is not None:
            return await _run(trio_asyncio, fn, args, kwargs)
        async with trio_asyncio.open_loop():
            return await _run(trio_asyncio, fn, args, kwargs)

    setattr(run_on_asyncio, _MARK, True)
    return run_on_asyncio


async def _run(
    trio_asyncio: Any, fn: Callable[..., Awaitable[object]], args: Any, kwargs: Any
) -> object:
    """Run ``fn(*args, **kwargs)`` as an asyncio task and wait for it from trio; what it
    returned."""
    import asyncio

    try:
        return await trio_asyncio.aio_as_trio(fn)(*args, **kwargs)
    except asyncio.CancelledError as exc:
        # trio-asyncio raises trio.Cancelled when *we* cancelled the task: this one is
        # the handler's own doing.
        detail = f" ({exc})" if str(exc) else ""
        raise AsyncioCancelled(
            f"the asyncio handler raised asyncio.CancelledError{detail} although the "
            "worker did not cancel it"
        ) from exc
    except RuntimeError as exc:
        if not str(exc).startswith("Task got bad yield"):
            raise
        raise RuntimeError(
            f"a handler marked @asyncio_handler awaited something that is not asyncio "
            f"(a trio function?): {exc}. Drop @asyncio_handler for a trio handler, or "
            "call trio code from asyncio code with trio_asyncio.trio_as_aio"
        ) from exc


def is_marked(handler: object) -> bool:
    """Whether ``handler`` was made by :func:`asyncio_handler`, also through
    :func:`functools.partial`, a bound method or a callable object whose ``__call__`` was
    marked."""
    while isinstance(handler, functools.partial):
        handler = handler.func
    if getattr(handler, _MARK, False) is True:
        return True
    if isinstance(handler, type) or inspect.isroutine(handler):
        return False
    return getattr(type(handler).__call__, _MARK, False) is True


def needs_asyncio(handlers: Iterable[object]) -> bool:
    """Whether one of these handlers was marked with :func:`asyncio_handler`."""
    return any(is_marked(handler) for handler in handlers)


@asynccontextmanager
async def open_loop_if_needed(handlers: Iterable[object]) -> AsyncIterator[None]:
    """Open one trio-asyncio loop around the block if one of ``handlers`` was marked with
    :func:`asyncio_handler`; otherwise just run the block (trio-asyncio is not imported).

    When the caller already runs inside a trio-asyncio loop, that loop is used: asyncio
    resources the caller opened on it around the worker serve the handlers too. The loop
    keeps running until the block has ended, also when the block is cancelled from
    outside: a stopping worker's asyncio handlers get their whole grace period."""
    if not needs_asyncio(handlers):
        yield
        return
    trio_asyncio = import_trio_asyncio()
    if trio_asyncio.current_loop.get() is not None:
        yield
        return
    async with trio_asyncio.open_loop():
        yield


def import_trio_asyncio() -> Any:
    """Import ``trio_asyncio`` (then repair the names imported before it, see the module
    docstring).

    Raises:
        ModuleNotFoundError: trio-asyncio is not installed; the message names the extra.
    """
    try:
        import trio_asyncio
    except ImportError as exc:
        raise ModuleNotFoundError(
            f"asyncio handlers need trio-asyncio, which is not installed; install the "
            f"asyncio extra: {INSTALL_HINT}",
            name="trio_asyncio",
        ) from exc
    rebind_stale_asyncio_names()
    return trio_asyncio


def rebind_stale_asyncio_names() -> list[str]:
    """Rebind the module-level names that still hold an asyncio function trio-asyncio
    replaced (``from asyncio import get_running_loop`` run before trio_asyncio was
    imported) to the function asyncio has now. Returns the names rebound, as
    ``"module.name"``; idempotent, and a no-op before trio_asyncio is imported."""
    import asyncio
    import asyncio.events
    import asyncio.tasks

    c_asyncio = sys.modules.get("_asyncio")  # the C accelerator, if this Python has it
    replaced: list[tuple[str, object, tuple[object, ...]]] = []
    for name in _REPLACED_NAMES:
        current = getattr(asyncio, name)
        originals = tuple(
            original
            for original in (
                getattr(c_asyncio, name, None),
                getattr(asyncio.events, "_py_" + name, None),
                getattr(asyncio.tasks, "_py_" + name, None),
            )
            if original is not None and original is not current
        )
        if originals:
            replaced.append((name, current, originals))
    rebound: list[str] = []
    if not replaced:
        return rebound
    for module_name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType) or module_name.split(".")[0] in _OWNERS:
            continue
        namespace = module.__dict__
        for name, current, originals in replaced:
            value = namespace.get(name)
            if value is not None and any(value is original for original in originals):
                namespace[name] = current
                rebound.append(f"{module_name}.{name}")
    if rebound:
        logger.debug(
            "rebound %s to trio-asyncio's functions (imported before trio_asyncio)",
            ", ".join(rebound),
        )
    return rebound


def _describe(value: object) -> str:
    if isinstance(value, type):
        return f"the class {value.__qualname__}"
    if inspect.isasyncgenfunction(value):
        return f"the async generator function {value.__qualname__}"
    if inspect.isroutine(value):
        return f"the sync function {getattr(value, '__qualname__', value)!r}"
    return f"a {type(value).__name__}"
