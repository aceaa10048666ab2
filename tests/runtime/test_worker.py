"""R1-R10: the worker on the in-memory engine.

Every test runs on trio's ``MockClock(autojump_threshold=0)`` (the ``autojump_clock``
fixture), and the store's clock follows it (:class:`TrioClock`), so leases, delays,
heartbeats and grace periods pass instantly and the times asserted below are exact.
Nothing sleeps for real.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections import Counter
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import pytest
import trio
from _worker_run import running, wait_until

from alkstore_trio import EngineError, InvalidArgument, QueueOpts, SupervisorEscalated, open_store
from alkstore_trio._runtime._outcomes import Fail, Retry
from alkstore_trio._runtime._worker import Worker, WorkerStatistics
from alkstore_trio.testing import TrioClock

T0 = datetime(2000, 1, 1, tzinfo=UTC)
LOGGER = "alkstore_trio.worker"


_START = [0.0]


def approx(seconds):
    return pytest.approx(seconds, abs=0.05)


def now():
    """Seconds since the test's store opened (trio's mock clock does not start at 0)."""
    return trio.current_time() - _START[0]


@pytest.fixture
async def store(autojump_clock):
    _START[0] = trio.current_time()
    async with open_store("memory://", clock=TrioClock()) as opened:
        yield opened


class Recorder:
    """A handler that records each run's start time, and then does what ``action`` says."""

    def __init__(self, action=None):
        self.action = action
        self.starts: list[tuple[int, int, float]] = []
        self.cancelled: list[tuple[int, float]] = []
        self.running = 0
        self.max_running = 0

    async def __call__(self, job):
        self.starts.append((job.id, job.attempts, now()))
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            if self.action is not None:
                await self.action(job)
        except trio.Cancelled:
            self.cancelled.append((job.id, now()))
            raise
        finally:
            self.running -= 1


async def forever(job):
    await trio.sleep_forever()


# --- R2 / R5: outcomes ------------------------------------------------------------------


async def test_r2_returned_jobs_are_acked_and_nursery_start_works(autojump_clock, store):
    queue = store.queue("q")
    ids = await queue.enqueue_many([b"a", b"b", b"c"])
    handler = Recorder()
    worker = Worker(store, {"q": handler}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 3)
    assert sorted(i for i, _, _ in handler.starts) == ids
    for job_id in ids:
        assert await queue.get_job(job_id) is None
    stats = worker.statistics()
    assert (stats.claimed, stats.acked, stats.retried, stats.in_flight) == (3, 3, 0, 0)


async def test_r5_retry_gives_the_job_back_with_its_delay_and_error(autojump_clock, store):
    queue = store.queue("q")
    job_id = await queue.enqueue(b"x")

    async def action(job):
        raise Retry(delay_s=100, error="later")

    worker = Worker(store, {queue: Recorder(action)}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().retried == 1)
        job = await queue.get_job(job_id)
    assert job.state == "pending"
    assert job.attempts == 1
    assert job.last_error == "later"
    expected = TrioClock().now() + timedelta(seconds=100)
    assert abs((job.run_at - expected).total_seconds()) < 0.05


async def test_r5_fail_dead_letters_now(autojump_clock, store):
    queue = store.queue("q", QueueOpts(max_attempts=5))
    job_id = await queue.enqueue(b"x")

    async def action(job):
        raise Fail("bad input")

    worker = Worker(store, {queue: Recorder(action)})
    async with running(worker):
        await wait_until(lambda: worker.statistics().dead_lettered == 1)
    job = await queue.get_job(job_id)
    assert (job.state, job.last_error, job.attempts) == ("dead", "bad input", 1)


async def test_r5_other_exceptions_retry_with_type_and_message_then_dead_letter(
    autojump_clock, store
):
    queue = store.queue("q", QueueOpts(max_attempts=2, backoff_base_s=0))
    job_id = await queue.enqueue(b"x")

    async def action(job):
        raise ValueError(f"boom\x00{job.attempts}")

    handler = Recorder(action)
    worker = Worker(store, {queue: handler}, poll_interval_s=5)
    async with running(worker):
        await wait_until(lambda: worker.statistics().dead_lettered == 1)
    job = await queue.get_job(job_id)
    assert job.state == "dead"
    assert job.last_error == "ValueError: boom\\x002"
    assert [attempt for _, attempt, _ in handler.starts] == [1, 2]
    stats = worker.statistics()
    assert (stats.retried, stats.dead_lettered, stats.handler_errors) == (1, 1, 2)


async def test_r5_long_and_odd_error_text_is_made_storable(autojump_clock, store):
    queue = store.queue("q")
    job_id = await queue.enqueue(b"x")

    async def action(job):
        raise RuntimeError("\ud800" + "x" * 100_000)

    worker = Worker(store, {queue: Recorder(action)}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().retried == 1)
    job = await queue.get_job(job_id)
    assert job.last_error.startswith("RuntimeError: \\ud800xxx")
    assert job.last_error.endswith("[truncated]")
    assert len(job.last_error) == 65536


async def test_r5_job_timeout_cancels_the_handler_and_retries(autojump_clock, store):
    queue = store.queue("q", QueueOpts(backoff_base_s=1000))
    job_id = await queue.enqueue(b"x")
    handler = Recorder(forever)
    worker = Worker(store, {queue: handler}, job_timeout_s=2.5, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().retried == 1)
    assert handler.cancelled == [(job_id, approx(2.5))]
    job = await queue.get_job(job_id)
    assert job.state == "pending"
    assert job.last_error == "job timed out after 2.5s (job_timeout_s)"
    assert worker.statistics().timed_out == 1


# --- R6: heartbeats ---------------------------------------------------------------------


async def test_r6_heartbeats_keep_a_long_job_alive(autojump_clock, store):
    queue = store.queue("q", QueueOpts(visibility_timeout_s=3))
    job_id = await queue.enqueue(b"x")

    async def action(job):
        await trio.sleep(20)

    worker = Worker(store, {queue: Recorder(action)}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1)
    assert await queue.get_job(job_id) is None
    assert worker.statistics().lease_lost == 0


async def test_r6_lost_lease_cancels_the_handler(autojump_clock, store):
    queue = store.queue("q", QueueOpts(visibility_timeout_s=30))
    job_id = await queue.enqueue(b"x")
    handler = Recorder(forever)
    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: handler.starts)
        await trio.sleep(1)
        # Q6: the row is acked by someone else (no token check): the claim is gone.
        assert await queue.ack_batch([job_id]) == 1
        await wait_until(lambda: worker.statistics().lease_lost == 1)
        # The first heartbeat (a third of the visibility timeout) is refused: the handler
        # is cancelled at once, and no other operation is attempted for the claim.
        assert handler.cancelled == [(job_id, approx(10.0))]
        await wait_until(lambda: worker.statistics().in_flight == 0)
    stats = worker.statistics()
    assert (stats.acked, stats.retried, stats.released, stats.lease_lost) == (0, 0, 0, 1)


async def test_r6_explicit_heartbeat_interval(autojump_clock, store):
    queue = store.queue("q", QueueOpts(visibility_timeout_s=30))
    job_id = await queue.enqueue(b"x")
    handler = Recorder(forever)
    worker = Worker(store, {queue: handler}, heartbeat_interval_s=2, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: handler.starts)
        await queue.ack_batch([job_id])  # Q6: the claim is gone
        await wait_until(lambda: handler.cancelled)
    assert handler.cancelled == [(job_id, approx(2.0))]


async def test_r6_a_lapsed_and_reclaimed_claim_cancels_the_handler(autojump_clock, store):
    queue = store.queue("q", QueueOpts(visibility_timeout_s=3))
    job_id = await queue.enqueue(b"x")
    handler = Recorder(forever)
    # Heartbeats too rare for the lease: the claim lapses at 3 and is reclaimed at 4. The
    # worker stops the handler when the lease runs out (3), before anyone can reclaim it.
    worker = Worker(store, {queue: handler}, heartbeat_interval_s=10, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: handler.starts)
        await trio.sleep(4)
        other = await queue.claim_one("another-worker")
        assert (other.id, other.job.attempts) == (job_id, 2)
        await wait_until(lambda: handler.cancelled)
        assert handler.cancelled == [(job_id, approx(3.0))]
        await wait_until(lambda: worker.statistics().in_flight == 0)
        # The worker attempted nothing on the row that the other worker now holds.
        job = await queue.get_job(job_id)
        assert (job.claimed_by, job.attempts, job.last_error) == ("another-worker", 2, None)
    stats = worker.statistics()
    assert (stats.lease_lost, stats.acked, stats.retried) == (1, 0, 0)


async def test_r6_a_refused_outcome_counts_as_lease_lost(autojump_clock, store):
    queue = store.queue("q", QueueOpts(visibility_timeout_s=30))
    job_id = await queue.enqueue(b"x")
    cancelled = trio.Event()

    async def action(job):
        await cancelled.wait()  # finishes before its first heartbeat

    worker = Worker(store, {queue: Recorder(action)}, poll_interval_s=1000)
    async with running(worker):
        await trio.sleep(1)
        assert await queue.ack_batch([job_id]) == 1  # Q6: the claim is gone
        cancelled.set()
        await wait_until(lambda: worker.statistics().in_flight == 0)
    stats = worker.statistics()
    assert (stats.lease_lost, stats.acked) == (1, 0)
    assert await queue.get_job(job_id) is None


# --- R2: concurrency and claiming -----------------------------------------------------


def count_ack_claims(store, monkeypatch):
    """Record the acked claims of every ``ack`` or ``ack_and_claim`` call
    the store's backend receives (one statement each)."""
    backend = store._engine
    real_ack, real_fused = backend.ack, backend.ack_and_claim
    calls: list[list[tuple[int, int]]] = []

    async def ack_claims(queue, claims):
        calls.append(list(claims))
        return await real_ack(queue, claims)

    async def ack_claims_and_claim(queue, claims, worker_id, n):
        calls.append(list(claims))
        return await real_fused(queue, claims, worker_id, n)

    monkeypatch.setattr(backend, "ack", ack_claims)
    monkeypatch.setattr(backend, "ack_and_claim", ack_claims_and_claim)
    return calls


async def test_r2_a_draining_worker_acks_and_claims_in_one_statement(
    autojump_clock, store, monkeypatch
):
    calls = count_backend_calls(store, monkeypatch, "claim", "ack", "ack_and_claim")
    queue = store.queue("q")
    ids = await queue.enqueue_many([b"x"] * 100)

    async def short(job):
        await trio.sleep(1)

    worker = Worker(store, {queue: Recorder(short)}, concurrency=10, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == len(ids))
    # One claim to start; then each wave of 10 acks claims the next 10 in the same
    # statement; the last one finds the queue empty; nothing is acked on its own.
    assert calls["claim"] == [10]
    assert calls["ack_and_claim"] == [10] * 10
    assert calls["ack"] == []
    assert worker.statistics().claimed == 100


async def test_r2_acks_are_not_fused_with_a_claim_of_an_idle_queue(
    autojump_clock, store, monkeypatch
):
    calls = count_backend_calls(store, monkeypatch, "ack", "ack_and_claim")
    queue = store.queue("q")
    await queue.enqueue_many([b"x"] * 5)

    async def short(job):
        await trio.sleep(1)

    worker = Worker(store, {queue: Recorder(short)}, concurrency=10, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 5)
    # The first claim came back short: the queue is empty, so the acks go alone.
    assert calls == {"ack": [5], "ack_and_claim": []}


async def test_r2_fused_claims_share_free_slots_among_woken_queues(autojump_clock, store):
    queues = [store.queue("a"), store.queue("b")]
    for queue in queues:
        await queue.enqueue_many([b"x"] * 200)
    started: list[str] = []

    async def short(job):
        started.append(job.queue)
        await trio.sleep(1)

    worker = Worker(store, dict.fromkeys(queues, short), concurrency=10, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: len(started) >= 100)
    # Neither queue starves the other while both have a backlog.
    counts = Counter(started[:100])
    assert min(counts["a"], counts["b"]) >= 35, counts


async def test_r2_acks_waiting_in_the_inbox_are_flushed_as_one_statement(
    autojump_clock, store, monkeypatch
):
    calls = count_ack_claims(store, monkeypatch)
    queues = [store.queue("a"), store.queue("b")]
    ids = [
        *await queues[0].enqueue_many([b"x"] * 150),
        *await queues[1].enqueue_many([b"y"] * 150),
    ]

    async def short(job):
        await trio.sleep(1)  # a whole wave of handlers finishes at the same instant

    worker = Worker(
        store, {queue: Recorder(short) for queue in queues}, concurrency=50, poll_interval_s=1000
    )
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == len(ids))
    acked = [job_id for call in calls for job_id, _ in call]
    assert sorted(acked) == sorted(ids)
    # Each wave of 50 finishing handlers is flushed in a few statements (one per queue
    # and batch the dispatcher found waiting), not one per job.
    assert len(calls) <= len(ids) // 10, [len(call) for call in calls]
    assert max(len(call) for call in calls) >= 10
    for job_id in ids:
        assert await store.queue("a").get_job(job_id) is None
        assert await store.queue("b").get_job(job_id) is None


async def test_r2_a_lone_ack_is_flushed_at_once(autojump_clock, store, monkeypatch):
    calls = count_ack_claims(store, monkeypatch)
    queue = store.queue("q")
    job_id = await queue.enqueue(b"x")
    finished: list[float] = []

    async def short(job):
        await trio.sleep(3)
        finished.append(now())

    worker = Worker(store, {queue: Recorder(short)}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1, step=0.001)
        # Acked within the instant the handler returned: no waiting for more acks.
        assert now() == approx(finished[0])
        assert await queue.get_job(job_id) is None
    assert calls == [[(job_id, 1)]]


def count_backend_calls(store, monkeypatch, *operations):
    """Record the number of items of every call the store's backend receives, per
    operation (``ack``, ``retry``, ``fail``, ...)."""
    backend = store._engine
    calls: dict[str, list[int]] = {operation: [] for operation in operations}
    for operation in operations:
        real = getattr(backend, operation)

        async def counting(queue, items, *args, _real=real, _operation=operation):
            if isinstance(items, str):  # claim(queue, worker_id, n): record n
                calls[_operation].append(args[0])
                return await _real(queue, items, *args)
            items = list(items)
            calls[_operation].append(len(items))
            return await _real(queue, items, *args)

        monkeypatch.setattr(backend, operation, counting)
    return calls


async def test_r2_retries_and_fails_waiting_in_the_inbox_are_flushed_as_one_statement_per_kind(
    autojump_clock, store, monkeypatch
):
    calls = count_backend_calls(store, monkeypatch, "ack", "ack_and_claim", "retry", "fail")
    queue = store.queue("q", QueueOpts(max_attempts=2))
    payloads = [b"ack", b"retry", b"fail", b"boom"] * 25
    await queue.enqueue_many(payloads)

    async def action(job):
        await trio.sleep(1)  # every handler of a wave finishes at the same instant
        if job.payload == b"retry":
            raise Retry(delay_s=1000, error="later")
        if job.payload == b"fail":
            raise Fail("no")
        if job.payload == b"boom":
            raise ValueError("boom")

    worker = Worker(store, {queue: Recorder(action)}, concurrency=100, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().finished == 100)
        await wait_until(lambda: worker.statistics().in_flight == 0)
    stats = worker.statistics()
    assert (stats.acked, stats.retried, stats.dead_lettered) == (25, 50, 25)
    # One wave of 100 outcomes: one statement per kind (the retries of "retry" and "boom"
    # share one), not one per job.
    # (The first claim came back full, so the queue is still woken: the acks go with a
    # claim, which finds nothing ready.)
    assert calls == {
        "ack": [],
        "ack_and_claim": [25],
        "retry": [50],
        "fail": [25],
    }
    jobs = [await queue.get_job(i) for i in range(1, 101)]
    states = Counter((job.state, job.last_error) for job in jobs if job is not None)
    assert states == {
        ("pending", "later"): 25,
        ("pending", "ValueError: boom"): 25,
        ("dead", "no"): 25,
    }


async def test_r7_released_jobs_are_flushed_as_one_statement(autojump_clock, store, monkeypatch):
    calls = count_backend_calls(store, monkeypatch, "release", "retry")
    queue = store.queue("q")
    await queue.enqueue_many([b"x"] * 30)
    worker = Worker(store, {queue: Recorder(forever)}, concurrency=30, shutdown_grace_s=1)
    async with running(worker):
        await wait_until(lambda: worker.statistics().started == 30)
    assert worker.statistics().released == 30
    assert calls == {"release": [30], "retry": []}


def count_heartbeat_claims(store, monkeypatch):
    """Record the claims of every ``heartbeat`` call the store's backend receives."""
    backend = store._engine
    real = backend.heartbeat
    calls: list[list[tuple[int, int]]] = []

    async def counting(queue, claims, extend_s):
        calls.append(list(claims))
        return await real(queue, claims, extend_s)

    monkeypatch.setattr(backend, "heartbeat", counting)
    return calls


async def test_r2_due_heartbeats_are_renewed_as_one_statement(autojump_clock, store, monkeypatch):
    calls = count_heartbeat_claims(store, monkeypatch)
    opts = QueueOpts(visibility_timeout_s=30)
    queues = [store.queue("a", opts), store.queue("b", opts)]
    ids = [
        *await queues[0].enqueue_many([b"x"] * 20),
        *await queues[1].enqueue_many([b"y"] * 20),
    ]

    async def long(job):
        await trio.sleep(25)  # every claim's heartbeats fall due at 10 and 20 together

    worker = Worker(
        store, {queue: Recorder(long) for queue in queues}, concurrency=40, poll_interval_s=1000
    )
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == len(ids))
    renewed = Counter(job_id for call in calls for job_id, _ in call)
    assert renewed == dict.fromkeys(ids, 2)
    # Each wave of 40 due heartbeats is renewed in one statement per queue, not per job.
    assert len(calls) <= 4, [len(call) for call in calls]
    for call in calls:
        assert len({job_id for job_id, _ in call}) == len(call)
    stats = worker.statistics()
    assert (stats.lease_lost, stats.engine_errors) == (0, 0)
    for job_id in ids:
        assert await store.queue("a").get_job(job_id) is None
        assert await store.queue("b").get_job(job_id) is None


async def test_r2_concurrency_limit_is_respected(autojump_clock, store):
    queue = store.queue("q")
    await queue.enqueue_many([b"x"] * 10)

    async def action(job):
        await trio.sleep(1)

    handler = Recorder(action)
    worker = Worker(store, {queue: handler}, concurrency=3, claim_batch_max=2)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 10)
    assert handler.max_running == 3
    # Freed slots are refilled at once while the queue still has work (drain).
    assert now() == pytest.approx(4, abs=0.05)
    assert worker.statistics().claimed == 10


async def test_r2_queues_are_served_round_robin(autojump_clock, store):
    a, b = store.queue("a"), store.queue("b")
    await a.enqueue_many([b"x"] * 4)
    await b.enqueue_many([b"x"] * 4)
    order = []

    async def handler(job):
        order.append(job.queue)
        await trio.sleep(1)

    worker = Worker(store, {a: handler, b: handler}, concurrency=2, claim_batch_max=1)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 8)
    assert order[:2] in (["a", "b"], ["b", "a"])


async def test_r3_a_wake_starts_a_job_without_waiting_for_the_poll(autojump_clock, store):
    queue = store.queue("q")
    handler = Recorder()
    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    async with running(worker):
        await trio.sleep(5)
        job_id = await queue.enqueue(b"x")
        await wait_until(lambda: worker.statistics().acked == 1)
    assert handler.starts == [(job_id, 1, approx(5.0))]


async def test_r4_the_repoll_picks_up_a_lapsed_claim(autojump_clock, store):
    # No wake announces a lease running out (R11 covers delayed jobs only): the re-poll
    # finds the job that another worker claimed and abandoned.
    queue = store.queue("q", QueueOpts(visibility_timeout_s=7))
    job_id = await queue.enqueue(b"x")
    assert await queue.claim_one("gone") is not None
    handler = Recorder()
    worker = Worker(store, {queue: handler}, poll_interval_s=5)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1)
    assert handler.starts == [(job_id, 2, pytest.approx(10.0, abs=0.02))]


async def test_r4_a_known_delay_wakes_the_dispatcher_when_due(autojump_clock, store):
    queue = store.queue("q")
    job_id = await queue.enqueue(b"x")

    async def action(job):
        if job.attempts == 1:
            raise Retry(delay_s=2)

    handler = Recorder(action)
    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1)
    assert [(i, n) for i, n, _ in handler.starts] == [(job_id, 1), (job_id, 2)]
    assert handler.starts[1][2] == pytest.approx(2.0, abs=0.02)


# --- R3 / R1: supervision -------------------------------------------------------------


class CrashingListener:
    async def wait(self, timeout_s=None):
        await trio.sleep(1)
        raise EngineError("connection lost")


def crash_listener(monkeypatch, store, times):
    """Make the first ``times`` wake listeners crash one second after they open."""
    real = store.open_wake_listener
    calls = []

    @asynccontextmanager
    async def crashing(queues):
        yield CrashingListener()

    def patched(queues):
        calls.append(queues)
        return crashing(queues) if len(calls) <= times else real(queues)

    monkeypatch.setattr(store, "open_wake_listener", patched)
    return calls


async def test_r3_a_crashed_listener_is_restarted(autojump_clock, store, monkeypatch):
    calls = crash_listener(monkeypatch, store, times=1)
    queue = store.queue("q")
    handler = Recorder()
    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    async with running(worker):
        await trio.sleep(10)
        assert len(calls) == 2
        assert worker._supervisor.statistics().child("listener").restarts == 1
        job_id = await queue.enqueue(b"x")
        await wait_until(lambda: worker.statistics().acked == 1)
    assert handler.starts == [(job_id, 1, approx(10.0))]


async def test_r1_escalation_releases_the_claimed_jobs_and_fails_loudly(
    autojump_clock, store, monkeypatch
):
    crash_listener(monkeypatch, store, times=100)
    queue = store.queue("q")
    job_id = await queue.enqueue(b"x")
    handler = Recorder(forever)
    worker = Worker(store, {queue: handler}, max_restarts=2, shutdown_grace_s=1)
    with pytest.raises(SupervisorEscalated):
        await worker.run()
    job = await queue.get_job(job_id)
    assert (job.state, job.attempts, job.last_error) == ("pending", 0, "worker stopped")
    assert worker.statistics().released == 1
    assert worker.statistics().in_flight == 0


# --- R7: graceful stop ----------------------------------------------------------------


async def test_r7_stop_lets_running_handlers_finish_within_the_grace(autojump_clock, store):
    queue = store.queue("q")
    job_id = await queue.enqueue(b"x")

    async def action(job):
        await trio.sleep(3)

    worker = Worker(store, {queue: Recorder(action)}, shutdown_grace_s=10)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await trio.sleep(1)
        worker.stop()
        await queue.enqueue(b"not claimed after stop")
    assert now() == pytest.approx(3.0, abs=0.02)
    assert await queue.get_job(job_id) is None
    stats = worker.statistics()
    assert (stats.claimed, stats.acked, stats.in_flight) == (1, 1, 0)


async def test_r7_stop_cancels_after_the_grace_and_releases_the_jobs(autojump_clock, store):
    queue = store.queue("q")
    ids = await queue.enqueue_many([b"x", b"y"])
    handler = Recorder(forever)
    worker = Worker(store, {queue: handler}, shutdown_grace_s=5)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await trio.sleep(1)
        worker.stop()
    assert now() == pytest.approx(6.0, abs=0.02)
    assert sorted(handler.cancelled) == [(ids[0], approx(6.0)), (ids[1], approx(6.0))]
    for job_id in ids:
        job = await queue.get_job(job_id)
        assert (job.state, job.attempts, job.last_error, job.claimed_by) == (
            "pending",
            0,  # Q19.8: released, the attempt given back
            "worker stopped",
            None,
        )
    stats = worker.statistics()
    assert (stats.released, stats.in_flight, stats.retried) == (2, 0, 0)


async def test_r7_cancelling_run_is_a_graceful_stop(autojump_clock, store):
    queue = store.queue("q")
    quick, slow = await queue.enqueue_many([b"quick", b"slow"])

    async def action(job):
        await trio.sleep(2 if job.payload == b"quick" else 100)

    handler = Recorder(action)
    worker = Worker(store, {queue: handler}, shutdown_grace_s=5)
    with trio.move_on_after(1):
        await worker.run()
    # Cancelled at 1: the quick handler finished within the grace, the slow one was
    # cancelled when the grace ran out (1 + 5) and its job released.
    assert now() == pytest.approx(6.0, abs=0.02)
    assert await queue.get_job(quick) is None
    job = await queue.get_job(slow)
    assert (job.state, job.last_error) == ("pending", "worker stopped")
    assert handler.cancelled == [(slow, approx(6.0))]


async def test_r7_stop_before_run_returns_at_once(autojump_clock, store):
    worker = Worker(store, {"q": Recorder()})
    worker.stop()
    await worker.run()
    with pytest.raises(RuntimeError, match="already ran"):
        await worker.run()


# --- R8: faults -----------------------------------------------------------------------


async def test_r8_handler_exceptions_never_crash_the_worker(autojump_clock, store):
    queue = store.queue("q", QueueOpts(max_attempts=1))
    kinds = [b"ok", b"type", b"retry", b"fail", b"key", b"ok"]
    await queue.enqueue_many(kinds)

    async def action(job):
        if job.payload == b"type":
            raise TypeError("bad")
        if job.payload == b"retry":
            raise Retry(error="again")
        if job.payload == b"fail":
            raise Fail()
        if job.payload == b"key":
            raise KeyError("missing")

    worker = Worker(store, {queue: Recorder(action)})
    async with running(worker):
        await wait_until(
            lambda: worker.statistics().in_flight == 0 and worker.statistics().claimed == 6
        )
    stats = worker.statistics()
    assert (stats.acked, stats.dead_lettered, stats.handler_errors) == (2, 4, 2)


async def test_r8_engine_errors_are_retried_not_fatal(autojump_clock, store, monkeypatch):
    queue = store.queue("q")
    await queue.enqueue(b"x")
    failures = []
    real_claim = type(queue).claim_batch

    async def flaky_claim(self, worker_id, n):
        if len(failures) < 2:
            failures.append(now())
            raise EngineError("database unreachable")
        return await real_claim(self, worker_id, n)

    monkeypatch.setattr(type(queue), "claim_batch", flaky_claim)
    worker = Worker(store, {queue: Recorder()}, poll_interval_s=5)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1)
    assert worker.statistics().engine_errors == 2
    # Both failures came at the start (the first claim, and the listener's first wake);
    # the claim was tried again on the next tick, and the worker went on.
    assert failures == [approx(0.0), approx(0.0)]
    assert now() == approx(5.0)


async def test_r8_a_failed_outcome_or_heartbeat_is_tried_again(autojump_clock, store, monkeypatch):
    from alkstore_trio import Queue

    queue = store.queue("q", QueueOpts(visibility_timeout_s=30))
    job_id = await queue.enqueue(b"x")
    real_ack, real_heartbeat = Queue.ack_handles, Queue.heartbeat_handles
    calls = {"ack": 0, "heartbeat": 0}

    async def flaky_ack(self, handles):
        calls["ack"] += 1
        if calls["ack"] == 1:
            raise EngineError("database unreachable")
        return await real_ack(self, handles)

    async def flaky_heartbeat(self, handles, extend_s=None):
        calls["heartbeat"] += 1
        if calls["heartbeat"] == 1:
            raise EngineError("database unreachable")
        return await real_heartbeat(self, handles, extend_s)

    real_fused = Queue.ack_handles_and_claim

    async def flaky_fused(self, handles, worker_id, n):
        calls["ack"] += 1
        if calls["ack"] == 1:
            raise EngineError("database unreachable")
        return await real_fused(self, handles, worker_id, n)

    monkeypatch.setattr(Queue, "ack_handles", flaky_ack)
    monkeypatch.setattr(Queue, "ack_handles_and_claim", flaky_fused)
    monkeypatch.setattr(Queue, "heartbeat_handles", flaky_heartbeat)

    async def action(job):
        await trio.sleep(25)  # heartbeats at 10 (fails) and 20 (renews to 50)

    worker = Worker(store, {queue: Recorder(action)}, poll_interval_s=7)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1)
        # The ack failed at 25; the slot stayed in flight and the tick at 28 applied it.
        assert now() == approx(28.0)
    assert calls == {"ack": 2, "heartbeat": 2}
    stats = worker.statistics()
    assert (stats.engine_errors, stats.lease_lost, stats.in_flight) == (2, 0, 0)
    assert await queue.get_job(job_id) is None


# --- R9: observability ----------------------------------------------------------------


async def test_r9_transitions_are_logged_with_structured_fields(autojump_clock, store, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    queue = store.queue("q")
    job_id = await queue.enqueue(b"secret-payload")
    worker = Worker(store, {queue: Recorder()}, worker_id="w-1")
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1)
    job_records = [r for r in caplog.records if r.name == LOGGER and r.job_id is not None]
    assert {r.event for r in job_records} >= {"claim", "start", "ack"}
    for record in job_records:
        assert (record.job_id, record.queue, record.attempt, record.worker_id) == (
            job_id,
            "q",
            1,
            "w-1",
        )
    assert "secret-payload" not in caplog.text


async def test_r9_statistics_are_a_frozen_consistent_snapshot(autojump_clock, store):
    queue = store.queue("q")
    await queue.enqueue_many([b"x"] * 3)

    async def action(job):
        await trio.sleep(2)

    worker = Worker(store, {queue: Recorder(action)})
    async with running(worker):
        await wait_until(lambda: worker.statistics().started == 3)
        during = worker.statistics()
        await wait_until(lambda: worker.statistics().acked == 3)
    after = worker.statistics()
    assert isinstance(after, WorkerStatistics)
    with pytest.raises(dataclasses.FrozenInstanceError):
        after.acked = 0  # type: ignore[misc]
    assert (during.in_flight, during.acked) == (3, 0)
    assert (after.claimed, after.acked, after.in_flight, after.finished) == (3, 3, 0, 3)
    assert after.run_time_total_s == pytest.approx(6.0)
    assert after.run_time_mean_s == pytest.approx(2.0)
    assert after.claim_to_start_mean_s == pytest.approx(0.0, abs=0.01)
    assert after.worker_id == worker.worker_id


# --- R10: sweeps ----------------------------------------------------------------------


async def test_r10_expired_jobs_are_swept_on_a_cadence(autojump_clock, store):
    queue = store.queue("q", QueueOpts(expires_in_s=5))
    job_id = await queue.enqueue(b"x", delay_s=1000)
    worker = Worker(store, {queue: Recorder()}, sweep_interval_s=10, poll_interval_s=1000)
    async with running(worker):
        await trio.sleep(9)
        assert (await queue.get_job(job_id)).state == "pending"
        await trio.sleep(2)
        job = await queue.get_job(job_id)
    assert (job.state, job.last_error) == ("dead", "expired")


# --- construction ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": True}, "concurrency"),
        ({"poll_interval_s": 0}, "poll_interval_s"),
        ({"poll_interval_s": float("nan")}, "poll_interval_s"),
        ({"heartbeat_interval_s": -1}, "heartbeat_interval_s"),
        ({"job_timeout_s": 0}, "job_timeout_s"),
        ({"shutdown_grace_s": -1}, "shutdown_grace_s"),
        ({"claim_batch_max": 0}, "claim_batch_max"),
        ({"sweep_interval_s": float("inf")}, "sweep_interval_s"),
        ({"max_restarts": -1}, "max_restarts"),
        ({"restart_window_s": 0}, "restart_window_s"),
        ({"worker_id": ""}, "worker_id"),
    ],
)
async def test_worker_validates_its_arguments(autojump_clock, store, kwargs, match):
    with pytest.raises(InvalidArgument, match=match):
        Worker(store, {"q": Recorder()}, **kwargs)


async def test_worker_validates_its_handlers(autojump_clock, store):
    async with open_store("memory://") as other:
        with pytest.raises(InvalidArgument, match="another store"):
            Worker(store, {other.queue("q"): Recorder()})
    with pytest.raises(InvalidArgument, match="at least one"):
        Worker(store, {})
    with pytest.raises(InvalidArgument, match="twice"):
        Worker(store, {"q": Recorder(), store.queue("q"): Recorder()})
    with pytest.raises(InvalidArgument, match="async function"):
        Worker(store, {"q": 42})
    with pytest.raises(InvalidArgument, match=r"async function.*got function"):
        Worker(store, {"q": lambda job: None})  # a sync function fails at once, not per job
    with pytest.raises(InvalidArgument, match="queue name"):
        Worker(store, {"alk_reserved": Recorder()})


async def test_worker_id_defaults_to_host_pid_random(autojump_clock, store):
    import os

    a, b = Worker(store, {"q": Recorder()}), Worker(store, {"q": Recorder()})
    assert f":{os.getpid()}:" in a.worker_id
    assert a.worker_id != b.worker_id


def test_retry_validates_its_delay():
    with pytest.raises(ValueError, match="delay_s"):
        Retry(delay_s=-1)
    assert Retry(delay_s=1).delay_s == 1.0
    assert Fail().error is None


# --- PostgreSQL -----------------------------------------------------------------------


@pytest.fixture
def pg_schema(pg_dsn):
    """A fresh schema name on the test server; dropped after the test."""
    psycopg = pytest.importorskip("psycopg")
    from psycopg import sql

    name = "t_worker_" + secrets.token_hex(5)
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


async def test_r2_r5_r7_the_worker_runs_on_postgresql(pg_dsn, pg_schema):
    """The same worker on the PostgreSQL engine, with the real clock and tiny timeouts:
    wakes via LISTEN/NOTIFY, every outcome, heartbeats, and a release on stop."""
    async with open_store(pg_dsn, schema=pg_schema, migrate="apply", pool_size=4) as pg:
        queue = pg.queue("q", QueueOpts(visibility_timeout_s=0.6, max_attempts=3))
        seen: list[tuple[bytes, int]] = []

        async def handler(job):
            seen.append((job.payload, job.attempts))
            if job.payload == b"retry" and job.attempts == 1:
                raise Retry(delay_s=0, error="once more")
            if job.payload == b"fail":
                raise Fail("no")
            if job.payload == b"slow":
                await trio.sleep(1.5)  # outlives the lease: heartbeats keep it
            if job.payload == b"hang":
                await trio.sleep_forever()

        worker = Worker(pg, {queue: handler}, poll_interval_s=0.5, shutdown_grace_s=0.2)
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                ok, retry, fail, slow = await queue.enqueue_many(
                    [b"ok", b"retry", b"fail", b"slow"]
                )
                await wait_until(
                    lambda: (
                        (worker.statistics().acked, worker.statistics().dead_lettered) == (3, 1)
                    ),
                    step=0.05,
                )
                hang = await queue.enqueue(b"hang")
                await wait_until(lambda: (b"hang", 1) in seen, step=0.05)
                worker.stop()
        for job_id in (ok, retry, slow):
            assert await queue.get_job(job_id) is None
        failed = await queue.get_job(fail)
        assert (failed.state, failed.last_error) == ("dead", "no")
        released = await queue.get_job(hang)
        assert (released.state, released.attempts, released.last_error) == (
            "pending",
            0,  # Q19.8: the release gave the attempt back
            "worker stopped",
        )
        stats = worker.statistics()
        assert (stats.acked, stats.retried, stats.dead_lettered, stats.released) == (3, 1, 1, 1)
        assert (stats.lease_lost, stats.in_flight) == (0, 0)


# --- R7: stop(grace_s=...) shortens the grace ---------------------------------------------


async def test_r7_a_second_stop_with_zero_grace_cancels_and_releases_at_once(autojump_clock, store):
    queue = store.queue("q")
    job_id = await queue.enqueue(b"x")
    handler = Recorder(forever)
    worker = Worker(store, {queue: handler}, shutdown_grace_s=100)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await trio.sleep(1)
        worker.stop()
        await trio.sleep(2)
        worker.stop(grace_s=0)
    assert now() == pytest.approx(3.0, abs=0.02)
    assert handler.cancelled == [(job_id, approx(3.0))]
    job = await queue.get_job(job_id)
    assert (job.state, job.last_error) == ("pending", "worker stopped")


async def test_r7_stop_grace_only_ever_shortens_the_grace(autojump_clock, store):
    queue = store.queue("q")
    await queue.enqueue(b"x")
    worker = Worker(store, {queue: Recorder(forever)}, shutdown_grace_s=5)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await trio.sleep(1)
        worker.stop(grace_s=2)
        worker.stop(grace_s=50)  # longer than what is left: ignored
    assert now() == pytest.approx(3.0, abs=0.02)
    assert worker.statistics().released == 1


@pytest.mark.parametrize("grace_s", [-1, float("nan"), float("inf"), "1", True])
async def test_r7_stop_rejects_an_invalid_grace_without_stopping(autojump_clock, store, grace_s):
    worker = Worker(store, {"q": Recorder()})
    with pytest.raises(InvalidArgument, match="grace_s"):
        worker.stop(grace_s=grace_s)
    assert not worker._stop_requested


# --- R9: the event stream -------------------------------------------------------------------


async def test_r9_event_stream_reports_each_transition_in_order(autojump_clock, store):
    queue = store.queue("q", QueueOpts(max_attempts=2))
    ok, again, failing = await queue.enqueue_many([b"ok", b"again", b"fail"])

    async def action(job):
        if job.payload == b"again":
            raise Retry(delay_s=0, error="not yet")
        if job.payload == b"fail":
            raise Fail("broken for good")

    worker = Worker(store, {queue: Recorder(action)}, poll_interval_s=1)
    seen = []
    with worker.events(buffer=None) as events:
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await wait_until(lambda: worker.statistics().dead_lettered == 2)
            worker.stop()
        async for event in events:  # ends after "worker_stop"
            seen.append(event)
    assert seen[0].kind == "worker_start"
    assert seen[-1].kind == "worker_stop"
    assert all(event.worker_id == worker.worker_id for event in seen)
    by_job = {
        job_id: [(e.kind, e.attempt) for e in seen if e.job_id == job_id]
        for job_id in (ok, again, failing)
    }
    assert by_job[ok] == [("claim", 1), ("start", 1), ("finish", 1), ("ack", 1)]
    assert by_job[failing] == [("claim", 1), ("start", 1), ("finish", 1), ("dead", 1)]
    assert by_job[again] == [
        *[("claim", 1), ("start", 1), ("finish", 1), ("retry", 1)],
        *[("claim", 2), ("start", 2), ("finish", 2), ("dead", 2)],
    ]
    retry = next(e for e in seen if e.kind == "retry")
    assert (retry.error, retry.delay_s, retry.queue) == ("not yet", 0, "q")
    dead = next(e for e in seen if e.kind == "dead" and e.job_id == failing)
    assert dead.error == "broken for good"
    assert [e.at for e in seen] == sorted(e.at for e in seen)


async def test_r9_lease_loss_and_timeouts_appear_on_the_stream(autojump_clock, store):
    queue = store.queue("q", QueueOpts(visibility_timeout_s=30))
    lost_id, slow_id = await queue.enqueue_many([b"lost", b"slow"])

    async def action(job):
        if job.payload == b"lost":
            await queue.ack_batch([job.id])  # the claim is gone: the next heartbeat is refused
        await trio.sleep_forever()

    worker = Worker(store, {queue: Recorder(action)}, job_timeout_s=50, poll_interval_s=1000)
    with worker.events(buffer=None) as events:
        async with running(worker):
            await wait_until(lambda: worker.statistics().timed_out == 1)
        kinds = {(e.job_id, e.kind) for e in [event async for event in events]}
    assert (lost_id, "lease_lost") in kinds
    assert (slow_id, "timeout") in kinds
    assert (slow_id, "retry") in kinds


async def test_r9_a_full_subscriber_never_blocks_the_worker(autojump_clock, store):
    queue = store.queue("q")
    await queue.enqueue_many([b"x"] * 20)
    worker = Worker(store, {queue: Recorder()})
    with worker.events(buffer=1) as events:
        async with running(worker):
            await wait_until(lambda: worker.statistics().acked == 20)
        first = await events.receive()
    assert first.kind == "worker_start"
    stats = worker.statistics()
    assert stats.events_dropped > 0
    assert stats.acked == 20


async def test_r9_a_subscription_after_the_worker_finished_ends_at_once(autojump_clock, store):
    worker = Worker(store, {"q": Recorder()})
    async with running(worker):
        pass
    with worker.events() as events:
        assert [event async for event in events] == []


async def test_r9_a_subscriber_that_left_is_forgotten(autojump_clock, store):
    queue = store.queue("q")
    worker = Worker(store, {queue: Recorder()})
    with worker.events():
        pass
    assert worker._subscribers == []
    await queue.enqueue(b"x")
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1)


@pytest.mark.parametrize("buffer", [0, -1, 1.5, True, "10"])
async def test_r9_events_rejects_an_invalid_buffer(autojump_clock, store, buffer):
    worker = Worker(store, {"q": Recorder()})
    with pytest.raises(InvalidArgument, match="buffer"), worker.events(buffer=buffer):
        pass


async def test_r9_events_never_carry_the_payload_in_their_messages(autojump_clock, store):
    queue = store.queue("q", QueueOpts(max_attempts=1))
    await queue.enqueue(b"secret-payload")

    async def action(job):
        raise ValueError("boom")

    worker = Worker(store, {queue: Recorder(action)})
    with worker.events(buffer=None) as events:
        async with running(worker):
            await wait_until(lambda: worker.statistics().dead_lettered == 1)
        seen = [event async for event in events]
    assert {"claim", "start", "handler_error", "finish", "dead"} <= {e.kind for e in seen}
    assert not any("secret-payload" in e.message or "secret" in (e.error or "") for e in seen)
    assert next(e for e in seen if e.kind == "handler_error").error == "ValueError: boom"


async def test_r5_a_handler_raising_asyncio_cancelled_error_itself_is_retried(
    autojump_clock, store
):
    import asyncio

    queue = store.queue("q", QueueOpts(max_attempts=2))
    job_id = await queue.enqueue(b"x")

    async def action(job):
        raise asyncio.CancelledError("gave up")  # not a trio cancellation: a failure

    worker = Worker(store, {queue: Recorder(action)}, poll_interval_s=1)
    async with running(worker):
        await wait_until(lambda: worker.statistics().dead_lettered == 1)
    job = await queue.get_job(job_id)
    assert (job.state, job.attempts, job.last_error) == ("dead", 2, "CancelledError: gave up")
    assert worker.statistics().handler_errors == 2


async def test_r6_a_handler_whose_lease_cannot_be_renewed_is_cancelled_at_its_deadline(
    autojump_clock, store, monkeypatch
):
    """The store is unreachable for renewals (a black-holed network): the worker cannot
    know whether the lease still holds, so it stops the work when the lease runs out —
    before another worker can have reclaimed the job — and attempts nothing more."""
    from alkstore_trio import Queue

    calls = count_backend_calls(store, monkeypatch, "retry", "ack")

    async def unreachable(self, handles, extend_s=None):
        raise EngineError("database unreachable")

    monkeypatch.setattr(Queue, "heartbeat_handles", unreachable)
    queue = store.queue("q", QueueOpts(visibility_timeout_s=30))
    job_id = await queue.enqueue(b"x")
    handler = Recorder(forever)
    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().lease_lost == 1)
        assert handler.cancelled == [(job_id, approx(30.0))]  # the lease's deadline
        assert worker.statistics().in_flight == 0
    assert calls == {"retry": [], "ack": []}  # no release of a lost claim
    stats = worker.statistics()
    assert (stats.engine_errors, stats.released, stats.retried) == (2, 0, 0)  # at 10 and 20
    job = await queue.get_job(job_id)
    assert (job.state, job.attempts) == ("processing", 1)  # reclaimable once expired


async def test_r6_renewals_push_the_lease_deadline_so_long_handlers_run_to_the_end(
    autojump_clock, store
):
    queue = store.queue("q", QueueOpts(visibility_timeout_s=30))
    job_id = await queue.enqueue(b"x")

    async def long(job):
        await trio.sleep(200)

    handler = Recorder(long)
    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1)
    assert now() == approx(200.0)
    assert handler.cancelled == []
    assert await queue.get_job(job_id) is None


async def test_r6_a_late_accepted_renewal_after_the_deadline_gives_the_job_back(
    autojump_clock, store, monkeypatch
):
    """A renewal sent before the lease's deadline is answered only after the handler was
    stopped at that deadline, and accepted: the claim is still the worker's, so the job
    is released at once instead of sitting on an unused lease."""
    from alkstore_trio import Queue
    from alkstore_trio._runtime._worker import LEASE_UNCERTAIN

    real = Queue.heartbeat_handles

    async def slow_network(self, handles, extend_s=None):
        renewed = await real(self, handles, extend_s)  # applied at 10: lease until 40
        await trio.sleep(25)  # ...but the answer arrives at 35, after the deadline (30)
        return renewed

    monkeypatch.setattr(Queue, "heartbeat_handles", slow_network)
    queue = store.queue("q", QueueOpts(visibility_timeout_s=30))
    job_id = await queue.enqueue(b"x")

    async def action(job):
        if job.attempts == 1:
            await trio.sleep_forever()  # the second run (after the release) returns

    handler = Recorder(action)
    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    with worker.events(buffer=None) as events:
        async with running(worker):
            await wait_until(lambda: worker.statistics().acked == 1)
        seen = [(e.kind, e.attempt, e.error) for e in [e async for e in events] if e.job_id]
    assert handler.cancelled == [(job_id, approx(30.0))]
    assert ("release", 1, LEASE_UNCERTAIN) in seen
    assert ("ack", 2, None) in seen
    stats = worker.statistics()
    assert (stats.released, stats.acked, stats.lease_lost) == (1, 1, 0)


async def test_item5_a_worker_frozen_past_the_lease_never_starts_the_stale_handler(
    autojump_clock, store, monkeypatch
):
    """Issue 5, item 5: the worker freezes (SIGSTOP, a stalled host) just as its claim is
    answered and resumes after the lease lapsed by its own clock. The claim's handler
    never starts: the claim counts as lost, nothing is sent for it, and the job runs
    once it is reclaimed."""
    from alkstore_trio import Queue

    real = Queue.claim_batch
    frozen = []

    async def answered_then_frozen(self, worker_id, n):
        handles = await real(self, worker_id, n)
        if handles and not frozen:
            frozen.append(now())
            autojump_clock.jump(31)  # no task runs between the answer and the jump
        return handles

    monkeypatch.setattr(Queue, "claim_batch", answered_then_frozen)
    calls = count_backend_calls(store, monkeypatch, "retry", "heartbeat")
    queue = store.queue("q", QueueOpts(visibility_timeout_s=30))
    job_id = await queue.enqueue(b"x")
    handler = Recorder()
    worker = Worker(store, {queue: handler}, poll_interval_s=5)
    with worker.events(buffer=None) as events:
        async with running(worker):
            await wait_until(lambda: worker.statistics().acked == 1)
        seen = [(e.kind, e.attempt) for e in [e async for e in events] if e.job_id]
    assert [(i, attempt) for i, attempt, _ in handler.starts] == [(job_id, 2)]
    assert ("lease_lost", 1) in seen
    assert ("start", 1) not in seen
    assert seen.index(("lease_lost", 1)) < seen.index(("claim", 2))
    stats = worker.statistics()
    assert (stats.lease_lost, stats.started, stats.acked, stats.released) == (1, 1, 1, 0)
    assert calls == {"retry": [], "heartbeat": []}  # nothing for the stale claim


# --- issue item 4: job runners, prefetch and the pipelined claim ----------------------------


async def test_r2_job_runners_bound_the_running_handlers_and_each_job_has_its_own_scope(
    autojump_clock, store
):
    queue = store.queue("q", QueueOpts(visibility_timeout_s=30))
    await queue.enqueue_many([b"x"] * 50)
    scopes = set()

    async def action(job):
        scopes.add(id(trio.lowlevel.current_task()))
        await trio.sleep(1)

    handler = Recorder(action)
    worker = Worker(store, {queue: handler}, concurrency=5, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 50)
    assert handler.max_running == 5
    assert len(scopes) <= 5  # the tasks are reused...
    assert now() == approx(10.0)


async def test_r2_prefetch_holds_claims_beyond_concurrency_and_runs_at_most_concurrency(
    autojump_clock, store, monkeypatch
):
    calls = count_backend_calls(store, monkeypatch, "claim", "ack", "ack_and_claim")
    queue = store.queue("q")
    ids = await queue.enqueue_many([b"x"] * 60)
    held = []

    async def action(job):
        held.append(worker.statistics().in_flight)
        await trio.sleep(1)

    handler = Recorder(action)
    worker = Worker(store, {queue: handler}, concurrency=5, prefetch=5, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == len(ids))
    assert handler.max_running == 5
    assert max(held) == 10  # 5 running + 5 prefetched
    assert calls["ack_and_claim"] == []  # pipelined: the claims go beside the acks
    assert sum(calls["claim"]) >= len(ids)
    assert now() == approx(12.0)  # 60 jobs, 5 at a time, 1 s each: no pause between waves
    stats = worker.statistics()
    assert (stats.claimed, stats.acked, stats.lease_lost, stats.released) == (60, 60, 0, 0)


async def test_r2_a_pipelined_claim_is_in_flight_while_the_acks_go_out(
    autojump_clock, store, monkeypatch
):
    """Race test: the claim statement and the ack statement overlap in time."""
    backend = store._engine
    spans: dict[str, list[tuple[float, float]]] = {"claim": [], "ack": []}
    for operation in spans:
        real = getattr(backend, operation)

        async def slow(*args, _real=real, _op=operation):
            t0 = now()
            await trio.sleep(0.5)  # a slow round trip
            result = await _real(*args)
            spans[_op].append((t0, now()))
            return result

        monkeypatch.setattr(backend, operation, slow)
    queue = store.queue("q")
    await queue.enqueue_many([b"x"] * 40)

    async def noop(job):
        pass

    worker = Worker(store, {queue: noop}, concurrency=10, prefetch=10, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 40)
    overlaps = [(c, a) for c in spans["claim"] for a in spans["ack"] if c[0] < a[1] and a[0] < c[1]]
    assert overlaps, spans


async def test_r7_a_stop_releases_prefetched_claims_without_starting_them(autojump_clock, store):
    queue = store.queue("q")
    ids = await queue.enqueue_many([b"x"] * 4)
    handler = Recorder(forever)
    worker = Worker(
        store, {queue: handler}, concurrency=2, prefetch=2, shutdown_grace_s=5, poll_interval_s=1000
    )
    async with running(worker):
        await wait_until(lambda: len(handler.starts) == 2 and worker.statistics().in_flight == 4)
    assert len(handler.starts) == 2  # the prefetched two never started
    stats = worker.statistics()
    assert (stats.claimed, stats.started, stats.released, stats.in_flight) == (4, 2, 4, 0)
    for job_id in ids:
        job = await queue.get_job(job_id)
        assert (job.state, job.last_error) == ("pending", "worker stopped")


async def test_item5_a_prefetched_claim_whose_lease_lapsed_while_waiting_never_starts(
    autojump_clock, store, monkeypatch
):
    """A prefetched claim waits for a handler slot; renewals cannot get through (the
    store unreachable), so its lease runs out while it waits: it never starts."""
    from alkstore_trio import Queue

    async def unreachable(self, handles, extend_s=None):
        raise EngineError("database unreachable")

    monkeypatch.setattr(Queue, "heartbeat_handles", unreachable)
    queue = store.queue("q", QueueOpts(visibility_timeout_s=30))
    first, second = await queue.enqueue_many([b"x"] * 2)

    async def action(job):
        if job.id == first:
            with trio.CancelScope(shield=True):
                await trio.sleep(40)  # outlives every lease, ignoring the cancellation

    handler = Recorder(action)
    worker = Worker(store, {queue: handler}, concurrency=1, prefetch=1, poll_interval_s=1000)
    with worker.events(buffer=None) as events:
        async with running(worker):
            await wait_until(lambda: now() > 41)
        seen = [(e.kind, e.job_id, e.attempt) for e in [e async for e in events]]
    assert ("start", first, 1) in seen
    assert ("lease_lost", second, 1) in seen
    assert ("start", second, 1) not in seen  # its lease ran out while it waited
