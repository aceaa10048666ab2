"""Prometheus metrics for a worker, on the embedded in-memory engine.

A producer enqueues six jobs and counts them; a worker runs them (one handler asks for a
retry, one fails for good); ``WorkerMetrics`` counts every transition from the worker's
event stream. At the end the script prints what Prometheus would scrape.

In a real deployment you would expose the registry over HTTP instead of printing it, with
prometheus-client's own exporter: ``prometheus_client.start_http_server(9100)``.

Needs the extra: ``pip install 'alkstore_trio[prometheus]'``.
Run it with ``python examples/prometheus_metrics.py``.
"""

import logging
import sys

import trio
from prometheus_client import CollectorRegistry, generate_latest

import alkstore_trio
from alkstore_trio.contrib.prometheus import WorkerMetrics


async def make_thumbnail(job: alkstore_trio.Job) -> None:
    await trio.sleep(0.01)  # the "work"
    if job.payload == b"corrupt.png":
        raise alkstore_trio.Fail("not an image")
    if job.payload == b"huge.png" and job.attempts == 1:
        raise alkstore_trio.Retry(delay_s=0.05, error="busy, try again")


async def main() -> None:
    # The worker logs each transition (a dead-lettered job is a warning); show them here.
    logging.basicConfig(stream=sys.stdout, format="log: %(message)s")
    registry = CollectorRegistry()  # or leave it out: prometheus-client's global REGISTRY
    metrics = WorkerMetrics(registry)
    images = [b"a.png", b"b.png", b"c.png", b"huge.png", b"corrupt.png"]
    async with alkstore_trio.open_store("memory://") as store:
        thumbnails = store.queue("thumbnails")
        ids = await thumbnails.enqueue_many(images)
        metrics.count_enqueued(thumbnails, len(ids))  # after the enqueue committed

        worker = alkstore_trio.Worker(store, {thumbnails: make_thumbnail}, poll_interval_s=0.1)
        with worker.events() as events:  # to know when every job is done
            async with trio.open_nursery() as nursery:
                await nursery.start(metrics.run, worker)  # first, so no event is missed
                await nursery.start(worker.run)
                done = 0
                async for event in events:
                    done += event.kind in ("ack", "dead")
                    if done == len(images):
                        worker.stop()  # metrics.run returns once the worker has stopped

    for line in generate_latest(registry).decode().splitlines():
        # Leave out the histograms' buckets and the counters' creation times.
        name = line.partition("{")[0].partition(" ")[0]
        if name.startswith("alkstore_") and not name.endswith(("_bucket", "_created")):
            print(line)


if __name__ == "__main__":
    trio.run(main)
