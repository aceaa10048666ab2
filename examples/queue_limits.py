"""Limit a queue fleet-wide: how many of its jobs run at once, and how fast they start
(Q18.7-Q18.11).

A downstream API allows 3 calls in flight and about 20 calls a second. The worker has
room for 10 jobs at once, but ``set_limits`` caps the ``api-calls`` queue in the store:
every claim of every worker process (here: one worker) hands out at most what the
limits allow. The script checks that no more than 3 handlers ever ran at once, that the
starts kept to the rate (a burst of 5, then 20 a second), and prints what ``stats`` shows:
the limits, and how many claims each limit held back.

The script runs on the embedded in-memory engine; on PostgreSQL the calls and the
guarantee are the same, for every worker process of every host
(``alkstore-trio queue limits api-calls --max-running 3 --rate 20/s --burst 5``).

Run it with ``python examples/queue_limits.py``.
"""

import trio

import alkstore_trio

JOBS, MAX_RUNNING, RATE, BURST = 30, 3, 20.0, 5


async def main() -> None:
    async with alkstore_trio.open_store("memory://") as store:
        api = store.queue("api-calls")
        limits = await api.set_limits(max_running=MAX_RUNNING, rate_per_s=RATE, burst=BURST)
        print(f"limits: {limits}")
        running = most = 0
        starts: list[float] = []
        done = trio.Event()

        async def call_api(job: alkstore_trio.Job) -> None:
            nonlocal running, most
            running += 1
            most = max(most, running)
            starts.append(trio.current_time())
            await trio.sleep(0.1)  # the call to the downstream API
            running -= 1
            if len(starts) == JOBS:
                done.set()

        worker = alkstore_trio.Worker(store, {api: call_api}, concurrency=10, poll_interval_s=30)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await api.enqueue_many([b"call-%d" % i for i in range(JOBS)])
            with trio.fail_after(30):
                await done.wait()
            worker.stop()
        elapsed = starts[-1] - starts[0]
        print(f"{JOBS} calls, at most {most} at once, started over {elapsed:.2f} s")
        assert most <= MAX_RUNNING, most
        # At most BURST + RATE * t starts in the t seconds from the first to the last
        # (one of slack: a start is measured a moment after its claim).
        assert BURST + RATE * elapsed + 1 >= JOBS, elapsed
        entry = (await store.stats("api-calls")).queue("api-calls")
        assert entry is not None
        assert entry.limits == limits
        print(f"throttled claims: {entry.throttled}")
        await api.set_limits(max_running=None, rate_per_s=None)
        print(f"limits after clearing: {await api.limits()}")


if __name__ == "__main__":
    trio.run(main)
