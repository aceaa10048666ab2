"""The engines the conformance suite runs against.

Each entry of :data:`HARNESS_FACTORIES` builds a fresh
:class:`~alkstore_trio.testing.EngineHarness` for one engine from the pytest request;
its key is the engine's name in test ids (``test_q3_...[memory]``). The PostgreSQL
entries run on both drivers and need the ``pg_dsn`` fixture (skipped without a server,
a failure in CI).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from alkstore_trio.testing import EngineHarness, MemoryHarness


def _postgres(driver: str) -> Callable[[pytest.FixtureRequest], EngineHarness]:
    def factory(request: pytest.FixtureRequest) -> EngineHarness:
        from alkstore_trio.testing._postgres import PostgresHarness

        return PostgresHarness(request.getfixturevalue("pg_dsn"), driver=driver)

    return factory


HARNESS_FACTORIES: dict[str, Callable[[pytest.FixtureRequest], EngineHarness]] = {
    "memory": lambda request: MemoryHarness(),
    "postgres-native": _postgres("native"),
    "postgres-thread": _postgres("thread"),
}


@pytest.fixture(params=sorted(HARNESS_FACTORIES))
def harness(request: pytest.FixtureRequest) -> EngineHarness:
    """A fresh harness of each engine in :data:`HARNESS_FACTORIES`."""
    return HARNESS_FACTORIES[request.param](request)
