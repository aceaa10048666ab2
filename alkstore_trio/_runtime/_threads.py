"""Plain ``def`` handlers, run in worker threads (T7): :func:`sync_handler`."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import trio

from .._errors import InvalidArgument
from .._util import is_async_callable

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._core import Job
    from ._worker import Handler


def sync_handler(
    fn: Callable[[Job], Any], *, limiter: trio.CapacityLimiter | None = None
) -> Handler:
    """Make a handler of a plain ``def handler(job)``: each call runs in a worker thread
    (``trio.to_thread.run_sync``), so blocking code does not stall the worker (T7).

    The outcome is the function's, as for an async handler: return to ack, raise
    :class:`Retry` or :class:`Fail` to choose otherwise, any other exception retries. A
    thread cannot be interrupted: when the job's scope is cancelled (lease lost, the job
    timeout, the stop's grace ran out) the worker abandons the thread at once and settles
    the job as for any cancelled handler; what the thread returns or raises afterwards is
    discarded. Call ``trio.from_thread.check_cancelled()`` at safe points of a long
    handler: from then on it raises ``trio.Cancelled``, ending the thread early.

    Example::

        def resize(job: Job) -> None:
            ...  # blocking work

        worker = Worker(store, {"thumbs": sync_handler(resize)})

    Args:
        fn: A sync callable taking the job.
        limiter: Bounds the threads running at once, abandoned ones included until they
            return (default: trio's, 40 threads per process); the worker's
            ``concurrency`` bounds them too.

    Raises:
        InvalidArgument: ``fn`` is async (pass it to the worker as it is), a class, or
            not callable.
    """
    if is_async_callable(fn):
        raise InvalidArgument("fn is an async handler already; pass it to the Worker as it is")
    if not callable(fn) or isinstance(fn, type):
        raise InvalidArgument(f"fn must be a sync function of the job; got {type(fn).__name__}")

    async def handler(job: Job) -> Any:
        return await trio.to_thread.run_sync(
            functools.partial(fn, job), limiter=limiter, abandon_on_cancel=True
        )

    handler.__name__ = getattr(fn, "__name__", "sync_handler")
    handler.__qualname__ = getattr(fn, "__qualname__", handler.__name__)
    return handler
