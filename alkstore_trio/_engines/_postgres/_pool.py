"""A small trio-native bounded connection pool, generic over the driver.

``open_pool`` gives a :class:`Pool`; ``async with pool.connection() as conn`` lends one
connection for the block. The pool holds at most ``size`` connections, made lazily. A
task that finds every connection lent out waits, first come first served; a returned
connection goes straight to the longest waiter, so nobody can barge in.

Why the accounting is by *slots*: a borrower first takes one of ``size`` slots (waiting
in line if there is none), then an idle connection or, when there is none, a new one.
A connection is only ever made by a slot holder that found no idle connection, so idle
and lent connections together never exceed ``size``.

What happens to a returned connection depends on its state: idle → kept for reuse;
inside a transaction → rolled back, then kept; in a failed or unknown transaction state,
or closed (broken) → closed and counted as a *discard*. Returning is shielded from
cancellation, so neither a cancelled borrower nor a cancelled waiter leaks a connection
or a slot.

Health check: a connection that sat idle longer than ``health_check_after_s`` is pinged
with ``SELECT 1`` before it is lent. Checking only the local connection status costs
nothing but cannot see a session the server ended while it was idle (that takes a read
from the socket); the ping costs one round trip (measured: 70–110 µs on a local
server), paid at most once per idle period, so the pool pings. A broken connection that
escapes the check raises :class:`~._driver.ConnectionBroken` in the borrower and is
discarded when returned.

Connecting retries with capped exponential backoff (:data:`BACKOFF_INITIAL_S` doubling
up to :data:`BACKOFF_MAX_S`) and gives up after ``connect_timeout_s`` of failure with an
:class:`~alkstore_trio.EngineError` naming the last cause. Only transient failures are
retried: an answer that waiting cannot change (an unknown database or role, a failed
authentication, a host that does not resolve; a refused connection before the pool ever
connected) fails at once, and a malformed DSN is an
:class:`~alkstore_trio.InvalidArgument` (see :mod:`._dsn`).
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar, final, overload

import psycopg
import trio
from psycopg import pq

from ..._errors import InvalidArgument
from . import _driver, _dsn

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Sequence

    from ._driver import Params

__all__ = [
    "BACKOFF_INITIAL_S",
    "BACKOFF_MAX_S",
    "HEALTH_CHECK_AFTER_S",
    "ConnectFn",
    "Pool",
    "PoolClosed",
    "PoolConnection",
    "PoolStatistics",
    "open_pool",
]

#: First pause between two failed connection attempts; it doubles after each failure.
BACKOFF_INITIAL_S: Final = 0.05
#: Longest pause between two failed connection attempts.
BACKOFF_MAX_S: Final = 2.0
#: Default for ``health_check_after_s``.
HEALTH_CHECK_AFTER_S: Final = 30.0
#: Seconds a rollback of a returned connection may take before it is discarded instead.
ROLLBACK_TIMEOUT_S: Final = 2.0

_IDLE: Final = pq.TransactionStatus.IDLE
_INTRANS: Final = pq.TransactionStatus.INTRANS


class PoolClosed(trio.ClosedResourceError):
    """Raised by :meth:`Pool.connection` when the pool is closed, also to the tasks that
    were waiting for a connection when it closed.

    A :class:`trio.ClosedResourceError`: the pool, not the database, is gone. Unlike a
    failure to connect (an :class:`~alkstore_trio.EngineError`), retrying
    on this pool cannot help.
    """


class PoolConnection(Protocol):
    """What the pool needs from a driver's connection (:class:`~._driver.Connection`
    has it)."""

    @property
    def closed(self) -> bool:
        """Whether the connection can no longer be used."""
        ...

    @property
    def transaction_status(self) -> pq.TransactionStatus:
        """The libpq transaction status."""
        ...

    async def execute(
        self, query: str | bytes, params: Params | None = None
    ) -> Sequence[tuple[Any, ...]]:
        """Run one statement."""
        ...

    async def aclose(self) -> None:
        """Close the connection."""
        ...


C = TypeVar("C", bound=PoolConnection)
C_co = TypeVar("C_co", bound=PoolConnection, covariant=True)


class ConnectFn(Protocol[C_co]):
    """A driver's connect function, like :func:`~._driver.connect`."""

    def __call__(
        self, conninfo: str, *, connect_timeout_s: float, application_name: str
    ) -> Awaitable[C_co]:
        """Open one connection."""
        ...


@dataclass(frozen=True)
class PoolStatistics:
    """A snapshot of a :class:`Pool`, from :meth:`Pool.statistics`."""

    size: int
    """The most connections the pool holds (idle and lent together)."""
    idle: int
    """Connections ready to lend."""
    in_use: int
    """Connections lent out right now."""
    waiting: int
    """Tasks waiting for a connection because all ``size`` slots are taken."""
    connects: int
    """Connections made since the pool opened."""
    connect_errors: int
    """Failed connection attempts since the pool opened (each retry counts)."""
    discards: int
    """Connections closed because they were broken, in a failed or unknown transaction
    state, failed their health check or could not be rolled back."""


@final
class Pool(Generic[C]):
    """A bounded pool of connections, made by :func:`open_pool`. Not constructed
    directly."""

    def __init__(
        self,
        connect: ConnectFn[C],
        conninfo: str,
        *,
        size: int,
        connect_timeout_s: float,
        application_name: str,
        health_check_after_s: float,
    ) -> None:
        self._connect = connect
        self._conninfo = conninfo
        self._size = size
        self._connect_timeout_s = connect_timeout_s
        self._application_name = application_name
        self._health_check_after_s = health_check_after_s
        self._idle: deque[tuple[C, float]] = deque()  # (connection, idle since), LIFO
        self._free_slots = size
        self._waiters = trio.lowlevel.ParkingLot()
        self._in_use = 0
        self._connects = 0
        self._connect_errors = 0
        self._discards = 0
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` was called (the ``open_pool`` block ended)."""
        return self._closed

    def statistics(self) -> PoolStatistics:
        """A snapshot of the pool's counters (never blocks)."""
        return PoolStatistics(
            size=self._size,
            idle=len(self._idle),
            in_use=self._in_use,
            waiting=len(self._waiters),
            connects=self._connects,
            connect_errors=self._connect_errors,
            discards=self._discards,
        )

    def connection(self) -> AbstractAsyncContextManager[C]:
        """Borrow a connection for the ``async with`` block.

        Waits (first come, first served) while all ``size`` connections are lent out.
        The connection returns to the pool when the block ends, however it ends.

        Raises:
            PoolClosed: the pool is closed, or closed while waiting.
            EngineError: no connection could be made: at once for a permanent failure,
                else after ``connect_timeout_s`` (the cause is named; the original
                error is the ``__cause__``).
            InvalidArgument: the DSN is malformed.
        """
        return _Lease(self)

    async def aclose(self) -> None:
        """Close the pool: waiting tasks raise :class:`PoolClosed`, idle connections are
        closed now and lent ones when they come back. Idempotent."""
        if not self._closed:
            self._closed = True
            self._waiters.unpark_all()
            idle = [conn for conn, _ in self._idle]
            self._idle.clear()
            with trio.CancelScope(shield=True):
                for conn in idle:
                    await conn.aclose()
        await trio.lowlevel.cancel_shielded_checkpoint()

    # -- slots --

    async def _take_slot(self) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        if self._free_slots and not self._waiters:
            # No yield here: the statement the borrower runs next is the checkpoint
            # (a yield per borrow cost about as much client CPU as the driver itself).
            self._free_slots -= 1
            return
        await self._waiters.park()  # woken holding the slot of the task that woke us
        if self._closed:
            raise PoolClosed("the connection pool was closed while waiting for a connection")

    def _give_slot(self) -> None:
        if self._waiters and not self._closed:
            self._waiters.unpark()
        else:
            self._free_slots += 1

    def _check_open(self) -> None:
        if self._closed:
            raise PoolClosed("the connection pool is closed")

    # -- lending --

    async def _acquire(self) -> C:
        await self._take_slot()
        try:
            conn = await self._idle_or_new()
        except BaseException:
            self._give_slot()
            raise
        self._in_use += 1
        return conn

    async def _idle_or_new(self) -> C:
        while self._idle:
            conn, idle_since = self._idle.pop()
            if conn.closed:
                await self._discard(conn)
                continue
            fresh = trio.current_time() - idle_since < self._health_check_after_s
            if fresh or await self._healthy(conn):
                return conn
        return await self._open_connection()

    async def _healthy(self, conn: C) -> bool:
        """Ping a connection that sat idle for long; discard it if that fails."""
        ok = False
        try:
            # A failed ping is the answer, not an error to report.
            with trio.move_on_after(self._connect_timeout_s), contextlib.suppress(Exception):
                await conn.execute("SELECT 1")
                ok = not conn.closed and conn.transaction_status == _IDLE
        finally:
            if not ok:
                await self._discard(conn)
        return ok

    async def _open_connection(self) -> C:
        """Connect, retrying with capped exponential backoff for ``connect_timeout_s``."""
        deadline = trio.current_time() + self._connect_timeout_s
        delay = BACKOFF_INITIAL_S
        while True:
            self._check_open()
            try:
                conn = await self._connect(
                    self._conninfo,
                    connect_timeout_s=max(deadline - trio.current_time(), 1e-3),
                    application_name=self._application_name,
                )
            except Exception as exc:
                self._connect_errors += 1
                self._give_up_now(exc, deadline - trio.current_time() <= delay)
                await trio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)
                continue
            self._connects += 1
            if self._closed:
                with trio.CancelScope(shield=True):
                    await conn.aclose()
                self._check_open()
            return conn

    def _give_up_now(self, exc: Exception, out_of_time: bool) -> None:
        """Raise our error for a failed connect unless it is worth retrying (see
        :mod:`._dsn` for which failures are permanent)."""
        if isinstance(exc, InvalidArgument):
            raise exc
        if not isinstance(exc, psycopg.Error | OSError):
            if out_of_time:
                raise exc
            return
        kind = _dsn.connect_failure(exc)
        if kind == "permanent" or (kind == "refused" and not self._connects):
            raise _dsn.connect_error(exc, self._conninfo) from exc
        if out_of_time:
            timeout_s = self._connect_timeout_s
            raise _dsn.connect_error(exc, self._conninfo, timeout_s=timeout_s) from exc

    async def _release(self, conn: C) -> None:
        if not self._closed and not conn.closed and conn.transaction_status == _IDLE:
            # The common case, with nothing to await: straight back to the idle list.
            self._in_use -= 1
            self._idle.append((conn, trio.current_time()))
            self._give_slot()
            return
        with trio.CancelScope(shield=True):
            self._in_use -= 1
            try:
                if self._closed:
                    await conn.aclose()
                elif await self._reusable(conn):
                    self._idle.append((conn, trio.current_time()))
                else:
                    await self._discard(conn)
            finally:
                self._give_slot()

    async def _reusable(self, conn: C) -> bool:
        """Whether a returned connection can be lent again (rolling it back if needed)."""
        if conn.closed:
            return False
        status = conn.transaction_status
        if status == _IDLE:
            return True
        if status != _INTRANS:
            return False  # failed (INERROR), a statement still running, or unknown
        with trio.move_on_after(ROLLBACK_TIMEOUT_S), contextlib.suppress(Exception):
            await conn.execute("ROLLBACK")
        return not conn.closed and conn.transaction_status == _IDLE

    async def _discard(self, conn: C) -> None:
        self._discards += 1
        with trio.CancelScope(shield=True):
            await conn.aclose()


@final
class _Lease(Generic[C]):
    """What ``pool.connection()`` returns: a hand-written async context manager. Every
    statement the engine runs borrows a connection, and ``@asynccontextmanager``'s
    generator machinery cost several times the borrow itself."""

    __slots__ = ("_conn", "_pool")

    def __init__(self, pool: Pool[C]) -> None:
        self._pool = pool
        self._conn: C | None = None

    async def __aenter__(self) -> C:
        conn = self._conn = await self._pool._acquire()
        return conn

    async def __aexit__(self, *exc_info: object) -> None:
        conn, self._conn = self._conn, None
        assert conn is not None
        await self._pool._release(conn)


@overload
def open_pool(
    conninfo: str,
    *,
    size: int,
    connect_timeout_s: float,
    application_name: str,
    health_check_after_s: float = ...,
) -> AbstractAsyncContextManager[Pool[_driver.Connection]]: ...


@overload
def open_pool(
    conninfo: str,
    *,
    size: int,
    connect_timeout_s: float,
    application_name: str,
    connect: ConnectFn[C],
    health_check_after_s: float = ...,
) -> AbstractAsyncContextManager[Pool[C]]: ...


def open_pool(
    conninfo: str,
    *,
    size: int,
    connect_timeout_s: float,
    application_name: str,
    connect: ConnectFn[Any] | None = None,
    health_check_after_s: float = HEALTH_CHECK_AFTER_S,
) -> AbstractAsyncContextManager[Pool[Any]]:
    """Open a pool for the ``async with`` block; closing it closes every connection.

    Args:
        conninfo: The libpq connection string or URL, passed to ``connect``.
        size: The most connections the pool holds (>= 1); they are made lazily.
        connect_timeout_s: How long to keep retrying a failed connect (and the bound of a
            health check), in seconds (> 0).
        application_name: Passed to ``connect`` (``pg_stat_activity.application_name``).
        connect: The driver's connect function; :func:`~._driver.connect` by default.
        health_check_after_s: Ping a connection that sat idle longer than this before
            lending it (>= 0; ``0`` pings every time).

    Raises:
        InvalidArgument: an argument is out of range.
    """
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise InvalidArgument(f"size must be an int >= 1; got {size!r}")
    for name, value, low in (
        ("connect_timeout_s", connect_timeout_s, math.ulp(0.0)),
        ("health_check_after_s", health_check_after_s, 0.0),
    ):
        if not isinstance(value, int | float) or not low <= value < math.inf:
            bound = "> 0" if low else ">= 0"
            raise InvalidArgument(f"{name} must be a finite number {bound}; got {value!r}")
    pool: Pool[Any] = Pool(
        _driver.connect if connect is None else connect,
        conninfo,
        size=size,
        connect_timeout_s=connect_timeout_s,
        application_name=application_name,
        health_check_after_s=health_check_after_s,
    )
    return _run_pool(pool)


@asynccontextmanager
async def _run_pool(pool: Pool[C]) -> AsyncIterator[Pool[C]]:
    try:
        yield pool
    finally:
        await pool.aclose()
