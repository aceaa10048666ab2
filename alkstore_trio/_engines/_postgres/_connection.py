"""The driver's interface: :class:`Connection`, one PostgreSQL session driven by trio,
and :class:`ConnectionBroken`, the one exception that means "discard this connection".

:mod:`._native` and :mod:`._threaded` implement it; :mod:`._driver` chooses between them
(and explains why there are two).

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
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    Self,
    TypeAlias,
    TypeVar,
)

import psycopg
import psycopg.conninfo
import trio
from psycopg import pq
from psycopg import sql as pgsql
from psycopg.waiting import Ready, Wait

from ..._errors import InvalidArgument

if TYPE_CHECKING:
    from types import TracebackType


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
        self, query: str | bytes, params: Params | None = None, *, binary: bool = False
    ) -> list[tuple[Any, ...]]:
        """Run one statement and return all of its rows.

        Args:
            query: One SQL statement. With ``params``, its placeholders are psycopg's
                ``%s`` (sequence) or ``%(name)s`` (mapping), sent to the server as
                ``$n`` parameters (never interpolated); a literal ``%`` is then ``%%``.
            params: The values, or ``None`` for a statement without parameters.
            binary: Ask for the results in binary format (a bytea arrives as its bytes,
                not as hex text twice their size).

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
