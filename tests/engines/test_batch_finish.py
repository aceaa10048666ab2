"""The engines' batch retry and fail (Q13, decision D20), driven below the facade.

The facade never sends a job twice in one batch (it raises ``InvalidArgument``), so the
conformance suite cannot see what an engine does with one; D20 fixes it anyway: the items
are applied in order, each under Q4's validity predicate, so a job is finished by its
first item whose claim is valid and its later items are refused. These tests call each
engine's ``retry`` / ``fail`` (:class:`alkstore_trio.engine.WorkPath`) directly, on the
in-memory engine and on PostgreSQL (one statement, where the rule is a ``DISTINCT ON``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest

from alkstore_trio import QueueOpts, Store
from alkstore_trio.engine import FailItem, RetryItem
from alkstore_trio.testing import EngineHarness, MemoryHarness


def _postgres(request: pytest.FixtureRequest) -> EngineHarness:
    from alkstore_trio.testing import PostgresHarness

    return PostgresHarness(request.getfixturevalue("pg_dsn"))


HARNESSES: dict[str, Callable[[pytest.FixtureRequest], EngineHarness]] = {
    "memory": lambda request: MemoryHarness(),
    "postgres": _postgres,
}


@pytest.fixture(params=sorted(HARNESSES))
def harness(request: pytest.FixtureRequest) -> EngineHarness:
    return HARNESSES[request.param](request)


@asynccontextmanager
async def claimed(
    harness: EngineHarness,
) -> AsyncIterator[tuple[Store, Any, dict[str, tuple[int, int]]]]:
    """A store whose queue ``q`` holds four claimed jobs (``spent`` on its last attempt)
    and whose queue ``other`` holds one; their (id, token) by name, and the engine."""
    async with harness.open_store() as store:
        queue = store.queue("q", QueueOpts(visibility_timeout_s=100, max_attempts=2))
        other = store.queue("other", QueueOpts(visibility_timeout_s=100))
        names = ["again", "twice", "spent", "failed"]
        for index, name in enumerate(names):
            await queue.enqueue(name.encode(), priority=-index, max_attempts=(name != "spent") + 1)
        await other.enqueue(b"other")
        handles = await queue.claim_batch("w", 4)
        handles += await other.claim_batch("w", 1)
        claims = {
            handle.job.payload.decode(): (handle.id, handle.job.claim_token) for handle in handles
        }
        assert sorted(claims) == sorted([*names, "other"])
        yield store, store._engine, claims


async def test_q13_retry_applies_a_job_listed_twice_once_by_its_first_valid_item(
    harness: EngineHarness,
) -> None:
    async with claimed(harness) as (store, engine, claims):
        queue = store.queue("q")
        again, again_token = claims["again"]
        twice, twice_token = claims["twice"]
        spent, spent_token = claims["spent"]
        other, other_token = claims["other"]
        items = [
            (again, again_token + 1, "wrong token", 0.0),
            (again, again_token, "first", 3.0),
            (again, again_token, "second", 0.0),
            (twice, twice_token, None, 5.0),
            (twice, twice_token, "again", 0.0),
            (spent, spent_token, None, None),
            (spent, spent_token, "too late", None),
            (other, other_token, None, 0.0),
            (10**12, 1, None, 0.0),
        ]
        now = await harness.now()
        results = await engine.retry("q", [RetryItem(*item) for item in items])
        assert results == [False, True, False, True, False, True, False, False, False]
        row = await queue.get_job(again)
        assert (row.state, row.last_error, row.run_at) == (
            "pending",
            "first",
            now + timedelta(seconds=3),
        )
        row = await queue.get_job(twice)
        assert (row.state, row.last_error, row.run_at) == (
            "pending",
            None,
            now + timedelta(seconds=5),
        )
        row = await queue.get_job(spent)
        assert (row.state, row.last_error, row.died_at) == ("dead", "max attempts exceeded", now)
        row = await store.queue("other").get_job(other)
        assert row.state == "processing"


async def test_q13_fail_applies_a_job_listed_twice_once_by_its_first_valid_item(
    harness: EngineHarness,
) -> None:
    async with claimed(harness) as (store, engine, claims):
        queue = store.queue("q")
        failed, failed_token = claims["failed"]
        again, again_token = claims["again"]
        items = [
            (failed, failed_token + 1, "wrong token"),
            (failed, failed_token, "first"),
            (failed, failed_token, "second"),
            (again, again_token, None),
            (again, again_token + 1, "stale"),
        ]
        now = await harness.now()
        assert await engine.fail("q", [FailItem(*item) for item in items]) == [
            False,
            True,
            False,
            True,
            False,
        ]
        row = await queue.get_job(failed)
        assert (row.state, row.last_error, row.died_at) == ("dead", "first", now)
        row = await queue.get_job(again)
        assert (row.state, row.last_error, row.died_at) == ("dead", "failed", now)
        twice, _ = claims["twice"]
        assert (await queue.get_job(twice)).state == "processing"
