"""Fixtures of the abuse and security tests: one store per engine, whose engine calls are
counted, and a way to run Hypothesis against a store that lives in the test's trio run.

:class:`CountingBackend` wraps a store's backend (every engine operation, hence every SQL
statement on PostgreSQL, goes through it), so a test proves that bad input was rejected
*before* anything reached the engine: the count did not move.

Hypothesis drives sync functions; :func:`hypothesize` runs one in a worker thread, from
which each example reaches the store with ``trio.from_thread.run``. The store is opened
once per test, so PostgreSQL examples cost a round trip, not a schema.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import trio
from _figures import run_counting_examples

from alkstore_trio import Store
from alkstore_trio.testing import EngineHarness, MemoryHarness

ENGINES = ("memory", "postgres")


class CountingBackend:
    """A backend proxy counting every operation called on it (by name)."""

    def __init__(self, backend: Any) -> None:
        self._wrapped = backend
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._wrapped, name)
        if not callable(attribute):
            return attribute

        @functools.wraps(attribute)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attribute(*args, **kwargs)

        return counted

    @property
    def total(self) -> int:
        return sum(self.calls.values())


@dataclass
class Engine:
    """An open store on one engine, with its backend counted."""

    name: str
    harness: EngineHarness
    store: Store
    backend: CountingBackend

    async def count_rows(self) -> int:
        """Live plus dead rows of the whole store (a store-wide "no trace" check)."""
        wrapped = self.backend._wrapped
        if self.name == "memory":
            return await _memory_rows(wrapped)
        schema = wrapped._schema
        async with self.store.transaction() as tx:
            (live,) = await tx.fetch(f'SELECT count(*) FROM "{schema}".jobs')
            (dead,) = await tx.fetch(f'SELECT count(*) FROM "{schema}".dead_jobs')
        return live[0] + dead[0]


async def _memory_rows(backend: Any) -> int:
    def count(table: Any, now: Any) -> int:
        return len(table._live) + len(table._dead)

    return await backend._call(count)


def make_harness(name: str, request: pytest.FixtureRequest) -> EngineHarness:
    if name == "memory":
        return MemoryHarness()
    from alkstore_trio.testing._postgres import PostgresHarness

    return PostgresHarness(request.getfixturevalue("pg_dsn"))


@pytest.fixture(params=ENGINES)
async def engine(request: pytest.FixtureRequest) -> AsyncIterator[Engine]:
    """A fresh store of each engine, with a counted backend. Queues must be made after
    the fixture (a queue handle keeps the backend it was made with)."""
    harness = make_harness(request.param, request)
    async with harness.open_store() as store:
        counting = CountingBackend(store._engine)
        store._engine = counting  # type: ignore[assignment]
        yield Engine(request.param, harness, store, counting)


async def _hypothesize(test: Callable[[], None]) -> int:
    return await trio.to_thread.run_sync(run_counting_examples, test)


@pytest.fixture
def hypothesize() -> Callable[[Callable[[], None]], Awaitable[int]]:
    """``await hypothesize(test)`` runs a ``@given`` test in a worker thread; its examples
    call back into this trio run with ``trio.from_thread.run``. Returns how many examples
    ran (for the figures file)."""
    return _hypothesize
