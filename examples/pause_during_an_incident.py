"""Pause a queue during an incident, and resume it: fleet-wide, from anywhere (Q18).

A worker sends payments to a downstream API. The API starts failing, so an operator
pauses the ``payments`` queue (in production: ``alkstore-trio queue pause payments``,
from any machine). Once ``pause()`` returns, no worker claims a job of the queue: the
handlers already running finish normally, new payments are still accepted and wait,
pending, and the worker idles on the queue without polling harder. ``resume()`` wakes
the worker, which takes the backlog at once.

The script runs on the embedded in-memory engine; on PostgreSQL the calls and the
guarantee are the same, for every worker process of every host.

Run it with ``python examples/pause_during_an_incident.py``.
"""

import trio

import alkstore_trio

BEFORE, DURING = 6, 4


async def main() -> None:
    async with alkstore_trio.open_store("memory://") as store:
        payments = store.queue("payments")
        sent: list[bytes] = []
        in_flight = trio.Semaphore(0)
        all_sent = trio.Event()

        async def send_payment(job: alkstore_trio.Job) -> None:
            in_flight.release()
            await trio.sleep(0.05)  # the call to the downstream API
            sent.append(job.payload)
            if len(sent) == BEFORE + DURING:
                all_sent.set()

        worker = alkstore_trio.Worker(
            store, {payments: send_payment}, concurrency=2, poll_interval_s=30
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await payments.enqueue_many([b"before-%d" % i for i in range(BEFORE)])
            await in_flight.acquire()  # the worker is busy...

            # ... when the incident starts: pause the queue, fleet-wide.
            await payments.pause()
            started = worker.statistics().started
            await payments.enqueue_many([b"during-%d" % i for i in range(DURING)])
            await trio.sleep(1)  # the incident: the queue stays paused
            stats = (await store.stats("payments")).queue("payments")
            assert stats is not None
            assert stats.paused
            assert worker.statistics().started == started, "a job started while paused"
            assert stats.processing == 0, "the running handlers finished"
            waiting = stats.pending_ready
            print(f"paused: {len(sent)} sent, {waiting} waiting")

            # The API is back: resume, and the worker is woken at once (no 30 s poll).
            resumed_at = trio.current_time()
            await payments.resume()
            with trio.fail_after(5):
                await all_sent.wait()
            print(f"resumed: all {len(sent)} sent {trio.current_time() - resumed_at:.2f} s later")
            worker.stop()
        assert waiting == BEFORE + DURING - started


if __name__ == "__main__":
    trio.run(main)
