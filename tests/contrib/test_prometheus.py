"""alkstore_trio.contrib.prometheus: worker metrics with the real prometheus-client.

Each test uses its own ``CollectorRegistry`` and reads the exposed samples back, so what
is asserted is what Prometheus would scrape.
"""

from __future__ import annotations

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

from alkstore_trio import InvalidArgument, Job, Worker, WorkerEvent
from alkstore_trio.contrib.prometheus import WorkerMetrics

ROOT = Path(__file__).resolve().parents[2]


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
        "lease_lost": 1,
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
    # Nine runs of 1 s, lost's 10 s, slow's 50 s.
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


def test_r9_set_queue_depth_sets_the_gauge_per_state():
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    metrics.set_queue_depth("q", {"ready": 12, "delayed": 3})
    metrics.set_queue_depth("q", {"ready": 7})
    assert sample(registry, "alkstore_queue_jobs", queue="q", state="ready") == 7
    assert sample(registry, "alkstore_queue_jobs", queue="q", state="delayed") == 3


def test_r9_set_queue_depth_rejects_bad_counts_without_partial_effect():
    registry = CollectorRegistry()
    metrics = WorkerMetrics(registry)
    with pytest.raises(InvalidArgument, match=r"counts\['dead'\]"):
        metrics.set_queue_depth("q", {"ready": 1, "dead": -1})
    assert sample(registry, "alkstore_queue_jobs", queue="q", state="ready") is None


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
