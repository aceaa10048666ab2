"""Q19.4: ``Queue.wait``'s loop on the in-memory engine, around an engine that fails: the
first read's ``EngineError`` is the caller's, a later one is read again soon (backing
off), so a database restart under a long wait does not end it; and the final states."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from alkstore_trio import EngineError, Job, QueueOpts, open_store
from alkstore_trio._core import FINAL_STATES
from alkstore_trio.engine import ForwardingEngine, MemoryEngine


class FlakyReads(ForwardingEngine):
    """``get_job`` raises ``EngineError`` on the calls whose numbers are in ``failing``."""

    def __init__(self, failing: set[int]) -> None:
        super().__init__(MemoryEngine())
        self.failing = failing
        self.reads: list[float] = []

    async def get_job(self, job_id: int, queue: str | None) -> Job | None:
        self.reads.append(trio.current_time())
        if len(self.reads) in self.failing:
            raise EngineError("PostgreSQL operation failed: the server restarted")
        return await super().get_job(job_id, queue)


def test_q19_4_the_final_states_are_completed_cancelled_and_dead():
    assert frozenset({"completed", "cancelled", "dead"}) == FINAL_STATES


async def test_q19_4_a_failed_first_read_is_raised():
    async with open_store(FlakyReads({1})) as store:
        queue = store.queue("q")
        job_id = await queue.enqueue(b"x")
        with pytest.raises(EngineError, match="restarted"):
            await queue.wait(job_id, poll_interval_s=3600)


async def test_q19_4_a_failed_later_read_is_tried_again_soon(caplog):
    engine = FlakyReads({2, 3})
    async with open_store(engine) as store:
        queue = store.queue("q", QueueOpts(keep_completed_s=60))
        job_id = await queue.enqueue(b"x")
        got: list[Job] = []

        async def waiter() -> None:
            got.append(await queue.wait(job_id, poll_interval_s=3600))

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiter)
                await trio.testing.wait_all_tasks_blocked()
                assert len(engine.reads) == 1  # the first read; now parked
                handle = await queue.claim_one("w")
                assert handle is not None
                assert await handle.ack(result=b"done")
        assert (got[0].state, got[0].result) == ("completed", b"done")
        # The ack's announcement woke it; two failed reads, then 0.1 s and 0.2 s later.
        _, woken, retried, read = engine.reads
        first_retry, second_retry = retried - woken, read - retried
        assert 0.1 <= first_retry < 1.0
        assert 0.2 <= second_retry < 2.0
    assert sum("read failed (EngineError); reading again" in r.message for r in caplog.records) == 2
