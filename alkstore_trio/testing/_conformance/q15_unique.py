"""Q15: unique jobs. At most one live job per (queue, unique key); an enqueue whose key is
held creates nothing and returns the holder's id with ``created=False``; windows; keys in
transactions and redrives."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

import trio
import trio.testing

from ... import Enqueued, InvalidArgument, Queue, QueueOpts
from ._helpers import _any, _assert_state, _check, _claim_id, _dead_job, _get, _raises

if TYPE_CHECKING:
    from ... import Store
    from .._harness import EngineHarness

#: A key with characters an engine could mangle, and one made of private data.
_KEY: Final = "welcome-mail:user-42:Zürich ✓ '); --"
_SECRET_KEY: Final = "s3cret-token"


def _assert_result(result: object, job_id: int, created: bool, what: str) -> None:
    assert isinstance(result, Enqueued), (
        f"{what}: enqueue returned a {type(result).__name__}, expected Enqueued"
    )
    assert (int(result), result.created) == (job_id, created), (
        f"{what}: enqueue returned (id, created) = ({int(result)}, {result.created}), "
        f"expected ({job_id}, {created})"
    )


async def _live_count(store: Store, queue: Queue) -> int:
    stats = (await store.stats(queue)).queue(queue.name)
    return 0 if stats is None else stats.live


@_check
async def q15_a_held_key_creates_nothing_and_returns_the_live_job(
    harness: EngineHarness,
) -> None:
    """Q15.1/Q15.2: the first enqueue of a key creates the job (``created=True``, the key
    shown as ``Job.unique_key`` and left out of ``repr``); every later one while it is
    live creates nothing, issues no id and returns its id with ``created=False``, from
    another handle too. Keys are per queue; keyless enqueues are untouched."""
    async with harness.open_store() as store:
        queue = store.queue("unique")
        first = await queue.enqueue(b"first", unique_key=_KEY)
        _assert_result(first, int(first), True, "the first enqueue of the key")
        assert first == int(first), "Enqueued does not equal its id"
        assert hash(first) == hash(int(first)), "Enqueued does not hash as its id"
        job = await _get(queue, first)
        assert job.unique_key == _KEY, f"Job.unique_key is {job.unique_key!r}, not the key"
        assert _KEY not in repr(job), f"repr(Job) shows the unique key: {job!r}"
        issued = (await store.stats()).ids_issued
        again = await queue.enqueue(b"again", unique_key=_KEY, priority=5)
        _assert_result(again, first, False, "an enqueue of a held key")
        other_handle = store.queue("unique", QueueOpts(max_attempts=9))
        _assert_result(await other_handle.enqueue(b"x", unique_key=_KEY), first, False, "handle")
        assert (await store.stats()).ids_issued == issued, "a refused enqueue issued an id"
        assert await _live_count(store, queue) == 1, "a refused enqueue created a row"
        assert (await _get(queue, first)).payload == b"first", "a refused enqueue changed the job"
        elsewhere = await store.queue("unique-other").enqueue(b"y", unique_key=_KEY)
        assert elsewhere.created, "a key held in one queue refused an enqueue in another"
        plain = await queue.enqueue(b"plain")
        _assert_result(plain, int(plain), True, "a keyless enqueue")
        assert (await _get(queue, plain)).unique_key is None, "a keyless job shows a key"


@_check
async def q15_the_key_frees_when_its_job_is_acked_cancelled_or_dead(
    harness: EngineHarness,
) -> None:
    """Q15.3: a claim, a heartbeat and a retry back to pending keep the key (the job is
    still live); an ack, a cancel, a fail and the expiry sweep free it, and the next
    enqueue of the key creates a new job."""
    async with harness.open_store() as store:
        queue = store.queue("unique-frees", QueueOpts(expires_in_s=100))
        job_id: int = await queue.enqueue(b"a", unique_key="k")
        handle = await _claim_id(queue, job_id)
        assert await handle.heartbeat() is True, "heartbeat was refused"
        _assert_result(await queue.enqueue(b"b", unique_key="k"), job_id, False, "processing")
        assert await handle.retry("again", delay_s=0) is True, "retry was refused"
        _assert_result(await queue.enqueue(b"b", unique_key="k"), job_id, False, "retried")
        for what in ("ack", "fail"):
            handle = await _claim_id(queue, job_id)
            settled = await (handle.ack() if what == "ack" else handle.fail("boom"))
            assert settled is True, f"{what} was refused"
            new = await queue.enqueue(b"next", unique_key="k")
            assert new.created, f"the key stayed held after {what}"
            job_id = new
        assert await queue.cancel(job_id) is True, "cancel was refused"
        new = await queue.enqueue(b"next", unique_key="k")
        assert new.created, "the key stayed held after a cancel"
        await harness.advance(101)
        assert (await queue.sweep_expired()).expired == 1, "the sweep expired no row"
        await _assert_state(queue, new, "dead", "the expired job")
        assert (await queue.enqueue(b"last", unique_key="k")).created, "held after expiry"


@_check
async def q15_enqueue_many_carries_a_key_per_job(harness: EngineHarness) -> None:
    """Q15.2: ``enqueue_many(unique_keys=…)`` gives each payload its key (or none): a key
    held by a live job, or by an earlier payload of the same call, creates nothing and
    returns that job's id; the rest are created, in order, atomically."""
    async with harness.open_store() as store:
        queue = store.queue("unique-many")
        held = await queue.enqueue(b"held", unique_key="held")
        results = await queue.enqueue_many(
            [b"a", b"none", b"a-again", b"held", b"b", b"none-2"],
            unique_keys=["a", None, "a", "held", "b", None],
        )
        created = [r.created for r in results]
        assert created == [True, True, False, False, True, True], f"created flags {created}"
        a, none, a_again, held_again, b, none_2 = results
        assert (a_again, held_again) == (a, held), f"refused ids {a_again}, {held_again}"
        assert a < none < b < none_2, f"ids of the created jobs out of order: {results}"
        for job_id, key in [(a, "a"), (none, None), (b, "b"), (none_2, None)]:
            assert (await _get(queue, job_id)).unique_key == key, f"job {job_id}'s key"
        assert await _live_count(store, queue) == 5, "enqueue_many created a duplicate"


@_check
async def q15_a_window_refuses_the_key_after_its_job_is_gone(harness: EngineHarness) -> None:
    """Q15.5: ``unique_for_s`` keeps refusing the key after its job was acked, until
    ``enqueued_at + unique_for_s``, returning that job's id; a refused enqueue does not
    extend the window; a later window replaces it."""
    async with harness.open_store() as store:
        queue = store.queue("unique-window")
        job_id = await queue.enqueue(b"a", unique_key="k", unique_for_s=60)
        assert await (await _claim_id(queue, job_id)).ack() is True, "ack was refused"
        await harness.advance(30)
        refused = await queue.enqueue(b"b", unique_key="k", unique_for_s=60)
        _assert_result(refused, job_id, False, "an enqueue within the window, job acked")
        _assert_result(await queue.enqueue(b"c", unique_key="k"), job_id, False, "no window")
        await harness.advance(29.999)
        _assert_result(await queue.enqueue(b"d", unique_key="k"), job_id, False, "window end")
        await harness.advance(0.001)
        second = await queue.enqueue(b"e", unique_key="k", unique_for_s=10)
        assert second.created, "the window still refused the key once it closed"
        assert await queue.cancel(second) is True, "cancel was refused"
        _assert_result(await queue.enqueue(b"f", unique_key="k"), second, False, "new window")
        await harness.advance(10)
        await queue.sweep_expired()
        assert (await queue.enqueue(b"g", unique_key="k")).created, "refused after its window"


@_check
async def q15_redrive_skips_dead_jobs_whose_key_is_live(harness: EngineHarness) -> None:
    """Q15.4: a dead job keeps its key; a redrive leaves it dead (uncounted) while a live
    job holds the key, moves it once the key is free, and of dead jobs sharing a key
    moves only the lowest id."""
    async with harness.open_store() as store:
        queue = store.queue("unique-redrive")
        dead_id = await _dead_job_with_key(queue, "k")
        assert (await _get(queue, dead_id)).unique_key == "k", "the dead row lost its key"
        live = await queue.enqueue(b"live", unique_key="k")
        assert live.created, "a dead job's key refused an enqueue"
        assert await queue.requeue_dead([dead_id]) == 0, "redrive moved a job whose key is live"
        assert await queue.requeue_dead(all=True) == 0, "redrive all moved it"
        await _assert_state(queue, dead_id, "dead", "the skipped dead job")
        assert await queue.cancel(live) is True, "cancel was refused"
        assert await queue.requeue_dead([dead_id]) == 1, "redrive skipped a free key"
        _assert_result(await queue.enqueue(b"x", unique_key="k"), dead_id, False, "redriven")
        assert await queue.cancel(dead_id) is True, "cancel was refused"
        low, high = await _dead_job_with_key(queue, "twin"), await _dead_job_with_key(queue, "twin")
        other = await _dead_job(queue, b"keyless")
        assert await queue.requeue_dead(all=True) == 2, "redrive all moved both twins"
        await _assert_state(queue, low, "pending", "the lower twin")
        await _assert_state(queue, high, "dead", "the higher twin")
        await _assert_state(queue, other, "pending", "the keyless dead job")


async def _dead_job_with_key(queue: Queue, key: str) -> int:
    job_id = await queue.enqueue(b"doomed", unique_key=key, priority=2**31 - 1)
    assert job_id.created, f"the key {key!r} was held"
    assert await (await _claim_id(queue, job_id)).fail("boom") is True, "fail was refused"
    return int(job_id)


@_check
async def q15_a_transaction_holds_its_keys_until_it_ends(harness: EngineHarness) -> None:
    """Q15.6: ``tx.enqueue`` checks the key at once (a second one of the same key in the
    transaction gets the first's id); an enqueue of the key elsewhere waits for the
    transaction: after the commit it finds the job, after a rollback it creates its own."""
    async with harness.open_store() as store:
        queue = store.queue("unique-tx")
        mine, found = await _enqueue_beside_a_transaction(store, queue, "k-commit", commit=True)
        _assert_result(found, mine, False, "an enqueue that waited for the commit")
        assert await _live_count(store, queue) == 1, "a duplicate row after the commit"
        mine, found = await _enqueue_beside_a_transaction(store, queue, "k-undo", commit=False)
        assert found.created, "the waiting enqueue created nothing after the rollback"
        assert found != mine, "the waiting enqueue got the rolled-back id"
        assert await _live_count(store, queue) == 2, "a duplicate row after the rollback"


async def _enqueue_beside_a_transaction(
    store: Store, queue: Queue, key: str, *, commit: bool
) -> tuple[Enqueued, Enqueued]:
    """A transaction enqueues ``key``; meanwhile another task enqueues it outside, and
    must still be waiting when the transaction commits (or rolls back). Both results."""
    found: list[Enqueued] = []

    async def outside() -> None:
        found.append(await queue.enqueue(b"outside", unique_key=key))

    async with trio.open_nursery() as nursery:
        try:
            async with store.transaction() as tx:
                mine = await tx.enqueue(queue, b"tx", unique_key=key)
                assert mine.created, "tx.enqueue of a free key created nothing"
                again = await tx.enqueue(queue, b"tx-2", unique_key=key)
                _assert_result(again, mine, False, "the same key twice in a transaction")
                nursery.start_soon(outside)
                await trio.testing.wait_all_tasks_blocked()
                assert not found, "an enqueue of a held key did not wait for the transaction"
                if not commit:
                    raise _RollBack
        except _RollBack:
            pass
    (result,) = found
    return mine, result


class _RollBack(Exception):
    """Raised inside a transaction to roll it back."""


@_check
async def q15_concurrent_enqueues_of_one_key_create_one_job(harness: EngineHarness) -> None:
    """Q15.1: many tasks enqueueing one key at once create exactly one job; every one of
    them gets its id, exactly one with ``created=True``."""
    async with harness.open_store() as store:
        queue = store.queue("unique-race")
        results: list[Enqueued] = []

        async def enqueue() -> None:
            results.append(await queue.enqueue(b"race", unique_key="k"))

        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(enqueue)
        assert len(set(results)) == 1, f"the tasks got different ids: {sorted(set(results))}"
        assert sum(r.created for r in results) == 1, "not exactly one enqueue created the job"
        assert await _live_count(store, queue) == 1, "the race created more than one row"


@_check
async def q15_unique_keys_are_validated_without_effect(harness: EngineHarness) -> None:
    """Q15.7: a key is a str of 1-256 characters, no NUL, no lone surrogate; one key per
    payload; ``unique_for_s`` is a duration > 0 with a key. Anything else is
    ``InvalidArgument`` before any effect, and the message never shows the key."""
    async with harness.open_store() as store:
        queue = store.queue("unique-invalid")
        bad_keys = ["", "a\x00" + _SECRET_KEY, "\ud800" + _SECRET_KEY, "k" * 257, 5, b"k"]
        for key in bad_keys:
            exc = await _raises(
                InvalidArgument, f"unique_key={key!r}", queue.enqueue, b"p", unique_key=_any(key)
            )
            assert _SECRET_KEY not in str(exc), f"the message shows the key: {exc}"
        for window in [0, -1, math.nan, math.inf, True, "5"]:
            await _raises(
                InvalidArgument, f"unique_for_s={window!r}", queue.enqueue, b"p",
                unique_key="k", unique_for_s=_any(window),
            )  # fmt: skip
        await _raises(InvalidArgument, "window, no key", queue.enqueue, b"p", unique_for_s=5)
        for keys in [["a"], ["a", "b", "c"], "ab", ["a", ""], None.__class__]:
            await _raises(
                InvalidArgument, f"unique_keys={keys!r}", queue.enqueue_many, [b"1", b"2"],
                unique_keys=_any(keys),
            )  # fmt: skip
        async with store.transaction() as tx:
            await _raises(InvalidArgument, "tx", tx.enqueue, queue, b"p", unique_key="")
        assert (await queue.enqueue(b"ok", unique_key="k" * 256)).created, "256 characters"
        assert await _live_count(store, queue) == 1, "an invalid enqueue left a row"
