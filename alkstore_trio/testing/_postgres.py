"""The PostgreSQL engine's harness: a throwaway schema per store, with a frozen clock.

The PostgreSQL engine reads time only through its schema's ``alk_now()`` function. In
the schemas this harness creates, that function is replaced by one that reads a
one-row table, so time stands still until :meth:`PostgresHarness.advance` moves it:
leases, delays, expiry and retention are driven exactly, without sleeping and without
touching the engine's SQL. Each store gets its own schema (dropped when it closes), so
tests never see each other's rows. Needs the ``postgres`` extra (psycopg).
"""

from __future__ import annotations

import secrets
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from .._core import _validate as v
from .._engines._postgres import _driver, _sql
from .._engines._postgres._backend import PostgresEngine
from .._engines._postgres._options import driver_connect
from .._open import open_store

if TYPE_CHECKING:
    import random
    from collections.abc import AsyncIterator

    from .._engines._postgres._pool import ConnectFn
    from .._store import Store

#: Where the frozen clock starts (whole seconds, so timestamps compare exactly).
DEFAULT_START = datetime(2030, 1, 1, tzinfo=UTC)

_CLOCK_TABLE_SQL = "CREATE TABLE {schema}.alk_test_clock (now timestamptz NOT NULL)"
_CLOCK_START_SQL = "INSERT INTO {schema}.alk_test_clock VALUES (%s)"
_FROZEN_NOW_SQL = """
CREATE OR REPLACE FUNCTION {schema}.alk_now() RETURNS timestamptz
    LANGUAGE sql STABLE
    AS 'SELECT now FROM {schema}.alk_test_clock'
"""


class PostgresHarness:
    """Drives the PostgreSQL engine for the conformance suite and the state machine.

    Args:
        dsn: A database the harness may create and drop schemas in.
        driver: ``"native"`` (the trio-native driver), ``"thread"`` (the fallback) or
            ``None`` (the one ``open_store`` would pick).
        start: The frozen clock's initial time (timezone-aware).
        pool_size: Connections per store.
    """

    def __init__(
        self,
        dsn: str,
        *,
        driver: str | None = None,
        start: datetime = DEFAULT_START,
        pool_size: int = 4,
    ) -> None:
        self.dsn = dsn
        self.name = "postgres" if driver is None else f"postgres-{driver}"
        self._driver = driver
        self._connect: ConnectFn[_driver.Connection] = driver_connect(driver)
        self._now = v.check_aware_datetime("start", start).astimezone(UTC)
        self._pool_size = pool_size
        self._schemas: set[str] = set()

    @asynccontextmanager
    async def open_store(self, *, rng: random.Random | None = None) -> AsyncIterator[Store]:
        """A fresh store on a new schema with a frozen clock; the schema is dropped after."""
        schema = "alk_test_" + secrets.token_hex(6)
        admin = await self._admin()
        try:
            await _create_frozen_schema(admin, schema, self._now)
            self._schemas.add(schema)
            try:
                engine = PostgresEngine(
                    self.dsn,
                    schema=schema,
                    pool_size=self._pool_size,
                    connect_timeout_s=10.0,
                    migrate="check",
                    application_name="alkstore_trio:test",
                    driver=self._driver,
                )
                async with open_store(engine, rng=rng) as store:
                    yield store
            finally:
                self._schemas.discard(schema)
                await admin.execute(f"DROP SCHEMA {_sql.quote_ident(schema)} CASCADE")
        finally:
            await admin.aclose()

    async def now(self) -> datetime:
        """The frozen database time."""
        return self._now

    async def advance(self, seconds: float) -> None:
        """Move the frozen clock of every open store forward by ``seconds``."""
        self._now += timedelta(seconds=v.check_duration("seconds", seconds, min_s=0))
        if not self._schemas:
            return
        admin = await self._admin()
        try:
            for schema in list(self._schemas):
                await admin.execute(
                    f"UPDATE {_sql.quote_ident(schema)}.alk_test_clock SET now = %s",
                    [self._now],
                )
        finally:
            await admin.aclose()

    async def _admin(self) -> _driver.Connection:
        return await self._connect(
            self.dsn, connect_timeout_s=10.0, application_name="alkstore_trio:test-admin"
        )


async def _create_frozen_schema(admin: _driver.Connection, schema: str, start: datetime) -> None:
    async with admin.transaction():
        for _, sql in _sql.migrations(schema):
            await admin.executescript(sql)
        await admin.execute(
            f"INSERT INTO {_sql.quote_ident(schema)}.alk_schema_version (version) VALUES (%s)",
            [_sql.latest_version()],
        )
        quoted = _sql.quote_ident(schema)
        await admin.execute(_CLOCK_TABLE_SQL.format(schema=quoted))
        await admin.execute(_CLOCK_START_SQL.format(schema=quoted), [start])
        await admin.execute(_FROZEN_NOW_SQL.format(schema=quoted))
