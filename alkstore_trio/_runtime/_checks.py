"""The checks of :class:`Worker`'s arguments (all made before anything starts)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core import _validate as v
from .._errors import InvalidArgument
from .._store import Queue, Store
from .._util import is_async_callable

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._worker import Handler


def check_count(param: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgument(f"{param} must be an int >= {minimum}; got {value!r}")
    return value


def positive(param: str, value: object) -> float:
    return v.check_duration(param, value, min_s=0, min_inclusive=False)


def check_handlers(
    store: Store, handlers: Mapping[str | Queue, Handler]
) -> tuple[tuple[Queue, ...], dict[str, Handler]]:
    if not isinstance(store, Store):
        raise InvalidArgument(f"store must be a Store; got {type(store).__name__}")
    if not hasattr(handlers, "items") or isinstance(handlers, str | bytes):
        raise InvalidArgument(
            f"handlers must map queue names or Queue handles to async handlers; got "
            f"{type(handlers).__name__}"
        )
    queues: list[Queue] = []
    by_name: dict[str, Handler] = {}
    for key, handler in handlers.items():
        if isinstance(key, Queue):
            if key._store is not store:
                raise InvalidArgument(f"queue handle {key.name!r} belongs to another store")
            queue = key
        elif isinstance(key, str):
            queue = store.queue(key)
        else:
            raise InvalidArgument(
                f"handlers keys must be queue names or Queue handles; got {type(key).__name__}"
            )
        if queue.name in by_name:
            raise InvalidArgument(f"handlers names queue {queue.name!r} twice; name it once")
        if not is_async_callable(handler):
            raise InvalidArgument(
                f"the handler of queue {queue.name!r} must be an async function (async def "
                f"handler(job)), a functools.partial of one or an object with an async "
                f"__call__; got {type(handler).__name__}"
            )
        queues.append(queue)
        by_name[queue.name] = handler
    if not queues:
        raise InvalidArgument("handlers must name at least one queue; got none")
    return tuple(queues), by_name
