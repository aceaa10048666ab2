"""Fixtures for the tests of the PostgreSQL driver, pool and engine.

``pg_dsn`` (the server, or a skip/failure when there is none) comes from
``tests/conftest.py``.

Every driver test runs on both drivers: ``native`` (psycopg's connection driven by trio)
and ``thread`` (psycopg's sync API in worker threads), whichever one ``connect`` picked.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable, Iterator

import pytest

psycopg = pytest.importorskip("psycopg", reason="the PostgreSQL tests need psycopg 3")

from psycopg import sql as pgsql  # noqa: E402 - after importorskip

from alkstore_trio._engines._postgres import _driver  # noqa: E402 - after importorskip

#: ``pg_stat_activity.application_name`` of the connections the tests open.
APPLICATION_NAME = "alkstore-trio-tests"
#: Connect timeout of the tests' connections.
CONNECT_TIMEOUT_S = 5.0

DRIVERS: dict[str, Callable[..., object]] = {
    "native": _driver.connect_native,
    "thread": _driver.connect_threaded,
}


@pytest.fixture(params=sorted(DRIVERS))
def driver(request: pytest.FixtureRequest) -> str:
    """The name of each driver in turn (``native`` is skipped if psycopg is unsupported;
    ``test_internals_guard_*`` then fails)."""
    name: str = request.param
    if name == "native" and (why := _driver._native_unsupported()) is not None:
        pytest.skip(f"native driver unsupported: {why}")
    return name


@pytest.fixture
def driver_connect(driver: str) -> Callable[..., object]:
    """The connect function of the driver under test (``connect_native`` or
    ``connect_threaded``), e.g. for ``open_pool(connect=...)``."""
    return DRIVERS[driver]


@pytest.fixture
def connect(driver: str, pg_dsn: str) -> Callable[..., object]:
    """``await connect()``: a new connection with the driver under test (close it)."""
    connect_fn = DRIVERS[driver]

    async def connect_to_test_server(
        *, application_name: str = APPLICATION_NAME
    ) -> _driver.Connection:
        conn = await connect_fn(  # type: ignore[operator]
            pg_dsn, connect_timeout_s=CONNECT_TIMEOUT_S, application_name=application_name
        )
        assert isinstance(conn, _driver.Connection)
        return conn

    return connect_to_test_server


@pytest.fixture
async def conn(connect: Callable[..., object]) -> AsyncIterator[_driver.Connection]:
    """A connection with the driver under test, closed after the test."""
    connection = await connect()  # type: ignore[misc]
    try:
        yield connection
    finally:
        await connection.aclose()


@pytest.fixture
async def observer(pg_dsn: str) -> AsyncIterator[_driver.Connection]:
    """A second connection (the default driver), to watch the first one from outside."""
    connection = await _driver.connect(
        pg_dsn, connect_timeout_s=CONNECT_TIMEOUT_S, application_name=APPLICATION_NAME
    )
    try:
        yield connection
    finally:
        await connection.aclose()


@pytest.fixture
def make_schema(pg_dsn: str) -> Iterator[Callable[..., str]]:
    """``make_schema(length=None, prefix="t_")``: a fresh schema name (padded to
    ``length``); every schema made is dropped after the test."""
    names: list[str] = []

    def make(length: int | None = None, prefix: str = "t_") -> str:
        name = prefix + secrets.token_hex(6)
        if length is not None:
            name = (name + "_" * length)[:length]
        names.append(name)
        return name

    yield make
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for name in names:
            conn.execute(
                pgsql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(pgsql.Identifier(name))
            )


@pytest.fixture
def schema(make_schema: Callable[..., str]) -> str:
    """A fresh schema name; the schema (if created) is dropped after the test."""
    return make_schema()
