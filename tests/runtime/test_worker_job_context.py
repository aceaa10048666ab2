"""R16: ``current_job()`` in handlers (async, typed tasks, sync threads); Q19.7 progress
carried by the worker's heartbeats; Q19.6 transactional completion through the worker.
On trio's mock clock (nothing sleeps for real)."""

from __future__ import annotations

import logging

import pytest
import trio
from _worker_run import running, wait_until

from alkstore_trio import (
    ClaimLost,
    HandleConsumed,
    InvalidArgument,
    QueueOpts,
    Tasks,
    current_job,
    open_store,
    sync_handler,
)
from alkstore_trio._runtime._worker import Worker
from alkstore_trio.testing import TrioClock

KEPT = QueueOpts(keep_completed_s=3600, visibility_timeout_s=30)
LOGGER = "alkstore_trio.worker"


@pytest.fixture
async def store(autojump_clock):
    async with open_store("memory://", clock=TrioClock()) as opened:
        yield opened


def test_r16_current_job_outside_a_handler_raises_runtime_error():
    with pytest.raises(RuntimeError, match="only available inside a handler"):
        current_job()


async def test_r16_current_job_is_the_handlers_job_in_child_tasks_and_threads(store):
    queue = store.queue("q")
    job_id = await queue.enqueue(b"x")
    seen = []

    async def handler(job):
        seen.append(current_job().job is job)

        async def child():
            seen.append(current_job().job.id)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
        seen.append(await trio.to_thread.run_sync(lambda: current_job().job.id))

    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1)
    assert seen == [True, job_id, job_id]
    with pytest.raises(RuntimeError):
        current_job()  # reset after the handler


async def test_r16_current_job_in_sync_handlers_and_typed_tasks(store):
    tasks = Tasks()
    seen = []

    @tasks.task(name="async_task", queue="tasks")
    async def async_task(n: int) -> None:
        current_job().set_progress(f"async {n}")
        seen.append(("async", current_job().job.queue))

    @tasks.task(name="sync_task", queue="tasks")
    def sync_task(n: int) -> None:
        current_job().set_progress(f"sync {n}")
        seen.append(("sync", current_job().job.queue))

    await async_task.defer(store, n=1)
    await sync_task.defer(store, n=2)
    worker = Worker(store, tasks, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 2)
    assert sorted(seen) == [("async", "tasks"), ("sync", "tasks")]

    plain = store.queue("plain")
    await plain.enqueue(b"x")

    def blocking(job):
        seen.append(("plain", current_job().job.id))

    worker = Worker(store, {plain: sync_handler(blocking)}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1)
    assert seen[-1][0] == "plain"


async def test_q19_7_set_progress_is_sent_by_the_next_heartbeat(store):
    queue = store.queue("q", QueueOpts(visibility_timeout_s=30))
    job_id = await queue.enqueue(b"x")
    reported = trio.Event()
    release = trio.Event()

    async def handler(job):
        current_job().set_progress("1 of 2")
        current_job().set_progress("2 of 2")  # replaces the first before any heartbeat
        reported.set()
        await release.wait()

    worker = Worker(store, {queue: handler}, heartbeat_interval_s=5, poll_interval_s=1000)
    async with running(worker):
        await reported.wait()
        assert (await queue.get_job(job_id)).progress is None  # no round trip of its own
        await trio.sleep(4)
        assert (await queue.get_job(job_id)).progress is None  # no heartbeat yet
        await trio.sleep(1.5)  # the first heartbeat: one interval after the claim
        assert (await queue.get_job(job_id)).progress == "2 of 2"
        release.set()
        await wait_until(lambda: worker.statistics().acked == 1)


async def test_q19_7_set_progress_validates_its_text(store):
    queue = store.queue("q")
    await queue.enqueue(b"x")
    errors = []

    async def handler(job):
        for bad in ("x" * 1025, "a\x00", "\udc00", None, 3):
            try:
                current_job().set_progress(bad)
            except InvalidArgument as exc:
                errors.append(str(exc))

    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1)
    assert len(errors) == 5


async def test_q19_6_a_handlers_transaction_completes_its_job_with_its_enqueues(store, caplog):
    queue = store.queue("q", KEPT)
    mail = store.queue("mail")
    job_id = await queue.enqueue(b"x")

    async def handler(job):
        async with current_job().transaction() as tx:
            await tx.enqueue(mail, b"mail for " + job.payload)
            tx.set_result(b"invoice 42")
        with pytest.raises(HandleConsumed):
            async with current_job().transaction():
                pass
        return b"ignored"

    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        async with running(worker):
            await wait_until(lambda: worker.statistics().acked == 1)
    job = await queue.get_job(job_id)
    assert (job.state, job.result) == ("completed", b"invoice 42")
    assert [j.payload for j in await mail.list_jobs("pending")] == [b"mail for x"]
    stats = worker.statistics()
    assert (stats.completed_in_tx, stats.acked, stats.lease_lost) == (1, 1, 0)
    assert stats.handler_errors == 0
    kinds = [getattr(record, "event", None) for record in caplog.records]
    assert "completed_in_tx" in kinds
    assert any("returned a value after completing" in r.getMessage() for r in caplog.records)


async def test_q19_6_a_lost_claim_rolls_the_handlers_transaction_back(store, caplog):
    queue = store.queue("q", KEPT)
    mail = store.queue("mail")
    job_id = await queue.enqueue(b"x")
    raised = []

    async def handler(job):
        try:
            async with current_job().transaction() as tx:
                await tx.enqueue(mail, b"effect")
                # Someone else finishes the job meanwhile (Q6: no token check).
                assert await queue.ack_batch([job.id]) == 1
        except ClaimLost as exc:
            raised.append(exc)
            raise

    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        async with running(worker):
            await wait_until(lambda: worker.statistics().finished == 1)
            await wait_until(lambda: worker.statistics().in_flight == 0)
    assert len(raised) == 1
    assert await mail.list_jobs("pending") == []  # the effect rolled back
    assert (await queue.get_job(job_id)).state == "completed"  # by ack_batch, not the tx
    stats = worker.statistics()
    assert (stats.completed_in_tx, stats.lease_lost, stats.handler_errors) == (0, 1, 0)
    assert stats.acked == 0
    assert any("did not commit" in r.getMessage() for r in caplog.records)


async def test_r16_current_job_in_asyncio_handlers(store):
    pytest.importorskip("trio_asyncio")
    from alkstore_trio import asyncio_handler

    queue = store.queue("q")
    job_id = await queue.enqueue(b"x")
    seen = []

    async def handler(job):  # runs on the trio-asyncio loop
        seen.append(current_job().job.id)
        current_job().set_progress("from asyncio")

    worker = Worker(store, {queue: asyncio_handler(handler)}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1)
    assert seen == [job_id]


async def test_r16_a_claim_lost_of_another_transaction_is_the_handlers_error(store):
    queue = store.queue("q", QueueOpts(max_attempts=1))
    other = store.queue("other")
    job_id = await queue.enqueue(b"x")
    await other.enqueue(b"y")

    async def handler(job):
        handle = await other.claim_one("mine")
        await other.ack_batch([handle.id])  # its claim is gone: complete is refused
        async with store.transaction() as tx:
            await tx.complete(handle)

    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().dead_lettered == 1)
    stats = worker.statistics()
    assert (stats.handler_errors, stats.lease_lost, stats.completed_in_tx) == (1, 0, 0)
    assert (await queue.get_job(job_id)).last_error.startswith("ClaimLost")
