"""Isolate tenants: at most one job of each tenant runs at once, and a tenant with a deep
backlog does not starve the others (Q18.8).

Three tenants share the ``reports`` queue. ``big-corp`` enqueued 20 reports first (of
a higher priority, even); ``small-a`` and ``small-b`` one each, later. Every job carries
its tenant as its ``concurrency_key`` and the queue is limited to one running job per
key with ``set_limits(max_running_per_key=1)``. The worker has room for 4 jobs at
once: each claim takes at most one job of each tenant, so the small tenants' reports
start with big-corp's first one instead of after all 20 of them. The script checks
that no two jobs of one tenant ever ran at once, that both small tenants' reports
started in the first round, and prints how many claims the per-key limit held back.

The script runs on the embedded in-memory engine; on PostgreSQL the calls and the
guarantee are the same, for every worker process of every host
(``alkstore-trio enqueue --queue reports --concurrency-key big-corp ...`` and
``alkstore-trio queue limits reports --per-key 1``).

Run it with ``python examples/isolate_tenants.py``.
"""

import trio

import alkstore_trio

BIG_JOBS = 20


async def main() -> None:
    async with alkstore_trio.open_store("memory://") as store:
        reports = store.queue("reports")
        await reports.set_limits(max_running_per_key=1)
        running: dict[str, int] = {}
        order: list[str] = []
        overlaps = 0
        done = trio.Event()

        async def build_report(job: alkstore_trio.Job) -> None:
            nonlocal overlaps
            tenant = job.concurrency_key
            assert tenant is not None
            running[tenant] = running.get(tenant, 0) + 1
            overlaps += running[tenant] > 1
            order.append(tenant)
            await trio.sleep(0.01)  # build the report
            running[tenant] -= 1
            if len(order) == BIG_JOBS + 2:
                done.set()

        await reports.enqueue_many(
            [b"big-%d" % i for i in range(BIG_JOBS)],
            concurrency_keys=["big-corp"] * BIG_JOBS,
            priority=5,
        )
        await reports.enqueue(b"small-a report", concurrency_key="small-a")
        await reports.enqueue(b"small-b report", concurrency_key="small-b")
        worker = alkstore_trio.Worker(store, {reports: build_report}, concurrency=4)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            with trio.fail_after(30):
                await done.wait()
            worker.stop()
        print(f"first three starts: {order[:3]}")
        assert overlaps == 0, f"{overlaps} reports of one tenant overlapped"
        assert set(order[:3]) == {"big-corp", "small-a", "small-b"}, order[:3]
        entry = (await store.stats("reports")).queue("reports")
        assert entry is not None
        print(f"limits: {entry.limits}; claims held back per key: {entry.throttled.per_key}")


if __name__ == "__main__":
    trio.run(main)
