"""The in-memory engine's own mechanics: the engine actor (exactly-once under concurrent
tasks, cancellation, closing, failures), wake listeners, transactions and ``open_store``'s
own validation (Q2, Q3, Q10, Q11, Q12, decisions 4, 7 and 10).

The engine-agnostic behaviour of every rule lives in the conformance suite; these tests
reach into the in-memory engine where that is the point. Time is a ManualClock for rows
and trio's MockClock (``autojump_clock``) for timeouts: nothing sleeps for real.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import pytest
import trio
import trio.testing

from alkstore_trio import (
    AlkstoreError,
    EngineError,
    HandleConsumed,
    InvalidArgument,
    QueueOpts,
    StoreClosed,
    open_store,
)
from alkstore_trio._core import EnqueueSpec, _transitions
from alkstore_trio.engine import Claim, ForwardingEngine, MemoryEngine
from alkstore_trio.testing import ManualClock

T0 = datetime(2000, 1, 1, tzinfo=UTC)


class HookClock(ManualClock):
    """A ManualClock that runs queued callbacks when the engine actor reads it, i.e. in
    the middle of an operation, while its caller waits for the answer."""

    def __init__(self) -> None:
        super().__init__()
        self.hooks: list[Callable[[], None]] = []
        self.reads = 0

    def now(self) -> datetime:
        self.reads += 1
        if self.hooks:
            self.hooks.pop(0)()
        return super().now()


class SwitchClock:
    """A clock whose answer the test chooses: a datetime, or an exception to raise."""

    def __init__(self) -> None:
        self.answer: object = T0

    def now(self) -> datetime:
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer  # type: ignore[return-value]


@pytest.fixture
def clock() -> HookClock:
    return HookClock()


@pytest.fixture
async def store(clock):
    async with open_store("memory://", clock=clock, rng=random.Random(0)) as store:
        yield store


def spec(queue: str = "q", payload: bytes = b"p") -> EnqueueSpec:
    return EnqueueSpec(
        queue=queue,
        payload=payload,
        priority=0,
        delay_s=None,
        run_at=None,
        max_attempts=3,
        visibility_timeout_s=30.0,
        backoff_base_s=5.0,
        expires_in_s=None,
    )


def record_publishes(monkeypatch: pytest.MonkeyPatch, hub) -> list[set[str]]:
    """Record every wake an engine's wake hub publishes, still delivering it."""
    published: list[set[str]] = []
    real_publish = hub.publish

    def publish(queues):
        queues = set(queues)
        published.append(queues)
        real_publish(queues)

    monkeypatch.setattr(hub, "publish", publish)
    return published


def run_isolated(async_fn: Callable[[], object], timeout_s: float = 2.0) -> bool:
    """Run ``async_fn`` in its own ``trio.run`` (with an autojumping MockClock) on a
    daemon thread; return whether it finished within ``timeout_s`` of real time.

    A caller stuck in the engine's *shielded* wait for an answer cannot be cancelled, so
    a hang would hang the whole test run; on a thread it can only fail the test. The
    timeout is spent only when the code under test is broken.
    """
    errors: list[BaseException] = []

    def target() -> None:
        try:
            trio.run(async_fn, clock=trio.testing.MockClock(autojump_threshold=0))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True, name="isolated-trio-run")
    thread.start()
    thread.join(timeout_s)
    if errors:
        raise errors[0]
    return not thread.is_alive()


# -- Q3 exactly-once handout under concurrent tasks ---------------------------------------


async def test_q3_concurrent_claimers_hand_out_every_job_exactly_once(store):
    queue = store.queue("q")
    job_ids = await queue.enqueue_many([b"%d" % i for i in range(600)])
    handed: list[tuple[int, int, str]] = []

    async def claimer(index: int) -> None:
        worker = f"w{index}"
        size = 1 + index % 5
        while True:
            handles = await queue.claim_batch(worker, size)
            if not handles:
                return
            for handle in handles:
                handed.append((handle.id, handle.job.attempts, handle.job.claimed_by))
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        for index in range(12):
            nursery.start_soon(claimer, index)

    pairs = [(job_id, attempts) for job_id, attempts, _ in handed]
    assert len(pairs) == len(set(pairs)), "a (job id, attempts) pair was handed out twice"
    assert sorted(job_id for job_id, _, _ in handed) == job_ids
    assert {attempts for _, attempts, _ in handed} == {1}
    assert len({worker for _, _, worker in handed}) > 1, "the claimers really interleaved"
    for job_id, _, worker in handed[::50]:
        row = await queue.get_job(job_id)
        assert row.claimed_by == worker


async def test_q3_concurrent_claimers_with_enqueuers_hand_out_every_job_once(store):
    queue = store.queue("q")
    enqueued: list[int] = []
    handed: list[int] = []
    enqueuers_left = 4

    async def enqueuer(index: int) -> None:
        nonlocal enqueuers_left
        for i in range(60):
            enqueued.append(await queue.enqueue(b"%d-%d" % (index, i), priority=i % 3))
            if i % 7 == 0:
                enqueued.extend(await queue.enqueue_many([b"x", b"y"]))
        enqueuers_left -= 1

    async def claimer(index: int) -> None:
        while True:
            handle = await queue.claim_one(f"w{index}")
            if handle is not None:
                handed.append(handle.id)
                assert await handle.ack()
            elif enqueuers_left == 0:
                return
            else:
                await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        for index in range(4):
            nursery.start_soon(enqueuer, index)
        for index in range(8):
            nursery.start_soon(claimer, index)

    assert len(handed) == len(set(handed))
    assert sorted(handed) == sorted(enqueued)
    assert len(set(enqueued)) == len(enqueued)


async def test_q3_concurrent_reclaims_hand_each_id_attempt_pair_to_one_claimer(store, clock):
    queue = store.queue("q", QueueOpts(visibility_timeout_s=10, max_attempts=4))
    job_ids = await queue.enqueue_many([b"j"] * 120)
    handed: list[tuple[int, int]] = []

    async def claimer(index: int) -> None:
        while handles := await queue.claim_batch(f"w{index}", 1 + index % 3):
            handed.extend((handle.id, handle.job.attempts) for handle in handles)
            await trio.lowlevel.checkpoint()

    for _round in range(4):
        async with trio.open_nursery() as nursery:
            for index in range(9):
                nursery.start_soon(claimer, index)
        clock.advance(11)  # every lease lapses: the next round reclaims them all

    assert len(handed) == len(set(handed))
    for job_id in job_ids:
        assert sorted(a for i, a in handed if i == job_id) == [1, 2, 3, 4]
    # The fifth round: every row is at its budget, the pre-claim sweep dead-letters all.
    assert await queue.claim_batch("late", 1000) == []
    assert (await queue.get_job(job_ids[0])).state == "dead"


# -- Q3 a cancelled claim: all or nothing -------------------------------------------------


async def test_q3_claim_cancelled_before_it_is_sent_never_happened(store, clock):
    queue = store.queue("q")
    job_id = await queue.enqueue(b"x")
    reads = clock.reads
    with trio.CancelScope() as scope:
        scope.cancel()
        await queue.claim_one("w")
    assert scope.cancelled_caught
    assert clock.reads == reads, "the engine never ran the claim"
    row = await queue.get_job(job_id)
    assert (row.state, row.attempts) == ("pending", 0)
    handle = await queue.claim_one("w")
    assert handle is not None
    assert handle.id == job_id


async def test_q3_claim_cancelled_while_the_engine_works_fully_happened(store, clock):
    queue = store.queue("q")
    job_id = await queue.enqueue(b"x")
    handle = None
    with trio.CancelScope() as scope:
        # The cancellation arrives while the actor runs the claim (on its clock read).
        clock.hooks.append(scope.cancel)
        handle = await queue.claim_one("w")
    assert scope.cancel_called
    assert handle is not None, "the claim happened, so its handle must reach the caller"
    assert handle.id == job_id
    assert handle.job.attempts == 1
    row = await queue.get_job(job_id)
    assert (row.state, row.attempts, row.claimed_by) == ("processing", 1, "w")
    assert await handle.ack()


@pytest.mark.parametrize("yields_before_cancel", range(4))
async def test_q3_claim_cancelled_at_any_point_is_all_or_nothing(store, yields_before_cancel):
    queue = store.queue("q")
    job_ids = await queue.enqueue_many([b"a", b"b", b"c"])
    results: list[list[int]] = []

    async def claimer(scope: trio.CancelScope) -> None:
        with scope:
            handles = await queue.claim_batch("w", 2)
            results.append([h.id for h in handles])

    async def canceller(scope: trio.CancelScope) -> None:
        for _ in range(yields_before_cancel):
            await trio.lowlevel.checkpoint()
        scope.cancel()

    for _ in range(5):
        scope = trio.CancelScope()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(claimer, scope)
            nursery.start_soon(canceller, scope)

    handed = [job_id for batch in results for job_id in batch]
    assert len(handed) == len(set(handed))
    for job_id in job_ids:
        row = await queue.get_job(job_id)
        if job_id in handed:
            assert (row.state, row.attempts) == ("processing", 1)
        else:
            assert (row.state, row.attempts) == ("pending", 0), "claimed but handle lost"


async def test_q4_ack_cancelled_while_the_engine_works_fully_happened(store, clock):
    queue = store.queue("q")
    job_id = await queue.enqueue(b"x")
    handle = await queue.claim_one("w")
    result = None
    with trio.CancelScope() as scope:
        clock.hooks.append(scope.cancel)
        result = await handle.ack()
    assert result is True
    assert await queue.get_job(job_id) is None
    with pytest.raises(HandleConsumed):
        await handle.ack()


@pytest.mark.parametrize("operation", ["retry_handles", "fail_handles"])
async def test_r2_batch_finish_cancelled_while_the_engine_works_fully_happened(
    store, clock, operation
):
    queue = store.queue("q", QueueOpts(max_attempts=1))
    ids = await queue.enqueue_many([b"a", b"b"])
    handles = await queue.claim_batch("w", 2)
    calls = {
        "retry_handles": lambda: queue.retry_handles([(h, "boom", 0) for h in handles]),
        "fail_handles": lambda: queue.fail_handles([(h, "boom") for h in handles]),
    }
    result = None
    with trio.CancelScope() as scope:
        clock.hooks.append(scope.cancel)
        result = await calls[operation]()
    assert result == [True, True]
    for job_id in ids:
        row = await queue.get_job(job_id)
        assert (row.state, row.last_error) == ("dead", "boom")
    for handle in handles:
        with pytest.raises(HandleConsumed):
            await handle.ack()


@pytest.mark.parametrize("operation", ["retry_handles", "fail_handles"])
async def test_r2_batch_finish_cancelled_before_it_is_sent_never_happened(store, operation):
    """Cancelled before the request reaches the engine: nothing happened, and the handles
    stay usable (the call can be repeated)."""
    queue = store.queue("q")
    await queue.enqueue_many([b"a", b"b"])
    handles = await queue.claim_batch("w", 2)
    calls = {
        "retry_handles": lambda: queue.retry_handles([(h, None, None) for h in handles]),
        "fail_handles": lambda: queue.fail_handles([(h, None) for h in handles]),
    }
    with trio.CancelScope() as scope:
        scope.cancel()
        await calls[operation]()
    assert scope.cancelled_caught
    for handle in handles:
        row = await queue.get_job(handle.id)
        assert (row.state, row.attempts) == ("processing", 1)
    assert await calls[operation]() == [True, True]


# -- Q11 closing with requests in flight --------------------------------------------------


def test_q11_store_closed_while_requests_are_pending_answers_them():
    """aclose() lands while requests wait in the engine's inbox: each caller gets its
    answer or StoreClosed, none hangs, and later calls raise StoreClosed."""
    outcomes: list[object] = []
    late: list[BaseException] = []

    async def scenario() -> None:
        clock = HookClock()
        async with (
            trio.open_nursery() as outer,
            open_store("memory://", clock=clock) as store,
        ):
            queue = store.queue("q")

            async def caller() -> None:
                try:
                    outcomes.append(await queue.enqueue(b"x"))
                except StoreClosed:
                    outcomes.append("closed")

            # While the actor works on the first request, the store is being closed; the
            # other four requests are already queued behind it.
            clock.hooks.append(lambda: outer.start_soon(store.aclose))
            for _ in range(5):
                outer.start_soon(caller)
            await trio.testing.wait_all_tasks_blocked()
            try:
                await queue.enqueue(b"late")
            except StoreClosed as exc:
                late.append(exc)

    assert run_isolated(scenario), f"a caller hung after the store closed: {outcomes}"
    assert len(outcomes) == 5
    assert all(o == "closed" or isinstance(o, int) for o in outcomes)
    assert len(late) == 1


def test_q11_store_cancelled_with_requests_queued_answers_store_closed_not_hang():
    """The store's scope is cancelled while a second request waits in the engine's inbox.
    The caller of that request is in a shielded wait: it must hear StoreClosed (or get
    its answer); it must not wait forever."""
    outcomes: dict[int, object] = {}

    async def scenario() -> None:
        clock = HookClock()
        async with trio.open_nursery() as outer:
            with trio.CancelScope() as store_scope:
                async with open_store("memory://", clock=clock) as store:
                    queue = store.queue("q")

                    async def caller(index: int) -> None:
                        try:
                            outcomes[index] = await queue.enqueue(b"x")
                        except StoreClosed as exc:
                            outcomes[index] = exc

                    # The actor reads the clock for the first request and, at that very
                    # moment, the store's scope is cancelled; the second request is
                    # already queued behind the first.
                    clock.hooks.append(store_scope.cancel)
                    outer.start_soon(caller, 1)
                    outer.start_soon(caller, 2)
                    await trio.sleep_forever()

    finished = run_isolated(scenario)
    assert finished, f"a caller hung in the engine after the store was cancelled: {outcomes}"
    assert set(outcomes) == {1, 2}
    assert all(isinstance(o, int | StoreClosed) for o in outcomes.values())


async def test_q11_engine_after_close_raises_store_closed():
    backend = MemoryEngine(ManualClock())
    async with backend.open():
        assert await backend.enqueue([spec()]) == [1]
        await backend.aclose()
        await backend.aclose()  # closing twice is harmless
        with pytest.raises(StoreClosed):
            await backend.claim("q", "w", 1)
        with pytest.raises(StoreClosed):
            await backend.enqueue([spec()])
        with pytest.raises(StoreClosed):
            await backend.get_job("q", 1)
        with pytest.raises(StoreClosed):
            backend.open_wake_listener(frozenset({"q"}))
        with pytest.raises(StoreClosed):
            async with backend.transaction():
                pass


async def test_q11_transaction_open_when_the_store_closes_commits_nothing(clock):
    async with open_store("memory://", clock=clock) as store:
        queue = store.queue("q")
        txs = []

        async def close_inside_the_block() -> None:
            async with store.transaction() as tx:
                txs.append(tx)
                await tx.enqueue(queue, b"x")
                await store.aclose()

        with pytest.raises(StoreClosed):
            await close_inside_the_block()
        with pytest.raises(StoreClosed):
            await txs[0].enqueue(queue, b"y")


# -- Q12 engine failures -------------------------------------------------------------------


async def test_q12_naive_clock_is_an_engine_error_and_nothing_happens():
    clock = SwitchClock()
    clock.answer = datetime(2000, 1, 1)  # naive
    async with open_store("memory://", clock=clock) as store:
        queue = store.queue("q")
        with pytest.raises(EngineError, match="naive") as excinfo:
            await queue.enqueue(b"x")
        assert isinstance(excinfo.value, AlkstoreError)
        assert "clock" in str(excinfo.value)
        with pytest.raises(EngineError, match="naive"):
            await queue.claim_one("w")
        # The actor keeps serving once the clock behaves; the failed enqueue left nothing.
        clock.answer = T0
        assert await queue.claim_one("w") is None
        job_id = await queue.enqueue(b"y")
        assert job_id == 1
        assert (await queue.get_job(job_id)).payload == b"y"


@pytest.mark.parametrize(
    "failure",
    [RuntimeError("clock broke"), OSError(5, "clock device gone"), ZeroDivisionError()],
)
async def test_q12_a_clock_that_raises_is_an_engine_error_with_cause(failure):
    clock = SwitchClock()
    async with open_store("memory://", clock=clock) as store:
        queue = store.queue("q")
        job_id = await queue.enqueue(b"x")
        clock.answer = failure
        with pytest.raises(EngineError) as excinfo:
            await queue.claim_one("w")
        assert excinfo.value.__cause__ is failure
        assert type(failure).__name__ in str(excinfo.value)
        clock.answer = T0
        handle = await queue.claim_one("w")
        assert handle is not None
        assert handle.id == job_id
        assert handle.job.attempts == 1, "the failed claim consumed no attempt"


async def test_q12_a_clock_returning_a_non_datetime_is_an_engine_error():
    clock = SwitchClock()
    clock.answer = 946684800.0
    async with open_store("memory://", clock=clock) as store:
        with pytest.raises(EngineError) as excinfo:
            await store.queue("q").enqueue(b"x")
        assert excinfo.value.__cause__ is not None


async def test_q12_an_unexpected_exception_in_a_transition_is_an_engine_error(store, monkeypatch):
    queue = store.queue("q")
    job_id = await queue.enqueue(b"x")
    table = store._engine._table
    boom = LookupError("table exploded")

    def broken(*args, **kwargs):
        raise boom

    monkeypatch.setattr(table, "claim", broken)
    with pytest.raises(EngineError) as excinfo:
        await queue.claim_one("w")
    assert excinfo.value.__cause__ is boom
    assert "LookupError" in str(excinfo.value)
    monkeypatch.undo()
    # The actor survived and keeps serving requests, in order.
    handle = await queue.claim_one("w")
    assert handle is not None
    assert handle.id == job_id
    assert await handle.ack()
    assert await queue.enqueue(b"y") == job_id + 1


async def test_q12_engine_error_in_one_task_does_not_disturb_others(store, monkeypatch):
    queue = store.queue("q")
    await queue.enqueue_many([b"a"] * 20)
    table = store._engine._table
    real_get = table.get
    calls = 0

    def flaky_get(queue_name, job_id):
        nonlocal calls
        calls += 1
        if calls % 2:
            raise RuntimeError("flaky")
        return real_get(queue_name, job_id)

    monkeypatch.setattr(table, "get", flaky_get)
    errors = 0
    claimed: list[int] = []

    async def reader() -> None:
        nonlocal errors
        for job_id in range(1, 11):
            try:
                await queue.get_job(job_id)
            except EngineError:
                errors += 1

    async def claimer() -> None:
        while handle := await queue.claim_one("w"):
            claimed.append(handle.id)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        nursery.start_soon(claimer)
    assert errors == 5
    assert sorted(claimed) == list(range(1, 21))


async def test_q3_engine_error_during_a_claim_does_not_strand_the_job(store, monkeypatch):
    """EngineError means "may or may not have taken effect; safe to repeat". Repeating a
    claim after a failed one must find the job again: a pending row that no claim can
    ever hand out is a stranded job."""
    queue = store.queue("q")
    job_id = await queue.enqueue(b"x")

    def broken(job, worker_id, now):
        raise RuntimeError("transition failed")

    with monkeypatch.context() as patch:
        patch.setattr(_transitions, "claimed", broken)
        with pytest.raises(EngineError):
            await queue.claim_one("w")
    assert (await queue.get_job(job_id)).state == "pending"
    handle = await queue.claim_one("w")
    assert handle is not None, "the job is pending but no claim will ever return it"
    assert handle.id == job_id


# -- one clock read per operation; every call is a checkpoint ------------------------------


async def test_q2_q3_one_clock_read_per_operation(store, clock):
    queue = store.queue("q")
    reads = clock.reads
    ids = await queue.enqueue_many([b"a", b"b", b"c", b"d"])
    assert clock.reads == reads + 1
    handles = await queue.claim_batch("w", 4)
    assert clock.reads == reads + 2
    assert await queue.ack_batch([h.id for h in handles[:2]]) == 2
    assert clock.reads == reads + 3
    assert await handles[2].ack()
    await queue.sweep_expired()
    assert clock.reads == reads + 5
    # Bad input is refused before the engine is asked anything.
    with pytest.raises(InvalidArgument):
        await queue.enqueue_many([b"ok", "bad"])
    with pytest.raises(InvalidArgument):
        await queue.claim_batch("", 1)
    assert await queue.claim_batch("w", 0) == []
    assert clock.reads == reads + 5
    assert ids == [1, 2, 3, 4]


async def test_r2_retry_and_fail_handles_are_one_clock_read_each(store, clock):
    queue = store.queue("q")
    await queue.enqueue_many([b"a", b"b", b"c", b"d"])
    handles = await queue.claim_batch("w", 4)
    reads = clock.reads
    retries = [(h, "boom", 0) for h in handles[:2]]
    assert await queue.retry_handles(retries) == [True, True]
    assert clock.reads == reads + 1
    assert await queue.fail_handles([(h, None) for h in handles[2:]]) == [True, True]
    assert clock.reads == reads + 2
    # Empty and rejected batches are refused before the engine is asked anything.
    assert await queue.retry_handles([]) == []
    assert await queue.fail_handles([]) == []
    with pytest.raises(HandleConsumed):
        await queue.retry_handles(retries)
    with pytest.raises(InvalidArgument):
        await queue.fail_handles([5])  # type: ignore[list-item]
    assert clock.reads == reads + 2


@pytest.mark.parametrize(
    "operation",
    [
        "enqueue",
        "claim_one",
        "get_job",
        "cancel",
        "ack_batch",
        "sweep_expired",
        "retry_handles([])",
        "fail_handles([])",
    ],
)
async def test_q3_engine_operations_are_checkpoints(store, operation):
    queue = store.queue("q")
    calls = {
        "enqueue": lambda: queue.enqueue(b"x"),
        "claim_one": lambda: queue.claim_one("w"),
        "get_job": lambda: queue.get_job(1),
        "cancel": lambda: queue.cancel(1),
        "ack_batch": lambda: queue.ack_batch([1]),
        "sweep_expired": lambda: queue.sweep_expired(),
        "retry_handles([])": lambda: queue.retry_handles([]),
        "fail_handles([])": lambda: queue.fail_handles([]),
    }
    with trio.testing.assert_checkpoints():
        await calls[operation]()


# -- wakes (decision 10) -------------------------------------------------------------------


async def test_q2_wake_published_while_not_waiting_is_returned_by_the_next_wait(store):
    queue = store.queue("q")
    async with store.open_wake_listener([queue]) as listener:
        await queue.enqueue(b"x")
        await queue.enqueue(b"y")
        with trio.testing.assert_checkpoints():
            assert await listener.wait(0) == frozenset({"q"})
        assert await listener.wait(0) == frozenset(), "a wake is delivered once"


async def test_q2_wake_wait_times_out_with_an_empty_set(store, autojump_clock):
    async with store.open_wake_listener(["q"]) as listener:
        start = trio.current_time()
        assert await listener.wait(30) == frozenset()
        assert trio.current_time() - start == pytest.approx(30)


async def test_q2_wake_wakes_a_waiting_listener_and_the_row_is_there(store, autojump_clock):
    queue = store.queue("q")
    woken: list[frozenset[str]] = []
    claimed: list[int] = []

    async with store.open_wake_listener(["q"]) as listener:

        async def waiter() -> None:
            woken.append(await listener.wait())
            handle = await queue.claim_one("w")
            claimed.append(handle.id)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            assert woken == []
            job_id = await queue.enqueue(b"x")
    assert woken == [frozenset({"q"})]
    assert claimed == [job_id]


async def test_q2_wakes_accumulate_per_queue_and_only_for_subscribed_queues(store):
    a, b, c = store.queue("a"), store.queue("b"), store.queue("c")
    async with (
        store.open_wake_listener(["a", b]) as ab,
        store.open_wake_listener(["b"]) as only_b,
    ):
        assert ab.queues == frozenset({"a", "b"})
        await c.enqueue(b"x")
        assert await ab.wait(0) == frozenset()
        await a.enqueue(b"x")
        await b.enqueue_many([b"1", b"2"])
        assert await ab.wait(0) == frozenset({"a", "b"})
        assert await only_b.wait(0) == frozenset({"b"}), "every listener gets the wake"
    assert store._engine.wakes.subscribed_queues() == frozenset(), "unsubscribed on exit"


async def test_q2_enqueue_many_publishes_one_wake(store, monkeypatch):
    published = record_publishes(monkeypatch, store._engine.wakes)
    queue = store.queue("q")
    await queue.enqueue_many([b"1", b"2", b"3"])
    assert published == [{"q"}]
    await queue.enqueue_many([])
    assert published == [{"q"}], "an empty batch wakes nobody (decision 6)"


async def test_q11_listener_wait_after_close_raises_store_closed(store):
    async with store.open_wake_listener(["q"]) as listener:
        await store.queue("q").enqueue(b"x")
        await store.aclose()
        with pytest.raises(StoreClosed):
            await listener.wait(0)
        with pytest.raises(StoreClosed):
            await listener.wait()


async def test_q11_waiting_listener_is_woken_by_close_with_store_closed(store):
    outcome: list[BaseException] = []
    async with store.open_wake_listener(["q"]) as listener:

        async def waiter() -> None:
            try:
                await listener.wait()
            except StoreClosed as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            await store.aclose()
    assert len(outcome) == 1
    assert isinstance(outcome[0], StoreClosed)


async def test_q11_open_wake_listener_after_close_raises_store_closed(store):
    await store.aclose()
    with pytest.raises(StoreClosed):
        store.open_wake_listener(["q"])


async def test_decision_4_closed_listener_reports_store_closed_before_a_bad_timeout(store):
    """Decision 4: store closed → handle consumed → arguments."""
    async with store.open_wake_listener(["q"]) as listener:
        await store.aclose()
        with pytest.raises(StoreClosed):
            await listener.wait(-1)


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), True, "1"])
async def test_q12_listener_wait_rejects_a_bad_timeout(store, bad):
    async with store.open_wake_listener(["q"]) as listener:
        with pytest.raises(InvalidArgument, match="timeout_s"):
            await listener.wait(bad)


async def test_q12_open_wake_listener_with_a_bare_str_is_not_split_into_letters(store):
    """``open_wake_listener("emails")`` must either listen to the queue "emails" or be
    refused (as ``enqueue_many`` and ``ack_batch`` refuse a bare str/bytes); silently
    subscribing to the one-letter queues e, m, a, i, l, s loses every wake of "emails"."""
    try:
        manager = store.open_wake_listener("emails")
    except InvalidArgument:
        return
    async with manager as listener:
        assert listener.queues == frozenset({"emails"})
        await store.queue("emails").enqueue(b"x")
        assert await listener.wait(0) == frozenset({"emails"})


async def test_q12_open_wake_listener_validates_queue_names(store):
    with pytest.raises(InvalidArgument, match="queue"):
        store.open_wake_listener([])
    with pytest.raises(InvalidArgument, match="queue name"):
        store.open_wake_listener(["bad name"])


# -- Q10 transactions (decision 7) ---------------------------------------------------------


async def test_q10_ids_are_reserved_at_enqueue_and_rows_appear_at_commit(store):
    queue = store.queue("q")
    async with store.transaction() as tx:
        first = await tx.enqueue(queue, b"a")
        second = await tx.enqueue("q", b"b")
        assert (first, second) == (1, 2)
        outside = await queue.enqueue(b"outside")
        assert outside == 3
        assert await queue.get_job(first) is None, "invisible before commit"
        assert [h.id for h in await queue.claim_batch("w", 10)] == [outside]
    assert (await queue.get_job(first)).payload == b"a"
    assert (await queue.get_job(second)).payload == b"b"


async def test_q10_rows_are_resolved_with_the_commit_clock_read(store, clock):
    queue = store.queue("q", QueueOpts(expires_in_s=1000))
    async with store.transaction() as tx:
        job_id = await tx.enqueue(queue, b"a", delay_s=10)
        clock.advance(100)
    row = await queue.get_job(job_id)
    assert row.enqueued_at == T0 + timedelta(seconds=100)
    assert row.run_at == T0 + timedelta(seconds=110)
    assert row.expires_at == T0 + timedelta(seconds=1100)


async def test_q10_rollback_leaves_no_rows_no_wake_and_burns_the_ids(store):
    queue = store.queue("q")
    async with store.open_wake_listener(["q"]) as listener:
        reserved: list[int] = []

        async def abort_inside_the_block() -> None:
            async with store.transaction() as tx:
                reserved.append(await tx.enqueue(queue, b"a"))
                reserved.append(await tx.enqueue(queue, b"b"))
                raise KeyError("abort")

        with pytest.raises(KeyError):
            await abort_inside_the_block()
        for job_id in reserved:
            assert await queue.get_job(job_id) is None
        assert await queue.claim_one("w") is None
        assert await listener.wait(0) == frozenset(), "no wake for a rollback"
    assert await queue.enqueue(b"next") > max(reserved), "ids of a rollback are never used"


async def test_q10_cancellation_inside_the_block_rolls_back(store):
    queue = store.queue("q")
    with trio.CancelScope() as scope:
        async with store.transaction() as tx:
            await tx.enqueue(queue, b"a")
            scope.cancel()
            await trio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    assert await queue.claim_one("w") is None


async def test_q10_commit_wakes_each_touched_queue_once(store, monkeypatch):
    published = record_publishes(monkeypatch, store._engine.wakes)
    a, b = store.queue("a"), store.queue("b")
    async with store.open_wake_listener(["a", "b", "c"]) as listener:
        async with store.transaction() as tx:
            await tx.enqueue(a, b"1")
            await tx.enqueue(b, b"2")
            await tx.enqueue("a", b"3")
            await tx.enqueue(a, b"4")
            assert published == [], "no wake before the commit"
            assert await listener.wait(0) == frozenset()
        assert published == [{"a", "b"}]
        assert await listener.wait(0) == frozenset({"a", "b"})


async def test_q10_empty_transaction_wakes_nobody(store, monkeypatch, clock):
    published: list[object] = []
    monkeypatch.setattr(store._engine.wakes, "publish", published.append)
    reads = clock.reads
    async with store.transaction():
        pass
    assert published == []
    assert clock.reads == reads


async def test_q10_transaction_used_after_the_block_raises_handle_consumed(store):
    queue = store.queue("q")
    async with store.transaction() as committed:
        await committed.enqueue(queue, b"a")
    with pytest.raises(HandleConsumed):
        await committed.enqueue(queue, b"b")
    with pytest.raises(ValueError, match="x"):
        async with store.transaction() as rolled_back:
            raise ValueError("x")
    with pytest.raises(HandleConsumed):
        await rolled_back.enqueue(queue, b"c")
    assert [h.id for h in await queue.claim_batch("w", 10)] == [1]


async def test_q10_bad_input_inside_a_transaction_buffers_nothing(store):
    queue = store.queue("q")
    async with store.transaction() as tx:
        with pytest.raises(InvalidArgument):
            await tx.enqueue(queue, "not bytes")
        with pytest.raises(InvalidArgument):
            await tx.enqueue("bad name", b"x")
        job_id = await tx.enqueue(queue, b"ok")
    assert job_id == 1
    assert [h.id for h in await queue.claim_batch("w", 10)] == [1]


async def test_q10_queue_handle_of_another_store_is_invalid(store, clock):
    async with open_store("memory://", clock=clock) as other:
        foreign = other.queue("q")
        async with store.transaction() as tx:
            with pytest.raises(InvalidArgument, match="another store"):
                await tx.enqueue(foreign, b"x")


async def test_q10_engine_transaction_commits_atomically(monkeypatch):
    backend = MemoryEngine(ManualClock())
    async with backend.open():
        published = record_publishes(monkeypatch, backend.wakes)
        async with backend.transaction() as tx:
            assert await tx.enqueue([spec("a"), spec("b")]) == [1, 2]
            assert await tx.enqueue([spec("a")]) == [3]
        assert published == [{"a", "b"}]
        assert [(await backend.get_job(i, q)).id for q, i in (("a", 1), ("b", 2), ("a", 3))] == [
            1,
            2,
            3,
        ]
        with pytest.raises(HandleConsumed):
            await tx.enqueue([spec()])


# -- open_store validation -----------------------------------------------------------------

DSN = "postgresql://u:secret@h/db"


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("u:secret@h/db", id="no-scheme"),
        pytest.param("", id="empty"),
        pytest.param("memory:", id="no-slashes"),
        pytest.param("sqlite:///tmp/secret.db", id="unknown-engine"),
    ],
)
async def test_q12_open_store_rejects_bad_urls_without_printing_passwords(url):
    with pytest.raises(InvalidArgument, match="url") as excinfo:
        async with open_store(url):
            pytest.fail("the store must not open")
    message = str(excinfo.value)
    assert "secret" not in message
    if "secret" in url:
        assert url not in message
    assert excinfo.value.__cause__ is None or "secret" not in str(excinfo.value.__cause__)


@pytest.mark.parametrize(
    "url",
    [
        pytest.param(DSN, id="postgres-dsn-with-password"),
        pytest.param("postgres://admin:hunter2secret@db:5432/jobs", id="postgres-scheme"),
        pytest.param("host=h password=secret", id="keyword-dsn"),
    ],
)
async def test_q12_unreachable_postgres_fails_without_printing_passwords(url):
    """PostgreSQL URLs reach the PostgreSQL engine; the hosts here do not resolve, and no
    message in the whole exception chain shows the password."""
    with pytest.raises(AlkstoreError) as excinfo:
        async with open_store(url, connect_timeout_s=2):
            pytest.fail("the store must not open")
    exc: BaseException | None = excinfo.value
    while exc is not None:
        assert "secret" not in str(exc)
        exc = exc.__cause__ or exc.__context__


@pytest.mark.parametrize("url", [None, b"memory://", 5, ["memory://"]])
async def test_q12_open_store_url_must_be_a_str(url):
    with pytest.raises(InvalidArgument, match="url"):
        async with open_store(url):
            pytest.fail("the store must not open")


@pytest.mark.parametrize("rng", [42, random, object(), "seed", random.random])
async def test_q12_open_store_rejects_a_bad_rng(rng):
    with pytest.raises(InvalidArgument, match="rng"):
        async with open_store("memory://", rng=rng):
            pytest.fail("the store must not open")


@pytest.mark.parametrize("rng", [random.Random(1), random.SystemRandom()])
async def test_q12_open_store_accepts_random_instances(rng):
    async with open_store("memory://", rng=rng, clock=ManualClock()) as store:
        assert await store.queue("q").enqueue(b"x") == 1


class _NowIsNotCallable:
    now = T0


@pytest.mark.parametrize("bad_clock", [object(), 5, _NowIsNotCallable(), "2000-01-01"])
async def test_q12_open_store_rejects_a_bad_clock(bad_clock):
    with pytest.raises(InvalidArgument, match="clock"):
        async with open_store("memory://", clock=bad_clock):
            pytest.fail("the store must not open")


@pytest.mark.parametrize("bad", [-1, True, 1.5, "1024", None, 2**30 + 1, 2**64])
async def test_q12_open_store_rejects_a_bad_max_payload_bytes(bad):
    with pytest.raises(InvalidArgument, match="max_payload_bytes"):
        async with open_store("memory://", max_payload_bytes=bad):
            pytest.fail("the store must not open")


async def test_q2_open_store_max_payload_bytes_is_enforced_at_the_boundary():
    async with open_store("memory://", clock=ManualClock(), max_payload_bytes=10) as store:
        queue = store.queue("q")
        assert await queue.enqueue(b"x" * 10) == 1
        with pytest.raises(InvalidArgument, match="payload"):
            await queue.enqueue(b"x" * 11)
        with pytest.raises(InvalidArgument, match="payload"):
            await queue.enqueue_many([b"ok", bytearray(11)])
        assert await queue.claim_batch("w", 10) != []
        assert await queue.get_job(2) is None, "nothing of the bad batch was written"


async def test_q2_open_store_zero_max_payload_bytes_allows_only_empty_payloads():
    async with open_store("memory://", clock=ManualClock(), max_payload_bytes=0) as store:
        queue = store.queue("q")
        assert await queue.enqueue(b"") == 1
        with pytest.raises(InvalidArgument):
            await queue.enqueue(b"x")


async def test_q19_5_failed_settle_cancelled_leaves_an_already_consumed_handle_consumed():
    """settle_cancelled accepts handles an ack already consumed; when the engine fails
    it, each handle goes back to what it was before: that one stays consumed."""

    class FailingSettle(ForwardingEngine):
        async def settle_cancelled(self, queue: str, claims: Sequence[Claim]) -> list[int]:
            raise EngineError("settle failed")

    async with open_store(FailingSettle(MemoryEngine(ManualClock()))) as store:
        queue = store.queue("q")
        await queue.enqueue_many([b"a", b"b"])
        acked, fresh = await queue.claim_batch("w", 2)
        assert await acked.ack()
        with pytest.raises(EngineError):
            await queue.settle_cancelled([acked, fresh])
        with pytest.raises(HandleConsumed):
            await acked.ack()
        assert await fresh.ack()
