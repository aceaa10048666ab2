"""Producers (Q20): enqueue from an application that is not a trio program, in its own
transaction, on its own psycopg connection; and from SQL, in a trigger.

Three producers place orders, each inserting into its own ``orders`` table and enqueueing
a confirmation email in the same database transaction:

- a sync "web view" (what a Django or Flask view does) with ``Producer.enqueue`` on a
  ``psycopg.Connection``: one order commits, one fails half-way and rolls back;
- an asyncio "endpoint" (FastAPI) with ``Producer.aenqueue`` on a
  ``psycopg.AsyncConnection``;
- a trigger on the ``orders`` table that calls the schema's ``enqueue()`` function, so
  every order inserted by any client, in any language, gets its job.

A trio worker side watches the queue's wakes and claims what was committed. The sync and
asyncio producers run in threads of their own (as a web server's would), never in the
trio loop.

It needs a PostgreSQL server: set ``ALKSTORE_DSN`` (default
``postgresql://postgres@127.0.0.1:5432/test``) and run
``python examples/postgres_producer.py``. It works in a schema of its own (queue tables
and the ``orders`` table), created at the start and dropped at the end.
"""

import asyncio
import os

import psycopg
import trio
from psycopg import sql

import alkstore_trio
from alkstore_trio.postgres import Producer

DSN = os.environ.get("ALKSTORE_DSN", "postgresql://postgres@127.0.0.1:5432/test")
# A schema of this run's own (the pid keeps two runs apart), dropped at the end.
SCHEMA = f"example_producer_{os.getpid()}"
ORDERS = sql.Identifier(SCHEMA, "orders")
INSERT_ORDER = sql.SQL("INSERT INTO {} (order_no, item) VALUES (%s, %s)").format(ORDERS)

# One producer per application, with the stamps its queues' workers expect.
producer = Producer(SCHEMA, queues={"emails": alkstore_trio.QueueOpts(max_attempts=5)})


class OutOfStock(Exception):
    pass


def view_place_order(order_no: str, item: str, *, in_stock: bool) -> None:
    """A sync web view: its own connection, its own transaction."""
    with psycopg.connect(DSN) as conn:  # commits at the end of the block, or rolls back
        conn.execute(INSERT_ORDER, [order_no, item])
        producer.enqueue(conn, "emails", f"confirm {order_no}".encode())
        if not in_stock:
            raise OutOfStock(f"{item} is out of stock")


async def endpoint_place_order(order_no: str, item: str) -> None:
    """An asyncio endpoint (FastAPI): the same on a psycopg.AsyncConnection."""
    async with await psycopg.AsyncConnection.connect(DSN) as conn:
        await conn.execute(INSERT_ORDER, [order_no, item])
        await producer.aenqueue(conn, "emails", f"confirm {order_no}".encode(), priority=1)


def install_trigger() -> None:
    """Every order any client inserts gets a job, from SQL, in the inserting transaction."""
    function = sql.Identifier(SCHEMA, "order_placed")
    enqueue = sql.Identifier(SCHEMA, "enqueue")
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE TABLE {} (order_no text PRIMARY KEY, item text NOT NULL)").format(
                ORDERS
            )
        )
        conn.execute(
            sql.SQL(
                "CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "PERFORM {enqueue}('invoices', pg_catalog.convert_to('invoice ' || NEW.order_no, "
                "'UTF8'), max_attempts => 5, unique_key => 'invoice-' || NEW.order_no); "
                "RETURN NEW; END $$"
            ).format(function=function, enqueue=enqueue)
        )
        conn.execute(
            sql.SQL(
                "CREATE TRIGGER order_placed AFTER INSERT ON {} FOR EACH ROW EXECUTE FUNCTION {}()"
            ).format(ORDERS, function)
        )


async def drain(store: alkstore_trio.Store, queue: str) -> list[str]:
    handles = await store.queue(queue).claim_batch("worker-1", 10)
    assert await store.queue(queue).ack_batch([handle.id for handle in handles]) == len(handles)
    assert all(handle.job.max_attempts == 5 for handle in handles)
    return [handle.job.payload.decode() for handle in handles]


async def woken(wakes: alkstore_trio.WakeListener) -> set[str]:
    """The queues woken by one commit (its notifications may arrive in more than one read)."""
    seen: set[str] = set()
    with trio.fail_after(10):
        while seen != {"emails", "invoices"}:
            seen |= await wakes.wait(timeout_s=10)
    return seen


async def demo(store: alkstore_trio.Store) -> None:
    await trio.to_thread.run_sync(install_trigger)
    async with store.open_wake_listener(["emails", "invoices"]) as wakes:
        await trio.to_thread.run_sync(lambda: view_place_order("P-1", "teapot", in_stock=True))
        await woken(wakes)
        print("view: order P-1 committed; emails and invoices woken")

        try:
            await trio.to_thread.run_sync(
                lambda: view_place_order("P-2", "samovar", in_stock=False)
            )
        except OutOfStock as exc:
            print("view: order P-2 rolled back:", exc)
        # The rollback enqueued nothing and woke nobody (no job of its shows up below).

        await trio.to_thread.run_sync(asyncio.run, endpoint_place_order("P-3", "kettle"))
        await woken(wakes)
        print("endpoint: order P-3 committed; emails and invoices woken")

    emails, invoices = await drain(store, "emails"), await drain(store, "invoices")
    print("the mailer finds:", emails)
    print("the invoicer finds:", invoices)
    assert emails == ["confirm P-3", "confirm P-1"]  # P-3 has priority 1
    assert invoices == ["invoice P-1", "invoice P-3"]


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
