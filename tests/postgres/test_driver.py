"""The PostgreSQL driver (``alkstore_trio._engines._postgres._driver``) on a real server.

Every test that takes ``conn`` or ``connect`` runs twice: on the native driver and on the
thread driver. The ``test_internals_guard_*`` tests pin the psycopg internals the native
driver relies on: when one of them fails after a psycopg upgrade, read the new psycopg
source before widening ``SUPPORTED_PSYCOPG``.
"""

from __future__ import annotations

import inspect
import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta, timezone

import psycopg
import pytest
import trio
import trio.testing
from psycopg import pq

from alkstore_trio import InvalidArgument
from alkstore_trio._engines._postgres import _driver
from alkstore_trio._engines._postgres._driver import ConnectionBroken

IDLE = pq.TransactionStatus.IDLE
INTRANS = pq.TransactionStatus.INTRANS

#: How long a cancelled statement may take to give control back (0.3 s timeout + slack).
PROMPT_S = 1.0


async def _activity(observer: _driver.Connection, pid: int) -> tuple[str, str] | None:
    rows = await observer.execute("SELECT state, query FROM pg_stat_activity WHERE pid = %s", [pid])
    return rows[0] if rows else None


# -- the internals guard ---------------------------------------------------------------


def test_internals_guard_psycopg_version_is_in_the_tested_range():
    low, high = _driver.SUPPORTED_PSYCOPG
    version = _driver._version_tuple(psycopg.__version__)
    assert low <= version < high, (
        f"psycopg {psycopg.__version__} is outside >=3.3,<3.4: the native driver falls back "
        "to the thread driver; re-check INTERNALS against the new psycopg and update the pin"
    )


def test_internals_guard_private_names_and_signatures_exist():
    assert _driver.internals_problems() == []


def test_internals_guard_query_path_does_io_only_through_lock_and_wait():
    # The native driver replaces AsyncConnection.lock and .wait(); every psycopg method
    # it calls must reach the socket through them and nothing else (no asyncio).
    cursor_execute = inspect.getsource(psycopg.AsyncCursor.execute)
    assert "async with self._conn.lock:" in cursor_execute
    assert "await self._conn.wait(" in cursor_execute
    set_autocommit = inspect.getsource(psycopg.AsyncConnection.set_autocommit)
    assert "async with self.lock:" in set_autocommit
    assert "await self.wait(self._set_autocommit_gen(value))" in set_autocommit
    init = inspect.getsource(psycopg.AsyncConnection.__init__)
    assert "self.lock = ALock()" in init
    fetchall = inspect.getsource(psycopg.AsyncCursor.fetchall)
    assert "wait(" not in fetchall
    assert "lock" not in fetchall
    for source in (cursor_execute, set_autocommit, fetchall):
        assert "asyncio" not in source
    connect_gen = inspect.getsource(psycopg.AsyncConnection._connect_gen)
    assert "yield from generators.connect(conninfo)" in connect_gen
    cancel_gen = inspect.getsource(psycopg.AsyncConnection._cancel_gen)
    assert "yield from generators.cancel(cancel_conn)" in cancel_gen


def test_internals_guard_an_unsupported_psycopg_falls_back_to_the_thread_driver_with_a_warning():
    assert _driver.select_driver(None, None) == ("native", None)
    assert _driver.select_driver("auto", None) == ("native", None)
    assert _driver.select_driver("thread", None) == ("thread", None)
    driver, warning = _driver.select_driver(None, "psycopg 3.4.0 is outside the range")
    assert driver == "thread"
    assert warning is not None
    assert "psycopg 3.4.0" in warning
    assert "thread driver" in warning
    with pytest.raises(InvalidArgument, match="ALKSTORE_PG_DRIVER"):
        _driver.select_driver("asyncio", None)


def test_alkstore_pg_driver_thread_selects_the_thread_driver_at_import():
    code = "from alkstore_trio._engines._postgres import _driver; print(_driver.DRIVER)"
    for value, expected in (("thread", "thread"), ("auto", "native")):
        env = {**os.environ, _driver.DRIVER_ENV_VAR: value}
        result = subprocess.run(
            [sys.executable, "-W", "error", "-c", code],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert result.stdout.strip() == expected


# -- connecting ------------------------------------------------------------------------


async def test_connect_sets_application_name_and_autocommit(connect, observer):
    conn = await connect(application_name="alkstore-driver-appname")
    async with conn:
        rows = await observer.execute(
            "SELECT application_name FROM pg_stat_activity WHERE pid = %s", [conn.backend_pid]
        )
        assert rows == [("alkstore-driver-appname",)]
        await conn.execute("CREATE TEMP TABLE autocommitted (x int)")
        assert conn.transaction_status == IDLE
        assert not conn.closed
        assert not conn.broken
    assert conn.closed
    assert not conn.broken


async def test_connect_refused_raises_operational_error(driver):
    with socket.socket() as sock:  # a port with certainly nobody listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(psycopg.OperationalError):
        await _driver_connect(driver, f"postgresql://postgres@127.0.0.1:{port}/test", 5.0)


async def test_connect_times_out_when_the_server_never_answers(driver, mock_clock):
    with socket.socket() as sock:  # accepts TCP connections (backlog), never answers
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        dsn = f"postgresql://postgres@127.0.0.1:{sock.getsockname()[1]}/test"
        caught: list[BaseException] = []

        async def connect_and_catch() -> None:
            try:
                await _driver_connect(driver, dsn, 3.0)
            except psycopg.Error as exc:
                caught.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(connect_and_catch)
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(3.0)
    assert len(caught) == 1
    assert isinstance(caught[0], psycopg.errors.ConnectionTimeout)


async def test_connect_rejects_a_connect_timeout_that_is_not_positive(driver, pg_dsn):
    with pytest.raises(InvalidArgument, match="connect_timeout_s"):
        await _driver_connect(driver, pg_dsn, 0)


async def _driver_connect(driver: str, dsn: str, timeout_s: float) -> None:
    connect_fn = {"native": _driver.connect_native, "thread": _driver.connect_threaded}[driver]
    conn = await connect_fn(dsn, connect_timeout_s=timeout_s, application_name="x")
    await conn.aclose()  # pragma: no cover - only reached if the test fails


# -- statements ------------------------------------------------------------------------


async def test_execute_round_trips_parameters_of_every_type_the_engine_uses(conn):
    aware = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=2)))
    rows = await conn.execute(
        "SELECT %s::bytea, %s::bigint, %s::integer, %s::timestamptz, %s::text, "
        "%s::bigint[], %s::float8, %s::boolean",
        [b"\x00\xffpayload", 2**62, -7, aware, None, [1, 2**40, -3], 0.25, True],
    )
    assert rows == [(b"\x00\xffpayload", 2**62, -7, aware, None, [1, 2**40, -3], 0.25, True)]
    ((returned,),) = await conn.execute("SELECT %s::timestamptz", [aware])
    assert returned.tzinfo is not None
    assert returned == aware
    assert returned.astimezone(UTC) == aware.astimezone(UTC)


async def test_execute_accepts_named_parameters_and_bytes_queries(conn):
    assert await conn.execute("SELECT %(a)s::int + %(b)s::int", {"a": 2, "b": 3}) == [(5,)]
    assert await conn.execute(b"SELECT %s::text", ["bytes query"]) == [("bytes query",)]
    assert await conn.execute("SELECT 'literal %% sign', %s::int", [1]) == [("literal % sign", 1)]


async def test_execute_returns_all_rows_or_an_empty_list(conn):
    await conn.execute("CREATE TEMP TABLE rows_test (x bigint)")
    assert await conn.execute("INSERT INTO rows_test SELECT generate_series(1, 3)") == []
    assert await conn.execute("SELECT x FROM rows_test ORDER BY x") == [(1,), (2,), (3,)]
    assert await conn.execute("SELECT x FROM rows_test WHERE x > 10") == []
    assert await conn.execute("INSERT INTO rows_test VALUES (%s) RETURNING x", [9]) == [(9,)]


async def test_executescript_runs_several_statements_without_parameters(conn):
    await conn.executescript(
        "CREATE TEMP TABLE script_test (x int); INSERT INTO script_test VALUES (1), (2);"
        "UPDATE script_test SET x = x * 10 WHERE x::text LIKE '%'"  # a bare % is fine here
    )
    assert await conn.execute("SELECT sum(x) FROM script_test") == [(30,)]


async def test_a_statement_executed_twice_is_prepared_on_the_server(conn):
    query = "SELECT %s::int + 1 AS prepared_probe"
    for value in range(3):
        assert await conn.execute(query, [value]) == [(value + 1,)]
    prepared = await conn.execute(
        "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
        ["%prepared_probe%"],
    )
    assert prepared == [(1,)]


async def test_a_failed_statement_raises_psycopg_error_and_leaves_the_connection_usable(conn):
    with pytest.raises(psycopg.errors.DivisionByZero):
        await conn.execute("SELECT 1 / %s::int", [0])
    assert not conn.closed
    assert await conn.execute("SELECT 1") == [(1,)]


async def test_concurrent_statements_on_one_connection_run_one_after_the_other(conn):
    results: list[list[tuple[object, ...]]] = []

    async def run(value: int) -> None:
        results.append(await conn.execute("SELECT %s::int, pg_sleep(0.05)", [value]))

    async with trio.open_nursery() as nursery:
        for value in range(3):
            nursery.start_soon(run, value)
    assert sorted(rows[0][0] for rows in results) == [0, 1, 2]


# -- transactions ----------------------------------------------------------------------


async def test_transaction_commits_when_the_block_ends(conn, observer, schema):
    # A table of this test's own schema (dropped after it): the observer must see it, so
    # not a temporary table; and not a fixed name that a parallel run also creates.
    table = f'"{schema}".tx_commit_test'
    await conn.execute(f'CREATE SCHEMA "{schema}"')
    await conn.execute(f"CREATE TABLE {table} (x int)")
    async with conn.transaction():
        await conn.execute(f"INSERT INTO {table} VALUES (1)")
        assert conn.transaction_status == INTRANS
        assert await observer.execute(f"SELECT count(*) FROM {table}") == [(0,)]
    assert conn.transaction_status == IDLE
    assert await observer.execute(f"SELECT count(*) FROM {table}") == [(1,)]


async def test_transaction_rolls_back_when_the_block_raises(conn):
    await conn.execute("CREATE TEMP TABLE tx_rollback_test (x int)")

    async def insert_then_raise() -> None:
        async with conn.transaction():
            await conn.execute("INSERT INTO tx_rollback_test VALUES (1)")
            raise ValueError("boom")

    async def violate_a_constraint() -> None:
        async with conn.transaction():
            await conn.execute("INSERT INTO tx_rollback_test VALUES (2)")
            await conn.execute("CREATE TEMP TABLE tx_unique (x int PRIMARY KEY)")
            await conn.execute("INSERT INTO tx_unique VALUES (1), (1)")

    with pytest.raises(ValueError, match="boom"):
        await insert_then_raise()
    assert conn.transaction_status == IDLE
    with pytest.raises(psycopg.errors.UniqueViolation):
        await violate_a_constraint()
    assert conn.transaction_status == IDLE
    assert await conn.execute("SELECT count(*) FROM tx_rollback_test") == [(0,)]


async def test_transaction_blocks_do_not_nest(conn):
    async with conn.transaction():
        with pytest.raises(psycopg.ProgrammingError, match="do not nest"):
            async with conn.transaction():
                pass  # pragma: no cover
        assert conn.transaction_status == INTRANS
    assert conn.transaction_status == IDLE


# -- cancellation ----------------------------------------------------------------------


async def test_cancel_mid_statement_returns_promptly_and_stops_it_on_the_server(conn, observer):
    started = trio.current_time()
    with trio.move_on_after(0.3) as scope:
        await conn.execute("SELECT pg_sleep(5)")
    assert scope.cancelled_caught
    assert trio.current_time() - started < PROMPT_S
    state, query = await _activity(observer, conn.backend_pid)
    assert state == "idle", (state, query)  # the statement is gone from the server
    assert not conn.closed
    assert conn.transaction_status == IDLE
    assert await conn.execute("SELECT 42") == [(42,)]


async def test_cancel_inside_a_transaction_rolls_it_back_and_keeps_the_connection(conn):
    await conn.execute("CREATE TEMP TABLE tx_cancel_test (x int)")
    started = trio.current_time()
    with trio.move_on_after(0.3) as scope:
        async with conn.transaction():
            await conn.execute("INSERT INTO tx_cancel_test VALUES (1)")
            await conn.execute("SELECT pg_sleep(5)")
    assert scope.cancelled_caught
    assert trio.current_time() - started < PROMPT_S
    assert conn.transaction_status == IDLE
    assert await conn.execute("SELECT count(*) FROM tx_cancel_test") == [(0,)]


async def test_cancel_the_server_ignores_closes_the_connection_within_the_grace(conn, observer):
    # The block traps every cancel and sleeps on for 5 s in all: the connection cannot
    # become idle within CANCEL_GRACE_S, so the driver closes it rather than reuse it
    # half-way. (Trapping only one cancel is not enough: the postmaster signals the
    # backend twice, to its pid and to its process group.)
    started = trio.current_time()
    with trio.move_on_after(0.3):
        await conn.execute(
            "DO $$ BEGIN FOR i IN 1..50 LOOP BEGIN PERFORM pg_sleep(0.1); "
            "EXCEPTION WHEN query_canceled THEN NULL; END; END LOOP; END $$"
        )
    assert trio.current_time() - started < 0.3 + _driver.CANCEL_GRACE_S + PROMPT_S
    assert conn.closed
    assert conn.broken
    with pytest.raises(ConnectionBroken):
        await conn.execute("SELECT 1")


async def test_cancel_before_the_statement_starts_sends_nothing(conn, observer):
    with trio.CancelScope() as scope:
        scope.cancel()
        await conn.execute("SELECT pg_sleep(5)")
    _, query = await _activity(observer, conn.backend_pid)
    assert "pg_sleep" not in query
    assert await conn.execute("SELECT 1") == [(1,)]


# -- LISTEN / NOTIFY -------------------------------------------------------------------


async def test_notify_wakes_a_waiting_listener_from_the_socket_not_a_timer(
    conn, observer, mock_clock
):
    # trio's virtual clock stands still (mock_clock, rate 0): a listener that polled on
    # a timer would never wake; one woken by the socket does.
    await conn.listen(["alk_jobs", "Mixed-Case channel"])
    received: list[_driver.Notify] = []

    async def listener() -> None:
        received.extend(await conn.wait_notifies(timeout_s=None))

    virtual_start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener)
        await trio.testing.wait_all_tasks_blocked()
        await observer.execute("SELECT pg_notify(%s, %s)", ["Mixed-Case channel", "hello"])
        give_up = time.monotonic() + 5.0  # real time: only if the test fails
        while not received and time.monotonic() < give_up:
            await trio.lowlevel.checkpoint()  # lets trio read the socket
        nursery.cancel_scope.cancel()
    assert [(n.channel, n.payload) for n in received] == [("Mixed-Case channel", "hello")]
    assert received[0].pid == observer.backend_pid
    assert trio.current_time() == virtual_start


async def test_notifications_arriving_during_a_statement_are_kept_for_wait_notifies(conn):
    await conn.listen("alk_self")
    await conn.execute("SELECT pg_notify('alk_self', 'one'), pg_notify('alk_self', 'two')")
    await conn.execute("SELECT 1")
    notes = await conn.wait_notifies(timeout_s=5)
    assert [n.payload for n in notes] == ["one", "two"]
    assert await conn.wait_notifies(timeout_s=0) == []


async def test_wait_notifies_returns_an_empty_list_on_timeout(conn, mock_clock):
    await conn.listen("alk_quiet")
    assert await conn.wait_notifies(timeout_s=0) == []
    results: list[list[_driver.Notify]] = []

    async def waiter() -> None:
        results.append(await conn.wait_notifies(timeout_s=10))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(10)
    assert results == [[]]
    assert await conn.execute("SELECT 1") == [(1,)]  # the cancelled wait left it usable


async def test_wait_notifies_rejects_a_negative_timeout(conn):
    with pytest.raises(InvalidArgument, match="timeout_s"):
        await conn.wait_notifies(timeout_s=-1)


async def test_unlisten_stops_delivery(conn, observer):
    await conn.listen(["alk_a", "alk_b"])
    await conn.unlisten("alk_a")
    await observer.execute("SELECT pg_notify('alk_a', 'x'), pg_notify('alk_b', 'y')")
    notes = await conn.wait_notifies(timeout_s=5)
    assert [(n.channel, n.payload) for n in notes] == [("alk_b", "y")]
    await conn.unlisten()
    assert await conn.execute("SELECT count(*) FROM pg_listening_channels()") == [(0,)]


# -- broken connections ----------------------------------------------------------------


async def test_a_terminated_session_raises_connection_broken(conn, observer):
    assert await observer.execute("SELECT pg_terminate_backend(%s, 5000)", [conn.backend_pid]) == [
        (True,)
    ]
    with pytest.raises(ConnectionBroken) as caught:
        await conn.execute("SELECT 1")
    assert isinstance(caught.value, psycopg.OperationalError)
    assert conn.closed
    assert conn.broken
    with pytest.raises(ConnectionBroken):
        await conn.execute("SELECT 1")
    with pytest.raises(ConnectionBroken):
        await conn.wait_notifies(timeout_s=0)


async def test_a_terminated_session_wakes_wait_notifies_with_connection_broken(conn, observer):
    await conn.listen("alk_doomed")
    caught: list[BaseException] = []

    async def listener() -> None:
        try:
            await conn.wait_notifies(timeout_s=None)
        except ConnectionBroken as exc:
            caught.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener)
        await trio.testing.wait_all_tasks_blocked()
        await observer.execute("SELECT pg_terminate_backend(%s, 5000)", [conn.backend_pid])
    assert len(caught) == 1
    assert conn.broken


async def test_aclose_wakes_a_waiting_listener_and_is_idempotent(conn):
    await conn.listen("alk_closing")
    caught: list[BaseException] = []

    async def listener() -> None:
        try:
            await conn.wait_notifies(timeout_s=None)
        except ConnectionBroken as exc:
            caught.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(listener)
        await trio.testing.wait_all_tasks_blocked()
        await conn.aclose()
    await conn.aclose()
    assert len(caught) == 1
    assert conn.closed
    assert not conn.broken
