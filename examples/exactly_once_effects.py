"""Exactly-once effects for database work (Q19.6, R16) and progress (Q19.7) on PostgreSQL.

An invoicing worker: each job inserts one invoice row. The handler writes the row in
``current_job().transaction()``, whose last statement before COMMIT is the job's ack,
fenced by its claim token: the row and the ack commit together or not at all. A worker
whose claim was lost meanwhile (its lease lapsed and another worker took the job, or
the job was cancelled) gets ``ClaimLost`` and its row never lands, so each job leaves
exactly one invoice, whoever finished it.

The end of the program shows that fence by hand: a claim whose job was cancelled tries
to complete in a transaction after inserting its row; the completion is refused, and the
row rolls back with it.

It needs a PostgreSQL server: set ``ALKSTORE_DSN`` (default
``postgresql://postgres@127.0.0.1:5432/test``) and run
``python examples/exactly_once_effects.py``. It works in a schema of its own, created at
the start and dropped at the end.
"""

import os

import trio

import alkstore_trio
from alkstore_trio import ClaimLost, QueueOpts, Worker, current_job

DSN = os.environ.get("ALKSTORE_DSN", "postgresql://postgres@127.0.0.1:5432/test")
SCHEMA = f"example_invoices_{os.getpid()}"
INVOICES = f'"{SCHEMA}".invoices'


async def make_invoice(job: alkstore_trio.Job) -> None:
    """The handler: the invoice row and the job's ack in one transaction."""
    context = current_job()
    context.set_progress("rendering")  # shown by get_job after the next heartbeat
    async with context.transaction() as tx:
        await tx.execute(
            f"INSERT INTO {INVOICES} (job_id, customer) VALUES (%s, %s)",
            [job.id, job.payload.decode()],
        )
        tx.set_result(f"invoice for {job.payload.decode()}".encode())
    # Here the job is completed; a return value would be ignored.


async def count_invoices(store: alkstore_trio.Store) -> dict[int, int]:
    async with store.transaction() as tx:
        rows = await tx.fetch(f"SELECT job_id, count(*) FROM {INVOICES} GROUP BY job_id")
    return {int(job_id): int(n) for job_id, n in rows}


async def demo(store: alkstore_trio.Store) -> None:
    async with store.transaction() as tx:
        await tx.execute(f"CREATE TABLE {INVOICES} (job_id bigint NOT NULL, customer text)")
    invoices = store.queue("invoices", QueueOpts(keep_completed_s=3600))
    ids = await invoices.enqueue_many([b"ada", b"grace", b"edsger"])

    worker = Worker(store, {invoices: make_invoice}, poll_interval_s=0.5)
    with worker.events() as events:
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            completed = 0
            with trio.fail_after(30):
                async for event in events:
                    completed += event.kind == "completed_in_tx"
                    if completed == len(ids):
                        break
            worker.stop()
    assert await count_invoices(store) == dict.fromkeys(ids, 1)
    for job_id in ids:
        job = await invoices.get_job(job_id)
        assert job is not None
        assert job.state == "completed"
        print(f"job {job_id}: {job.state}, result {job.result!r}")

    # The fence by hand: a claim whose job was cancelled meanwhile.
    late = await invoices.enqueue(b"barbara")
    handle = await invoices.claim_one("stale-worker")
    assert handle is not None
    assert await invoices.cancel(late)  # processing -> cancelling: the claim is no longer valid
    try:
        async with store.transaction() as tx:
            await tx.execute(
                f"INSERT INTO {INVOICES} (job_id, customer) VALUES (%s, %s)", [late, "barbara"]
            )
            await tx.complete(handle)
    except ClaimLost as exc:
        print("refused:", exc)
    assert late not in await count_invoices(store)
    print("the stale claim's invoice row rolled back with its completion")


async def main() -> None:
    async with alkstore_trio.open_store(DSN, schema=SCHEMA, migrate="apply") as store:
        try:
            await demo(store)
        finally:
            with trio.CancelScope(shield=True):
                async with store.transaction() as tx:
                    await tx.execute(f'DROP SCHEMA "{SCHEMA}" CASCADE')


if __name__ == "__main__":
    trio.run(main)
