"""R11: delayed and retried jobs start when they are due, not at the next re-poll.

On the in-memory engine with trio's ``MockClock(autojump_threshold=0)`` and a store clock
that follows it (:class:`TrioClock`): every re-poll is set far away (1000 s), so a job
that starts on time was woken by what the worker knew of its due time — from a wake,
from a lookup after a short claim, or from its own retry. Nothing sleeps for real.
"""

from __future__ import annotations

import random

import pytest
import trio
from _worker_run import running

from alkstore_trio import QueueOpts, open_store
from alkstore_trio._runtime._outcomes import Retry
from alkstore_trio._runtime._worker import Worker
from alkstore_trio.engine import ForwardingEngine, MemoryEngine
from alkstore_trio.testing import TrioClock

NEVER = 1000.0  # the re-poll interval: longer than any test here


class Lookups(ForwardingEngine):
    """Counts the worker's ``next_due_in_s`` lookups."""

    def __init__(self) -> None:
        super().__init__(MemoryEngine(clock=TrioClock()))
        self.lookups = 0

    async def next_due_in_s(self, queue: str) -> float | None:
        self.lookups += 1
        return await super().next_due_in_s(queue)


@pytest.fixture
async def engine(autojump_clock):
    return Lookups()


@pytest.fixture
async def store(engine):
    async with open_store(engine, rng=random.Random(3)) as opened:
        yield opened


class Starts:
    """A handler that records how late each run started (store clock - ``run_at``)."""

    def __init__(self, retry_first: Retry | None = None) -> None:
        self.retry_first = retry_first
        self.starts: list[tuple[int, int, float, float]] = []

    async def __call__(self, job):
        late = (TrioClock().now() - job.run_at).total_seconds()
        self.starts.append((job.id, job.attempts, trio.current_time(), late))
        if self.retry_first is not None and job.attempts == 1:
            raise self.retry_first


async def wait_for(predicate, limit=600.0):
    deadline = trio.current_time() + limit
    while not predicate():
        assert trio.current_time() < deadline, "condition never became true"
        await trio.sleep(0.01)


def on_time(late):
    return late == pytest.approx(0.0, abs=0.02)


async def test_r11_a_delayed_enqueue_starts_when_due(autojump_clock, store):
    queue = store.queue("q")
    handler = Starts()
    worker = Worker(store, {queue: handler}, poll_interval_s=NEVER)
    async with running(worker):
        await trio.sleep(5)
        job_id = await queue.enqueue(b"x", delay_s=7)
        await wait_for(lambda: worker.statistics().acked == 1)
    ((got_id, attempts, _, late),) = handler.starts
    assert (got_id, attempts) == (job_id, 1)
    assert on_time(late), late


async def test_r11_a_job_delayed_before_the_worker_started_starts_when_due(
    autojump_clock, store, engine
):
    # No wake announced it: the worker's first claim came back short, and its lookup
    # found the job's due time.
    queue = store.queue("q")
    job_id = await queue.enqueue(b"x", delay_s=7)
    handler = Starts()
    worker = Worker(store, {queue: handler}, poll_interval_s=NEVER)
    async with running(worker):
        await wait_for(lambda: worker.statistics().acked == 1)
    ((got_id, _, _, late),) = handler.starts
    assert got_id == job_id
    assert on_time(late), late


async def test_r11_delayed_jobs_start_one_after_another_when_each_is_due(autojump_clock, store):
    # After a due time passed, the next short claim looks up the next one.
    queue = store.queue("q")
    ids = [await queue.enqueue(b"x", delay_s=delay) for delay in (30, 3, 12, 12.5)]
    handler = Starts()
    worker = Worker(store, {queue: handler}, poll_interval_s=NEVER)
    async with running(worker):
        await wait_for(lambda: worker.statistics().acked == 4)
    assert [job_id for job_id, *_ in handler.starts] == [ids[1], ids[2], ids[3], ids[0]]
    assert all(on_time(late) for *_, late in handler.starts), handler.starts


async def test_r11_a_retry_with_a_delay_starts_when_due(autojump_clock, store):
    queue = store.queue("q")
    job_id = await queue.enqueue(b"x")
    handler = Starts(retry_first=Retry(delay_s=4.5))
    worker = Worker(store, {queue: handler}, poll_interval_s=NEVER)
    async with running(worker):
        await wait_for(lambda: worker.statistics().acked == 1)
    (first, second) = handler.starts
    assert (second[0], second[1]) == (job_id, 2)
    assert second[2] - first[2] == pytest.approx(4.5, abs=0.02)
    assert on_time(second[3]), second


async def test_r11_a_backoff_retry_starts_when_due(autojump_clock, store, engine):
    # The backoff delay is drawn in the store (D2); the worker looks the due time up.
    queue = store.queue("q", QueueOpts(backoff_base_s=8))
    job_id = await queue.enqueue(b"x")
    handler = Starts(retry_first=Retry())
    worker = Worker(store, {queue: handler}, poll_interval_s=NEVER)
    async with running(worker):
        await wait_for(lambda: worker.statistics().acked == 1)
    (first, second) = handler.starts
    assert (second[0], second[1]) == (job_id, 2)
    assert 4 <= second[2] - first[2] <= 8.02  # Q5: base 8, attempt 1: [4, 8]
    assert on_time(second[3]), second


async def test_r11_a_rescheduled_job_starts_at_its_new_time(autojump_clock, store):
    queue = store.queue("q")
    later = await queue.enqueue(b"later", delay_s=500)
    sooner = await queue.enqueue(b"sooner", delay_s=400)
    handler = Starts()
    worker = Worker(store, {queue: handler}, poll_interval_s=NEVER)
    async with running(worker):
        await trio.sleep(5)
        assert await queue.reschedule(later, delay_s=3) is True
        await wait_for(lambda: worker.statistics().acked == 1)
        start = trio.current_time()
        assert await queue.reschedule(sooner, delay_s=0) is True
        await wait_for(lambda: worker.statistics().acked == 2)
    assert [job_id for job_id, *_ in handler.starts] == [later, sooner]
    assert all(on_time(late) for *_, late in handler.starts), handler.starts
    assert handler.starts[1][2] == pytest.approx(start, abs=0.02)


async def test_r11_an_idle_worker_looks_up_once_not_after_every_short_claim(
    autojump_clock, store, engine
):
    # The lookup is off the hot path: ready jobs woken one by one (each claim short)
    # cost no lookup once the worker knows there is no delayed job; a re-poll forgets
    # what it knew, so each tick costs one lookup per queue.
    queue = store.queue("q")
    handler = Starts()
    worker = Worker(store, {queue: handler}, poll_interval_s=100)
    async with running(worker):
        await trio.sleep(1)
        assert engine.lookups == 1
        for n in range(1, 21):
            await queue.enqueue(b"x")
            await wait_for(lambda n=n: worker.statistics().acked == n)
        assert engine.lookups == 1
        await trio.sleep(100)
        assert engine.lookups == 2


async def test_r11_a_due_time_announced_while_one_is_known_is_kept_only_if_earlier(
    autojump_clock, store, engine
):
    queue = store.queue("q")
    handler = Starts()
    worker = Worker(store, {queue: handler}, poll_interval_s=NEVER)
    async with running(worker):
        await trio.sleep(1)
        first = await queue.enqueue(b"a", delay_s=10)
        second = await queue.enqueue(b"b", delay_s=20)
        third = await queue.enqueue(b"c", delay_s=5)
        await wait_for(lambda: worker.statistics().acked == 3)
    assert [job_id for job_id, *_ in handler.starts] == [third, first, second]
    assert all(on_time(late) for *_, late in handler.starts), handler.starts
