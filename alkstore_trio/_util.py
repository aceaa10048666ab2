"""Small helpers shared across the package's layers: one home for each (as trio's
``_util``), so that no layer keeps its own near-copy.

Pure Python: no trio, no engine, no I/O. Every layer may import this module.
"""

from __future__ import annotations

import functools
import inspect
import math

__all__ = ["age", "finite_number", "is_async_callable", "lone_exception", "one_line"]


def is_async_callable(fn: object) -> bool:
    """Whether calling ``fn`` returns a coroutine: an ``async def`` function or method, a
    :func:`functools.partial` of one (nested partials too), or an instance whose class
    defines ``async def __call__``. A class is never one (calling it constructs)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    if isinstance(fn, type) or inspect.isroutine(fn) or not callable(fn):
        return False
    return inspect.iscoroutinefunction(type(fn).__call__)


def lone_exception(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The group's only exception when it holds exactly one, else the group itself.

    For a context manager or a supervisor whose background tasks never fail on their own:
    the exception of the block it runs comes out as if no nursery were there. Raise the
    result outside the ``except`` block, so that the group is not chained as its context.
    """
    return group.exceptions[0] if len(group.exceptions) == 1 else group


def finite_number(value: object) -> float | None:
    """``value`` as a float if it is a finite int or float (never a bool), else ``None``.

    The one test behind every "a finite number of seconds" check; each caller adds its
    own bounds and raises its own error (``InvalidArgument``, ``ValueError``, argparse's).
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        result = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return result if math.isfinite(result) else None


def age(seconds: float | None) -> str:
    """A duration in the largest unit that keeps it readable (``17.1s``, ``2.0h``)."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def one_line(text: str | None, limit: int = 80) -> str:
    """``text`` on one line, cut after ``limit`` characters; ``-`` for ``None`` (the
    command line's and the dashboard's lists)."""
    if text is None:
        return "-"
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
