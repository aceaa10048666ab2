"""The checks of :class:`Worker`'s arguments (all made before anything starts)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from .._core import _validate as v
from .._core._periodic import check_schedules
from .._errors import InvalidArgument
from .._store import Queue, Store
from .._util import is_async_callable

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping

    from ._worker import Handler

T = TypeVar("T")


def check_count(param: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgument(f"{param} must be an int >= {minimum}; got {value!r}")
    return value


def positive(param: str, value: object) -> float:
    return v.check_duration(param, value, min_s=0, min_inclusive=False)


def with_handler_schedules(handlers: object, periodic: object) -> object:
    """T5: ``handlers`` that carry schedules of their own (a ``Tasks`` registry's periodic
    tasks, as its ``periodic`` tuple) add them to ``Worker(periodic=...)``, which is
    checked as a whole afterwards (a name given twice is ``InvalidArgument``)."""
    extra = getattr(handlers, "periodic", None)
    if not isinstance(extra, tuple) or not extra:
        return periodic
    return [*check_schedules(periodic), *extra]


def check_handlers(
    store: Store, handlers: Mapping[str | Queue, Handler], *, periodic: bool
) -> tuple[tuple[Queue, ...], dict[str, Handler]]:
    """The served queues and their handlers by name; none only with ``periodic``
    schedules (R14: a scheduler-only worker)."""
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
                f"__call__ (a plain def handler(job): wrap it in sync_handler to run it in "
                f"a thread); got {type(handler).__name__}"
            )
        queues.append(queue)
        by_name[queue.name] = handler
    if not queues and not periodic:
        raise InvalidArgument(
            "handlers must name at least one queue, or periodic= must give schedules "
            "(a scheduler-only worker); got neither"
        )
    return tuple(queues), by_name


def _queue_key(param: str, key: object, store: Store) -> str:
    if isinstance(key, Queue):
        if key._store is not store:
            raise InvalidArgument(f"{param}: queue handle {key.name!r} belongs to another store")
        return key.name
    if isinstance(key, str):
        return key
    raise InvalidArgument(
        f"{param} keys must be queue names or Queue handles; got {type(key).__name__}"
    )


def per_queue(
    param: str,
    mapping: object,
    store: Store,
    served: Collection[str],
    check_value: Callable[[str, object], T],
) -> dict[str, T]:
    """R12.6/R13: a mapping of served queues (names or handles) to checked values."""
    if not hasattr(mapping, "items") or isinstance(mapping, str | bytes):
        raise InvalidArgument(
            f"{param} must map queue names to values; got {type(mapping).__name__}"
        )
    by_name: dict[str, T] = {}
    for key, value in mapping.items():
        name = _queue_key(param, key, store)
        if name not in served:
            queues = ", ".join(map(repr, served)) or "none"
            raise InvalidArgument(
                f"{param} names queue {name!r}, which this worker does not serve (its "
                f"queues: {queues}); give it a handler or leave it out"
            )
        if name in by_name:
            raise InvalidArgument(f"{param} names queue {name!r} twice; name it once")
        by_name[name] = check_value(f"{param}[{name!r}]", value)
    return by_name


def _cap(param: str, value: object) -> int:
    return check_count(param, value, minimum=1)


def check_concurrency(
    store: Store, served: Collection[str], concurrency: object, queue_concurrency: object
) -> tuple[int, dict[str, int]]:
    """R12: the worker-wide total and the per-queue caps (empty: none), from either
    ``concurrency=N, queue_concurrency={...}`` or the short form ``concurrency={...}``."""
    if hasattr(concurrency, "items"):
        if queue_concurrency is not None:
            raise InvalidArgument(
                "pass either concurrency={queue: N, ...} (a pool per queue) or "
                "concurrency=N with queue_concurrency={queue: N, ...}, not both"
            )
        caps = per_queue("concurrency", concurrency, store, served, _cap)
        missing = [name for name in served if name not in caps]
        if missing or not caps:
            raise InvalidArgument(
                f"concurrency as a mapping gives every served queue its own pool, but it "
                f"names none for {', '.join(map(repr, missing)) or 'any queue'}; name "
                f"each queue, or pass concurrency=N and queue_concurrency= to cap some"
            )
        return sum(caps.values()), caps
    total = check_count("concurrency", concurrency, minimum=1)
    if queue_concurrency is None:
        return total, {}
    caps = per_queue("queue_concurrency", queue_concurrency, store, served, _cap)
    for name, cap in caps.items():
        if cap > total:
            raise InvalidArgument(
                f"queue_concurrency[{name!r}] must be at most concurrency={total}; got "
                f"{cap} (a queue cannot run more handlers than the worker)"
            )
    return total, caps


def _timeout(param: str, value: object) -> float | None:
    return None if value is None else positive(param, value)


def check_queue_timeouts(
    store: Store, served: Collection[str], queue_job_timeout_s: object
) -> dict[str, float | None]:
    """R13: the per-queue job timeouts (``None``: no limit for that queue)."""
    if queue_job_timeout_s is None:
        return {}
    return per_queue("queue_job_timeout_s", queue_job_timeout_s, store, served, _timeout)
