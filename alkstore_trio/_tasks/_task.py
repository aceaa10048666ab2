"""One declared task, :class:`Task`: defer it (T2, T4) and run it (T5, T6)."""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, cast, final

import msgspec
import trio

from .._errors import InvalidArgument
from .._runtime import Fail, TimedOut
from .._store import Queue, Store, Transaction
from ._codec import ArgsCodec, argument_error
from ._options import UNSET, TaskOptions, make_key

if TYPE_CHECKING:
    from datetime import datetime

    from .._core import Enqueued, QueueOpts
    from ..postgres import Producer
    from ._options import KeySpec

P = ParamSpec("P")
R = TypeVar("R")


@final
class Task(Generic[P, R]):
    """A task declared with :meth:`Tasks.task`: a function whose calls are stored as jobs.

    Call :meth:`defer` to enqueue a call (its arguments are checked against the
    function's annotations first); a worker serving the task's :class:`Tasks` registry
    decodes them into the annotated types and calls the function. Calling the task
    object itself calls the function directly, here and now.

    Not constructed directly: use the :meth:`Tasks.task` decorator.
    """

    __slots__ = (
        "__wrapped__",
        "_codec",
        "_fn",
        "_is_async",
        "_limiter",
        "_name",
        "_options",
        "_queues",
    )

    def __init__(
        self,
        fn: Callable[P, Any],
        name: str,
        options: TaskOptions,
        codec: ArgsCodec,
        limiter: trio.CapacityLimiter | None,
    ) -> None:
        self._fn = fn
        self._name = name
        self._options = options
        self._codec = codec
        self._limiter = limiter
        self._is_async = inspect.iscoroutinefunction(fn)
        self.__wrapped__ = fn
        #: The task's queue handle on each store it deferred to (making one checks the
        #: name: a couple of µs a defer saved); weak, so a closed store is not kept.
        self._queues: weakref.WeakKeyDictionary[Store, Queue] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        kind = "" if self._is_async else " (sync, runs in a thread)"
        return f"<Task {self._name!r} on queue {self._options.queue!r}{kind}>"

    @property
    def name(self) -> str:
        """The name stored in each job's envelope, by which the worker finds the task."""
        return self._name

    @property
    def queue(self) -> str:
        """The queue its jobs go to."""
        return self._options.queue

    @property
    def options(self) -> TaskOptions:
        """The task's options (frozen)."""
        return self._options

    @property
    def fn(self) -> Callable[P, Any]:
        """The decorated function."""
        return self._fn

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        """Call the function directly (no job, no checks): ``await send_email(...)`` for
        an async task, ``resize(...)`` for a sync one."""
        return self._fn(*args, **kwargs)

    def with_options(
        self,
        *,
        priority: int = UNSET,
        max_attempts: int | None = UNSET,
        delay_s: float | None = UNSET,
        run_at: datetime | None = UNSET,
        unique_key: KeySpec | None = UNSET,
        unique_for_s: float | None = UNSET,
        concurrency_key: KeySpec | None = UNSET,
        timeout_s: float | None = UNSET,
        opts: QueueOpts = UNSET,
    ) -> Task[P, R]:
        """The same task with some options changed, for the defers made through it
        (``send_email.with_options(delay_s=60).defer(store, ...)``); the worker still
        routes by name, so the options that matter at run time (``timeout_s``) are the
        declared task's. Each option is as in :meth:`Tasks.task`.

        Raises:
            InvalidArgument: an option is invalid.
        """
        options = self._options.replace(
            self._codec.params,
            priority=priority,
            max_attempts=max_attempts,
            delay_s=delay_s,
            run_at=run_at,
            unique_key=unique_key,
            unique_for_s=unique_for_s,
            concurrency_key=concurrency_key,
            timeout_s=timeout_s,
            opts=opts,
        )
        return Task(self._fn, self._name, options, self._codec, self._limiter)

    def payload(self, *args: P.args, **kwargs: P.kwargs) -> bytes:
        """The job payload (the JSON envelope) of a call, checked as :meth:`defer` checks
        it: for ``Queue.enqueue``, a ``Periodic`` or a test.

        Raises:
            InvalidArgument: the arguments do not fit the function's signature.
        """
        return self._codec.encode(self._codec.bind(args, kwargs))

    async def defer(
        self, target: Store | Transaction, /, *args: P.args, **kwargs: P.kwargs
    ) -> Enqueued:
        """Enqueue one call of the task (T2): check the arguments against the function's
        annotations, encode them in the envelope, and enqueue the job on the task's queue
        with the task's options.

        Args:
            target: A :class:`Store`, or a :class:`Transaction` to enqueue with (the job
                becomes visible at its commit, and disappears with its rollback).
            *args: The function's arguments, by position or by name.
            **kwargs: The function's arguments, by position or by name.

        Returns:
            The job's id (``created`` is ``False`` when the task's ``unique_key`` was
            held by a live job: nothing was enqueued).

        Raises:
            InvalidArgument: a missing, unknown or mistyped argument, or a key that is
                not valid; nothing was enqueued.
            StoreClosed: the store is closed.
        """
        payload, stamps = self._prepare(args, kwargs)
        if isinstance(target, Store):
            return await self._queue(target).enqueue(payload, **stamps)
        if isinstance(target, Transaction):
            return await target.enqueue(self._queue(target._store), payload, **stamps)
        raise _bad_target(target)

    def defer_with(
        self, producer: Producer, conn: Any, /, *args: P.args, **kwargs: P.kwargs
    ) -> Enqueued:
        """Enqueue one call of the task on your own ``psycopg.Connection``, in the
        transaction open on it (T9, Q20): checked as :meth:`defer` checks it, stamped
        with every option of the task (its ``QueueOpts`` included, whatever the
        producer's ``queues=`` says), and visible when the caller commits.

        Raises:
            InvalidArgument: a missing, unknown or mistyped argument, a key that is not
                valid, or ``conn`` is not a ``psycopg.Connection``; nothing was sent.
            SchemaError: the producer's schema is missing or at another version.
            EngineError: PostgreSQL refused; the transaction is aborted.
        """
        payload, stamps = self._prepare(args, kwargs)
        return _producer(producer).enqueue(
            conn, self._options.queue, payload, opts=self._options.opts, **stamps
        )

    async def adefer_with(
        self, producer: Producer, conn: Any, /, *args: P.args, **kwargs: P.kwargs
    ) -> Enqueued:
        """:meth:`defer_with` on a ``psycopg.AsyncConnection`` (asyncio: FastAPI,
        Starlette, Django's async views), with the same checks, result and errors."""
        payload, stamps = self._prepare(args, kwargs)
        return await _producer(producer).aenqueue(
            conn, self._options.queue, payload, opts=self._options.opts, **stamps
        )

    def _prepare(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[bytes, dict[str, Any]]:
        """T2/T3: a call's checked envelope, and the enqueue options the task stamps
        on it (its keys computed from the arguments)."""
        bound = self._codec.bind(args, kwargs)
        payload = self._codec.encode(bound)
        o = self._options
        unique_key = concurrency_key = None
        if o.unique_key is not None or o.concurrency_key is not None:
            arguments = msgspec.structs.asdict(bound)
            unique_key = make_key("unique_key", o.unique_key, arguments)
            concurrency_key = make_key("concurrency_key", o.concurrency_key, arguments)
        return payload, {
            "priority": o.priority,
            "delay_s": o.delay_s,
            "run_at": o.run_at,
            "max_attempts": o.max_attempts,
            "unique_key": unique_key,
            "unique_for_s": o.unique_for_s,
            "concurrency_key": concurrency_key,
        }

    def call(self, *args: P.args, **kwargs: P.kwargs) -> TaskCall[P, R]:
        """One call of the task, checked now but not run nor enqueued: what
        :meth:`defer_many` takes (``send_email.call(to="ada@example.com", subject="hi")``).
        Typed like :meth:`defer`, so mypy checks each call against the signature.

        Raises:
            InvalidArgument: the arguments do not fit the function's signature.
        """
        bound = self._codec.bind(args, kwargs)
        return TaskCall(self._name, bound, self._codec.encode(bound))

    async def defer_many(
        self, target: Store | Transaction, calls: Iterable[TaskCall[P, R]], /
    ) -> list[Enqueued]:
        """Enqueue many calls of the task at once (T4): each made with :meth:`call`
        (checked when made, and by mypy); the calls' keys are computed, and every call
        checked to be one of this task, before anything is enqueued.

        On a :class:`Store` it is one ``enqueue_many`` (one round trip, all or none); in
        a :class:`Transaction`, one enqueue per call, committed or rolled back together.

        Example::

            await notify.defer_many(store, [notify.call(user_id=n) for n in ids])

        Returns:
            One id per call, in order (empty for no calls).

        Raises:
            InvalidArgument: ``calls`` is not an iterable of calls of this task, or a
                call's key is invalid (the message gives its index); nothing was
                enqueued.
            StoreClosed: the store is closed.
        """
        if isinstance(calls, TaskCall | Mapping | str | bytes):
            raise InvalidArgument(
                "calls must be an iterable of calls, one per job (e.g. a list of "
                f"task.call(...)); got a single {type(calls).__name__}"
            )
        payloads, unique_keys, concurrency_keys = self._encode_calls(calls)
        o = self._options
        if isinstance(target, Store):
            return await self._queue(target).enqueue_many(
                payloads,
                priority=o.priority,
                delay_s=o.delay_s,
                run_at=o.run_at,
                max_attempts=o.max_attempts,
                unique_keys=unique_keys,
                unique_for_s=o.unique_for_s,
                concurrency_keys=concurrency_keys,
            )
        if not isinstance(target, Transaction):
            raise _bad_target(target)
        queue = self._queue(target._store)
        ids: list[Enqueued] = []
        for index, payload in enumerate(payloads):
            ids.append(
                await target.enqueue(
                    queue,
                    payload,
                    priority=o.priority,
                    delay_s=o.delay_s,
                    run_at=o.run_at,
                    max_attempts=o.max_attempts,
                    unique_key=None if unique_keys is None else unique_keys[index],
                    unique_for_s=o.unique_for_s,
                    concurrency_key=None if concurrency_keys is None else concurrency_keys[index],
                )
            )
        return ids

    def _queue(self, store: Store) -> Queue:
        queue = self._queues.get(store)
        if queue is None:
            queue = self._queues[store] = store.queue(self._options.queue, self._options.opts)
        return queue

    def _encode_calls(
        self, calls: Iterable[TaskCall[P, R]]
    ) -> tuple[list[bytes], list[str | None] | None, list[str | None] | None]:
        """Every call's payload and keys, or ``InvalidArgument`` naming the first bad one."""
        o = self._options
        payloads: list[bytes] = []
        unique_keys: list[str | None] | None = None if o.unique_key is None else []
        concurrency_keys: list[str | None] | None = None if o.concurrency_key is None else []
        for index, call in enumerate(calls):
            if not isinstance(call, TaskCall):
                raise InvalidArgument(
                    f"calls[{index}] must be a call made with {self._name}.call(...) (or "
                    f"the task's .call); got {type(call).__name__}"
                )
            if call.task != self._name:
                raise InvalidArgument(
                    f"calls[{index}] is a call of task {call.task!r}, not of {self._name!r}"
                )
            payloads.append(call.payload)
            if unique_keys is not None or concurrency_keys is not None:
                try:
                    arguments = msgspec.structs.asdict(call._bound)
                    if unique_keys is not None:
                        unique_keys.append(make_key("unique_key", o.unique_key, arguments))
                    if concurrency_keys is not None:
                        concurrency_keys.append(
                            make_key("concurrency_key", o.concurrency_key, arguments)
                        )
                except InvalidArgument as exc:
                    raise InvalidArgument(f"calls[{index}]: {exc}") from None
        return payloads, unique_keys, concurrency_keys

    def decode_result(self, data: bytes | bytearray | memoryview) -> R:
        """A job's result bytes (what the worker stored of the task's return value)
        decoded into the task's return type (T6).

        Raises:
            InvalidArgument: the task declares no result (no return annotation, or
                ``None``), or ``data`` does not decode into the return type.
        """
        return cast("R", self._codec.decode_result(data))

    async def run_args(self, raw: msgspec.Raw) -> bytes | None:
        """Run the task on an envelope's raw ``args`` (T5): decode them into the annotated
        types, call the function (within ``timeout_s``), and encode what it returns.

        Raises:
            Fail: the arguments do not decode, or the return value does not encode.
            TimedOut: ``timeout_s`` ran out (a ``Retry`` the worker counts as a timeout).
        """
        name = self._name
        try:
            kwargs = self._codec.decode(raw)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise Fail(
                f"task {name!r}: the job's arguments do not decode ({argument_error(exc)})"
            ) from None
        timeout_s = self._options.timeout_s
        if timeout_s is None:
            value = await self._call(kwargs)
        else:
            with trio.move_on_after(timeout_s) as scope:
                value = await self._call(kwargs)
            if scope.cancelled_caught:
                raise TimedOut(error=f"task {name!r} timed out after {timeout_s:g}s (timeout_s)")
        if self._codec.returns is None:
            return None
        try:
            return self._codec.encode_result(value)
        except (TypeError, msgspec.EncodeError) as exc:
            raise Fail(f"task {name!r}: its return value does not encode ({exc})") from None

    async def _call(self, kwargs: dict[str, Any]) -> Any:
        if self._is_async:
            return await cast("Callable[..., Awaitable[Any]]", self._fn)(**kwargs)
        # T7: a sync task runs in a worker thread, at most the registry's thread_limit at
        # once. A cancellation (lease lost, timeout_s, the stop's grace ran out) abandons
        # the thread: its outcome is discarded, and from_thread.check_cancelled() raises
        # in it at its next safe point.
        return await trio.to_thread.run_sync(
            functools.partial(self._fn, **kwargs),
            limiter=self._limiter,
            abandon_on_cancel=True,
        )


def _producer(producer: object) -> Producer:
    """``producer`` if it is an ``alkstore_trio.postgres.Producer`` (imported here, when
    a producer is given: psycopg stays an extra for everyone else)."""
    from ..postgres import Producer

    if not isinstance(producer, Producer):
        raise InvalidArgument(
            f"producer must be an alkstore_trio.postgres.Producer; got {type(producer).__name__}"
        )
    return producer


def _bad_target(target: object) -> InvalidArgument:
    return InvalidArgument(
        f"target must be a Store or a Transaction (from store.transaction()); got "
        f"{type(target).__name__}"
    )


@final
class TaskCall(Generic[P, R]):
    """One call of a task, checked against its signature, made with :meth:`Task.call`
    for :meth:`Task.defer_many`. Immutable; ``task`` is the task's name and ``payload``
    the call's envelope (T1)."""

    __slots__ = ("_bound", "payload", "task")

    def __init__(self, task: str, bound: msgspec.Struct, payload: bytes) -> None:
        self.task = task
        self._bound = bound
        self.payload = payload

    def __repr__(self) -> str:
        return f"<call of task {self.task!r}>"  # never the arguments (they may be secret)
