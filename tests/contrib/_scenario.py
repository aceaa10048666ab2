"""Shared by the contrib tests: one worker run that meets every outcome.

The store's clock follows trio's ``MockClock(autojump_threshold=0)``, so run times, claim
latencies and span durations are exact, and nothing sleeps for real.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import trio

from alkstore_trio import Fail, QueueOpts, Retry, Worker
from alkstore_trio.testing import TrioClock

T0 = datetime(2000, 1, 1, tzinfo=UTC)


@asynccontextmanager
async def running(worker, *watchers):
    """Start each watcher's ``run(worker)``, then the worker; stop it at the end of the
    block and wait for everything to finish."""
    async with trio.open_nursery() as nursery:
        for watcher in watchers:
            await nursery.start(watcher.run, worker)
        await nursery.start(worker.run)
        yield worker
        worker.stop()


async def wait_until(predicate, *, step=0.5, limit=1000.0):
    deadline = trio.current_time() + limit
    while not predicate():
        assert trio.current_time() < deadline, "condition never became true"
        await trio.sleep(step)


#: What the scenario's jobs do, by payload (each run first works for 1 s):
#:
#: - ``ok1``, ``ok2``, ``late``: return (acked); ``late`` had been due for 42 s.
#: - ``retry``: attempt 1 raises ``Retry(delay_s=5)``; attempt 2 returns.
#: - ``fail``: raises ``Fail`` (dead-lettered).
#: - ``slow``: attempt 1 runs past ``job_timeout_s`` (50 s: retried); attempt 2 returns.
#: - ``boom``: attempt 1 raises ``ValueError`` (retried); attempt 2 returns.
#:
#: (The backoff is 0, so those two retries are due at once; the next re-poll, within 1 s,
#: claims them again.)
#: - ``cancel``: cancels its own job, then runs on for 10 s without a checkpoint (as
#:   blocking code would); R15 records the job cancelled when the handler ends.
SCENARIO = (b"ok1", b"ok2", b"retry", b"fail", b"slow", b"boom", b"cancel")
#: Claims: ok1, ok2, late, fail, cancel once; retry, slow, boom twice.
CLAIMS = 11
#: Seconds of run time, summed: 1 s for each run but slow's first (50) and cancel's (10).
RUN_TIME_S = 9 * 1.0 + 50.0 + 10.0


def scenario_queue(store):
    return store.queue("q", QueueOpts(visibility_timeout_s=30, backoff_base_s=0, max_attempts=3))


async def enqueue_scenario(queue, headers=None):
    """Enqueue the scenario's jobs (each with ``headers``); their ids."""
    ids = await queue.enqueue_many(SCENARIO, headers=headers)
    by_payload = dict(zip(SCENARIO, ids, strict=True))
    late_run_at = TrioClock().now() - timedelta(seconds=42)
    by_payload[b"late"] = await queue.enqueue(b"late", run_at=late_run_at, headers=headers)
    return by_payload


def scenario_worker(store, queue, wrap=lambda handler: handler, seen=None):
    """The scenario's worker; each job its handler receives is appended to ``seen``."""

    async def handler(job):
        if seen is not None:
            seen.append(job)
        payload = job.payload
        if payload == b"cancel":
            assert await queue.cancel(job.id)
            with trio.CancelScope(shield=True):  # stands for code that never checkpoints
                await trio.sleep(10)
            return
        await trio.sleep(1)
        if job.attempts == 1:
            if payload == b"retry":
                raise Retry(delay_s=5, error="not yet")
            if payload == b"slow":
                await trio.sleep_forever()
            if payload == b"boom":
                raise ValueError("boom")
        if payload == b"fail":
            raise Fail("broken for good")

    return Worker(
        store, {queue: wrap(handler)}, job_timeout_s=50, poll_interval_s=1, worker_id="w1"
    )


def scenario_done(worker):
    stats = worker.statistics()
    return (stats.acked, stats.dead_lettered, stats.cancelled, stats.in_flight) == (6, 1, 1, 0)
