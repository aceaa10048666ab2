"""Q2 enqueue: how ``run_at``, ``expires_at`` and ``max_attempts`` are resolved, payloads,
priorities, ids, ``enqueue_many`` and the wake (D6, D8, D9, D10)."""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import TYPE_CHECKING

from ... import InvalidArgument, Queue, QueueOpts
from ._helpers import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    INSTANT_S,
    INT32_MAX,
    INT32_MIN,
    _after,
    _any,
    _assert_dead,
    _check,
    _claim_id,
    _get,
    _no_wake,
    _nothing_claimable,
    _raises,
    _wait_for_wakes,
)

if TYPE_CHECKING:
    from .._harness import EngineHarness


@_check
async def q2_enqueue_without_delay_or_run_at_is_ready_now(harness: EngineHarness) -> None:
    """Q2: with neither ``delay_s`` nor ``run_at``, ``run_at = enqueued_at = now`` and the
    job is claimable at once; the new row is pending with 0 attempts."""
    async with harness.open_store() as store:
        await harness.advance(3)
        now = await harness.now()
        queue = store.queue("ready-now")
        job_id = await queue.enqueue(b"x")
        job = await _get(queue, job_id)
        assert job.run_at == now, f"run_at is {job.run_at}, expected now ({now})"
        assert job.enqueued_at == now, f"enqueued_at is {job.enqueued_at}, expected now ({now})"
        assert (job.state, job.attempts, job.last_error) == ("pending", 0, None), (
            f"a new row is (state, attempts, last_error) = "
            f"{(job.state, job.attempts, job.last_error)!r}, expected ('pending', 0, None)"
        )
        await _claim_id(queue, job_id)


@_check
async def q2_delay_wins_over_run_at(harness: EngineHarness) -> None:
    """Q2: when both are given, ``run_at = now + delay_s`` and ``run_at`` is ignored."""
    async with harness.open_store() as store:
        now = await harness.now()
        queue = store.queue("delay-wins")
        later = await queue.enqueue(b"x", delay_s=10, run_at=_after(now, 1000))
        sooner = await queue.enqueue(b"y", delay_s=0, run_at=_after(now, 1000))
        job = await _get(queue, later)
        assert job.run_at == _after(now, 10), (
            f"delay_s=10 with run_at=now+1000s gave run_at {job.run_at}, expected now + 10 s"
        )
        job = await _get(queue, sooner)
        assert job.run_at == now, (
            f"delay_s=0 with run_at=now+1000s gave run_at {job.run_at}, expected now"
        )
        await _claim_id(queue, sooner)
        assert await queue.claim_one("w") is None, "a job delayed by 10 s was claimable at once"
        await harness.advance(10)
        await _claim_id(queue, later)


@_check
async def q2_1_negative_delay_means_now(harness: EngineHarness) -> None:
    """Q2.1: a negative delay is legal and means now: ``run_at = now``, never a past
    time, so the job does not jump ahead of equal-priority jobs enqueued before it, and
    the queue's ``oldest_ready_age_s`` does not read the delay back."""
    async with harness.open_store() as store:
        now = await harness.now()
        queue = store.queue("negative-delay")
        plain = await queue.enqueue(b"plain")
        negative = await queue.enqueue(b"negative", delay_s=-3600)
        (many,) = await queue.enqueue_many([b"many"], delay_s=-30)
        for job_id in (negative, many):
            job = await _get(queue, job_id)
            assert job.run_at == now, (
                f"a negative delay_s gave run_at {job.run_at}, expected now ({now})"
            )
        stats = (await store.stats(queue)).queue(queue.name)
        assert stats is not None, "stats() did not list the queue"
        assert stats.oldest_ready_age_s == 0, (
            f"oldest_ready_age_s after negative delays: {stats.oldest_ready_age_s}, expected 0"
        )
        await _claim_id(queue, plain)
        await _claim_id(queue, negative)
        await _claim_id(queue, many)


@_check
async def q2_run_at_is_stored_as_given(harness: EngineHarness) -> None:
    """Q2: without a delay, ``run_at`` is stored as given: a past one is ready now, a
    future one becomes claimable exactly when it comes due."""
    async with harness.open_store() as store:
        now = await harness.now()
        queue = store.queue("run-at")
        past = await queue.enqueue(b"past", run_at=_after(now, -60))
        future = await queue.enqueue(b"future", run_at=_after(now, 60))
        for job_id, expected in [(past, _after(now, -60)), (future, _after(now, 60))]:
            job = await _get(queue, job_id)
            assert job.run_at == expected, (
                f"job {job_id} has run_at {job.run_at}, expected {expected}"
            )
            assert job.enqueued_at == now, (
                f"job {job_id} has enqueued_at {job.enqueued_at}, expected now"
            )
        await _claim_id(queue, past)
        await harness.advance(60 - INSTANT_S)
        assert await queue.claim_one("w") is None, "a job was claimable before its run_at"
        await harness.advance(INSTANT_S)
        await _claim_id(queue, future)


@_check
async def q2_run_at_must_be_timezone_aware(harness: EngineHarness) -> None:
    """Q2: a naive ``run_at`` (or a non-datetime) is InvalidArgument and enqueues nothing."""
    async with harness.open_store() as store:
        queue = store.queue("naive")
        for bad in [datetime(2030, 1, 1), 1700000000.0, "2030-01-01T00:00:00Z"]:
            await _raises(
                InvalidArgument, f"enqueue(run_at={bad!r})", queue.enqueue, b"x", run_at=bad
            )
            await _raises(
                InvalidArgument,
                f"enqueue_many(run_at={bad!r})",
                queue.enqueue_many,
                [b"x"],
                run_at=bad,
            )
        await _nothing_claimable(queue, "after rejected run_at values")


@_check
async def q2_expires_at_is_relative_to_enqueue_time(harness: EngineHarness) -> None:
    """Q2: ``expires_at = now + expires_in_s`` at enqueue, whatever the delay; no
    ``expires_in_s`` means no expiry."""
    async with harness.open_store() as store:
        queue = store.queue("expiring", QueueOpts(expires_in_s=100))
        first_now = await harness.now()
        first = await queue.enqueue(b"a")
        await harness.advance(7)
        second_now = await harness.now()
        second = await queue.enqueue(b"b", delay_s=50)
        third = await queue.enqueue(b"c", run_at=_after(second_now, 500))
        for job_id, expected in [
            (first, _after(first_now, 100)),
            (second, _after(second_now, 100)),
            (third, _after(second_now, 100)),
        ]:
            job = await _get(queue, job_id)
            assert job.expires_at == expected, (
                f"job {job_id} has expires_at {job.expires_at}, expected enqueue time + 100 s "
                f"({expected})"
            )
        never = await store.queue("expiring").enqueue(b"d")
        job = await _get(queue, never)
        assert job.expires_at is None, f"a row without expires_in_s has expires_at {job.expires_at}"


@_check
async def q2_max_attempts_override_is_the_only_per_job_stamp(harness: EngineHarness) -> None:
    """Q2: ``max_attempts=`` overrides the stamp for one job (the row shows it and obeys
    it); the other stamps still come from the handle; an override must be an int >= 1."""
    async with harness.open_store() as store:
        queue = store.queue("override", QueueOpts(max_attempts=3, visibility_timeout_s=40))
        once = await queue.enqueue(b"once", max_attempts=1, priority=1)
        many = await queue.enqueue_many([b"m1", b"m2"], max_attempts=9)
        plain = await queue.enqueue(b"plain")
        expectations = [(once, 1), (many[0], 9), (many[1], 9), (plain, 3)]
        for job_id, attempts in expectations:
            job = await _get(queue, job_id)
            assert job.max_attempts == attempts, (
                f"job {job_id} has max_attempts {job.max_attempts}, expected {attempts}"
            )
            assert job.visibility_timeout_s == 40, (
                f"job {job_id} has visibility_timeout_s {job.visibility_timeout_s}, expected "
                "the handle's 40"
            )
        handle = await _claim_id(queue, once)
        assert await handle.retry("boom", delay_s=0) is True, "retry of a valid claim was refused"
        await _assert_dead(harness, queue, once, "boom", "retry with max_attempts=1 override")
        for bad in [0, -1, 2.0, True, "3", 2**31]:
            await _raises(
                InvalidArgument,
                f"enqueue(max_attempts={bad!r})",
                queue.enqueue,
                b"x",
                max_attempts=bad,
            )


@_check
async def q2_payload_round_trips_byte_for_byte(harness: EngineHarness) -> None:
    """Q2: payloads are stored and returned exactly, as ``bytes``: empty, every byte value,
    NULs, a full 1 MiB; bytearray and memoryview are accepted."""
    everything = bytes(range(256))
    cases: list[tuple[object, bytes]] = [
        (b"", b""),
        (everything, everything),
        (everything[::-1] * 3, everything[::-1] * 3),
        (b"\x00" * 17, b"\x00" * 17),
        (bytearray(b"from a bytearray\xff"), b"from a bytearray\xff"),
        (memoryview(b"from a memoryview\x00\x01"), b"from a memoryview\x00\x01"),
        (memoryview(everything)[10:20], everything[10:20]),
        (b"\xab" * DEFAULT_MAX_PAYLOAD_BYTES, b"\xab" * DEFAULT_MAX_PAYLOAD_BYTES),
    ]
    async with harness.open_store() as store:
        queue = store.queue("payloads")
        ids = []
        for payload, expected in cases:
            job_id = await queue.enqueue(_any(payload))
            ids.append(job_id)
            job = await _get(queue, job_id)
            assert type(job.payload) is bytes, f"get_job payload is a {type(job.payload).__name__}"
            assert job.payload == expected, (
                f"payload of {len(expected)} bytes came back as {len(job.payload)} different bytes"
            )
        many = await queue.enqueue_many([bytearray(b"ba"), memoryview(b"mv"), b""])
        expected_by_id = dict(zip(ids, [expected for _, expected in cases], strict=True))
        expected_by_id.update(zip(many, [b"ba", b"mv", b""], strict=True))
        handles = await queue.claim_batch("w", len(expected_by_id))
        claimed = {h.id: h.job.payload for h in handles}
        assert set(claimed) == set(expected_by_id), "not every payload job could be claimed"
        for job_id, expected in expected_by_id.items():
            assert claimed[job_id] == expected, (
                f"the claimed snapshot of job {job_id} does not carry its payload exactly"
            )


@_check
async def q2_payload_must_be_bytes_within_the_maximum_size(harness: EngineHarness) -> None:
    """Q2: ``str`` and other types are InvalidArgument (no pickling), as is a payload over
    the maximum (default 1 MiB); nothing is enqueued and nobody is woken."""
    async with harness.open_store() as store:
        queue = store.queue("bad-payloads")
        async with store.open_wake_listener([queue]) as listener:
            for bad in ["text", 42, None, [1, 2], {"a": 1}, 1.5, object()]:
                await _raises(InvalidArgument, f"enqueue({type(bad).__name__})", queue.enqueue, bad)
            released = memoryview(b"released")
            released.release()
            await _raises(InvalidArgument, "enqueue(released memoryview)", queue.enqueue, released)
            await _raises(
                InvalidArgument,
                "enqueue(1 MiB + 1 byte)",
                queue.enqueue,
                b"x" * (DEFAULT_MAX_PAYLOAD_BYTES + 1),
            )
            await _no_wake(listener, "after rejected payloads")
        await _nothing_claimable(queue, "after rejected payloads")


@_check
async def q2_enqueue_rejects_invalid_options_without_effect(harness: EngineHarness) -> None:
    """Q2/Q12: bad ``priority`` (outside int32, not an int), ``delay_s`` (NaN, inf, bool,
    str) or ``max_attempts`` are InvalidArgument, with no row and no wake."""
    nan, inf = float("nan"), float("inf")
    bad_kwargs: list[dict[str, object]] = [
        {"priority": 2**31},
        {"priority": -(2**31) - 1},
        {"priority": 1.0},
        {"priority": "1"},
        {"priority": None},
        {"delay_s": nan},
        {"delay_s": inf},
        {"delay_s": -inf},
        {"delay_s": True},
        {"delay_s": "5"},
        {"delay_s": 2**1024},
        {"priority": 2**1024},
        {"max_attempts": 0},
    ]
    async with harness.open_store() as store:
        queue = store.queue("bad-options")
        async with store.open_wake_listener([queue]) as listener:
            for kwargs in bad_kwargs:
                await _raises(
                    InvalidArgument, f"enqueue(**{kwargs!r})", queue.enqueue, b"x", **kwargs
                )
                await _raises(
                    InvalidArgument,
                    f"enqueue_many(**{kwargs!r})",
                    queue.enqueue_many,
                    [b"x"],
                    **kwargs,
                )
            await _no_wake(listener, "after rejected options")
        await _nothing_claimable(queue, "after rejected options")


@_check
async def q2_priority_accepts_the_int32_range(harness: EngineHarness) -> None:
    """Q2: priorities from -2**31 to 2**31 - 1 are stored as given; larger runs first."""
    async with harness.open_store() as store:
        queue = store.queue("priorities")
        low = await queue.enqueue(b"low", priority=INT32_MIN)
        zero = await queue.enqueue(b"zero")
        high = await queue.enqueue(b"high", priority=INT32_MAX)
        for job_id, priority in [(low, INT32_MIN), (zero, 0), (high, INT32_MAX)]:
            job = await _get(queue, job_id)
            assert job.priority == priority, (
                f"job {job_id} has priority {job.priority}, expected {priority}"
            )
        for job_id in [high, zero, low]:
            await _claim_id(queue, job_id)


@_check
async def q2_ids_increase_in_enqueue_order(harness: EngineHarness) -> None:
    """Q2: ids increase in enqueue order across enqueue, enqueue_many, transactions and
    queues of one engine; enqueue_many returns ids in payload order."""
    async with harness.open_store() as store:
        a = store.queue("ids-a")
        b = store.queue("ids-b")
        rows: list[tuple[Queue, int, bytes]] = [(a, await a.enqueue(b"1"), b"1")]
        rows += [
            (a, i, p) for i, p in zip(await a.enqueue_many([b"2", b"3"]), [b"2", b"3"], strict=True)
        ]
        rows.append((b, await b.enqueue(b"5"), b"5"))
        async with store.transaction() as tx:
            rows.append((a, await tx.enqueue(a, b"6"), b"6"))
            rows.append((b, await tx.enqueue("ids-b", b"7"), b"7"))
        rows += [
            (b, i, p) for i, p in zip(await b.enqueue_many([b"8", b"9"]), [b"8", b"9"], strict=True)
        ]
        rows.append((a, await a.enqueue(b"10"), b"10"))
        ids = [job_id for _, job_id, _ in rows]
        assert all(isinstance(i, int) and not isinstance(i, bool) for i in ids), (
            f"job ids must be ints; got {ids!r}"
        )
        increasing = all(x < y for x, y in itertools.pairwise(ids))
        assert increasing, f"ids do not strictly increase in enqueue order: {ids}"
        for queue, job_id, payload in rows:
            job = await _get(queue, job_id)
            assert job.payload == payload, f"job {job_id} holds another payload than enqueued"


@_check
async def q2_enqueue_many_is_atomic_with_one_clock_read(harness: EngineHarness) -> None:
    """Q2: enqueue_many resolves every row with one clock read and is all or none: one bad
    payload (wrong type or too large) anywhere in the list enqueues nothing and wakes
    nobody; an empty list returns ``[]`` (decision 6)."""
    async with harness.open_store() as store:
        queue = store.queue("many", QueueOpts(expires_in_s=50))
        async with store.open_wake_listener([queue]) as listener:
            for bad in [
                [b"ok", _any("not bytes"), b"ok"],
                [b"ok", b"y" * (DEFAULT_MAX_PAYLOAD_BYTES + 1)],
                [_any(None)],
            ]:
                await _raises(
                    InvalidArgument, "enqueue_many with one bad payload", queue.enqueue_many, bad
                )
            for bad_arg in [b"single bytes", "a string", 5, None]:
                await _raises(
                    InvalidArgument, f"enqueue_many({bad_arg!r})", queue.enqueue_many, bad_arg
                )
            assert await queue.enqueue_many([]) == [], "enqueue_many([]) did not return []"
            await _no_wake(listener, "after rejected or empty enqueue_many")
            await _nothing_claimable(queue, "after rejected or empty enqueue_many")
            now = await harness.now()
            payloads = [b"p%d" % i for i in range(5)]
            ids = await queue.enqueue_many(iter(payloads), priority=4, delay_s=2)
            assert len(ids) == len(payloads), f"enqueue_many of 5 payloads returned {ids!r}"
            for job_id, payload in zip(ids, payloads, strict=True):
                job = await _get(queue, job_id)
                seen = (job.payload, job.priority, job.enqueued_at, job.run_at, job.expires_at)
                expected = (payload, 4, now, _after(now, 2), _after(now, 50))
                assert seen == expected, (
                    f"job {job_id} of enqueue_many shows (payload, priority, enqueued_at, run_at, "
                    f"expires_at) = {seen!r}, expected {expected!r}"
                )


@_check
async def q2_enqueue_wakes_its_queue(harness: EngineHarness) -> None:
    """Q2: a committed enqueue or enqueue_many wakes its queue's listeners (names or
    handles), not the listeners of other queues."""
    async with harness.open_store() as store:
        queue = store.queue("woken")
        other = store.queue("not-woken")
        async with (
            store.open_wake_listener([queue]) as by_handle,
            store.open_wake_listener(["woken", "third"]) as by_name,
            store.open_wake_listener([other]) as bystander,
        ):
            assert by_handle.queues == frozenset({"woken"}), (
                f"listener.queues is {by_handle.queues!r}"
            )
            await _no_wake(by_handle, "before any enqueue")
            await queue.enqueue(b"x")
            await _wait_for_wakes(by_handle, {"woken"}, "after enqueue (listener by handle)")
            await _wait_for_wakes(by_name, {"woken"}, "after enqueue (listener by name)")
            await _no_wake(by_handle, "a second wait after one enqueue")
            await queue.enqueue_many([b"a", b"b", b"c"])
            await _wait_for_wakes(by_handle, {"woken"}, "after enqueue_many")
            await _no_wake(by_handle, "a second wait after one enqueue_many")
            await _wait_for_wakes(by_name, {"woken"}, "after enqueue_many (listener by name)")
            await _no_wake(bystander, "a listener of another queue")
            await _raises(InvalidArgument, "listener.wait(-1)", by_handle.wait, -1)
