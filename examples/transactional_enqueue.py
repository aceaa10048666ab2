"""Transactional enqueue on the in-memory engine: all jobs of a transaction become
visible (and wake their queues) at commit, or none of them do.

Run it with ``python examples/transactional_enqueue.py``.
"""

import trio

import alkstore_trio


class OrderRejected(Exception):
    pass


async def place_order(store: alkstore_trio.Store, order_id: int, *, valid: bool) -> None:
    emails = store.queue("emails")
    invoices = store.queue("invoices", alkstore_trio.QueueOpts(max_attempts=5))
    async with store.transaction() as tx:
        await tx.enqueue(emails, f"confirm order {order_id}".encode())
        await tx.enqueue(invoices, f"invoice order {order_id}".encode(), priority=10)
        # A bare queue name works too; the row gets the default stamps (300 / 3 / 5).
        await tx.enqueue("audit", f"order {order_id} placed".encode())
        if not valid:
            # Any exception leaving the block rolls every enqueue above back.
            raise OrderRejected(f"order {order_id} failed validation")


async def drain(queue: alkstore_trio.Queue) -> list[bytes]:
    handles = await queue.claim_batch("worker-1", 100)
    await queue.ack_batch([handle.id for handle in handles])
    return [handle.job.payload for handle in handles]


async def main() -> None:
    async with alkstore_trio.open_store("memory://") as store:
        await place_order(store, 1, valid=True)
        try:
            await place_order(store, 2, valid=False)
        except OrderRejected as exc:
            print("rolled back:", exc)

        # Only order 1's jobs are there: order 2's transaction left nothing behind.
        expected = {
            "emails": [b"confirm order 1"],
            "invoices": [b"invoice order 1"],
            "audit": [b"order 1 placed"],
        }
        for name, payloads in expected.items():
            found = await drain(store.queue(name))
            print(f"{name}: {[payload.decode() for payload in found]}")
            assert found == payloads


if __name__ == "__main__":
    trio.run(main)
