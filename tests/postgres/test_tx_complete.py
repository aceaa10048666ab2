"""Q19.6 and Q19.7 on PostgreSQL, beyond the conformance suite, on both drivers: the
caller's own statements commit with the completion or not at all; the completion's row
lock holds off a reclaim and a cancel until the commit; a worker's handler does both
through ``current_job()`` (R16), and its progress reaches the row by a heartbeat.

Each test works in a throwaway schema with a frozen clock (``PostgresHarness``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from alkstore_trio import ClaimLost, QueueOpts, Store, current_job
from alkstore_trio._engines._postgres import _backend, _sql
from alkstore_trio._runtime._worker import Worker
from alkstore_trio.testing._postgres import PostgresHarness


@pytest.fixture(params=["native", "thread"])
def harness(request: pytest.FixtureRequest, pg_dsn: str) -> PostgresHarness:
    return PostgresHarness(pg_dsn, driver=request.param)


@pytest.fixture
async def store(harness: PostgresHarness) -> AsyncIterator[Store]:
    async with harness.open_store() as opened:
        async with opened.transaction() as tx:
            await tx.execute(f"CREATE TABLE {effects(opened)} (job_id bigint, token bigint)")
        yield opened


def effects(store: Store) -> str:
    backend = store._engine
    assert isinstance(backend, _backend.PostgresEngine)
    return f"{_sql.quote_ident(backend._schema)}.effects"


async def eventually(check, *, limit_s: float = 10.0) -> None:
    """Until ``await check()`` is true (polling; the condition, not the time, is tested)."""
    with trio.fail_after(limit_s):
        while not await check():  # noqa: ASYNC110 - a condition in the database
            await trio.sleep(0.02)


async def lock_waiters(store: Store) -> int:
    async with store.transaction() as tx:
        rows = await tx.fetch(
            "SELECT count(*) FROM pg_catalog.pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
    return int(rows[0][0])


async def effect_rows(store: Store) -> list[tuple[int, int]]:
    async with store.transaction() as tx:
        rows = await tx.fetch(f"SELECT job_id, token FROM {effects(store)} ORDER BY token")
    return [(int(a), int(b)) for a, b in rows]


async def test_q19_6_the_callers_sql_commits_with_the_completion(store: Store):
    queue = store.queue("q", QueueOpts(visibility_timeout_s=10, keep_completed_s=60))
    job_id = await queue.enqueue(b"x")
    handle = await queue.claim_one("w")
    assert handle is not None
    token = handle.job.claim_token
    async with store.transaction() as tx:
        await tx.execute(f"INSERT INTO {effects(store)} VALUES (%s, %s)", [job_id, token])
        await tx.complete(handle, b"done")
    assert await effect_rows(store) == [(job_id, token)]
    job = await queue.get_job(job_id)
    assert job is not None
    assert (job.state, job.result) == ("completed", b"done")


async def test_q19_6_a_stale_claims_sql_rolls_back_with_its_refused_completion(
    store: Store, harness: PostgresHarness
):
    queue = store.queue("q", QueueOpts(visibility_timeout_s=10))
    job_id = await queue.enqueue(b"x")
    stale = await queue.claim_one("frozen")
    assert stale is not None
    await harness.advance(11)
    holder = await queue.claim_one("rescuer")
    assert holder is not None

    async def stale_effect() -> None:
        async with store.transaction() as tx:
            await tx.execute(f"INSERT INTO {effects(store)} VALUES (%s, 1)", [job_id])
            await tx.complete(stale)

    with pytest.raises(ClaimLost):
        await stale_effect()
    async with store.transaction() as tx:
        await tx.execute(f"INSERT INTO {effects(store)} VALUES (%s, 2)", [job_id])
        await tx.complete(holder)
    assert await effect_rows(store) == [(job_id, 2)]  # none from the superseded claim


async def test_q19_6_the_completions_row_lock_holds_off_a_cancel_until_the_commit(
    store: Store,
):
    queue = store.queue("q", QueueOpts(visibility_timeout_s=10))
    job_id = await queue.enqueue(b"x")
    handle = await queue.claim_one("w")
    assert handle is not None
    cancelled: list[bool] = []
    async with trio.open_nursery() as nursery, store.transaction() as tx:
        await tx.complete(handle)

        async def cancel() -> None:
            cancelled.append(await queue.cancel(job_id))

        nursery.start_soon(cancel)

        async def cancel_waits() -> bool:
            return await lock_waiters(store) > 0

        await eventually(cancel_waits)  # on the completion's row lock
        assert cancelled == []
    assert cancelled == [False]  # the completion won: nothing left to cancel
    assert await queue.get_job(job_id) is None


async def test_q19_7_and_r16_a_workers_handler_reports_progress_and_completes_in_sql(
    store: Store,
):
    queue = store.queue("q", QueueOpts(visibility_timeout_s=30, keep_completed_s=60))
    job_id = await queue.enqueue(b"x")
    seen: list[str | None] = []
    reported = trio.Event()
    release = trio.Event()

    async def handler(job):
        current_job().set_progress("half way")
        reported.set()
        await release.wait()
        async with current_job().transaction() as tx:
            token = job.claim_token
            await tx.execute(f"INSERT INTO {effects(store)} VALUES (%s, %s)", [job.id, token])
            tx.set_result(b"ok")

    worker = Worker(store, {queue: handler}, heartbeat_interval_s=0.2, poll_interval_s=1000)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await reported.wait()

        async def progress_shown() -> bool:
            job = await queue.get_job(job_id)
            return job is not None and job.progress is not None

        await eventually(progress_shown)  # by a heartbeat: no statement of its own
        seen.append((await queue.get_job(job_id)).progress)
        release.set()

        async def completed() -> bool:
            await trio.lowlevel.checkpoint()
            return worker.statistics().completed_in_tx == 1

        await eventually(completed)
        worker.stop()
    assert seen == ["half way"]
    job = await queue.get_job(job_id)
    assert job is not None
    assert (job.state, job.result, job.progress) == ("completed", b"ok", "half way")
    assert [row[0] for row in await effect_rows(store)] == [job_id]
    stats = worker.statistics()
    assert (stats.acked, stats.completed_in_tx, stats.lease_lost) == (1, 1, 0)
