"""The PostgreSQL driver: psycopg 3 connections driven by trio.

Why this module looks the way it does
-------------------------------------
psycopg's async API only runs on asyncio. Measured on the project's machines, the
alternatives rank like this: driving psycopg's own connection with its socket waits done
by :func:`trio.lowlevel.wait_readable` / :func:`~trio.lowlevel.wait_writable` runs at
about the speed of psycopg's asyncio connection (≈70–80 µs of client CPU per query);
sync psycopg in worker threads at 0.5–0.75× of that; trio-asyncio bridging at 0.3×. The
native variant also behaves best under cancellation. So that is the default.

psycopg does all of its protocol work in generators (``psycopg.generators``) that yield
"wait until the socket is readable/writable" and are resumed with "it is". A
connection's ``wait()`` method is the single place where those generators meet an event
loop, and ``connection.lock`` is the only other asyncio object on the query path. The
native driver subclasses :class:`psycopg.AsyncConnection` and replaces exactly those two:
``wait()`` waits with trio, and the lock is an owner-less trio lock. Query conversion,
adaptation, prepared statements and result parsing stay psycopg's own code. Connecting
(psycopg's async ``connect`` uses asyncio) and server-side cancellation drive psycopg's
connection generators the same way.

This module is the only place that touches psycopg internals. They are listed in
:data:`INTERNALS`, psycopg is pinned to ``>=3.3,<3.4``, :func:`internals_problems` checks
the names and signatures at import, and ``tests/postgres/test_driver.py`` fails loudly
when any of them changes. Outside the tested range (or when the internals changed, or
with ``ALKSTORE_PG_DRIVER=thread``) :func:`connect` falls back, with a warning, to the
*thread driver*: psycopg's public sync API in worker threads behind a cancel-aware
wrapper. Both drivers implement the same :class:`Connection`.

Cancellation
------------
When trio cancels an operation whose statement is running on the server, the driver
cancels the statement on the server, waits up to :data:`CANCEL_GRACE_S` for the
connection to become idle, and closes the connection if it did not: a connection is
never left half-way through a statement. ``Ctrl-C`` takes the same path and arrives as a
plain :class:`KeyboardInterrupt`. (Never run ``cursor.execute`` in a bare
``trio.to_thread.run_sync``: it ignores cancellation until the statement ends.)

Errors
------
Operations raise psycopg's own exceptions (:class:`psycopg.Error` subclasses). When the
connection can no longer be used they raise :class:`ConnectionBroken` (itself a
:class:`psycopg.OperationalError`) and the connection is closed: discard it. A
:class:`psycopg.errors.QueryCanceled` or any other error with ``closed`` still false
leaves the connection usable.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import socket
import threading
import warnings
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    Generic,
    Literal,
    NoReturn,
    Self,
    TypeAlias,
    TypeVar,
    final,
)

import outcome
import psycopg
import psycopg.conninfo
import trio
from psycopg import capabilities, pq
from psycopg import sql as pgsql
from psycopg.waiting import Ready, Wait

from ..._errors import InvalidArgument

if TYPE_CHECKING:
    from types import TracebackType

    from psycopg.abc import PQGen, PQGenConn

__all__ = [
    "CANCEL_GRACE_S",
    "DRIVER",
    "DRIVER_ENV_VAR",
    "INTERNALS",
    "PREPARE_THRESHOLD",
    "Connection",
    "ConnectionBroken",
    "Notify",
    "Params",
    "connect",
    "connect_native",
    "connect_threaded",
    "internals_problems",
    "select_driver",
]

logger = logging.getLogger("alkstore_trio.postgres")

RV = TypeVar("RV")
T = TypeVar("T")

Notify: TypeAlias = psycopg.Notify
"""A notification: ``channel``, ``payload`` and the ``pid`` of the notifying backend."""

Params: TypeAlias = Sequence[object] | Mapping[str, object]
"""Values for a statement's ``%s`` (sequence) or ``%(name)s`` (mapping) placeholders."""

#: Seconds a cancelled statement gets to stop (server-side cancel, then the connection
#: must be idle) before the connection is closed instead.
CANCEL_GRACE_S: Final = 1.0
#: Seconds a rollback after a failed or cancelled transaction block may take before the
#: connection is closed instead.
ROLLBACK_TIMEOUT_S: Final = 2.0
#: A statement is prepared on the server from its second execution on (psycopg counts
#: per connection and keeps at most 100 prepared statements).
PREPARE_THRESHOLD: Final = 1
#: The psycopg versions the native driver is tested with: ``>=3.3,<3.4``.
SUPPORTED_PSYCOPG: Final = ((3, 3), (3, 4))
#: ``auto`` (default): the native driver when supported, else the thread driver with a
#: warning. ``thread``: always the thread driver.
DRIVER_ENV_VAR: Final = "ALKSTORE_PG_DRIVER"

#: The psycopg internals the native driver relies on, in words (checked by
#: :func:`internals_problems` and by the tests).
INTERNALS: Final = (
    "AsyncConnection.wait(gen, interval, timeout): the I/O choke point, overridden",
    "AsyncConnection.lock: replaced by an owner-less trio lock after __init__",
    "AsyncCursor.execute and AsyncConnection.set_autocommit do I/O only through "
    "self.lock and self.wait()",
    "AsyncConnection._connect_gen(conninfo): the connection generator, driven by trio",
    "BaseConnection._cancel_gen(): the non-blocking server-side cancel generator",
    "psycopg.waiting.Wait / Ready: R=1, W=2, RW=3 (Ready.NONE=0)",
    "psycopg.conninfo.conninfo_attempts(params): one attempt per host and address",
)

_WAIT_R: Final = Wait.R
_WAIT_W: Final = Wait.W
_READY_R: Final = Ready.R
_READY_W: Final = Ready.W
_OK: Final = pq.ConnStatus.OK
_TUPLES_OK: Final = pq.ExecStatus.TUPLES_OK
_IDLE: Final = pq.TransactionStatus.IDLE
_ACTIVE: Final = pq.TransactionStatus.ACTIVE
_INTRANS: Final = pq.TransactionStatus.INTRANS
_INERROR: Final = pq.TransactionStatus.INERROR
#: SQLSTATEs after which the server has ended (or is ending) the session: class 08
#: (connection exception) and admin/crash shutdown, "cannot connect now".
_DISCONNECT_SQLSTATES: Final = frozenset({"57P01", "57P02", "57P03"})


class ConnectionBroken(psycopg.OperationalError):
    """Raised by every :class:`Connection` operation when the connection can no longer
    be used: the server or the network ended the session (``pg_terminate_backend``, a
    restart, a lost link), a cancelled statement did not stop within
    :data:`CANCEL_GRACE_S`, or the connection was closed with :meth:`Connection.aclose`.

    The connection is closed when this is raised: discard it (the pool does). The
    original psycopg error, if any, is the ``__cause__``. Unlike other
    :class:`psycopg.OperationalError` subclasses such as
    :class:`psycopg.errors.QueryCanceled`, which leave the connection usable, this one
    always means "open a new connection". The statement that raised it may or may not
    have taken effect.
    """


# -- the interface ------------------------------------------------------------------


class Connection(ABC):
    """One PostgreSQL session in autocommit mode, driven by trio. Made by :func:`connect`.

    Every statement runs in its own transaction unless it runs inside
    :meth:`transaction`. Operations on one connection are serialized (a second task
    waits for the first); :meth:`wait_notifies` holds the connection while it waits, so
    use a dedicated connection for listening. Use it as ``async with await connect(...)
    as conn:`` or call :meth:`aclose`.
    """

    # -- state (never blocks) --

    @property
    @abstractmethod
    def backend_pid(self) -> int:
        """The server process id of this session (``pg_stat_activity.pid``)."""

    @property
    @abstractmethod
    def closed(self) -> bool:
        """Whether the connection can no longer be used (closed by us or broken)."""

    @property
    @abstractmethod
    def broken(self) -> bool:
        """Whether the connection was lost, not closed with :meth:`aclose`."""

    @property
    @abstractmethod
    def transaction_status(self) -> pq.TransactionStatus:
        """``IDLE``, ``INTRANS`` (in a transaction), ``INERROR`` (in a failed
        transaction), ``ACTIVE`` (a statement is running) or ``UNKNOWN`` (closed)."""

    # -- operations --

    @abstractmethod
    async def execute(
        self, query: str | bytes, params: Params | None = None
    ) -> list[tuple[Any, ...]]:
        """Run one statement and return all of its rows.

        Args:
            query: One SQL statement. With ``params``, its placeholders are psycopg's
                ``%s`` (sequence) or ``%(name)s`` (mapping), sent to the server as
                ``$n`` parameters (never interpolated); a literal ``%`` is then ``%%``.
            params: The values, or ``None`` for a statement without parameters.

        Returns:
            The rows as tuples, or ``[]`` for a statement that returns none.

        Raises:
            ConnectionBroken: the connection can no longer be used (it is closed).
            psycopg.Error: the statement failed; the connection is still usable.
        """

    @abstractmethod
    async def executescript(self, script: str | bytes) -> None:
        """Run several ``;``-separated statements without parameters (e.g. DDL).

        They run in one implicit transaction unless the script contains its own
        ``BEGIN``/``COMMIT``. Never prepared on the server.

        Raises:
            ConnectionBroken: the connection can no longer be used (it is closed).
            psycopg.Error: a statement failed; the connection is still usable.
        """

    @abstractmethod
    async def wait_notifies(self, timeout_s: float | None) -> list[Notify]:
        """Wait for notifications on the channels this session listens on.

        Notifications that arrived earlier (also during :meth:`execute`) are returned
        at once; otherwise this waits on the socket (no polling) until at least one
        arrives.

        Args:
            timeout_s: Seconds to wait at most (``0`` polls once), or ``None`` to wait
                until a notification arrives.

        Returns:
            Every notification received so far, oldest first; ``[]`` on timeout.

        Raises:
            ConnectionBroken: the connection can no longer be used (it is closed).
            InvalidArgument: ``timeout_s`` is negative or not a number.
        """

    @abstractmethod
    async def aclose(self) -> None:
        """Close the connection. Idempotent; never blocks on the server for long.

        A task waiting in :meth:`wait_notifies` on this connection is woken with
        :class:`ConnectionBroken`.
        """

    @abstractmethod
    def _discard(self) -> None:
        """Close the connection now, without waiting (no operation may be running)."""

    # -- built on the operations --

    async def listen(self, channels: str | Iterable[str]) -> None:
        """``LISTEN`` on each channel (names are quoted: any string is a valid name)."""
        names = _channel_names(channels)
        if not names:
            await trio.lowlevel.checkpoint()
            return
        await self.executescript(
            "; ".join(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(n)).as_string() for n in names)
        )

    async def unlisten(self, channels: str | Iterable[str] | None = None) -> None:
        """``UNLISTEN`` each channel, or every channel when ``channels`` is ``None``."""
        if channels is None:
            await self.executescript("UNLISTEN *")
            return
        names = _channel_names(channels)
        if not names:
            await trio.lowlevel.checkpoint()
            return
        await self.executescript(
            "; ".join(
                pgsql.SQL("UNLISTEN {}").format(pgsql.Identifier(n)).as_string() for n in names
            )
        )

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """Run the ``async with`` block in one transaction (explicit ``BEGIN``/``COMMIT``).

        The block commits when it ends normally. When it raises (an error, a
        cancellation, ``KeyboardInterrupt``) the transaction is rolled back, shielded
        from the cancellation, and the exception propagates; if the rollback cannot
        finish within :data:`ROLLBACK_TIMEOUT_S` the connection is closed instead, so it
        is never left inside a transaction. A commit that fails rolls back the same way;
        a cancelled commit may or may not have committed. Not nestable.

        Raises:
            psycopg.ProgrammingError: the connection is already in a transaction.
        """
        status = self.transaction_status
        if status != _IDLE and not self.closed:
            await trio.lowlevel.checkpoint()
            raise psycopg.ProgrammingError(
                "transaction() needs an idle connection; it is in transaction status "
                f"{status.name} (transaction() blocks do not nest)"
            )
        await self.executescript(b"BEGIN")
        try:
            yield
            await self.executescript(b"COMMIT")
        except BaseException:
            await self._end_failed_transaction()
            raise

    async def _end_failed_transaction(self) -> None:
        """Roll back after a failed or cancelled block, or close the connection."""
        with trio.CancelScope(shield=True):
            if self.closed or self._idle():
                return
            if self.transaction_status in (_INTRANS, _INERROR):
                with trio.move_on_after(ROLLBACK_TIMEOUT_S), contextlib.suppress(psycopg.Error):
                    await self.executescript(b"ROLLBACK")
                if self._idle():
                    return
            logger.warning("rollback did not complete: closing the connection")
            await self.aclose()

    async def __aenter__(self) -> Self:
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- helpers for the drivers --

    def _broken_instead(self, exc: psycopg.Error) -> ConnectionBroken | None:
        """The :class:`ConnectionBroken` to raise instead of ``exc`` (closing the
        connection), or ``None`` when the connection is still usable."""
        if isinstance(exc, ConnectionBroken):
            return exc
        sqlstate = exc.sqlstate or ""
        if not (self.closed or sqlstate.startswith("08") or sqlstate in _DISCONNECT_SQLSTATES):
            return None
        self._discard()
        return ConnectionBroken(f"the connection is broken and was closed: {exc}")

    def _idle(self) -> bool:
        return not self.closed and self.transaction_status == _IDLE

    def _check_usable(self) -> None:
        if self.closed:
            raise ConnectionBroken("the connection is closed")


def _has_rows(result: pq.abc.PGresult | None) -> bool:
    """Whether a statement's result is a row set (``SELECT``, ``... RETURNING``)."""
    return result is not None and result.status == _TUPLES_OK


def _channel_names(channels: str | Iterable[str]) -> list[str]:
    names = [channels] if isinstance(channels, str) else list(channels)
    for name in names:
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"channels must be non-empty strings; got {name!r}")
    return names


def _deadline(timeout_s: float | None) -> float:
    """The trio deadline of a ``timeout_s`` argument (``None``: no deadline)."""
    if timeout_s is None:
        return math.inf
    if not isinstance(timeout_s, int | float) or not timeout_s >= 0:
        raise InvalidArgument(f"timeout_s must be a number >= 0 or None; got {timeout_s!r}")
    return trio.current_time() + timeout_s


def _check_connect_timeout(connect_timeout_s: float) -> None:
    if not isinstance(connect_timeout_s, int | float) or not 0 < connect_timeout_s < math.inf:
        raise InvalidArgument(
            f"connect_timeout_s must be a finite number of seconds > 0; got {connect_timeout_s!r}"
        )


class _Lock:
    """A FIFO lock without an owner, standing in for psycopg's ``connection.lock``.

    :class:`trio.Lock` must be released by the task that acquired it, but psycopg holds
    ``connection.lock`` across the yields of an async generator (``notifies()``), which
    may be finalized by another task. Releasing hands the lock straight to the first
    waiter, so nobody can barge in. Acquiring an unlocked lock does not yield: the I/O
    that follows is the operation's checkpoint.
    """

    __slots__ = ("_locked", "_waiters")

    def __init__(self) -> None:
        self._locked = False
        self._waiters = trio.lowlevel.ParkingLot()

    async def __aenter__(self) -> None:
        if self._locked:
            await self._waiters.park()  # woken as the new holder
        else:
            self._locked = True

    async def __aexit__(self, *exc_info: object) -> None:
        if self._waiters:
            self._waiters.unpark()
        else:
            self._locked = False


# -- the native driver: psycopg's AsyncConnection on trio ------------------------------


async def _wait_socket(fileno: int, wait: int) -> Ready:
    """Wait until ``fileno`` is ready as a psycopg generator asked (``Wait.R/W/RW``)."""
    if wait == _WAIT_R:
        await trio.lowlevel.wait_readable(fileno)
        return _READY_R
    if wait == _WAIT_W:
        await trio.lowlevel.wait_writable(fileno)
        return _READY_W
    # Wait.RW: only while a large query does not fit the socket buffer (rare).
    ready = 0

    async def wait_for(waiter: Callable[[int], Any], flag: int, scope: trio.CancelScope) -> None:
        nonlocal ready
        await waiter(fileno)
        ready |= flag
        scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_for, trio.lowlevel.wait_readable, _READY_R, nursery.cancel_scope)
        nursery.start_soon(wait_for, trio.lowlevel.wait_writable, _READY_W, nursery.cancel_scope)
    return Ready(ready)


async def _drive_conn_gen(gen: PQGenConn[RV]) -> RV:
    """Run a psycopg generator that yields ``(fileno, Wait)`` (connect, cancel)."""
    try:
        fileno, wait = next(gen)
        while True:
            fileno, wait = gen.send(await _wait_socket(fileno, wait))
    except StopIteration as done:
        result: RV = done.value
        return result
    finally:
        gen.close()  # on cancellation: frees the half-open libpq connection


def _finish_pgconn(pgconn: pq.abc.PGconn) -> None:
    """Close a libpq connection now, waking any trio task waiting on its socket."""
    with contextlib.suppress(psycopg.OperationalError):
        trio.lowlevel.notify_closing(pgconn.socket)  # raises once the socket is gone
    pgconn.finish()


class _TrioPsycopgConnection(psycopg.AsyncConnection[tuple[Any, ...]]):
    """psycopg's async connection with its asyncio touch points replaced by trio."""

    def __init__(self, pgconn: pq.abc.PGconn, *args: Any, **kwargs: Any) -> None:
        super().__init__(pgconn, *args, **kwargs)
        self.lock = _Lock()  # type: ignore[assignment]

    # psycopg's signature, kept for the override; a timeout is refused below.
    async def wait(
        self,
        gen: PQGen[RV],
        interval: float = 0.0,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> RV:
        """Consume a psycopg generator, waiting for the socket with trio.

        Args:
            gen: The generator; it yields a ``Wait`` whenever it would block.
            interval: Ignored (trio needs no wake-ups to notice ``Ctrl-C``).
            timeout: Must be ``None``: bound waits with trio cancel scopes instead.
        """
        if timeout is not None:
            raise NotImplementedError("the trio driver bounds waits with cancel scopes")
        fileno = self.pgconn.socket
        try:
            wait = next(gen)
            while True:
                try:
                    ready = await _wait_socket(fileno, wait)
                except trio.ClosedResourceError as exc:
                    raise psycopg.OperationalError(
                        "the connection was closed while in use"
                    ) from exc
                except BaseException:
                    await self._stop_statement(gen, fileno, wait)
                    raise
                wait = gen.send(ready)
        except StopIteration as done:
            result: RV = done.value
            return result

    async def _stop_statement(self, gen: PQGen[Any], fileno: int, wait: int) -> None:
        """After an interruption, cancel the running statement on the server and let
        ``gen`` read its end; close the connection if that fails or takes too long.

        Shielded from the cancellation being handled; a second ``Ctrl-C`` closes the
        connection at once.
        """
        if self.pgconn.transaction_status != _ACTIVE:
            return  # nothing runs on the server (e.g. interrupted while idle)
        try:
            with trio.CancelScope(shield=True, deadline=trio.current_time() + CANCEL_GRACE_S):
                try:
                    await self._send_cancel()
                    while True:
                        wait = gen.send(await _wait_socket(fileno, wait))
                except StopIteration:
                    pass  # the statement ended before the cancel request arrived
                except psycopg.Error:
                    pass  # QueryCanceled, as expected (or another error ended it)
        finally:
            if self.pgconn.transaction_status == _ACTIVE:
                logger.warning(
                    "statement not stopped within %s s of its cancellation: closing the connection",
                    CANCEL_GRACE_S,
                )
                _finish_pgconn(self.pgconn)

    async def _send_cancel(self) -> None:
        if capabilities.has_cancel_safe():
            await _drive_conn_gen(self._cancel_gen())
        else:  # libpq < 17: the blocking cancel, in a thread
            await trio.to_thread.run_sync(self.cancel, abandon_on_cancel=True)


@final
class _NativeConnection(Connection):
    """:class:`Connection` on psycopg's AsyncConnection driven by trio."""

    def __init__(self, conn: _TrioPsycopgConnection) -> None:
        self._conn = conn
        self._pgconn = conn.pgconn
        self._cursor = conn.cursor()
        self._backend_pid = conn.info.backend_pid
        self._closed_by_us = False
        self._notified: deque[Notify] = deque()
        conn.add_notify_handler(self._notified.append)

    @property
    def backend_pid(self) -> int:
        return self._backend_pid

    @property
    def closed(self) -> bool:
        return self._pgconn.status != _OK

    @property
    def broken(self) -> bool:
        return self.closed and not self._closed_by_us

    @property
    def transaction_status(self) -> pq.TransactionStatus:
        return pq.TransactionStatus(self._pgconn.transaction_status)

    async def execute(
        self, query: str | bytes, params: Params | None = None
    ) -> list[tuple[Any, ...]]:
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_usable()
        cursor = self._cursor
        try:
            await cursor.execute(query, params)
            result = cursor.pgresult
            return await cursor.fetchall() if _has_rows(result) else []
        except psycopg.Error as exc:
            if (broken := self._broken_instead(exc)) is not None:
                raise broken from exc
            raise

    async def executescript(self, script: str | bytes) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_usable()
        try:
            await self._cursor.execute(script, prepare=False)
        except psycopg.Error as exc:
            if (broken := self._broken_instead(exc)) is not None:
                raise broken from exc
            raise

    async def wait_notifies(self, timeout_s: float | None) -> list[Notify]:
        deadline = _deadline(timeout_s)
        await trio.lowlevel.checkpoint_if_cancelled()
        async with self._conn.lock:
            self._check_usable()
            try:
                with trio.CancelScope(deadline=deadline):
                    self._read_notifies()
                    while not self._notified:
                        await trio.lowlevel.wait_readable(self._pgconn.socket)
                        self._read_notifies()
            except psycopg.Error as exc:
                if (broken := self._broken_instead(exc)) is not None:
                    raise broken from exc
                raise
            except trio.ClosedResourceError as exc:
                raise ConnectionBroken("the connection was closed while waiting") from exc
            notifies = list(self._notified)
            self._notified.clear()
        await trio.lowlevel.cancel_shielded_checkpoint()
        return notifies

    def _read_notifies(self) -> None:
        """Read what the socket holds, without blocking, and keep the notifications."""
        pgconn = self._pgconn
        pgconn.consume_input()
        encoding = None
        while (pgn := pgconn.notifies()) is not None:
            encoding = encoding or self._conn.info.encoding
            self._notified.append(
                Notify(pgn.relname.decode(encoding), pgn.extra.decode(encoding), pgn.be_pid)
            )

    async def aclose(self) -> None:
        if not self._closed_by_us:
            self._closed_by_us = True
            self._discard()
        await trio.lowlevel.cancel_shielded_checkpoint()

    def _discard(self) -> None:
        _finish_pgconn(self._pgconn)


def _native_unsupported() -> str | None:
    """Why the native driver cannot run with the installed psycopg, or ``None``."""
    version = _version_tuple(psycopg.__version__)
    low, high = SUPPORTED_PSYCOPG
    if not low <= version < high:
        return (
            f"psycopg {psycopg.__version__} is outside the range the native trio driver is "
            f"tested with (>={low[0]}.{low[1]},<{high[0]}.{high[1]})"
        )
    problems = internals_problems()
    if problems:
        return "psycopg internals changed: " + "; ".join(problems)
    return None


async def connect_native(
    conninfo: str, *, connect_timeout_s: float, application_name: str
) -> Connection:
    """Open a connection with the native driver (see :func:`connect`).

    Raises:
        RuntimeError: the installed psycopg is not supported by the native driver.
    """
    _check_connect_timeout(connect_timeout_s)
    if (why := _native_unsupported()) is not None:
        raise RuntimeError(f"the native driver cannot run: {why}")
    params = psycopg.conninfo.conninfo_to_dict(conninfo, application_name=application_name)
    with trio.move_on_after(connect_timeout_s):
        # One attempt per host and resolved address; DNS in a thread (as trio does).
        attempts = await trio.to_thread.run_sync(
            psycopg.conninfo.conninfo_attempts, params, abandon_on_cancel=True
        )
        failures: list[tuple[psycopg.Error, str]] = []
        for attempt in attempts:
            where = f"host {attempt.get('host')!r}, port {attempt.get('port')!r}"
            try:
                conn = await _drive_conn_gen(
                    _TrioPsycopgConnection._connect_gen(
                        psycopg.conninfo.make_conninfo("", **attempt)
                    )
                )
            except psycopg.Error as exc:
                failures.append((exc, where))
                continue
            return await _setup_native(conn)
        raise _connect_error(failures)
    raise psycopg.errors.ConnectionTimeout(
        f"connection timeout expired: not connected within {connect_timeout_s} s"
    )


async def _setup_native(conn: _TrioPsycopgConnection) -> Connection:
    try:
        await conn.set_autocommit(True)  # no I/O: the session is idle
        conn.prepare_threshold = PREPARE_THRESHOLD
        return _NativeConnection(conn)
    except BaseException:
        _finish_pgconn(conn.pgconn)
        raise


def _connect_error(failures: list[tuple[psycopg.Error, str]]) -> psycopg.Error:
    last = failures[-1][0]
    if len(failures) == 1:
        return last
    lines = [str(last), "Multiple connection attempts failed. All failures were:"]
    lines += [f"- {where}: {exc}" for exc, where in failures]
    return type(last)("\n".join(lines))


# -- the thread driver: psycopg's public sync API in worker threads ------------------


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
        self, query: str | bytes, params: Params | None = None
    ) -> list[tuple[Any, ...]]:
        cursor = self._cursor

        def run() -> list[tuple[Any, ...]]:
            cursor.execute(query, params)
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


# -- choosing the driver --------------------------------------------------------------


def _version_tuple(version: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def internals_problems() -> list[str]:
    """Check the names and signatures of the psycopg internals in :data:`INTERNALS`.

    Returns:
        One line per problem; ``[]`` when everything the native driver uses is there.
    """
    import inspect

    problems: list[str] = []

    def expect(owner: object, name: str, parameters: list[str]) -> None:
        where = f"{getattr(owner, '__name__', owner)}.{name}"
        function = getattr(owner, name, None)
        if function is None:
            problems.append(f"{where} is missing")
            return
        try:
            found = list(inspect.signature(function).parameters)
        except (TypeError, ValueError):
            problems.append(f"{where} has no inspectable signature")
            return
        if found != parameters:
            problems.append(f"{where} takes {found}, expected {parameters}")

    expect(psycopg.AsyncConnection, "wait", ["self", "gen", "interval", "timeout"])
    expect(psycopg.AsyncConnection, "_connect_gen", ["conninfo"])
    expect(psycopg.AsyncConnection, "_cancel_gen", ["self"])
    expect(psycopg.AsyncConnection, "set_autocommit", ["self", "value"])
    expect(psycopg.conninfo, "conninfo_attempts", ["params"])
    if {m.name: int(m) for m in Wait} != {"R": 1, "W": 2, "RW": 3}:
        problems.append(f"psycopg.waiting.Wait changed: {list(Wait)}")
    if {m.name: int(m) for m in Ready} != {"NONE": 0, "R": 1, "W": 2, "RW": 3}:
        problems.append(f"psycopg.waiting.Ready changed: {list(Ready)}")
    return problems


def select_driver(
    requested: str | None, unsupported_because: str | None
) -> tuple[Literal["native", "thread"], str | None]:
    """Pick the driver :func:`connect` uses.

    Args:
        requested: The value of ``ALKSTORE_PG_DRIVER``: ``None``, ``""`` or ``"auto"``
            for the native driver when supported, ``"thread"`` for the thread driver.
        unsupported_because: Why the native driver cannot run, or ``None``.

    Returns:
        The driver, and the warning to give (or ``None``).

    Raises:
        InvalidArgument: ``requested`` is none of the values above.
    """
    choice = (requested or "auto").strip().lower()
    if choice == "thread":
        return "thread", None
    if choice != "auto":
        raise InvalidArgument(
            f"{DRIVER_ENV_VAR} must be 'auto' or 'thread'; got {requested!r}: "
            "unset it to use the native driver when supported"
        )
    if unsupported_because is None:
        return "native", None
    return "thread", (
        f"{unsupported_because}: alkstore_trio falls back to the slower thread driver "
        "(psycopg's sync API in worker threads); install psycopg>=3.3,<3.4"
    )


DRIVER: Literal["native", "thread"]
_warning: str | None
DRIVER, _warning = select_driver(os.environ.get(DRIVER_ENV_VAR), _native_unsupported())
if _warning is not None:
    warnings.warn(_warning, RuntimeWarning, stacklevel=2)


async def connect(conninfo: str, *, connect_timeout_s: float, application_name: str) -> Connection:
    """Open a connection in autocommit mode with the driver chosen at import (:data:`DRIVER`).

    Args:
        conninfo: A libpq connection string or ``postgresql://`` URL. Every host and
            resolved address in it is tried in turn.
        connect_timeout_s: The whole connect (name resolution and every attempt) must
            finish within this many seconds.
        application_name: Shown in ``pg_stat_activity.application_name``; overrides one
            in ``conninfo``.

    Returns:
        The connection; statements executed twice or more are prepared on the server
        (:data:`PREPARE_THRESHOLD`).

    Raises:
        psycopg.errors.ConnectionTimeout: not connected within ``connect_timeout_s``.
        psycopg.OperationalError: the server refused or could not be reached (every
            attempt is listed in the message).
        psycopg.ProgrammingError: ``conninfo`` is malformed.
        InvalidArgument: ``connect_timeout_s`` is not a finite number > 0.
    """
    if DRIVER == "native":
        return await connect_native(
            conninfo, connect_timeout_s=connect_timeout_s, application_name=application_name
        )
    return await connect_threaded(
        conninfo, connect_timeout_s=connect_timeout_s, application_name=application_name
    )
