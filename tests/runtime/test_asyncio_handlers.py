"""R5-R8 for handlers written for asyncio (``@asyncio_handler``, run through trio-asyncio).

trio-asyncio's loop reads trio's clock (``loop.time()`` is ``trio.current_time()``) and
schedules its timers with trio, so ``asyncio.sleep`` and ``call_later`` run on trio's
``MockClock(autojump_threshold=0)`` like ``trio.sleep`` does: these tests drive time with
the mock clock (each test asks for ``autojump_clock``: pytest-trio only uses a clock the
test function itself names), as ``test_worker.py`` does, and the times asserted are exact. Only the
PostgreSQL tests use the real clock (with tiny intervals), as ``test_worker.py``'s does.
"""

from __future__ import annotations

import asyncio
import functools
import os
import secrets
import subprocess
import sys
import textwrap
import types
from datetime import UTC, datetime

import pytest
import sniffio
import trio
import trio_asyncio
from _worker_run import running, wait_until

import alkstore_trio
from alkstore_trio import (
    AsyncioCancelled,
    Fail,
    InvalidArgument,
    QueueOpts,
    Retry,
    Worker,
    asyncio_handler,
    open_store,
)
from alkstore_trio._runtime import _asyncio
from alkstore_trio.testing import TrioClock

T0 = datetime(2000, 1, 1, tzinfo=UTC)
_START = [0.0]


def now():
    """Seconds since the test's store opened; inside asyncio code too (the trio-asyncio
    loop's clock is trio's)."""
    return trio.current_time() - _START[0]


def approx(seconds):
    return pytest.approx(seconds, abs=0.05)


@pytest.fixture
async def store(autojump_clock):
    _START[0] = trio.current_time()
    async with open_store("memory://", clock=TrioClock()) as opened:
        yield opened


class AsyncioRecorder:
    """An asyncio handler body that records what it saw, then does what ``action`` says.

    It records the asyncio loop it ran on, that it really ran as an asyncio task, and
    when an :class:`asyncio.CancelledError` reached it (after which its cleanup awaits
    asyncio code for one second)."""

    def __init__(self, action=None):
        self.action = action
        self.starts: list[tuple[int, int, float]] = []
        self.loops: list[asyncio.AbstractEventLoop] = []
        self.cancelled: list[tuple[int, float]] = []
        self.cleaned_up: list[tuple[int, float]] = []

    async def __call__(self, job):
        assert sniffio.current_async_library() == "asyncio"
        assert asyncio.current_task() is not None
        self.loops.append(asyncio.get_running_loop())
        self.starts.append((job.id, job.attempts, now()))
        try:
            if self.action is not None:
                await self.action(job)
        except asyncio.CancelledError:
            self.cancelled.append((job.id, now()))
            await asyncio.sleep(1)  # asyncio cleanup after the cancellation still runs
            self.cleaned_up.append((job.id, now()))
            raise


async def hang(job):
    await asyncio.Event().wait()


# --- R5: outcomes -------------------------------------------------------------------------


async def test_r5_asyncio_handler_return_acks(autojump_clock, store):
    queue = store.queue("q")
    ids = await queue.enqueue_many([b"a", b"b", b"c"])

    async def action(job):
        # asyncio primitives, tasks and timers, on the worker's loop.
        results: asyncio.Queue[bytes] = asyncio.Queue()

        async def produce():
            await asyncio.sleep(2)
            await results.put(job.payload)

        task = asyncio.create_task(produce())
        assert await asyncio.wait_for(results.get(), timeout=10) == job.payload
        await task

    body = AsyncioRecorder(action)
    worker = Worker(store, {queue: asyncio_handler(body)}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 3)
    assert sorted(job_id for job_id, _, _ in body.starts) == ids
    for job_id in ids:
        assert await queue.get_job(job_id) is None
    stats = worker.statistics()
    assert (stats.acked, stats.retried, stats.handler_errors, stats.in_flight) == (3, 0, 0, 0)


async def test_r5_retry_and_fail_raised_from_asyncio_code_map_as_usual(autojump_clock, store):
    queue = store.queue("q", QueueOpts(max_attempts=5))
    retry_id, fail_id = await queue.enqueue_many([b"retry", b"fail"])

    @asyncio_handler
    async def handler(job):
        await asyncio.sleep(1)
        if job.payload == b"retry" and job.attempts == 1:
            raise Retry(delay_s=7, error="once more")
        if job.payload == b"fail":
            raise Fail("malformed")

    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().retried == 1)
        retried = await queue.get_job(retry_id)
        assert (retried.state, retried.last_error, retried.attempts) == ("pending", "once more", 1)
        assert (retried.run_at - T0).total_seconds() - _START[0] == approx(1 + 7)
        await wait_until(lambda: worker.statistics().acked == 1)
    assert await queue.get_job(retry_id) is None
    failed = await queue.get_job(fail_id)
    assert (failed.state, failed.last_error, failed.attempts) == ("dead", "malformed", 1)
    stats = worker.statistics()
    assert (stats.acked, stats.retried, stats.dead_lettered, stats.handler_errors) == (1, 1, 1, 0)


async def test_r5_other_exceptions_from_asyncio_code_retry_with_type_and_message(
    autojump_clock, store
):
    queue = store.queue("q", QueueOpts(max_attempts=2, backoff_base_s=0))
    job_id = await queue.enqueue(b"x")

    @asyncio_handler
    async def handler(job):
        await asyncio.sleep(0)
        raise LookupError(f"no such thing (attempt {job.attempts})")

    # The retry's backoff delay is the store's: the re-poll finds the job again.
    worker = Worker(store, {queue: handler}, poll_interval_s=5)
    async with running(worker):
        await wait_until(lambda: worker.statistics().retried == 1)
        job = await queue.get_job(job_id)
        assert (job.state, job.last_error) == ("pending", "LookupError: no such thing (attempt 1)")
        await wait_until(lambda: worker.statistics().dead_lettered == 1)
    job = await queue.get_job(job_id)
    assert (job.state, job.last_error) == ("dead", "LookupError: no such thing (attempt 2)")
    assert worker.statistics().handler_errors == 2


async def test_r5_asyncio_handler_timeout_cancels_it_and_retries(autojump_clock, store):
    queue = store.queue("q", QueueOpts(max_attempts=3))
    job_id = await queue.enqueue(b"x")

    async def action(job):
        await asyncio.sleep(100)

    body = AsyncioRecorder(action)
    worker = Worker(store, {queue: asyncio_handler(body)}, job_timeout_s=5, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().retried == 1)
        job = await queue.get_job(job_id)
        assert job.last_error == "job timed out after 5s (job_timeout_s)"
    # asyncio.CancelledError at the timeout, then the handler's own asyncio cleanup ran
    # to its end before the worker retried the job.
    assert body.cancelled[0] == (job_id, approx(5.0))
    assert body.cleaned_up[0] == (job_id, approx(6.0))
    assert worker.statistics().timed_out >= 1


async def test_r5_an_asyncio_cancelled_error_of_the_handler_own_retries_the_job(
    autojump_clock, store
):
    """An ``asyncio.CancelledError`` the worker did not cause is a handler error, not a
    cancellation: the job is retried with it, and the worker keeps running (it is a
    BaseException, which would otherwise escape the job actor and end the worker)."""
    queue = store.queue("q", QueueOpts(max_attempts=2, backoff_base_s=0))
    job_id = await queue.enqueue(b"x")

    @asyncio_handler
    async def handler(job):
        if job.attempts == 1:
            inner = asyncio.ensure_future(asyncio.sleep(10))
            asyncio.get_running_loop().call_later(1, inner.cancel, "gave up on it")
            await inner  # raises the inner task's CancelledError

    worker = Worker(store, {queue: handler}, poll_interval_s=5)
    async with running(worker):
        await wait_until(lambda: worker.statistics().retried == 1)
        job = await queue.get_job(job_id)
        assert job.last_error == (
            "AsyncioCancelled: the asyncio handler raised asyncio.CancelledError "
            "(gave up on it) although the worker did not cancel it"
        )
        await wait_until(lambda: worker.statistics().acked == 1)
    stats = worker.statistics()
    assert (stats.handler_errors, stats.timed_out, stats.lease_lost) == (1, 0, 0)


async def test_r5_a_trio_function_marked_asyncio_retries_with_an_error_naming_the_fix(
    autojump_clock, store
):
    queue = store.queue("q", QueueOpts(max_attempts=1))
    job_id = await queue.enqueue(b"x")

    @asyncio_handler
    async def handler(job):
        await trio.sleep(1)  # a trio function: not awaitable from asyncio

    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().dead_lettered == 1)
    job = await queue.get_job(job_id)
    assert job.last_error.startswith(
        "RuntimeError: a handler marked @asyncio_handler awaited something that is not "
        "asyncio (a trio function?): Task got bad yield"
    )
    assert "trio_asyncio.trio_as_aio" in job.last_error


# --- R6: a lost lease ---------------------------------------------------------------------


async def test_r15_cancel_reaches_an_asyncio_handler_at_once(autojump_clock, store):
    queue = store.queue("q", QueueOpts(visibility_timeout_s=30))
    job_id = await queue.enqueue(b"x")
    body = AsyncioRecorder(hang)
    worker = Worker(store, {queue: asyncio_handler(body)}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: body.starts)
        await trio.sleep(1)
        assert await queue.cancel(job_id)
        await wait_until(lambda: worker.statistics().in_flight == 0)
    # The cancel's announcement cancels the handler at once (not at the first refused
    # heartbeat, a third of the visibility timeout later); its cleanup runs, and the job
    # is recorded cancelled.
    assert body.cancelled == [(job_id, approx(1.0))]
    assert body.cleaned_up == [(job_id, approx(2.0))]
    stats = worker.statistics()
    assert (stats.acked, stats.retried, stats.released, stats.lease_lost) == (0, 0, 0, 0)
    assert stats.cancelled == 1
    assert await queue.get_job(job_id) is None


async def test_r6_heartbeats_keep_a_long_asyncio_handler_alive(autojump_clock, store):
    queue = store.queue("q", QueueOpts(visibility_timeout_s=3))
    job_id = await queue.enqueue(b"x")

    @asyncio_handler
    async def handler(job):
        await asyncio.sleep(20)

    worker = Worker(store, {queue: handler}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1)
    assert await queue.get_job(job_id) is None
    assert worker.statistics().lease_lost == 0


# --- R7: graceful stop --------------------------------------------------------------------


async def test_r7_stop_gives_asyncio_handlers_the_grace_then_releases_their_jobs(
    autojump_clock, store
):
    queue = store.queue("q")
    quick, slow = await queue.enqueue_many([b"quick", b"slow"])

    async def action(job):
        await asyncio.sleep(2 if job.payload == b"quick" else 100)

    body = AsyncioRecorder(action)
    worker = Worker(store, {queue: asyncio_handler(body)}, shutdown_grace_s=5)
    async with running(worker):
        await wait_until(lambda: len(body.starts) == 2)
        await trio.sleep(1)
    # Stopped at 1: the quick handler finished within the grace; the slow one got
    # asyncio.CancelledError when the grace ran out (1 + 5) and its job was released.
    assert await queue.get_job(quick) is None
    job = await queue.get_job(slow)
    assert (job.state, job.last_error) == ("pending", "worker stopped")
    assert body.cancelled == [(slow, approx(6.0))]
    assert worker.statistics().released == 1


async def test_r7_cancelling_run_keeps_the_asyncio_loop_running_for_the_grace(
    autojump_clock, store
):
    """trio-asyncio forwards an outside cancellation into the loop's block; the worker's
    shielded job actors and finalization still need the loop running, until they end."""
    queue = store.queue("q")
    quick, slow = await queue.enqueue_many([b"quick", b"slow"])

    async def action(job):
        await asyncio.sleep(2 if job.payload == b"quick" else 100)

    body = AsyncioRecorder(action)
    worker = Worker(store, {queue: asyncio_handler(body)}, shutdown_grace_s=5)
    with trio.move_on_after(1):
        await worker.run()
    assert now() == approx(7.0)  # the grace ran out at 6, the cleanup took 1 more
    assert await queue.get_job(quick) is None
    job = await queue.get_job(slow)
    assert (job.state, job.last_error) == ("pending", "worker stopped")
    assert body.cancelled == [(slow, approx(6.0))]
    assert body.cleaned_up == [(slow, approx(7.0))]


# --- R1: one loop per run, only if needed -------------------------------------------------


async def test_r1_the_loop_is_opened_once_per_worker_run_and_only_if_needed(autojump_clock, store):
    queue_a, queue_b, plain = store.queue("a"), store.queue("b"), store.queue("plain")
    await queue_a.enqueue_many([b"1", b"2"])
    await queue_b.enqueue_many([b"3", b"4"])
    await plain.enqueue(b"5")
    body_a, body_b = AsyncioRecorder(), AsyncioRecorder()
    trio_loops: list[object] = []

    async def trio_handler(job):
        trio_loops.append(trio_asyncio.current_loop.get())
        await trio.lowlevel.checkpoint()

    # Only trio handlers: no loop is opened.
    worker = Worker(store, {plain: trio_handler}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1)
    assert trio_loops == [None]

    # Two asyncio queues: every job of one run ran on the same loop, closed afterwards.
    worker = Worker(
        store,
        {queue_a: asyncio_handler(body_a), queue_b: asyncio_handler(body_b)},
        concurrency=1,
        poll_interval_s=1000,
    )
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 4)
    loops = body_a.loops + body_b.loops
    assert len(loops) == 4
    assert all(loop is loops[0] for loop in loops)
    assert loops[0].is_closed()

    # A second run opens a loop of its own.
    await queue_a.enqueue(b"6")
    worker = Worker(store, {queue_a: asyncio_handler(body_a)}, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == 1)
    assert body_a.loops[-1] is not loops[0]


async def test_r1_a_worker_inside_a_trio_asyncio_loop_uses_that_loop(autojump_clock, store):
    """Asyncio resources opened around the worker (on the caller's loop) serve the
    handlers, and stay usable after the worker stopped."""
    queue = store.queue("q")
    await queue.enqueue_many([b"1", b"2"])
    async with trio_asyncio.open_loop() as outer:
        limit = await trio_asyncio.aio_as_trio(_make_semaphore)()

        @asyncio_handler
        async def handler(job):
            async with limit:  # an asyncio primitive bound to the caller's loop
                assert asyncio.get_running_loop() is outer
                await asyncio.sleep(1)

        worker = Worker(store, {queue: handler}, poll_interval_s=1000)
        async with running(worker):
            await wait_until(lambda: worker.statistics().acked == 2)
        assert not outer.is_closed()
        assert worker.statistics().handler_errors == 0


async def _make_semaphore():
    limit = asyncio.Semaphore(1)
    async with limit:  # binds it to the running loop
        pass
    return limit


# --- what can be marked -------------------------------------------------------------------


class Mailer:
    """Handlers as methods, and a callable object whose ``__call__`` is marked."""

    def __init__(self):
        self.seen: list[tuple[str, bytes, asyncio.AbstractEventLoop]] = []

    @asyncio_handler
    async def send(self, job):
        await asyncio.sleep(0)
        self.seen.append(("method", job.payload, asyncio.get_running_loop()))

    @asyncio_handler
    async def __call__(self, job):
        await asyncio.sleep(0)
        self.seen.append(("marked-call", job.payload, asyncio.get_running_loop()))


class Counter:
    """A callable object with an async ``__call__``, marked as an instance."""

    def __init__(self, seen):
        self.seen = seen

    async def __call__(self, job):
        await asyncio.sleep(0)
        self.seen.append(("instance", job.payload, asyncio.get_running_loop()))


async def test_r5_partials_methods_and_callable_objects_can_be_asyncio_handlers(
    autojump_clock, store
):
    mailer = Mailer()

    async def with_label(label, job):
        await asyncio.sleep(0)
        mailer.seen.append((label, job.payload, asyncio.get_running_loop()))

    marked = asyncio_handler(with_label)
    handlers = {
        "partial": asyncio_handler(functools.partial(with_label, "partial")),
        # A partial of a marked handler: the worker still sees that it needs the loop.
        "partial-of-marked": functools.partial(marked, "partial-of-marked"),
        "method": mailer.send,
        "marked-call": mailer,
        "instance": asyncio_handler(Counter(mailer.seen)),
    }
    for name in handlers:
        await store.queue(name).enqueue(name.encode())
    assert _asyncio.needs_asyncio([handlers["partial-of-marked"]])
    worker = Worker(store, handlers, poll_interval_s=1000)
    async with running(worker):
        await wait_until(lambda: worker.statistics().acked == len(handlers))
    assert sorted((label, payload) for label, payload, _ in mailer.seen) == sorted(
        (name, name.encode()) for name in handlers
    )
    # All on the worker's one loop: each kind of handler was recognised as marked.
    loops = [loop for _, _, loop in mailer.seen]
    assert all(loop is loops[0] for loop in loops)


def sync_handler(job):
    pass


async def async_generator_handler(job):
    yield


class SyncCallable:
    def __call__(self, job):
        pass


@pytest.mark.parametrize(
    ("value", "described"),
    [
        (sync_handler, "the sync function 'sync_handler'"),
        (lambda job: None, "the sync function"),
        (functools.partial(sync_handler), "a partial"),
        (async_generator_handler, "the async generator function async_generator_handler"),
        (Counter, "the class Counter"),
        (SyncCallable(), "a SyncCallable"),
        ("handler", "a str"),
        (None, "a NoneType"),
    ],
)
def test_asyncio_handler_rejects_what_is_not_an_async_function(value, described):
    with pytest.raises(InvalidArgument, match=r"needs an async function \(async def") as info:
        asyncio_handler(value)
    assert described in str(info.value)


def test_marking_twice_returns_the_handler_unchanged():
    async def handler(job):
        pass

    once = asyncio_handler(handler)
    assert asyncio_handler(once) is once
    assert once.__name__ == "handler"
    assert once.__wrapped__ is handler


def test_asyncio_handler_names_the_extra_when_trio_asyncio_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "trio_asyncio", None)  # makes the import fail

    async def handler(job):
        pass

    with pytest.raises(ModuleNotFoundError, match=r"pip install 'alkstore-trio\[asyncio\]'"):
        asyncio_handler(handler)


async def test_a_marked_handler_awaited_from_trio_without_a_loop_opens_one(autojump_clock, store):
    """Tests can call a marked handler directly: with no trio-asyncio loop open, the call
    opens one for itself."""
    queue = store.queue("q")
    await queue.enqueue(b"x")
    handle = await queue.claim_one("test")
    body = AsyncioRecorder()
    assert trio_asyncio.current_loop.get() is None
    await asyncio_handler(body)(handle.job)
    assert [job_id for job_id, _, _ in body.starts] == [handle.id]
    assert body.loops[0].is_closed()


# --- the import order of trio_asyncio and psycopg -----------------------------------------


def test_names_imported_from_asyncio_before_trio_asyncio_are_rebound(monkeypatch):
    """A module that ran ``from asyncio import get_running_loop`` before trio_asyncio was
    imported holds the original, which finds no trio-asyncio loop; loading trio_asyncio
    through alkstore_trio rebinds it (and leaves everything else alone)."""
    import _asyncio as c_asyncio

    early = types.ModuleType("imported_before_trio_asyncio")
    early.get_running_loop = c_asyncio.get_running_loop
    early.get_event_loop = c_asyncio.get_event_loop
    early.unrelated = c_asyncio.get_running_loop  # another name: not ours to touch
    monkeypatch.setitem(sys.modules, early.__name__, early)

    _asyncio.import_trio_asyncio()
    assert early.get_running_loop is asyncio.get_running_loop is not c_asyncio.get_running_loop
    assert early.get_event_loop is asyncio.get_event_loop
    assert early.unrelated is c_asyncio.get_running_loop
    assert _asyncio.rebind_stale_asyncio_names() == []  # idempotent


IMPORT_ORDER_SCRIPT = textwrap.dedent(
    """
    import os
    import sys

    import psycopg  # imported first, on purpose

    import trio

    import alkstore_trio
    from alkstore_trio._runtime import _asyncio

    if sys.argv[1] == "no-repair":
        _asyncio.rebind_stale_asyncio_names = lambda: []

    DSN, SCHEMA = os.environ["ALKSTORE_TEST_DSN"], os.environ["ALKSTORE_TEST_SCHEMA"]


    @alkstore_trio.asyncio_handler
    async def query(job):
        # psycopg's own asyncio connection, as a user's asyncio code would use it.
        async with await psycopg.AsyncConnection.connect(
            DSN, application_name="alkstore_asyncio_order"
        ) as conn:
            cursor = await conn.execute("SELECT 41 + 1")
            assert (await cursor.fetchone())[0] == 42


    async def main():
        async with alkstore_trio.open_store(DSN, schema=SCHEMA, migrate="apply") as store:
            queue = store.queue("q", alkstore_trio.QueueOpts(max_attempts=1))
            job_id = await queue.enqueue(b"x")
            worker = alkstore_trio.Worker(store, {queue: query}, poll_interval_s=0.2)
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    await nursery.start(worker.run)
                    while worker.statistics().finished < 1:
                        await trio.sleep(0.02)
                    worker.stop()
            job = await queue.get_job(job_id)
            print("acked" if job is None else f"{job.state}: {job.last_error}")


    trio.run(main)
    """
)


@pytest.fixture
def pg_schema(pg_dsn):
    """A fresh schema name on the test server; dropped after the test."""
    psycopg = pytest.importorskip("psycopg")
    from psycopg import sql

    name = "t_asyncio_" + secrets.token_hex(5)
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.mark.parametrize("mode", ["repair", "no-repair"])
def test_psycopg_imported_before_trio_asyncio_still_works_in_asyncio_handlers(
    pg_dsn, pg_schema, tmp_path, mode
):
    """The failure mode is real: psycopg imported before trio_asyncio cannot connect from
    asyncio code under trio-asyncio ("no running event loop"); with the rebinding
    alkstore_trio does when it loads trio_asyncio, it can. (Should psycopg or
    trio-asyncio fix this upstream, the "no-repair" case fails: the rebinding can go.)"""
    script = tmp_path / "order.py"
    script.write_text(IMPORT_ORDER_SCRIPT, encoding="utf-8")
    env = {**os.environ, "ALKSTORE_TEST_DSN": pg_dsn, "ALKSTORE_TEST_SCHEMA": pg_schema}
    result = subprocess.run(
        [sys.executable, str(script), mode],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    if mode == "repair":
        assert result.stdout.strip() == "acked"
    else:
        assert result.stdout.strip() == "dead: RuntimeError: no running event loop"


# --- on PostgreSQL ------------------------------------------------------------------------


async def test_r5_r6_r7_asyncio_handlers_on_postgresql(pg_dsn, pg_schema):
    """The asyncio handlers on the PostgreSQL engine, with the real clock and tiny
    timeouts: asyncio sleeps and primitives, every outcome, heartbeats over a handler
    outliving its lease, a lost lease, and a release on stop."""
    async with open_store(pg_dsn, schema=pg_schema, migrate="apply", pool_size=4) as pg:
        queue = pg.queue("q", QueueOpts(visibility_timeout_s=0.6, max_attempts=3))
        seen: list[tuple[bytes, int]] = []
        cancelled: list[bytes] = []
        forever = {b"lost", b"hang"}
        running_now: set[bytes] = set()

        @asyncio_handler
        async def handler(job):
            seen.append((job.payload, job.attempts))
            running_now.add(job.payload)
            try:
                if job.payload == b"retry" and job.attempts == 1:
                    raise Retry(delay_s=0, error="once more")
                if job.payload == b"fail":
                    raise Fail("no")
                if job.payload == b"error":
                    raise KeyError("missing")
                if job.payload == b"slow":
                    await asyncio.sleep(1.5)  # outlives the lease: heartbeats keep it
                if job.payload in forever:
                    await asyncio.Event().wait()
                lock = asyncio.Lock()
                async with lock:
                    await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                cancelled.append(job.payload)
                raise
            finally:
                running_now.discard(job.payload)

        worker = Worker(pg, {queue: handler}, poll_interval_s=0.5, shutdown_grace_s=0.2)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                error = await queue.enqueue(b"error", max_attempts=1)
                ok, retry, fail, slow, lost = await queue.enqueue_many(
                    [b"ok", b"retry", b"fail", b"slow", b"lost"]
                )
                await wait_until(
                    lambda: (
                        (worker.statistics().acked, worker.statistics().dead_lettered) == (3, 2)
                    ),
                    step=0.05,
                )
                # A lost lease cancels the asyncio handler at the next heartbeat.
                await wait_until(lambda: b"lost" in running_now, step=0.05)
                assert await queue.ack_batch([lost]) == 1  # Q6: the claim is gone
                await wait_until(lambda: worker.statistics().lease_lost == 1, step=0.05)
                await wait_until(lambda: b"lost" in cancelled, step=0.05)
                # A handler still running at stop is cancelled after the grace and released.
                hang = await queue.enqueue(b"hang")
                await wait_until(lambda: b"hang" in running_now, step=0.05)
                worker.stop()
        for job_id in (ok, retry, slow):
            assert await queue.get_job(job_id) is None
        failed = await queue.get_job(fail)
        assert (failed.state, failed.last_error) == ("dead", "no")
        errored = await queue.get_job(error)
        assert (errored.state, errored.last_error) == ("dead", "KeyError: 'missing'")
        assert await queue.get_job(lost) is None  # cancelled: nothing else was tried on it
        released = await queue.get_job(hang)
        assert (released.state, released.attempts, released.last_error) == (
            "pending",
            0,  # Q19.8: the release gave the attempt back
            "worker stopped",
        )
        assert sorted(cancelled) == [b"hang", b"lost"]
        stats = worker.statistics()
        assert (stats.acked, stats.dead_lettered, stats.released, stats.lease_lost) == (3, 2, 1, 1)
        assert stats.in_flight == 0


def test_the_package_exports_the_asyncio_names():
    assert alkstore_trio.asyncio_handler is asyncio_handler
    assert issubclass(AsyncioCancelled, alkstore_trio.AlkstoreError)
