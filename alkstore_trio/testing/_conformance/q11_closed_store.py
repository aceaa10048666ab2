"""Q11 closed store: every operation after close raises ``StoreClosed``, before any other
error (D4)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from ... import HandleConsumed, QueueOpts, StoreClosed
from ._helpers import WAKE_TIMEOUT_S, _any, _check, _claim, _claim_id, _raises

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._harness import EngineHarness


async def _assert_everything_closed(
    store_ops: Sequence[tuple[str, Callable[[], object]]],
) -> None:
    for what, call in store_ops:
        await _raises(StoreClosed, f"{what} after close", call)


@_check
async def q11_every_operation_after_close_raises_store_closed(harness: EngineHarness) -> None:
    """Q11: after ``aclose()``, every operation of the store, its queue handles, its job
    handles (fresh or consumed), transactions and wake listeners raises StoreClosed."""
    async with harness.open_store() as store:
        queue = store.queue("closing")
        ids = await queue.enqueue_many([b"a", b"b"])
        fresh, consumed = sorted(await queue.claim_batch("w", 2), key=lambda h: h.id)
        assert await consumed.ack() is True, "ack was refused"
        async with store.open_wake_listener([queue]) as listener:
            await store.aclose()
            assert store.closed, "store.closed is False after aclose()"
            await _raises(StoreClosed, "listener.wait(0) after close", listener.wait, 0)
            await _raises(StoreClosed, "listener.wait(None) after close", listener.wait, None)
        await _assert_everything_closed(
            [
                ("store.queue", lambda: store.queue("closing")),
                ("store.queue with opts", lambda: store.queue("other", QueueOpts())),
                ("store.transaction", store.transaction),
                ("store.open_wake_listener", lambda: store.open_wake_listener(["closing"])),
                ("queue.enqueue", lambda: queue.enqueue(b"x")),
                ("queue.enqueue_many", lambda: queue.enqueue_many([b"x"])),
                ("queue.enqueue_many([])", lambda: queue.enqueue_many([])),
                ("queue.claim_one", lambda: queue.claim_one("w")),
                ("queue.claim_batch", lambda: queue.claim_batch("w", 3)),
                ("queue.claim_batch(n=0)", lambda: queue.claim_batch("w", 0)),
                ("queue.ack_batch", lambda: queue.ack_batch(ids)),
                ("queue.ack_batch([])", lambda: queue.ack_batch([])),
                ("queue.cancel", lambda: queue.cancel(ids[0])),
                ("queue.get_job", lambda: queue.get_job(ids[0])),
                ("queue.sweep_expired", queue.sweep_expired),
                ("queue.ack_handles", lambda: queue.ack_handles([fresh])),
                ("queue.heartbeat_handles", lambda: queue.heartbeat_handles([fresh])),
                ("queue.retry_handles", lambda: queue.retry_handles([(fresh, None, None)])),
                ("queue.retry_handles([])", lambda: queue.retry_handles([])),
                ("queue.fail_handles", lambda: queue.fail_handles([(fresh, None)])),
                ("queue.fail_handles([])", lambda: queue.fail_handles([])),
                (
                    "queue.ack_handles_and_claim",
                    lambda: queue.ack_handles_and_claim([fresh], "w", 3),
                ),
                (
                    "queue.ack_handles_and_claim([], n=0)",
                    lambda: queue.ack_handles_and_claim([], "w", 0),
                ),
                ("handle.heartbeat", fresh.heartbeat),
                ("handle.ack", fresh.ack),
                ("handle.retry", fresh.retry),
                ("handle.fail", fresh.fail),
                ("consumed handle.heartbeat", consumed.heartbeat),
                ("consumed handle.ack", consumed.ack),
                ("store.stats (D22)", store.stats),
                ("store.get_job (D26)", lambda: store.get_job(ids[0])),
                ("queue.list_jobs (D26)", lambda: queue.list_jobs("dead")),
                ("queue.requeue_dead (D24)", lambda: queue.requeue_dead(ids)),
                ("queue.requeue_dead([]) (D24)", lambda: queue.requeue_dead([])),
                ("queue.purge_dead (D25)", queue.purge_dead),
            ]
        )


@_check
async def q11_leaving_the_store_block_closes_everything(harness: EngineHarness) -> None:
    """Q11: leaving the store's ``async with`` closes it like ``aclose()``: handles kept
    past the block raise StoreClosed."""
    async with harness.open_store() as store:
        queue = store.queue("left-behind")
        job_id = await queue.enqueue(b"x")
        handle = await _claim_id(queue, job_id)
        async with store.transaction() as tx:
            pass
    assert store.closed, "store.closed is False after leaving its block"
    await _assert_everything_closed(
        [
            ("store.queue", lambda: store.queue("left-behind")),
            ("store.transaction", store.transaction),
            ("store.open_wake_listener", lambda: store.open_wake_listener([queue])),
            ("queue.enqueue", lambda: queue.enqueue(b"x")),
            ("queue.claim_one", lambda: queue.claim_one("w")),
            ("queue.get_job", lambda: queue.get_job(job_id)),
            ("queue.sweep_expired", queue.sweep_expired),
            ("handle.heartbeat", handle.heartbeat),
            ("handle.ack", handle.ack),
            ("finished tx.enqueue", lambda: tx.enqueue(queue, b"x")),
        ]
    )


@_check
async def q11_a_transaction_open_at_close_raises_store_closed(harness: EngineHarness) -> None:
    """Q11: when the store closes while a transaction is open, its enqueue raises
    StoreClosed and so does its commit (leaving the block)."""
    async with harness.open_store() as store:
        queue = store.queue("tx-at-close")
        commit_raised: BaseException | None = None
        try:
            async with store.transaction() as tx:
                await tx.enqueue(queue, b"before close")
                await store.aclose()
                await _raises(StoreClosed, "tx.enqueue after close", tx.enqueue, queue, b"x")
        except StoreClosed as exc:
            commit_raised = exc
        assert commit_raised is not None, (
            "committing a transaction after close did not raise StoreClosed"
        )


@_check
async def q11_a_blocked_wake_listener_wakes_up_with_store_closed(harness: EngineHarness) -> None:
    """Q11: a task blocked in ``listener.wait()`` when the store closes gets StoreClosed."""
    async with harness.open_store() as store, store.open_wake_listener(["blocked"]) as listener:
        outcome: list[str] = []

        async def wait_for_close(
            task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
        ) -> None:
            task_status.started()
            try:
                woken = await listener.wait(WAKE_TIMEOUT_S)
            except StoreClosed:
                outcome.append("StoreClosed")
            else:
                outcome.append(f"returned {sorted(woken)}")

        async with trio.open_nursery() as nursery:
            await nursery.start(wait_for_close)
            await store.aclose()
        assert outcome == ["StoreClosed"], (
            f"a blocked wait ended with {outcome}, expected StoreClosed"
        )


@_check
async def q11_closing_twice_is_harmless(harness: EngineHarness) -> None:
    """Q11: ``aclose()`` twice, then leaving the block, raises nothing."""
    async with harness.open_store() as store:
        await store.queue("twice").enqueue(b"x")
        await store.aclose()
        await store.aclose()
    await store.aclose()


@_check
async def q11_store_closed_is_reported_before_other_errors(harness: EngineHarness) -> None:
    """Q11 with decision 4: checks run in the order closed -> consumed -> arguments, so a
    closed store reports StoreClosed even for calls that are also consumed or invalid."""
    async with harness.open_store() as store:
        queue = store.queue("check-order")
        await queue.enqueue(b"x")
        handle = await _claim(queue)
        assert await handle.ack() is True, "ack was refused"
        await _raises(HandleConsumed, "consumed handle.retry(delay_s=-1)", handle.retry, delay_s=-1)
        async with store.open_wake_listener([queue]) as listener:
            await store.aclose()
            await _assert_everything_closed(
                [
                    ("listener.wait(-1)", lambda: listener.wait(-1)),
                    ("store.queue('alk_bad')", lambda: store.queue("alk_bad")),
                    ("store.open_wake_listener([])", lambda: store.open_wake_listener([])),
                    ("queue.enqueue(str)", lambda: queue.enqueue(_any("text"))),
                    ("queue.claim_batch('', 1)", lambda: queue.claim_batch("", 1)),
                    ("queue.get_job('1')", lambda: queue.get_job(_any("1"))),
                    ("consumed handle.retry(delay_s=-1)", lambda: handle.retry(delay_s=-1)),
                    (
                        "queue.retry_handles with a consumed handle and delay_s=-1",
                        lambda: queue.retry_handles([(handle, None, -1)]),
                    ),
                    (
                        "queue.fail_handles with a consumed handle and a bad item",
                        lambda: queue.fail_handles([(handle, None), _any(5)]),
                    ),
                ]
            )
