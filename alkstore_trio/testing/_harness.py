"""Engine harnesses: how the conformance suite and the state machine drive one engine.

A harness opens fresh, empty stores of one engine and moves that engine's clock. Every
engine ships one (the in-memory engine's is :class:`MemoryHarness`); a new engine passes
the contract when :func:`alkstore_trio.testing.check_conformance` and the state machine
pass on its harness.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Protocol

from .._open import open_store
from ._clock import ManualClock

if TYPE_CHECKING:
    import random
    from collections.abc import AsyncIterator
    from datetime import datetime

    from .._store import Store


class EngineHarness(Protocol):
    """What the conformance suite needs from an engine under test."""

    #: A short name for reports and test ids (e.g. ``"memory"``).
    name: str

    def open_store(self, *, rng: random.Random | None = None) -> AbstractAsyncContextManager[Store]:
        """Open a fresh store with no rows, whose clock this harness controls.

        The clock must stand still between calls of :meth:`advance` (or move so little
        that no lease, delay or expiry of whole seconds can flip).
        """
        ...

    async def now(self) -> datetime:
        """The engine's current time, as its next operation will read it."""
        ...

    async def advance(self, seconds: float) -> None:
        """Move the engine's clock forward by ``seconds`` (>= 0)."""
        ...


class MemoryHarness:
    """The in-memory engine driven by a :class:`ManualClock` (shared by every store this
    harness opens)."""

    name = "memory"

    def __init__(self, clock: ManualClock | None = None) -> None:
        self.clock = clock or ManualClock()

    @asynccontextmanager
    async def open_store(self, *, rng: random.Random | None = None) -> AsyncIterator[Store]:
        """A fresh in-memory store on this harness's clock."""
        async with open_store("memory://", clock=self.clock, rng=rng) as store:
            yield store

    async def now(self) -> datetime:
        """The manual clock's time."""
        return self.clock.now()

    async def advance(self, seconds: float) -> None:
        """Advance the manual clock."""
        self.clock.advance(seconds)
