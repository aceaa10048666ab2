"""The engines the conformance suite runs against.

Each entry of :data:`HARNESS_FACTORIES` builds a fresh
:class:`~alkstore_trio.testing.EngineHarness` for one engine from the pytest request;
its key is the engine's name in test ids (``test_q3_...[memory]``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from alkstore_trio.testing import EngineHarness, MemoryHarness

HARNESS_FACTORIES: dict[str, Callable[[pytest.FixtureRequest], EngineHarness]] = {
    "memory": lambda request: MemoryHarness(),
}


@pytest.fixture(params=sorted(HARNESS_FACTORIES))
def harness(request: pytest.FixtureRequest) -> EngineHarness:
    """A fresh harness of each engine in :data:`HARNESS_FACTORIES`."""
    return HARNESS_FACTORIES[request.param](request)
