"""R15: a cancel reaches the handler (Q19.5), on the in-memory engine.

Every test runs on trio's ``MockClock(autojump_threshold=0)`` and the store's clock follows
it, so "at once" is exact: the handler is cancelled at the same trio time as the cancel
returned. The safety nets for a lost announcement (the re-poll, a refused heartbeat, a
refused ack) are driven by dropping the engine's announcements.
"""

from __future__ import annotations

import pytest
import trio
from _worker_run import wait_until

from alkstore_trio import QueueOpts, open_store
from alkstore_trio._runtime._worker import Worker
from alkstore_trio.testing import TrioClock

_START = [0.0]


def now():
    return trio.current_time() - _START[0]


@pytest.fixture
async def store(autojump_clock):
    _START[0] = trio.current_time()
    async with open_store("memory://", clock=TrioClock()) as opened:
        yield opened


async def _forever(job):
    await trio.sleep_forever()


class Handler:
    """Records each start, cancellation and end (trio time since the store opened)."""

    def __init__(self, action=None):
        self.action = action or _forever
        self.starts: list[int] = []
        self.cancelled: list[tuple[int, float]] = []
        self.ended: list[tuple[int, float]] = []

    async def __call__(self, job):
        self.starts.append(job.id)
        try:
            await self.action(job)
        except trio.Cancelled:
            self.cancelled.append((job.id, now()))
            raise
        finally:
            self.ended.append((job.id, now()))


def drop_announcements(store, monkeypatch):
    """The engine's cancel announcements are lost (as a NOTIFY can be)."""
    monkeypatch.setattr(store._engine.wakes, "publish_cancel", lambda queue, job_id: None)


async def run_worker(worker, body):
    events = []
    with worker.events() as stream:

        async def collect():
            async for event in stream:
                events.append(event)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(collect)
            await nursery.start(worker.run)
            await body()
            worker.stop()
    return events


async def test_r15_cancel_reaches_the_running_handler_at_once(autojump_clock, store):
    queue = store.queue("q", QueueOpts(visibility_timeout_s=300))
    job_id = await queue.enqueue(b"x")
    handler = Handler()
    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    at: list[float] = []

    async def body():
        await wait_until(lambda: handler.starts)
        await trio.sleep(1)
        assert await queue.cancel(job_id)
        at.append(now())
        await wait_until(lambda: worker.statistics().in_flight == 0)

    events = await run_worker(worker, body)
    # The same transition published the announcement: the handler was cancelled in the
    # same scheduling round, not at its first refused heartbeat (100 s later).
    assert handler.cancelled == [(job_id, at[0])]
    stats = worker.statistics()
    assert (stats.cancelled, stats.lease_lost, stats.acked, stats.retried) == (1, 0, 0, 0)
    assert await queue.get_job(job_id) is None
    entry = (await store.stats()).queue("q")
    assert (entry.cancelled_total, entry.cancelling, entry.processing) == (1, 0, 0)
    (cancelled,) = [e for e in events if e.kind == "cancelled"]
    assert (cancelled.job_id, cancelled.latency_s) == (job_id, 0.0)
    assert "lease_lost" not in {e.kind for e in events}


async def test_r15_a_prefetched_claim_of_a_cancelled_job_never_starts(autojump_clock, store):
    queue = store.queue("q")
    first, second = await queue.enqueue_many([b"first", b"second"])
    handler = Handler()
    worker = Worker(store, {queue: handler}, concurrency=1, prefetch=1, poll_interval_s=1000)

    async def body():
        await wait_until(lambda: handler.starts and worker.statistics().in_flight == 2)
        assert await queue.cancel(second)
        await wait_until(lambda: worker.statistics().cancelled == 1)
        assert await queue.cancel(first)
        await wait_until(lambda: worker.statistics().in_flight == 0)

    await run_worker(worker, body)
    assert handler.starts == [first]
    assert worker.statistics().cancelled == 2
    assert [await queue.get_job(i) for i in (first, second)] == [None, None]


async def test_r15_the_re_poll_finds_a_cancel_whose_announcement_was_lost(
    autojump_clock, store, monkeypatch
):
    drop_announcements(store, monkeypatch)
    queue = store.queue("q", QueueOpts(visibility_timeout_s=300))
    job_id = await queue.enqueue(b"x")
    handler = Handler()
    worker = Worker(store, {queue: handler}, poll_interval_s=5)

    async def body():
        await wait_until(lambda: handler.starts)
        assert await queue.cancel(job_id)
        await wait_until(lambda: worker.statistics().in_flight == 0)

    await run_worker(worker, body)
    # Not the visibility timeout, nor the first heartbeat (100 s): the next re-poll.
    ((_, cancelled_at),) = handler.cancelled
    assert cancelled_at <= 5.01
    stats = worker.statistics()
    assert (stats.cancelled, stats.lease_lost) == (1, 0)
    assert await queue.get_job(job_id) is None


async def test_r15_a_refused_heartbeat_finds_a_cancel_whose_announcement_was_lost(
    autojump_clock, store, monkeypatch
):
    drop_announcements(store, monkeypatch)
    queue = store.queue("q", QueueOpts(visibility_timeout_s=30))
    job_id = await queue.enqueue(b"x")
    handler = Handler()
    worker = Worker(store, {queue: handler}, poll_interval_s=1000)

    async def body():
        await wait_until(lambda: handler.starts)
        assert await queue.cancel(job_id)
        await wait_until(lambda: worker.statistics().in_flight == 0)

    await run_worker(worker, body)
    assert [t for _, t in handler.cancelled] == [pytest.approx(10.0, abs=0.05)]
    stats = worker.statistics()
    assert (stats.cancelled, stats.lease_lost) == (1, 0)
    assert await queue.get_job(job_id) is None


async def test_r15_a_handler_that_returned_before_the_announcement_is_settled_cancelled(
    autojump_clock, store, monkeypatch
):
    drop_announcements(store, monkeypatch)
    queue = store.queue("q")
    job_id = await queue.enqueue(b"x")
    release = trio.Event()
    handler = Handler(lambda job: release.wait())
    worker = Worker(store, {queue: handler}, poll_interval_s=1000)

    async def body():
        await wait_until(lambda: handler.starts)
        assert await queue.cancel(job_id)
        release.set()  # the handler returns: its ack is refused, the job is cancelling
        await wait_until(lambda: worker.statistics().in_flight == 0)

    events = await run_worker(worker, body)
    stats = worker.statistics()
    assert (stats.cancelled, stats.acked, stats.lease_lost) == (1, 0, 0)
    assert await queue.get_job(job_id) is None
    (cancelled,) = [e for e in events if e.kind == "cancelled"]
    assert cancelled.latency_s is None  # the handler had ended before


async def test_r15_a_handler_that_never_checkpoints_stops_late_and_is_still_cancelled(
    autojump_clock, store
):
    queue = store.queue("q", QueueOpts(visibility_timeout_s=300))
    job_id = await queue.enqueue(b"x")

    async def blocking(job):
        with trio.CancelScope(shield=True):  # stands for code that never checkpoints
            await trio.sleep(7)

    handler = Handler(blocking)
    worker = Worker(store, {queue: handler}, poll_interval_s=1000)

    async def body():
        await wait_until(lambda: handler.starts)
        assert await queue.cancel(job_id)
        await wait_until(lambda: worker.statistics().in_flight == 0)

    events = await run_worker(worker, body)
    # It ran to its end (7 s), and its job is cancelled, not completed.
    assert [t for _, t in handler.ended] == [pytest.approx(7.0, abs=0.05)]
    assert handler.cancelled == []
    stats = worker.statistics()
    assert (stats.cancelled, stats.acked) == (1, 0)
    (cancelled,) = [e for e in events if e.kind == "cancelled"]
    assert cancelled.latency_s == pytest.approx(7.0, abs=0.05)
