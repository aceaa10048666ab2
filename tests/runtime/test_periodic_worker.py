"""Q17.8: a worker with ``periodic=`` fires its schedules on time, once per fire time
even with several workers, keeps going after a failed call, and checks its argument.
Every test runs on trio's ``MockClock`` with the store on :class:`TrioClock`."""

from __future__ import annotations

import contextlib
import itertools
from contextlib import asynccontextmanager

import pytest
import trio

from alkstore_trio import EngineError, InvalidArgument, Periodic, Worker, open_store
from alkstore_trio._runtime._periodic import PERIODIC_RETRY_MAX_S, retry_delay_s
from alkstore_trio.engine import ForwardingEngine, MemoryEngine
from alkstore_trio.testing import TrioClock


async def nothing(job):
    pass


@asynccontextmanager
async def running(*workers):
    async with trio.open_nursery() as nursery:
        for worker in workers:
            await nursery.start(worker.run)
        yield
        for worker in workers:
            worker.stop()


async def fire_times(store, queue="reports"):
    handles = await store.queue(queue).claim_batch("reader", 10_000)
    return sorted(h.job.headers["alk-periodic-fire-at"] for h in handles)


async def test_q17_8_workers_fire_each_fire_time_once_and_on_time(autojump_clock):
    every = Periodic("every-10s", "reports", every_s=10)
    async with open_store("memory://", clock=TrioClock()) as store:
        workers = [Worker(store, {"other": nothing}, periodic=[every]) for _ in range(3)]
        with contextlib.ExitStack() as stack:
            streams = [stack.enter_context(w.events(buffer=None)) for w in workers]
            async with running(*workers):
                await trio.sleep(95)
            fired = [e for events in streams async for e in events if e.kind == "periodic_fired"]
        got = await fire_times(store)
    assert len(got) == 9, got  # at 10, 20, ..., 90 s: no duplicate, no gap
    assert len(set(got)) == 9
    # Whichever worker came first fired, and reported what it fired (which one wins each
    # fire time is the scheduler's choice: the events of all three are counted).
    assert 1 <= len(fired) <= 9
    assert all(e.queue == "reports" and "every-10s" in e.message for e in fired)


async def test_q17_8_a_worker_wakes_at_the_next_fire_time_not_at_the_recheck(autojump_clock):
    cron_like = Periodic("every-3s", "reports", every_s=3)
    async with open_store("memory://", clock=TrioClock()) as store:
        worker = Worker(store, {"other": nothing}, periodic=[cron_like])
        async with running(worker):
            await trio.sleep(3.001)
            assert len(await fire_times(store)) == 1
            await trio.sleep(2.99)
            assert len(await fire_times(store)) == 0
            await trio.sleep(0.02)
            assert len(await fire_times(store)) == 1


class FailingOnce(ForwardingEngine):
    failures = 1

    async def fire_periodic(self, schedules):
        if self.failures:
            self.failures -= 1
            raise RuntimeError("database away")
        return await super().fire_periodic(schedules)


async def test_q17_8_a_failed_call_is_logged_and_retried(autojump_clock):
    engine = FailingOnce(MemoryEngine(clock=TrioClock()))
    every = Periodic("every-5s", "reports", every_s=5)
    async with open_store(engine) as store:
        worker = Worker(store, {"other": nothing}, periodic=[every])
        with worker.events(buffer=None) as events:
            async with running(worker):
                await trio.sleep(12)
            kinds = [e.kind async for e in events]
        assert "periodic_failed" in kinds
        # Made at 1 s (the retry): fires at 6 and 11 s.
        assert len(await fire_times(store)) == 2


class FailingAt(ForwardingEngine):
    """Fails ``fire_periodic`` (an EngineError) ``failures`` times, noting when it was
    called (trio time)."""

    def __init__(self, inner, failures):
        super().__init__(inner)
        self.failures = failures
        self.calls = []

    async def fire_periodic(self, schedules):
        self.calls.append(trio.current_time())
        if self.failures:
            self.failures -= 1
            raise EngineError("the fire transaction was ended by the server")
        return await super().fire_periodic(schedules)


async def test_q17_8_failed_calls_back_off_doubling_and_the_worker_keeps_running(autojump_clock):
    engine = FailingAt(MemoryEngine(clock=TrioClock()), failures=6)
    every = Periodic("every-60s", "reports", every_s=60)
    async with open_store(engine) as store:
        worker = Worker(store, {"other": nothing}, periodic=[every])
        async with running(worker):
            await trio.sleep(100)
            assert worker.statistics().engine_errors == 6
        start = engine.calls[0]
        waits = [round(b - a, 6) for a, b in itertools.pairwise(engine.calls[:7])]
        assert waits == [1, 2, 4, 8, 16, 16], waits
        # The 7th call (at 47 s) made the row: its first fire time is at 107 s.
        assert engine.calls[6] - start == 47
        assert await fire_times(store) == []


def test_q17_8_the_retry_delay_doubles_up_to_its_cap():
    assert [retry_delay_s(n) for n in (1, 2, 3, 4, 5, 6, 1000)] == [1, 2, 4, 8, 16, 16, 16]
    assert PERIODIC_RETRY_MAX_S == 16


@pytest.mark.parametrize(
    "bad",
    [
        "not schedules",
        [Periodic("a", "q", every_s=1), Periodic("a", "q", every_s=2)],
        [object()],
        5,
    ],
)
async def test_q17_8_worker_checks_periodic(bad):
    async with open_store("memory://") as store:
        with pytest.raises(InvalidArgument, match="periodic"):
            Worker(store, {"q": nothing}, periodic=bad)
