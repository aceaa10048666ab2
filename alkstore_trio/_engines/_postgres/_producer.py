"""Q20 producers: enqueue on the caller's own psycopg connection, in its transaction.

A store's ``transaction()`` runs on the store's own pool, under trio. A web application
(Django, Flask, FastAPI) has its own connection and its own transaction, in which it
saves the order the job is about; it must enqueue *there*, or the two can come apart.
:class:`Producer` does that on a plain ``psycopg.Connection`` (sync) or
``psycopg.AsyncConnection`` (asyncio), with no trio and no pool of its own.

Why it cannot drift from the store: the arguments are checked by the core's
``enqueue_specs`` (the store's own validation, with the same ``QueueOpts`` stamps), and
the statements are the engine's, decided by :func:`._enqueue.enqueue_steps` (the same
generator a store's ``tx.enqueue`` runs); this module only sends them on the caller's
connection. The NOTIFY is in those statements, so PostgreSQL delivers it at the commit
and drops it on a rollback.

Why one class with ``enqueue`` and ``aenqueue``: an application configures its queues'
stamps once and uses them from sync and async code alike (a Django project has both
kinds of views); Django's own API names the async twin of ``get`` ``aget`` in the same
way. A method that returned a coroutine or a value depending on the connection's type
would make a forgotten ``await`` silently enqueue nothing.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import psycopg
from psycopg import pq
from psycopg.rows import tuple_row

from ..._core import DEFAULT_OPTS, Enqueued, QueueOpts, enqueue_specs
from ..._core import _validate as v
from ..._errors import EngineError, InvalidArgument
from . import _enqueue, _schema, _sql, _unique

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence
    from datetime import datetime

    from ..._core import EnqueueSpec
    from ._enqueue import Steps, T

__all__ = ["Producer"]

_IDLE: Final = pq.TransactionStatus.IDLE
_INERROR: Final = pq.TransactionStatus.INERROR
_UNKNOWN: Final = pq.TransactionStatus.UNKNOWN


@final
class Producer:
    """Enqueue jobs on your own psycopg connection, in your own transaction (Q20).

    Example (Django, with its psycopg 3 backend)::

        from django.db import connection, transaction
        from alkstore_trio import QueueOpts
        from alkstore_trio.postgres import Producer

        producer = Producer("alkstore", queues={"emails": QueueOpts(max_attempts=5)})

        with transaction.atomic():
            order = Order.objects.create(item="teapot")
            producer.enqueue(connection.connection, "emails", b"confirm %d" % order.pk)

    The enqueue runs in the transaction open on the connection and never commits or
    rolls it back: the jobs appear, and their queues are woken (a NOTIFY, delivered by
    PostgreSQL at the commit), if and when the caller commits. On a rollback nothing was
    enqueued and nobody is woken. A connection in autocommit mode outside any transaction
    block makes each call a transaction of its own, as ``Queue.enqueue`` is.

    Args:
        schema: The schema holding the queue's tables (migrated to this library's
            version: the first enqueue on each connection checks it).
        queues: The stamps (``QueueOpts``) of the queues named, as a store's
            ``store.queue(name, opts)`` handle writes them; other queues get the
            defaults (Q1), as ``tx.enqueue`` with a bare name does.
        max_payload_bytes: The largest payload accepted, as ``open_store``'s.

    Raises:
        InvalidArgument: an argument is invalid.
    """

    def __init__(
        self,
        schema: str = "alkstore",
        *,
        queues: Mapping[str, QueueOpts] | None = None,
        max_payload_bytes: int = v.DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        self._schema = _sql.check_schema_name(schema)
        self._opts = _check_queues(queues)
        # open_store's bounds (0 accepts only empty payloads).
        self._max_payload_bytes = v.check_int(
            "max_payload_bytes", max_payload_bytes, lo=0, hi=2**30
        )
        self._queries = _sql.queries(self._schema)
        self._channel = functools.partial(_sql.wake_channel, self._schema)
        # The connections whose schema version was found right (a store checks once,
        # when it opens; a producer once per connection it is given).
        self._checked: weakref.WeakSet[object] = weakref.WeakSet()
        self._lock = threading.Lock()

    @property
    def schema(self) -> str:
        """The schema this producer enqueues into."""
        return self._schema

    def __repr__(self) -> str:
        return f"Producer(schema={self._schema!r})"

    # -- sync: psycopg.Connection ------------------------------------------------------

    def enqueue(
        self,
        conn: psycopg.Connection[Any],
        queue: str,
        payload: bytes | bytearray | memoryview,
        *,
        priority: int = 0,
        delay_s: float | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        headers: Mapping[str, str] | None = None,
        unique_key: str | None = None,
        unique_for_s: float | None = None,
        concurrency_key: str | None = None,
        opts: QueueOpts | None = None,
    ) -> Enqueued:
        """Enqueue one job in the transaction open on ``conn`` (Q2, Q15, Q20).

        The arguments are those of ``Queue.enqueue``, and mean the same. ``opts``
        stamps this call's jobs with those ``QueueOpts`` instead of the producer's
        ``queues=`` entry for the queue (a typed task's ``defer_with`` passes its own).

        Returns:
            The job's id as an :class:`~alkstore_trio.Enqueued`; ``created`` is
            ``False`` when its ``unique_key`` was held (Q15).

        Raises:
            InvalidArgument: an argument is invalid; nothing was sent, and the
                transaction is as it was.
            SchemaError: the schema is missing, older or newer than this library.
            EngineError: PostgreSQL refused (the driver's error is the ``__cause__``);
                the transaction is aborted: roll it back.
        """
        keys = None if unique_key is None else [v.check_unique_key(unique_key)]
        groups = None if concurrency_key is None else [v.check_concurrency_key(concurrency_key)]
        specs = self._specs(
            queue, [payload], priority, delay_s, run_at, max_attempts, headers, keys,
            unique_for_s, groups, opts,
        )  # fmt: skip
        (job_id,) = self._run(_check_sync(conn), specs)
        return job_id

    def enqueue_many(
        self,
        conn: psycopg.Connection[Any],
        queue: str,
        payloads: Iterable[bytes | bytearray | memoryview],
        *,
        priority: int = 0,
        delay_s: float | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        headers: Mapping[str, str] | None = None,
        unique_keys: Iterable[str | None] | None = None,
        unique_for_s: float | None = None,
        concurrency_keys: Iterable[str | None] | None = None,
        opts: QueueOpts | None = None,
    ) -> list[Enqueued]:
        """Enqueue many jobs in the transaction open on ``conn``, with one clock read
        (``Queue.enqueue_many``'s arguments). No payloads: ``[]``, nothing sent (D6).

        Raises:
            InvalidArgument: an argument or any payload is invalid; nothing was sent.
            SchemaError: the schema is missing, older or newer than this library.
            EngineError: PostgreSQL refused; the transaction is aborted.
        """
        specs = self._many_specs(
            queue, payloads, priority, delay_s, run_at, max_attempts, headers, unique_keys,
            unique_for_s, concurrency_keys, opts,
        )  # fmt: skip
        checked = _check_sync(conn)
        return self._run(checked, specs) if specs else []

    # -- async: psycopg.AsyncConnection ------------------------------------------------

    async def aenqueue(
        self,
        conn: psycopg.AsyncConnection[Any],
        queue: str,
        payload: bytes | bytearray | memoryview,
        *,
        priority: int = 0,
        delay_s: float | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        headers: Mapping[str, str] | None = None,
        unique_key: str | None = None,
        unique_for_s: float | None = None,
        concurrency_key: str | None = None,
        opts: QueueOpts | None = None,
    ) -> Enqueued:
        """:meth:`enqueue` on a ``psycopg.AsyncConnection`` (asyncio: FastAPI,
        Starlette, Django's async views), with the same arguments, result and errors."""
        keys = None if unique_key is None else [v.check_unique_key(unique_key)]
        groups = None if concurrency_key is None else [v.check_concurrency_key(concurrency_key)]
        specs = self._specs(
            queue, [payload], priority, delay_s, run_at, max_attempts, headers, keys,
            unique_for_s, groups, opts,
        )  # fmt: skip
        (job_id,) = await self._arun(_check_async(conn), specs)
        return job_id

    async def aenqueue_many(
        self,
        conn: psycopg.AsyncConnection[Any],
        queue: str,
        payloads: Iterable[bytes | bytearray | memoryview],
        *,
        priority: int = 0,
        delay_s: float | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        headers: Mapping[str, str] | None = None,
        unique_keys: Iterable[str | None] | None = None,
        unique_for_s: float | None = None,
        concurrency_keys: Iterable[str | None] | None = None,
        opts: QueueOpts | None = None,
    ) -> list[Enqueued]:
        """:meth:`enqueue_many` on a ``psycopg.AsyncConnection``."""
        specs = self._many_specs(
            queue, payloads, priority, delay_s, run_at, max_attempts, headers, unique_keys,
            unique_for_s, concurrency_keys, opts,
        )  # fmt: skip
        checked = _check_async(conn)
        return await self._arun(checked, specs) if specs else []

    # -- what both share ---------------------------------------------------------------

    def _specs(
        self, queue: object, payloads: Sequence[object], priority: object, delay_s: object,
        run_at: object, max_attempts: object, headers: object,
        unique_keys: Sequence[str | None] | None, unique_for_s: object,
        concurrency_keys: Sequence[str | None] | None, opts: object,
    ) -> list[EnqueueSpec]:  # fmt: skip
        name = v.check_queue_name(queue)
        if opts is not None and not isinstance(opts, QueueOpts):
            raise InvalidArgument(f"opts must be a QueueOpts or None; got {type(opts).__name__}")
        return enqueue_specs(
            name,
            self._opts.get(name, DEFAULT_OPTS) if opts is None else opts,
            payloads,
            max_payload_bytes=self._max_payload_bytes,
            priority=priority,
            delay_s=delay_s,
            run_at=run_at,
            max_attempts=max_attempts,
            headers=headers,
            unique_keys=unique_keys,
            unique_for_s=unique_for_s,
            concurrency_keys=concurrency_keys,
        )

    def _many_specs(
        self, queue: object, payloads: object, priority: object, delay_s: object,
        run_at: object, max_attempts: object, headers: object, unique_keys: object,
        unique_for_s: object, concurrency_keys: object, opts: object,
    ) -> list[EnqueueSpec]:  # fmt: skip
        items = v.check_payload_list(payloads)
        keys = None if unique_keys is None else v.check_unique_keys(unique_keys, len(items))
        groups = (
            None
            if concurrency_keys is None
            else v.check_concurrency_keys(concurrency_keys, len(items))
        )
        return self._specs(
            queue, items, priority, delay_s, run_at, max_attempts, headers, keys,
            unique_for_s, groups, opts,
        )  # fmt: skip

    def _steps(self, specs: Sequence[EnqueueSpec]) -> Steps[list[Enqueued]]:
        return _enqueue.enqueue_steps(self._queries, self._channel, self._schema, specs)

    def _is_checked(self, conn: object) -> bool:
        with self._lock:
            return conn in self._checked

    def _mark_checked(self, conn: object, version: int | None) -> None:
        _schema.check_version(self._schema, version, fix=self._fix())
        with self._lock:
            self._checked.add(conn)

    def _fix(self) -> str:
        return (
            f"run `alkstore-trio migrate --dsn <your dsn> --schema {self._schema}` "
            "(or open a store on it with migrate='apply')"
        )

    def _run(self, conn: psycopg.Connection[Any], specs: Sequence[EnqueueSpec]) -> list[Enqueued]:
        own_transaction = _unique.has_keys(specs) and _outside_transaction(conn)
        with _engine_errors(), psycopg.Cursor(conn, row_factory=tuple_row) as cursor:
            if not self._is_checked(conn):
                self._mark_checked(conn, _drive(cursor, _schema.version_steps(self._schema)))
            if own_transaction:
                # Autocommit, no transaction block: the key's lock must last until the
                # job is written, so the two statements get a transaction of their own.
                with conn.transaction():
                    return _drive(cursor, self._steps(specs))
            return _drive(cursor, self._steps(specs))

    async def _arun(
        self, conn: psycopg.AsyncConnection[Any], specs: Sequence[EnqueueSpec]
    ) -> list[Enqueued]:
        own_transaction = _unique.has_keys(specs) and _outside_transaction(conn)
        with _engine_errors():
            async with psycopg.AsyncCursor(conn, row_factory=tuple_row) as cursor:
                if not self._is_checked(conn):
                    version = await _adrive(cursor, _schema.version_steps(self._schema))
                    self._mark_checked(conn, version)
                if own_transaction:
                    async with conn.transaction():
                        return await _adrive(cursor, self._steps(specs))
                return await _adrive(cursor, self._steps(specs))


def _check_queues(queues: object) -> dict[str, QueueOpts]:
    if queues is None:
        return {}
    if not isinstance(queues, Mapping):
        raise InvalidArgument(
            f"queues must be a mapping of queue names to QueueOpts; got a {type(queues).__name__}"
        )
    checked: dict[str, QueueOpts] = {}
    for name, opts in queues.items():
        if not isinstance(opts, QueueOpts):
            raise InvalidArgument(
                f"queues[{name!r}] must be a QueueOpts; got a {type(opts).__name__}"
            )
        checked[v.check_queue_name(name)] = opts
    return checked


def _check_sync(conn: object) -> psycopg.Connection[Any]:
    if not isinstance(conn, psycopg.Connection):
        hint = " (use aenqueue for a psycopg.AsyncConnection)" if _is_async(conn) else ""
        raise InvalidArgument(f"conn must be a psycopg.Connection{hint}; got a {_type(conn)}")
    return _usable(conn)


def _check_async(conn: object) -> psycopg.AsyncConnection[Any]:
    if not isinstance(conn, psycopg.AsyncConnection):
        hint = (
            " (use enqueue for a psycopg.Connection)"
            if isinstance(conn, psycopg.Connection)
            else ""
        )
        raise InvalidArgument(f"conn must be a psycopg.AsyncConnection{hint}; got a {_type(conn)}")
    return _usable(conn)


def _is_async(conn: object) -> bool:
    return isinstance(conn, psycopg.AsyncConnection)


def _type(conn: object) -> str:
    return f"{type(conn).__module__}.{type(conn).__qualname__}"


C = TypeVar("C", psycopg.Connection[Any], psycopg.AsyncConnection[Any])


def _usable(conn: C) -> C:
    """``conn``, unless it is closed or its transaction already failed: then nothing is
    sent (PostgreSQL would refuse every statement until a rollback)."""
    if conn.closed or conn.info.transaction_status == _UNKNOWN:
        raise EngineError("cannot enqueue: the connection is closed")
    if conn.info.transaction_status == _INERROR:
        raise EngineError(
            "cannot enqueue: the connection's transaction failed earlier (a statement "
            "raised in it); roll it back first"
        )
    return conn


def _outside_transaction(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether ``conn`` is in autocommit mode with no transaction block open (each
    statement would commit on its own)."""
    return bool(conn.autocommit) and conn.info.transaction_status == _IDLE


@contextmanager
def _engine_errors() -> Iterator[None]:
    try:
        yield
    except psycopg.Error as exc:
        raise EngineError(f"PostgreSQL operation failed: {type(exc).__name__}: {exc}") from exc


def _drive(cursor: psycopg.Cursor[tuple[Any, ...]], steps: Steps[T]) -> T:
    """Run ``steps`` (see :mod:`._enqueue`) on a sync cursor."""
    try:
        step = next(steps)
        while True:
            cursor.execute(*step)
            step = steps.send(cursor.fetchall() if cursor.description is not None else [])
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def _adrive(cursor: psycopg.AsyncCursor[tuple[Any, ...]], steps: Steps[T]) -> T:
    """Run ``steps`` (see :mod:`._enqueue`) on an async cursor."""
    try:
        step = next(steps)
        while True:
            await cursor.execute(*step)
            rows = await cursor.fetchall() if cursor.description is not None else []
            step = steps.send(rows)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
