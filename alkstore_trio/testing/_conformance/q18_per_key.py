"""Q18.8 per-key concurrency: the concurrency key on every enqueue path and on the job
record (dead rows and redrives included), ``max_running_per_key`` on every claim, its
fairness rule, how it combines with the other limits, its throttle count and its due
time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import InvalidArgument, QueueLimits, QueueOpts
from ._helpers import _check, _dead_job, _get, _nothing_claimable, _raises

if TYPE_CHECKING:
    from ..._store import Queue
    from .._harness import EngineHarness


async def _keys(queue: Queue, n: int) -> list[str | None]:
    return [handle.job.concurrency_key for handle in await queue.claim_batch("w", n)]


@_check
async def q18_8_the_concurrency_key_travels_with_the_job(harness: EngineHarness) -> None:
    """Q18.8: enqueue, enqueue_many (one key per payload) and tx.enqueue keep the key on
    the job (get_job, list_jobs, claims); a dead job keeps it and a redrive brings it
    back; a keyless job shows None."""
    async with harness.open_store() as store:
        queue = store.queue("per-key-travel")
        one = await queue.enqueue(b"a", concurrency_key="tenant-1")
        many = await queue.enqueue_many([b"b", b"c", b"d"], concurrency_keys=["t2", None, "t2"])
        async with store.transaction() as tx:
            in_tx = await tx.enqueue(queue, b"e", concurrency_key="t3")
        plain = await queue.enqueue(b"f")
        want = {one: "tenant-1", many[0]: "t2", many[1]: None, many[2]: "t2", in_tx: "t3"}
        want[plain] = None
        for job_id, key in want.items():
            got = (await _get(queue, job_id)).concurrency_key
            assert got == key, f"job {job_id}: concurrency_key {got!r}, expected {key!r}"
        listed = {job.id: job.concurrency_key for job in await queue.list_jobs("pending")}
        assert listed == want, f"list_jobs shows {listed}, expected {want}"
        handle = await queue.claim_one("w")
        assert handle is not None, "nothing claimable"
        assert handle.job.concurrency_key == "tenant-1", f"claimed {handle.job.concurrency_key!r}"
        assert await handle.fail("boom") is True, "fail refused"
        assert (await _get(queue, one)).concurrency_key == "tenant-1", "the dead row lost it"
        dead = await _dead_job(queue, b"g")
        assert (await _get(queue, dead)).concurrency_key is None, "a keyless dead row has one"
        assert await queue.requeue_dead([one]) == 1, "the redrive moved nothing"
        back = await _get(queue, one)
        assert (back.state, back.concurrency_key) == ("pending", "tenant-1"), f"redriven {back}"


@_check
async def q18_8_bad_concurrency_keys_raise_without_effect(harness: EngineHarness) -> None:
    """Q18.8: a concurrency key is a str of 1-256 characters without NUL (as a unique
    key); concurrency_keys has one entry per payload; max_running_per_key is an int
    from 1 to 2**31 - 1 or None. Bad input: InvalidArgument, nothing enqueued or
    changed."""
    async with harness.open_store() as store:
        queue = store.queue("per-key-bad")
        for key in ["", "x" * 257, "a\x00b", 7, b"k"]:
            what = f"enqueue(concurrency_key={key!r})"
            await _raises(InvalidArgument, what, queue.enqueue, b"p", concurrency_key=key)
        for keys in [["a"], ["a", "b", "c"], "ab", [None, ""], 5]:
            what = f"enqueue_many(concurrency_keys={keys!r})"
            await _raises(
                InvalidArgument, what, queue.enqueue_many, [b"p", b"q"], concurrency_keys=keys
            )
        async with store.transaction() as tx:
            await _raises(
                InvalidArgument, "tx.enqueue(concurrency_key='')", tx.enqueue, queue, b"p",
                concurrency_key="",
            )  # fmt: skip
        assert await queue.list_jobs("pending") == [], "a bad enqueue left a job"
        await queue.set_limits(max_running_per_key=2)
        for bad in [0, -1, True, 1.5, "2", 2**31]:
            what = f"set_limits(max_running_per_key={bad!r})"
            await _raises(InvalidArgument, what, queue.set_limits, max_running_per_key=bad)
            got = await queue.limits()
            assert got == QueueLimits(max_running_per_key=2), f"{what} changed {got}"


@_check
async def q18_8_max_running_per_key_caps_each_keys_live_leases(harness: EngineHarness) -> None:
    """Q18.8: with max_running_per_key=1, claim_batch, claim_one and the claim of
    ack_handles_and_claim never hold two live leases of one key; keyless jobs are not
    held back; an ack frees the key; a lapsed lease stops counting when it lapses;
    set_limits reads back, and clearing it lets claims take all there is."""
    async with harness.open_store() as store:
        queue = store.queue("per-key-cap", QueueOpts(visibility_timeout_s=10))
        await queue.enqueue_many(
            [b"%d" % i for i in range(7)], concurrency_keys=["a", "a", "a", "b", "b", None, None]
        )
        got = await queue.set_limits(max_running_per_key=1)
        assert got == QueueLimits(max_running_per_key=1), f"set_limits -> {got}"
        first = await queue.claim_batch("w", 10)
        keys = [handle.job.concurrency_key for handle in first]
        assert keys == ["a", "b", None, None], f"a claim of 10 took the keys {keys}"
        await _nothing_claimable(queue, "every key at its limit")
        acked, claimed = await queue.ack_handles_and_claim([first[0]], "w", 10)
        assert acked == [True], f"the ack of ack_handles_and_claim: {acked}"
        assert [h.job.concurrency_key for h in claimed] == ["a"], f"after acking a: {claimed}"
        await harness.advance(10.001)
        again = await _keys(queue, 10)
        # Lapsed leases are reclaimable, one per key: a's lapsed lease (before its
        # pending job), b's lapsed lease, both keyless ones.
        assert again == ["a", "b", None, None], f"after every lease lapsed: {again}"
        await queue.set_limits(max_running_per_key=None)
        assert await queue.limits() == QueueLimits(), "clearing the per-key limit"
        rest = await _keys(queue, 10)
        assert rest == ["a", "b"], f"after the limit was cleared, a claim of 10 took {rest}"


@_check
async def q18_8_a_deep_backlog_does_not_starve_other_keys(harness: EngineHarness) -> None:
    """Q18.8's fairness: a claim takes, in claim order, each key's best jobs up to its
    free slots and the keyless jobs: a key with 30 jobs ahead of every other key's (of
    higher priority) adds at most its free slots to a claim, and the other keys' best
    jobs are claimed beside them."""
    async with harness.open_store() as store:
        queue = store.queue("per-key-fair")
        await queue.enqueue_many([b"big"] * 30, concurrency_keys=["big"] * 30, priority=5)
        await queue.enqueue_many([b"s"] * 3, concurrency_keys=["s1", "s2", "s1"])
        await queue.enqueue(b"plain")
        await queue.set_limits(max_running_per_key=2)
        keys = await _keys(queue, 5)
        assert keys == ["big", "big", "s1", "s2", "s1"], f"a claim of 5 took {keys}"
        keys = await _keys(queue, 5)
        assert keys == [None], f"the next claim of 5 took {keys}"
        await _nothing_claimable(queue, "big and s1 at their limit")


@_check
async def q18_8_combines_with_max_running_and_counts_its_throttles(
    harness: EngineHarness,
) -> None:
    """Q18.8 with Q18.7 and Q18.10: max_running caps the claim of the per-key
    candidates; stats show the limit and count a claim throttled by it (it found jobs
    its keys held back and took fewer than it asked for and the other limits allowed),
    not a claim that max_running held to the same count."""
    async with harness.open_store() as store:
        queue = store.queue("per-key-both")
        await queue.enqueue_many([b"x"] * 6, concurrency_keys=["a", "a", "a", "b", "b", "c"])
        await queue.set_limits(max_running=2, max_running_per_key=1)
        assert await _keys(queue, 5) == ["a", "b"], "max_running=2 over three free keys"
        await queue.set_limits(max_running=None)
        assert await _keys(queue, 5) == ["c"], "a and b at their limit, c free"
        assert await _keys(queue, 5) == [], "every key at its limit"
        entry = (await store.stats("per-key-both")).queue("per-key-both")
        assert entry is not None, "stats(name) did not list the queue"
        assert entry.limits == QueueLimits(max_running_per_key=1), f"limits: {entry.limits}"
        got = (entry.throttled.running, entry.throttled.per_key)
        assert got == (1, 2), f"throttled (running, per_key) = {got}, expected (1, 2)"


@_check
async def q18_8_next_due_waits_for_the_earliest_lease_of_the_full_keys(
    harness: EngineHarness,
) -> None:
    """Q18.8 (R11): when every ready job's key is at its limit, next_due_in_s is the
    time until the earliest live lease of those keys lapses; a ready keyless job (or a
    key with a free slot) makes it due now."""
    async with harness.open_store() as store:
        queue = store.queue("per-key-due", QueueOpts(visibility_timeout_s=30))
        await queue.enqueue_many([b"x"] * 4, concurrency_keys=["a", "a", "b", "b"])
        await queue.set_limits(max_running_per_key=1)
        assert len(await queue.claim_batch("w", 1)) == 1, "the first claim"
        await harness.advance(10)
        assert len(await queue.claim_batch("w", 5)) == 1, "the second claim"
        due = await queue.next_due_in_s()
        assert due is not None, "next_due_in_s with every key full: None"
        assert abs(due - 20) < 1e-3, f"next_due_in_s with every key full: {due}"
        await queue.enqueue(b"plain")
        due = await queue.next_due_in_s()
        assert due is None or due <= 0, f"with a keyless ready job: {due}"
