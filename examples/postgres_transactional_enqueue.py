"""Transactional enqueue on PostgreSQL: your business row and its job commit together,
or neither does (and a rolled-back job wakes nobody).

The program places two orders. Each inserts a row into its own ``orders`` table and
enqueues a confirmation email in one database transaction. The second order fails
after both statements ran, so its transaction rolls back: no order row, no job, no wake.

It needs a PostgreSQL server: set ``ALKSTORE_DSN`` (default
``postgresql://postgres@127.0.0.1:5432/test``) and run
``python examples/postgres_transactional_enqueue.py``. It works in a schema of its own
(queue tables and the ``orders`` table), created at the start and dropped at the end.
"""

import os

import trio

import alkstore_trio

DSN = os.environ.get("ALKSTORE_DSN", "postgresql://postgres@127.0.0.1:5432/test")
# A schema of this run's own (the pid keeps two runs apart), dropped at the end. Not
# ALKSTORE_SCHEMA, unlike the README and the tutorial: this program claims every job of
# its queue and drops its schema, which must never be one you use.
SCHEMA = f"example_shop_{os.getpid()}"
ORDERS = f'"{SCHEMA}".orders'


class OutOfStock(Exception):
    pass


async def place_order(
    store: alkstore_trio.Store, order_no: str, item: str, *, in_stock: bool
) -> None:
    emails = store.queue("emails", alkstore_trio.QueueOpts(max_attempts=5))
    async with store.transaction() as tx:
        # Your own statement, in the same database transaction as the enqueue.
        await tx.execute(f"INSERT INTO {ORDERS} (order_no, item) VALUES (%s, %s)", [order_no, item])
        await tx.enqueue(emails, f"confirm {order_no}".encode())
        if not in_stock:
            # Leaving the block with an exception rolls back the row and the job.
            raise OutOfStock(f"{item} is out of stock; order {order_no} is not placed")


async def count_orders(store: alkstore_trio.Store, order_no: str) -> int:
    async with store.transaction() as tx:
        rows = await tx.fetch(f"SELECT count(*) FROM {ORDERS} WHERE order_no = %s", [order_no])
    return int(rows[0][0])


async def demo(store: alkstore_trio.Store) -> None:
    async with store.transaction() as tx:
        await tx.execute(f"CREATE TABLE {ORDERS} (order_no text PRIMARY KEY, item text NOT NULL)")

    emails = store.queue("emails")
    async with store.open_wake_listener(emails) as wakes:
        # Committed: the row and the job are there, and the queue was woken.
        await place_order(store, "A-1001", "teapot", in_stock=True)
        assert await wakes.wait(timeout_s=10) == {"emails"}
        assert await count_orders(store, "A-1001") == 1
        print("order A-1001 placed; the emails queue was woken")

        # Rolled back: neither the row nor the job exists, and nobody was woken.
        try:
            await place_order(store, "A-1002", "samovar", in_stock=False)
        except OutOfStock as exc:
            print("rolled back:", exc)
        assert await count_orders(store, "A-1002") == 0
        assert await wakes.wait(timeout_s=0.5) == frozenset()
        print("order A-1002 left no row, no job and no wake")

    handles = await emails.claim_batch("mailer-1", 10)
    payloads = [handle.job.payload for handle in handles]
    print("the mailer finds:", [payload.decode() for payload in payloads])
    assert payloads == [b"confirm A-1001"]
    assert await emails.ack_batch([handle.id for handle in handles]) == 1


async def main() -> None:
    # migrate="apply" creates the schema; an application would run
    # `alkstore-trio migrate` at deploy time instead.
    async with alkstore_trio.open_store(DSN, schema=SCHEMA, migrate="apply") as store:
        try:
            await demo(store)
        finally:
            with trio.CancelScope(shield=True):
                async with store.transaction() as tx:
                    await tx.execute(f'DROP SCHEMA "{SCHEMA}" CASCADE')


if __name__ == "__main__":
    trio.run(main)
