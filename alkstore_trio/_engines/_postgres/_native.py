"""The native driver: psycopg's :class:`~psycopg.AsyncConnection` driven by trio.

psycopg does all of its protocol work in generators that yield "wait until the socket is
readable/writable"; a connection's ``wait()`` is where they meet an event loop, and
``connection.lock`` is the only other asyncio object on the query path. This driver
replaces exactly those two (see :mod:`._driver` for why). The psycopg internals it relies
on are listed in :data:`INTERNALS` and checked by :func:`internals_problems`.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections import deque
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    TypeVar,
    final,
)

import psycopg
import psycopg.conninfo
import trio
from psycopg import capabilities, pq
from psycopg.waiting import Ready, Wait

if TYPE_CHECKING:
    from collections.abc import Callable

    from psycopg.abc import PQGen, PQGenConn

from ._connection import (
    _ACTIVE,
    _OK,
    _READY_R,
    _READY_W,
    _WAIT_R,
    _WAIT_W,
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

logger = logging.getLogger("alkstore_trio.postgres")

RV = TypeVar("RV")
T = TypeVar("T")

#: The psycopg versions the native driver is tested with: ``>=3.3,<3.4``.
SUPPORTED_PSYCOPG: Final = ((3, 3), (3, 4))

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
        self, query: str | bytes, params: Params | None = None, *, binary: bool = False
    ) -> list[tuple[Any, ...]]:
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_usable()
        cursor = self._cursor
        try:
            await cursor.execute(query, params, binary=binary or None)
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
