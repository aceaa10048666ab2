"""Q21.3/Q21.4: a worker registers before ``run`` reports it started, beats every
``WORKER_BEAT_S`` whatever it runs (and never per job), marks its row stopped on its way
out, goes on when a write fails, and a crashed worker's row ages, reads gone and is
purged by a later worker. Every test runs on trio's ``MockClock`` with the store on
:class:`TrioClock`: no test waits for time."""

from __future__ import annotations

import os
import socket

import trio
from _worker_run import running, wait_until

from alkstore_trio import EngineError, Worker, open_store
from alkstore_trio._core._workers import WORKER_BEAT_S, WORKER_PURGE_AFTER_S
from alkstore_trio._runtime._registry import library_version
from alkstore_trio.engine import ForwardingEngine, MemoryEngine
from alkstore_trio.testing import TrioClock


async def nothing(job):
    pass


class Registry(ForwardingEngine):
    """Counts the registry writes by phase; ``failing`` makes them raise EngineError."""

    def __init__(self, inner):
        super().__init__(inner)
        self.phases = []
        self.failing = False

    async def beat_worker(self, registration, phase):
        self.phases.append(phase)
        if self.failing:
            raise EngineError("database away")
        await super().beat_worker(registration, phase)


def registry():
    return Registry(MemoryEngine(clock=TrioClock()))


async def test_q21_3_a_worker_is_registered_when_run_reports_started(autojump_clock):
    async with open_store("memory://", clock=TrioClock()) as store:
        worker = Worker(store, {"emails": nothing, "reports": nothing}, concurrency=7)
        async with running(worker):
            (row,) = await store.list_workers()
            assert row.worker_id == worker.worker_id
            assert (row.host, row.pid) == (socket.gethostname(), os.getpid())
            assert (row.queues, row.concurrency) == (("emails", "reports"), 7)
            assert row.version == library_version() != ""
            assert row.state == "running"
            assert row.started_at == row.heartbeat_at == row.now


async def test_q21_3_an_idle_worker_beats_every_interval_and_jobs_add_no_beat(autojump_clock):
    engine = registry()
    async with open_store(engine) as store:
        worker = Worker(store, {"emails": nothing}, poll_interval_s=1)
        async with running(worker):
            (row,) = await store.list_workers()
            started = row.started_at
            await trio.sleep(WORKER_BEAT_S * 4 + 0.5)
            (row,) = await store.list_workers()
            assert row.heartbeat_age_s == 0.5, row
            assert row.started_at == started
            assert engine.phases == ["start", "beat", "beat", "beat", "beat"]
            # 500 jobs run within one interval: not one registry write more.
            began = trio.current_time()
            await store.queue("emails").enqueue_many([b"x"] * 500)
            await wait_until(lambda: worker.statistics().acked == 500)
            assert trio.current_time() - began < WORKER_BEAT_S - 0.5  # no beat fell due
            assert engine.phases == ["start", "beat", "beat", "beat", "beat"]
        assert engine.phases[-1] == "stop"


async def test_q21_3_a_graceful_stop_marks_the_row_stopped(autojump_clock):
    async with open_store("memory://", clock=TrioClock()) as store:
        worker = Worker(store, {"emails": nothing})
        async with running(worker):
            await trio.sleep(20)
        (row,) = await store.list_workers()
        assert row.state == "stopped"
        assert row.stopped_at == row.heartbeat_at == row.now


async def test_q21_3_a_failing_write_is_logged_and_the_worker_goes_on(autojump_clock):
    engine = registry()
    engine.failing = True
    async with open_store(engine) as store:
        worker = Worker(store, {"emails": nothing})
        with worker.events(buffer=None) as events:
            async with running(worker):
                await store.queue("emails").enqueue(b"x")
                await wait_until(lambda: worker.statistics().acked == 1)
                assert await store.list_workers() == []
                assert worker.statistics().engine_errors >= 1
                engine.failing = False
                await trio.sleep(WORKER_BEAT_S + 0.1)
                (row,) = await store.list_workers()  # the start, tried again, took
                assert row.state == "running"
            kinds = [e.kind async for e in events]
    assert "worker_beat_failed" in kinds
    # Until a start succeeds, each interval tries a start again (never a plain beat).
    assert engine.phases[:2] == ["start", "start"], engine.phases
    assert engine.phases[-1] == "stop"


async def test_q21_4_a_crashed_workers_row_ages_reads_gone_and_is_purged(autojump_clock):
    engine = registry()
    async with open_store(engine) as store:
        crashed = Worker(store, {"emails": nothing})
        async with trio.open_nursery() as nursery:
            await nursery.start(crashed.run)
            await trio.sleep(WORKER_BEAT_S * 2 + 1)
            engine.failing = True  # the process dies: nothing it writes arrives
            nursery.cancel_scope.cancel()
        engine.failing = False
        (row,) = await store.list_workers()
        assert (row.worker_id, row.state) == (crashed.worker_id, "running")
        assert row.heartbeat_age_s == 1.0
        await trio.sleep(60)
        (row,) = await store.list_workers()
        assert (row.state, row.heartbeat_age_s) == ("gone", 61.0)
        await trio.sleep(WORKER_PURGE_AFTER_S)
        (row,) = await store.list_workers()
        assert row.state == "gone"  # nobody purges until a worker writes
        later = Worker(store, {"emails": nothing})
        async with running(later):
            assert [r.worker_id for r in await store.list_workers()] == [later.worker_id]
