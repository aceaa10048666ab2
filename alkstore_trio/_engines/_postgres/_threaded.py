"""The thread driver: psycopg's public sync API in worker threads behind a cancel-aware
wrapper, the fallback when the native driver cannot run (see :mod:`._driver`)."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import threading
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    NoReturn,
    TypeVar,
    final,
)

import outcome
import psycopg
import psycopg.conninfo
import trio
from psycopg import pq

from ._connection import (
    CANCEL_GRACE_S,
    PREPARE_THRESHOLD,
    Connection,
    ConnectionBroken,
    Notify,
    Params,
    _check_connect_timeout,
    _deadline,
    _has_rows,
    _Lock,
)

if TYPE_CHECKING:
    from collections.abc import Callable

logger = logging.getLogger("alkstore_trio.postgres")

RV = TypeVar("RV")
T = TypeVar("T")


def _ignore(_: object) -> None:
    pass


class _ThreadCall(Generic[T]):
    """One blocking call of the thread driver in a worker thread, cancellation-aware.

    Waiting for a worker thread cannot be interrupted, and abandoning it would leave the
    connection in use by a thread we no longer track. So on cancellation (or
    ``Ctrl-C``) a helper thread cancels the statement on the server
    (``Connection.cancel_safe``, documented as thread-safe), waits up to
    :data:`CANCEL_GRACE_S` for the worker, then shuts the socket down so the worker's
    libpq call returns with an error, and only then lets the task raise. The next
    statement can therefore never be hit by a late cancel request.
    """

    def __init__(self, conn: psycopg.Connection[Any], fn: Callable[[], T]) -> None:
        self._conn = conn
        self._fn = fn
        self._guard = threading.Lock()
        self._done = threading.Event()
        self._raise_cancel: Callable[[], NoReturn] | None = None
        self._task = trio.lowlevel.current_task()
        self._token = trio.lowlevel.current_trio_token()

    async def run(self) -> T:
        trio.lowlevel.start_thread_soon(self._work, _ignore, name="alkstore-pg-worker")
        result: T = await trio.lowlevel.wait_task_rescheduled(self._abort)
        return result

    def _work(self) -> None:  # worker thread
        result = outcome.capture(self._fn)
        with self._guard:
            self._done.set()
            interrupted = self._raise_cancel is not None
        if not interrupted:
            self._token.run_sync_soon(trio.lowlevel.reschedule, self._task, result)

    def _abort(self, raise_cancel: Callable[[], NoReturn]) -> trio.lowlevel.Abort:  # trio
        with self._guard:
            if self._done.is_set():
                # The result is on its way; the cancellation is raised at the next checkpoint.
                return trio.lowlevel.Abort.FAILED
            first = self._raise_cancel is None
            self._raise_cancel = raise_cancel  # a later Ctrl-C replaces a Cancelled
        if first:
            trio.lowlevel.start_thread_soon(self._interrupt, _ignore, name="alkstore-pg-cancel")
        return trio.lowlevel.Abort.FAILED

    def _interrupt(self) -> None:  # helper thread
        try:
            self._conn.cancel_safe(timeout=CANCEL_GRACE_S)
        except Exception as exc:
            logger.warning("statement cancellation failed: %s", exc)
        if not self._done.wait(CANCEL_GRACE_S):
            logger.warning(
                "statement not stopped within %s s of its cancellation: closing the connection",
                CANCEL_GRACE_S,
            )
            _shutdown_socket(self._conn)
            self._done.wait()
        self._token.run_sync_soon(self._deliver_cancellation)

    def _deliver_cancellation(self) -> None:  # trio
        assert self._raise_cancel is not None
        trio.lowlevel.reschedule(self._task, outcome.capture(self._raise_cancel))


def _shutdown_socket(conn: psycopg.Connection[Any]) -> None:
    """Make the libpq call blocked on ``conn`` fail (its socket reads end-of-file)."""
    with contextlib.suppress(OSError, psycopg.Error):
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()  # the duplicate only


@final
class _ThreadConnection(Connection):
    """:class:`Connection` on psycopg's sync connection, called in worker threads."""

    def __init__(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        self._conn = conn
        self._cursor = conn.cursor()
        self._lock = _Lock()
        self._backend_pid = conn.info.backend_pid
        self._closed_by_us = False

    @property
    def backend_pid(self) -> int:
        return self._backend_pid

    @property
    def closed(self) -> bool:
        return self._conn.closed

    @property
    def broken(self) -> bool:
        return self._conn.closed and not self._closed_by_us

    @property
    def transaction_status(self) -> pq.TransactionStatus:
        return self._conn.info.transaction_status

    async def _call(self, fn: Callable[[], T]) -> T:
        await trio.lowlevel.checkpoint_if_cancelled()
        async with self._lock:
            self._check_usable()
            try:
                return await _ThreadCall(self._conn, fn).run()
            except psycopg.Error as exc:
                if (broken := self._broken_instead(exc)) is not None:
                    raise broken from exc
                raise

    async def execute(
        self, query: str | bytes, params: Params | None = None, *, binary: bool = False
    ) -> list[tuple[Any, ...]]:
        cursor = self._cursor

        def run() -> list[tuple[Any, ...]]:
            cursor.execute(query, params, binary=binary or None)
            return cursor.fetchall() if _has_rows(cursor.pgresult) else []

        return await self._call(run)

    async def executescript(self, script: str | bytes) -> None:
        cursor = self._cursor

        def run() -> None:
            cursor.execute(script, prepare=False)

        await self._call(run)

    async def wait_notifies(self, timeout_s: float | None) -> list[Notify]:
        deadline = _deadline(timeout_s)
        await trio.lowlevel.checkpoint_if_cancelled()
        async with self._lock:
            self._check_usable()
            notifies: list[Notify] = []
            try:
                with trio.CancelScope(deadline=deadline):
                    # notifies(timeout=0) returns what arrived, reading the socket without
                    # blocking; the waiting is trio's.
                    while not (notifies := list(self._conn.notifies(timeout=0))):
                        await trio.lowlevel.wait_readable(self._conn.fileno())
            except psycopg.Error as exc:
                if (broken := self._broken_instead(exc)) is not None:
                    raise broken from exc
                raise
            except trio.ClosedResourceError as exc:
                raise ConnectionBroken("the connection was closed while waiting") from exc
        await trio.lowlevel.cancel_shielded_checkpoint()
        return notifies

    async def aclose(self) -> None:
        if not self._closed_by_us:
            self._closed_by_us = True
            with contextlib.suppress(psycopg.Error):
                trio.lowlevel.notify_closing(self._conn.fileno())
            with trio.CancelScope(shield=True):
                async with self._lock:  # a worker thread may still be using it
                    self._conn.close()
        await trio.lowlevel.cancel_shielded_checkpoint()

    def _discard(self) -> None:
        self._conn.close()


class _Handoff:
    """Hands a connection made in a worker thread to trio, or closes it if trio gave up
    waiting (cancellation) so that it does not leak."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._abandoned = False

    def keep(self, conn: psycopg.Connection[Any]) -> None:  # worker thread
        with self._guard:
            if not self._abandoned:
                self._conn = conn
                return
        conn.close()

    def abandon(self) -> None:  # trio
        with self._guard:
            self._abandoned = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


async def connect_threaded(
    conninfo: str, *, connect_timeout_s: float, application_name: str
) -> Connection:
    """Open a connection with the thread driver (see :func:`connect`)."""
    _check_connect_timeout(connect_timeout_s)
    handoff = _Handoff()

    def work() -> psycopg.Connection[tuple[Any, ...]]:
        conn = psycopg.Connection.connect(
            conninfo,
            autocommit=True,
            prepare_threshold=PREPARE_THRESHOLD,
            application_name=application_name,
            # libpq's own limit (whole seconds, at least 2); trio enforces the exact one.
            connect_timeout=max(2, math.ceil(connect_timeout_s)),
        )
        handoff.keep(conn)
        return conn

    with trio.move_on_after(connect_timeout_s):
        try:
            conn = await trio.to_thread.run_sync(work, abandon_on_cancel=True)
        except BaseException:
            handoff.abandon()
            raise
        return _ThreadConnection(conn)
    raise psycopg.errors.ConnectionTimeout(
        f"connection timeout expired: not connected within {connect_timeout_s} s"
    )
