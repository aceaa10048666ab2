"""Fixtures of the contrib tests: a store on trio's mock clock (see ``_scenario``)."""

from __future__ import annotations

import pytest
from _scenario import TrioClock

from alkstore_trio import open_store


@pytest.fixture
async def store(autojump_clock):
    async with open_store("memory://", clock=TrioClock()) as opened:
        yield opened
