"""What the worker tests share: run a worker for a block, and wait for a condition on
trio's (mock) clock without sleeping for time."""

from __future__ import annotations

from contextlib import asynccontextmanager

import trio


@asynccontextmanager
async def running(worker):
    """Run ``worker`` for the block; stop it gracefully at the end."""
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        yield worker
        worker.stop()


async def wait_until(predicate, *, step=0.01, limit=300.0):
    """Check ``predicate`` every ``step`` seconds of trio's clock until it holds; fail
    after ``limit`` seconds."""
    deadline = trio.current_time() + limit
    while not predicate():
        assert trio.current_time() < deadline, "condition never became true"
        await trio.sleep(step)
