"""R12-R14: per-queue concurrency and job timeouts in one worker, and a worker that only
fires periodic schedules.

The memory-engine tests run on trio's ``MockClock(autojump_threshold=0)`` with the store
on :class:`TrioClock`, so handlers that "take" seconds finish instantly and the times
asserted are exact; nothing sleeps for real. One test per rule family runs on PostgreSQL.
"""

from __future__ import annotations

import secrets

import pytest
import trio
from _worker_run import running

from alkstore_trio import InvalidArgument, Periodic, QueueOpts, Worker, open_store
from alkstore_trio.testing import TrioClock

_START = [0.0]


def now():
    return trio.current_time() - _START[0]


@pytest.fixture
async def store(autojump_clock):
    _START[0] = trio.current_time()
    async with open_store("memory://", clock=TrioClock()) as opened:
        yield opened


async def wait_until(predicate, *, step=0.01, limit=3000.0):
    deadline = now() + limit
    while not predicate():
        assert now() < deadline, "condition never became true"
        await trio.sleep(step)


class Gauge:
    """Counts the handlers running at once, per queue and in all (shared by handlers)."""

    def __init__(self):
        self.running: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.total = self.peak_total = 0
        self.starts: dict[str, list[float]] = {}
        self.done: dict[str, int] = {}

    def handler(self, seconds):
        async def handle(job):
            queue = job.queue
            self.starts.setdefault(queue, []).append(now())
            self.running[queue] = self.running.get(queue, 0) + 1
            self.total += 1
            self.peak[queue] = max(self.peak.get(queue, 0), self.running[queue])
            self.peak_total = max(self.peak_total, self.total)
            try:
                await trio.sleep(seconds)
            finally:
                self.running[queue] -= 1
                self.total -= 1
                self.done[queue] = self.done.get(queue, 0) + 1

        return handle


# --- R12 per-queue concurrency --------------------------------------------------------


async def test_r12_1_a_capped_queue_runs_at_most_its_cap_within_the_total(autojump_clock, store):
    gauge = Gauge()
    await store.queue("reports").enqueue_many([b""] * 20)
    await store.queue("emails").enqueue_many([b""] * 20)
    worker = Worker(
        store,
        {"reports": gauge.handler(10), "emails": gauge.handler(10)},
        concurrency=5,
        queue_concurrency={"reports": 2},
        poll_interval_s=1000,
    )
    async with running(worker):
        await wait_until(lambda: gauge.done.get("reports", 0) + gauge.done.get("emails", 0) == 40)
    assert gauge.peak["reports"] == 2  # reached, never passed
    assert gauge.peak["emails"] >= 3  # at least what the total leaves
    assert gauge.peak_total == 5


async def test_r12_2_claims_ask_for_no_more_than_the_queues_free_slots(autojump_clock, store):
    """The claim statements themselves are sized by the cap: a capped queue's claim never
    asks for more than its free slots (counted through the engine)."""
    from alkstore_trio.engine import ForwardingEngine, MemoryEngine

    asked: list[tuple[str, int]] = []

    class Counting(ForwardingEngine):
        async def claim(self, queue, worker_id, n):
            asked.append((queue, n))
            return await super().claim(queue, worker_id, n)

        async def ack_and_claim(self, queue, claims, worker_id, n):
            asked.append((queue, n))
            return await super().ack_and_claim(queue, claims, worker_id, n)

    gauge = Gauge()
    async with open_store(Counting(MemoryEngine(clock=TrioClock()))) as counted:
        await counted.queue("reports").enqueue_many([b""] * 9)
        worker = Worker(
            counted,
            {"reports": gauge.handler(1), "emails": gauge.handler(1)},
            concurrency=50,
            queue_concurrency={"reports": 3},
            poll_interval_s=1000,
        )
        async with running(worker):
            await wait_until(lambda: gauge.done.get("reports", 0) == 9)
    reports = [n for queue, n in asked if queue == "reports"]
    assert reports
    assert max(reports) == 3
    # An uncapped queue asks for all the worker's free slots (the total less reports').
    assert max(n for queue, n in asked if queue == "emails") == 50 - 3


async def test_r12_3_a_busy_capped_queue_never_starves_another(autojump_clock, store):
    gauge = Gauge()
    await store.queue("reports").enqueue_many([b""] * 100)  # a deep backlog, slow jobs
    worker = Worker(
        store,
        {"reports": gauge.handler(1000), "emails": gauge.handler(1)},
        concurrency=4,
        queue_concurrency={"reports": 1},
        poll_interval_s=1000,
    )
    async with running(worker):
        await wait_until(lambda: gauge.running.get("reports") == 1)
        started = now()
        await store.queue("emails").enqueue_many([b""] * 30)
        await wait_until(lambda: gauge.done.get("emails", 0) == 30)
        # Three slots, 1 s jobs: 30 emails in 10 s, while the report still runs.
        assert now() - started == pytest.approx(10, abs=0.1)
        assert gauge.running["reports"] == 1
        assert gauge.peak["emails"] == 3


async def test_r12_3_a_slot_freed_in_a_capped_queue_is_claimed_into_at_once(autojump_clock, store):
    gauge = Gauge()
    await store.queue("reports").enqueue_many([b""] * 5)
    worker = Worker(
        store,
        {"reports": gauge.handler(2), "emails": gauge.handler(1)},
        concurrency=10,
        queue_concurrency={"reports": 1},
        poll_interval_s=1000,  # no re-poll to help: each ack carries the next claim
    )
    async with running(worker):
        await wait_until(lambda: gauge.done.get("reports", 0) == 5)
    assert gauge.starts["reports"] == pytest.approx([0, 2, 4, 6, 8], abs=0.05)


async def test_r12_4_prefetch_stays_inside_the_caps(autojump_clock, store):
    gauge = Gauge()
    reports = store.queue("reports")
    await reports.enqueue_many([b""] * 10)
    await store.queue("emails").enqueue_many([b""] * 10)
    worker = Worker(
        store,
        {"reports": gauge.handler(10), "emails": gauge.handler(10)},
        concurrency=4,
        prefetch=4,
        queue_concurrency={"reports": 2},
        poll_interval_s=1000,
    )
    async with running(worker):
        await wait_until(lambda: gauge.total == 4)
        # Never more than the cap of reports held: running or prefetched.
        assert (await store.stats(reports)).queues[0].processing == 2
        assert worker.statistics().in_flight == 8  # the total's prefetch: emails
        await wait_until(lambda: sum(gauge.done.values()) == 20)
    assert gauge.peak["reports"] == 2
    assert gauge.peak_total == 4


async def test_r12_5_the_short_form_gives_each_queue_its_own_pool(autojump_clock, store):
    gauge = Gauge()
    await store.queue("reports").enqueue_many([b""] * 10)
    await store.queue("emails").enqueue_many([b""] * 10)
    worker = Worker(
        store,
        {"reports": gauge.handler(5), store.queue("emails"): gauge.handler(5)},
        concurrency={"reports": 1, store.queue("emails"): 3},
        poll_interval_s=1000,
    )
    async with running(worker):
        await wait_until(lambda: sum(gauge.done.values()) == 20)
    assert (gauge.peak["reports"], gauge.peak["emails"], gauge.peak_total) == (1, 3, 4)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"queue_concurrency": {"other": 1}}, r"names queue 'other', which this worker does not"),
        ({"queue_concurrency": {"a": 0}}, r"queue_concurrency\['a'\] must be an int >= 1; got 0"),
        ({"queue_concurrency": {"a": -3}}, r"queue_concurrency\['a'\] must be an int >= 1"),
        ({"queue_concurrency": {"a": True}}, r"queue_concurrency\['a'\] must be an int"),
        ({"queue_concurrency": {"a": 1.5}}, r"queue_concurrency\['a'\] must be an int"),
        ({"queue_concurrency": {"a": 11}}, r"at most concurrency=10; got 11"),
        ({"queue_concurrency": {7: 1}}, "keys must be queue names or Queue handles"),
        ({"queue_concurrency": [("a", 1)]}, "queue_concurrency must map queue names"),
        ({"queue_concurrency": "a=1"}, "queue_concurrency must map queue names"),
        ({"concurrency": {"a": 2}}, r"names none for 'b'"),
        ({"concurrency": {}}, "names none for 'a', 'b'"),
        ({"concurrency": {"a": 0, "b": 1}}, r"concurrency\['a'\] must be an int >= 1"),
        ({"concurrency": {"a": 1, "b": 1}, "queue_concurrency": {"a": 1}}, "not both"),
        ({"concurrency": 0}, "concurrency must be an int >= 1"),
    ],
)
async def test_r12_6_bad_limits_are_invalid_arguments(autojump_clock, store, kwargs, match):
    async def nothing(job):
        pass

    with pytest.raises(InvalidArgument, match=match):
        Worker(store, {"a": nothing, "b": nothing}, **kwargs)


async def test_r12_6_a_queue_named_twice_or_from_another_store_is_refused(autojump_clock, store):
    async def nothing(job):
        pass

    with pytest.raises(InvalidArgument, match="names queue 'a' twice"):
        Worker(store, {"a": nothing}, queue_concurrency={"a": 1, store.queue("a"): 2})
    async with open_store("memory://") as other:
        with pytest.raises(InvalidArgument, match="belongs to another store"):
            Worker(store, {"a": nothing}, queue_concurrency={other.queue("a"): 1})


# --- R13 per-queue job timeout --------------------------------------------------------


async def test_r13_a_queue_timeout_overrides_the_worker_wide_one(autojump_clock, store):
    gauge = Gauge()
    opts = QueueOpts(max_attempts=1)  # a timeout's retry on the last attempt: dead
    queues = {name: store.queue(name, opts) for name in ("reports", "emails", "misc")}
    ids = {name: await queue.enqueue(b"") for name, queue in queues.items()}
    worker = Worker(
        store,
        {queue: gauge.handler(500) for queue in queues.values()},
        job_timeout_s=100,
        queue_job_timeout_s={"reports": 5, queues["emails"]: None},
        poll_interval_s=1000,
    )
    with worker.events(buffer=None) as events:
        async with running(worker):
            await wait_until(lambda: sum(gauge.done.values()) == 3)
        timeouts = {e.queue: e.at - _START[0] async for e in events if e.kind == "timeout"}
    assert timeouts == pytest.approx({"reports": 5, "misc": 100}, abs=0.05)
    reports = await queues["reports"].get_job(ids["reports"])
    assert reports.last_error == "job timed out after 5s (queue_job_timeout_s['reports'])"
    misc = await queues["misc"].get_job(ids["misc"])
    assert misc.last_error == "job timed out after 100s (job_timeout_s)"
    assert await queues["emails"].get_job(ids["emails"]) is None  # no limit: acked
    stats = worker.statistics()
    assert (stats.timed_out, stats.acked, stats.dead_lettered) == (2, 1, 2)


@pytest.mark.parametrize(
    ("timeouts", "match"),
    [
        ({"other": 1}, "names queue 'other', which this worker does not serve"),
        ({"a": 0}, r"queue_job_timeout_s\['a'\]"),
        ({"a": -1}, r"queue_job_timeout_s\['a'\]"),
        ({"a": float("nan")}, r"queue_job_timeout_s\['a'\]"),
        ({"a": "5"}, r"queue_job_timeout_s\['a'\]"),
        (5, "queue_job_timeout_s must map queue names"),
    ],
)
async def test_r13_bad_timeouts_are_invalid_arguments(autojump_clock, store, timeouts, match):
    async def nothing(job):
        pass

    with pytest.raises(InvalidArgument, match=match):
        Worker(store, {"a": nothing}, queue_job_timeout_s=timeouts)


# --- R14 a scheduler-only worker ------------------------------------------------------


async def test_r14_a_scheduler_only_worker_fires_schedules_and_claims_nothing(
    autojump_clock, store
):
    every = Periodic("every-10s", "reports", every_s=10)
    worker = Worker(store, {}, periodic=[every])
    assert worker.queues == ()
    assert "periodic schedules only" in repr(worker)
    async with running(worker):
        await trio.sleep(35)
        assert worker._supervisor is not None
        children = [child.name for child in worker._supervisor.statistics().children]
        # No listener, no timer, no sweeper; the registry actor (Q21.3) runs in every worker.
        assert children == ["registry", "periodic"]
    stats = (await store.stats("reports")).queues[0]
    assert (stats.pending_ready, stats.processing) == (3, 0)  # fired at 10, 20, 30; none claimed
    assert worker.statistics().claimed == 0


async def test_r14_a_worker_with_neither_handlers_nor_schedules_is_refused(autojump_clock, store):
    with pytest.raises(InvalidArgument, match="at least one queue, or periodic="):
        Worker(store, {})
    with pytest.raises(InvalidArgument, match="at least one queue, or periodic="):
        Worker(store, {}, periodic=[])
    every = Periodic("p", "reports", every_s=10)
    with pytest.raises(InvalidArgument, match="does not serve"):
        Worker(store, {}, periodic=[every], queue_concurrency={"reports": 1})


# --- PostgreSQL -----------------------------------------------------------------------


@pytest.fixture
def pg_schema(pg_dsn):
    psycopg = pytest.importorskip("psycopg")
    from psycopg import sql

    name = "t_limits_" + secrets.token_hex(5)
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


async def test_r12_caps_hold_on_postgresql_and_a_busy_capped_queue_starves_nothing(
    pg_dsn, pg_schema
):
    """Real clock and real claims: reports (cap 2, slow) and emails share 6 slots."""
    gauge = Gauge()
    async with open_store(pg_dsn, schema=pg_schema, migrate="apply", pool_size=4) as pg:
        _START[0] = trio.current_time()
        await pg.queue("reports").enqueue_many([b""] * 6)
        worker = Worker(
            pg,
            {"reports": gauge.handler(0.3), "emails": gauge.handler(0.01)},
            concurrency=6,
            queue_concurrency={"reports": 2},
            poll_interval_s=30,
        )
        with trio.fail_after(20):
            async with running(worker):
                await wait_until(lambda: gauge.running.get("reports") == 2)
                await pg.queue("emails").enqueue_many([b""] * 40)
                await wait_until(lambda: gauge.done.get("emails", 0) == 40)
                # The 40 emails went through the 4 free slots while the reports ran.
                assert gauge.done.get("reports", 0) < 6
                await wait_until(lambda: gauge.done.get("reports", 0) == 6)
    assert gauge.peak["reports"] == 2
    assert gauge.peak_total <= 6
    assert worker.statistics().acked == 46


async def test_r14_a_scheduler_only_worker_opens_no_listen_session_on_postgresql(pg_dsn, pg_schema):
    every = Periodic("every-1ms", "reports", every_s=0.001)
    name = "r14-" + secrets.token_hex(3)
    async with open_store(pg_dsn, schema=pg_schema, migrate="apply", application_name=name) as pg:
        worker = Worker(pg, {}, periodic=[every])
        with trio.fail_after(20), worker.events() as events:
            async with running(worker):
                async for event in events:
                    if event.kind == "periodic_fired":
                        break
                async with pg.transaction() as tx:
                    rows = await tx.fetch(
                        "SELECT application_name FROM pg_stat_activity "
                        "WHERE application_name LIKE %s",
                        (name + "%",),
                    )
        assert ":listen" not in " ".join(str(row) for row in rows)
        assert worker.statistics().claimed == 0
