"""Wrap an engine: count the calls a Worker makes, per operation.

``alkstore_trio.engine.ForwardingEngine`` hands every call to the engine it wraps;
override the operations you want to watch (or to change: add latency, fail the third
ack, log), and hand the wrapper to ``open_store``. Here a counting wrapper shows how the
worker batches: 1,000 jobs settle in far fewer engine calls than jobs, because the
dispatcher acks every finished job it finds in one call, fused with its next claim.

Run it with ``python examples/count_engine_calls.py``.
"""

from collections import Counter
from collections.abc import Sequence

import trio
import trio.lowlevel

import alkstore_trio
from alkstore_trio.engine import Claim, ForwardingEngine, MemoryEngine

JOBS = 1000


class CountingEngine(ForwardingEngine):
    """Counts the work path's calls and the claims they settle."""

    def __init__(self, inner: MemoryEngine) -> None:
        super().__init__(inner)
        self.calls: Counter[str] = Counter()
        self.acked = 0
        self.all_acked = trio.Event()

    def _count_acks(self, name: str, acked: list[int]) -> None:
        self.calls[name] += 1
        self.acked += len(acked)
        if self.acked >= JOBS:
            self.all_acked.set()

    async def claim(self, queue: str, worker_id: str, n: int) -> list[alkstore_trio.Job]:
        self.calls["claim"] += 1
        return await super().claim(queue, worker_id, n)

    async def ack(self, queue: str, claims: Sequence[Claim]) -> list[int]:
        acked = await super().ack(queue, claims)
        self._count_acks("ack", acked)
        return acked

    async def ack_and_claim(
        self, queue: str, claims: Sequence[Claim], worker_id: str, n: int
    ) -> tuple[list[int], list[alkstore_trio.Job]]:
        acked, jobs = await super().ack_and_claim(queue, claims, worker_id, n)
        self._count_acks("ack_and_claim", acked)
        return acked, jobs


async def handle(job: alkstore_trio.Job) -> None:
    await trio.lowlevel.checkpoint()  # the work; returning acks the job


async def main() -> None:
    engine = CountingEngine(MemoryEngine())
    async with alkstore_trio.open_store(engine) as store:
        emails = store.queue("emails")
        await emails.enqueue_many([b"job"] * JOBS)
        worker = alkstore_trio.Worker(store, {emails: handle}, concurrency=50)
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await engine.all_acked.wait()
            worker.stop()
    calls = sum(engine.calls.values())
    print(f"{JOBS} jobs acked with {calls} engine calls: {dict(sorted(engine.calls.items()))}")
    assert engine.acked == JOBS
    assert calls < JOBS / 5, "the worker batches its acks and claims"


if __name__ == "__main__":
    trio.run(main)
