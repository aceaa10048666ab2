"""Results and completed-job history (Q19.1-Q19.3).

A thumbnail service: the handler returns the thumbnail's bytes, and the queue keeps each
finished job for an hour (``keep_completed_s``), so the web app can read the result back
by job id. A sweep deletes the kept jobs once their hour is over. A queue without
``keep_completed_s`` deletes a job at its ack, as before: its handler's result is
discarded (the worker counts and logs it).

Run it with ``python examples/results_and_history.py`` (in-memory, with a manual clock,
so the hour passes at once).
"""

import trio

import alkstore_trio
from alkstore_trio import QueueOpts, Worker
from alkstore_trio.engine import MemoryEngine
from alkstore_trio.testing import ManualClock

HOUR_S = 3600


async def main() -> None:
    clock = ManualClock()
    async with alkstore_trio.open_store(MemoryEngine(clock=clock)) as store:
        thumbnails = store.queue("thumbnails", QueueOpts(keep_completed_s=HOUR_S))
        ids = await thumbnails.enqueue_many([b"cat.png", b"dog.png"])
        all_ran = trio.Event()
        ran: list[int] = []

        async def make_thumbnail(job: alkstore_trio.Job) -> bytes:
            """The handler: its return value (bytes, or None) is the job's result."""
            ran.append(job.id)
            if len(ran) == len(ids):
                all_ran.set()
            return b"thumbnail of " + job.payload

        worker = Worker(store, {thumbnails: make_thumbnail}, poll_interval_s=0.05)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await all_ran.wait()
            worker.stop()  # a graceful stop acks the finished jobs first

        # The web app reads each result back by id: the job is "completed", kept.
        for job_id in ids:
            job = await thumbnails.get_job(job_id)
            assert job is not None
            print(f"job {job.id}: {job.state} at {job.completed_at:%H:%M:%S}, {job.result!r}")
            assert job.state == "completed"
        done = await thumbnails.list_jobs("completed")
        assert [job.result for job in done] == [b"thumbnail of cat.png", b"thumbnail of dog.png"]

        # Without a worker: a handle's ack takes the result directly.
        extra = await thumbnails.enqueue(b"bird.png")
        handle = await thumbnails.claim_one("by-hand")
        assert handle is not None
        assert await handle.ack(result=b"thumbnail of bird.png")

        # Kept rows are history, not work: stats count none of them.
        entry = (await store.stats(thumbnails)).queue("thumbnails")
        assert entry is not None
        print(f"live {entry.live}, dead {entry.dead}, acked so far {entry.acked_total}")
        assert (entry.live, entry.acked_total) == (0, 3)

        # An hour later, a sweep purges them (in batches, on every engine).
        clock.advance(HOUR_S + 1)
        swept = await thumbnails.sweep_expired()
        print(f"sweep: {swept}")
        assert swept.purged_completed == 3
        assert await thumbnails.get_job(extra) is None


if __name__ == "__main__":
    trio.run(main)
