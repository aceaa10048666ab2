"""The connection pool (``alkstore_trio._engines._postgres._pool``).

The pool's own rules (bounds, first come first served, cancellation, backoff, health
checks, closing) are pinned with fake connections on trio's virtual clock, so they need
no server and never wait for real time. The tests at the end run the pool on both real
drivers against a real server.
"""

from __future__ import annotations

import psycopg
import pytest
import trio
import trio.testing
from psycopg import pq

from alkstore_trio import EngineError, InvalidArgument
from alkstore_trio._engines._postgres._driver import ConnectionBroken
from alkstore_trio._engines._postgres._pool import (
    BACKOFF_INITIAL_S,
    BACKOFF_MAX_S,
    HEALTH_CHECK_AFTER_S,
    PoolClosed,
    PoolStatistics,
    open_pool,
)

IDLE = pq.TransactionStatus.IDLE
INTRANS = pq.TransactionStatus.INTRANS
INERROR = pq.TransactionStatus.INERROR


class FakeConnection:
    """Just enough of a driver connection for the pool."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.closed = False
        self.transaction_status = IDLE
        self.executed: list[str] = []
        self.ping_fails = False

    async def execute(self, query, params=None):
        await trio.lowlevel.checkpoint()
        if self.closed:
            raise ConnectionBroken("the connection is closed")
        self.executed.append(query)
        if query == "ROLLBACK":
            self.transaction_status = IDLE
        if query == "SELECT 1" and self.ping_fails:
            self.closed = True
            raise ConnectionBroken("the server ended the session")
        return [(1,)]

    async def aclose(self) -> None:
        self.closed = True
        await trio.lowlevel.checkpoint()


class FakeServer:
    """A connect function that fails ``failures`` times (with ``error``, by default a
    transient failure), then makes FakeConnections."""

    def __init__(self, failures: int = 0, error: str = "server closed the connection") -> None:
        self.failures = failures
        self.error = error
        self.made: list[FakeConnection] = []
        self.attempted_at: list[float] = []

    async def connect(self, conninfo, *, connect_timeout_s, application_name):
        assert connect_timeout_s > 0
        self.attempted_at.append(trio.current_time())
        await trio.lowlevel.checkpoint()
        if self.failures:
            self.failures -= 1
            raise psycopg.OperationalError(self.error)
        conn = FakeConnection(len(self.made))
        self.made.append(conn)
        return conn


def fake_pool(server: FakeServer, size: int = 1, **kwargs):
    kwargs.setdefault("connect_timeout_s", 10.0)
    return open_pool("fake", size=size, application_name="test", connect=server.connect, **kwargs)


# -- bounds and order ------------------------------------------------------------------


async def test_pool_makes_connections_lazily_and_reuses_idle_ones():
    server = FakeServer()
    async with fake_pool(server, size=3) as pool:
        assert server.made == []
        for _ in range(3):
            async with pool.connection() as conn:
                assert conn is server.made[0]
        assert pool.statistics() == PoolStatistics(
            size=3, idle=1, in_use=0, waiting=0, connects=1, connect_errors=0, discards=0
        )
    assert server.made[0].closed


async def test_pool_never_holds_more_than_size_connections():
    server = FakeServer()
    most_in_use = 0
    async with fake_pool(server, size=2) as pool:

        async def borrow() -> None:
            nonlocal most_in_use
            async with pool.connection():
                most_in_use = max(most_in_use, pool.statistics().in_use)
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(borrow)
        assert most_in_use == 2
        assert len(server.made) == 2
        assert pool.statistics().idle == 2


async def test_pool_serves_waiters_first_come_first_served():
    server = FakeServer()
    served: list[str] = []
    async with fake_pool(server, size=1) as pool:

        async def borrow(name: str) -> None:
            async with pool.connection():
                served.append(name)

        async with trio.open_nursery() as nursery:
            async with pool.connection():
                for name in "abcd":
                    nursery.start_soon(borrow, name)
                    await trio.testing.wait_all_tasks_blocked()
                assert pool.statistics().waiting == 4
            # A newcomer after the release must queue behind the waiters.
            nursery.start_soon(borrow, "late")
    assert served == ["a", "b", "c", "d", "late"]


# -- cancellation never leaks ----------------------------------------------------------


async def test_pool_a_cancelled_waiter_leaves_no_trace():
    server = FakeServer()
    async with fake_pool(server, size=1) as pool:
        async with pool.connection():
            with trio.CancelScope() as scope:

                async def cancel_soon() -> None:
                    await trio.testing.wait_all_tasks_blocked()
                    assert pool.statistics().waiting == 1
                    scope.cancel()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(cancel_soon)
                    async with pool.connection():
                        pytest.fail("the waiter got a connection")  # pragma: no cover
            assert pool.statistics().waiting == 0
        async with trio.open_nursery() as nursery, pool.connection():
            # Still exactly one slot: a second borrower has to wait.
            nursery.start_soon(_borrow_once, pool)
            await trio.testing.wait_all_tasks_blocked()
            assert pool.statistics().waiting == 1
        assert pool.statistics().connects == 1


async def _borrow_once(pool) -> None:
    async with pool.connection():
        pass


async def test_pool_a_cancelled_borrower_returns_its_connection():
    server = FakeServer()
    async with fake_pool(server, size=1) as pool:
        with trio.CancelScope() as scope:
            async with pool.connection():
                scope.cancel()
                await trio.sleep_forever()
        assert pool.statistics().in_use == 0
        assert pool.statistics().idle == 1
        async with pool.connection() as conn:
            assert conn is server.made[0]


async def test_pool_a_borrower_cancelled_while_connecting_releases_the_slot(autojump_clock):
    server = FakeServer(failures=100)
    async with fake_pool(server, size=1) as pool:
        with trio.move_on_after(0.1) as scope:  # during the backoff after two failures
            async with pool.connection():
                pytest.fail("connected")  # pragma: no cover
        assert scope.cancelled_caught
        assert len(server.attempted_at) == 2
        assert pool.statistics().in_use == 0
        server.failures = 0
        async with pool.connection() as conn:
            assert conn is server.made[0]


# -- what happens to a returned connection ---------------------------------------------


async def test_pool_discards_a_broken_connection_and_makes_a_new_one():
    server = FakeServer()
    async with fake_pool(server) as pool:

        async def lose_the_session() -> None:
            async with pool.connection() as conn:
                conn.closed = True
                raise ConnectionBroken("the server ended the session")

        with pytest.raises(ConnectionBroken):
            await lose_the_session()
        assert pool.statistics().discards == 1
        async with pool.connection() as conn:
            assert conn is server.made[1]


async def test_pool_rolls_back_a_connection_returned_inside_a_transaction():
    server = FakeServer()
    async with fake_pool(server) as pool:
        async with pool.connection() as conn:
            conn.transaction_status = INTRANS
        assert conn.executed == ["ROLLBACK"]
        assert pool.statistics().idle == 1
        assert pool.statistics().discards == 0


async def test_pool_discards_a_connection_returned_in_a_failed_transaction():
    server = FakeServer()
    async with fake_pool(server) as pool:
        async with pool.connection() as conn:
            conn.transaction_status = INERROR
        assert conn.closed
        assert pool.statistics().discards == 1
        assert pool.statistics().idle == 0


async def test_pool_pings_a_connection_idle_for_long_before_lending_it(autojump_clock):
    server = FakeServer()
    async with fake_pool(server) as pool:
        async with pool.connection() as conn:
            pass
        async with pool.connection():
            assert conn.executed == []  # idle briefly: no ping
        await trio.sleep(HEALTH_CHECK_AFTER_S + 1)
        async with pool.connection() as again:
            assert again is conn
            assert conn.executed == ["SELECT 1"]
        conn.ping_fails = True
        await trio.sleep(HEALTH_CHECK_AFTER_S + 1)
        async with pool.connection() as fresh:
            assert fresh is server.made[1]
        assert pool.statistics().discards == 1


# -- connecting ------------------------------------------------------------------------


async def test_pool_retries_connecting_with_capped_exponential_backoff(autojump_clock):
    server = FakeServer(failures=8)
    async with fake_pool(server, connect_timeout_s=30) as pool, pool.connection():
        pass
    pauses = [b - a for a, b in zip(server.attempted_at, server.attempted_at[1:], strict=False)]
    expected = [BACKOFF_INITIAL_S * 2**i for i in range(6)] + [BACKOFF_MAX_S] * 2
    assert pauses == pytest.approx(expected)
    assert pool.statistics().connect_errors == 8
    assert pool.statistics().connects == 1


async def test_pool_gives_up_connecting_after_connect_timeout(autojump_clock):
    server = FakeServer(failures=1000)
    async with fake_pool(server, connect_timeout_s=1.0) as pool:
        started = trio.current_time()
        with pytest.raises(EngineError, match="within 1 s: server closed the connection"):
            async with pool.connection():
                pass  # pragma: no cover
        assert trio.current_time() - started <= 1.0
        assert pool.statistics().connect_errors == len(server.attempted_at) == 5
        assert pool.statistics().in_use == 0


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (
            'connection failed: connection to server at "127.0.0.1", port 5432 failed: '
            'FATAL:  database "shop" does not exist',
            'database "shop" does not exist',
        ),
        (
            'connection to server at "db", port 5432 failed: FATAL:  password '
            'authentication failed for user "app"',
            'password authentication failed for user "app"',
        ),
        ("failed to resolve host 'db.invalid': [Errno -2] Name or service not known", "db.invalid"),
        (
            'connection to server at "127.0.0.1", port 1 failed: Connection refused\n\tIs the '
            "server running on that host and accepting TCP/IP connections?",
            "Connection refused",
        ),
    ],
)
async def test_pool_fails_at_once_when_waiting_cannot_help(autojump_clock, error, cause):
    server = FakeServer(failures=1000, error=error)
    async with fake_pool(server, connect_timeout_s=30) as pool:
        with pytest.raises(EngineError, match="cannot connect to ") as caught:
            async with pool.connection():
                pass  # pragma: no cover
    assert cause in str(caught.value)
    assert len(server.attempted_at) == 1
    assert trio.current_time() == 0


async def test_pool_retries_a_refused_connection_once_it_has_connected(autojump_clock):
    """A refused connect after the pool connected is the server restarting: retried."""
    server = FakeServer(error="Connection refused")
    async with fake_pool(server, size=2, connect_timeout_s=30) as pool, pool.connection():
        server.failures = 3
        async with pool.connection():
            pass
    assert pool.statistics().connect_errors == 3
    assert pool.statistics().connects == 2


async def test_pool_never_shows_the_password_of_a_failed_connect(autojump_clock):
    server = FakeServer(failures=1, error='FATAL:  role "app" does not exist (s3cr3t-pw)')
    pool_cm = open_pool(
        "postgresql://app:s3cr3t-pw@db/shop",
        size=1,
        connect_timeout_s=5,
        application_name="t",
        connect=server.connect,
    )
    async with pool_cm as pool:
        with pytest.raises(EngineError) as caught:
            async with pool.connection():
                pass  # pragma: no cover
    assert "s3cr3t-pw" not in str(caught.value)
    assert "postgresql://app@db/shop" in str(caught.value)


# -- closing ---------------------------------------------------------------------------


async def test_pool_close_fails_waiters_and_closes_every_connection():
    server = FakeServer()
    failed: list[BaseException] = []
    async with fake_pool(server, size=2) as pool:
        async with pool.connection(), pool.connection():
            pass
        async with pool.connection() as held:

            async def wait_for_connection() -> None:
                try:
                    async with pool.connection(), pool.connection():
                        pass  # pragma: no cover
                except PoolClosed as exc:
                    failed.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_for_connection)
                await trio.testing.wait_all_tasks_blocked()
                await pool.aclose()
            assert not held.closed  # lent out: closed when it comes back
        assert held.closed
    assert len(failed) == 1
    assert all(conn.closed for conn in server.made)
    with pytest.raises(PoolClosed):
        async with pool.connection():
            pass  # pragma: no cover


async def test_open_pool_rejects_arguments_out_of_range():
    for kwargs in (
        {"size": 0, "connect_timeout_s": 1.0},
        {"size": 1.5, "connect_timeout_s": 1.0},
        {"size": 1, "connect_timeout_s": 0},
        {"size": 1, "connect_timeout_s": float("inf")},
        {"size": 1, "connect_timeout_s": 1.0, "health_check_after_s": -1},
    ):
        with pytest.raises(InvalidArgument):
            open_pool("fake", application_name="x", **kwargs)
    await trio.lowlevel.checkpoint()


# -- on a real server ------------------------------------------------------------------


def real_pool(connect, dsn: str, size: int):
    return open_pool(
        dsn,
        size=size,
        connect_timeout_s=5.0,
        application_name="alkstore-pool-tests",
        connect=connect,
    )


async def test_pool_replaces_a_session_the_server_terminated(driver_connect, pg_dsn, observer):
    async with real_pool(driver_connect, pg_dsn, size=1) as pool:
        async with pool.connection() as conn:
            pid = conn.backend_pid
        await observer.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])

        async def use_the_terminated_session() -> None:
            async with pool.connection() as conn:
                assert conn.backend_pid == pid
                await conn.execute("SELECT 1")

        with pytest.raises(ConnectionBroken):
            await use_the_terminated_session()
        async with pool.connection() as conn:
            assert conn.backend_pid != pid
            assert await conn.execute("SELECT 1") == [(1,)]
        stats = pool.statistics()
        assert (stats.connects, stats.discards, stats.idle, stats.in_use) == (2, 1, 1, 0)


async def test_pool_returned_transaction_is_rolled_back_before_reuse(driver_connect, pg_dsn):
    async with real_pool(driver_connect, pg_dsn, size=1) as pool:
        async with pool.connection() as conn:
            await conn.execute("CREATE TEMP TABLE pool_rollback (x int)")
            await conn.execute("BEGIN")
            await conn.execute("INSERT INTO pool_rollback VALUES (1)")
        async with pool.connection() as again:
            assert again is conn
            assert again.transaction_status == IDLE
            assert await again.execute("SELECT count(*) FROM pool_rollback") == [(0,)]
        assert pool.statistics().discards == 0


async def test_pool_borrower_cancelled_mid_query_returns_a_usable_connection(
    driver_connect, pg_dsn, observer
):
    async with real_pool(driver_connect, pg_dsn, size=1) as pool:
        with trio.move_on_after(0.3) as scope:
            async with pool.connection() as conn:
                await conn.execute("SELECT pg_sleep(5)")
        assert scope.cancelled_caught
        stats = pool.statistics()
        assert (stats.idle, stats.in_use, stats.discards) == (1, 0, 0)
        async with pool.connection() as again:
            assert again is conn
            assert await again.execute("SELECT 7") == [(7,)]


async def test_pool_bounds_real_sessions(driver_connect, pg_dsn, observer):
    async with real_pool(driver_connect, pg_dsn, size=2) as pool:

        async def borrow() -> None:
            async with pool.connection() as conn:
                await conn.execute("SELECT pg_sleep(0.02)")

        async with trio.open_nursery() as nursery:
            for _ in range(6):
                nursery.start_soon(borrow)
        assert pool.statistics().connects == 2
