"""Fixtures for the typed tasks' tests (T1-T8).

``any_store`` is a store on each engine in turn: the memory engine on a
:class:`ManualClock`, and PostgreSQL on a throwaway schema (``schema`` comes from
``tests/postgres/conftest.py``, loaded from its file as the CLI's tests do).
"""

from __future__ import annotations

import pytest
from _postgres_fixtures import postgres_fixtures

from alkstore_trio import open_store
from alkstore_trio.testing import ManualClock

pytest.importorskip("msgspec", reason="the typed tasks need the tasks extra (msgspec)")


_postgres = postgres_fixtures()
make_schema = _postgres.make_schema
schema = _postgres.schema


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
async def memory_store(clock):
    async with open_store("memory://", clock=clock) as store:
        yield store


@pytest.fixture(params=["memory", "postgres"])
async def any_store(request, clock):
    if request.param == "memory":
        async with open_store("memory://", clock=clock) as store:
            yield store
    else:
        dsn = request.getfixturevalue("pg_dsn")
        name = request.getfixturevalue("schema")
        async with open_store(dsn, schema=name, migrate="apply", listen=False) as store:
            yield store
