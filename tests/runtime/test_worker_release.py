"""R7 with Q19.8: a stopping worker gives its jobs back with ``release``, so a deploy
never spends an attempt, let alone dead-letters a job; a crash still does.

The issue's case, scaled down on trio's mock clock: three rolling restarts while every
handler needs a minute, on a queue that allows three attempts. With ``retry`` as the
release each restart spent an attempt, and the third dead-lettered every job.
"""

from __future__ import annotations

import pytest
import trio

from alkstore_trio import QueueOpts, open_store
from alkstore_trio._runtime._worker import Worker
from alkstore_trio.testing import TrioClock

JOBS = 6
HANDLER_S = 60.0


@pytest.fixture
async def store(autojump_clock):
    async with open_store("memory://", clock=TrioClock()) as opened:
        yield opened


class LongHandler:
    """A handler that needs ``HANDLER_S`` seconds; it records the attempt of every run
    that finished and of every run that started."""

    def __init__(self) -> None:
        self.started: list[tuple[int, int]] = []
        self.finished: list[tuple[int, int]] = []
        self.expect(0, 0)

    def expect(self, started: int, finished: int) -> None:
        """Set :attr:`all_started` / :attr:`all_finished` once that many runs have."""
        self._want = (started, finished)
        self.all_started = trio.Event()
        self.all_finished = trio.Event()

    async def __call__(self, job) -> None:
        self.started.append((job.id, job.attempts))
        if len(self.started) >= self._want[0]:
            self.all_started.set()
        await trio.sleep(HANDLER_S)
        self.finished.append((job.id, job.attempts))
        if len(self.finished) >= self._want[1]:
            self.all_finished.set()


async def run_until_stopped(worker: Worker, started: trio.Event, *, grace_s: float | None):
    """Run ``worker`` until its handlers all started (plus 10 s), then stop it: with the
    worker's grace (``None``) or ``stop(grace_s=...)``."""
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await started.wait()
        await trio.sleep(10)
        worker.stop(grace_s=grace_s)


async def test_r7_q19_8_three_graceful_restarts_during_a_long_handler_dead_letter_nothing(
    autojump_clock, store
):
    queue = store.queue("deploy", QueueOpts(max_attempts=3, visibility_timeout_s=300))
    ids = await queue.enqueue_many([b"job"] * JOBS)
    handler = LongHandler()
    # Restarts: a graceful stop whose grace runs out, the operator's second Ctrl-C
    # (stop(grace_s=0)), and a worker that holds prefetched claims that never started.
    restarts = [
        {"grace": None, "concurrency": JOBS, "prefetch": 0},
        {"grace": 0.0, "concurrency": JOBS, "prefetch": 0},
        {"grace": None, "concurrency": JOBS // 2, "prefetch": JOBS // 2},
    ]
    released = 0
    for round_, plan in enumerate(restarts, 1):
        worker = Worker(
            store,
            {queue: handler},
            concurrency=plan["concurrency"],
            prefetch=plan["prefetch"],
            shutdown_grace_s=5,
        )
        handler.expect(len(handler.started) + plan["concurrency"], JOBS)
        await run_until_stopped(worker, handler.all_started, grace_s=plan["grace"])
        stats = worker.statistics()
        assert (stats.dead_lettered, stats.acked, stats.in_flight) == (0, 0, 0), round_
        assert stats.released == JOBS, f"restart {round_}: {stats}"
        released += stats.released
        for job_id in ids:
            job = await queue.get_job(job_id)
            assert job is not None
            got = (job.state, job.attempts, job.last_error, job.claim_token)
            assert got == ("pending", 0, "worker stopped", None), f"restart {round_}: {got}"
    assert handler.finished == []
    assert released == 3 * JOBS
    # The fourth worker runs every job to the end, each on its first attempt.
    worker = Worker(store, {queue: handler}, concurrency=JOBS, shutdown_grace_s=5)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await handler.all_finished.wait()
        worker.stop()
    assert sorted(handler.finished) == [(job_id, 1) for job_id in ids]
    stats = (await store.stats("deploy")).queues[0]
    assert (stats.dead, stats.dead_lettered_total, stats.acked_total) == (0, 0, JOBS)


async def test_r7_a_crash_still_consumes_the_attempt(autojump_clock, store):
    # Q19.8: only a release gives the attempt back. A worker that dies without releasing
    # (here: its claim simply lapses) leaves the attempt spent, and the reclaim counts
    # the next one, so a job that kills its worker is dead-lettered in the end.
    queue = store.queue("crash", QueueOpts(max_attempts=2, visibility_timeout_s=10))
    job_id = await queue.enqueue(b"poison")
    first = await queue.claim_one("crashed-1")
    assert first is not None
    await trio.sleep(11)
    second = await queue.claim_one("crashed-2")
    assert second is not None
    assert (second.job.attempts, second.job.claim_token != first.job.claim_token) == (2, True)
    await trio.sleep(11)
    assert await queue.claim_batch("next", 1) == []
    job = await queue.get_job(job_id)
    assert job is not None
    assert (job.state, job.last_error) == ("dead", "max attempts exceeded")
