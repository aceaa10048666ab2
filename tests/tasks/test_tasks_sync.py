"""T7: a plain ``def`` task runs in a worker thread, at most ``thread_limit`` at once; on
lease loss and on a stop the worker abandons the thread at once (the job is settled as
for any cancelled handler), the thread's outcome is discarded, and
``trio.from_thread.check_cancelled()`` raises in it.

On the memory engine the worker runs on trio's MockClock (autojump): while a thread
blocks, trio is idle and the clock jumps to the next heartbeat or grace deadline, so
nothing sleeps for real. On PostgreSQL (the database's clock) the same cases run in real
time, each wait bounded and for a condition (a frequent heartbeat makes the refused
renewal come at once; a zero grace makes the stop's abandon immediate). The threads are
released by ``threading.Event``s the test sets."""

from __future__ import annotations

import threading
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
from _worker_run import running

from alkstore_trio import QueueOpts, Tasks, Worker, open_store
from alkstore_trio.testing import TrioClock


@pytest.fixture
async def store(autojump_clock):
    async with open_store("memory://", clock=TrioClock()) as opened:
        yield opened


async def wait_until(predicate, *, step=0.1, limit=600.0):
    deadline = trio.current_time() + limit
    while not predicate():
        assert trio.current_time() < deadline, "condition never became true"
        await trio.sleep(step)


class Gate:
    """What a blocking sync task reports: started, released, ended, and how."""

    def __init__(self):
        self.started = threading.Event()
        self.release = threading.Event()
        self.ended = threading.Event()
        self.threads: list[int] = []
        self.cancelled_seen: list[bool] = []

    def run(self) -> str:
        self.threads.append(threading.get_ident())
        self.started.set()
        try:
            assert self.release.wait(timeout=30), "the test never released the thread"
            try:
                trio.from_thread.check_cancelled()
            except trio.Cancelled:
                self.cancelled_seen.append(True)
                raise
            self.cancelled_seen.append(False)
            return "done"
        finally:
            self.ended.set()


def make(gate, **options):
    tasks = Tasks(thread_limit=options.pop("thread_limit", 10))

    @tasks.task(name="blocking", queue="sync", **options)
    def blocking(label: str) -> str:
        return gate.run()

    return tasks, blocking


async def test_t7_a_sync_task_runs_in_a_worker_thread_and_is_acked(autojump_clock, store):
    gate = Gate()
    gate.release.set()
    tasks, blocking = make(gate)
    await blocking.defer(store, label="x")
    worker = Worker(store, tasks)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1)
    assert gate.threads
    assert gate.threads[0] != threading.get_ident()
    assert gate.cancelled_seen == [False]


async def test_t7_at_most_thread_limit_sync_tasks_run_at_once(autojump_clock, store):
    lock = threading.Lock()
    running_now = [0]
    peak = [0]
    release = threading.Event()
    tasks = Tasks(thread_limit=2)

    @tasks.task(name="count", queue="sync")
    def count(n: int) -> None:
        with lock:
            running_now[0] += 1
            peak[0] = max(peak[0], running_now[0])
        release.wait(timeout=30)
        with lock:
            running_now[0] -= 1

    await count.defer_many(store, [count.call(n=n) for n in range(5)])
    worker = Worker(store, tasks, concurrency=5)
    async with running(worker):
        await wait_until(lambda: running_now[0] == 2)
        await trio.testing.wait_all_tasks_blocked()
        assert worker.statistics().started == 5  # five handlers, two threads
        assert running_now[0] == 2
        release.set()
        await wait_until(lambda: worker.statistics().acked == 5)
    assert peak[0] == 2


async def test_t7_lease_loss_abandons_the_thread_and_discards_its_outcome(autojump_clock, store):
    gate = Gate()
    tasks, blocking = make(gate, opts=QueueOpts(visibility_timeout_s=30))
    job_id = await blocking.defer(store, label="x")
    worker = Worker(store, tasks, poll_interval_s=1000)
    async with running(worker):
        await wait_until(gate.started.is_set)
        # Another party finishes the job (Q6, no token): the next heartbeat is refused.
        assert await store.queue("sync").ack_batch([job_id]) == 1
        await wait_until(lambda: worker.statistics().lease_lost == 1)
        await wait_until(lambda: worker.statistics().in_flight == 0)
        assert not gate.ended.is_set()  # the worker did not wait for the thread
        gate.release.set()
        await trio.to_thread.run_sync(gate.ended.wait)
    assert gate.cancelled_seen == [True]
    stats = worker.statistics()
    assert (stats.acked, stats.retried, stats.lease_lost) == (0, 0, 1)


async def test_t7_a_stop_abandons_the_thread_after_the_grace_and_releases_the_job(
    autojump_clock, store
):
    gate = Gate()
    tasks, blocking = make(gate)
    job_id = await blocking.defer(store, label="x")
    worker = Worker(store, tasks, shutdown_grace_s=5)
    async with running(worker):
        await wait_until(gate.started.is_set)
        stopped_at = trio.current_time()
        worker.stop()
        await wait_until(lambda: worker.statistics().released == 1)
        assert trio.current_time() - stopped_at == pytest.approx(5, abs=0.2)
        assert not gate.ended.is_set()
    job = await store.queue("sync").get_job(job_id)
    assert (job.state, job.attempts, job.last_error) == ("pending", 0, "worker stopped")
    gate.release.set()
    await trio.to_thread.run_sync(gate.ended.wait)
    assert gate.cancelled_seen == [True]
    assert (await store.queue("sync").get_job(job_id)).state == "pending"  # not acked


async def test_t7_timeout_s_abandons_the_thread_and_retries_the_job(autojump_clock, store):
    gate = Gate()
    tasks, blocking = make(gate, timeout_s=3, max_attempts=1)
    job_id = await blocking.defer(store, label="x")
    worker = Worker(store, tasks)
    async with running(worker):
        await wait_until(gate.started.is_set)
        await wait_until(lambda: worker.statistics().dead_lettered == 1)
        assert not gate.ended.is_set()
    job = await store.queue("sync").get_job(job_id)
    assert (job.state, job.last_error) == ("dead", "task 'blocking' timed out after 3s (timeout_s)")
    gate.release.set()
    await trio.to_thread.run_sync(gate.ended.wait)
    assert gate.cancelled_seen == [True]


async def test_t7_sync_handler_runs_a_plain_bytes_handler_in_a_thread_and_a_stop_abandons_it(
    autojump_clock, store
):
    from alkstore_trio import InvalidArgument, sync_handler

    gate = Gate()
    job_id = await store.queue("raw").enqueue(b"x")
    worker = Worker(store, {"raw": sync_handler(lambda job: gate.run())}, shutdown_grace_s=0)
    async with running(worker):
        await wait_until(gate.started.is_set)
        worker.stop()
        await wait_until(lambda: worker.statistics().released == 1)
    assert (await store.queue("raw").get_job(job_id)).last_error == "worker stopped"
    gate.release.set()
    await trio.to_thread.run_sync(gate.ended.wait)
    assert gate.cancelled_seen == [True]

    async def already_async(job):
        pass

    with pytest.raises(InvalidArgument, match="async handler already"):
        sync_handler(already_async)
    with pytest.raises(InvalidArgument, match="sync function of the job"):
        sync_handler(Gate)


async def test_t7_a_plain_function_given_to_the_worker_names_sync_handler(autojump_clock, store):
    from alkstore_trio import InvalidArgument

    def plain(job):
        pass

    with pytest.raises(InvalidArgument, match="wrap it in sync_handler"):
        Worker(store, {"raw": plain})


# --- the same on PostgreSQL (real time: each wait is for a condition, bounded) ----------


@asynccontextmanager
async def pg_store(pg_dsn, schema):
    async with open_store(pg_dsn, schema=schema, migrate="apply") as opened:
        yield opened


async def ended(gate):
    """Wait for the thread to end, in a thread (bounded by the gate's own timeout)."""
    await trio.to_thread.run_sync(gate.ended.wait, 30)
    assert gate.ended.is_set()


async def test_t7_on_postgresql_a_sync_task_runs_in_a_thread_and_is_acked(pg_dsn, schema):
    gate = Gate()
    gate.release.set()
    tasks, blocking = make(gate)
    async with pg_store(pg_dsn, schema) as store:
        job_id = await blocking.defer(store, label="x")
        worker = Worker(store, tasks, poll_interval_s=0.05)
        async with running(worker):
            await wait_until(lambda: worker.statistics().acked == 1, step=0.01, limit=30)
        assert await store.queue("sync").get_job(job_id) is None
    assert gate.threads[0] != threading.get_ident()
    assert gate.cancelled_seen == [False]


async def test_t7_on_postgresql_lease_loss_abandons_the_thread_and_discards_its_outcome(
    pg_dsn, schema
):
    gate = Gate()
    tasks, blocking = make(gate)
    async with pg_store(pg_dsn, schema) as store:
        job_id = await blocking.defer(store, label="x")
        # Renew often, so that the refused renewal comes at once.
        worker = Worker(store, tasks, poll_interval_s=0.05, heartbeat_interval_s=0.05)
        async with running(worker):
            await trio.to_thread.run_sync(gate.started.wait, 30)
            # Another party finishes the job (Q6, no token): the next heartbeat is refused.
            assert await store.queue("sync").ack_batch([job_id]) == 1
            await wait_until(lambda: worker.statistics().lease_lost == 1, step=0.01, limit=30)
            await wait_until(lambda: worker.statistics().in_flight == 0, step=0.01, limit=30)
            assert not gate.ended.is_set()  # the worker did not wait for the thread
            gate.release.set()
            await ended(gate)
        stats = worker.statistics()
        assert (stats.acked, stats.retried, stats.lease_lost) == (0, 0, 1)
        assert await store.queue("sync").get_job(job_id) is None
    assert gate.cancelled_seen == [True]


async def test_t7_on_postgresql_a_stop_abandons_the_thread_and_releases_the_job(pg_dsn, schema):
    gate = Gate()
    tasks, blocking = make(gate)
    async with pg_store(pg_dsn, schema) as store:
        job_id = await blocking.defer(store, label="x")
        worker = Worker(store, tasks, poll_interval_s=0.05, shutdown_grace_s=0)
        async with running(worker):
            await trio.to_thread.run_sync(gate.started.wait, 30)
            worker.stop()
            await wait_until(lambda: worker.statistics().released == 1, step=0.01, limit=30)
            assert not gate.ended.is_set()
        job = await store.queue("sync").get_job(job_id)
        assert (job.state, job.attempts, job.last_error) == ("pending", 0, "worker stopped")
        gate.release.set()
        await ended(gate)
        assert (await store.queue("sync").get_job(job_id)).state == "pending"  # not acked
    assert gate.cancelled_seen == [True]


async def test_t7_on_postgresql_timeout_s_abandons_the_thread_and_retries_the_job(pg_dsn, schema):
    gate = Gate()
    tasks, blocking = make(gate, timeout_s=0.2, max_attempts=1)
    async with pg_store(pg_dsn, schema) as store:
        job_id = await blocking.defer(store, label="x")
        worker = Worker(store, tasks, poll_interval_s=0.05)
        async with running(worker):
            await wait_until(lambda: worker.statistics().dead_lettered == 1, step=0.01, limit=30)
            assert not gate.ended.is_set()
            assert worker.statistics().timed_out == 1
        job = await store.queue("sync").get_job(job_id)
        assert (job.state, job.last_error) == (
            "dead",
            "task 'blocking' timed out after 0.2s (timeout_s)",
        )
        gate.release.set()
        await ended(gate)
    assert gate.cancelled_seen == [True]
