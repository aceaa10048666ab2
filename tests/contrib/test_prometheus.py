"""alkstore_trio.contrib.prometheus: worker metrics and the store's queue figures
(issue 6), with the real prometheus-client.

Each test uses its own ``CollectorRegistry`` and reads the exposed samples back, so what
is asserted is what Prometheus would scrape. The ``StoreStatsMetrics`` tests run on the
in-memory engine under trio's mock clock (the poller's intervals and timeouts take no
real time), and once on PostgreSQL through a TCP proxy that can refuse the connections.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import math
import secrets
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import trio
from _scenario import (
    CLAIMS,
    RUN_TIME_S,
    T0,
    enqueue_scenario,
    running,
    scenario_done,
    scenario_queue,
    scenario_worker,
    wait_until,
)
from prometheus_client import CollectorRegistry, Counter, generate_latest

from alkstore_trio import (
    EngineError,
    InvalidArgument,
    Job,
    QueueOpts,
    StoreClosed,
    Worker,
    WorkerEvent,
    open_store,
    open_supervisor,
)
from alkstore_trio.contrib.prometheus import StoreStatsMetrics, WorkerMetrics
from alkstore_trio.testing import TrioClock

ROOT = Path(__file__).resolve().parents[2]


def _load(path: Path, name: str):
    """A module of another test folder (they are not packages)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sample(registry, name, **labels):
    return registry.get_sample_value(name, labels)


def counters(registry, **labels):
    names = [
        "claimed",
        "acked",
        "retried",
        "dead_lettered",
        "released",
        "lease_lost",
        "cancelled",
    ]
    return {name: sample(registry, f"alkstore_jobs_{name}_total", **labels) for name in names}


async def test_r9_metrics_count_every_outcome_of_a_run(autojump_clock, store):
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    queue = scenario_queue(store)
    await enqueue_scenario(queue)
    worker = scenario_worker(store, queue)
    async with running(worker, metrics):
        await wait_until(lambda: scenario_done(worker))
        assert sample(registry, "alkstore_workers_running") == 1
    assert counters(registry, queue="q") == {
        "claimed": CLAIMS,
        "acked": 6,
        "retried": 3,
        "dead_lettered": 1,
        "released": 0,
        "lease_lost": 0,
        "cancelled": 1,
    }
    assert sample(registry, "alkstore_handler_errors_total", queue="q") == 1
    assert sample(registry, "alkstore_handler_timeouts_total", queue="q") == 1
    assert sample(registry, "alkstore_engine_errors_total", queue="q") == 0
    assert sample(registry, "alkstore_jobs_in_flight", queue="q") == 0
    assert sample(registry, "alkstore_workers_running") == 0
    # The worker's own counters agree.
    stats = worker.statistics()
    assert counters(registry, queue="q") == {
        "claimed": stats.claimed,
        "acked": stats.acked,
        "retried": stats.retried,
        "dead_lettered": stats.dead_lettered,
        "released": stats.released,
        "lease_lost": stats.lease_lost,
        "cancelled": stats.cancelled,
    }
    assert stats.events_dropped == 0


async def test_r9_run_time_histogram_measures_start_to_finish(autojump_clock, store):
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    queue = scenario_queue(store)
    await enqueue_scenario(queue)
    worker = scenario_worker(store, queue)
    async with running(worker, metrics):
        await wait_until(lambda: scenario_done(worker))
    name = "alkstore_job_run_seconds"
    assert sample(registry, f"{name}_count", queue="q") == CLAIMS
    assert sample(registry, f"{name}_sum", queue="q") == pytest.approx(RUN_TIME_S, abs=1e-6)
    # Nine runs of 1 s, cancel's 10 s, slow's 50 s.
    assert sample(registry, f"{name}_bucket", queue="q", le="0.5") == 0
    assert sample(registry, f"{name}_bucket", queue="q", le="1.0") == 9
    assert sample(registry, f"{name}_bucket", queue="q", le="10.0") == 10
    assert sample(registry, f"{name}_bucket", queue="q", le="30.0") == 10
    assert sample(registry, f"{name}_bucket", queue="q", le="60.0") == CLAIMS


async def test_r9_claim_latency_is_run_at_to_claimed_at_on_the_store_clock(autojump_clock, store):
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    queue = scenario_queue(store)
    await enqueue_scenario(queue)
    seen = []
    worker = scenario_worker(store, queue, seen=seen)
    async with running(worker, metrics):
        await wait_until(lambda: scenario_done(worker))
    name = "alkstore_claim_latency_seconds"
    waits = [(job.claimed_at - job.run_at).total_seconds() for job in seen]
    assert len(waits) == CLAIMS
    assert sample(registry, f"{name}_count", queue="q") == CLAIMS
    assert sample(registry, f"{name}_sum", queue="q") == pytest.approx(sum(waits), abs=1e-6)
    # ``late`` had been due for 42 s when it was enqueued; every other job was claimed
    # when it became due: at once (a wake, the retry delay's timer) or by the next
    # re-poll (the backoff retries).
    assert sorted(waits)[-1] == pytest.approx(42.0, abs=1e-6)
    assert sample(registry, f"{name}_bucket", queue="q", le="1.0") == CLAIMS - 1
    assert sample(registry, f"{name}_bucket", queue="q", le="30.0") == CLAIMS - 1
    assert sample(registry, f"{name}_bucket", queue="q", le="60.0") == CLAIMS


async def test_r7_released_jobs_are_counted(autojump_clock, store):
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    queue = store.queue("q")
    await queue.enqueue(b"x")

    async def forever(job):
        await trio.sleep_forever()

    worker = Worker(store, {queue: forever}, shutdown_grace_s=0, poll_interval_s=1000)
    async with running(worker, metrics):
        await wait_until(lambda: worker.statistics().in_flight == 1)
        assert sample(registry, "alkstore_jobs_in_flight", queue="q") == 1
    assert sample(registry, "alkstore_jobs_released_total", queue="q") == 1
    assert sample(registry, "alkstore_jobs_in_flight", queue="q") == 0
    assert sample(registry, "alkstore_job_run_seconds_count", queue="q") == 1


async def test_r9_series_of_served_queues_start_at_zero(autojump_clock, store):
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)

    async def handler(job):
        pass

    worker = Worker(store, {"a": handler, "b": handler})
    async with trio.open_nursery() as nursery:
        await nursery.start(metrics.run, worker)
        for queue in ("a", "b"):
            assert sample(registry, "alkstore_jobs_claimed_total", queue=queue) == 0
            assert sample(registry, "alkstore_jobs_dead_lettered_total", queue=queue) == 0
            assert sample(registry, "alkstore_jobs_in_flight", queue=queue) == 0
        nursery.cancel_scope.cancel()


async def test_r9_worker_id_label_is_opt_in(autojump_clock, store):
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry, worker_id_label=True)
    queue = store.queue("q")
    await queue.enqueue_many([b"x", b"y"])

    async def handler(job):
        pass

    worker = Worker(store, {queue: handler}, worker_id="w-7")
    async with running(worker, metrics):
        await wait_until(lambda: worker.statistics().acked == 2)
    assert sample(registry, "alkstore_jobs_acked_total", queue="q", worker_id="w-7") == 2
    assert sample(registry, "alkstore_jobs_acked_total", queue="q") is None
    assert sample(registry, "alkstore_workers_running", worker_id="w-7") == 0

    default = CollectorRegistry()
    WorkerMetrics(default)
    assert "worker_id" not in generate_latest(default).decode()


async def test_r9_one_metrics_object_sums_several_workers(autojump_clock, store):
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    queue = store.queue("q")
    await queue.enqueue_many([b"x"] * 10)

    async def handler(job):
        await trio.sleep(1)

    first = Worker(store, {queue: handler}, concurrency=2)
    second = Worker(store, {queue: handler}, concurrency=2)
    async with running(first, metrics), running(second, metrics):
        await wait_until(lambda: first.statistics().acked + second.statistics().acked == 10)
        assert sample(registry, "alkstore_workers_running") == 2
    assert first.statistics().acked > 0
    assert second.statistics().acked > 0
    assert sample(registry, "alkstore_jobs_acked_total", queue="q") == 10
    assert sample(registry, "alkstore_workers_running") == 0


def make_event(kind, job=None, worker_id="w", at=0.0):
    return WorkerEvent(
        kind=kind,
        worker_id=worker_id,
        at=at,
        wall_time=0.0,
        job=job,
        queue=None if job is None else job.queue,
        message=kind,
    )


def claimed_job(job_id=1, attempts=1):
    return Job(
        id=job_id,
        queue="q",
        payload=b"",
        priority=0,
        state="processing",
        attempts=attempts,
        max_attempts=3,
        run_at=T0,
        enqueued_at=T0,
        visibility_timeout_s=30,
        backoff_base_s=5,
        expires_at=None,
        claimed_by="w",
        claimed_at=T0 + timedelta(seconds=2),
        claim_expires_at=T0 + timedelta(seconds=32),
        last_error=None,
        died_at=None,
    )


def test_r9_a_stopped_worker_holds_no_claim():
    # A claim whose outcome never came (the worker's "finalize_incomplete") stops
    # counting as in flight when its worker stops.
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    metrics.observe(make_event("worker_start"))
    metrics.observe(make_event("claim", claimed_job(1)))
    metrics.observe(make_event("claim", claimed_job(2)))
    metrics.observe(make_event("ack", claimed_job(2)))
    assert sample(registry, "alkstore_jobs_in_flight", queue="q") == 1
    assert sample(registry, "alkstore_claim_latency_seconds_sum", queue="q") == 4.0
    metrics.observe(make_event("finalize_incomplete"))
    metrics.observe(make_event("worker_stop"))
    assert sample(registry, "alkstore_jobs_in_flight", queue="q") == 0
    assert sample(registry, "alkstore_workers_running") == 0


def test_r9_count_enqueued_adds_to_the_enqueued_counter():
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    metrics.count_enqueued("emails")
    metrics.count_enqueued("emails", 4)
    metrics.count_enqueued("other", 0)
    assert sample(registry, "alkstore_jobs_enqueued_total", queue="emails") == 5
    assert sample(registry, "alkstore_jobs_enqueued_total", queue="other") == 0


async def test_r9_count_enqueued_accepts_a_queue_handle(autojump_clock, store):
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    queue = store.queue("emails")
    ids = await queue.enqueue_many([b"a", b"b"])
    metrics.count_enqueued(queue, len(ids))
    assert sample(registry, "alkstore_jobs_enqueued_total", queue="emails") == 2


@pytest.mark.parametrize(("queue", "n"), [(None, 1), ("q", -1), ("q", 1.5), ("q", True)])
def test_r9_count_enqueued_rejects_bad_input(queue, n):
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    with pytest.raises(InvalidArgument):
        metrics.count_enqueued(queue, n)
    assert "alkstore_jobs_enqueued_total{" not in generate_latest(registry).decode()


def test_r9_a_second_metrics_object_on_one_registry_is_refused_whole():
    registry = CollectorRegistry()
    WorkerMetrics(registry)
    before = generate_latest(registry)
    with pytest.raises(InvalidArgument, match="one WorkerMetrics per registry"):
        WorkerMetrics(registry)
    assert generate_latest(registry) == before
    # A clash on a later metric undoes the earlier ones too.
    other = CollectorRegistry()
    Counter("handler_errors", "taken", namespace="alkstore", registry=other)
    with pytest.raises(InvalidArgument):
        WorkerMetrics(other)
    assert sample(other, "alkstore_jobs_claimed_total") is None
    WorkerMetrics(CollectorRegistry(), namespace="other")  # another namespace is fine


@pytest.mark.parametrize(
    "kwargs",
    [
        {"registry": None},
        {"namespace": 3},
        {"worker_id_label": "yes"},
        {"run_time_buckets_s": [2.0, 1.0]},
    ],
)
def test_r9_metrics_reject_invalid_settings(kwargs):
    kwargs.setdefault("registry", CollectorRegistry())
    with pytest.raises(InvalidArgument):
        WorkerMetrics(**kwargs)


async def test_r9_run_rejects_what_is_not_a_worker():
    metrics = WorkerMetrics(CollectorRegistry())
    with pytest.raises(InvalidArgument, match="worker must be a Worker"):
        await metrics.run("worker")


def test_example_prometheus_metrics_prints_the_exposition():
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "prometheus_metrics.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert 'alkstore_jobs_acked_total{queue="thumbnails"} 4.0' in lines
    assert 'alkstore_jobs_retried_total{queue="thumbnails"} 1.0' in lines
    assert 'alkstore_jobs_dead_lettered_total{queue="thumbnails"} 1.0' in lines
    assert 'alkstore_jobs_enqueued_total{queue="thumbnails"} 5.0' in lines
    assert 'alkstore_job_run_seconds_count{queue="thumbnails"} 6.0' in lines


# -- issue 6: StoreStatsMetrics, the store's queue figures -----------------------------

STATES = ("ready", "delayed", "processing", "dead")
LOGGER = "alkstore_trio.contrib.prometheus"


def depth(registry, queue):
    """One queue's figures, as scraped."""
    values = {
        state: sample(registry, "alkstore_queue_jobs", queue=queue, state=state) for state in STATES
    }
    values["reclaimable"] = sample(registry, "alkstore_queue_jobs_reclaimable", queue=queue)
    values["oldest_ready_age_s"] = sample(
        registry, "alkstore_queue_oldest_ready_age_seconds", queue=queue
    )
    return values


def expected_depth(entry):
    """What ``depth`` must show for a ``QueueStats`` entry."""
    return {
        "ready": entry.pending_ready,
        "delayed": entry.pending_delayed,
        "processing": entry.processing,
        "dead": entry.dead,
        "reclaimable": entry.reclaimable,
        "oldest_ready_age_s": entry.oldest_ready_age_s or 0.0,
    }


def totals(registry, queue):
    """One queue's counters (D27), as scraped."""
    return {
        name: sample(registry, f"alkstore_queue_{name}_total", queue=queue)
        for name in ("acked", "dead_lettered", "cancelled")
    }


def expected_totals(entry):
    """What ``totals`` must show for a ``QueueStats`` entry."""
    return {
        "acked": entry.acked_total,
        "dead_lettered": entry.dead_lettered_total,
        "cancelled": entry.cancelled_total,
    }


def store_figures(registry):
    names = (
        "queue_stats_up",
        "queue_stats_failures_total",
        "queue_stats_last_success_timestamp_seconds",
        "queue_stats_duration_seconds",
        "store_ids_issued_total",
        "store_jobs_removed_total",
    )
    return {name: sample(registry, f"alkstore_{name}") for name in names}


def patch_stats(monkeypatch, store, before=None):
    """Route ``store.stats`` through ``await before()`` first (which may raise, hang or
    return a replacement for the reading); the trio times of the calls."""
    real = store.stats
    calls = []

    async def stats(queue=None):
        calls.append(trio.current_time())
        if before is not None:
            replace = await before()
            if replace is not None:
                return replace(await real(queue))
        return await real(queue)

    monkeypatch.setattr(store, "stats", stats)
    return calls


async def seed_queues(store):
    """Queue ``a``: 2 ready (waiting 11 s), 1 delayed, 1 processing whose claim lapsed,
    1 dead; queue ``b``: 1 ready, just enqueued."""
    a = store.queue("a", QueueOpts(visibility_timeout_s=10))
    await a.enqueue_many([b"1", b"2", b"3", b"4"])
    await a.enqueue(b"later", delay_s=600)
    assert await a.claim_one("w") is not None  # its claim lapses below
    dead = await a.claim_one("w")
    assert dead is not None
    assert await dead.fail("boom")
    await trio.sleep(11)
    await store.queue("b").enqueue(b"x")


async def test_issue6_store_stats_metrics_export_each_queue_of_one_reading(autojump_clock, store):
    await seed_queues(store)
    registry = CollectorRegistry()
    metrics = StoreStatsMetrics(store, registry)
    async with trio.open_nursery() as nursery:
        await nursery.start(metrics.run)  # returns after the first reading
        stats = await store.stats()  # no time passed: the same reading
        nursery.cancel_scope.cancel()
    assert depth(registry, "a") == {
        "ready": 2,
        "delayed": 1,
        "processing": 1,
        "reclaimable": 1,
        "dead": 1,
        "oldest_ready_age_s": pytest.approx(11.0),
    }
    assert depth(registry, "b") == {
        "ready": 1,
        "delayed": 0,
        "processing": 0,
        "reclaimable": 0,
        "dead": 0,
        "oldest_ready_age_s": 0.0,
    }
    for entry in stats.queues:
        assert depth(registry, entry.queue) == expected_depth(entry)
    assert store_figures(registry) == {
        "queue_stats_up": 1,
        "queue_stats_failures_total": 0,
        "queue_stats_last_success_timestamp_seconds": stats.now.timestamp(),
        "queue_stats_duration_seconds": 0.0,
        "store_ids_issued_total": 6,
        "store_jobs_removed_total": 0,
    }


async def test_issue6_store_totals_are_counters_read_from_the_store(autojump_clock, store):
    queue = store.queue("q")
    ids = await queue.enqueue_many([b"1", b"2", b"3"])
    handle = await queue.claim_one("w")
    assert handle is not None
    assert await handle.ack()
    assert await queue.cancel(ids[2])
    registry = CollectorRegistry()
    metrics = StoreStatsMetrics(store, registry)
    assert await metrics.poll()
    # D23: ids handed out, and rows that left the store (the ack and the cancel).
    assert sample(registry, "alkstore_store_ids_issued_total") == 3
    assert sample(registry, "alkstore_store_jobs_removed_total") == 2
    text = generate_latest(registry).decode()
    assert "# TYPE alkstore_store_ids_issued_total counter" in text
    assert "# TYPE alkstore_store_jobs_removed_total counter" in text
    assert "# TYPE alkstore_queue_jobs gauge" in text


async def test_d27_queue_counters_are_exported_per_queue_as_counters(autojump_clock, store):
    a = store.queue("a", QueueOpts(max_attempts=1))
    ids = await a.enqueue_many([b"1", b"2", b"3", b"4", b"5"])
    first = await a.claim_one("w")
    assert first is not None
    assert await first.ack()
    handles = await a.claim_batch("w", 2)
    assert await a.ack_handles(handles) == [True, True]
    last = await a.claim_one("w")
    assert last is not None
    assert await last.retry("at its budget: dead")
    assert await a.cancel(ids[4])
    b = store.queue("b")
    assert await b.cancel(await b.enqueue(b"x"))
    registry = CollectorRegistry()
    metrics = StoreStatsMetrics(store, registry)
    assert await metrics.poll()
    stats = await store.stats()
    assert totals(registry, "a") == {"acked": 3, "dead_lettered": 1, "cancelled": 1}
    # ``b`` holds no job any more: listed for its count, its gauges at 0.
    assert totals(registry, "b") == {"acked": 0, "dead_lettered": 0, "cancelled": 1}
    assert depth(registry, "b")["ready"] == 0
    for entry in stats.queues:
        assert totals(registry, entry.queue) == expected_totals(entry)
    text = generate_latest(registry).decode()
    for name in ("acked", "dead_lettered", "cancelled"):
        assert f"# TYPE alkstore_queue_{name}_total counter" in text
    # Counters only grow: a redrive and a purge count nothing, a second death counts.
    assert await a.requeue_dead(all=True) == 1
    again = await a.claim_one("w")
    assert again is not None
    assert await again.fail("dead again")
    assert await a.purge_dead() == 1
    assert await metrics.poll()
    assert totals(registry, "a") == {"acked": 3, "dead_lettered": 2, "cancelled": 1}
    assert depth(registry, "a") == dict.fromkeys([*STATES, "reclaimable", "oldest_ready_age_s"], 0)


async def test_d27_queue_counters_agree_with_worker_metrics_on_one_registry(autojump_clock, store):
    registry = CollectorRegistry()
    worker_metrics = WorkerMetrics(registry)
    queue_stats = StoreStatsMetrics(store, registry)  # no name clash with alkstore_jobs_*
    queue = scenario_queue(store)
    await enqueue_scenario(queue)
    worker = scenario_worker(store, queue)
    async with running(worker, worker_metrics):
        await wait_until(lambda: scenario_done(worker))
    assert await queue_stats.poll()
    # What the worker did, counted from its events, and what the store counted: the
    # same acks, deaths and cancels (R15: ``cancel`` cancelled its own job, and its
    # worker settled it as cancelled).
    assert totals(registry, "q") == {"acked": 6, "dead_lettered": 1, "cancelled": 1}
    assert counters(registry, queue="q")["acked"] == 6
    assert counters(registry, queue="q")["dead_lettered"] == 1
    assert counters(registry, queue="q")["cancelled"] == 1
    text = generate_latest(registry).decode()
    assert 'alkstore_jobs_acked_total{queue="q"} 6.0' in text
    assert 'alkstore_queue_acked_total{queue="q"} 6.0' in text


async def test_issue6_readings_are_interval_s_apart_start_to_start(
    autojump_clock, store, monkeypatch
):
    async def two_seconds():
        await trio.sleep(2)

    calls = patch_stats(monkeypatch, store, two_seconds)
    registry = CollectorRegistry()
    metrics = StoreStatsMetrics(store, registry, interval_s=10)
    queue = store.queue("q")
    async with trio.open_nursery() as nursery:
        t0 = trio.current_time()
        await nursery.start(metrics.run)
        assert trio.current_time() == t0 + 2  # started once the first reading was in
        assert sample(registry, "alkstore_queue_stats_duration_seconds") == 2
        await queue.enqueue(b"x")
        await trio.sleep(9)  # t0 + 11: the second reading (from t0 + 10) is not in yet
        assert depth(registry, "q")["ready"] is None
        await trio.sleep(2)  # t0 + 13
        assert depth(registry, "q")["ready"] == 1
        await trio.sleep(20)  # t0 + 33
        nursery.cancel_scope.cancel()
    assert [call - t0 for call in calls] == [0, 10, 20, 30]


async def test_issue6_a_slow_reading_is_followed_at_once_without_catching_up(
    autojump_clock, store, monkeypatch
):
    async def fifteen_seconds():
        await trio.sleep(15)

    calls = patch_stats(monkeypatch, store, fifteen_seconds)
    metrics = StoreStatsMetrics(store, CollectorRegistry(), interval_s=10, timeout_s=20)
    async with trio.open_nursery() as nursery:
        t0 = trio.current_time()
        nursery.start_soon(metrics.run)
        await trio.sleep(50)
        nursery.cancel_scope.cancel()
    assert [call - t0 for call in calls] == [0, 15, 30, 45]


async def test_issue6_a_failed_reading_is_logged_counted_and_tried_again(
    autojump_clock, store, monkeypatch, caplog
):
    caplog.set_level(logging.INFO, logger=LOGGER)
    failing = False

    async def maybe_fail():
        if failing:
            raise EngineError(
                "PostgreSQL operation failed: OperationalError: server closed the connection"
            )

    patch_stats(monkeypatch, store, maybe_fail)
    registry = CollectorRegistry()
    metrics = StoreStatsMetrics(store, registry, interval_s=15)
    queue = store.queue("q")
    await queue.enqueue(b"x")
    async with trio.open_nursery() as nursery:
        await nursery.start(metrics.run)
        first = store_figures(registry)
        failing = True
        await queue.enqueue(b"y")
        await trio.sleep(31)  # the readings at 15 s and 30 s fail
        figures = store_figures(registry)
        assert figures["queue_stats_up"] == 0
        assert figures["queue_stats_failures_total"] == 2
        # The last good reading is still served, and says how old it is.
        assert depth(registry, "q")["ready"] == 1
        assert (
            figures["queue_stats_last_success_timestamp_seconds"]
            == (first["queue_stats_last_success_timestamp_seconds"])
        )
        failing = False
        await trio.sleep(15)  # the reading at 45 s succeeds
        assert sample(registry, "alkstore_queue_stats_up") == 1
        assert sample(registry, "alkstore_queue_stats_failures_total") == 2
        assert depth(registry, "q")["ready"] == 2
        nursery.cancel_scope.cancel()
    records = [record for record in caplog.records if record.name == LOGGER]
    assert [(record.levelname, record.event) for record in records] == [
        ("WARNING", "stats_failed"),
        ("WARNING", "stats_failed"),
        ("INFO", "stats_recovered"),
    ]
    first_warning, second_warning, recovered = (record.getMessage() for record in records)
    assert "EngineError: PostgreSQL operation failed" in first_warning
    assert "serving the reading of 2000-01-01T00:00:00+00:00" in first_warning
    assert "failure 1 in a row, trying again in 15s" in first_warning
    assert "failure 2 in a row" in second_warning
    assert recovered == "store stats reading succeeded again after 2 failed"


async def test_issue6_a_reading_that_hangs_is_abandoned_after_timeout_s(
    autojump_clock, store, monkeypatch, caplog
):
    hanging = True

    async def maybe_hang():
        if hanging:
            await trio.sleep_forever()

    patch_stats(monkeypatch, store, maybe_hang)
    registry = CollectorRegistry()
    metrics = StoreStatsMetrics(store, registry, interval_s=15, timeout_s=5)
    await store.queue("q").enqueue(b"x")
    async with trio.open_nursery() as nursery:
        t0 = trio.current_time()
        await nursery.start(metrics.run)  # a failed first reading still starts it
        assert trio.current_time() == t0 + 5
        assert store_figures(registry) == {
            "queue_stats_up": 0,
            "queue_stats_failures_total": 1,
            "queue_stats_last_success_timestamp_seconds": None,
            "queue_stats_duration_seconds": 5,
            "store_ids_issued_total": None,
            "store_jobs_removed_total": None,
        }
        assert depth(registry, "q")["ready"] is None  # nothing read yet: nothing served
        hanging = False
        await trio.sleep(11)  # t0 + 16: the reading at t0 + 15 is in
        assert sample(registry, "alkstore_queue_stats_up") == 1
        assert depth(registry, "q")["ready"] == 1
        nursery.cancel_scope.cancel()
    assert "(no answer within timeout_s=5); nothing to serve yet" in caplog.text


async def test_issue6_a_queue_the_reading_no_longer_lists_drops_its_series(
    autojump_clock, store, monkeypatch
):
    hidden: set[str] = set()

    async def hide_queues():
        return lambda stats: dataclasses.replace(
            stats, queues=tuple(entry for entry in stats.queues if entry.queue not in hidden)
        )

    patch_stats(monkeypatch, store, hide_queues)
    await store.queue("a").enqueue(b"x")
    await store.queue("b").enqueue(b"y")
    registry = CollectorRegistry()
    metrics = StoreStatsMetrics(store, registry, interval_s=15)
    async with trio.open_nursery() as nursery:
        await nursery.start(metrics.run)
        assert depth(registry, "a")["ready"] == 1
        assert totals(registry, "a") == {"acked": 0, "dead_lettered": 0, "cancelled": 0}
        hidden.add("a")
        await trio.sleep(16)
        nursery.cancel_scope.cancel()
    # Gauges and counters alike.
    assert set(depth(registry, "a").values()) == {None}
    assert set(totals(registry, "a").values()) == {None}
    assert 'queue="a"' not in generate_latest(registry).decode()
    assert depth(registry, "b")["ready"] == 1
    assert totals(registry, "b")["acked"] == 0


async def test_issue6_named_queues_are_exported_always_and_only(autojump_clock, store):
    await store.queue("other").enqueue(b"x")
    busy = store.queue("busy")
    await busy.enqueue_many([b"1", b"2"])
    registry = CollectorRegistry()
    metrics = StoreStatsMetrics(store, registry, queues=[busy, "idle", "busy"])
    assert metrics.queues == ("busy", "idle")
    assert await metrics.poll()
    assert depth(registry, "busy")["ready"] == 2
    assert depth(registry, "idle") == dict.fromkeys(
        [*STATES, "reclaimable", "oldest_ready_age_s"], 0
    )
    assert totals(registry, "idle") == {"acked": 0, "dead_lettered": 0, "cancelled": 0}
    assert set(depth(registry, "other").values()) == {None}
    assert set(totals(registry, "other").values()) == {None}
    # The store-wide counters still count every queue.
    assert sample(registry, "alkstore_store_ids_issued_total") == 3
    one = StoreStatsMetrics(store, CollectorRegistry(), queues="busy")
    assert one.queues == ("busy",)  # one name, not its letters


async def test_issue6_runs_under_a_supervisor_that_restarts_it_after_a_crash(
    autojump_clock, store, monkeypatch
):
    crash = False

    async def maybe_crash():
        nonlocal crash
        if crash:
            crash = False
            raise RuntimeError("a bug in the reading")

    patch_stats(monkeypatch, store, maybe_crash)
    registry = CollectorRegistry()
    metrics = StoreStatsMetrics(store, registry, interval_s=15)
    async with open_supervisor(restart_delay_s=1) as supervisor:
        await supervisor.start(metrics.run, name="queue-stats")
        assert sample(registry, "alkstore_queue_stats_up") == 1
        crash = True
        await store.queue("q").enqueue(b"x")
        # The reading at 15 s crashes run(); the supervisor starts it again 1 s later,
        # and it reads at once.
        await trio.sleep(16.5)
        assert supervisor.statistics().child("queue-stats").restarts == 1
        assert depth(registry, "q")["ready"] == 1
        supervisor.cancel()


async def test_issue6_one_poller_per_collector_at_a_time(autojump_clock, store):
    metrics = StoreStatsMetrics(store, CollectorRegistry())
    async with trio.open_nursery() as nursery:
        await nursery.start(metrics.run)
        with pytest.raises(RuntimeError, match="already running"):
            await metrics.run()
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:  # once it ended it may run again
        await nursery.start(metrics.run)
        nursery.cancel_scope.cancel()


async def test_issue6_run_ends_with_store_closed(autojump_clock):
    async with open_store("memory://", clock=TrioClock()) as store:
        metrics = StoreStatsMetrics(store, CollectorRegistry())
    with pytest.raises(StoreClosed):
        await metrics.run()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"registry": None}, "registry must be"),
        ({"namespace": 3}, "namespace must be a str"),
        ({"interval_s": 0}, "interval_s"),
        ({"interval_s": math.nan}, "interval_s"),
        ({"timeout_s": -1}, "timeout_s"),
        ({"queues": []}, "at least one queue"),
        ({"queues": 7}, "queues must be queue names"),
        ({"queues": ["ok", "alk_reserved"]}, "reserved"),
    ],
)
async def test_issue6_store_stats_metrics_reject_bad_arguments(store, kwargs, match):
    registry = CollectorRegistry()
    kwargs.setdefault("registry", registry)
    with pytest.raises(InvalidArgument, match=match):
        StoreStatsMetrics(store, **kwargs)
    assert generate_latest(registry) == b""


async def test_issue6_store_stats_metrics_reject_what_is_not_their_store(store):
    with pytest.raises(InvalidArgument, match="store must be a Store"):
        StoreStatsMetrics("memory://", CollectorRegistry())
    async with open_store("memory://") as other:
        with pytest.raises(InvalidArgument, match="belongs to another store"):
            StoreStatsMetrics(store, CollectorRegistry(), queues=[other.queue("q")])


async def test_issue6_one_store_stats_metrics_per_registry_beside_worker_metrics(store):
    registry = CollectorRegistry()
    WorkerMetrics(registry)
    StoreStatsMetrics(store, registry)  # no name in common with the worker metrics
    before = generate_latest(registry)
    with pytest.raises(InvalidArgument, match="one StoreStatsMetrics per registry"):
        StoreStatsMetrics(store, registry)
    assert generate_latest(registry) == before
    StoreStatsMetrics(store, registry, namespace="other")  # another namespace is fine


# -- issue 6 on PostgreSQL -------------------------------------------------------------

_postgres = _load(ROOT / "tests" / "postgres" / "conftest.py", "_alkstore_contrib_pg_conftest")
make_schema = _postgres.make_schema
schema = _postgres.schema
_FaultProxy = _load(ROOT / "tests" / "faults" / "_proxy.py", "_alkstore_contrib_proxy").Proxy


class Proxy(_FaultProxy):
    """The fault tests' proxy, ending quietly when a session it carries is reset: its
    own ``except`` misses the error once a nursery wraps it in an exception group."""

    async def _forward(self, client):
        try:
            await super()._forward(client)
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


def _terminate(dsn: str, application_name: str) -> int:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            [application_name],
        ).fetchall()
    return len(rows)


async def test_issue6_store_stats_metrics_on_postgresql_through_an_outage(pg_dsn, schema, caplog):
    import psycopg.conninfo

    caplog.set_level(logging.INFO, logger=LOGGER)
    server = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    proxy = Proxy(str(server.get("host") or "127.0.0.1"), int(server.get("port") or 5432))
    app = f"alkstore-trio-tests:stats-{secrets.token_hex(4)}"
    async with trio.open_nursery() as nursery:
        port = await nursery.start(proxy.serve)
        dsn = psycopg.conninfo.make_conninfo(
            pg_dsn, host="127.0.0.1", port=port, password="hunter2-secret"
        )
        async with open_store(
            dsn,
            schema=schema,
            migrate="apply",
            listen=False,
            pool_size=1,
            connect_timeout_s=0.5,
            application_name=app,
        ) as store:
            a = store.queue("a")
            await a.enqueue_many([b"1", b"2", b"3"])
            await a.enqueue(b"later", delay_s=600)
            dead = await a.claim_one("w")
            assert dead is not None
            assert await dead.fail("boom")
            acked = await a.claim_one("w")
            assert acked is not None
            assert await acked.ack()
            assert await a.cancel(await a.enqueue(b"cancelled"))
            registry = CollectorRegistry()
            metrics = StoreStatsMetrics(store, registry, queues=["a", "idle"])
            assert await metrics.poll()
            stats = await store.stats()
            shown = depth(registry, "a")
            assert shown.pop("oldest_ready_age_s") > 0  # the database clock moved on since
            expected = expected_depth(stats.queue("a"))
            del expected["oldest_ready_age_s"]
            assert (
                shown
                == expected
                == {
                    "ready": 1,
                    "delayed": 1,
                    "processing": 0,
                    "reclaimable": 0,
                    "dead": 1,
                }
            )
            assert depth(registry, "idle")["ready"] == 0
            # D27: the counters the statements added in the database.
            assert (
                totals(registry, "a")
                == expected_totals(stats.queue("a"))
                == {"acked": 1, "dead_lettered": 1, "cancelled": 1}
            )
            assert totals(registry, "idle") == {"acked": 0, "dead_lettered": 0, "cancelled": 0}
            assert sample(registry, "alkstore_store_ids_issued_total") == 5
            # The database cannot be reached: the pooled session ends, new ones are refused.
            proxy.refusing = True
            assert await trio.to_thread.run_sync(_terminate, pg_dsn, app) == 1
            assert not await metrics.poll()
            assert sample(registry, "alkstore_queue_stats_up") == 0
            assert sample(registry, "alkstore_queue_stats_failures_total") == 1
            assert depth(registry, "a")["ready"] == 1  # the last reading is still served
            proxy.refusing = False
            assert await metrics.poll()
            assert sample(registry, "alkstore_queue_stats_up") == 1
        nursery.cancel_scope.cancel()
    warnings = [
        r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelname == "WARNING"
    ]
    assert len(warnings) == 1
    assert "store stats reading failed (EngineError: " in warnings[0]
    assert "hunter2" not in caplog.text


async def test_q18_the_paused_gauge_follows_pause_and_resume(autojump_clock, store):
    # Q18: 1 while paused, 0 after the resume; a paused queue without jobs is exported.
    busy, empty = store.queue("busy"), store.queue("empty")
    await busy.enqueue(b"x")
    await busy.pause()
    await empty.pause()
    registry = CollectorRegistry()
    metrics = StoreStatsMetrics(store, registry)
    assert await metrics.poll()
    assert sample(registry, "alkstore_queue_paused", queue="busy") == 1
    assert sample(registry, "alkstore_queue_paused", queue="empty") == 1
    assert "# TYPE alkstore_queue_paused gauge" in generate_latest(registry).decode()
    await busy.resume()
    await empty.resume()
    assert await metrics.poll()
    assert sample(registry, "alkstore_queue_paused", queue="busy") == 0
    # The resumed queue without jobs is no longer listed: its series end.
    assert sample(registry, "alkstore_queue_paused", queue="empty") is None


async def test_q18_10_limits_are_gauges_and_throttled_claims_a_counter(autojump_clock, store):
    # Q18.7-Q18.11: a sample per limit that is set; throttled claims by limit.
    api = store.queue("api")
    await api.enqueue_many([b"x"] * 3)
    await api.set_limits(max_running=1, rate_per_s=5)
    await api.claim_batch("w", 3)  # max_running holds it to 1
    registry = CollectorRegistry()
    metrics = StoreStatsMetrics(store, registry)
    assert await metrics.poll()
    assert sample(registry, "alkstore_queue_limit", queue="api", limit="max_running") == 1
    assert sample(registry, "alkstore_queue_limit", queue="api", limit="rate_per_s") == 5
    assert sample(registry, "alkstore_queue_limit", queue="api", limit="burst") == 5
    assert sample(registry, "alkstore_queue_throttled_total", queue="api", limit="running") == 1
    assert sample(registry, "alkstore_queue_throttled_total", queue="api", limit="rate") == 0
    text = generate_latest(registry).decode()
    assert "# TYPE alkstore_queue_limit gauge" in text
    assert "# TYPE alkstore_queue_throttled_total counter" in text
    assert sample(registry, "alkstore_queue_throttled_total", queue="api", limit="per_key") == 0
    assert (
        sample(registry, "alkstore_queue_limit", queue="api", limit="max_running_per_key") is None
    )
    await api.set_limits(rate_per_s=None)
    assert await metrics.poll()
    assert sample(registry, "alkstore_queue_limit", queue="api", limit="rate_per_s") is None
    assert sample(registry, "alkstore_queue_limit", queue="api", limit="max_running") == 1


async def test_q18_8_the_per_key_limit_is_a_gauge_and_its_throttles_a_counter(
    autojump_clock, store
):
    tenants = store.queue("tenants")
    await tenants.enqueue_many([b"x"] * 3, concurrency_keys=["a", "a", "b"])
    await tenants.set_limits(max_running_per_key=1)
    assert len(await tenants.claim_batch("w", 3)) == 2  # a's second job is held back
    registry = CollectorRegistry()
    metrics = StoreStatsMetrics(store, registry)
    assert await metrics.poll()
    limit = sample(registry, "alkstore_queue_limit", queue="tenants", limit="max_running_per_key")
    assert limit == 1
    throttled = sample(registry, "alkstore_queue_throttled_total", queue="tenants", limit="per_key")
    assert throttled == 1
